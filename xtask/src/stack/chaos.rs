//! `cargo xtask stack chaos`: SIGKILL of each API under load (docs/RESILIENCE.md), one k6 run per
//! kill so that each victim holds half of the keep-alive connections when it dies.

use super::compose::inspect;
use super::k6::{self, Failure, Summary};
use super::load::{wait_all_up, wait_traffic, Session};
use super::probe::{self, Sample, StatRow};
use super::Common;
use crate::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// Requests per second offered through HAProxy (at least 600; default the final's peak).
    #[arg(long, default_value_t = super::SMOKE_RATE)]
    rate: u32,
    #[command(flatten)]
    common: Common,
}

/// The APIs killed, in order, each under its own k6 run of `SECONDS`, `FIRST_KILL_S` seconds in.
const VICTIMS: [&str; 2] = ["api1", "api2"];
const SECONDS: u32 = 20;
const FIRST_KILL_S: u64 = 10;
/// The failures of a kill are the requests the victim was sent over its spliced connections
/// until the kernel tore it down and HAProxy closed them (docs/RESILIENCE.md): at most its share
/// of the offered rate over `TEARDOWN_MS`, each started no later than `LATE_MS` after the kill;
/// every later request must reach the other API. Both limits are about three times the worst
/// kill measured (docs/RESILIENCE.md): 10 failed at 1,130 req/s, started at most 28 ms after it.
const TEARDOWN_MS: u64 = 50;
const LATE_MS: i64 = 100;
/// Most ms from the victim's `/ready` 200 to HAProxy sending it sessions.
const MAX_ROTATION_MS: u64 = 3000;

/// Most failed requests per kill at `rate` req/s: the victim's half over [`TEARDOWN_MS`].
pub fn max_failed(rate: u32) -> usize {
    (rate as u64 * TEARDOWN_MS / 2000) as usize
}
/// A request may start a little before the kill command returns and still die with the victim.
const SLACK_MS: u64 = 200;

/// One kill; times in ms after it.
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

/// Lines the samples and failures up with one kill of `victim` at `t_kill`.
pub fn analyse(victim: &str, t_kill: u64, samples: &[Sample], failures: &[Failure]) -> KillReport {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t >= t_kill).collect();
    let is_up = |s: &Sample| s.server(victim).is_some_and(StatRow::up);
    let stot = |s: &Sample| s.server(victim).and_then(|v| v.stot).unwrap_or(0);
    let ready = |s: &Sample| s.ready.get(victim).is_some_and(probe::ok);
    let from = |start: Option<usize>, f: &dyn Fn(&Sample) -> bool| {
        start.and_then(|d| after[d..].iter().position(|s| f(s)).map(|i| d + i))
    };
    let down = from(Some(0), &|s| s.server(victim).is_some_and(StatRow::out));
    let (back, up) = (from(from(Some(0), &|s| !ready(s)), &ready), from(down, &is_up));
    // Sessions given it while out, and the first UP sample after its /ready 200 where its
    // sessions grow (the only sign it serves again when HAProxy never marked it DOWN).
    let leak = down
        .zip(up)
        .map(|(d, u)| stot(after[u.saturating_sub(1).max(d)]).saturating_sub(stot(after[d])));
    let serving = |j: &usize| is_up(after[*j]) && stot(after[*j]) > stot(after[j - 1]);
    let rel = |i: usize| after[i].t - t_kill;
    let failure = |f: &Failure| (f.start_ms as i64 - t_kill as i64, f.took_ms, f.error.clone());
    KillReport {
        victim: victim.to_string(),
        at_ms: t_kill,
        failed: failures.len(),
        failures: failures.iter().map(failure).collect(),
        down_ms: down.map(rel),
        ready_ms: back.map(rel),
        up_ms: up.map(rel),
        rotation_ms: back.and_then(|b| (b + 1..after.len()).find(serving).map(rel)),
        sessions_while_out: leak,
        restarts: 0,
    }
}

/// The failures of the kill at `t` (by start time), and those before it (unexplained).
pub fn attribute(t: u64, failures: Vec<Failure>) -> (Vec<Failure>, Vec<Failure>) {
    failures.into_iter().partition(|f| f.start_ms + SLACK_MS >= t)
}

pub fn run(a: Args) -> Result<()> {
    ensure!(a.rate >= 600, "the instance-loss gate needs at least 600 req/s");
    let Some(mut s) = Session::gate("chaos", &a.common, false)? else { return Ok(()) };
    let monitor = s.monitor(Duration::from_millis(100), true, false)?;
    log!("chaos: {} req/s for {SECONDS} s, kills {VICTIMS:?} (load {})", a.rate, s.load_start);
    let (mut kills, mut unexplained, mut summaries) = (vec![], vec![], vec![]);
    for victim in VICTIMS {
        let all_up = wait_all_up(&s.compose, Duration::from_secs(15));
        s.problems.extend(all_up.err().map(|e| format!("before killing {victim}: {e:#}")));
        let (t, failed, summary) = kill(a.rate, &mut s, victim)?;
        let (failed, before) = attribute(t, failed);
        unexplained.extend(before);
        kills.push((victim, t, failed));
        summaries.push(summary);
    }
    std::thread::sleep(Duration::from_secs(1));
    let (samples, containers) = (monitor.stop(), s.containers()?);
    let restarts = |v: &str| containers.iter().find(|c| c.service == v).map_or(0, |c| c.restarts);
    let reports = kills.into_iter().map(|(victim, t, failed)| KillReport {
        restarts: restarts(victim),
        ..analyse(victim, t, &samples, &failed)
    });
    let reports: Vec<KillReport> = reports.inspect(|r| log!("  {r:?}")).collect();
    s.problems.extend(judge(a.rate, &reports, &unexplained, &summaries));
    let figures = figures(a.rate, &reports, unexplained.len(), &summaries, &s.problems);
    let overrides = util::list(&a.common.overrides, |p| p.display().to_string());
    let report = serde_json::json!({"rate": a.rate, "seconds": SECONDS, "overrides": overrides,
        "summaries": summaries, "kills": reports, "unexplained_failures": unexplained});
    s.finish("chaos", &figures, report)
}

/// One k6 run with `victim` killed `FIRST_KILL_S` s in: the kill's time, failures, summary.
fn kill(rate: u32, s: &mut Session, victim: &str) -> Result<(u64, Vec<Failure>, Summary)> {
    let base = s.base.with_extension(victim);
    let k6 = k6::steady(rate, SECONDS, &[("LOG_FAILURES", "1".into())], &base)?;
    // The kill counts from the first requests (k6 first loads the test set for a few seconds).
    let t_traffic = wait_traffic(&s.compose)?;
    let first_kill = (t_traffic + FIRST_KILL_S * 1000).saturating_sub(util::now_ms());
    std::thread::sleep(Duration::from_millis(first_kill));
    let pid = inspect(&s.compose.id(victim)?)?["State"]["Pid"].as_u64().context("no pid")?;
    let t = util::now_ms();
    util::signal(pid as u32, nix::sys::signal::SIGKILL)?;
    log!("killed {victim} (pid {pid}) at +{:.1} s", (t - t_traffic) as f64 / 1000.0);
    let (status, summary) = k6::finish(&k6, &base)?;
    s.problems.extend((!status.success()).then(|| format!("k6 exited {status}")));
    Ok((t, k6::failures(&fs::read_to_string(k6::file(&base, "k6.log"))?), summary))
}

/// Too many failures per kill or one after the teardown, no restart, slow return to rotation,
/// early failures, wrong answers.
pub fn judge(
    rate: u32,
    reports: &[KillReport],
    unexplained: &[Failure],
    s: &[Summary],
) -> Vec<String> {
    let (mut problems, max) = (Vec::new(), max_failed(rate));
    for r in reports {
        let (v, failed, ready, up) = (&r.victim, r.failed, r.ready_ms, r.up_ms);
        let late = r.failures.iter().filter(|f| f.0 > LATE_MS).count();
        problems.extend(util::failed([
            (failed > max, format!("{v}: {failed} requests failed (max {max} at {rate} req/s)")),
            (
                late > 0,
                format!(
                    "{v}: {late} requests failed that started over {LATE_MS} ms after the kill"
                ),
            ),
            (r.restarts == 0, format!("{v}: the engine did not restart it")),
        ]));
        match r.rotation_after_ready() {
            Some(ms) if ms <= MAX_ROTATION_MS => {}
            Some(ms) => problems.push(format!("{v}: back in rotation {ms} ms after its /ready 200 (max {MAX_ROTATION_MS})")),
            None => problems.push(format!("{v}: never back in rotation (ready {ready:?} ms, UP {up:?} ms, sessions {:?} ms after the kill)", r.rotation_ms)),
        }
    }
    let ((fp, fn_), early) = (wrong_answers(s), unexplained.len());
    problems.extend(util::failed([
        (early > 0, format!("{early} requests failed before any kill")),
        (fp + fn_ > 0, format!("FP {fp} FN {fn_}")),
    ]));
    problems
}

fn wrong_answers(summaries: &[Summary]) -> (u64, u64) {
    summaries.iter().fold((0, 0), |(p, n), s| (p + s.fp, n + s.fn_))
}

pub fn figures(rate: u32, r: &[KillReport], early: usize, s: &[Summary], p: &[String]) -> String {
    let ((fp, fn_), n, problems) = (wrong_answers(s), r.len(), util::problems_suffix(p));
    let requests: u64 = s.iter().map(|s| s.requests).sum();
    let p99 = s.iter().map(|s| s.latency().p99).fold(0.0, f64::max);
    let (failed, max) = (util::list(r, |r| r.failed.to_string()), max_failed(rate));
    let each: [fn(&KillReport) -> Option<u64>; 3] =
        [|r| r.down_ms, |r| r.ready_ms, KillReport::rotation_after_ready];
    let [down, ready, rotation] =
        each.map(|f| util::list(r, |r| f(r).map_or("never".to_string(), |v| v.to_string())));
    format!(
        "{n} kills, each in its own {SECONDS} s at {rate} req/s ({requests} requests in all): failed per kill {failed} (max {max}, none started over {LATE_MS} ms after the kill), unexplained {early}; \
         marked DOWN {down} ms after the kill; own /ready 200 {ready} ms after the kill; in rotation {rotation} ms after /ready 200 (max {MAX_ROTATION_MS}); \
         FP {fp} FN {fn_}, p99 up to {p99:.2} ms{problems}"
    )
}
