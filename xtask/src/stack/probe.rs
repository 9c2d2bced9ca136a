//! Asking the stack how it is: `GET /ready` through HAProxy (TCP, a new connection each time) or
//! on an API's own Unix socket in the shared volume, and HAProxy's `show stat` CSV from its
//! stats socket, parsed with serde into typed rows and server states. An external project
//! (another entry's compose) is asked through port 9999 only: `GET /ready`, or, where it has no
//! such route, a scored `POST /fraud-score`. Readiness is never read from a log.

use crate::util;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

const READY: &[u8] = b"GET /ready HTTP/1.1\r\nHost: xtask\r\nConnection: close\r\n\r\n";

/// The contest documentation's first worked example (SPEC.md: 5 legit neighbours, approved).
const SAMPLE: &str = r#"{"id":"tx-xtask-ready","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;

/// `POST /fraud-score` with [`SAMPLE`], as k6 sends it (JSON content type, keep-alive off).
fn score_request() -> Vec<u8> {
    let head = "POST /fraud-score HTTP/1.1\r\nHost: xtask\r\nContent-Type: application/json\r\n";
    format!("{head}Content-Length: {}\r\nConnection: close\r\n\r\n{SAMPLE}", SAMPLE.len())
        .into_bytes()
}

/// What a probe got: an HTTP status, or why there was none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Probe {
    Status(u16),
    Refused,
    /// No socket file (the API has not created it yet).
    Absent,
    Timeout,
    Reset,
    /// The connection closed without a status line.
    Empty,
    Io(String),
}

impl Probe {
    /// Ready: a 2xx status (the contest's rule for `/ready`; ours answer 200).
    pub fn ok(&self) -> bool {
        matches!(self, Probe::Status(200..=299))
    }

    /// A status that says the route is not there or not for this method (4xx), as opposed to
    /// "not yet" (5xx) or no answer at all.
    fn no_such_route(&self) -> bool {
        matches!(self, Probe::Status(400..=499))
    }

    fn of_error(e: &std::io::Error) -> Probe {
        use std::io::ErrorKind::*;
        match e.kind() {
            ConnectionRefused => Probe::Refused,
            NotFound => Probe::Absent,
            TimedOut | WouldBlock => Probe::Timeout,
            ConnectionReset => Probe::Reset,
            k => Probe::Io(format!("{k:?}")),
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Probe::Status(s) => write!(f, "{s}"),
            Probe::Io(k) => write!(f, "{k}"),
            other => write!(f, "{}", format!("{other:?}").to_lowercase()),
        }
    }
}

/// The status of the answer `stream` gives to `request`.
fn exchange(stream: &mut (impl Read + Write), request: &[u8]) -> Probe {
    if let Err(e) = stream.write_all(request) {
        return Probe::of_error(&e);
    }
    let (mut buf, mut n) = ([0u8; 64], 0);
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match stream.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Probe::of_error(&e),
        }
    }
    // "HTTP/1.1 200 OK"
    let line = std::str::from_utf8(&buf[..n]).unwrap_or("");
    let code =
        line.strip_prefix("HTTP/1.1 ").or(line.strip_prefix("HTTP/1.0 ")).and_then(|s| s.get(..3));
    code.and_then(|c| c.parse().ok()).map_or(Probe::Empty, Probe::Status)
}

/// `request` to 127.0.0.1:`port` on a new connection.
fn request_tcp(port: u16, request: &[u8], timeout: Duration) -> Probe {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match TcpStream::connect_timeout(&addr, timeout) {
        Ok(mut s) => {
            let _ = (s.set_read_timeout(Some(timeout)), s.set_write_timeout(Some(timeout)));
            exchange(&mut s, request)
        }
        Err(e) => Probe::of_error(&e),
    }
}

/// `GET /ready` on 127.0.0.1:`port`, on a new connection.
pub fn ready_tcp(port: u16, timeout: Duration) -> Probe {
    request_tcp(port, READY, timeout)
}

/// `GET /ready` on a Unix socket (an API's own, bypassing HAProxy).
pub fn ready_unix(path: &Path, timeout: Duration) -> Probe {
    match UnixStream::connect(path) {
        Ok(mut s) => {
            let _ = (s.set_read_timeout(Some(timeout)), s.set_write_timeout(Some(timeout)));
            exchange(&mut s, READY)
        }
        Err(e) => Probe::of_error(&e),
    }
}

/// Readiness of a project we know nothing of but its port: `GET /ready` (any 2xx), and when
/// that route is missing (a 4xx), `POST /fraud-score` with the contest's sample transaction,
/// ready on 200. A 5xx or no answer is "not yet", as it comes.
pub fn ready_or_score(port: u16, timeout: Duration) -> Result<(), String> {
    let ready = ready_tcp(port, timeout);
    if ready.ok() {
        return Ok(());
    }
    if !ready.no_such_route() {
        return Err(ready.to_string());
    }
    match request_tcp(port, &score_request(), timeout) {
        Probe::Status(200) => Ok(()),
        score => Err(format!("/ready {ready}, POST /fraud-score {score}")),
    }
}

/// Polls `probe` every 100 ms until it answers 2xx; fails after `limit` with the last answer.
pub fn wait_ready(what: &str, limit: Duration, probe: impl Fn() -> Probe) -> Result<()> {
    let what = format!("{what}: /ready 2xx");
    util::poll(&what, limit, Duration::from_millis(100), || {
        let p = probe();
        Ok(if p.ok() { Ok(()) } else { Err(p.to_string()) })
    })
}

/// A counter of `show stat`; empty where it does not apply to the row (e.g. `qcur` of a frontend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        Ok(Count(String::deserialize(d)?.trim().parse().ok()))
    }
}

impl Count {
    pub fn or0(self) -> u64 {
        self.0.unwrap_or(0)
    }
}

/// HAProxy's state of a server (`status` of `show stat`), as its health checks see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum State {
    /// `UP`: in rotation.
    Up,
    /// `UP 1/3`: still in rotation, failing checks.
    GoingDown(String),
    /// `DOWN`, `DOWN 1/2` (passing checks again, not yet in rotation), `MAINT`, `NOLB`, ...:
    /// out of rotation.
    Out(String),
    /// What frontends and backends have (`OPEN`, `UP` of a backend is [`State::Up`]).
    Other(String),
}

impl From<String> for State {
    fn from(s: String) -> State {
        match s.as_str() {
            "UP" => State::Up,
            _ if s.starts_with("UP ") => State::GoingDown(s),
            _ if ["DOWN", "MAINT", "NOLB", "DRAIN"].iter().any(|p| s.starts_with(p)) => {
                State::Out(s)
            }
            _ => State::Other(s),
        }
    }
}

impl From<State> for String {
    fn from(s: State) -> String {
        match s {
            State::Up => "UP".into(),
            State::GoingDown(s) | State::Out(s) | State::Other(s) => s,
        }
    }
}

/// One row of HAProxy's `show stat` (a proxy's frontend/backend, or one server).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct StatRow {
    pub pxname: String,
    pub svname: String,
    pub qcur: Count,
    pub scur: Count,
    pub stot: Count,
    pub econ: Count,
    pub eresp: Count,
    pub wretr: Count,
    pub wredis: Count,
    pub status: State,
    #[serde(default)]
    pub check_status: String,
}

/// Parses `show stat` output: a header line `# pxname,svname,...` then one CSV row per line.
pub fn parse_stat(text: &str) -> Result<Vec<StatRow>> {
    let body =
        text.strip_prefix("# ").context("`show stat` output does not start with its header")?;
    let mut r = csv::ReaderBuilder::new().flexible(true).from_reader(body.as_bytes());
    r.deserialize().map(|row| row.context("parsing a `show stat` row")).collect()
}

/// `show stat` on HAProxy's stats socket.
pub fn haproxy_stat(sock: &Path) -> Result<Vec<StatRow>> {
    let mut s =
        UnixStream::connect(sock).with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    s.write_all(b"show stat\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    parse_stat(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Three rows of HAProxy 2.6's `show stat` (columns after check_status cut).
    const STAT: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,\n\
fraud,FRONTEND,,,3,120,2000,5210,1,2,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,\n\
apis,api1,0,0,1,60,,2605,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,40,0,,1,3,1,,2605,,2,0,,60,L7OK,\n\
apis,api2,0,0,0,0,,12,1,2,,0,,3,0,0,1,DOWN 1/2,1,1,0,1,1,2,2,,1,3,2,,12,,2,0,,9,L4CON,\n";

    #[test]
    fn parses_show_stat_into_states() {
        let rows = parse_stat(STAT).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].svname.as_str(), rows[0].scur, rows[0].qcur),
            ("FRONTEND", Count(Some(3)), Count(None))
        );
        assert_eq!(rows[0].status, State::Other("OPEN".into()));
        assert_eq!((rows[1].status.clone(), rows[1].stot), (State::Up, Count(Some(2605))));
        assert_eq!(rows[2].status, State::Out("DOWN 1/2".into()));
        assert_eq!((rows[2].econ, rows[2].check_status.as_str()), (Count(Some(3)), "L4CON"));
        assert_eq!(State::from("UP 1/3".to_string()), State::GoingDown("UP 1/3".into()));
        assert_eq!(State::from("MAINT".to_string()), State::Out("MAINT".into()));
        assert_eq!(String::from(State::Up), "UP");
        assert!(parse_stat("no header").is_err());
    }

    #[test]
    fn reads_the_status_line() {
        struct Canned(&'static [u8]);
        impl Read for Canned {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0.read(buf)
            }
        }
        impl Write for Canned {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let status = |answer| exchange(&mut Canned(answer), READY);
        assert_eq!(status(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"), Probe::Status(200));
        assert!(!status(b"HTTP/1.1 503 Service Unavailable\r\n").ok());
        assert_eq!(status(b""), Probe::Empty);
        assert!(status(b"HTTP/1.1 204 No Content\r\n\r\n").ok());
    }

    #[test]
    fn which_answers_mean_ready() {
        assert!(Probe::Status(200).ok() && Probe::Status(204).ok());
        assert!(!Probe::Status(503).ok() && !Probe::Refused.ok());
        assert!(Probe::Status(404).no_such_route() && Probe::Status(405).no_such_route());
        assert!(!Probe::Status(502).no_such_route() && !Probe::Timeout.no_such_route());
        assert_eq!(
            (Probe::Status(503).to_string(), Probe::Refused.to_string()),
            ("503".into(), "refused".into())
        );
        let p = ready_unix(Path::new("/nonexistent/x.sock"), Duration::from_millis(10));
        assert_eq!(p, Probe::Absent);
    }

    #[test]
    fn the_sample_request_is_well_formed() {
        let r = String::from_utf8(score_request()).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("POST /fraud-score HTTP/1.1\r\n"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["merchant"]["mcc"], "5411");
        assert!(v["last_transaction"].is_null());
    }
}
