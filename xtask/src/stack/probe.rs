//! Asking the stack how it is: `GET /ready` through HAProxy (TCP, a new connection each time) or
//! on an API's own Unix socket in the shared volume, and HAProxy's `show stat` CSV from its
//! stats socket, parsed with serde. An external project (another entry's compose) is asked
//! through port 9999 only: `GET /ready`, or, where it has no such route, a scored
//! `POST /fraud-score`. Readiness is never read from a log.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

const READY: &[u8] = b"GET /ready HTTP/1.1\r\nHost: xtask\r\nConnection: close\r\n\r\n";

/// The contest documentation's first worked example (SPEC.md: 5 legit neighbours, approved).
const SAMPLE: &str = r#"{"id":"tx-xtask-ready","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;

/// `POST /fraud-score` with [`SAMPLE`], as k6 sends it (JSON content type, keep-alive off).
fn score_request() -> Vec<u8> {
    format!(
        "POST /fraud-score HTTP/1.1\r\nHost: xtask\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{SAMPLE}",
        SAMPLE.len()
    )
    .into_bytes()
}

/// What a `/ready` probe got: the HTTP status, or why there was none (`refused`, `absent`,
/// `timeout`, ...). Serialized as text ("200", "refused").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe(pub String);

impl Probe {
    /// Ready: a 2xx status (the contest's rule for `/ready`; ours answer 200).
    pub fn ok(&self) -> bool {
        self.0.len() == 3 && self.0.starts_with('2')
    }

    /// An HTTP status that says the route is not there or not for this method (4xx), as opposed
    /// to "not yet" (5xx) or no answer at all.
    fn no_such_route(&self) -> bool {
        self.0.len() == 3 && self.0.starts_with('4')
    }
}

fn status_of(stream: &mut impl Read) -> Probe {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < buf.len() {
        match stream.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Probe(error_name(&e)),
        }
        if buf[..n].contains(&b'\n') {
            break;
        }
    }
    // "HTTP/1.1 200 OK"
    match std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.strip_prefix("HTTP/1.1 ").or(s.strip_prefix("HTTP/1.0 ")))
        .and_then(|s| s.get(..3))
    {
        Some(code) => Probe(code.to_string()),
        None => Probe("empty".into()),
    }
}

fn error_name(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "refused".into(),
        NotFound => "absent".into(),
        TimedOut | WouldBlock => "timeout".into(),
        ConnectionReset => "reset".into(),
        k => format!("{k:?}"),
    }
}

/// `GET /ready` on 127.0.0.1:`port`, on a new connection.
pub fn ready_tcp(port: u16, timeout: Duration) -> Probe {
    request_tcp(port, READY, timeout)
}

/// `request` to 127.0.0.1:`port` on a new connection; the status of the answer.
fn request_tcp(port: u16, request: &[u8], timeout: Duration) -> Probe {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return Probe(error_name(&e)),
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if let Err(e) = s.write_all(request) {
        return Probe(error_name(&e));
    }
    status_of(&mut s)
}

/// Readiness of a project we know nothing of but its port: `GET /ready` (any 2xx), and when
/// that route is missing (a 4xx), `POST /fraud-score` with the contest's sample transaction,
/// ready on 200. A 5xx or no answer is "not yet", as it comes.
pub fn ready_or_score(port: u16, timeout: Duration) -> Probe {
    let p = ready_tcp(port, timeout);
    if !p.no_such_route() {
        return p;
    }
    match request_tcp(port, &score_request(), timeout) {
        s if s.0 == "200" => s,
        s => Probe(format!("/ready {}, POST /fraud-score {}", p.0, s.0)),
    }
}

/// `GET /ready` on a Unix socket (an API's own, bypassing HAProxy).
pub fn ready_unix(path: &Path, timeout: Duration) -> Probe {
    if !path.exists() {
        return Probe("absent".into());
    }
    let mut s = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => return Probe(error_name(&e)),
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if let Err(e) = s.write_all(READY) {
        return Probe(error_name(&e));
    }
    status_of(&mut s)
}

/// Polls `probe` every 100 ms until it answers 2xx; fails after `limit` with the last answer.
pub fn wait_ready(what: &str, limit: Duration, probe: impl Fn() -> Probe) -> Result<Duration> {
    let start = Instant::now();
    loop {
        let p = probe();
        if p.ok() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!(
                "{what}: /ready did not answer 2xx within {limit:?} (last: {})",
                p.0
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A counter of `show stat`; empty where it does not apply to the row (e.g. `qcur` of a frontend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Count(s.trim().parse().ok()))
    }
}

impl Count {
    pub fn or0(self) -> u64 {
        self.0.unwrap_or(0)
    }
}

/// One row of HAProxy's `show stat` (a proxy's frontend/backend, or one server).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
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
    pub status: String,
    #[serde(default)]
    pub check_status: String,
}

/// Parses `show stat` output: a header line `# pxname,svname,...` then one CSV row per line.
pub fn parse_stat(text: &str) -> Result<Vec<StatRow>> {
    let body = text
        .strip_prefix("# ")
        .context("`show stat` output does not start with its header")?;
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(body.as_bytes());
    r.deserialize()
        .map(|row| row.context("parsing a `show stat` row"))
        .collect()
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
apis,api2,0,0,0,0,,12,1,2,,0,,3,0,0,1,DOWN,1,1,0,1,1,2,2,,1,3,2,,12,,2,0,,9,L4CON,\n";

    #[test]
    fn parses_show_stat() {
        let rows = parse_stat(STAT).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].svname, "FRONTEND");
        assert_eq!(rows[0].scur, Count(Some(3)));
        assert_eq!(rows[0].qcur, Count(None));
        assert_eq!(rows[1].status, "UP");
        assert_eq!(rows[1].stot, Count(Some(2605)));
        assert_eq!(rows[2].status, "DOWN");
        assert_eq!(rows[2].econ, Count(Some(3)));
        assert_eq!(rows[2].check_status, "L4CON");
        assert!(parse_stat("no header").is_err());
    }

    #[test]
    fn reads_the_status_line() {
        let mut ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(status_of(&mut ok), Probe("200".into()));
        let mut busy: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n";
        assert!(!status_of(&mut busy).ok());
        let mut nothing: &[u8] = b"";
        assert_eq!(status_of(&mut nothing).0, "empty");
        let mut no_content: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert!(status_of(&mut no_content).ok());
    }

    #[test]
    fn which_answers_mean_ready() {
        let p = |s: &str| Probe(s.into());
        assert!(p("200").ok() && p("204").ok());
        assert!(!p("503").ok() && !p("refused").ok() && !p("2").ok());
        assert!(p("404").no_such_route() && p("405").no_such_route());
        assert!(!p("502").no_such_route() && !p("timeout").no_such_route());
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

    #[test]
    fn a_missing_socket_is_absent() {
        let p = ready_unix(Path::new("/nonexistent/x.sock"), Duration::from_millis(10));
        assert_eq!(p.0, "absent");
    }
}
