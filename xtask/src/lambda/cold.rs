//! `cargo xtask lambda cold-start`: starts from cold storage, the lazy index against
//! `FRAUD_PREFAULT=1`, alternated (ABBA: lazy, prefault, prefault, lazy, ...).
//!
//! Before every start the page cache is dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`,
//! root), so the bootstrap's 90 MB of index pages come from the disk as on a new Lambda
//! execution environment, where they come from the function's code storage. Each start: a
//! fresh emulator, `GET /ready` (the first invocation carries the init, and reads nothing of the
//! index), then `--queries` public payloads through the Function URL event format, then the
//! same payloads again (warm, for comparison). Figures per start: the emulator's INIT REPORT,
//! the bootstrap's own init time, and the sums of the emulator's `Duration` (and of the client
//! round trips) over the first 1, 10 and 100 queries; medians per mode over the starts.

use super::emulator::{Emulator, Settings};
use super::events::{self, quantile, Answer, Templates};
use super::run::ms;
use super::{logs, package, sam, tools, work_dir};
use crate::report::verdict;
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
#[derive(Clone, Debug, Serialize)]
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

pub fn run(a: Args) -> Result<()> {
    ensure!(
        a.starts > 0 && a.queries >= 10,
        "need --starts >= 1 and --queries >= 10"
    );
    let t = Instant::now();
    drop_caches().context("dropping the page cache needs root")?;
    let tools = tools::ensure()?;
    let pkg = if a.skip_build {
        package::existing()?
    } else {
        package::build()?
    };
    let want = logs::Expected::of(&pkg.index_artifact)?;
    let defaults = sam::defaults()?;
    let entries = events::test_entries()?;
    let picked = events::spread(&entries, a.queries, false);
    let templates = Templates::load()?;
    // The Function URL format (index 2 of events::SOURCES), the template's default endpoint.
    let bodies: Vec<Vec<u8>> = picked
        .iter()
        .map(|&i| templates.event(2, entries[i].request.get()))
        .collect();
    let ready = events::read_event("function-url/ready.json")?;
    let loadavg_before = crate::stack::loadavg();
    crate::log!("load average before: {loadavg_before}");

    let mut starts = Vec::new();
    for i in 0..a.starts {
        let order = if i % 2 == 0 {
            [Mode::Lazy, Mode::Prefault]
        } else {
            [Mode::Prefault, Mode::Lazy]
        };
        for mode in order {
            let settings = Settings {
                memory_mb: defaults.memory_mb,
                timeout_s: defaults.timeout_s,
                prefault: mode == Mode::Prefault,
                cpus: None,
            };
            drop_caches()?;
            let log = work_dir()?.join(format!("cold-{i}-{mode:?}.log"));
            let mut emu = Emulator::start(&tools.rie, &pkg.dir, &settings, log)?;
            emu.wait_listening()?;
            let (raw, first) = emu.invoke(&ready)?;
            ensure!(Answer::parse(&raw)?.status == 200, "GET /ready failed");
            let mut rtts = Vec::new();
            for (q, body) in bodies.iter().chain(bodies.iter()).enumerate() {
                let (raw, rtt) = emu.invoke(body)?;
                let answer = Answer::parse(&raw)?;
                let entry = &entries[picked[q % picked.len()]];
                ensure!(
                    entry.matches(&answer),
                    "wrong answer {answer:?} in start {i} {mode:?}"
                );
                rtts.push(ms(rtt));
            }
            let rss_file_mb = emu
                .bootstrap_memory()
                .map_or(f64::NAN, |m| m.rss_file_kb as f64 / 1024.0);
            let log = emu.stop()?;
            let n = bodies.len();
            ensure!(
                log.durations_ms.len() == 1 + 2 * n,
                "{} REPORT lines, want {}",
                log.durations_ms.len(),
                1 + 2 * n
            );
            let report = logs::check(&log, &vec![200; 1 + 2 * n], &want, settings.prefault);
            if let Some(p) = report.problems.first() {
                bail!("start {i} {mode:?}: {p}");
            }
            let cold = &log.durations_ms[1..=n];
            let sums = |v: &[f64]| [v[..1].iter().sum(), v[..10].iter().sum(), v.iter().sum()];
            let start = Start {
                mode,
                init_report_ms: log.init_report_ms.context("no INIT REPORT line")?,
                bootstrap_init_ms: report.init.map_or(f64::NAN, |i| i.init_us as f64 / 1000.0),
                first_invoke_ms: ms(first),
                duration_sum_ms: sums(cold),
                rtt_sum_ms: sums(&rtts[..n]),
                init_plus_n_ms: log.init_report_ms.unwrap_or(f64::NAN) + cold.iter().sum::<f64>(),
                warm_duration_sum_ms: log.durations_ms[n + 1..].iter().sum(),
                rss_file_mb,
            };
            crate::log!(
                "start {} {:?}: init {:.1} ms (bootstrap {:.1}), first query {:.2} ms, first 10 {:.1} ms, first {n} {:.1} ms (warm {:.1} ms)",
                i + 1,
                mode,
                start.init_report_ms,
                start.bootstrap_init_ms,
                start.duration_sum_ms[0],
                start.duration_sum_ms[1],
                start.duration_sum_ms[2],
                start.warm_duration_sum_ms
            );
            starts.push(start);
        }
    }
    let summary: Vec<Summary> = [Mode::Lazy, Mode::Prefault]
        .into_iter()
        .map(|m| summarize(m, &starts))
        .collect();
    let batch = Batch {
        date: crate::stack::utc_date(),
        loadavg_before,
        queries: a.queries,
        bootstrap_sha256: pkg.sha256.clone(),
        starts,
        summary,
    };
    let table = markdown(&batch);
    println!("{table}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &table)?;
        crate::log!("wrote {}", path.display());
    }
    let (l, p) = (&batch.summary[0].median, &batch.summary[1].median);
    let figures = format!(
        "{} starts per mode, medians lazy/prefault: init {:.1}/{:.1} ms, first query {:.2}/{:.2} ms, first 10 {:.1}/{:.1} ms, first {} {:.1}/{:.1} ms, init + first {} {:.1}/{:.1} ms; {:.0} s",
        a.starts,
        l.init_report_ms,
        p.init_report_ms,
        l.duration_sum_ms[0],
        p.duration_sum_ms[0],
        l.duration_sum_ms[1],
        p.duration_sum_ms[1],
        a.queries,
        l.duration_sum_ms[2],
        p.duration_sum_ms[2],
        a.queries,
        l.init_plus_n_ms,
        p.init_plus_n_ms,
        t.elapsed().as_secs_f64()
    );
    verdict("lambda cold-start", true, &figures, &batch)
}

/// Empties the page cache (after writing dirty pages back).
fn drop_caches() -> Result<()> {
    crate::cmd::run(&mut crate::cmd::cmd("sync", [] as [&str; 0]))?;
    std::fs::write("/proc/sys/vm/drop_caches", "3")?;
    Ok(())
}

// `len() % 2` rather than `is_multiple_of` (Rust 1.87): the workspace builds with 1.85.
#[allow(clippy::manual_is_multiple_of)]
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.len() % 2 == 0 && !v.is_empty() {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    } else {
        quantile(&v, 0.5)
    }
}

fn summarize(mode: Mode, starts: &[Start]) -> Summary {
    let of: Vec<&Start> = starts.iter().filter(|s| s.mode == mode).collect();
    let med = |f: &dyn Fn(&Start) -> f64| median(of.iter().map(|s| f(s)).collect());
    Summary {
        starts: of.len(),
        median: Start {
            mode,
            init_report_ms: med(&|s| s.init_report_ms),
            bootstrap_init_ms: med(&|s| s.bootstrap_init_ms),
            first_invoke_ms: med(&|s| s.first_invoke_ms),
            duration_sum_ms: [0, 1, 2].map(|k| med(&|s| s.duration_sum_ms[k])),
            rtt_sum_ms: [0, 1, 2].map(|k| med(&|s| s.rtt_sum_ms[k])),
            init_plus_n_ms: med(&|s| s.init_plus_n_ms),
            warm_duration_sum_ms: med(&|s| s.warm_duration_sum_ms),
            rss_file_mb: med(&|s| s.rss_file_mb),
        },
    }
}

/// The batch as Markdown: medians, then every start.
fn markdown(b: &Batch) -> String {
    let n = b.queries;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Medians over {} starts per mode ({}; page cache dropped before each start; load average before {}; bootstrap sha256 {}):\n",
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
    let _ = writeln!(
        s,
        "\nQuery figures are sums of the emulator's `Duration`; client round-trip sums (first 1 / 10 / {n}) are in the rows below.\n"
    );
    let _ = writeln!(s, "| # | mode | init | bootstrap init | first invocation | Duration sum 1 / 10 / {n} | round trips 1 / 10 / {n} | warm {n} | file RSS |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for (i, st) in b.starts.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {:?} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} / {:.1} / {:.1} ms | {:.2} / {:.1} / {:.1} ms | {:.1} ms | {:.1} MB |",
            i + 1,
            st.mode,
            st.init_report_ms,
            st.bootstrap_init_ms,
            st.first_invoke_ms,
            st.duration_sum_ms[0],
            st.duration_sum_ms[1],
            st.duration_sum_ms[2],
            st.rtt_sum_ms[0],
            st.rtt_sum_ms[1],
            st.rtt_sum_ms[2],
            st.warm_duration_sum_ms,
            st.rss_file_mb
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_even_and_odd_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
