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

use super::compose::Compose;
use super::k6::{self, ResilienceSummary, Window};
use super::load::{memory_figures, up, wait_traffic, Container, Watch};
use super::monitor::{Config, Monitor};
use super::probe::State;
use super::{check, wrk, Common};
use crate::util::{self, log};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
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
    let after: Vec<&Window> =
        windows.iter().filter(|w| f64::from(w.w) >= end_s.ceil() && w.w < last_w).collect();
    let first = after.iter().find(ok);
    Recovery {
        first_ok_window: first.map(|w| w.w),
        after_end_s: first.map(|w| f64::from(w.w) - end_s),
        worst_later_p99_ms: first
            .and_then(|f| after.iter().filter(|w| w.w > f.w).map(|w| w.p99).max_by(f64::total_cmp)),
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

/// What the load gave: k6's summary, wrk's, when wrk ran (Unix ms), the generators' CPU.
struct Loaded {
    summary: ResilienceSummary,
    wrk: Option<wrk::Summary>,
    span: Option<(u64, u64)>,
    k6_cpu_s: f64,
    wrk_cpu_s: f64,
    k6_status: std::process::ExitStatus,
}

/// The rates and latencies of the overload, from the windows (and wrk's own count).
#[derive(Debug, PartialEq, Serialize)]
struct Measured {
    over_start_s: f64,
    over_end_s: f64,
    offered_rps: f64,
    served_rps: f64,
    k6_overload_rps: f64,
    p99_during_max_ms: f64,
    recovery: Recovery,
}

#[derive(Serialize)]
struct Report {
    generator: Generator,
    k6_cpu_s: f64,
    wrk_cpu_s: f64,
    rate: u32,
    load_start: String,
    load_end: String,
    #[serde(flatten)]
    measured: Measured,
    wrk: Option<wrk::Summary>,
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
    let base = util::xtask_dir("stack")?.join(format!("{}-overload", util::stamp()));
    let (apis, socket_dir, memory) = (compose.apis.clone(), compose.socket_dir()?, watch.cgroups());
    let (interval, out) = (Duration::from_millis(250), base.with_extension("monitor.jsonl"));
    let monitor = Monitor::start(Config { socket_dir, apis, interval, probe: false, memory, out })?;
    let load_start = util::loadavg();
    let loaded = load(&a, &compose, &base, &bodies)?;
    std::thread::sleep(Duration::from_secs(1));
    let samples = monitor.stop();
    let containers = watch.finish()?;
    drop(guard);
    let m = measure(&a, &loaded);
    let not_up =
        samples.iter().filter(|s| s.servers.values().any(|v| v.status != State::Up)).count();
    problems.extend(judge(&a, &m, &containers, loaded.k6_status));
    let figures = figures(&a, &m, &loaded, &containers, not_up, &problems);
    let w = &loaded.summary.windows;
    let windows = w.iter().map(|w| format!("{}:{}/{}/{:.1}", w.w, w.n, w.errors, w.p99));
    log!("per second (w: n/errors/p99 ms): {}", windows.collect::<Vec<_>>().join(" "));
    let Loaded { summary, wrk, k6_cpu_s, wrk_cpu_s, .. } = loaded;
    let (generator, rate, load_end) = (a.generator, a.rate, util::loadavg());
    let report = Report {
        generator,
        k6_cpu_s,
        wrk_cpu_s,
        rate,
        load_start,
        load_end,
        measured: m,
        wrk,
        containers,
        summary,
        problems: problems.clone(),
    };
    super::finish("stack overload", &base, problems.is_empty(), &figures, &report)
}

/// k6 at the peak throughout (or its own overload), wrk adding the overload in the middle.
fn load(a: &Args, compose: &Compose, base: &Path, bodies: &Path) -> Result<Loaded> {
    let total = a.before + a.over + a.after;
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
    log!(
        "overload ({:?}): {} req/s, 3x for {} s after {} s (load {})",
        a.generator,
        a.rate,
        a.over,
        a.before,
        util::loadavg()
    );
    let summary_path = base.with_extension("k6.json");
    // CPU of the generators: children's rusage grows when a child is waited for (wrk, then k6).
    let cpu0 = children_cpu_s();
    let k6 = k6::start("resilience.js", &env, &summary_path, &base.with_extension("k6.log"))?;
    let (mut wrk, mut span) = (None, None);
    if a.generator == Generator::Wrk {
        // k6 starts sending a few seconds after it starts (it loads the test set first).
        wait_traffic(compose)?;
        std::thread::sleep(Duration::from_secs(a.before.into()));
        let t0 = util::now_ms();
        wrk = Some(wrk::run(
            bodies,
            a.wrk_connections,
            a.wrk_delay_ms,
            a.over,
            &base.with_extension("wrk.log"),
        )?);
        span = Some((t0, util::now_ms()));
    }
    let wrk_cpu_s = children_cpu_s() - cpu0;
    let k6_status = k6::wait(&k6)?;
    let k6_cpu_s = children_cpu_s() - cpu0 - wrk_cpu_s;
    Ok(Loaded {
        summary: k6::read_summary(&summary_path)?,
        wrk,
        span,
        k6_cpu_s,
        wrk_cpu_s,
        k6_status,
    })
}

fn measure(a: &Args, l: &Loaded) -> Measured {
    let t0 = l.summary.t0_ms as f64;
    let (start_s, end_s) = match l.span {
        Some((s, e)) => ((s as f64 - t0) / 1000.0, (e as f64 - t0) / 1000.0),
        None => (f64::from(a.before), f64::from(a.before + a.over)),
    };
    let during: Vec<&Window> = (l.summary.windows.iter())
        .filter(|w| f64::from(w.w) >= start_s.ceil() && f64::from(w.w + 1) <= end_s.floor())
        .collect();
    let mean = |f: &dyn Fn(&Window) -> f64| {
        during.iter().map(|w| f(w)).sum::<f64>() / during.len().max(1) as f64
    };
    let k6_rps = mean(&|w| w.n as f64);
    let k6_served = mean(&|w| (w.n - w.errors) as f64);
    let (offered, served) = match &l.wrk {
        Some(w) => {
            (k6_rps + w.rate(), k6_served + w.status200 as f64 / (w.duration_us as f64 / 1e6))
        }
        None => (k6_rps, k6_served),
    };
    Measured {
        over_start_s: start_s,
        over_end_s: end_s,
        offered_rps: offered,
        served_rps: served,
        k6_overload_rps: k6_rps,
        p99_during_max_ms: during.iter().map(|w| w.p99).fold(0.0, f64::max),
        recovery: recovery(&l.summary.windows, end_s, a.before + a.over + a.after, a.max_p99_ms),
    }
}

/// The gate's problems: any container trouble, a late or no recovery, k6 failing.
fn judge(
    a: &Args,
    m: &Measured,
    containers: &[Container],
    k6: std::process::ExitStatus,
) -> Vec<String> {
    let mut problems: Vec<String> = containers.iter().filter_map(Container::trouble).collect();
    match m.recovery.after_end_s {
        Some(s) if s <= a.recover_s => {}
        Some(s) => problems.push(format!(
            "p99 back under {} ms only {s:.1} s after the overload (max {})",
            a.max_p99_ms, a.recover_s
        )),
        None => {
            problems.push(format!("p99 never back under {} ms after the overload", a.max_p99_ms))
        }
    }
    if !k6.success() {
        problems.push(format!("k6 exited {k6}"));
    }
    problems
}

fn figures(
    a: &Args,
    m: &Measured,
    l: &Loaded,
    containers: &[Container],
    not_up: usize,
    problems: &[String],
) -> String {
    let s = &l.summary;
    let generators = match &l.wrk {
        Some(w) => format!("k6 {:.0} + wrk {:.0}", m.k6_overload_rps, w.rate()),
        None => format!(
            "k6 alone, {} dropped",
            s.phases.get("overload").map_or(0, |p| p.dropped_iterations)
        ),
    };
    let back = m.recovery.after_end_s.map_or("never".into(), |s| format!("{s:.1} s"));
    let later = m.recovery.worst_later_p99_ms.map_or("-".into(), |p| format!("{p:.2} ms"));
    let restarts: u32 = containers.iter().map(|c| c.restarts).sum();
    let ooms: u64 = containers.iter().map(|c| c.after.oom_kill - c.before.oom_kill).sum();
    format!(
        "offered {:.0} req/s for {:.1} s ({generators}), served {:.0} req/s; errors k6 {} wrk {}, FP {} FN {}; \
         p99 per second during up to {:.1} ms; back under {} ms {back} after the end (max {} s), later seconds up to {later}; \
         peak memory {}; restarts {restarts}, OOM kills {ooms}, samples with a server not UP {not_up}; \
         generator CPU k6 {:.1} s, wrk {:.1} s{}",
        m.offered_rps,
        m.over_end_s - m.over_start_s,
        m.served_rps,
        s.answers.errors,
        l.wrk.as_ref().map_or(0, |w| w.errors()),
        s.answers.fp,
        s.answers.fn_,
        m.p99_during_max_ms,
        a.max_p99_ms,
        a.recover_s,
        memory_figures(containers),
        l.k6_cpu_s,
        l.wrk_cpu_s,
        util::problems_suffix(problems)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(w: u32, p99: f64, errors: u64) -> Window {
        Window { w, n: 900, errors, p50: 0.4, p99, max: p99 }
    }

    fn args() -> Args {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        Cli::parse_from(["overload"]).args
    }

    /// k6 at 900 req/s, slow for the two seconds of the overload (10-12 s) and one after it.
    fn loaded(wrk: bool) -> Loaded {
        let windows: Vec<_> =
            (0..35).map(|s| (s, 900, 0, if (10..13).contains(&s) { 40.0 } else { 1.0 })).collect();
        let wrk = wrk.then(|| serde_json::from_str(r#"{"requests":3600,"duration_us":2000000,"status200":3500,"non200":100,"connect":0,"read":0,"write":0,"timeout":0,"p50_us":800,"p99_us":4000,"max_us":9000}"#).unwrap());
        let k6_status = std::os::unix::process::ExitStatusExt::from_raw(0);
        let span = wrk.is_some().then_some((1_010_000, 1_012_000));
        Loaded {
            summary: k6::resilience_summary(31_500, 0, &windows),
            wrk,
            span,
            k6_cpu_s: 20.0,
            wrk_cpu_s: 3.0,
            k6_status,
        }
    }

    #[test]
    fn the_overload_is_measured_and_judged() {
        let (a, l) = (args(), loaded(true));
        let m = measure(&a, &l);
        assert_eq!(
            (m.over_start_s, m.over_end_s, m.offered_rps, m.served_rps),
            (10.0, 12.0, 2700.0, 2650.0)
        );
        assert_eq!((m.p99_during_max_ms, m.recovery.first_ok_window), (40.0, Some(13)));
        assert!(judge(&a, &m, &[], l.k6_status).is_empty());
        let f = figures(&a, &m, &l, &[], 0, &[]);
        assert!(f.starts_with("offered 2700 req/s for 2.0 s (k6 900 + wrk 1800), served 2650 req/s; errors k6 0 wrk 100, FP 0 FN 0;"), "{f}");
        assert!(
            f.contains(
                "back under 5 ms 1.0 s after the end (max 2 s), later seconds up to 1.00 ms"
            ),
            "{f}"
        );
        let k6_alone = figures(&a, &measure(&a, &loaded(false)), &loaded(false), &[], 0, &[]);
        assert!(k6_alone.contains("(k6 alone, 7 dropped)"), "{k6_alone}");
        let late = Measured {
            recovery: Recovery {
                first_ok_window: None,
                after_end_s: None,
                worst_later_p99_ms: None,
            },
            ..m
        };
        assert_eq!(
            judge(&a, &late, &[], l.k6_status),
            ["p99 never back under 5 ms after the overload"]
        );
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
