//! `cargo xtask stack overload`: 3x the contest peak for 10 s, then recovery.
//!
//! k6 (`k6/resilience.js`, steady mode) sends the contest payloads at the peak rate (900 req/s)
//! for the whole run and keeps count, errors and p99 per second; after `--before` seconds, wrk
//! (`k6/wrk-post.lua`, paced: each of `--wrk-connections` connections waits `--wrk-delay-ms`
//! before each request) adds about 2x the peak for `--over` seconds, so 3x (2,700 req/s) is
//! offered. wrk is the extra generator because k6 alone cannot offer 2,700 req/s on this 2-core
//! machine next to the stack (`--generator k6` tries it: docs/RESILIENCE.md has the figures).
//! The offered and served rates are measured (k6 windows + wrk's own count), not assumed.
//!
//! Fails on any crash, restart or OOM kill (`docker inspect`, cgroup `memory.oom_control`), on
//! memory at its limit (cgroup v1 peak reset before the run, `memory.failcnt`), or if p99 is not
//! back under `--max-p99-ms` (5) in a one-second window that starts within `--recover-s` (2) of
//! the end of the overload.

use super::check;
use super::docker::Compose;
use super::k6::{self, ResilienceSummary, Window};
use super::monitor::{now_ms, Config, Monitor};
use super::run::{memory_figures, up, wait_traffic, Container, Watch};
use super::{loadavg, results_dir, utc_stamp, wrk, Common};
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, PartialEq, Eq)]
enum Generator {
    /// k6 at the peak rate throughout, wrk adding 2x the peak during the overload.
    Wrk,
    /// k6 alone offering 3x the peak during the overload (to compare generators).
    K6,
}

#[derive(clap::Args)]
pub struct Args {
    /// The contest peak (req/s): k6's steady rate; the overload offers 3x this in all.
    #[arg(long, default_value_t = 900)]
    rate: u32,
    /// Seconds at the peak rate before the overload.
    #[arg(long, default_value_t = 10)]
    before: u32,
    /// Seconds of overload.
    #[arg(long, default_value_t = 10)]
    over: u32,
    /// Seconds at the peak rate after the overload.
    #[arg(long, default_value_t = 15)]
    after: u32,
    /// Who offers the overload.
    #[arg(long, value_enum, default_value = "wrk")]
    generator: Generator,
    /// wrk connections during the overload (each paced by --wrk-delay-ms).
    #[arg(long, default_value_t = 22)]
    wrk_connections: u32,
    /// Pause of each wrk connection before each request.
    #[arg(long, default_value_t = 10)]
    wrk_delay_ms: u32,
    /// The p99 (per one-second window) that counts as recovered.
    #[arg(long, default_value_t = 5.0)]
    max_p99_ms: f64,
    /// Latest start of the first recovered window, in seconds after the overload.
    #[arg(long, default_value_t = 2.0)]
    recover_s: f64,
    #[command(flatten)]
    common: Common,
}

/// The windows' verdict on recovery: the first whole second after the overload with p99 under
/// `max_p99` and no error, how long after the end it starts, and the worst later second.
#[derive(Debug, Serialize, PartialEq)]
pub struct Recovery {
    pub first_ok_window: Option<u32>,
    pub after_end_s: Option<f64>,
    pub worst_later_p99_ms: Option<f64>,
}

pub fn recovery(windows: &[Window], end_s: f64, last_w: u32, max_p99: f64) -> Recovery {
    let ok = |w: &&&Window| w.p99 < max_p99 && w.errors == 0;
    let after: Vec<&Window> = windows
        .iter()
        .filter(|w| f64::from(w.w) >= end_s.ceil() && w.w < last_w)
        .collect();
    let first = after.iter().find(ok);
    Recovery {
        first_ok_window: first.map(|w| w.w),
        after_end_s: first.map(|w| f64::from(w.w) - end_s),
        worst_later_p99_ms: first.and_then(|f| {
            after
                .iter()
                .filter(|w| w.w > f.w)
                .map(|w| w.p99)
                .max_by(f64::total_cmp)
        }),
    }
}

/// User + system CPU seconds of the children waited for so far.
fn children_cpu_s() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

#[derive(Serialize)]
struct Report {
    generator: Generator,
    k6_cpu_s: f64,
    wrk_cpu_s: f64,
    rate: u32,
    load_start: String,
    load_end: String,
    over_start_s: f64,
    over_end_s: f64,
    offered_rps: f64,
    served_rps: f64,
    k6_overload_rps: f64,
    wrk: Option<wrk::Summary>,
    p99_during_max_ms: f64,
    recovery: Recovery,
    containers: Vec<Container>,
    summary: ResilienceSummary,
    problems: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    if !super::gate_may_run("stack overload")? {
        return Ok(());
    }
    a.common.prepare(true, a.generator == Generator::Wrk)?;
    // Written before the run, so that wrk starts at once when the overload is due.
    let bodies = wrk::bodies(400)?;
    let compose = Compose::stack(&a.common.overrides);
    let guard = up(&compose, a.common.keep)?;
    let mut problems = check::check(&compose, true)?.problems;
    let watch = Watch::start(&compose, true)?;
    let base = results_dir()?.join(format!("{}-overload", utc_stamp()));
    let monitor = Monitor::start(Config {
        socket_dir: compose.socket_dir()?,
        apis: compose.apis.clone(),
        interval: Duration::from_millis(250),
        probe: false,
        memory: watch.cgroups(),
        out: base.with_extension("monitor.jsonl"),
    })?;
    let total = a.before + a.over + a.after;
    let load_start = loadavg();
    let env: Vec<(&str, String)> = match a.generator {
        Generator::Wrk => vec![
            ("MODE", "steady".into()),
            ("RATE", a.rate.to_string()),
            ("DURATION", total.to_string()),
        ],
        Generator::K6 => vec![
            ("MODE", "overload".into()),
            ("RATE", a.rate.to_string()),
            ("BEFORE", a.before.to_string()),
            ("OVER", a.over.to_string()),
            ("AFTER", a.after.to_string()),
        ],
    };
    crate::log!(
        "overload ({:?}): {} req/s, 3x for {} s after {} s (load {load_start})",
        a.generator,
        a.rate,
        a.over,
        a.before
    );
    let summary_path = base.with_extension("k6.json");
    // CPU of the generators: children's rusage grows when a child is waited for (wrk, then k6).
    let cpu0 = children_cpu_s();
    let child = k6::spawn(&mut k6::command(
        "resilience.js",
        &env,
        &summary_path,
        &base.with_extension("k6.log"),
    )?)?;
    let mut wrk_summary = None;
    let mut span = None;
    if a.generator == Generator::Wrk {
        // k6 starts sending a few seconds after it starts (it loads the test set first).
        wait_traffic(&compose)?;
        std::thread::sleep(Duration::from_secs(a.before.into()));
        let t0 = now_ms();
        let w = wrk::run(
            &bodies,
            a.wrk_connections,
            a.wrk_delay_ms,
            a.over,
            &base.with_extension("wrk.log"),
        )?;
        span = Some((t0, now_ms()));
        wrk_summary = Some(w);
    }
    let cpu_wrk = children_cpu_s() - cpu0;
    let status = k6::wait(child)?;
    let cpu_k6 = children_cpu_s() - cpu0 - cpu_wrk;
    std::thread::sleep(Duration::from_secs(1));
    let samples = monitor.stop();
    let containers = watch.finish()?;
    drop(guard);
    let summary: ResilienceSummary = k6::read_summary(&summary_path)?;
    let (start_s, end_s) = match span {
        Some((s, e)) => (
            (s as f64 - summary.t0_ms as f64) / 1000.0,
            (e as f64 - summary.t0_ms as f64) / 1000.0,
        ),
        None => (f64::from(a.before), f64::from(a.before + a.over)),
    };
    let during: Vec<&Window> = summary
        .windows
        .iter()
        .filter(|w| f64::from(w.w) >= start_s.ceil() && f64::from(w.w + 1) <= end_s.floor())
        .collect();
    let mean = |f: &dyn Fn(&Window) -> f64| {
        during.iter().map(|w| f(w)).sum::<f64>() / during.len().max(1) as f64
    };
    let k6_rps = mean(&|w| w.n as f64);
    let k6_served = mean(&|w| (w.n - w.errors) as f64);
    let (offered, served) = match &wrk_summary {
        Some(w) => {
            let secs = w.duration_us as f64 / 1e6;
            (k6_rps + w.rate(), k6_served + w.status200 as f64 / secs)
        }
        None => (k6_rps, k6_served),
    };
    let p99_during = during.iter().map(|w| w.p99).fold(0.0, f64::max);
    let rec = recovery(&summary.windows, end_s, total, a.max_p99_ms);
    problems.extend(containers.iter().filter_map(Container::trouble));
    match rec.after_end_s {
        Some(s) if s <= a.recover_s => {}
        Some(s) => problems.push(format!(
            "p99 back under {} ms only {s:.1} s after the overload (max {})",
            a.max_p99_ms, a.recover_s
        )),
        None => problems.push(format!(
            "p99 never back under {} ms after the overload",
            a.max_p99_ms
        )),
    }
    let not_up = samples
        .iter()
        .filter(|s| s.servers.values().any(|v| v.status != "UP"))
        .count();
    if !status.success() {
        problems.push(format!("k6 exited {status}"));
    }
    let wrk_errors = wrk_summary.as_ref().map_or(0, |w| w.errors());
    let figures = format!(
        "offered {offered:.0} req/s for {:.1} s ({}), served {served:.0} req/s; errors k6 {} wrk {wrk_errors}, FP {} FN {}; \
         p99 per second during up to {p99_during:.1} ms; back under {} ms {} after the end (max {} s), later seconds up to {}; \
         peak memory {}; restarts {}, OOM kills {}, samples with a server not UP {not_up}; \
         generator CPU k6 {cpu_k6:.1} s, wrk {cpu_wrk:.1} s{}",
        end_s - start_s,
        match &wrk_summary {
            Some(w) => format!("k6 {k6_rps:.0} + wrk {:.0}", w.rate()),
            None => format!("k6 alone, {} dropped", summary.phases.get("overload").map_or(0, |p| p.dropped_iterations)),
        },
        summary.answers.errors,
        summary.answers.fp,
        summary.answers.fn_,
        a.max_p99_ms,
        rec.after_end_s.map_or("never".into(), |s| format!("{s:.1} s")),
        a.recover_s,
        rec.worst_later_p99_ms.map_or("-".into(), |p| format!("{p:.2} ms")),
        memory_figures(&containers),
        containers.iter().map(|c| c.restarts).sum::<u32>(),
        containers.iter().map(|c| c.after.oom_kill - c.before.oom_kill).sum::<u64>(),
        if problems.is_empty() { String::new() } else { format!("; problems: {}", problems.join("; ")) }
    );
    crate::log!(
        "per second (w: n/errors/p99 ms): {}",
        summary
            .windows
            .iter()
            .map(|w| format!("{}:{}/{}/{:.1}", w.w, w.n, w.errors, w.p99))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let report = Report {
        generator: a.generator,
        k6_cpu_s: cpu_k6,
        wrk_cpu_s: cpu_wrk,
        rate: a.rate,
        load_start,
        load_end: loadavg(),
        over_start_s: start_s,
        over_end_s: end_s,
        offered_rps: offered,
        served_rps: served,
        k6_overload_rps: k6_rps,
        wrk: wrk_summary,
        p99_during_max_ms: p99_during,
        recovery: rec,
        containers,
        summary,
        problems: problems.clone(),
    };
    super::finish(
        "stack overload",
        &base,
        problems.is_empty(),
        &figures,
        &report,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(w: u32, p99: f64, errors: u64) -> Window {
        Window {
            w,
            n: 900,
            errors,
            p50: 0.4,
            p99,
            max: p99,
        }
    }

    #[test]
    fn recovery_is_the_first_good_second_after_the_end() {
        let p99s = [40.0, 30.0, 3.0, 1.0, 2.5, 9.0];
        let ws: Vec<Window> = (19..).zip(p99s).map(|(s, p)| w(s, p, 0)).collect();
        let r = recovery(&ws, 19.6, 24, 5.0);
        assert_eq!(r.first_ok_window, Some(21));
        assert!((r.after_end_s.unwrap() - 1.4).abs() < 1e-9);
        assert_eq!(r.worst_later_p99_ms, Some(2.5));
        let errors = vec![w(20, 1.0, 3), w(21, 1.0, 0)];
        assert_eq!(recovery(&errors, 19.6, 30, 5.0).first_ok_window, Some(21));
        assert_eq!(recovery(&[w(20, 8.0, 0)], 19.6, 30, 5.0).after_end_s, None);
    }
}
