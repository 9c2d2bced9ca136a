//! `cargo xtask lambda`, the CI gate: sam validate, the build, the emulator run, `sam build`.

use super::emulator::{self, Session, Settings};
use super::events::{self, Case};
use super::hook;
use super::logs::{self, Init};
use super::package::{self, Package};
use super::sam::{self, Tools};
use crate::prelude::*;
use crate::util::{mb, Quantiles};
use std::collections::BTreeMap;

#[derive(clap::Args)]
pub struct CiArgs {
    /// Public payloads replayed, spread over the test file, plus every entry with 3 frauds in 5.
    #[arg(long, env = "LAMBDA_REPLAY", default_value_t = 4000)]
    replay: usize,
    /// Use the last build's package as it is.
    #[arg(long)]
    skip_build: bool,
    /// Bootstrap under a CFS quota of this many CPUs, as Lambda's memory / 1,769 MB (root, cgroup v1).
    #[arg(long, env = "LAMBDA_CPUS")]
    cpus: Option<f64>,
    /// Memory the emulator reports to the function (default: template.yaml's).
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Leave out `sam build` and its SHA-256 check (for measurements; the verdict says so).
    #[arg(long)]
    no_sam_build: bool,
    /// The function's FRAUD_METRICS_FLUSH_SECONDS (default: template.yaml's MetricsFlushSeconds):
    /// `0` writes the EMF documents after every invocation, `off` none (measurements; the
    /// metrics step is then left out, and the verdict says so).
    #[arg(long)]
    metrics_flush: Option<String>,
}

/// The emulator run, each answer's case (first invocation, `events` of events/, the replay).
struct Emulated {
    session: Session,
    cases: Vec<Case>,
    events: usize,
    expected: Result<Init>,
    settings: Settings,
}

struct Gathered {
    validate: Result<String>,
    package: Result<Package>,
    emulated: Option<Result<Emulated>>,
    /// The PreTraffic hook against the package under the emulator.
    hook: Option<Result<hook::Run>>,
    /// `.aws-sam`'s bootstrap and its SHA-256; `None` when left out.
    sam_build: Option<Result<(PathBuf, String)>>,
}

#[derive(Debug, Serialize)]
struct Step {
    name: &'static str,
    ok: bool,
    result: String,
}

#[derive(Default)]
struct Judged {
    steps: Vec<Step>,
    logs: Option<logs::Report>,
    figures: String,
}

impl Judged {
    fn step(&mut self, name: &'static str, ok: bool, result: impl Into<String>) {
        self.steps.push(Step { name, ok, result: result.into() });
    }
}

pub fn run(a: CiArgs) -> Result<()> {
    let t = Instant::now();
    let g = gather(&a)?;
    let j = judge(&g, a.no_sam_build, t.elapsed().as_secs_f64());
    for s in &j.steps {
        log!("{}: {}: {}", if s.ok { "ok" } else { "FAILED" }, s.name, s.result);
    }
    let settings = g.emulated.as_ref().and_then(|e| Some(&e.as_ref().ok()?.settings));
    let package = g.package.as_ref().ok();
    let detail = serde_json::json!({"steps": j.steps, "settings": settings, "package": package, "logs": j.logs});
    util::verdict("lambda", j.steps.iter().all(|s| s.ok), &j.figures, &detail)
}

fn gather(a: &CiArgs) -> Result<Gathered> {
    let tools = Tools::ensure()?;
    let validate = tools.validate();
    let package = package::build(a.skip_build);
    let (mut emulated, mut hook) = (None, None);
    if let Ok(pkg) = &package {
        let mut d = sam::defaults()?;
        if let Some(flush) = &a.metrics_flush {
            d.env.retain(|(k, _)| k != sam::METRICS_FLUSH);
            d.env.push((sam::METRICS_FLUSH.into(), flush.clone()));
        }
        let s = Settings { memory_mb: a.memory_mb.unwrap_or(d.memory_mb), cpus: a.cpus, ..d };
        emulated = Some(emulate(&tools, pkg, s, a.replay));
        hook = Some(check_hook(&tools.rie, &pkg.dir));
    }
    let built = || tools.build().and_then(|p| Ok((p.clone(), util::sha256_file(&p)?)));
    let sam_build = (!a.no_sam_build).then(built);
    Ok(Gathered { validate, package, emulated, hook, sam_build })
}

/// The hook of the workspace build against the scorer in `scorer_dir`, both under the emulator.
fn check_hook(rie: &Path, scorer_dir: &Path) -> Result<hook::Run> {
    let dir = package::workspace_hook()?;
    hook::run(rie, scorer_dir, &dir, &util::xtask_dir("lambda")?)
}

fn emulate(tools: &Tools, pkg: &Package, settings: Settings, n: usize) -> Result<Emulated> {
    let cases = events::cases()?.into_iter().map(|c| Ok((events::read_event(&c.event)?, c)));
    let mut sent = [vec![events::ready("apigw-v2")?], cases.collect::<Result<_>>()?].concat();
    let events = sent.len() - 1;
    sent.extend(events::replay(n, true, |k| k)?);
    let log = util::xtask_dir("lambda")?.join("rie.log");
    let index = serde_json::to_value(logs::identity(&pkg.index_artifact)?)?;
    let (bodies, cases): (Vec<_>, Vec<Case>) = sent.into_iter().unzip();
    let cases = cases.into_iter().map(|c| c.naming(&index)).collect();
    let session = emulator::session(&tools.rie, &pkg.dir, &settings, log, &bodies)?;
    let expected = logs::expected(&pkg.index_artifact).map(|want| {
        let prefault = settings.prefaults(want.artifact_bytes);
        Init { prefault, ..want }
    });
    Ok(Emulated { session, cases, events, expected, settings })
}

/// What the EMF documents of a run must sum to: the decisions and refusals its cases expect,
/// under each dimension set the function writes them with.
pub fn expected_metrics(cases: &[Case], index: &str) -> Result<BTreeMap<String, u64>> {
    let mut want = BTreeMap::new();
    let mut add = |key: String| *want.entry(key).or_insert(0) += 1;
    for c in cases {
        let (name, extra) = match (&c.expect, c.status) {
            (events::Expect::Json(v), 200) if v.get("approved").is_some() => {
                let score = v["fraud_score"].as_f64().context("a decision's score")?;
                add(format!("Decisions FraudScore={score:.1} Function={FUNCTION_NAME}"));
                (if v["approved"] == true { "Approved" } else { "Denied" }, None)
            }
            // An event's refusals: its body, or its route (no framing reaches a function).
            (_, status) if status >= 400 => {
                let reason = match status {
                    400 => "bad_body",
                    404 => "not_found",
                    405 => "method_not_allowed",
                    413 => "body_too_large",
                    415 => "unsupported_media_type",
                    _ => bail!("{}: a refusal with {status} has no reason here", c.event),
                };
                ("Rejected", Some(reason))
            }
            _ => continue,
        };
        add(format!("{name} Function={FUNCTION_NAME}"));
        add(format!("{name} Function={FUNCTION_NAME} Index={index}"));
        if let Some(reason) = extra {
            add(format!("Rejected Function={FUNCTION_NAME} Reason={reason}"));
        }
    }
    Ok(want)
}

/// The function's name in the emulator (its default `AWS_LAMBDA_FUNCTION_NAME`).
const FUNCTION_NAME: &str = "test_function";

fn judge(g: &Gathered, no_sam_build: bool, seconds: f64) -> Judged {
    let mut j = Judged::default();
    j.step("sam validate --lint", g.validate.is_ok(), show(&g.validate, |s| s.clone()));
    let built =
        |p: &Package| format!("{} (static x86-64), sha256 {}", p.bootstrap.display(), p.sha256);
    j.step("bootstrap build", g.package.is_ok(), show(&g.package, built));
    if let Ok(p) = &g.package {
        let fits = p.zipped_bytes <= package::LIMIT_ZIPPED_DIRECT;
        let direct = if fits { "fits" } else { "too big, deploy through S3 as sam deploy does" };
        let (zipped, unzipped) = (mb(p.zipped_bytes), mb(p.unzipped_bytes));
        let sizes = format!("{zipped:.1} MB zipped (direct upload limit 50 MB: {direct}), {unzipped:.1} MB unzipped (limit 250 MB)");
        let ok = p.unzipped_bytes <= package::LIMIT_UNZIPPED;
        j.step("package within Lambda's limits", ok, sizes);
    }
    if let Some(Err(e)) = &g.emulated {
        j.step("emulator run", false, format!("{e:#}"));
    }
    let emulated = g.emulated.as_ref().and_then(|e| e.as_ref().ok());
    let nothing = || (String::new(), timing(f64::NAN, None, Quantiles::default()));
    let (counts, timing) = emulated.map_or_else(nothing, |e| emulator_steps(&mut j, e));
    if let Some(run) = &g.hook {
        let said = |r: &hook::Run| {
            let (cases, wrong) = (&r.answer["cases"], &r.answer["wrong"]);
            let first = r.answer["first_wrong"].as_str().unwrap_or("none");
            format!("reported {:?} to CodeDeploy ({:?}); {cases} cases, {wrong} wrong, first wrong: {first}", r.status(), r.reported)
        };
        let passed = run.as_ref().is_ok_and(|r| {
            r.status() == Some("Succeeded")
                && r.answer["wrong"] == 0
                && r.answer["cases"].as_u64() > Some(0)
        });
        j.step("PreTraffic hook passes the package", passed, show(run, said));
    }
    if let Some(built) = &g.sam_build {
        j.step("sam build (the scorer)", built.is_ok(), show(built, |(p, _)| p.display().to_string()));
        if let (Ok((_, sha)), Ok(p)) = (built, &g.package) {
            let tested = &p.sha256;
            let result =
                format!("sha256 {sha} (.aws-sam/build), {tested} (the binary the emulator ran)");
            j.step("sam build ships the tested bootstrap", sha == tested, result);
        }
    }
    let (n, passed) = (j.steps.len(), j.steps.iter().filter(|s| s.ok).count());
    let mut f = format!("{passed}/{n} steps{counts}");
    if let Some(r) = &j.logs {
        let (lines, failed) = (r.failure_lines, r.failed_requests);
        f += &format!("; logs: 1 init + {lines} failure lines for {failed} failed requests");
    }
    f += &timing;
    if let Ok(p) = &g.package {
        let (zipped, unzipped, tested) = (mb(p.zipped_bytes), mb(p.unzipped_bytes), &p.sha256);
        f += &format!("; package {zipped:.1} MB zipped, {unzipped:.1} MB unzipped");
        f += &match g.sam_build.as_ref().and_then(|b| b.as_ref().ok()).map(|(_, s)| s) {
            Some(s) if s == tested => format!("; sam build sha256 = tested ({})", &s[..12]),
            Some(s) => format!("; sam build sha256 {} != tested {}", &s[..12], &tested[..12]),
            None if no_sam_build => "; sam build LEFT OUT (--no-sam-build)".into(),
            None => "; sam build failed".into(),
        };
    }
    j.figures = f + &format!("; {seconds:.0} s");
    j
}

fn show<T>(r: &Result<T>, f: impl FnOnce(&T) -> String) -> String {
    r.as_ref().map_or_else(|e| format!("{e:#}"), f)
}

fn timing(first: f64, init: Option<f64>, w: Quantiles) -> String {
    let (init, Quantiles { p50, p99, .. }) = (init.unwrap_or(f64::NAN), w);
    format!("; cold first invocation {first:.1} ms (INIT REPORT {init:.2} ms); warm Duration p50 {p50:.2} ms p99 {p99:.2} ms")
}

/// The emulator run's steps, and its figures: the counts, the timings.
fn emulator_steps(j: &mut Judged, e: &Emulated) -> (String, String) {
    let (s, n) = (&e.session, e.events);
    let failures: Vec<Option<String>> =
        s.answers.iter().zip(&e.cases).map(|(a, c)| events::failure(a, c)).collect();
    let (events, replay) = failures.split_at(n + 1);
    let first = |v: &[Option<String>], what| {
        v.iter().flatten().next().map_or(String::new(), |f| format!("; {what}: {f}"))
    };
    let first_ms = s.answers[0].as_ref().map_or(f64::NAN, |(_, rtt)| *rtt);
    let statuses: Vec<u16> = s.answers.iter().flatten().map(|(a, _)| a.status).collect();
    let rtts = s.answers[n + 1..].iter().flatten().map(|(_, rtt)| *rtt);
    let c = Quantiles::of(rtts.collect());
    let w = Quantiles::of(s.log.durations_ms.iter().skip(1).copied().collect());
    let init = s.log.init_report_ms.map_or("missing".into(), |v| format!("{v:.2}"));
    let launch = s.launch_to_first_ms;
    let cold = format!("round trip {first_ms:.1} ms (exec + init + answer); emulator INIT REPORT {init} ms; launch to first answer {launch:.0} ms");
    j.step("cold start (first invocation)", true, cold);
    let failed = events.iter().flatten().count();
    let events_ok = n - failed.min(n);
    let shown = first(events, "first failure");
    j.step("events", failed == 0, format!("{events_ok}/{n} answered as expected{shown}"));
    let (replayed, mismatches) = (replay.len(), replay.iter().flatten().count());
    let shown = first(replay, "first");
    let result = format!(
        "{replayed} public payloads through the four event formats, {mismatches} mismatches{shown}"
    );
    j.step("replay", mismatches == 0 && replayed > 0, result);
    let (Quantiles { n: warm_n, p50, p99, max }, rtt50, rtt99) = (w, c.p50, c.p99);
    let warm = format!("emulator Duration p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms (n={warm_n}); client round trip p50 {rtt50:.3} ms, p99 {rtt99:.3} ms");
    j.step("warm invocations", w.n + 1 == statuses.len(), warm);
    if let Some(m) = s.memory {
        let (peak, anon, file) = (m.peak_rss_mb, m.rss_anon_mb, m.rss_file_mb);
        let memory = format!("peak RSS {peak:.1} MB (anon {anon:.1} MB, file-backed {file:.1} MB)");
        j.step("bootstrap memory after the replay", true, memory);
    }
    let report = match &e.expected {
        Ok(want) => logs::check(&s.log, &statuses, want, want.prefault),
        Err(err) => {
            let problems = vec![format!("cannot read the embedded artifact: {err:#}")];
            logs::Report { problems, ..logs::Report::default() }
        }
    };
    let init = report.init.as_ref().map_or("no init line".to_string(), |i| {
        let Init { kernels, codec, index_references_sha256: sha, index_crc32: crc, .. } = i;
        let (prefault, init_us) = (i.prefault, i.init_us);
        format!("init line: kernels {kernels}, codec {codec}, index of references {sha}, crc32 {crc}, prefault {prefault}, init {init_us} us")
    });
    let problem = report.problems.first().map_or(String::new(), |p| format!("; PROBLEM: {p}"));
    let (lines, failed, bad) = (report.failure_lines, report.failed_requests, report.bad_requests);
    let (other, ok, counted) =
        (report.unexpected_lines, statuses.len() - failed, report.failures_not_logged);
    let result = format!("{init}; {lines} failure lines (counting {counted} more) for {failed} failed requests ({bad} of them 400s), {other} lines for the {ok} successful ones{problem}");
    j.step("logs", report.problems.is_empty(), result);
    j.logs = Some(report);
    let flush = e.settings.env.iter().find(|(k, _)| k == sam::METRICS_FLUSH);
    if flush.is_some_and(|(_, v)| v == "off") {
        let counts = format!("; events {events_ok}/{n}; replay {replayed} payloads, {mismatches} mismatches; metrics LEFT OUT (off)");
        return (counts, timing(first_ms, s.log.init_report_ms, w));
    }
    let label = e.expected.as_ref().map(|i| i.index_crc32.clone()).unwrap_or_default();
    let (got, want) = (logs::emf_sums(&s.log), expected_metrics(&e.cases, &label));
    let metrics = match (got, want) {
        (Ok(got), Ok(want)) if got == want => Ok(format!(
            "{} EMF documents ({} bytes) sum to the {} decisions and refusals the cases expect",
            s.log.emf.len(),
            s.log.emf_bytes,
            want.iter().filter(|(k, _)| k.split(' ').count() == 2).map(|(_, n)| n).sum::<u64>()
        )),
        (Ok(got), Ok(want)) => {
            let differ = want.keys().chain(got.keys()).find(|k| got.get(*k) != want.get(*k));
            let k = differ.cloned().unwrap_or_default();
            Err(format!("EMF {k}: {:?}, the cases expect {:?}", got.get(&k), want.get(&k)))
        }
        (Err(e), _) => Err(format!("an EMF document CloudWatch would refuse: {e}")),
        (_, Err(e)) => Err(format!("{e:#}")),
    };
    j.step("metrics (EMF)", metrics.is_ok(), metrics.unwrap_or_else(|e| e));
    let counts =
        format!("; events {events_ok}/{n}; replay {replayed} payloads, {mismatches} mismatches");
    (counts, timing(first_ms, s.log.init_report_ms, w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lambda::events::{answer, Expect};
    use crate::lambda::logs::Log;

    const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","role":"Http","kernels":"avx2","codec":"i16","index_references_sha256":"ab","index_references":3000000,"index_part":"whole","index_format_version":5,"index_crc32":"0000000f","index_packer":"index-pack 0.1.0","artifact_bytes":10,"deltas":0,"delta_references":0,"prefault":true,"init_us":12200}}"#;
    const FAILED: &str = r#"{"level":"WARN","fields":{"message":"request failed","status":400,"method":"POST","path":"/fraud-score","field":"transaction.amount","not_logged":0}}"#;

    /// The EMF documents of `approved` decisions at score 0 and `bad` refused bodies, as the
    /// function writes them (one line each).
    fn emf(approved: u64, bad: u64) -> String {
        let mut counts = function::metrics::Counters::default();
        counts.decisions[0] = approved;
        counts.rejected[function::handler::Reason::BadBody.index()] = bad;
        let index = index_pack::format::Identity {
            references_sha256: "ab".into(),
            references: 3_000_000,
            first_position: 0,
            part: "whole".into(),
            format_version: 5,
            crc32: "0000000f".into(),
            packer: "index-pack 0.1.0".into(),
        };
        counts.emf(FUNCTION_NAME, &[index], 1).join("\n") + "\n"
    }

    fn hook_run(status: &str, wrong: u64) -> hook::Run {
        let first = (wrong > 0).then_some("edge-1: expected 0.6, got 0.8");
        let answer = serde_json::json!({"status": status, "cases": 24, "wrong": wrong, "first_wrong": first});
        let reported = hook::Reported {
            deployment_id: "d-XTASK0001".into(),
            lifecycle_event_hook_execution_id: "xtask-pretraffic-1".into(),
            status: status.into(),
        };
        hook::Run { answer, reported: vec![reported] }
    }

    /// A run of one bad event and two replayed payloads, the second wrong when `mismatch`.
    fn gathered(mismatch: bool) -> Gathered {
        let sha = "198e69c5fa0e".repeat(5);
        let (zipped_bytes, unzipped_bytes) = (44 << 20, 92 << 20);
        let package =
            Package { sha256: sha.clone(), zipped_bytes, unzipped_bytes, ..Package::default() };
        let reports = ["16.1", "0.9", "0.4", "0.5"]
            .map(|d| format!("REPORT RequestId: x\tDuration: {d} ms\n"));
        let log = format!(
            "{INIT}\nINIT REPORT(durationMs: 14.2)\n{FAILED}\n{}{}",
            reports.concat(),
            emf(2, 1)
        );
        let case = |event: &str, status, expect| Case { event: event.into(), status, expect };
        let scored = Expect::Json(serde_json::json!({"approved": true, "fraud_score": 0.0}));
        let cases = vec![
            case("first invocation", 200, Expect::Json(serde_json::json!({"ready": true}))),
            case("alb/malformed.json", 400, Expect::Error),
            case("entry 0", 200, scored.clone()),
            case("entry 13", 200, scored),
        ];
        let right = r#"{"approved":true,"fraud_score":0.0}"#;
        let last = if mismatch { r#"{"approved":false,"fraud_score":0.6}"# } else { right };
        let bodies =
            [(200, r#"{"ready":true}"#), (400, r#"{"error":"x"}"#), (200, right), (200, last)];
        let rtts = [16.7, 1.0, 0.7, 0.8];
        let answers = bodies.iter().zip(rtts).map(|((s, b), r)| Ok((answer(*s, b), r))).collect();
        let session =
            Session { launch_to_first_ms: 20.0, answers, memory: None, log: Log::parse(&log) };
        let expected = Ok(Log::parse(INIT).lines[0].typed().unwrap());
        let settings =
            Settings { memory_mb: 512, timeout_s: 3, prefault: None, ..Settings::default() };
        Gathered {
            validate: Ok("template.yaml is a valid SAM Template".into()),
            package: Ok(package),
            emulated: Some(Ok(Emulated { session, cases, events: 1, expected, settings })),
            hook: Some(Ok(hook_run("Succeeded", 0))),
            sam_build: Some(Ok((".aws-sam/build/FraudScoreFunction/bootstrap".into(), sha))),
        }
    }

    #[test]
    fn a_clean_run_passes_every_step_and_reports_its_figures() {
        let j = judge(&gathered(false), false, 175.0);
        let failed: Vec<_> = j.steps.iter().filter(|s| !s.ok).collect();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(j.steps.len(), 12);
        assert_eq!(
            j.figures,
            "12/12 steps; events 1/1; replay 2 payloads, 0 mismatches; logs: 1 init + 1 failure lines for 1 failed requests; \
             cold first invocation 16.7 ms (INIT REPORT 14.20 ms); warm Duration p50 0.50 ms p99 0.90 ms; \
             package 44.0 MB zipped, 92.0 MB unzipped; sam build sha256 = tested (198e69c5fa0e); 175 s"
        );
    }

    #[test]
    fn a_wrong_answer_or_another_binary_fails_its_step() {
        let j = judge(&gathered(true), false, 1.0);
        let replay = j.steps.iter().find(|s| s.name == "replay").unwrap();
        let shown = replay.result.contains("1 mismatches; first: entry 13: got 200");
        assert!(!replay.ok && shown, "{replay:?}");
        let mut g = gathered(false);
        g.sam_build = Some(Ok((PathBuf::from("b"), "0".repeat(64))));
        let j = judge(&g, false, 1.0);
        assert!(!j.steps.last().unwrap().ok);
        assert!(j.figures.contains("sam build sha256 000000000000 != tested 198e69c5fa0e"));
        // The metrics must count every answer: one approval missing fails their step.
        let mut g = gathered(false);
        if let Some(Ok(e)) = &mut g.emulated {
            e.session.log.emf = Log::parse(&emf(1, 1)).emf;
        }
        let metrics = judge(&g, false, 1.0).steps.into_iter().find(|s| s.name == "metrics (EMF)");
        let result = metrics.map(|s| (s.ok, s.result));
        let want = "EMF Approved Function=test_function: Some(1), the cases expect Some(2)";
        assert_eq!(result, Some((false, want.to_string())));
        // A hook that found a wrong answer fails the gate.
        let mut g = gathered(false);
        g.hook = Some(Ok(hook_run("Failed", 5)));
        let step = judge(&g, false, 1.0).steps.into_iter().find(|s| s.name.contains("hook"));
        let step = step.unwrap();
        assert!(!step.ok && step.result.contains("first wrong: edge-1"), "{step:?}");
        let mut g = gathered(false);
        g.sam_build = None;
        assert!(judge(&g, true, 1.0).figures.contains("sam build LEFT OUT (--no-sam-build)"));
        assert!(judge(&g, false, 1.0).figures.contains("sam build failed"));
    }
}
