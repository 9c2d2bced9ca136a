//! `cargo xtask lambda`: the CI gate. Gathered first, then judged step by step (each step
//! printed with its result), then one verdict line:
//!
//! 1. SAM CLI (installed into a venv when missing) and `sam validate --lint`;
//! 2. the bootstrap build and package ([`super::package`]); its sizes against Lambda's limits;
//! 3. the emulator with that package and template.yaml's settings: the cold start (first
//!    invocation), every event in events/ against events/expected.tsv and
//!    events/hostile/expected.tsv, a replay of public payloads through the four event formats
//!    against the labeller's answers, warm timings, the bootstrap's memory, and its log
//!    ([`super::logs`]: one init line naming kernels and index, one line per failed request,
//!    none per success);
//! 4. `sam build` (what `sam deploy` uploads) and the check that its bootstrap has the SHA-256
//!    of the binary the emulator ran.

use super::emulator::{Emulator, Log, Memory, Settings};
use super::events::{self, Answer, Templates};
use super::logs;
use super::package::{self, Package};
use super::sam::{self, Tools};
use crate::util::{self, log, mb, ms, Quantiles};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct CiArgs {
    /// Public payloads replayed, spread over the test file; every entry with exactly 3 frauds
    /// in 5 is added.
    #[arg(long, env = "LAMBDA_REPLAY", default_value_t = 4000)]
    replay: usize,
    /// Use the last build's package as it is.
    #[arg(long)]
    skip_build: bool,
    /// Run the bootstrap under a CFS quota of this many CPUs, as Lambda does (memory / 1,769 MB:
    /// 0.29 at 512 MB); needs root and cgroup v1. For measurements.
    #[arg(long, env = "LAMBDA_CPUS")]
    cpus: Option<f64>,
    /// Memory the emulator reports to the function (default: template.yaml's).
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Leave out `sam build` and its SHA-256 check (for measurements; the verdict says so).
    #[arg(long)]
    no_sam_build: bool,
}

/// What the emulator run gave: each answer already held to its case (first failures kept).
#[derive(Default, Serialize)]
struct Emulated {
    listening_ms: f64,
    /// The first invocation (GET /ready): the RIE execs the bootstrap, its init, the answer.
    first_invoke_ms: f64,
    launch_to_first_response_ms: f64,
    events: usize,
    event_failures: Vec<String>,
    replayed: usize,
    mismatches: usize,
    replay_failures: Vec<String>,
    /// HTTP status of every invocation, in order, and the client's round trips of the replay.
    #[serde(skip)]
    statuses: Vec<u16>,
    #[serde(skip)]
    rtts_ms: Vec<f64>,
    memory: Option<Memory>,
    #[serde(skip)]
    log: Log,
}

/// Everything the gate gathered.
struct Gathered {
    validate: Result<String>,
    package: Result<Package>,
    settings: Option<Settings>,
    emulated: Option<Result<Emulated>>,
    expected: Option<Result<logs::Expected>>,
    /// `.aws-sam`'s bootstrap and its SHA-256; `None` when left out.
    sam_build: Option<Result<(PathBuf, String)>>,
}

/// One step's result, as printed and recorded.
#[derive(Debug, Serialize)]
struct Step {
    name: &'static str,
    ok: bool,
    result: String,
}

/// The judgement: every step, and the figures the verdict line gives.
#[derive(Default, Serialize)]
struct Judged {
    steps: Vec<Step>,
    settings: Option<Settings>,
    package: Option<Package>,
    emulated: Option<Emulated>,
    init_report_ms: Option<f64>,
    client_rtt_ms: Quantiles,
    warm_duration_ms: Quantiles,
    logs: Option<logs::Report>,
    sam_build_sha256: Option<String>,
}

impl Judged {
    fn step(&mut self, name: &'static str, ok: bool, result: impl Into<String>) {
        self.steps.push(Step { name, ok, result: result.into() });
    }
    fn passed(&self) -> usize {
        self.steps.iter().filter(|s| s.ok).count()
    }
}

pub fn run(a: CiArgs) -> Result<()> {
    let t = Instant::now();
    let g = gather(&a)?;
    let j = judge(g);
    for s in &j.steps {
        log!("{}: {}: {}", if s.ok { "ok" } else { "FAILED" }, s.name, s.result);
    }
    let ok = j.passed() == j.steps.len() && j.package.is_some();
    util::verdict("lambda", ok, &figures(&j, a.no_sam_build, t.elapsed().as_secs_f64()), &j)
}

fn gather(a: &CiArgs) -> Result<Gathered> {
    let tools = Tools::ensure()?;
    let validate = tools.validate();
    let package = if a.skip_build { package::existing() } else { package::build() };
    let mut g = Gathered {
        validate,
        package,
        settings: None,
        emulated: None,
        expected: None,
        sam_build: None,
    };
    if let Ok(pkg) = &g.package {
        let d = sam::defaults()?;
        let memory_mb = a.memory_mb.unwrap_or(d.memory_mb);
        let settings =
            Settings { memory_mb, timeout_s: d.timeout_s, prefault: d.prefault, cpus: a.cpus };
        g.emulated = Some(emulate(&tools.rie, pkg, &settings, a.replay));
        g.expected = Some(logs::Expected::of(&pkg.index_artifact));
        g.settings = Some(settings);
    }
    if a.no_sam_build {
        log!("sam build: left out (--no-sam-build)");
    } else {
        g.sam_build = Some(tools.build().and_then(|p| Ok((p.clone(), util::sha256_file(&p)?))));
    }
    Ok(g)
}

/// Starts the emulator, sends the first invocation, the events and the replay, stops it.
fn emulate(
    rie: &std::path::Path,
    pkg: &Package,
    settings: &Settings,
    replay: usize,
) -> Result<Emulated> {
    let log = util::xtask_dir("lambda")?.join("rie.log");
    let mut emu = Emulator::start(rie, &pkg.dir, settings, log.clone())?;
    log!("emulator started, log in {}", log.display());
    let mut out = Emulated { listening_ms: ms(emu.wait_listening()?), ..Emulated::default() };
    let (raw, rtt) = emu.invoke(&events::read_event("apigw-v2/ready.json")?)?;
    (out.first_invoke_ms, out.launch_to_first_response_ms) = (ms(rtt), ms(emu.launched.elapsed()));
    let first = Answer::parse(&raw)?;
    out.statuses.push(first.status);
    if first.status != 200 {
        out.event_failures.push(format!("first invocation: {first:?}"));
    }
    let answer =
        |event: &[u8]| emu.invoke(event).and_then(|(raw, rtt)| Ok((Answer::parse(&raw)?, ms(rtt))));
    for case in events::cases()? {
        out.events += 1;
        match events::read_event(&case.event).and_then(|e| answer(&e)) {
            Ok((a, _)) => {
                out.statuses.push(a.status);
                out.event_failures.extend(a.mismatch(&case));
            }
            Err(e) => out.event_failures.push(format!("{}: {e:#}", case.event)),
        }
    }
    let entries = util::test_entries()?;
    let templates = Templates::load()?;
    for (n, i) in events::spread(&entries, replay, true).into_iter().enumerate() {
        let e = &entries[i];
        out.replayed += 1;
        match answer(&templates.event(n, e.request.get())) {
            Ok((a, rtt)) => {
                out.rtts_ms.push(rtt);
                out.statuses.push(a.status);
                if !events::matches(&a, e.expected_approved, e.expected_fraud_score) {
                    out.mismatches += 1;
                    let want = format!(
                        "approved={} fraud_score={}",
                        e.expected_approved, e.expected_fraud_score
                    );
                    out.replay_failures
                        .push(format!("entry {i}: got {} {}, want {want}", a.status, a.body));
                }
            }
            Err(err) => {
                out.mismatches += 1;
                out.replay_failures.push(format!("entry {i}: {err:#}"));
            }
        }
    }
    out.memory = emu.bootstrap_memory();
    out.log = emu.stop()?;
    out.event_failures.truncate(20);
    out.replay_failures.truncate(20);
    Ok(out)
}

fn judge(g: Gathered) -> Judged {
    let mut j = Judged { settings: g.settings.clone(), ..Judged::default() };
    j.step("sam validate --lint", g.validate.is_ok(), show(&g.validate, |s| s.clone()));
    let built =
        |p: &Package| format!("{} (static x86-64), sha256 {}", p.bootstrap.display(), p.sha256);
    j.step("bootstrap build", g.package.is_ok(), show(&g.package, built));
    if let Ok(p) = &g.package {
        let direct = if p.zipped_bytes <= package::LIMIT_ZIPPED_DIRECT {
            "fits"
        } else {
            "too big, deploy through S3 as sam deploy does"
        };
        let (zipped, unzipped) = (mb(p.zipped_bytes), mb(p.unzipped_bytes));
        let sizes = format!("{zipped:.1} MB zipped (direct upload limit 50 MB: {direct}), {unzipped:.1} MB unzipped (limit 250 MB)");
        j.step(
            "package within Lambda's limits",
            p.unzipped_bytes <= package::LIMIT_UNZIPPED,
            sizes,
        );
        j.package = Some(p.clone());
    }
    match g.emulated {
        Some(Ok(e)) => {
            let prefault = g.settings.as_ref().is_some_and(|s| s.prefault);
            timing_steps(&mut j, &e);
            logs_step(&mut j, &e, g.expected.as_ref(), prefault);
            j.emulated = Some(e);
        }
        Some(Err(e)) => j.step("emulator run", false, format!("{e:#}")),
        None => {}
    }
    if let Some(built) = &g.sam_build {
        j.step("sam build", built.is_ok(), show(built, |(p, _)| p.display().to_string()));
        if let (Ok((_, sha)), Ok(p)) = (built, &g.package) {
            let result = format!(
                "sha256 {sha} (.aws-sam/build), {} (the binary the emulator ran)",
                p.sha256
            );
            j.step("sam build ships the tested bootstrap", *sha == p.sha256, result);
        }
        j.sam_build_sha256 = built.as_ref().ok().map(|(_, sha)| sha.clone());
    }
    j
}

/// The value's line, or the error's.
fn show<T>(r: &Result<T>, f: impl FnOnce(&T) -> String) -> String {
    r.as_ref().map_or_else(|e| format!("{e:#}"), f)
}

/// First invocation, events, replay, warm timings, memory.
fn timing_steps(j: &mut Judged, e: &Emulated) {
    j.init_report_ms = e.log.init_report_ms;
    j.client_rtt_ms = Quantiles::of(e.rtts_ms.clone());
    j.warm_duration_ms = Quantiles::of(e.log.durations_ms.iter().skip(1).copied().collect());
    let init = j.init_report_ms.map_or("missing".into(), |v| format!("{v:.2}"));
    let (rtt, launch) = (e.first_invoke_ms, e.launch_to_first_response_ms);
    let cold = format!("round trip {rtt:.1} ms (exec + init + answer); emulator INIT REPORT {init} ms; launch to first answer {launch:.0} ms");
    j.step("cold start (first invocation)", true, cold);
    let first = |v: &[String], what| v.first().map_or(String::new(), |f| format!("; {what}: {f}"));
    let (n, failed) = (e.events, e.event_failures.len());
    let events = first(&e.event_failures, "first failure");
    j.step(
        "events",
        failed == 0,
        format!("{}/{n} answered as expected{events}", n - failed.min(n)),
    );
    let replay = first(&e.replay_failures, "first");
    let replay = format!(
        "{} public payloads through the four event formats, {} mismatches{replay}",
        e.replayed, e.mismatches
    );
    j.step("replay", e.mismatches == 0 && e.replayed > 0, replay);
    let (w, c) = (j.warm_duration_ms, j.client_rtt_ms);
    let warm = format!(
        "emulator Duration p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={}); client round trip p50 {:.3} ms, p99 {:.3} ms",
        w.p50, w.p99, w.max, w.n, c.p50, c.p99
    );
    j.step("warm invocations", w.n + 1 == e.statuses.len(), warm);
    if let Some(m) = e.memory {
        let [peak, anon, file] =
            [m.peak_rss_kb, m.rss_anon_kb, m.rss_file_kb].map(|kb| kb as f64 / 1024.0);
        let memory = format!("peak RSS {peak:.1} MB (anon {anon:.1} MB, file-backed {file:.1} MB)");
        j.step("bootstrap memory after the replay", true, memory);
    }
}

/// The function's log against what it must say.
fn logs_step(
    j: &mut Judged,
    e: &Emulated,
    expected: Option<&Result<logs::Expected>>,
    prefault: bool,
) {
    let report = match expected {
        Some(Ok(want)) => logs::check(&e.log, &e.statuses, want, prefault),
        Some(Err(err)) => {
            logs::Report::problem(format!("cannot read the embedded artifact: {err:#}"))
        }
        None => logs::Report::problem("no embedded artifact".into()),
    };
    let init = report.init.as_ref().map_or("no init line".to_string(), |i| {
        format!(
            "init line: kernels {}, codec {}, index source sha256 {}, artifact crc32 {}, init {} us",
            i.kernels, i.codec, i.index_source_sha256, i.artifact_crc32, i.init_us
        )
    });
    let problem = report.problems.first().map_or(String::new(), |p| format!("; PROBLEM: {p}"));
    let (lines, failed, bad, other) = (
        report.failure_lines,
        report.failed_requests,
        report.bad_requests,
        report.unexpected_lines,
    );
    let ok = e.statuses.len() - failed;
    let result = format!("{init}; {lines} failure lines for {failed} failed requests ({bad} of them 400s), {other} lines for the {ok} successful ones{problem}");
    j.step("logs", report.problems.is_empty(), result);
    j.logs = Some(report);
}

fn figures(j: &Judged, no_sam_build: bool, seconds: f64) -> String {
    let mut f = format!("{}/{} steps", j.passed(), j.steps.len());
    if let Some(e) = &j.emulated {
        let events_ok = e.events - e.event_failures.len().min(e.events);
        f += &format!(
            "; events {events_ok}/{}; replay {} payloads, {} mismatches",
            e.events, e.replayed, e.mismatches
        );
    }
    if let Some(r) = &j.logs {
        f += &format!(
            "; logs: 1 init + {} failure lines for {} failed requests",
            r.failure_lines, r.failed_requests
        );
    }
    let (first, init) = (
        j.emulated.as_ref().map_or(f64::NAN, |e| e.first_invoke_ms),
        j.init_report_ms.unwrap_or(f64::NAN),
    );
    let w = j.warm_duration_ms;
    f += &format!("; cold first invocation {first:.1} ms (INIT REPORT {init:.2} ms); warm Duration p50 {:.2} ms p99 {:.2} ms", w.p50, w.p99);
    if let Some(p) = &j.package {
        f += &format!(
            "; package {:.1} MB zipped, {:.1} MB unzipped",
            mb(p.zipped_bytes),
            mb(p.unzipped_bytes)
        );
        f += &match j.sam_build_sha256.as_deref() {
            Some(s) if s == p.sha256 => format!("; sam build sha256 = tested ({})", &s[..12]),
            Some(s) => format!("; sam build sha256 {} != tested {}", &s[..12], &p.sha256[..12]),
            None if no_sam_build => "; sam build LEFT OUT (--no-sam-build)".into(),
            None => "; sam build failed".into(),
        };
    }
    f + &format!("; {seconds:.0} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","kernels":"avx2","codec":"i16","index_source_sha256":"ab","artifact_crc32":"0000000f","artifact_bytes":10,"prefault":true,"init_us":12200}}"#;
    const FAILED: &str = r#"{"level":"WARN","fields":{"message":"request failed","status":400,"method":"POST","path":"/fraud-score","field":"transaction.amount"}}"#;

    /// A run of one bad event and two replayed payloads, the second wrong when `mismatch`.
    fn gathered(mismatch: bool) -> Gathered {
        let sha = "198e69c5fa0e".repeat(5);
        let package = Package {
            sha256: sha.clone(),
            zipped_bytes: 44 << 20,
            unzipped_bytes: 92 << 20,
            ..Package::default()
        };
        let log = format!("{INIT}\nINIT REPORT(durationMs: 14.2)\n{FAILED}\n")
            + &["16.1", "0.9", "0.4", "0.5"]
                .map(|d| format!("REPORT RequestId: x\tDuration: {d} ms\n"))
                .concat();
        let emulated = Emulated {
            first_invoke_ms: 16.7,
            events: 1,
            replayed: 2,
            mismatches: mismatch.into(),
            replay_failures: if mismatch { vec!["entry 13: got 200".into()] } else { vec![] },
            statuses: vec![200, 400, 200, 200],
            rtts_ms: vec![0.7, 0.8],
            log: Log::parse(&log),
            ..Emulated::default()
        };
        let expected = logs::Expected {
            kernels: "avx2",
            codec: "i16".into(),
            index_source_sha256: "ab".into(),
            artifact_crc32: "0000000f".into(),
            artifact_bytes: 10,
        };
        Gathered {
            validate: Ok("template.yaml is a valid SAM Template".into()),
            package: Ok(package),
            settings: Some(Settings { memory_mb: 512, timeout_s: 3, prefault: true, cpus: None }),
            emulated: Some(Ok(emulated)),
            expected: Some(Ok(expected)),
            sam_build: Some(Ok((
                PathBuf::from(".aws-sam/build/FraudScoreFunction/bootstrap"),
                sha,
            ))),
        }
    }

    #[test]
    fn a_clean_run_passes_every_step_and_reports_its_figures() {
        let j = judge(gathered(false));
        let failed: Vec<_> = j.steps.iter().filter(|s| !s.ok).collect();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(j.steps.len(), 10);
        assert_eq!(
            figures(&j, false, 175.0),
            "10/10 steps; events 1/1; replay 2 payloads, 0 mismatches; logs: 1 init + 1 failure lines for 1 failed requests; \
             cold first invocation 16.7 ms (INIT REPORT 14.20 ms); warm Duration p50 0.50 ms p99 0.90 ms; \
             package 44.0 MB zipped, 92.0 MB unzipped; sam build sha256 = tested (198e69c5fa0e); 175 s"
        );
    }

    #[test]
    fn a_wrong_answer_or_another_binary_fails_its_step() {
        let j = judge(gathered(true));
        let replay = j.steps.iter().find(|s| s.name == "replay").unwrap();
        assert!(
            !replay.ok && replay.result.contains("1 mismatches; first: entry 13: got 200"),
            "{replay:?}"
        );
        let mut g = gathered(false);
        g.sam_build = Some(Ok((PathBuf::from("b"), "0".repeat(64))));
        let j = judge(g);
        assert!(!j.steps.last().unwrap().ok);
        assert!(figures(&j, false, 1.0)
            .contains("sam build sha256 000000000000 != tested 198e69c5fa0e"));
        let mut g = gathered(false);
        g.sam_build = None;
        assert!(figures(&judge(g), true, 1.0).contains("sam build LEFT OUT (--no-sam-build)"));
    }
}
