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

use super::compose::{inspect, Compose};
use super::k6::{self, Failure, ResilienceSummary};
use super::load::{up, wait_all_up, wait_traffic};
use super::monitor::{Config, Monitor, Sample};
use super::probe::State;
use super::{check, Common};
use crate::util::{self, log};
use anyhow::{ensure, Result};
use serde::Serialize;
use std::path::Path;
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
    let status = |s: &Sample| s.servers.get(victim).map(|v| v.status.clone());
    let is_up = |s: &Sample| status(s) == Some(State::Up);
    let stot = |s: &Sample| s.servers.get(victim).map(|v| v.stot).unwrap_or(0);
    let ready = |s: &Sample| s.ready.get(victim).is_some_and(|p| p.ok());
    let rel = |s: &Sample| s.t - t_kill;
    let down = after.iter().position(|s| matches!(status(s), Some(State::Out(_))));
    let gone = after.iter().position(|s| !ready(s));
    let back = gone.and_then(|g| after[g..].iter().position(|s| ready(s)).map(|i| g + i));
    let up = down.and_then(|d| after[d..].iter().position(|s| is_up(s)).map(|i| d + i));
    // Sessions HAProxy gave it while out (between DOWN and UP), and the first sample from its
    // own /ready 200 on where it is UP and its session count grows (when HAProxy never marked it
    // DOWN, that is the only sign that it serves again).
    let leak = down
        .zip(up)
        .map(|(d, u)| stot(after[u.saturating_sub(1).max(d)]).saturating_sub(stot(after[d])));
    let rotation = back.and_then(|b| {
        (b + 1..after.len())
            .find(|&j| is_up(after[j]) && stot(after[j]) > stot(after[j - 1]))
            .map(|j| rel(after[j]))
    });
    KillReport {
        victim: victim.to_string(),
        at_ms: t_kill,
        failed: failures.len(),
        failures: failures
            .iter()
            .map(|f| (f.start_ms as i64 - t_kill as i64, f.took_ms, f.error.clone()))
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
    ensure!(
        a.rate >= 600 && a.seconds >= 30,
        "the instance-loss gate needs at least 600 req/s for at least 30 s"
    );
    a.common.prepare(true, false)?;
    let compose = Compose::stack(&a.common.overrides);
    let guard = up(&compose, a.common.keep)?;
    let mut problems = check::check(&compose, true)?.problems;
    let base = util::xtask_dir("stack")?.join(format!("{}-chaos", util::stamp()));
    let (apis, socket_dir) = (compose.apis.clone(), compose.socket_dir()?);
    let out = base.with_extension("monitor.jsonl");
    let config = Config {
        socket_dir,
        apis,
        interval: Duration::from_millis(100),
        probe: true,
        memory: vec![],
        out,
    };
    let monitor = Monitor::start(config)?;
    let restarts = |v: &String| Ok(inspect(&compose.id(v)?)?.restart_count);
    let restarts_before: Vec<u32> = a.victims.iter().map(restarts).collect::<Result<_>>()?;
    let load_start = util::loadavg();
    log!("chaos: {} req/s for {} s, kills {:?} (load {load_start})", a.rate, a.seconds, a.victims);
    // One k6 run per kill, so that each victim holds half of k6's connections when it dies (after
    // a kill, mode tcp leaves every keep-alive connection on the survivor).
    let (mut kills, mut unexplained, mut summaries) = (vec![], vec![], vec![]);
    for victim in &a.victims {
        if let Err(e) = wait_all_up(&compose, Duration::from_secs(15)) {
            problems.push(format!("before killing {victim}: {e:#}"));
        }
        let (t, failed, summary) = kill_under_load(&a, &compose, victim, &base, &mut problems)?;
        let (mut per_kill, before) = attribute(&[t], &failed);
        unexplained.extend(before);
        kills.push((victim, t, per_kill.remove(0)));
        summaries.push(summary);
    }
    std::thread::sleep(Duration::from_secs(1));
    let samples = monitor.stop();
    let mut reports = Vec::new();
    for ((victim, t, failed), before) in kills.into_iter().zip(restarts_before) {
        let mut r = analyse(victim, t, &samples, &failed);
        r.restarts = restarts(victim)? - before;
        reports.push(r);
    }
    drop(guard);
    for r in &reports {
        log!("  {r:?}");
    }
    problems.extend(judge(&a, &reports, &unexplained, &summaries));
    let figures = figures(&a, &reports, unexplained.len(), &summaries, &problems);
    let overrides = a.common.overrides.iter().map(|p| p.display().to_string()).collect();
    let (rate, seconds, load_end) = (a.rate, a.seconds, util::loadavg());
    let report = Report {
        rate,
        seconds,
        overrides,
        load_start,
        load_end,
        summaries,
        kills: reports,
        unexplained_failures: unexplained,
        problems: problems.clone(),
    };
    super::finish("stack chaos", &base, problems.is_empty(), &figures, &report)
}

/// One k6 run with `victim` killed `--first-kill` seconds into it: the kill's time, the failed
/// requests k6 logged and its summary.
fn kill_under_load(
    a: &Args,
    compose: &Compose,
    victim: &str,
    base: &Path,
    problems: &mut Vec<String>,
) -> Result<(u64, Vec<Failure>, ResilienceSummary)> {
    let log = base.with_extension(format!("{victim}.k6.log"));
    let summary_path = base.with_extension(format!("{victim}.k6.json"));
    let env = [
        ("MODE", "steady".to_string()),
        ("RATE", a.rate.to_string()),
        ("DURATION", a.seconds.to_string()),
        ("LOG_FAILURES", "1".to_string()),
    ];
    let k6 = k6::start("resilience.js", &env, &summary_path, &log)?;
    // The kill counts from the first requests (k6 first loads the test set for a few seconds).
    let t_traffic = wait_traffic(compose)?;
    std::thread::sleep(Duration::from_millis(
        (t_traffic + a.first_kill * 1000).saturating_sub(util::now_ms()),
    ));
    let pid = inspect(&compose.id(victim)?)?.state.pid;
    let t = util::now_ms();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    log!("killed {victim} (pid {pid}) at +{:.1} s", (t - t_traffic) as f64 / 1000.0);
    let status = k6::wait(&k6)?;
    if !status.success() {
        problems.push(format!("k6 exited {status}"));
    }
    let failed = k6::failures(&std::fs::read_to_string(&log)?);
    Ok((t, failed, k6::read_summary(&summary_path)?))
}

/// The gate's problems: too many failures per kill, no restart, slow or no return to rotation,
/// failures before any kill, any wrong answer.
fn judge(
    a: &Args,
    reports: &[KillReport],
    unexplained: &[Failure],
    summaries: &[ResilienceSummary],
) -> Vec<String> {
    let mut problems = Vec::new();
    for r in reports {
        if r.failed > a.max_failed {
            problems
                .push(format!("{}: {} requests failed (max {})", r.victim, r.failed, a.max_failed));
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
        problems.push(format!("{} requests failed before any kill", unexplained.len()));
    }
    let (fp, fn_) = wrong_answers(summaries);
    if fp + fn_ > 0 {
        problems.push(format!("FP {fp} FN {fn_}"));
    }
    problems
}

fn wrong_answers(summaries: &[ResilienceSummary]) -> (u64, u64) {
    summaries.iter().fold((0, 0), |(p, n), s| (p + s.answers.fp, n + s.answers.fn_))
}

fn figures(
    a: &Args,
    reports: &[KillReport],
    unexplained: usize,
    summaries: &[ResilienceSummary],
    problems: &[String],
) -> String {
    let (fp, fn_) = wrong_answers(summaries);
    let requests: u64 = summaries.iter().map(|s| s.requests).sum();
    let p99 =
        summaries.iter().filter_map(|s| s.latency_ms.as_ref().map(|l| l.p99)).fold(0.0, f64::max);
    let list =
        |f: &dyn Fn(&KillReport) -> String| reports.iter().map(f).collect::<Vec<_>>().join(", ");
    let ms = |v: Option<u64>| v.map_or("never".to_string(), |v| format!("{v}"));
    format!(
        "{} kills, each in its own {} s at {} req/s ({requests} requests in all): failed per kill {} (max {}), unexplained {unexplained}; \
         marked DOWN {} ms after the kill; own /ready 200 {} ms after the kill; in rotation {} ms after /ready 200 (max {}); \
         FP {fp} FN {fn_}, p99 up to {p99:.2} ms{}",
        reports.len(),
        a.seconds,
        a.rate,
        list(&|r| r.failed.to_string()),
        a.max_failed,
        list(&|r| ms(r.down_ms)),
        list(&|r| ms(r.ready_ms)),
        list(&|r| ms(r.rotation_after_ready())),
        a.max_rotation_ms,
        util::problems_suffix(problems)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::monitor::Server;
    use crate::stack::probe::Probe;

    fn sample(t: u64, status: &str, stot: u64, ready: &str) -> Sample {
        let mut s = Sample { t, ..Sample::default() };
        s.servers.insert(
            "api1".into(),
            Server { status: State::from(status.to_string()), scur: 0, stot },
        );
        s.ready.insert("api1".into(), ready.parse().map_or(Probe::Refused, Probe::Status));
        s
    }

    /// Samples of api1 from (time, HAProxy status, sessions, own /ready) rows.
    fn samples(rows: &[(u64, &str, u64, &str)]) -> Vec<Sample> {
        rows.iter().map(|&(t, st, n, r)| sample(t, st, n, r)).collect()
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

    fn args() -> Args {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        Cli::parse_from(["chaos", "--rate", "600"]).args
    }

    #[test]
    fn the_gate_judges_each_kill_and_reports_its_figures() {
        let rows = [
            (1000, "UP", 50, "200"),
            (1100, "DOWN", 50, "refused"),
            (1700, "DOWN", 50, "200"),
            (2100, "UP", 50, "200"),
            (2200, "UP", 51, "200"),
        ];
        let f = Failure { start_ms: 1005, took_ms: 2, status: 0, error: "1000 EOF".into() };
        let mut r = analyse("api1", 1000, &samples(&rows), std::slice::from_ref(&f));
        r.restarts = 1;
        let summaries = [k6::resilience_summary(18_000, 0, &[])];
        assert!(judge(&args(), std::slice::from_ref(&r), &[], &summaries).is_empty());
        assert_eq!(
            figures(&args(), std::slice::from_ref(&r), 0, &summaries, &[]),
            "1 kills, each in its own 30 s at 600 req/s (18000 requests in all): failed per kill 1 (max 10), unexplained 0; \
             marked DOWN 100 ms after the kill; own /ready 200 700 ms after the kill; in rotation 500 ms after /ready 200 (max 3000); \
             FP 0 FN 0, p99 up to 2.50 ms"
        );
        r.restarts = 0;
        r.failed = 11;
        let problems = judge(&args(), &[r], &[f], &[k6::resilience_summary(10, 2, &[])]);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("11 requests failed (max 10)") && problems[3] == "FP 2 FN 0");
    }

    #[test]
    fn failures_go_to_the_kill_before_them() {
        let f = |t| Failure { start_ms: t, took_ms: 1, status: 0, error: "EOF".into() };
        let (per, none) = attribute(&[1000, 5000], &[f(500), f(950), f(1020), f(5010), f(9000)]);
        assert_eq!(none.len(), 1);
        assert_eq!(per[0].len(), 2);
        assert_eq!(per[1].len(), 2);
    }
}
