//! `cargo xtask lambda cold-start`: starts from cold storage, the lazy index against
//! `FRAUD_PREFAULT=1`, alternated (ABBA: lazy, prefault, prefault, lazy, ...).
//!
//! Before every start the page cache is dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`,
//! root), so the bootstrap's index pages come from the disk as on a new Lambda execution
//! environment, where they come from the function's code storage. Each start: a fresh emulator,
//! `GET /ready` (the first invocation carries the init, and reads nothing of the index), then
//! `--queries` public payloads through the Function URL event format, then the same payloads
//! again (warm, for comparison). Figures per start: the emulator's INIT REPORT, the bootstrap's
//! own init time, and the sums of the emulator's `Duration` (and of the client round trips) over
//! the first 1, 10 and 100 queries; medians per mode over the starts.

use crate::lambda::emulator::{Emulator, Settings};
use crate::lambda::events::{self, Answer, Templates};
use crate::lambda::sam::{self, Tools};
use crate::lambda::{logs, package};
use crate::util::{self, cmd, log, median, ms};
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Starts per mode.
    #[arg(long, default_value_t = 10)]
    starts: usize,
    /// Queries after each start (figures for the first 1, 10 and this many).
    #[arg(long, default_value_t = 100)]
    queries: usize,
    /// Use the last build's package as it is.
    #[arg(long)]
    skip_build: bool,
    /// Also write the raw batch as Markdown here (docs/results/<date>-lambda-cold-start.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Lazy,
    Prefault,
}

/// One start, or the medians of a mode's starts.
#[derive(Clone, Debug, PartialEq, Serialize)]
struct Start {
    mode: Mode,
    /// Emulator INIT REPORT: exec of the bootstrap to its first request for work.
    init_report_ms: f64,
    /// The bootstrap's own init (main to "index ready"), from its log line.
    bootstrap_init_ms: f64,
    /// Round trip of the first invocation (exec, init, GET /ready).
    first_invoke_ms: f64,
    /// Emulator `Duration` summed over the first 1, 10 and N queries.
    duration_sum_ms: [f64; 3],
    /// Client round trips summed over the first 1, 10 and N queries.
    rtt_sum_ms: [f64; 3],
    /// Init plus the first N queries' Duration: what a cold environment spends before its N-th
    /// answer.
    init_plus_n_ms: f64,
    /// The same N queries again, page cache warm: Duration sum.
    warm_duration_sum_ms: f64,
    /// Bootstrap RSS after the queries (file-backed = index pages touched).
    rss_file_mb: f64,
}

#[derive(Serialize)]
struct Summary {
    starts: usize,
    median: Start,
}

#[derive(Serialize)]
struct Batch {
    date: String,
    loadavg_before: String,
    queries: usize,
    bootstrap_sha256: String,
    starts: Vec<Start>,
    summary: Vec<Summary>,
}

/// What every start uses: the tools, the package and the queries with their answers.
struct Setup {
    tools: Tools,
    pkg: package::Package,
    want: logs::Expected,
    defaults: sam::Defaults,
    ready: Vec<u8>,
    /// The Function URL event of each query, and the labeller's answer to it.
    queries: Vec<(Vec<u8>, bool, f64)>,
}

pub fn run(a: Args) -> Result<()> {
    ensure!(a.starts > 0 && a.queries >= 10, "need --starts >= 1 and --queries >= 10");
    let t = Instant::now();
    drop_caches().context("dropping the page cache needs root")?;
    let tools = Tools::ensure()?;
    let pkg = if a.skip_build { package::existing()? } else { package::build()? };
    let entries = util::test_entries()?;
    let templates = Templates::load()?;
    // The Function URL format (index 2 of events::SOURCES), the template's default endpoint.
    let query = |i: usize| {
        let e = &entries[i];
        (templates.event(2, e.request.get()), e.expected_approved, e.expected_fraud_score)
    };
    let setup = Setup {
        want: logs::Expected::of(&pkg.index_artifact)?,
        defaults: sam::defaults()?,
        ready: events::read_event("function-url/ready.json")?,
        queries: events::spread(&entries, a.queries, false).into_iter().map(query).collect(),
        tools,
        pkg,
    };
    let loadavg_before = util::loadavg();
    log!("load average before: {loadavg_before}");
    let mut starts = Vec::new();
    for i in 0..a.starts {
        let order = [[Mode::Lazy, Mode::Prefault], [Mode::Prefault, Mode::Lazy]][i % 2];
        for mode in order {
            starts.push(one_start(&setup, i, mode)?);
        }
    }
    let summary = [Mode::Lazy, Mode::Prefault].map(|m| summarize(m, &starts)).into();
    let date = util::date();
    let sha = setup.pkg.sha256.clone();
    let batch =
        Batch { date, loadavg_before, queries: a.queries, bootstrap_sha256: sha, starts, summary };
    let table = markdown(&batch);
    println!("{table}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &table)?;
        log!("wrote {}", path.display());
    }
    util::verdict("lambda cold-start", true, &figures(&batch, t.elapsed().as_secs_f64()), &batch)
}

/// One start from cold storage in `mode`: init, the queries, the same queries warm.
fn one_start(s: &Setup, i: usize, mode: Mode) -> Result<Start> {
    let prefault = mode == Mode::Prefault;
    let settings = Settings {
        memory_mb: s.defaults.memory_mb,
        timeout_s: s.defaults.timeout_s,
        prefault,
        cpus: None,
    };
    drop_caches()?;
    let log = util::xtask_dir("lambda")?.join(format!("cold-{i}-{mode:?}.log"));
    let mut emu = Emulator::start(&s.tools.rie, &s.pkg.dir, &settings, log)?;
    emu.wait_listening()?;
    let (raw, first) = emu.invoke(&s.ready)?;
    ensure!(Answer::parse(&raw)?.status == 200, "GET /ready failed");
    let mut rtts = Vec::new();
    for (body, approved, score) in s.queries.iter().chain(&s.queries) {
        let (raw, rtt) = emu.invoke(body)?;
        let answer = Answer::parse(&raw)?;
        ensure!(
            events::matches(&answer, *approved, *score),
            "wrong answer {answer:?} in start {i} {mode:?}"
        );
        rtts.push(ms(rtt));
    }
    let rss_file_mb = emu.bootstrap_memory().map_or(f64::NAN, |m| m.rss_file_kb as f64 / 1024.0);
    let log = emu.stop()?;
    let n = s.queries.len();
    let reports = log.durations_ms.len();
    ensure!(reports == 1 + 2 * n, "{reports} REPORT lines, want {}", 1 + 2 * n);
    let report = logs::check(&log, &vec![200; 1 + 2 * n], &s.want, prefault);
    if let Some(p) = report.problems.first() {
        bail!("start {i} {mode:?}: {p}");
    }
    let init_report_ms = log.init_report_ms.context("no INIT REPORT line")?;
    let cold = &log.durations_ms[1..=n];
    let sums = |v: &[f64]| [v[..1].iter().sum(), v[..10].iter().sum(), v.iter().sum()];
    let start = Start {
        mode,
        init_report_ms,
        bootstrap_init_ms: report.init.map_or(f64::NAN, |i| i.init_us as f64 / 1000.0),
        first_invoke_ms: ms(first),
        duration_sum_ms: sums(cold),
        rtt_sum_ms: sums(&rtts[..n]),
        init_plus_n_ms: init_report_ms + cold.iter().sum::<f64>(),
        warm_duration_sum_ms: log.durations_ms[n + 1..].iter().sum(),
        rss_file_mb,
    };
    log!(
        "start {} {mode:?}: init {:.1} ms (bootstrap {:.1}), first query {:.2} ms, first 10 {:.1} ms, first {n} {:.1} ms (warm {:.1} ms)",
        i + 1,
        start.init_report_ms,
        start.bootstrap_init_ms,
        start.duration_sum_ms[0],
        start.duration_sum_ms[1],
        start.duration_sum_ms[2],
        start.warm_duration_sum_ms
    );
    Ok(start)
}

/// Empties the page cache (after writing dirty pages back).
fn drop_caches() -> Result<()> {
    util::run(&cmd!("sync"))?;
    Ok(std::fs::write("/proc/sys/vm/drop_caches", "3")?)
}

/// The medians of `mode`'s starts.
fn summarize(mode: Mode, starts: &[Start]) -> Summary {
    let of: Vec<&Start> = starts.iter().filter(|s| s.mode == mode).collect();
    let med = |f: &dyn Fn(&Start) -> f64| median(of.iter().map(|s| f(s)).collect());
    let median = Start {
        mode,
        init_report_ms: med(&|s| s.init_report_ms),
        bootstrap_init_ms: med(&|s| s.bootstrap_init_ms),
        first_invoke_ms: med(&|s| s.first_invoke_ms),
        duration_sum_ms: [0, 1, 2].map(|k| med(&|s| s.duration_sum_ms[k])),
        rtt_sum_ms: [0, 1, 2].map(|k| med(&|s| s.rtt_sum_ms[k])),
        init_plus_n_ms: med(&|s| s.init_plus_n_ms),
        warm_duration_sum_ms: med(&|s| s.warm_duration_sum_ms),
        rss_file_mb: med(&|s| s.rss_file_mb),
    };
    Summary { starts: of.len(), median }
}

fn figures(b: &Batch, seconds: f64) -> String {
    let (l, p, n) = (&b.summary[0].median, &b.summary[1].median, b.queries);
    format!(
        "{} starts per mode, medians lazy/prefault: init {:.1}/{:.1} ms, first query {:.2}/{:.2} ms, first 10 {:.1}/{:.1} ms, first {n} {:.1}/{:.1} ms, init + first {n} {:.1}/{:.1} ms; {seconds:.0} s",
        b.summary[0].starts,
        l.init_report_ms,
        p.init_report_ms,
        l.duration_sum_ms[0],
        p.duration_sum_ms[0],
        l.duration_sum_ms[1],
        p.duration_sum_ms[1],
        l.duration_sum_ms[2],
        p.duration_sum_ms[2],
        l.init_plus_n_ms,
        p.init_plus_n_ms,
    )
}

/// The batch as Markdown: medians, then every start.
fn markdown(b: &Batch) -> String {
    let n = b.queries;
    let mut s = format!(
        "Medians over {} starts per mode ({}; page cache dropped before each start; load average before {}; bootstrap sha256 {}):\n\n",
        b.summary[0].starts, b.date, b.loadavg_before, b.bootstrap_sha256
    );
    let _ = writeln!(s, "| mode | init (INIT REPORT) | bootstrap init | first invocation round trip | first query | first 10 | first {n} | init + first {n} | same {n} warm | index pages resident |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for m in b.summary.iter().map(|m| &m.median) {
        let _ = writeln!(
            s,
            "| {:?} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} MB |",
            m.mode,
            m.init_report_ms,
            m.bootstrap_init_ms,
            m.first_invoke_ms,
            m.duration_sum_ms[0],
            m.duration_sum_ms[1],
            m.duration_sum_ms[2],
            m.init_plus_n_ms,
            m.warm_duration_sum_ms,
            m.rss_file_mb
        );
    }
    let _ = writeln!(s, "\nQuery figures are sums of the emulator's `Duration`; client round-trip sums (first 1 / 10 / {n}) are in the rows below.\n");
    let _ = writeln!(s, "| # | mode | init | bootstrap init | first invocation | Duration sum 1 / 10 / {n} | round trips 1 / 10 / {n} | warm {n} | file RSS |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for (i, st) in b.starts.iter().enumerate() {
        let (d, r) = (st.duration_sum_ms, st.rtt_sum_ms);
        let _ = writeln!(
            s,
            "| {} | {:?} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} / {:.1} / {:.1} ms | {:.2} / {:.1} / {:.1} ms | {:.1} ms | {:.1} MB |",
            i + 1,
            st.mode,
            st.init_report_ms,
            st.bootstrap_init_ms,
            st.first_invoke_ms,
            d[0],
            d[1],
            d[2],
            r[0],
            r[1],
            r[2],
            st.warm_duration_sum_ms,
            st.rss_file_mb
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(mode: Mode, init: f64) -> Start {
        let sums = [init / 10.0, init, init * 10.0];
        Start {
            mode,
            init_report_ms: init,
            bootstrap_init_ms: init - 1.0,
            first_invoke_ms: init + 1.0,
            duration_sum_ms: sums,
            rtt_sum_ms: sums,
            init_plus_n_ms: init * 11.0,
            warm_duration_sum_ms: 70.0,
            rss_file_mb: 91.0,
        }
    }

    #[test]
    fn medians_per_mode_and_the_verdict_figures() {
        let starts = vec![
            start(Mode::Lazy, 10.0),
            start(Mode::Prefault, 80.0),
            start(Mode::Prefault, 82.0),
            start(Mode::Lazy, 20.0),
        ];
        let summary = vec![summarize(Mode::Lazy, &starts), summarize(Mode::Prefault, &starts)];
        assert_eq!((summary[0].starts, summary[0].median.init_report_ms), (2, 15.0));
        assert_eq!(summary[1].median.duration_sum_ms[1], 81.0);
        let b = Batch {
            date: "2026-11-30".into(),
            loadavg_before: "0.5".into(),
            queries: 100,
            bootstrap_sha256: "98de".into(),
            starts,
            summary,
        };
        assert_eq!(
            figures(&b, 120.0),
            "2 starts per mode, medians lazy/prefault: init 15.0/81.0 ms, first query 1.50/8.10 ms, first 10 15.0/81.0 ms, \
             first 100 150.0/810.0 ms, init + first 100 165.0/891.0 ms; 120 s"
        );
        let md = markdown(&b);
        assert!(md.contains("| Prefault | 81.0 ms | 80.0 ms | 82.0 ms | 8.10 ms | 81.0 ms | 810.0 ms | 891.0 ms | 70.0 ms | 91.0 MB |"), "{md}");
        assert_eq!(md.lines().filter(|l| l.starts_with("| ") && l.contains("Lazy")).count(), 3);
    }
}
