//! `cargo xtask stack overload`: 3x the contest peak, then recovery (docs/RESILIENCE.md); k6 at
//! the peak throughout, wrk adding 2x (k6 alone cannot offer 3x beside the stack here).

use super::k6::{self, Summary, Window};
use super::load::{memory_figures, wait_traffic, Container, Session};
use super::Common;
use crate::prelude::*;

const RATE: u32 = super::SMOKE_RATE;
/// Seconds at the peak before the overload, of overload, and at the peak after it.
const BEFORE: u32 = 10;
const OVER: u32 = 10;
const AFTER: u32 = 15;
/// wrk's connections, each pausing `WRK_DELAY_MS` before each request (up to 100 req/s each).
const WRK_CONNECTIONS: u32 = 26;
const WRK_DELAY_MS: u32 = 10;
/// A second with p99 under this is recovered; the first must start within `RECOVER_S` s. Where
/// the seconds before the overload were already slower (a busy machine: their median p99 over
/// half of it), recovered is back under `BASELINE_FACTOR` times that median: the gate asks for the
/// stack as it was before, and a stack that stays slow after the overload still fails.
const MAX_P99_MS: f64 = 5.0;
const BASELINE_FACTOR: f64 = 2.0;
const RECOVER_S: f64 = 2.0;

/// The median p99 of the whole seconds before the overload starts (`start_s`).
pub fn baseline_p99(windows: &[Window], start_s: f64) -> Option<f64> {
    let mut p99: Vec<f64> =
        windows.iter().filter(|w| f64::from(w.w + 1) <= start_s.floor()).map(|w| w.p99).collect();
    p99.sort_by(f64::total_cmp);
    p99.get(p99.len() / 2).copied()
}

/// The p99 a second after the overload must be under to count as recovered.
pub fn recovery_threshold(baseline_p99_ms: Option<f64>) -> f64 {
    MAX_P99_MS.max(BASELINE_FACTOR * baseline_p99_ms.unwrap_or(0.0))
}

/// The first whole second after the overload with p99 under `max_p99` and no error.
#[derive(Debug, Serialize, PartialEq)]
pub struct Recovery {
    pub first_ok_window: Option<u32>,
    pub after_end_s: Option<f64>,
    pub worst_later_p99_ms: Option<f64>,
}

pub fn recovery(windows: &[Window], end_s: f64, last_w: u32, max_p99: f64) -> Recovery {
    let after: Vec<&Window> =
        windows.iter().filter(|w| f64::from(w.w) >= end_s.ceil() && w.w < last_w).collect();
    let first = after.iter().find(|w| w.p99 < max_p99 && w.errors == 0);
    let later =
        |f: &&Window| after.iter().filter(|w| w.w > f.w).map(|w| w.p99).max_by(f64::total_cmp);
    Recovery {
        first_ok_window: first.map(|w| w.w),
        after_end_s: first.map(|w| f64::from(w.w) - end_s),
        worst_later_p99_ms: first.and_then(later),
    }
}

/// User + system CPU seconds of the children waited for so far.
fn children_cpu_s() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| t(u.user_time()) + t(u.system_time()))
}

/// What the load gave: both summaries, when wrk ran (Unix ms), the generators' CPU.
#[derive(Serialize)]
pub struct Loaded {
    pub summary: Summary,
    pub wrk: WrkSummary,
    #[serde(skip)]
    pub span: (u64, u64),
    pub k6_cpu_s: f64,
    pub wrk_cpu_s: f64,
    #[serde(skip)]
    pub k6_status: std::process::ExitStatus,
}

#[derive(Debug, PartialEq, Serialize)]
pub struct Measured {
    pub over_start_s: f64,
    pub over_end_s: f64,
    pub offered_rps: f64,
    pub served_rps: f64,
    pub k6_overload_rps: f64,
    pub p99_during_max_ms: f64,
    /// The median p99 of the seconds before the overload.
    pub baseline_p99_ms: Option<f64>,
    pub recovery: Recovery,
}

pub fn run(common: Common) -> Result<()> {
    let Some(mut s) = Session::gate("overload", &common, true)? else { return Ok(()) };
    let monitor = s.monitor(Duration::from_millis(250), false, true)?;
    // The bodies written before the run, so that wrk starts at once when the overload is due.
    let loaded = load(&s, &bodies(400)?)?;
    std::thread::sleep(Duration::from_secs(1));
    let (samples, containers, m) = (monitor.stop(), s.containers()?, measure(&loaded));
    let not_up = samples.iter().filter(|s| s.servers().any(|v| !v.up())).count();
    s.problems.extend(judge(&m, &containers, loaded.k6_status));
    let figures = figures(&m, &loaded, &containers, not_up, &s.problems);
    let windows =
        loaded.summary.windows.iter().map(|w| format!("{}:{}/{}/{:.1}", w.w, w.n, w.errors, w.p99));
    log!("per second (w: n/errors/p99 ms): {}", windows.collect::<Vec<_>>().join(" "));
    let report = serde_json::json!({"rate": RATE, "measured": m, "loaded": loaded, "containers": containers});
    s.finish("overload", &figures, report)
}

/// k6 at the peak throughout, wrk adding the overload in the middle.
fn load(s: &Session, bodies: &Path) -> Result<Loaded> {
    log!("overload: {RATE} req/s, 3x for {OVER} s after {BEFORE} s (load {})", util::loadavg());
    // Children's rusage grows when a child is waited for (wrk, then k6).
    let (cpu0, k6) = (children_cpu_s(), k6::steady(RATE, BEFORE + OVER + AFTER, &[], &s.base)?);
    // k6 starts sending a few seconds after it starts (it loads the test set first).
    wait_traffic(&s.compose)?;
    std::thread::sleep(Duration::from_secs(BEFORE.into()));
    let (t0, wrk) = (util::now_ms(), run_wrk(bodies, &k6::file(&s.base, "wrk.log"))?);
    let (span, wrk_cpu_s) = ((t0, util::now_ms()), children_cpu_s() - cpu0);
    let (k6_status, summary) = k6::finish(&k6, &s.base)?;
    let k6_cpu_s = children_cpu_s() - cpu0 - wrk_cpu_s;
    Ok(Loaded { summary, wrk, span, k6_cpu_s, wrk_cpu_s, k6_status })
}

pub fn measure(l: &Loaded) -> Measured {
    let t0 = l.summary.t0_ms as f64;
    let (start_s, end_s) = ((l.span.0 as f64 - t0) / 1000.0, (l.span.1 as f64 - t0) / 1000.0);
    let windows = &l.summary.windows;
    let inside =
        |w: &&Window| f64::from(w.w) >= start_s.ceil() && f64::from(w.w + 1) <= end_s.floor();
    let during: Vec<&Window> = windows.iter().filter(inside).collect();
    let mean = |f: &dyn Fn(&Window) -> f64| {
        during.iter().map(|w| f(w)).sum::<f64>() / during.len().max(1) as f64
    };
    let (k6_rps, k6_served) = (mean(&|w| w.n as f64), mean(&|w| (w.n - w.errors) as f64));
    let (wrk_offered, wrk_served) = l.wrk.rates();
    let baseline_p99_ms = baseline_p99(windows, start_s);
    let under = recovery_threshold(baseline_p99_ms);
    Measured {
        over_start_s: start_s,
        over_end_s: end_s,
        offered_rps: k6_rps + wrk_offered,
        served_rps: k6_served + wrk_served,
        k6_overload_rps: k6_rps,
        p99_during_max_ms: during.iter().map(|w| w.p99).fold(0.0, f64::max),
        baseline_p99_ms,
        recovery: recovery(windows, end_s, BEFORE + OVER + AFTER, under),
    }
}

/// The gate's problems: any container trouble, a late or no recovery, k6 failing.
pub fn judge(m: &Measured, c: &[Container], k6: std::process::ExitStatus) -> Vec<String> {
    let mut problems: Vec<String> = c.iter().filter_map(Container::trouble).collect();
    let under = recovery_threshold(m.baseline_p99_ms);
    match m.recovery.after_end_s {
        Some(s) if s <= RECOVER_S => {}
        Some(s) => problems.push(format!(
            "p99 back under {under:.1} ms only {s:.1} s after the overload (max {RECOVER_S})"
        )),
        None => problems.push(format!("p99 never back under {under:.1} ms after the overload")),
    }
    problems.extend((!k6.success()).then(|| format!("k6 exited {k6}")));
    problems
}

pub fn figures(m: &Measured, l: &Loaded, c: &[Container], not_up: usize, p: &[String]) -> String {
    let (s, r) = (&l.summary, &m.recovery);
    let generators = format!("k6 {:.0} + wrk {:.0}", m.k6_overload_rps, l.wrk.rates().0);
    let back = r.after_end_s.map_or("never".into(), |s| format!("{s:.1} s"));
    let later = r.worst_later_p99_ms.map_or("-".into(), |p| format!("{p:.2} ms"));
    let before = m.baseline_p99_ms.map_or("-".into(), |p| format!("{p:.2} ms"));
    let under = recovery_threshold(m.baseline_p99_ms);
    let restarts: u32 = c.iter().map(|c| c.restarts).sum();
    let ooms: u64 = c.iter().map(Container::oom_kills).sum();
    let (offered, served, during) = (m.offered_rps, m.served_rps, m.p99_during_max_ms);
    let (length, wrk_errors, errors, fp, fn_) =
        (m.over_end_s - m.over_start_s, l.wrk.errors(), s.errors, s.fp, s.fn_);
    let (memory, problems) = (memory_figures(c), util::problems_suffix(p));
    let (k6_cpu, wrk_cpu) = (l.k6_cpu_s, l.wrk_cpu_s);
    format!(
        "offered {offered:.0} req/s for {length:.1} s ({generators}), served {served:.0} req/s; errors k6 {errors} wrk {wrk_errors}, FP {fp} FN {fn_}; \
         p99 per second before {before} (median), during up to {during:.1} ms; back under {under:.1} ms {back} after the end (max {RECOVER_S} s), later seconds up to {later}; \
         peak memory {memory}; restarts {restarts}, OOM kills {ooms}, samples with a server not UP {not_up}; \
         generator CPU k6 {k6_cpu:.1} s, wrk {wrk_cpu:.1} s{problems}"
    )
}

/// The `WRKJSON {...}` line of wrk-post.lua's `done()`.
#[derive(Serialize)]
pub struct WrkSummary(serde_json::Value);

impl WrkSummary {
    fn n(&self, k: &str) -> f64 {
        self.0[k].as_f64().unwrap_or(0.0)
    }
    /// Requests per second offered, and answered 200.
    pub fn rates(&self) -> (f64, f64) {
        let s = self.n("duration_us") / 1e6;
        (self.n("requests") / s, self.n("status200") / s)
    }
    pub fn errors(&self) -> u64 {
        let each = ["non200", "connect", "read", "write", "timeout"].map(|k| self.n(k));
        each.iter().sum::<f64>() as u64
    }
}

pub fn parse_wrk(output: &str) -> Result<WrkSummary> {
    let line = output.lines().find_map(|l| l.strip_prefix("WRKJSON "));
    let line = line.context("wrk printed no WRKJSON line")?;
    serde_json::from_str(line).map(WrkSummary).context("parsing wrk's WRKJSON line")
}

/// `n` compact request bodies spread over the test set, one per line (written once).
fn bodies(n: usize) -> Result<PathBuf> {
    let out = util::target_dir().join(format!("stack-data/wrk-bodies-{n}.txt"));
    if out.exists() {
        return Ok(out);
    }
    let entries = util::test_entries()?;
    fs::create_dir_all(out.parent().context("no parent")?)?;
    let mut f = std::io::BufWriter::new(fs::File::create(&out)?);
    for i in util::spread(entries.len(), n) {
        writeln!(f, "{}", serde_json::from_str::<serde_json::Value>(entries[i].request.get())?)?;
    }
    f.flush()?;
    Ok(out)
}

/// A paced wrk run with the `bodies` file, for the overload; output kept in `log`.
fn run_wrk(bodies: &Path, log: &Path) -> Result<WrkSummary> {
    let (c, d, script) =
        (format!("-c{WRK_CONNECTIONS}"), format!("-d{OVER}s"), root().join("k6/wrk-post.lua"));
    let e =
        duct::cmd!("wrk", "-t2", c, d, "--timeout", "2s", "-s", script, "http://127.0.0.1:9999");
    let e = e.env("WRK_BODIES", bodies).env("WRK_DELAY_MS", WRK_DELAY_MS.to_string());
    let out = e.stdout_capture().stderr_capture().unchecked().run().context("cannot start wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    fs::write(log, format!("{text}{}", String::from_utf8_lossy(&out.stderr)))?;
    parse_wrk(&text)
}
