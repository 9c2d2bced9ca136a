//! `cargo xtask stack chaos`: instance loss under load. For each victim API in turn (api1, then
//! api2), k6 (`k6/resilience.js`, steady mode) sends the contest payloads through HAProxy at a
//! constant rate (default 900 req/s, the contest peak; at least 600) for at least 30 s, and 10 s
//! into it the victim is killed with SIGKILL to its main process from the host (as a crash or an
//! OOM kill would do); Docker's `restart: unless-stopped` brings it back. One k6 run per kill,
//! so that each victim holds half of k6's keep-alive connections when it dies (mode tcp leaves
//! them all on the survivor after a kill). A monitor thread samples HAProxy's stats, each API's
//! own `/ready` on its socket and a `/ready` probe through HAProxy on a new connection every
//! 100 ms (new connections are what reach a restarted server: k6 keeps its keep-alive ones).
//!
//! Fails if more than `--max-failed` (10) requests fail per kill, if any request fails with no
//! kill to explain it, if the engine did not restart the victim, or if the victim is not back in
//! rotation (HAProxy: UP and receiving sessions) within `--max-rotation-ms` (3,000) of its own
//! `/ready` answering 200.

use super::check;
use super::docker::{inspect, Compose};
use super::k6::{self, Failure, ResilienceSummary};
use super::monitor::{now_ms, Config, Monitor, Sample};
use super::run::{up, wait_all_up, wait_traffic};
use super::{loadavg, results_dir, utc_stamp, Common};
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Requests per second offered through HAProxy (at least 600).
    #[arg(long, default_value_t = 900)]
    rate: u32,
    /// Length of each victim's load in seconds (at least 30).
    #[arg(long, default_value_t = 30)]
    seconds: u32,
    /// Seconds of load before the kill.
    #[arg(long, default_value_t = 10)]
    first_kill: u64,
    /// The APIs killed, in order, each under its own k6 run.
    #[arg(long, value_delimiter = ',', default_value = "api1,api2")]
    victims: Vec<String>,
    /// Most failed requests allowed per kill.
    #[arg(long, default_value_t = 10)]
    max_failed: usize,
    /// Longest time allowed from the victim's own /ready 200 to HAProxy sending it sessions.
    #[arg(long, default_value_t = 3000)]
    max_rotation_ms: u64,
    #[command(flatten)]
    common: Common,
}

/// A request may start a little before the kill command returns and still die with the victim.
const SLACK_MS: u64 = 200;

#[derive(Debug, Serialize)]
pub struct KillReport {
    pub victim: String,
    pub at_ms: u64,
    pub failed: usize,
    /// Failures: start relative to the kill (ms), time to fail (ms), error.
    pub failures: Vec<(i64, u64, String)>,
    pub down_ms: Option<u64>,
    pub ready_ms: Option<u64>,
    pub up_ms: Option<u64>,
    pub rotation_ms: Option<u64>,
    pub sessions_while_out: Option<u64>,
    pub restarts: u32,
}

impl KillReport {
    /// Time from the victim's own `/ready` 200 to HAProxy sending it sessions again.
    pub fn rotation_after_ready(&self) -> Option<u64> {
        Some(self.rotation_ms?.saturating_sub(self.ready_ms?))
    }
}

/// Lines the samples and failures up with one kill of `victim` at `t_kill` (failures already
/// attributed to this kill).
pub fn analyse(victim: &str, t_kill: u64, samples: &[Sample], failures: &[Failure]) -> KillReport {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t >= t_kill).collect();
    let status = |s: &Sample| {
        s.servers
            .get(victim)
            .map(|v| v.status.clone())
            .unwrap_or_default()
    };
    let stot = |s: &Sample| s.servers.get(victim).map(|v| v.stot).unwrap_or(0);
    let ready = |s: &Sample| s.ready.get(victim).is_some_and(|p| p.ok());
    let rel = |s: &Sample| s.t - t_kill;
    let down = after.iter().position(|s| {
        let st = status(s);
        st.starts_with("DOWN") || st.starts_with("MAINT")
    });
    let gone = after.iter().position(|s| !ready(s));
    let back = gone.and_then(|g| after[g..].iter().position(|s| ready(s)).map(|i| g + i));
    let up = down.and_then(|d| {
        after[d..]
            .iter()
            .position(|s| status(s) == "UP")
            .map(|i| d + i)
    });
    // Sessions HAProxy gave it while out (between DOWN and UP), and the first sample from its
    // own /ready 200 on where it is UP and its session count grows (when HAProxy never marked it
    // DOWN, that is the only sign that it serves again).
    let leak = down
        .zip(up)
        .map(|(d, u)| stot(after[u.saturating_sub(1).max(d)]).saturating_sub(stot(after[d])));
    let rotation = back.and_then(|b| {
        (b + 1..after.len())
            .find(|&j| status(after[j]) == "UP" && stot(after[j]) > stot(after[j - 1]))
            .map(|j| rel(after[j]))
    });
    KillReport {
        victim: victim.to_string(),
        at_ms: t_kill,
        failed: failures.len(),
        failures: failures
            .iter()
            .map(|f| {
                (
                    f.start_ms as i64 - t_kill as i64,
                    f.took_ms,
                    f.error.clone(),
                )
            })
            .collect(),
        down_ms: down.map(|i| rel(after[i])),
        ready_ms: back.map(|i| rel(after[i])),
        up_ms: up.map(|i| rel(after[i])),
        rotation_ms: rotation,
        sessions_while_out: leak,
        restarts: 0,
    }
}

/// Splits failures between kills (by start time); the rest, before any kill, are unexplained.
pub fn attribute(kills: &[u64], failures: &[Failure]) -> (Vec<Vec<Failure>>, Vec<Failure>) {
    let mut per = vec![Vec::new(); kills.len()];
    let mut unexplained = Vec::new();
    for f in failures {
        match kills.iter().rposition(|&k| f.start_ms + SLACK_MS >= k) {
            Some(i) => per[i].push(f.clone()),
            None => unexplained.push(f.clone()),
        }
    }
    (per, unexplained)
}

#[derive(Serialize)]
struct Report {
    rate: u32,
    seconds: u32,
    overrides: Vec<String>,
    load_start: String,
    load_end: String,
    summaries: Vec<ResilienceSummary>,
    kills: Vec<KillReport>,
    unexplained_failures: Vec<Failure>,
    problems: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    if !super::gate_may_run("stack chaos")? {
        return Ok(());
    }
    if a.rate < 600 || a.seconds < 30 {
        bail!("the instance-loss gate needs at least 600 req/s for at least 30 s");
    }
    a.common.prepare(true, false)?;
    let compose = Compose::stack(&a.common.overrides);
    let guard = up(&compose, a.common.keep)?;
    let mut problems = check::check(&compose, true)?.problems;
    let base = results_dir()?.join(format!("{}-chaos", utc_stamp()));
    let monitor = Monitor::start(Config {
        socket_dir: compose.socket_dir()?,
        apis: compose.apis.clone(),
        interval: Duration::from_millis(100),
        probe: true,
        memory: vec![],
        out: base.with_extension("monitor.jsonl"),
    })?;
    let restarts_before: Vec<u32> = a
        .victims
        .iter()
        .map(|v| Ok(inspect(&compose.id(v)?)?.restart_count))
        .collect::<Result<_>>()?;
    let load_start = loadavg();
    crate::log!(
        "chaos: {} req/s for {} s, kills {:?} (load {load_start})",
        a.rate,
        a.seconds,
        a.victims
    );
    // One k6 run per kill, so that each victim holds half of k6's connections when it dies (after
    // a kill, mode tcp leaves every keep-alive connection on the survivor).
    let (mut kills, mut reports, mut summaries, mut unexplained) = (vec![], vec![], vec![], vec![]);
    for victim in &a.victims {
        if let Err(e) = wait_all_up(&compose, Duration::from_secs(15)) {
            problems.push(format!("before killing {victim}: {e:#}"));
        }
        let log = base.with_extension(format!("{victim}.k6.log"));
        let summary_path = base.with_extension(format!("{victim}.k6.json"));
        let env = [
            ("MODE", "steady".to_string()),
            ("RATE", a.rate.to_string()),
            ("DURATION", a.seconds.to_string()),
            ("LOG_FAILURES", "1".to_string()),
        ];
        let child = k6::spawn(&mut k6::command(
            "resilience.js",
            &env,
            &summary_path,
            &log,
        )?)?;
        // The kill counts from the first requests (k6 first loads the test set for a few seconds).
        let t_traffic = wait_traffic(&compose)?;
        std::thread::sleep(Duration::from_millis(
            (t_traffic + a.first_kill * 1000).saturating_sub(now_ms()),
        ));
        let pid = inspect(&compose.id(victim)?)?.state.pid;
        let t = now_ms();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        crate::log!(
            "killed {victim} (pid {pid}) at +{:.1} s",
            (t - t_traffic) as f64 / 1000.0
        );
        kills.push(t);
        let status = k6::wait(child)?;
        if !status.success() {
            problems.push(format!("k6 exited {status}"));
        }
        let (per_kill, before) = attribute(&[t], &k6::failures(&std::fs::read_to_string(&log)?));
        unexplained.extend(before);
        reports.push(per_kill);
        summaries.push(k6::read_summary::<ResilienceSummary>(&summary_path)?);
    }
    std::thread::sleep(Duration::from_secs(1));
    let samples = monitor.stop();
    let reports: Vec<KillReport> = a
        .victims
        .iter()
        .zip(reports)
        .enumerate()
        .map(|(i, (victim, mut failed))| {
            let mut r = analyse(victim, kills[i], &samples, &failed.remove(0));
            r.restarts = inspect(&compose.id(victim)?)?.restart_count - restarts_before[i];
            Ok(r)
        })
        .collect::<Result<_>>()?;
    drop(guard);
    for r in &reports {
        crate::log!("  {r:?}");
        if r.failed > a.max_failed {
            problems.push(format!(
                "{}: {} requests failed (max {})",
                r.victim, r.failed, a.max_failed
            ));
        }
        if r.restarts == 0 {
            problems.push(format!("{}: the engine did not restart it", r.victim));
        }
        match r.rotation_after_ready() {
            Some(ms) if ms <= a.max_rotation_ms => {}
            Some(ms) => problems.push(format!(
                "{}: back in rotation {ms} ms after its /ready 200 (max {})",
                r.victim, a.max_rotation_ms
            )),
            None => problems.push(format!(
                "{}: never back in rotation (ready {:?} ms, UP {:?} ms, sessions {:?} ms after the kill)",
                r.victim, r.ready_ms, r.up_ms, r.rotation_ms
            )),
        }
    }
    if !unexplained.is_empty() {
        problems.push(format!(
            "{} requests failed before any kill",
            unexplained.len()
        ));
    }
    let (fp, fn_) = summaries
        .iter()
        .fold((0, 0), |(p, n), s| (p + s.answers.fp, n + s.answers.fn_));
    if fp + fn_ > 0 {
        problems.push(format!("FP {fp} FN {fn_}"));
    }
    let requests: u64 = summaries.iter().map(|s| s.requests).sum();
    let p99 = summaries
        .iter()
        .filter_map(|s| s.latency_ms.as_ref().map(|l| l.p99))
        .fold(0.0, f64::max);
    let list =
        |f: &dyn Fn(&KillReport) -> String| reports.iter().map(f).collect::<Vec<_>>().join(", ");
    let ms = |v: Option<u64>| v.map_or("never".to_string(), |v| format!("{v}"));
    let figures = format!(
        "{} kills, each in its own {} s at {} req/s ({requests} requests in all): failed per kill {} (max {}), unexplained {}; \
         marked DOWN {} ms after the kill; own /ready 200 {} ms after the kill; in rotation {} ms after /ready 200 (max {}); \
         FP {fp} FN {fn_}, p99 up to {p99:.2} ms{}",
        reports.len(),
        a.seconds,
        a.rate,
        list(&|r| r.failed.to_string()),
        a.max_failed,
        unexplained.len(),
        list(&|r| ms(r.down_ms)),
        list(&|r| ms(r.ready_ms)),
        list(&|r| ms(r.rotation_after_ready())),
        a.max_rotation_ms,
        if problems.is_empty() { String::new() } else { format!("; problems: {}", problems.join("; ")) }
    );
    let report = Report {
        rate: a.rate,
        seconds: a.seconds,
        overrides: a
            .common
            .overrides
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        load_start,
        load_end: loadavg(),
        summaries,
        kills: reports,
        unexplained_failures: unexplained,
        problems: problems.clone(),
    };
    super::finish("stack chaos", &base, problems.is_empty(), &figures, &report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::monitor::Server;
    use crate::stack::probe::Probe;

    fn sample(t: u64, status: &str, stot: u64, ready: &str) -> Sample {
        let mut s = Sample {
            t,
            ..Sample::default()
        };
        s.servers.insert(
            "api1".into(),
            Server {
                status: status.into(),
                scur: 0,
                stot,
            },
        );
        s.ready.insert("api1".into(), Probe(ready.into()));
        s
    }

    /// Samples of api1 from (time, HAProxy status, sessions, own /ready) rows.
    fn samples(rows: &[(u64, &str, u64, &str)]) -> Vec<Sample> {
        rows.iter()
            .map(|&(t, st, n, r)| sample(t, st, n, r))
            .collect()
    }

    #[test]
    fn a_kill_and_its_return() {
        let samples = samples(&[
            (900, "UP", 50, "200"),
            (1000, "UP", 50, "200"),
            (1100, "DOWN", 50, "refused"),
            (1500, "DOWN", 50, "503"),
            (1700, "DOWN", 50, "200"),
            (1900, "DOWN 1/2", 50, "200"),
            (2100, "UP", 50, "200"),
            (2200, "UP", 51, "200"),
        ]);
        let r = analyse("api1", 1000, &samples, &[]);
        assert_eq!(r.down_ms, Some(100));
        assert_eq!(r.ready_ms, Some(700));
        assert_eq!(r.up_ms, Some(1100));
        assert_eq!(r.rotation_ms, Some(1200));
        assert_eq!(r.rotation_after_ready(), Some(500));
        assert_eq!(r.sessions_while_out, Some(0));
    }

    #[test]
    fn back_without_ever_being_marked_down() {
        let samples = samples(&[
            (1000, "UP", 10, "refused"),
            (1500, "UP", 12, "200"),
            (1600, "UP", 12, "200"),
            (1700, "UP", 13, "200"),
        ]);
        let r = analyse("api1", 1000, &samples, &[]);
        assert_eq!(r.down_ms, None);
        assert_eq!(r.ready_ms, Some(500));
        assert_eq!(r.rotation_after_ready(), Some(200));
    }

    #[test]
    fn never_back() {
        let samples = samples(&[(1000, "DOWN", 5, "refused"), (1100, "DOWN", 5, "200")]);
        let r = analyse("api1", 1000, &samples, &[]);
        assert_eq!(r.ready_ms, Some(100));
        assert_eq!(r.rotation_after_ready(), None);
    }

    #[test]
    fn failures_go_to_the_kill_before_them() {
        let f = |t| Failure {
            start_ms: t,
            took_ms: 1,
            status: 0,
            error: "EOF".into(),
        };
        let (per, none) = attribute(&[1000, 5000], &[f(500), f(950), f(1020), f(5010), f(9000)]);
        assert_eq!(none.len(), 1);
        assert_eq!(per[0].len(), 2);
        assert_eq!(per[1].len(), 2);
    }
}
