//! The listening socket (Unix or TCP) and the accepted streams, as mio sources.
//!
//! A Unix socket path is taken over if a stale file is there (a previous instance that was
//! killed cannot remove it) and made world-writable, so a balancer running as another user can
//! connect; the file is removed again when the listener is closed.

use super::config::Endpoint;
use anyhow::{Context, Result};
use mio::event::Source;
use mio::{Interest, Registry, Token};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::path::PathBuf;
use tracing::info;

pub enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener, PathBuf),
}

impl Listener {
    pub fn bind(endpoint: &Endpoint) -> Result<Listener> {
        match endpoint {
            Endpoint::Tcp(addr) => Ok(Listener::Tcp(
                mio::net::TcpListener::bind(*addr)
                    .with_context(|| format!("cannot listen on {addr}"))?,
            )),
            Endpoint::Unix(path) => {
                match std::fs::remove_file(path) {
                    Ok(()) => info!(path = %path.display(), "removed a stale socket file"),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("cannot remove stale socket {}", path.display())
                        })
                    }
                }
                let l = mio::net::UnixListener::bind(path)
                    .with_context(|| format!("cannot listen on {}", path.display()))?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
                    .with_context(|| format!("cannot chmod {}", path.display()))?;
                Ok(Listener::Unix(l, path.clone()))
            }
        }
    }

    /// The next pending connection, if any (non-blocking); [`Stream::set_up`] sets its
    /// options.
    pub fn accept(&self) -> io::Result<Stream> {
        Ok(match self {
            Listener::Tcp(l) => Stream::Tcp(l.accept()?.0),
            Listener::Unix(l, _) => Stream::Unix(l.accept()?.0),
        })
    }

    /// Stops listening; a Unix socket's file is removed so that no client connects to it.
    pub fn close(self, registry: &Registry) {
        let _ = match self {
            Listener::Tcp(mut l) => registry.deregister(&mut l),
            Listener::Unix(mut l, path) => {
                let _ = std::fs::remove_file(path);
                registry.deregister(&mut l)
            }
        };
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, i),
            Listener::Unix(l, _) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.reregister(r, t, i),
            Listener::Unix(l, _) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l, _) => l.deregister(r),
        }
    }
}

/// The kernel's send buffer of an accepted connection. Answers are ~100 bytes and a client
/// takes each before it sends the next request, so this never holds one back; a client that
/// pipelines and does not read fills it after ~1,000 answers, and the server pauses that
/// connection there instead of producing answers for the megabytes of buffer TCP would grow
/// (`stack attack`'s flood: the server's loop busy the whole attack without it).
pub const SEND_BUFFER_BYTES: usize = 32 * 1024;

/// Sets SO_SNDBUF (the kernel doubles the value for its bookkeeping).
fn set_send_buffer(s: &Stream, bytes: usize) -> io::Result<()> {
    match s {
        Stream::Tcp(s) => socket2::SockRef::from(s).set_send_buffer_size(bytes),
        Stream::Unix(s) => socket2::SockRef::from(s).set_send_buffer_size(bytes),
    }
}

/// An accepted connection.
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    /// The options of an accepted connection: no Nagle delay (answers are single small writes:
    /// send them at once) and a bounded kernel send buffer ([`SEND_BUFFER_BYTES`]).
    pub fn set_up(&self) -> io::Result<()> {
        if let Stream::Tcp(s) = self {
            s.set_nodelay(true)?;
        }
        set_send_buffer(self, SEND_BUFFER_BYTES)
    }

    /// Ends the sending direction (the client reads EOF after the last answer).
    pub fn shutdown_write(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

/// The soft and hard limits on open files (`RLIMIT_NOFILE`).
pub fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit, which `r` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on 64-bit Linux, narrower elsewhere.
    #[allow(clippy::unnecessary_cast)]
    Ok((r.rlim_cur as u64, r.rlim_max as u64))
}

/// Sets the limits on open files (a soft limit up to the hard one needs no privilege).
pub fn set_open_files_limit(soft: u64, hard: u64) -> io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads `r`.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
