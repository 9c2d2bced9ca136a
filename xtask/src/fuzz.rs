//! `cargo xtask fuzz ci|long|build`: the cargo-fuzz targets in `fuzz/` (docs/FUZZING.md).
//!
//! Every target is built once (release, debug assertions and overflow checks on,
//! AddressSanitizer), then run: `ci` replays every committed seed, then a fixed number of
//! mutations per target with a fixed seed, from an empty working corpus (what it covers does not
//! depend on the machine's speed, and a CI failure reproduces anywhere); `long` any time per
//! target, pinned to one CPU at low priority.
//! Any crash, panic, sanitizer report, leak, slow input (over `--timeout`) or out-of-memory fails
//! the run; libFuzzer's own final statistics give each target's executions and peak memory.
//! Growing corpora live in `fuzz/work/<target>` (not committed); the committed seeds in
//! `fuzz/corpus/<target>` are only read; crash inputs land in `fuzz/artifacts/<target>/`.

use crate::util::{self, log};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(clap::Subcommand)]
enum Mode {
    /// Every committed seed, then a fixed number of mutations per target with seed 1 (what CI
    /// runs).
    Ci {
        /// Executions per target after the seeds.
        #[arg(long, env = "FUZZ_CI_RUNS", default_value_t = 20_000)]
        runs: u64,
    },
    /// Every target (or one) for a long time, one after the other, on one CPU at nice 10.
    Long {
        /// Seconds per target.
        #[arg(default_value_t = 1800)]
        seconds: u64,
        /// Only this target.
        target: Option<String>,
        /// The CPU to pin to (the search benchmarks use CPU 1).
        #[arg(long, default_value_t = 0)]
        cpu: u32,
    },
    /// Build the targets only.
    Build,
}

/// How long a target runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Budget {
    /// A fixed number of executions after the seeds, seed 1, from an empty working corpus: the
    /// same inputs on any machine.
    Runs(u64),
    /// A time limit, growing the target's working corpus `fuzz/work/<target>`.
    Seconds(u64),
}

/// How one target's run went, from libFuzzer's final statistics.
#[derive(Serialize)]
struct TargetRun {
    target: String,
    passed: bool,
    exit: Option<i32>,
    seconds: f64,
    executions: Option<u64>,
    per_second: Option<u64>,
    peak_rss_mb: Option<u64>,
    new_corpus_files: usize,
    seeds: usize,
    log: String,
}

/// `cargo fuzz` on the nightly toolchain when there is one; otherwise stable, which ships the
/// same sanitizer runtimes and takes `-Zsanitizer` with `RUSTC_BOOTSTRAP=1`.
struct Toolchain {
    nightly: bool,
    name: String,
}

impl Toolchain {
    fn detect() -> Result<Toolchain> {
        let why = "to fuzz (cargo install cargo-fuzz --version 0.13.2 --locked)";
        util::require("cargo-fuzz", why)?;
        let nightly = duct::cmd!("rustup", "run", "nightly", "rustc", "--version");
        Ok(match nightly.stderr_null().read() {
            Ok(v) => Toolchain { nightly: true, name: format!("nightly ({})", v.trim()) },
            Err(_) => Toolchain { nightly: false, name: "stable with RUSTC_BOOTSTRAP=1".into() },
        })
    }

    /// `[wrapper...] cargo [+nightly] fuzz <args>`, in `fuzz/`.
    fn command(&self, wrapper: &[String], args: &[String]) -> duct::Expression {
        let mut argv = wrapper.to_vec();
        argv.push("cargo".into());
        argv.extend(self.nightly.then(|| "+nightly".to_string()));
        argv.push("fuzz".into());
        argv.extend(args.iter().cloned());
        let e = duct::cmd(&argv[0], &argv[1..]).dir(util::root().join("fuzz"));
        if self.nightly {
            e
        } else {
            e.env("RUSTC_BOOTSTRAP", "1")
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let tc = Toolchain::detect()?;
    log!("fuzz: {}, AddressSanitizer on", tc.name);
    let t = Instant::now();
    util::run(&tc.command(&[], &["build".into()]))?;
    log!("fuzz: build took {:.0} s", t.elapsed().as_secs_f64());
    let (budget, only, pin, name) = match args.mode {
        Mode::Build => return util::verdict("fuzz build", true, "", &tc.name),
        Mode::Ci { runs } => (Budget::Runs(runs), None, None, "fuzz ci"),
        Mode::Long { seconds, target, cpu } => {
            (Budget::Seconds(seconds), target, Some(cpu), "fuzz long")
        }
    };
    let targets: Vec<String> = match only {
        Some(t) => vec![t],
        None => util::read(&tc.command(&[], &["list".into()]))?.lines().map(Into::into).collect(),
    };
    let runs =
        targets.iter().map(|t| run_target(&tc, t, budget, pin)).collect::<Result<Vec<_>>>()?;
    util::verdict(name, runs.iter().all(|r| r.passed), &figures(&runs), &runs)
}

/// libFuzzer's options for `target`: the budget, limits, final statistics, and the target's
/// dictionary and input length where `fuzz/` has them.
fn libfuzzer_args(target: &str, budget: Budget, dict: bool, max_len: Option<&str>) -> Vec<String> {
    let mut a = vec![
        // libFuzzer executes every seed before it counts mutations toward `-runs`.
        match budget {
            Budget::Runs(n) => format!("-runs={n}"),
            Budget::Seconds(t) => format!("-max_total_time={t}"),
        },
        "-timeout=10".into(),
        "-rss_limit_mb=2048".into(),
        "-print_final_stats=1".into(),
        format!("-artifact_prefix=artifacts/{target}/"),
    ];
    a.extend(dict.then(|| format!("-dict=dict/{target}.dict")));
    if let Budget::Runs(_) = budget {
        // `-use_cmp=0`: the operands libFuzzer records from comparisons include clock readings
        // and heap addresses, which made two runs with the same seed mutate differently; without
        // them the same count of runs executes the same inputs on any machine.
        a.extend(["-seed=1", "-use_cmp=0", "-reload=0"].map(String::from));
    }
    a.extend(max_len.map(|n| format!("-max_len={}", n.trim())));
    a
}

/// libFuzzer's final `stat::<key>: <value>` in a log.
fn stat(log: &str, key: &str) -> Option<u64> {
    let prefix = format!("stat::{key}:");
    log.lines().rev().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

fn run_target(tc: &Toolchain, target: &str, budget: Budget, pin: Option<u32>) -> Result<TargetRun> {
    let dir = util::root().join("fuzz");
    let work = match budget {
        Budget::Runs(_) => format!("work/ci-{target}"),
        Budget::Seconds(_) => format!("work/{target}"),
    };
    if let Budget::Runs(_) = budget {
        // What an earlier run found must not change what this one executes.
        let _ = std::fs::remove_dir_all(dir.join(&work));
    }
    for d in [work.clone(), format!("artifacts/{target}"), format!("corpus/{target}")] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    std::fs::create_dir_all(dir.join("work/logs"))?;
    let max_len = std::fs::read_to_string(dir.join(format!("options/{target}.max_len"))).ok();
    let dict = dir.join(format!("dict/{target}.dict")).exists();
    let lib_args = libfuzzer_args(target, budget, dict, max_len.as_deref());
    // Long runs stay on one core at low priority; a backstop `timeout` ends a fuzzer that stops
    // reporting (libFuzzer itself stops at its budget).
    let backstop = match budget {
        Budget::Runs(_) => 3600,
        Budget::Seconds(t) => t + 300,
    };
    let mut wrapper = vec!["timeout".to_string(), backstop.to_string()];
    if let Some(cpu) = pin {
        wrapper.extend(["taskset", "-c", &cpu.to_string(), "nice", "-n", "10"].map(String::from));
    }
    let mut run_args = vec!["run".into(), target.into(), work.clone(), format!("corpus/{target}")];
    run_args.push("--".into());
    run_args.extend(lib_args.iter().cloned());
    let log_path = dir.join(format!("work/logs/{target}.log"));
    log!("fuzz {target}: {}", lib_args[0]);
    let t = Instant::now();
    let e = util::to_log(tc.command(&wrapper, &run_args), &log_path);
    let status = e.unchecked().run().context("cannot start cargo fuzz")?.status;
    let elapsed = t.elapsed();
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let executions = stat(&text, "number_of_executed_units");
    let passed = status.success() && executions.is_some();
    if !passed {
        log!("---- last lines of {} ----", log_path.display());
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("{}", lines[lines.len().saturating_sub(60)..].join("\n"));
    }
    let secs = elapsed.max(Duration::from_secs(1)).as_secs_f64();
    let r = TargetRun {
        target: target.to_string(),
        passed,
        exit: status.code(),
        seconds: elapsed.as_secs_f64(),
        executions,
        per_second: executions.map(|e| (e as f64 / secs) as u64),
        peak_rss_mb: stat(&text, "peak_rss_mb"),
        new_corpus_files: count_files(&dir.join(&work)),
        seeds: count_files(&dir.join("corpus").join(target)),
        log: log_path.display().to_string(),
    };
    let show = |v: Option<u64>| v.map_or("?".into(), |e| e.to_string());
    log!(
        "fuzz {target}: {}, {} executions in {:.0} s, corpus {} new + {} seeds, peak RSS {} MB",
        if r.passed { "ok" } else { "FAILED" },
        show(r.executions),
        r.seconds,
        r.new_corpus_files,
        r.seeds,
        show(r.peak_rss_mb)
    );
    Ok(r)
}

/// `http 20512 execs (680/s), payload ...`.
fn figures(runs: &[TargetRun]) -> String {
    let each = runs.iter().map(|r| {
        let execs = r.executions.map_or("?".into(), |e| e.to_string());
        format!("{} {execs} execs ({}/s)", r.target, r.per_second.unwrap_or(0))
    });
    each.collect::<Vec<_>>().join(", ")
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.filter(|e| e.is_ok()).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_runs_are_fixed_and_seeded_long_runs_timed() {
        let ci = libfuzzer_args("http", Budget::Runs(20_000), true, Some("4096\n"));
        assert_eq!(ci[0], "-runs=20000");
        assert!(ci.contains(&"-seed=1".into()) && ci.contains(&"-dict=dict/http.dict".into()));
        assert_eq!(ci.last().unwrap(), "-max_len=4096");
        let long = libfuzzer_args("index", Budget::Seconds(1800), false, None);
        assert_eq!(long[0], "-max_total_time=1800");
        assert!(!long.iter().any(|a| a.starts_with("-seed") || a.starts_with("-dict")));
        assert!(long.contains(&"-artifact_prefix=artifacts/index/".into()));
    }

    #[test]
    fn final_statistics_are_read_and_shown() {
        let log = "#2 INITED\nstat::number_of_executed_units: 20512\nstat::peak_rss_mb: 98\n";
        assert_eq!(
            (stat(log, "number_of_executed_units"), stat(log, "peak_rss_mb")),
            (Some(20512), Some(98))
        );
        assert_eq!(stat("==1==ERROR: AddressSanitizer", "peak_rss_mb"), None);
        let run = |target: &str, executions| TargetRun {
            target: target.into(),
            passed: true,
            exit: Some(0),
            seconds: 30.0,
            executions,
            per_second: executions.map(|e| e / 30),
            peak_rss_mb: None,
            new_corpus_files: 0,
            seeds: 3,
            log: String::new(),
        };
        let shown = figures(&[run("http", Some(21_000)), run("index", None)]);
        assert_eq!(shown, "http 21000 execs (700/s), index ? execs (0/s)");
    }
}
