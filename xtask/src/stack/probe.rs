//! Asking the stack how it is: `GET /ready` by TCP or an API's socket (raw sockets: ureq speaks
//! no Unix socket), HAProxy's `show stat`, and [`sample`], all that (and memory) at one moment.

use super::cgroup::Cgroup;
use crate::prelude::*;
use crate::util;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

const READY: &[u8] = b"GET /ready HTTP/1.1\r\nHost: xtask\r\nConnection: close\r\n\r\n";

/// A probe's HTTP status, or why none came (`empty`: closed without one; else the I/O error kind).
pub type Probe = Result<u16, String>;

/// Ready: a 2xx status (the contest's rule for `/ready`; ours answer 200).
pub fn ok(p: &Probe) -> bool {
    matches!(p, Ok(200..=299))
}

/// The status of the answer to `request` on a new connection (its read timeout set).
fn exchange(connected: std::io::Result<impl Read + Write>, request: &[u8]) -> Probe {
    let failed = |e: std::io::Error| format!("{:?}", e.kind());
    let mut stream =
        connected.and_then(|mut s| s.write_all(request).map(|()| s)).map_err(failed)?;
    let (mut buf, mut n) = ([0u8; 64], 0);
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match stream.read(&mut buf[n..]).map_err(failed)? {
            0 => break,
            k => n += k,
        }
    }
    // "HTTP/1.1 200 OK"
    let line = std::str::from_utf8(&buf[..n]).unwrap_or("");
    let code = line.strip_prefix("HTTP/1.1 ").or(line.strip_prefix("HTTP/1.0 "));
    code.and_then(|s| s.get(..3)?.parse().ok()).ok_or("empty".into())
}

/// `GET /ready` on the loopback port.
pub fn ready_tcp(port: u16, t: Duration) -> Probe {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    exchange(
        TcpStream::connect_timeout(&addr, t).and_then(|s| s.set_read_timeout(Some(t)).map(|()| s)),
        READY,
    )
}

/// `GET /ready` on an API's own Unix socket, bypassing HAProxy.
pub fn ready_unix(path: &Path, t: Duration) -> Probe {
    exchange(UnixStream::connect(path).and_then(|s| s.set_read_timeout(Some(t)).map(|()| s)), READY)
}

/// What the APIs' `GET /metrics` counted, summed over them (`function::metrics`' names).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Counted {
    pub decisions: u64,
    pub approved: u64,
    pub rejected: u64,
    pub ready: u64,
}

/// `GET /metrics` of each API on its own socket, read with a Prometheus text parser and
/// summed; `None` for an API that serves none (`--metrics off`).
pub fn api_metrics(socket_dir: &Path, apis: &[String]) -> Result<Option<Counted>> {
    let mut sum = Counted::default();
    for api in apis {
        let mut s = UnixStream::connect(socket_dir.join(format!("{api}.sock")))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: xtask\r\nConnection: close\r\n\r\n")?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        if !head.starts_with("HTTP/1.1 200") {
            return Ok(None);
        }
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let scrape =
            prometheus_parse::Scrape::parse(lines).with_context(|| format!("{api}'s /metrics"))?;
        for sample in scrape.samples {
            let n = match sample.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                    v as u64
                }
                _ => continue,
            };
            match sample.metric.as_str() {
                "fraud_decisions_total" => {
                    sum.decisions += n;
                    sum.approved +=
                        if sample.labels.get("approved") == Some("true") { n } else { 0 };
                }
                "fraud_requests_rejected_total" => sum.rejected += n,
                "fraud_ready_requests_total" => sum.ready += n,
                _ => {}
            }
        }
    }
    Ok(Some(sum))
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

/// HAProxy's state of a server as its health checks see it: `UP` is in rotation; `UP 1/3` (in
/// rotation, failing checks) and a frontend's `OPEN` are neither up nor out.
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
    let connected = UnixStream::connect(sock);
    let mut s = connected.with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    s.write_all(b"show stat\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    parse_stat(&text)
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
    let (stat, haproxy_error) = match haproxy_stat(&sockets.join("haproxy.sock")) {
        Ok(rows) => (rows, None),
        Err(e) => (vec![], Some(format!("{e:#}"))),
    };
    let ready = |a: &String| (a.clone(), ready_unix(&sockets.join(format!("{a}.sock")), ms(300)));
    let mem = |(name, cg): &(String, Cgroup)| Some((name.clone(), util::mb(cg.memory_usage()?)));
    let (ready, mem_mb) =
        (apis.iter().map(ready).collect(), memory.iter().filter_map(mem).collect());
    let probe = probe.then(|| ready_tcp(9999, ms(500)));
    Sample { t, stat, haproxy_error, ready, probe, mem_mb }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Four rows of HAProxy 2.6's `show stat` (columns after check_status cut).
    const STAT: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,\n\
fraud,FRONTEND,,,3,120,2000,5210,1,2,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,\n\
apis,api1,0,0,1,60,,2605,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,40,0,,1,3,1,,2605,,2,0,,60,L7OK,\n\
apis,api2,0,0,0,0,,12,1,2,,0,,3,0,0,1,DOWN 1/2,1,1,0,1,1,2,2,,1,3,2,,12,,2,0,,9,L4CON,\n\
apis,BACKEND,0,0,1,60,,2617,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,40,0,,1,3,1,,2605,,2,0,,60,,\n";

    #[test]
    fn parses_show_stat_into_states() {
        let s = Sample { stat: parse_stat(STAT).unwrap(), ..Sample::default() };
        let row = |r: &StatRow| (r.svname.clone(), r.qcur, r.scur, r.stot, r.status.clone());
        assert_eq!(row(&s.stat[0]), ("FRONTEND".into(), None, Some(3), Some(5210), "OPEN".into()));
        assert_eq!(
            s.servers().map(row).collect::<Vec<_>>(),
            [
                ("api1".into(), Some(0), Some(1), Some(2605), "UP".into()),
                ("api2".into(), Some(0), Some(0), Some(12), "DOWN 1/2".into()),
            ]
        );
        assert_eq!(s.server("api2").unwrap().stot, Some(12));
        let state = |status: &str| {
            let row = StatRow { status: status.into(), ..s.stat[0].clone() };
            (row.up(), row.out())
        };
        let states = ["UP", "UP 1/3", "OPEN", "MAINT", "DOWN 1/2"].map(state);
        let (up, other, out) = ((true, false), (false, false), (false, true));
        assert_eq!(states, [up, other, other, out, out]);
        assert!(parse_stat("no header").is_err());
    }

    #[test]
    fn reads_the_status_line() {
        // The answer waits in a socket pair whose other end is closed for writing after it.
        let status = |answer: &[u8]| {
            let (ours, mut theirs) = UnixStream::pair().unwrap();
            theirs.write_all(answer).unwrap();
            theirs.shutdown(std::net::Shutdown::Write).unwrap();
            exchange(Ok(ours), READY)
        };
        let cases: [(&[u8], Probe, bool); 4] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", Ok(200), true),
            (b"HTTP/1.1 503 Service Unavailable\r\n", Ok(503), false),
            (b"HTTP/1.1 204 No Content\r\n\r\n", Ok(204), true),
            (b"", Err("empty".into()), false),
        ];
        for (answer, want, ready) in cases {
            let got = status(answer);
            assert_eq!((ok(&got), got), (ready, want));
        }
        let p = ready_unix(Path::new("/nonexistent/x.sock"), Duration::from_millis(10));
        assert_eq!(p, Err("NotFound".into()));
    }
}
