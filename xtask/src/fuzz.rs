//! `cargo xtask fuzz ci|long|build`: the libFuzzer targets (docs/FUZZING.md) under ASan.

use crate::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(clap::Subcommand, Clone, Debug, PartialEq)]
pub enum Mode {
    /// Every committed seed, then mutations with seed 1 for a time budget per target, the
    /// targets two at a time (what CI runs); each target's execution count is reported.
    Ci {
        /// Seconds per target, the committed seeds included.
        #[arg(long, env = "FUZZ_CI_SECONDS", default_value_t = 10)]
        seconds: u64,
    },
    /// Every target (or one) in turn on one CPU at nice 10, growing `fuzz/work/<target>`.
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

#[derive(Default, Serialize)]
pub struct TargetRun {
    pub target: String,
    pub passed: bool,
    pub exit: Option<i32>,
    pub seconds: f64,
    pub executions: Option<u64>,
    pub per_second: Option<u64>,
    pub peak_rss_mb: Option<u64>,
    pub new_corpus_files: usize,
    pub seeds: usize,
    pub log: String,
}

/// The code generation cargo-fuzz 0.13's `build` asks for by default: optimised, with debug
/// assertions and overflow checks, AddressSanitizer, libFuzzer's coverage and comparison
/// tracing, `--cfg fuzzing`, one codegen unit. The
/// harness builds and runs the targets with cargo alone: installing cargo-fuzz compiled about 90
/// crates, 130 s beside the workspace build on a new 2-core machine. The crate stays a cargo-fuzz
/// project (`cargo fuzz run <target>` works where it is installed).
const FUZZ_RUSTFLAGS: &str = "-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Zsanitizer=address \
    -Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions -Ccodegen-units=1";

/// `cargo build` of every target (in `fuzz/`, its own workspace and target directory), on nightly
/// when there is one, else stable (same sanitizer runtimes) with RUSTC_BOOTSTRAP=1.
fn build_targets(nightly: bool) -> duct::Expression {
    let toolchain: &[&str] = if nightly { &["+nightly"] } else { &[] };
    let args = [toolchain, &["build", "--release", "--bins", "--target", util::TRIPLE]].concat();
    let flags = FUZZ_RUSTFLAGS.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut e = duct::cmd("cargo", &args)
        .dir(util::root().join("fuzz"))
        .env("RUSTFLAGS", flags)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "line-tables-only");
    if let Some(lib) = prebuilt_libfuzzer() {
        e = e.env("CUSTOM_LIBFUZZER_PATH", lib);
    }
    if nightly {
        e
    } else {
        e.env("RUSTC_BOOTSTRAP", "1")
    }
}

/// Debian's libFuzzer (`libclang-rt-19-dev`, scripts/setup.sh), when it is installed: linked
/// instead of the copy libfuzzer-sys compiles, 30 s of CPU on the targets' build's critical
/// path (the build 68 s -> 40 s here, the same targets and flags).
fn prebuilt_libfuzzer() -> Option<PathBuf> {
    let lib = Path::new("/usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a");
    lib.exists().then(|| lib.to_path_buf())
}

/// The targets: `fuzz/fuzz_targets/<name>.rs`, each the `[[bin]]` of its name.
fn targets() -> Result<Vec<String>> {
    let dir = util::root().join("fuzz/fuzz_targets");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(String::from))
        .collect();
    names.sort();
    Ok(names)
}

pub fn run(args: Args) -> Result<()> {
    let version = duct::cmd!("rustup", "run", "nightly", "rustc", "--version").stderr_null().read();
    let nightly = version.is_ok();
    let toolchain =
        version.map_or("stable with RUSTC_BOOTSTRAP=1".into(), |v| format!("nightly ({v})"));
    log!("fuzz: {toolchain}, AddressSanitizer on");
    let t = Instant::now();
    util::run(&build_targets(nightly))?;
    log!("fuzz: build took {:.0} s", t.elapsed().as_secs_f64());
    let (name, only) = match &args.mode {
        Mode::Build => return util::verdict("fuzz build", true, "", &toolchain),
        Mode::Ci { .. } => ("fuzz ci", None),
        Mode::Long { target, .. } => ("fuzz long", target.clone()),
    };
    let targets = match only {
        Some(t) => vec![t],
        None => targets()?,
    };
    // The CI's budgets run side by side, one target per core (each fuzzer is one thread); long
    // runs stay one at a time, pinned.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if matches!(args.mode, Mode::Ci { .. }) { cores } else { 1 };
    let queue = std::sync::Mutex::new(targets.iter().enumerate());
    let work = || -> Vec<_> {
        let next = std::iter::from_fn(|| queue.lock().unwrap().next());
        next.map(|(i, t)| (i, run_target(t, &args.mode))).collect()
    };
    let mut done: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..workers.min(targets.len())).map(|_| s.spawn(work)).collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    let runs = done.into_iter().map(|(_, r)| r).collect::<Result<Vec<_>>>()?;
    util::verdict(name, runs.iter().all(|r| r.passed), &figures(&runs), &runs)
}

pub fn libfuzzer_args(target: &str, mode: &Mode, dict: bool, max_len: Option<&str>) -> Vec<String> {
    // libFuzzer executes every seed first, within the budget.
    let mut a = vec![match mode {
        Mode::Ci { seconds } | Mode::Long { seconds, .. } => format!("-max_total_time={seconds}"),
        Mode::Build => unreachable!("a build runs no target"),
    }];
    a.extend(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"].map(String::from));
    a.push(format!("-artifact_prefix=artifacts/{target}/"));
    a.extend(dict.then(|| format!("-dict=dict/{target}.dict")));
    if let Mode::Ci { .. } = mode {
        // The same mutations in the same order each run (how far a budget gets depends on the
        // machine): `-use_cmp=0`, as recorded comparison operands (clocks, heap addresses)
        // made runs diverge.
        a.extend(["-seed=1", "-use_cmp=0", "-reload=0"].map(String::from));
    }
    a.extend(max_len.map(|n| format!("-max_len={}", n.trim())));
    a
}

pub fn stat(log: &str, key: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| l.strip_prefix(&format!("stat::{key}:"))?.trim().parse().ok())
}

fn run_target(target: &str, mode: &Mode) -> Result<TargetRun> {
    let dir = util::root().join("fuzz");
    let (work, backstop, pin) = match mode {
        Mode::Long { seconds, cpu, .. } => (format!("work/{target}"), seconds + 300, Some(cpu)),
        _ => (format!("work/ci-{target}"), 3600, None),
    };
    if pin.is_none() {
        // What an earlier run found must not change what this one executes.
        let _ = fs::remove_dir_all(dir.join(&work));
    }
    let (artifacts, seeds) = (format!("artifacts/{target}"), format!("corpus/{target}"));
    for d in [&work, &artifacts, &seeds, "work/logs"] {
        fs::create_dir_all(dir.join(d))?;
    }
    let max_len = fs::read_to_string(dir.join(format!("options/{target}.max_len"))).ok();
    let dict = dir.join(format!("dict/{target}.dict")).exists();
    let lib_args = libfuzzer_args(target, mode, dict, max_len.as_deref());
    // Long runs: one core, low priority; a backstop `timeout` ends a fuzzer that stops reporting.
    let mut wrapper = vec!["timeout".to_string(), backstop.to_string()];
    if let Some(cpu) = pin {
        wrapper.extend(["taskset", "-c", &cpu.to_string(), "nice", "-n", "10"].map(String::from));
    }
    let binary = format!("target/{}/release/{target}", util::TRIPLE);
    let argv = [&wrapper[..], &[binary, work.clone(), seeds.clone()], &lib_args[..]].concat();
    let log_path = dir.join(format!("work/logs/{target}.log"));
    log!("fuzz {target}: {}", lib_args[0]);
    let t = Instant::now();
    // cargo-fuzz's default for AddressSanitizer (the targets link libFuzzer's runtime twice).
    let e = duct::cmd(&argv[0], &argv[1..]).dir(&dir).env("ASAN_OPTIONS", "detect_odr_violation=0");
    let status =
        util::to_log(e, &log_path).unchecked().run().context("cannot start the fuzzer")?.status;
    let seconds = t.elapsed().as_secs_f64();
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let (executions, peak_rss_mb) =
        (stat(&text, "number_of_executed_units"), stat(&text, "peak_rss_mb"));
    let passed = status.success() && executions.is_some();
    if !passed {
        log!("---- last lines of {} ----", log_path.display());
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("{}", lines[lines.len().saturating_sub(60)..].join("\n"));
    }
    let count = |d: &str| fs::read_dir(dir.join(d)).map_or(0, |d| d.flatten().count());
    let (new_corpus_files, seeds) = (count(&work), count(&seeds));
    let show = |v: Option<u64>| v.map_or("?".into(), |e| e.to_string());
    let (execs, ok, peak) =
        (show(executions), if passed { "ok" } else { "FAILED" }, show(peak_rss_mb));
    log!("fuzz {target}: {ok}, {execs} executions in {seconds:.0} s, corpus {new_corpus_files} new + {seeds} seeds, peak RSS {peak} MB");
    let (target, exit, log) = (target.into(), status.code(), log_path.display().to_string());
    Ok(TargetRun {
        target,
        passed,
        exit,
        seconds,
        executions,
        per_second: executions.map(|e| (e as f64 / seconds.max(1.0)) as u64),
        peak_rss_mb,
        new_corpus_files,
        seeds,
        log,
    })
}

/// `http 20512 execs (680/s), payload ...`.
pub fn figures(runs: &[TargetRun]) -> String {
    util::list(runs, |r| {
        let execs = r.executions.map_or("?".into(), |e| e.to_string());
        format!("{} {execs} execs ({}/s)", r.target, r.per_second.unwrap_or(0))
    })
}
