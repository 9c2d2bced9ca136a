//! `cargo xtask stack attack`: hostile clients at the connection cap, each with a benign client
//! beside it, against `local-runner serve` (its defaults, loopback TCP) and against the compose
//! stack (port 9999). docs/HOSTILE.md, "Under attack", says what each attack is and the bounds.
//!
//! The attacks: Debian's `slowhttptest` in its three slow modes (slowloris `-H`, slow body `-B`,
//! slow read `-X` with pipelining `-k`), and a flood of our own that pipelines `GET /ready`
//! 64 KiB at a time on every connection and never reads an answer. Each opens as many
//! connections as the target admits (`local-runner serve`'s cap; HAProxy's frontend `maxconn`).
//! The benign client sends one scoring request every 10 ms on a keep-alive connection opened
//! before the attack (reconnecting after a failure, which counts), checks every answer and
//! times it.
//!
//! The gate: against `serve`, its anonymous memory grows by at most 32 MB, and the benign client
//! has no failure and a p99 of at most 10 ms; against the stack, no container is killed or
//! restarted, every container's peak memory is at most 80 % of its limit, and the benign
//! client has no failure and a p99 of at most 100 ms.

use super::load::{Container, Session};
use super::Common;
use crate::util::{self, log, root, Quantiles};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `local-runner serve`'s default `--max-connections`.
const SERVE_CAP: usize = 1024;
/// The bounds of the gate.
const SERVE_GROWTH_MB: f64 = 32.0;
const SERVE_P99_MS: f64 = 10.0;
const STACK_P99_MS: f64 = 100.0;
const STACK_PEAK_SHARE: f64 = 0.8;
/// The benign client: one request every this, each failing after the timeout.
const BENIGN_EVERY: Duration = Duration::from_millis(10);
const BENIGN_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(clap::Args)]
pub struct Args {
    /// Which servers: `serve` (`local-runner serve` with its defaults) and `stack` (compose).
    #[arg(long, value_enum, default_values = ["serve", "stack"])]
    target: Vec<Target>,
    /// Seconds each attack lasts.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Only the attacks whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// Attack this `local-runner` instead of the workspace build's (another build, to compare).
    #[arg(long)]
    serve_binary: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Target {
    Serve,
    Stack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Attack {
    Slowloris,
    SlowBody,
    SlowRead,
    Flood,
}

const ATTACKS: [Attack; 4] = [Attack::Slowloris, Attack::SlowBody, Attack::SlowRead, Attack::Flood];

impl Attack {
    fn name(self) -> &'static str {
        match self {
            Attack::Slowloris => "slowloris",
            Attack::SlowBody => "slow-body",
            Attack::SlowRead => "slow-read",
            Attack::Flood => "flood",
        }
    }

    /// slowhttptest's arguments for `connections` at `addr` for `seconds` (None: our flood).
    fn slowhttptest(
        self,
        addr: SocketAddr,
        connections: usize,
        seconds: u64,
    ) -> Option<Vec<String>> {
        let url = |path: &str| format!("http://{addr}{path}");
        // Reach the cap within about two seconds; follow-up data every 3 s (the deadlines are
        // 10 s); slowhttptest's own probe request waits 3 s.
        let common = format!("-c {connections} -r {} -l {seconds} -p 3", connections.div_ceil(2));
        let mode = match self {
            Attack::Slowloris => format!("-H -i 3 -x 24 -u {}", url("/ready")),
            Attack::SlowBody => {
                format!("-B -i 3 -s 8192 -f application/json -u {}", url("/fraud-score"))
            }
            // Each connection pipelines 8 requests and advertises a 1-16 byte window, taking 8
            // bytes every 2 s.
            Attack::SlowRead => format!("-X -k 8 -n 2 -w 1 -y 16 -z 8 -u {}", url("/ready")),
            Attack::Flood => return None,
        };
        Some(format!("{mode} {common}").split(' ').map(String::from).collect())
    }
}

/// What the benign client saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Benign {
    pub requests: u64,
    pub failures: u64,
    /// Latency of the successful requests, ms.
    pub latency_ms: Quantiles,
    pub first_failure: Option<String>,
}

/// What the attacker did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Attacker {
    /// Most connections open at once (slowhttptest's count, or the flood's).
    pub connections: u64,
    /// The flood: connections opened in all, bytes written; slowhttptest: its probe's verdict.
    pub opened: u64,
    pub bytes_written: u64,
    pub service_available: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Run {
    target: Target,
    attack: Attack,
    seconds: u64,
    cap: usize,
    attacker: Attacker,
    benign: Benign,
    /// `serve`: anonymous memory (RssAnon) before and at its peak, MB; CPU seconds.
    anon_before_mb: Option<f64>,
    anon_peak_mb: Option<f64>,
    cpu_s: Option<f64>,
    /// The stack: every container's counters over the attack.
    containers: Vec<Container>,
    problems: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    util::require("slowhttptest", "for the attacks (Debian's slowhttptest)")?;
    raise_open_files()?;
    let attacks: Vec<Attack> = ATTACKS
        .into_iter()
        .filter(|k| a.only.as_deref().is_none_or(|o| k.name().contains(o)))
        .collect();
    let mut runs = Vec::new();
    if a.target.contains(&Target::Serve) {
        let bin = match &a.serve_binary {
            Some(b) => b.clone(),
            None => util::built("local-runner")?,
        };
        for &attack in &attacks {
            runs.push(on_serve(&bin, attack, a.seconds)?);
        }
    }
    if a.target.contains(&Target::Stack) {
        if let Some(mut s) = Session::gate("attack", &a.common, false)? {
            let cap = haproxy_maxconn(&root().join("docker/haproxy/haproxy.cfg"))?;
            let addr = haproxy_address(&s)?;
            for &attack in &attacks {
                runs.push(on_stack(&mut s, addr, attack, cap, a.seconds)?);
                std::thread::sleep(Duration::from_secs(3)); // the attack's connections drain
            }
            // The session's verdict fails on any problem, of the stack or of an attack.
            s.problems.extend(runs.iter().flat_map(|r| r.problems.clone()));
            log!("\n{}", table(&runs));
            return s.finish("attack", &figures(&runs), serde_json::json!({ "runs": runs }));
        }
    }
    log!("\n{}", table(&runs));
    let passed = runs.iter().all(|r| r.problems.is_empty());
    util::verdict("stack attack", passed, &figures(&runs), &runs)
}

/// One attack against a fresh `local-runner serve` with its defaults on a loopback port.
fn on_serve(bin: &Path, attack: Attack, seconds: u64) -> Result<Run> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let log_path = util::xtask_dir("attack")?.join(format!("serve-{}.log", attack.name()));
    let listen = addr.to_string();
    let server = util::to_log(duct::cmd!(bin, "serve", "--listen", &listen), &log_path).start()?;
    let pid = *server.pids().first().context("no server pid")?;
    let ready = util::poll(
        "local-runner serve ready",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            Ok(match ready(addr) {
                true => Ok(()),
                false => Err("not ready".to_string()),
            })
        },
    );
    if let Err(e) = ready {
        let _ = server.kill();
        return Err(e);
    }
    let benign = BenignClient::start(addr)?;
    // The benign client's connection is open and warm before the attack.
    std::thread::sleep(Duration::from_millis(500));
    let (anon_before, cpu_before) = (proc_status_kb(pid, "RssAnon")?, cpu_ticks(pid)?);
    let peak = Sampler::start(move || proc_status_kb(pid, "RssAnon").ok());
    log!("attack serve {}: {seconds} s at {SERVE_CAP} connections", attack.name());
    let attacker = attack_for(attack, addr, SERVE_CAP, seconds)?;
    let anon_peak = peak.stop().max(anon_before);
    let cpu_s = (cpu_ticks(pid)? - cpu_before) as f64 / 100.0;
    let benign = benign.stop();
    let alive = server.try_wait()?.is_none();
    let _ = server.kill();
    let (before_mb, peak_mb) = (anon_before as f64 / 1024.0, anon_peak as f64 / 1024.0);
    let mut problems = benign_problems(&benign, SERVE_P99_MS);
    if peak_mb - before_mb > SERVE_GROWTH_MB {
        let grew = peak_mb - before_mb;
        problems.push(format!("anonymous memory grew {grew:.1} MB (over {SERVE_GROWTH_MB} MB)"));
    }
    if !alive {
        problems.push("the server exited".into());
    }
    let problems = problems.into_iter().map(|p| format!("serve {}: {p}", attack.name())).collect();
    Ok(Run {
        target: Target::Serve,
        attack,
        seconds,
        cap: SERVE_CAP,
        attacker,
        benign,
        anon_before_mb: Some(before_mb),
        anon_peak_mb: Some(peak_mb),
        cpu_s: Some(cpu_s),
        containers: vec![],
        problems,
    })
}

/// One attack against the stack of `s` at `addr`, its counters started afresh.
fn on_stack(
    s: &mut Session,
    addr: SocketAddr,
    attack: Attack,
    cap: usize,
    seconds: u64,
) -> Result<Run> {
    // Every server UP again after the last attack (a dead one restarts by itself).
    super::load::wait_all_up(&s.compose, Duration::from_secs(60))?;
    s.restart_counters()?;
    let benign = BenignClient::start(addr)?;
    std::thread::sleep(Duration::from_millis(500));
    log!("attack stack {}: {seconds} s at {cap} connections on {addr}", attack.name());
    let attacker = attack_for(attack, addr, cap, seconds)?;
    let benign = benign.stop();
    let mut problems = benign_problems(&benign, STACK_P99_MS);
    // A container that died has no cgroup to read until it is back.
    let containers = s.containers().unwrap_or_else(|e| {
        problems.push(format!("containers unreadable ({e:#}): one died"));
        vec![]
    });
    problems.extend(containers.iter().filter_map(Container::trouble));
    for c in &containers {
        let (peak, limit) = (c.peak_mb(), c.limit_mb());
        if peak > STACK_PEAK_SHARE * limit {
            let share = 100.0 * STACK_PEAK_SHARE;
            problems.push(format!(
                "{}: peak memory {peak:.1} of {limit:.0} MB, over {share:.0} %",
                c.service
            ));
        }
    }
    let problems = problems.into_iter().map(|p| format!("stack {}: {p}", attack.name())).collect();
    Ok(Run {
        target: Target::Stack,
        attack,
        seconds,
        cap,
        attacker,
        benign,
        anon_before_mb: None,
        anon_peak_mb: None,
        cpu_s: None,
        containers,
        problems,
    })
}

fn benign_problems(b: &Benign, max_p99: f64) -> Vec<String> {
    let mut p = Vec::new();
    if b.failures > 0 {
        let first = b.first_failure.as_deref().unwrap_or("?");
        p.push(format!("the benign client had {} failed requests (first: {first})", b.failures));
    }
    if b.requests == 0 || b.latency_ms.p99 > max_p99 {
        p.push(format!(
            "the benign client's p99 {:.2} ms (at most {max_p99} ms)",
            b.latency_ms.p99
        ));
    }
    p
}

/// Runs `attack` for `seconds` against `addr` with `connections`, and says what it did.
fn attack_for(
    attack: Attack,
    addr: SocketAddr,
    connections: usize,
    seconds: u64,
) -> Result<Attacker> {
    let Some(args) = attack.slowhttptest(addr, connections, seconds) else {
        return flood(addr, connections, Duration::from_secs(seconds));
    };
    let dir = util::xtask_dir("attack")?;
    let prefix = dir.join(format!("{}-{}", addr.port(), attack.name()));
    let log_path = prefix.with_extension("log");
    let stats = ["-g".to_string(), "-o".to_string(), prefix.display().to_string()];
    let e = duct::cmd("slowhttptest", args.iter().chain(&stats)).dir(&dir);
    util::to_log(e, &log_path).unchecked().run().context("cannot run slowhttptest")?;
    let csv = std::fs::read_to_string(prefix.with_extension("csv")).with_context(|| {
        format!("slowhttptest wrote no statistics (log: {})", log_path.display())
    })?;
    Ok(slowhttptest_stats(&csv))
}

/// The most connections slowhttptest held at once, and whether its probe always got an answer.
fn slowhttptest_stats(csv: &str) -> Attacker {
    // "Seconds,Closed,Pending,Connected,Service Available"; the last is the connection target
    // while slowhttptest's probe got an answer in time, 0 while it did not.
    let rows: Vec<Vec<&str>> =
        csv.lines().skip(1).map(|l| l.split(',').map(str::trim).collect()).collect();
    let connected = rows.iter().filter_map(|r| r.get(3)?.parse::<u64>().ok()).max().unwrap_or(0);
    let available =
        rows.iter().filter_map(|r| r.get(4)).all(|v| v.parse::<u64>().is_ok_and(|n| n > 0));
    Attacker { connections: connected, service_available: Some(available), ..Attacker::default() }
}

/// Our flood: `connections` connections that each pipeline `GET /ready` 64 KiB at a time and
/// never read; a connection the server closes is opened again.
fn flood(addr: SocketAddr, connections: usize, length: Duration) -> Result<Attacker> {
    let batch = "GET /ready HTTP/1.1\r\nHost: attack\r\n\r\n".repeat(64 * 1024 / 36);
    let open = || -> Option<TcpStream> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let (mut conns, mut a) = (Vec::with_capacity(connections), Attacker::default());
    let end = Instant::now() + length;
    while Instant::now() < end {
        while conns.len() < connections && Instant::now() < end {
            match open() {
                Some(s) => {
                    conns.push(s);
                    a.opened += 1;
                }
                None => break, // the listener's queue is full: write to what is open
            }
        }
        a.connections = a.connections.max(conns.len() as u64);
        conns.retain_mut(|s| match s.write(batch.as_bytes()) {
            Ok(n) => {
                a.bytes_written += n as u64;
                true
            }
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(a)
}

/// The benign client, on its own thread.
struct BenignClient {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Benign>,
}

impl BenignClient {
    /// Connects (keep-alive) and starts sending one scoring request every 10 ms.
    fn start(addr: SocketAddr) -> Result<BenignClient> {
        let entries = util::test_entries()?;
        let cases: Vec<(Vec<u8>, bool, f64)> = util::spread(entries.len(), 50)
            .into_iter()
            .map(|i| {
                let e = &entries[i];
                let body = e.request.get();
                let head = format!("POST /fraud-score HTTP/1.1\r\nHost: benign\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
                ((head + body).into_bytes(), e.expected_approved, e.expected_fraud_score)
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut conn = Ok(connect(addr).context("the benign client cannot connect")?);
        let thread = std::thread::spawn(move || {
            let (mut b, mut latencies) = (Benign::default(), Vec::new());
            let mut next = Instant::now();
            for (i, (request, approved, score)) in cases.iter().cycle().enumerate() {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let t = Instant::now();
                let answer = match &mut conn {
                    Ok(c) => exchange(c, request),
                    Err(e) => Err(format!("connect: {e}")),
                };
                b.requests += 1;
                match answer.and_then(|body: String| judge_answer(&body, *approved, *score)) {
                    Ok(()) => latencies.push(t.elapsed().as_secs_f64() * 1e3),
                    Err(why) => {
                        b.failures += 1;
                        b.first_failure.get_or_insert(format!("request {i}: {why}"));
                        conn = connect(addr);
                    }
                }
                next += BENIGN_EVERY;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            b.latency_ms = Quantiles::of(latencies);
            b
        });
        Ok(BenignClient { stop, thread })
    }

    fn stop(self) -> Benign {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, BENIGN_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(BENIGN_TIMEOUT))?;
    s.set_write_timeout(Some(BENIGN_TIMEOUT))?;
    Ok(s)
}

/// Writes one request and reads its answer's body (status 200 required).
fn exchange(s: &mut TcpStream, request: &[u8]) -> Result<String, String> {
    s.write_all(request).map_err(|e| format!("write: {e}"))?;
    let (mut buf, mut n) = (vec![0u8; 4096], 0);
    loop {
        let got = s.read(&mut buf[n..]).map_err(|e| format!("read: {e}"))?;
        if got == 0 {
            return Err("connection closed".into());
        }
        n += got;
        let text = String::from_utf8_lossy(&buf[..n]);
        let Some(end) = text.find("\r\n\r\n") else { continue };
        let head = &text[..end];
        let len = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or("no content-length")?;
        if n < end + 4 + len {
            continue;
        }
        if !head.starts_with("HTTP/1.1 200 ") {
            return Err(head.lines().next().unwrap_or("").to_string());
        }
        return Ok(text[end + 4..end + 4 + len].to_string());
    }
}

fn judge_answer(body: &str, approved: bool, score: f64) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
    let ok = v["approved"].as_bool() == Some(approved) && v["fraud_score"].as_f64() == Some(score);
    ok.then_some(()).ok_or_else(|| format!("wrong answer {body}"))
}

/// Samples a reading every 50 ms on its own thread; [`Sampler::stop`] gives the largest.
struct Sampler {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(read: impl Fn() -> Option<u64> + Send + 'static) -> Sampler {
        let (stop, max) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, most) = (stop.clone(), max.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if let Some(v) = read() {
                    most.fetch_max(v, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Sampler { stop, max, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.max.load(Ordering::Relaxed)
    }
}

fn ready(addr: SocketAddr) -> bool {
    let mut s = match connect(addr) {
        Ok(s) => s,
        Err(_) => return false,
    };
    let request = b"GET /ready HTTP/1.1\r\nHost: attack\r\n\r\n";
    exchange(&mut s, request).is_ok()
}

/// HAProxy's port 9999 on the stack's own network: where a client of another machine lands
/// (the published port is DNAT to it). The host's 127.0.0.1:9999 goes through `docker-proxy`
/// instead, a userland copy outside the stack's limits that buffers for each connection and
/// shares the host's cores: aimed there, a flood measured docker-proxy (benign p99 90-175 ms
/// with HAProxy's own figures unchanged).
fn haproxy_address(s: &Session) -> Result<SocketAddr> {
    let id = s.compose.id("haproxy")?;
    let info = super::compose::inspect(&id)?;
    let networks = info["NetworkSettings"]["Networks"].as_object().context("no networks")?;
    let ip = networks
        .values()
        .find_map(|n| n["IPAddress"].as_str().filter(|ip| !ip.is_empty()))
        .context("HAProxy has no address on the stack's network")?;
    Ok(SocketAddr::new(ip.parse()?, 9999))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A field of /proc/<pid>/status in KiB.
fn proc_status_kb(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let value = text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'));
    value
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {field} for {pid}"))
}

/// User + system CPU of a process, in clock ticks (100 a second).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (2nd field) may hold spaces; the fields after its ')' are plain.
    let rest = stat.rsplit_once(')').context("unexpected /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

/// HAProxy's frontend `maxconn`: the stack's connection cap.
fn haproxy_maxconn(cfg: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(cfg).with_context(|| format!("no {}", cfg.display()))?;
    let frontend = text.split("\nfrontend ").nth(1).context("no frontend section")?;
    let section = frontend.split("\nbackend ").next().unwrap_or(frontend);
    let line = section.lines().map(str::trim).find(|l| l.starts_with("maxconn "));
    let n = line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    n.with_context(|| format!("no maxconn in the frontend of {}", cfg.display()))
}

/// slowhttptest and the flood hold a descriptor per connection: the soft limit goes up to the
/// hard one for this process and its children.
fn raise_open_files() -> Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    if hard < 4096 {
        bail!("the hard limit on open files is {hard}: the attacks need thousands of connections");
    }
    Ok(())
}

/// The record's table: one row per target and attack.
fn table(runs: &[Run]) -> String {
    let mut t = String::from("| target | attack | cap | attacker connections | benign requests | failures | p50 ms | p99 ms | max ms | memory | CPU s | problems |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in runs {
        let memory = match r.target {
            Target::Serve => format!(
                "anon {:.1} -> {:.1} MB",
                r.anon_before_mb.unwrap_or(0.0),
                r.anon_peak_mb.unwrap_or(0.0)
            ),
            Target::Stack => util::list(&r.containers, |c| {
                format!("{} {:.0}/{:.0} MB", c.service, c.peak_mb(), c.limit_mb())
            }),
        };
        let cpu = match r.target {
            Target::Serve => format!("{:.1}", r.cpu_s.unwrap_or(0.0)),
            Target::Stack => {
                util::list(&r.containers, |c| format!("{} {:.1}", c.service, c.cpu_s()))
            }
        };
        let b = &r.benign;
        t += &format!(
            "| {:?} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {memory} | {cpu} | {} |\n",
            r.target,
            r.attack.name(),
            r.cap,
            r.attacker.connections,
            b.requests,
            b.failures,
            b.latency_ms.p50,
            b.latency_ms.p99,
            b.latency_ms.max,
            if r.problems.is_empty() { "-".into() } else { r.problems.join("; ") }
        );
    }
    t
}

/// `serve slowloris: 0 failures, p99 1.2 ms, +3.1 MB; ...`.
fn figures(runs: &[Run]) -> String {
    util::list(runs, |r| {
        let mem = match r.target {
            Target::Serve => format!(
                "anon +{:.1} MB",
                r.anon_peak_mb.unwrap_or(0.0) - r.anon_before_mb.unwrap_or(0.0)
            ),
            Target::Stack => {
                let worst = r
                    .containers
                    .iter()
                    .map(|c| c.peak_mb() / c.limit_mb().max(1.0))
                    .fold(0.0, f64::max);
                format!("peak {:.0} % of a limit at most", 100.0 * worst)
            }
        };
        let (b, conns) = (&r.benign, r.attacker.connections);
        format!(
            "{:?} {} ({conns} connections): {} failures, p99 {:.2} ms, {mem}",
            r.target,
            r.attack.name(),
            b.failures,
            b.latency_ms.p99
        )
        .to_lowercase()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attacks_are_aimed_at_the_cap_on_loopback() {
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let args = Attack::Slowloris.slowhttptest(at(9999), 1000, 10).unwrap().join(" ");
        assert_eq!(args, "-H -i 3 -x 24 -u http://127.0.0.1:9999/ready -c 1000 -r 500 -l 10 -p 3");
        let read = Attack::SlowRead.slowhttptest(at(8080), 1024, 5).unwrap().join(" ");
        assert!(read.starts_with("-X -k 8 ") && read.contains("-c 1024 -r 512 -l 5"), "{read}");
        let body = Attack::SlowBody.slowhttptest(at(1), 2, 3).unwrap().join(" ");
        assert!(body.contains("-B ") && body.contains("127.0.0.1:1/fraud-score"), "{body}");
        assert!(Attack::Flood.slowhttptest(at(1), 2, 3).is_none());
    }

    #[test]
    fn slowhttptest_statistics_are_read() {
        let csv = "Seconds,Closed,Pending,Connected,Service Available\n0,0,10,0,1\n1,0,300,500,1\n2,20,0,980,0\n";
        let a = slowhttptest_stats(csv);
        assert_eq!((a.connections, a.service_available), (980, Some(false)));
    }

    #[test]
    fn the_stack_cap_is_haproxys_frontend_maxconn() {
        assert!(haproxy_maxconn(&root().join("docker/haproxy/haproxy.cfg")).unwrap() >= 250);
    }

    #[test]
    fn answers_are_judged() {
        assert!(judge_answer(r#"{"approved":false,"fraud_score":0.6}"#, false, 0.6).is_ok());
        assert!(judge_answer(r#"{"approved":true,"fraud_score":0.0}"#, false, 0.6).is_err());
        assert!(judge_answer("{", true, 0.0).is_err());
    }
}
