//! Asking the stack how it is: `GET /ready` by TCP or an API's socket (raw sockets: ureq speaks
//! no Unix socket), HAProxy's `show stat`, and [`sample`], all that (and memory) at one moment.

use super::cgroup::Cgroup;
use crate::prelude::*;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

pub const READY: &[u8] = b"GET /ready HTTP/1.1\r\nHost: xtask\r\nConnection: close\r\n\r\n";

/// A probe's HTTP status, or why none came (`empty`: closed without one; else the I/O error kind).
pub type Probe = Result<u16, String>;

/// Ready: a 2xx status (the contest's rule for `/ready`; ours answer 200).
pub fn ok(p: &Probe) -> bool {
    matches!(p, Ok(200..=299))
}

/// The status of the answer to `request` on a new connection (its read timeout set).
pub fn exchange(connected: std::io::Result<impl Read + Write>, request: &[u8]) -> Probe {
    let failed = |e: std::io::Error| format!("{:?}", e.kind());
    let stream = connected.and_then(|mut s| s.write_all(request).map(|()| s)).map_err(failed)?;
    // "HTTP/1.1 200 OK", within 64 bytes.
    let mut line = String::new();
    BufReader::new(stream.take(64)).read_line(&mut line).map_err(failed)?;
    let code = line.strip_prefix("HTTP/1.1 ").or(line.strip_prefix("HTTP/1.0 "));
    code.and_then(|s| s.get(..3)?.parse().ok()).ok_or("empty".into())
}

/// `GET /ready` on the loopback port.
pub fn ready_tcp(port: u16, t: Duration) -> Probe {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let connected = TcpStream::connect_timeout(&addr, t);
    exchange(connected.and_then(|s| s.set_read_timeout(Some(t)).map(|()| s)), READY)
}

/// `GET /ready` on an API's own Unix socket, bypassing HAProxy.
pub fn ready_unix(path: &Path, t: Duration) -> Probe {
    exchange(UnixStream::connect(path).and_then(|s| s.set_read_timeout(Some(t)).map(|()| s)), READY)
}

/// Polls `probe` every 100 ms until it answers 2xx; fails after `limit` with the last answer.
pub fn wait_ready(what: &str, limit: Duration, probe: impl Fn() -> Probe) -> Result<()> {
    util::poll(&format!("{what}: /ready 2xx"), limit, Duration::from_millis(100), || {
        let p = probe();
        Ok(if ok(&p) { Ok(()) } else { Err(p.map_or_else(|e| e, |s| s.to_string())) })
    })
}

/// The columns of `show stat` the harness reads (counters are empty where they do not apply).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct StatRow {
    pub pxname: String,
    pub svname: String,
    pub qcur: Option<u64>,
    pub scur: Option<u64>,
    pub stot: Option<u64>,
    pub status: String,
}

/// HAProxy's health checks: `UP` in rotation; `UP 1/3` (failing) and `OPEN` neither up nor out.
impl StatRow {
    pub fn up(&self) -> bool {
        self.status == "UP"
    }
    /// `DOWN`, `DOWN 1/2` (passing checks again, not yet in rotation), `MAINT`, `NOLB`, `DRAIN`.
    pub fn out(&self) -> bool {
        ["DOWN", "MAINT", "NOLB", "DRAIN"].iter().any(|p| self.status.starts_with(p))
    }
}

/// Parses `show stat` output: a header line `# pxname,svname,...` then one CSV row per line.
pub fn parse_stat(text: &str) -> Result<Vec<StatRow>> {
    let body = text.strip_prefix("# ").context("`show stat` does not start with its header")?;
    let mut r = csv::ReaderBuilder::new().flexible(true).from_reader(body.as_bytes());
    r.deserialize().map(|row| row.context("parsing a `show stat` row")).collect()
}

pub fn haproxy_stat(sock: &Path) -> Result<Vec<StatRow>> {
    let mut s = UnixStream::connect(sock).context(format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    s.write_all(b"show stat\n")?;
    parse_stat(&std::io::read_to_string(s)?)
}

/// The stack's samples, every so often on a thread of their own until stopped.
pub type Monitor = util::Background<Vec<Sample>>;

/// The stack at one moment (Unix ms): HAProxy's rows, each API's `/ready`, port 9999, memory MB.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Sample {
    pub t: u64,
    pub stat: Vec<StatRow>,
    pub haproxy_error: Option<String>,
    pub ready: BTreeMap<String, Probe>,
    pub probe: Option<Probe>,
    pub mem_mb: BTreeMap<String, f64>,
}

impl Sample {
    /// The backend's servers (not its `BACKEND` row).
    pub fn servers(&self) -> impl Iterator<Item = &StatRow> {
        self.stat.iter().filter(|r| r.pxname == "apis" && r.svname != "BACKEND")
    }
    pub fn server(&self, name: &str) -> Option<&StatRow> {
        self.servers().find(|r| r.svname == name)
    }
}

/// One sample: HAProxy's rows and each API's `/ready` by `sockets`, port 9999 if `probe`, memory.
pub fn sample(sockets: &Path, apis: &[String], probe: bool, memory: &[(String, Cgroup)]) -> Sample {
    let (t, ms) = (util::now_ms(), Duration::from_millis);
    let stat = haproxy_stat(&sockets.join("haproxy.sock"));
    let haproxy_error = stat.as_ref().err().map(|e| format!("{e:#}"));
    let stat = stat.unwrap_or_default();
    let ready = |a: &String| (a.clone(), ready_unix(&sockets.join(format!("{a}.sock")), ms(300)));
    let mem = |(name, cg): &(String, Cgroup)| Some((name.clone(), util::mb(cg.memory_usage()?)));
    let (ready, mem_mb) =
        (apis.iter().map(ready).collect(), memory.iter().filter_map(mem).collect());
    Sample { t, stat, haproxy_error, ready, probe: probe.then(|| ready_tcp(9999, ms(500))), mem_mb }
}
