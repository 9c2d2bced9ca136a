//! `cargo xtask lambda`: the CI run. Each step prints its result; one verdict line at the end.
//!
//! 1. SAM CLI (installed into a venv when missing) and `sam validate --lint`;
//! 2. the bootstrap build and package ([`package`]); its sizes against Lambda's limits;
//! 3. the emulator with that package and template.yaml's settings: the cold start (first
//!    invocation), every event in events/ against events/expected.tsv and
//!    events/hostile/expected.tsv, a replay of public payloads through the four event formats
//!    against the labeller's answers, warm timings, the bootstrap's memory, and its log
//!    ([`logs`]: one init line naming kernels and index, one line per failed request, none per
//!    success);
//! 4. `sam build` (what `sam deploy` uploads) and the check that its bootstrap has the SHA-256
//!    of the binary the emulator ran.

use super::emulator::{Emulator, Log, Memory, Settings};
use super::events::{self, quantile, Answer, Templates};
use super::package::{self, mb, sha256_file, Package};
use super::{logs, sam, tools, work_dir};
use crate::report::verdict;
use anyhow::Result;
use serde::Serialize;
use std::time::{Duration, Instant};

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

#[derive(Serialize)]
struct Step {
    name: String,
    ok: bool,
    result: String,
}

/// The steps so far; each is printed as it is recorded.
#[derive(Default, Serialize)]
struct Steps(Vec<Step>);

impl Steps {
    fn record(&mut self, name: &str, ok: bool, result: impl Into<String>) -> bool {
        let result = result.into();
        crate::log!("{}: {name}: {result}", if ok { "ok" } else { "FAILED" });
        self.0.push(Step {
            name: name.into(),
            ok,
            result,
        });
        ok
    }

    /// Records a step that either produced a value or failed.
    fn outcome<T>(
        &mut self,
        name: &str,
        r: Result<T>,
        show: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        match r {
            Ok(v) => {
                self.record(name, true, show(&v));
                Some(v)
            }
            Err(e) => {
                self.record(name, false, format!("{e:#}"));
                None
            }
        }
    }

    fn passed(&self) -> usize {
        self.0.iter().filter(|s| s.ok).count()
    }
}

/// Quantiles of a set of durations, in ms.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Quantiles {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    pub fn of(mut ms: Vec<f64>) -> Quantiles {
        ms.sort_by(f64::total_cmp);
        Quantiles {
            n: ms.len(),
            p50: quantile(&ms, 0.5),
            p99: quantile(&ms, 0.99),
            max: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Everything the emulator run measured.
#[derive(Default, Serialize)]
struct Emulated {
    settings: Option<Settings>,
    listening_ms: f64,
    /// The first invocation (GET /ready): the RIE execs the bootstrap, its init, the answer.
    first_invoke_ms: f64,
    launch_to_first_response_ms: f64,
    events: usize,
    event_failures: Vec<String>,
    replayed: usize,
    replay_failures: Vec<String>,
    mismatches: usize,
    client_rtt_ms: Quantiles,
    /// The emulator's `Duration` of every invocation after the first.
    warm_duration_ms: Quantiles,
    memory: Option<Memory>,
    /// HTTP status of every invocation, in order.
    #[serde(skip)]
    statuses: Vec<u16>,
    #[serde(skip)]
    log: Log,
    init_report_ms: Option<f64>,
    logs: Option<logs::Report>,
}

#[derive(Serialize)]
struct Detail<'a> {
    steps: &'a Steps,
    package: Option<&'a Package>,
    emulated: &'a Emulated,
    sam_build_sha256: Option<String>,
    seconds: f64,
}

pub fn run(a: CiArgs) -> Result<()> {
    let t = Instant::now();
    let mut steps = Steps::default();
    let tools = tools::ensure()?;
    steps.outcome("sam validate --lint", sam::validate(&tools), |out| {
        out.clone()
    });

    let built = if a.skip_build {
        package::existing()
    } else {
        package::build()
    };
    let pkg = steps.outcome("bootstrap build", built, |p| {
        format!(
            "{} (static x86-64), sha256 {}",
            p.bootstrap.display(),
            p.sha256
        )
    });
    let mut emulated = Emulated::default();
    if let Some(pkg) = &pkg {
        steps.record(
            "package within Lambda's limits",
            pkg.unzipped_bytes <= package::LIMIT_UNZIPPED,
            format!(
                "{:.1} MB zipped (direct upload limit 50 MB: {}), {:.1} MB unzipped (limit 250 MB)",
                mb(pkg.zipped_bytes),
                if pkg.zipped_bytes <= package::LIMIT_ZIPPED_DIRECT {
                    "fits"
                } else {
                    "too big, deploy through S3 as sam deploy does"
                },
                mb(pkg.unzipped_bytes)
            ),
        );
        let defaults = sam::defaults()?;
        let settings = Settings {
            memory_mb: a.memory_mb.unwrap_or(defaults.memory_mb),
            timeout_s: defaults.timeout_s,
            prefault: defaults.prefault,
            cpus: a.cpus,
        };
        match emulate(&tools.rie, pkg, &settings, a.replay, &mut emulated) {
            Ok(()) => check_emulated(&mut steps, &mut emulated, pkg, &settings),
            Err(e) => {
                steps.record("emulator run", false, format!("{e:#}"));
            }
        }
        emulated.settings = Some(settings);
    }

    let mut sam_sha = None;
    if a.no_sam_build {
        crate::log!("sam build: left out (--no-sam-build)");
    } else if let Some(built) =
        steps.outcome("sam build", sam::build(&tools), |p| p.display().to_string())
    {
        let sha = sha256_file(&built)?;
        if let Some(pkg) = &pkg {
            steps.record(
                "sam build ships the tested bootstrap",
                sha == pkg.sha256,
                format!(
                    "sha256 {sha} (.aws-sam/build), {} (the binary the emulator ran)",
                    pkg.sha256
                ),
            );
        }
        sam_sha = Some(sha);
    }

    let ok = steps.passed() == steps.0.len() && pkg.is_some();
    let figures = figures(
        &steps,
        pkg.as_ref(),
        &emulated,
        sam_sha.as_deref(),
        a.no_sam_build,
        t.elapsed(),
    );
    let detail = Detail {
        steps: &steps,
        package: pkg.as_ref(),
        emulated: &emulated,
        sam_build_sha256: sam_sha,
        seconds: t.elapsed().as_secs_f64(),
    };
    verdict("lambda", ok, &figures, &detail)
}

/// Starts the emulator, sends the first invocation, the events and the replay, stops it.
fn emulate(
    rie: &std::path::Path,
    pkg: &Package,
    settings: &Settings,
    replay: usize,
    out: &mut Emulated,
) -> Result<()> {
    let log = work_dir()?.join("rie.log");
    let mut emu = Emulator::start(rie, &pkg.dir, settings, log.clone())?;
    crate::log!("emulator started, log in {}", log.display());
    out.listening_ms = ms(emu.wait_listening()?);

    let (raw, rtt) = emu.invoke(&events::read_event("apigw-v2/ready.json")?)?;
    out.first_invoke_ms = ms(rtt);
    out.launch_to_first_response_ms = ms(emu.launched.elapsed());
    let first = Answer::parse(&raw)?;
    out.statuses.push(first.status);
    if first.status != 200 {
        out.event_failures
            .push(format!("first invocation: {first:?}"));
    }

    for case in events::cases()? {
        out.events += 1;
        let answer = emu
            .invoke(&events::read_event(&case.event)?)
            .and_then(|(raw, _)| Answer::parse(&raw));
        match answer {
            Ok(a) => {
                out.statuses.push(a.status);
                if let Some(why) = a.mismatch(&case) {
                    out.event_failures.push(why);
                }
            }
            Err(e) => out.event_failures.push(format!("{}: {e:#}", case.event)),
        }
    }

    let entries = events::test_entries()?;
    let picked = events::spread(&entries, replay, true);
    let templates = Templates::load()?;
    let mut rtts = Vec::with_capacity(picked.len());
    for (n, &i) in picked.iter().enumerate() {
        let e = &entries[i];
        let result = emu
            .invoke(&templates.event(n, e.request.get()))
            .and_then(|(raw, rtt)| Ok((Answer::parse(&raw)?, rtt)));
        match result {
            Ok((a, rtt)) => {
                rtts.push(ms(rtt));
                out.statuses.push(a.status);
                if !e.matches(&a) {
                    out.mismatches += 1;
                    out.replay_failures.push(format!(
                        "entry {i}: got {} {}, want approved={} fraud_score={}",
                        a.status, a.body, e.expected_approved, e.expected_fraud_score
                    ));
                }
            }
            Err(err) => {
                out.mismatches += 1;
                out.replay_failures.push(format!("entry {i}: {err:#}"));
            }
        }
    }
    out.replayed = picked.len();
    out.client_rtt_ms = Quantiles::of(rtts);
    out.memory = emu.bootstrap_memory();
    out.log = emu.stop()?;
    out.init_report_ms = out.log.init_report_ms;
    out.warm_duration_ms = Quantiles::of(out.log.durations_ms.iter().skip(1).copied().collect());
    out.event_failures.truncate(20);
    out.replay_failures.truncate(20);
    Ok(())
}

/// The emulator run's steps.
fn check_emulated(steps: &mut Steps, e: &mut Emulated, pkg: &Package, s: &Settings) {
    steps.record(
        "cold start (first invocation)",
        true,
        format!(
            "round trip {:.1} ms (exec + init + answer); emulator INIT REPORT {} ms; launch to first answer {:.0} ms",
            e.first_invoke_ms,
            e.init_report_ms.map_or("missing".into(), |v| format!("{v:.2}")),
            e.launch_to_first_response_ms
        ),
    );
    steps.record(
        "events",
        e.event_failures.is_empty(),
        format!(
            "{}/{} answered as expected{}",
            e.events - e.event_failures.len().min(e.events),
            e.events,
            e.event_failures
                .first()
                .map_or(String::new(), |f| format!("; first failure: {f}"))
        ),
    );
    steps.record(
        "replay",
        e.mismatches == 0 && e.replayed > 0,
        format!(
            "{} public payloads through the four event formats, {} mismatches{}",
            e.replayed,
            e.mismatches,
            e.replay_failures
                .first()
                .map_or(String::new(), |f| format!("; first: {f}"))
        ),
    );
    let w = e.warm_duration_ms;
    steps.record(
        "warm invocations",
        w.n + 1 == e.statuses.len(),
        format!(
            "emulator Duration p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={}); client round trip p50 {:.3} ms, p99 {:.3} ms",
            w.p50, w.p99, w.max, w.n, e.client_rtt_ms.p50, e.client_rtt_ms.p99
        ),
    );
    if let Some(m) = e.memory {
        steps.record(
            "bootstrap memory after the replay",
            true,
            format!(
                "peak RSS {:.1} MB (anon {:.1} MB, file-backed {:.1} MB)",
                m.peak_rss_kb as f64 / 1024.0,
                m.rss_anon_kb as f64 / 1024.0,
                m.rss_file_kb as f64 / 1024.0
            ),
        );
    }
    let report = match logs::Expected::of(&pkg.index_artifact) {
        Ok(want) => logs::check(&e.log, &e.statuses, &want, s.prefault),
        Err(err) => logs::Report {
            problems: vec![format!("cannot read the embedded artifact: {err:#}")],
            ..Default::default()
        },
    };
    let init = report.init.as_ref().map_or("no init line".to_string(), |i| {
        format!(
            "init line: kernels {}, codec {}, index source sha256 {}, artifact crc32 {}, init {} us",
            i.kernels, i.codec, i.index_source_sha256, i.artifact_crc32, i.init_us
        )
    });
    steps.record(
        "logs",
        report.problems.is_empty(),
        format!(
            "{init}; {} failure lines for {} failed requests ({} of them 400s), {} lines for the {} successful ones{}",
            report.failure_lines,
            report.failed_requests,
            report.bad_requests,
            report.unexpected_lines,
            e.statuses.len() - report.failed_requests,
            report.problems.first().map_or(String::new(), |p| format!("; PROBLEM: {p}"))
        ),
    );
    e.logs = Some(report);
}

fn figures(
    steps: &Steps,
    pkg: Option<&Package>,
    e: &Emulated,
    sam_sha: Option<&str>,
    no_sam_build: bool,
    elapsed: Duration,
) -> String {
    let mut f = format!("{}/{} steps", steps.passed(), steps.0.len());
    f += &format!(
        "; events {}/{}; replay {} payloads, {} mismatches",
        e.events - e.event_failures.len().min(e.events),
        e.events,
        e.replayed,
        e.mismatches
    );
    if let Some(r) = &e.logs {
        f += &format!(
            "; logs: 1 init + {} failure lines for {} failed requests",
            r.failure_lines, r.failed_requests
        );
    }
    f += &format!(
        "; cold first invocation {:.1} ms (INIT REPORT {:.2} ms); warm Duration p50 {:.2} ms p99 {:.2} ms",
        e.first_invoke_ms,
        e.init_report_ms.unwrap_or(f64::NAN),
        e.warm_duration_ms.p50,
        e.warm_duration_ms.p99
    );
    if let Some(p) = pkg {
        f += &format!(
            "; package {:.1} MB zipped, {:.1} MB unzipped",
            mb(p.zipped_bytes),
            mb(p.unzipped_bytes)
        );
        match sam_sha {
            Some(s) if s == p.sha256 => f += &format!("; sam build sha256 = tested ({})", &s[..12]),
            Some(s) => {
                f += &format!(
                    "; sam build sha256 {} != tested {}",
                    &s[..12],
                    &p.sha256[..12]
                )
            }
            None if no_sam_build => f += "; sam build LEFT OUT (--no-sam-build)",
            None => f += "; sam build failed",
        }
    }
    f + &format!("; {:.0} s", elapsed.as_secs_f64())
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
