//! `cargo xtask lambda`, the CI gate: sam validate, the build, the emulator run, `sam build`.

use super::emulator::{self, Session, Settings};
use super::events::{self, Case};
use super::hook;
use super::logs::{self, Init};
use super::package::{self, Package};
use super::sam::{self, Tools};
use crate::prelude::*;
use crate::util::{mb, Quantiles};

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
pub struct Emulated {
    pub session: Session,
    pub cases: Vec<Case>,
    pub events: usize,
    pub expected: Result<Init>,
    pub settings: Settings,
}

pub struct Gathered {
    pub validate: Result<String>,
    pub package: Result<Package>,
    pub emulated: Option<Result<Emulated>>,
    /// The PreTraffic hook against the package under the emulator.
    pub hook: Option<Result<hook::Run>>,
    /// An edit delta shipped with the package: the hook, its sample labelled over the edited set,
    /// against the package with the delta, then against the package without it.
    pub edited: Option<Result<(hook::Run, hook::Run)>>,
    /// `.aws-sam`'s bootstrap and its SHA-256; `None` when left out.
    pub sam_build: Option<Result<(PathBuf, String)>>,
}

#[derive(Debug, Serialize)]
pub struct Step {
    pub name: &'static str,
    pub ok: bool,
    pub result: String,
}

#[derive(Default)]
pub struct Judged {
    pub steps: Vec<Step>,
    pub logs: Option<logs::Report>,
    pub figures: String,
}

impl Judged {
    fn step(&mut self, name: &'static str, ok: bool, result: impl Into<String>) {
        self.steps.push(Step { name, ok, result: result.into() });
    }
}

pub fn run(a: CiArgs) -> Result<()> {
    let (t, g) = (Instant::now(), gather(&a)?);
    let j = judge(&g, a.no_sam_build, t.elapsed().as_secs_f64());
    for s in &j.steps {
        log!("{}: {}: {}", if s.ok { "ok" } else { "FAILED" }, s.name, s.result);
    }
    let settings = g.emulated.as_ref().and_then(|e| Some(&e.as_ref().ok()?.settings));
    let detail = serde_json::json!({"steps": j.steps, "settings": settings, "package": g.package.as_ref().ok(), "logs": j.logs});
    util::verdict("lambda", j.steps.iter().all(|s| s.ok), &j.figures, &detail)
}

fn gather(a: &CiArgs) -> Result<Gathered> {
    let tools = Tools::ensure()?;
    // The templates' validation (three SAM CLI runs, 18 s of Python) on a thread of its own,
    // beside the rest: no figure of the gate is judged by its time.
    std::thread::scope(|scope| {
        let validating = scope.spawn(|| tools.validate());
        let package = package::build(a.skip_build);
        let (mut emulated, mut hook, mut edited) = (None, None, None);
        if let Ok(pkg) = &package {
            let mut d = sam::defaults()?;
            if let Some(flush) = &a.metrics_flush {
                d.env.retain(|(k, _)| k != sam::METRICS_FLUSH);
                d.env.push((sam::METRICS_FLUSH.into(), flush.clone()));
            }
            let s = Settings { memory_mb: a.memory_mb.unwrap_or(d.memory_mb), cpus: a.cpus, ..d };
            emulated = Some(emulate(&tools, pkg, s, a.replay));
            // The hook of the workspace build against the package, both under the emulator.
            let run = |d: PathBuf| hook::run(&tools.rie, &pkg.dir, &d, &util::xtask_dir("lambda")?);
            hook = Some(package::workspace_hook().and_then(run));
            edited = Some(edit_delta(&tools, pkg));
        }
        let built = || tools.build().and_then(|p| Ok((p.clone(), util::sha256_file(&p)?)));
        let sam_build = (!a.no_sam_build).then(built);
        let validate = validating.join().unwrap_or_else(|_| bail!("sam validate panicked"));
        Ok(Gathered { validate, package, emulated, hook, edited, sam_build })
    })
}

/// Removals and relabels of the contest's references in a delta shipped beside the package's
/// bootstrap (`deltas/`), checked by the hook with its sample labelled over the edited set
/// (cases on and around the edited references among them): it must pass the package with the
/// delta, and fail the package without it.
fn edit_delta(tools: &Tools, pkg: &Package) -> Result<(hook::Run, hook::Run)> {
    const EDITS: usize = 300;
    let dir = util::xtask_dir("lambda")?.join("edited");
    fs::create_dir_all(&dir)?;
    let (refs, edits, delta) = (
        root().join("resources/references.json.gz"),
        dir.join("edits.json"),
        dir.join("edits.idx"),
    );
    let (labeller, index_pack) = (util::built("labeller")?, util::built("index-pack")?);
    let words = format!("generate-edits --remove {EDITS} --relabel {EDITS} --seed 40");
    util::run(&util::command(&labeller, &words, &[("--references", &refs), ("--out", &edits)]))?;
    let paths =
        [("--base", pkg.index_artifact.as_path()), ("--edits", &edits), ("--output", &delta)];
    util::run(&util::command(&index_pack, "delta", &paths))?;
    let scorer = dir.join("scorer");
    package::copy_bootstrap(&pkg.bootstrap, &scorer)?;
    package::ship_deltas(std::slice::from_ref(&delta), &scorer)?;
    let hook_dir = dir.join("hook");
    package::copy_bootstrap(&util::built("pretraffic")?, &hook_dir)?;
    let sample = hook_dir.join("sample.json");
    package::write_sample(&labeller, [&refs, &sample], &[], std::slice::from_ref(&edits))?;
    let (with_logs, without_logs) = (dir.join("with"), dir.join("without"));
    fs::create_dir_all(&with_logs)?;
    fs::create_dir_all(&without_logs)?;
    let with = hook::run(&tools.rie, &scorer, &hook_dir, &with_logs)?;
    let without = hook::run(&tools.rie, &pkg.dir, &hook_dir, &without_logs)?;
    Ok((with, without))
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
    let session = emulator::session(&tools.rie, &pkg.dir, &settings, &log, &bodies)?;
    // Read at init as FRAUD_PREFAULT says, else (auto) if it fits with 64 MiB spare, 1 GiB at most.
    let expected = logs::expected(&pkg.index_artifact).map(|want| {
        let b = want.artifact_bytes;
        let fits = b + (64 << 20) <= u64::from(settings.memory_mb) << 20 && b <= 1 << 30;
        Init { prefault: settings.prefault.unwrap_or(fits), ..want }
    });
    Ok(Emulated { session, cases, events, expected, settings })
}

/// What a run's EMF documents must sum to: its cases' decisions and refusals, per dimension set.
pub fn expected_metrics(cases: &[Case], index: &str) -> Result<BTreeMap<String, u64>> {
    let mut want = BTreeMap::new();
    let mut add = |key: String| *want.entry(key).or_insert(0) += 1;
    let decision = |approved: bool| if approved { "Approved" } else { "Denied" };
    for c in cases {
        let name = match (&c.expect, c.status) {
            (events::Expect::Json(v), 200) if v.get("approved").is_some() => {
                let score = v["fraud_score"].as_f64().context("a decision's score")?;
                add(format!("Decisions FraudScore={score:.1} Function={FUNCTION_NAME}"));
                decision(v["approved"] == true)
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
                add(format!("Rejected Function={FUNCTION_NAME} Reason={reason}"));
                "Rejected"
            }
            _ => continue,
        };
        add(format!("{name} Function={FUNCTION_NAME}"));
        add(format!("{name} Function={FUNCTION_NAME} Index={index}"));
        add(format!("{name} Function={FUNCTION_NAME} Version={EMULATED_VERSION}"));
    }
    Ok(want)
}

/// The function's name in the emulator (its default `AWS_LAMBDA_FUNCTION_NAME`), and its version
/// (`AWS_LAMBDA_FUNCTION_VERSION`).
pub const FUNCTION_NAME: &str = "test_function";
pub const EMULATED_VERSION: &str = "$LATEST";

pub fn judge(g: &Gathered, no_sam_build: bool, seconds: f64) -> Judged {
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
        let clean = |r: &hook::Run| r.answer["wrong"] == 0 && r.answer["cases"].as_u64() > Some(0);
        let passed = run.as_ref().is_ok_and(|r| r.status() == Some("Succeeded") && clean(r));
        j.step("PreTraffic hook passes the package", passed, show(run, said));
        if let Some(edited) = &g.edited {
            let ok = edited.as_ref().is_ok_and(|(with, without)| {
                with.status() == Some("Succeeded")
                    && clean(with)
                    && without.status() == Some("Failed")
            });
            let both = |(w, wo): &(hook::Run, hook::Run)| {
                format!("with the delta: {}; without it: {}", said(w), said(wo))
            };
            j.step(
                "an edit delta: the hook passes it, fails the base alone",
                ok,
                show(edited, both),
            );
        }
    }
    if let Some(built) = &g.sam_build {
        let shown = show(built, |(p, _)| p.display().to_string());
        j.step("sam build (the scorer)", built.is_ok(), shown);
        if let (Ok((_, sha)), Ok(p)) = (built, &g.package) {
            let tested = &p.sha256;
            let result =
                format!("sha256 {sha} (.aws-sam/build), {tested} (the binary the emulator ran)");
            j.step("sam build ships the tested bootstrap", sha == tested, result);
        }
    }
    let (n, passed) = (j.steps.len(), j.steps.iter().filter(|s| s.ok).count());
    let logs = j.logs.as_ref().map_or(String::new(), |r| {
        let (lines, failed) = (r.failure_lines, r.failed_requests);
        format!("; logs: 1 init + {lines} failure lines for {failed} failed requests")
    });
    let mut f = format!("{passed}/{n} steps{counts}{logs}{timing}");
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
    let c = Quantiles::of(s.answers[n + 1..].iter().flatten().map(|(_, rtt)| *rtt).collect());
    let w = Quantiles::of(s.log.durations_ms.iter().skip(1).copied().collect());
    let init = s.log.init_report_ms.map_or("missing".into(), |v| format!("{v:.2}"));
    let cold = format!("round trip {first_ms:.1} ms (exec + init + answer); emulator INIT REPORT {init} ms; launch to first answer {:.0} ms", s.launch_to_first_ms);
    j.step("cold start (first invocation)", true, cold);
    let failed = events.iter().flatten().count();
    let (events_ok, shown) = (n - failed.min(n), first(events, "first failure"));
    j.step("events", failed == 0, format!("{events_ok}/{n} answered as expected{shown}"));
    let (replayed, mismatches) = (replay.len(), replay.iter().flatten().count());
    let shown = first(replay, "first");
    let formats = "through the four event formats";
    let result = format!("{replayed} public payloads {formats}, {mismatches} mismatches{shown}");
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
        format!("init line: kernels {kernels}, codec {codec}, index of references {sha}, crc32 {crc}, prefault {}, init {} us", i.prefault, i.init_us)
    });
    let problem = report.problems.first().map_or(String::new(), |p| format!("; PROBLEM: {p}"));
    let (lines, failed, bad) = (report.failure_lines, report.failed_requests, report.bad_requests);
    let (other, ok) = (report.unexpected_lines, statuses.len() - failed);
    let result = format!("{init}; {lines} failure lines (counting {} more) for {failed} failed requests ({bad} of them 400s), {other} lines for the {ok} successful ones{problem}", report.failures_not_logged);
    j.step("logs", report.problems.is_empty(), result);
    j.logs = Some(report);
    let counts =
        format!("; events {events_ok}/{n}; replay {replayed} payloads, {mismatches} mismatches");
    let timing = timing(first_ms, s.log.init_report_ms, w);
    let flush = e.settings.env.iter().find(|(k, _)| k == sam::METRICS_FLUSH);
    if flush.is_some_and(|(_, v)| v == "off") {
        return (counts + "; metrics LEFT OUT (off)", timing);
    }
    let label = e.expected.as_ref().map(|i| i.index_crc32.clone()).unwrap_or_default();
    let (got, want) = (logs::emf_sums(&s.log), expected_metrics(&e.cases, &label));
    let metrics = match (got, want) {
        (Ok(got), Ok(want)) if got == want => {
            let (docs, bytes) = (s.log.emf.len(), s.log.emf_bytes);
            let n: u64 = want.iter().filter(|(k, _)| k.split(' ').count() == 2).map(|e| e.1).sum();
            Ok(format!("{docs} EMF documents ({bytes} bytes) sum to the {n} decisions and refusals the cases expect"))
        }
        (Ok(got), Ok(want)) => {
            let differ = want.keys().chain(got.keys()).find(|k| got.get(*k) != want.get(*k));
            let k = differ.cloned().unwrap_or_default();
            Err(format!("EMF {k}: {:?}, the cases expect {:?}", got.get(&k), want.get(&k)))
        }
        (Err(e), _) => Err(format!("an EMF document CloudWatch would refuse: {e}")),
        (_, Err(e)) => Err(format!("{e:#}")),
    };
    j.step("metrics (EMF)", metrics.is_ok(), metrics.unwrap_or_else(|e| e));
    (counts, timing)
}
