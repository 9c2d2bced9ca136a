//! What a server is configured with: where it listens ([`Endpoint`]) and how far it lets a client
//! go ([`Limits`]). The command lines that set them are `local_runner::serve::ServeArgs` and
//! `front serve`'s.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Transport limits (the table in the `serve` module docs says what happens at each; the
/// defaults and why are in docs/HOSTILE.md).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Deadline for a complete request head, counted from when the connection starts waiting
    /// for one (so it also closes idle keep-alive connections).
    pub header_timeout: Duration,
    /// Deadline for a complete body after its head.
    pub body_timeout: Duration,
    /// Deadline for the client to take answers that wait to be written, counted from when they
    /// started waiting, whatever trickles out meanwhile (slow readers).
    pub send_timeout: Duration,
    /// Connections served at once. At the cap a new connection takes the place of the one that
    /// has been unproductive longest (no answer delivered, or none for a while); when none
    /// qualifies it gets 503 and is closed.
    pub max_connections: usize,
    /// Bytes of answers one connection may have waiting to be written; parsing its pipelined
    /// requests stops there and goes on as the client takes them.
    pub max_unsent_bytes: usize,
    /// Requests of one connection answered per turn of the event loop (each turn also reads it
    /// at most once), so that one client cannot keep the loop from the others.
    pub max_requests_per_turn: usize,
    /// Bytes all connections together may hold (unfinished requests, pipelined input not read
    /// yet, decoded bodies, unsent answers). Beyond it, new connections and connections that
    /// need more get 503 and are closed.
    pub memory_budget: usize,
    /// Connections turned away with a 503 that may linger at once (reading what their client
    /// still sends, so that the 503 is not lost to a reset); beyond, they are closed at once.
    /// Lowered at start to what the open-files limit leaves (`server::fit_descriptors`).
    pub max_shedding: usize,
    /// How long in-flight requests may take after SIGTERM.
    pub drain: Duration,
    /// After each event, how long the loop keeps polling without sleeping before it blocks in
    /// `epoll_wait` again (zero: it blocks at once). A request that arrives inside the window
    /// is read without a wake-up from sleep; the window's CPU counts against the container's
    /// quota, so it must stay short of it.
    pub spin: Duration,
}

impl Default for Limits {
    /// The defaults of `local-runner serve`.
    fn default() -> Limits {
        Limits {
            max_body_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_unsent_bytes: 16 * 1024,
            max_requests_per_turn: 16,
            memory_budget: 16 << 20,
            max_shedding: super::server::MAX_SHEDDING,
            drain: Duration::from_secs(5),
            spin: Duration::ZERO,
        }
    }
}

/// Where to listen, parsed from `--listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::str::FromStr for Endpoint {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Endpoint> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                bail!("--listen unix: needs a path, e.g. unix:/sock/api1.sock");
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if s.starts_with('/') {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        // Numeric addresses only: the static glibc binary should not go through NSS.
        s.parse::<SocketAddr>().map(Endpoint::Tcp).with_context(|| {
            format!("--listen {s:?}: expected unix:/path or IP:PORT (e.g. 0.0.0.0:8080)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            "unix:/sock/a.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/sock/a.sock".into())
        );
        assert_eq!(
            "/tmp/x.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/tmp/x.sock".into())
        );
        assert_eq!(
            "0.0.0.0:8080".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("0.0.0.0:8080".parse().unwrap())
        );
        assert!("unix:".parse::<Endpoint>().is_err());
        assert!("localhost:80".parse::<Endpoint>().is_err());
    }
}
