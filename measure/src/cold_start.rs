//! `cargo measure cold-start`: the Lambda bootstrap's cold starts, page cache dropped (root) as
//! on a new environment; lazy index against `FRAUD_PREFAULT=1`, alternated (ABBA), medians.

use crate::median;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;
use xtask::lambda::emulator::{self, Session, Settings};
use xtask::lambda::events::{self, Answer, Case};
use xtask::lambda::logs::{self, Init};
use xtask::lambda::package;
use xtask::lambda::sam::{self, Tools};
use xtask::util::{self, cmd, log};

#[derive(clap::Args)]
pub struct Args {
    /// Starts per mode.
    #[arg(long, default_value_t = 10)]
    starts: usize,
    /// Use the last build's package as it is.
    #[arg(long)]
    skip_build: bool,
    /// Also write the raw batch as Markdown here (docs/results/<date>-lambda-cold-start.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

/// Queries after each start (figures for the first 1, 10 and this many).
const QUERIES: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Lazy,
    Prefault,
}

/// The names of [`Start::v`], in order (ms but the last): INIT REPORT, the bootstrap's own init,
/// the first invocation, `Duration` and round-trip sums over the first 1, 10 and N queries, init
/// plus the first N, the same N warm, and file-backed RSS after them (index pages touched).
const FIGURES: &str = "init_report_ms bootstrap_init_ms first_invoke_ms duration_sum_1_ms \
    duration_sum_10_ms duration_sum_n_ms rtt_sum_1_ms rtt_sum_10_ms rtt_sum_n_ms init_plus_n_ms \
    warm_duration_sum_ms rss_file_mb";

/// Where [`Start::v`] holds the INIT REPORT, the first 10 queries' `Duration` and the index
/// pages resident.
pub const INIT_REPORT_MS: usize = 0;
pub const FIRST_10_MS: usize = 4;
pub const RSS_FILE_MB: usize = 11;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub mode: Mode,
    pub v: [f64; 12],
}

#[derive(Serialize, Deserialize)]
pub struct Summary {
    pub starts: usize,
    pub median: Start,
}

#[derive(Serialize)]
struct Batch {
    /// The names of each start's `v`.
    figures: &'static str,
    date: String,
    loadavg_before: String,
    queries: usize,
    bootstrap_sha256: String,
    starts: Vec<Start>,
    summary: Vec<Summary>,
}

pub fn run(a: Args) -> Result<()> {
    ensure!(a.starts > 0, "need --starts >= 1");
    let t = Instant::now();
    drop_caches().context("dropping the page cache needs root")?;
    let pkg = package::build(a.skip_build)?;
    let loadavg_before = util::loadavg();
    log!("load average before: {loadavg_before}");
    let (starts, summary) = cold_starts(&pkg, a.starts, true)?;
    let (date, bootstrap_sha256) = (util::date(), pkg.sha256.clone());
    let (names, queries) = (FIGURES, QUERIES);
    let batch =
        Batch { figures: names, date, loadavg_before, queries, bootstrap_sha256, starts, summary };
    let table = markdown(&batch);
    println!("{table}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &table)?;
        log!("wrote {}", path.display());
    }
    util::verdict("measure cold-start", true, &figures(&batch, t.elapsed().as_secs_f64()), &batch)
}

/// `n` starts per mode of the package's bootstrap, alternated, each from cold storage; their
/// figures and the medians per mode (lazy, prefault). `contest`: the package embeds the
/// contest's index, so each answer is held to the public set's label; the answers of an index
/// packed from other references are held to their form only (`cargo measure scale` holds that
/// index to the labeller in its exact step).
pub fn cold_starts(
    pkg: &package::Package,
    n: usize,
    contest: bool,
) -> Result<(Vec<Start>, Vec<Summary>)> {
    let tools = Tools::ensure()?;
    // GET /ready, then the queries in the Function URL format (the default endpoint), twice.
    let queries = events::replay(QUERIES, false, |_| 2)?;
    let sent = [vec![events::ready("function-url")?], queries.clone(), queries].concat();
    let (bodies, cases): (Vec<_>, Vec<Case>) = sent.into_iter().unzip();
    let index = serde_json::to_value(logs::identity(&pkg.index_artifact)?)?;
    let cases: Vec<Case> = cases.into_iter().map(|c| c.naming(&index)).collect();
    let (want, defaults) = (logs::expected(&pkg.index_artifact)?, sam::defaults()?);
    let mut starts = Vec::new();
    for i in 0..n {
        for mode in [[Mode::Lazy, Mode::Prefault], [Mode::Prefault, Mode::Lazy]][i % 2] {
            let settings = Settings { prefault: Some(mode == Mode::Prefault), ..defaults.clone() };
            let log = util::xtask_dir("lambda")?.join(format!("cold-{i}-{mode:?}.log"));
            drop_caches()?;
            let run = emulator::session(&tools.rie, &pkg.dir, &settings, &log, &bodies)?;
            starts.push(one_start(&run, &cases, contest, &want, (i, mode))?);
        }
    }
    let summary = [Mode::Lazy, Mode::Prefault].map(|m| summarize(m, &starts)).into();
    Ok((starts, summary))
}

/// Why an answer is not what `case` wants: the public set's label with the contest's index,
/// else (another index answers other labels) any fraud score.
fn failure(answer: &Result<(Answer, f64), String>, case: &Case, contest: bool) -> Option<String> {
    let (Ok((a, _)), false, true) = (answer, contest, case.event.starts_with("entry ")) else {
        return events::failure(answer, case);
    };
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap_or_default();
    let score = v["fraud_score"].as_f64().is_some_and(|s| (0.0..=1.0).contains(&s));
    let json = a.content_type.as_deref() == Some("application/json");
    let ok = a.status == 200 && json && v["approved"].is_boolean() && score;
    (!ok).then(|| {
        format!(
            "{}: got {} {:?} {}, want a fraud score",
            case.event, a.status, a.content_type, a.body
        )
    })
}

/// One start's figures: init, the queries, the same queries warm.
fn one_start(
    run: &Session,
    cases: &[Case],
    contest: bool,
    want: &Init,
    (i, mode): (usize, Mode),
) -> Result<Start> {
    if let Some(f) = run.answers.iter().zip(cases).find_map(|(a, c)| failure(a, c, contest)) {
        bail!("start {i} {mode:?}: {f}");
    }
    let rtts: Vec<f64> = run.answers.iter().flatten().map(|(_, rtt)| *rtt).collect();
    let (n, log, reports) = (QUERIES, &run.log, run.log.durations_ms.len());
    ensure!(reports == 1 + 2 * n, "{reports} REPORT lines, want {}", 1 + 2 * n);
    let report = logs::check(log, &vec![200; 1 + 2 * n], want, mode == Mode::Prefault);
    if let Some(p) = report.problems.first() {
        bail!("start {i} {mode:?}: {p}");
    }
    let init = log.init_report_ms.context("no INIT REPORT line")?;
    let boot = report.init.map_or(f64::NAN, |i| i.init_us as f64 / 1000.0);
    let (cold, warm) = (&log.durations_ms[1..=n], log.durations_ms[n + 1..].iter().sum::<f64>());
    let sums = |v: &[f64]| [v[..1].iter().sum::<f64>(), v[..10].iter().sum(), v.iter().sum()];
    let ([d1, d10, dn], [r1, r10, rn]) = (sums(cold), sums(&rtts[1..=n]));
    let rss = run.memory.map_or(f64::NAN, |m| m.rss_file_mb);
    let v = [init, boot, rtts[0], d1, d10, dn, r1, r10, rn, init + dn, warm, rss];
    log!("start {} {mode:?}: init {init:.1} ms (bootstrap {boot:.1}), first query {d1:.2} ms, first 10 {d10:.1} ms, first {n} {dn:.1} ms (warm {warm:.1} ms)", i + 1);
    Ok(Start { mode, v })
}

pub fn drop_caches() -> Result<()> {
    util::run(&cmd!("sync"))?;
    Ok(std::fs::write("/proc/sys/vm/drop_caches", "3")?)
}

fn summarize(mode: Mode, starts: &[Start]) -> Summary {
    let of: Vec<&Start> = starts.iter().filter(|s| s.mode == mode).collect();
    let v = std::array::from_fn(|k| median(of.iter().map(|s| s.v[k]).collect()));
    Summary { starts: of.len(), median: Start { mode, v } }
}

fn figures(b: &Batch, seconds: f64) -> String {
    let (l, p, n) = (b.summary[0].median.v, b.summary[1].median.v, b.queries);
    let lp = |k: usize, digits: usize| format!("{:.digits$}/{:.digits$}", l[k], p[k]);
    let (starts, [init, first, ten, all, plus]) =
        (b.summary[0].starts, [(0, 1), (3, 2), (4, 1), (5, 1), (9, 1)].map(|(k, d)| lp(k, d)));
    format!("{starts} starts per mode, medians lazy/prefault: init {init} ms, first query {first} ms, first 10 {ten} ms, first {n} {all} ms, init + first {n} {plus} ms; {seconds:.0} s")
}

fn markdown(b: &Batch) -> String {
    let (n, starts) = (b.queries, b.summary[0].starts);
    let (date, load, sha) = (&b.date, &b.loadavg_before, &b.bootstrap_sha256);
    let mut s = format!("Medians over {starts} starts per mode ({date}; page cache dropped before each start; load average before {load}; bootstrap sha256 {sha}):\n\n");
    s += &format!("| mode | init (INIT REPORT) | bootstrap init | first invocation round trip | first query | first 10 | first {n} | init + first {n} | same {n} warm | index pages resident |\n");
    s += "|---|---|---|---|---|---|---|---|---|---|\n";
    for m in b.summary.iter().map(|m| &m.median) {
        let [i, boot, first, d1, d10, dn, _, _, _, plus, warm, rss] = m.v;
        s += &format!("| {:?} | {i:.1} ms | {boot:.1} ms | {first:.1} ms | {d1:.2} ms | {d10:.1} ms | {dn:.1} ms | {plus:.1} ms | {warm:.1} ms | {rss:.1} MB |\n", m.mode);
    }
    s += &format!("\nQuery figures are sums of the emulator's `Duration`; client round-trip sums (first 1 / 10 / {n}) are in the rows below.\n\n");
    s += &format!("| # | mode | init | bootstrap init | first invocation | Duration sum 1 / 10 / {n} | round trips 1 / 10 / {n} | warm {n} | file RSS |\n");
    s += "|---|---|---|---|---|---|---|---|---|\n";
    for (k, st) in b.starts.iter().enumerate() {
        let [i, boot, first, d1, d10, dn, r1, r10, rn, _, warm, rss] = st.v;
        s += &format!("| {} | {:?} | {i:.1} ms | {boot:.1} ms | {first:.1} ms | {d1:.2} / {d10:.1} / {dn:.1} ms | {r1:.2} / {r10:.1} / {rn:.1} ms | {warm:.1} ms | {rss:.1} MB |\n", k + 1, st.mode);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(mode: Mode, init: f64) -> Start {
        let (s, e, x) = (init / 10.0, init, init * 10.0);
        let v = [init, init - 1.0, init + 1.0, s, e, x, s, e, x, init * 11.0, 70.0, 91.0];
        Start { mode, v }
    }

    #[test]
    fn another_index_is_held_to_a_score_of_any_value() {
        use xtask::lambda::events::Expect;
        let want = Expect::Json(serde_json::json!({"approved": true, "fraud_score": 0.0}));
        let case = |event: &str| Case { event: event.into(), status: 200, expect: want.clone() };
        let answer = |body: &str| {
            let json = Some("application/json".to_string());
            Ok((Answer { status: 200, content_type: json, allow: None, body: body.into() }, 1.0))
        };
        let other = answer(r#"{"approved":false,"fraud_score":0.8}"#);
        assert!(failure(&other, &case("entry 1"), false).is_none());
        assert!(failure(&other, &case("entry 1"), true).is_some());
        for body in [r#"{"error":"x"}"#, r#"{"approved":true,"fraud_score":1.2}"#] {
            assert!(failure(&answer(body), &case("entry 1"), false).is_some(), "{body}");
        }
        assert!(failure(&other, &case("function-url/ready.json"), false).is_some());
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
        assert_eq!(
            (summary[0].starts, summary[0].median.v[0], summary[1].median.v[4]),
            (2, 15.0, 81.0)
        );
        let b = Batch {
            figures: FIGURES,
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
