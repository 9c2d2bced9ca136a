//! `cargo xtask fuzz ci|long|build`: the cargo-fuzz targets in `fuzz/` (docs/FUZZING.md).
//!
//! Every target is built once (release, debug assertions and overflow checks on,
//! AddressSanitizer), then run for a fixed time each: `ci` 35 s per target with a fixed seed (a
//! CI failure is reproducible), `long` any time per target, pinned to one CPU at low priority.
//! Any crash, panic, sanitizer report, leak, slow input (over `--timeout`) or out-of-memory fails
//! the run; libFuzzer's own final statistics give each target's executions and peak memory.
//! Growing corpora live in `fuzz/work/<target>` (not committed); the committed seeds in
//! `fuzz/corpus/<target>` are only read; crash inputs land in `fuzz/artifacts/<target>/`.

use crate::cmd::{self, root};
use crate::{log, report};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(clap::Subcommand)]
enum Mode {
    /// Every target for a short fixed time with a fixed seed (what CI runs).
    Ci {
        /// Seconds per target.
        #[arg(long, env = "FUZZ_CI_SECONDS", default_value_t = 35)]
        seconds: u64,
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
        cmd::require(
            "cargo-fuzz",
            "to fuzz (cargo install cargo-fuzz --version 0.13.2 --locked)",
        )?;
        let nightly = Command::new("rustup")
            .args(["run", "nightly", "rustc", "--version"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success());
        Ok(match nightly {
            Some(o) => Toolchain {
                nightly: true,
                name: format!("nightly ({})", String::from_utf8_lossy(&o.stdout).trim()),
            },
            None => Toolchain {
                nightly: false,
                name: "stable with RUSTC_BOOTSTRAP=1".to_string(),
            },
        })
    }

    /// `[wrapper...] cargo [+nightly] fuzz <args>`, in `fuzz/`.
    fn command(&self, wrapper: &[String], args: &[&str]) -> Command {
        let mut argv: Vec<String> = wrapper.to_vec();
        argv.push("cargo".into());
        if self.nightly {
            argv.push("+nightly".into());
        }
        argv.push("fuzz".into());
        argv.extend(args.iter().map(|a| a.to_string()));
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).current_dir(root().join("fuzz"));
        if !self.nightly {
            c.env("RUSTC_BOOTSTRAP", "1");
        }
        c
    }
}

pub fn run(args: Args) -> Result<()> {
    let tc = Toolchain::detect()?;
    log!("fuzz: {}, AddressSanitizer on", tc.name);
    let t = Instant::now();
    cmd::run(&mut tc.command(&[], &["build"]))?;
    log!("fuzz: build took {:.0} s", t.elapsed().as_secs_f64());
    let (seconds, only, pin, name) = match args.mode {
        Mode::Build => return report::verdict("fuzz build", true, "", &tc.name),
        Mode::Ci { seconds } => (seconds, None, None, "fuzz ci"),
        Mode::Long {
            seconds,
            target,
            cpu,
        } => (seconds, target, Some(cpu), "fuzz long"),
    };
    let targets: Vec<String> = match only {
        Some(t) => vec![t],
        None => cmd::output(&mut tc.command(&[], &["list"]))?
            .lines()
            .map(str::to_string)
            .collect(),
    };
    let mut runs = Vec::new();
    for target in &targets {
        runs.push(run_target(&tc, target, seconds, pin, name == "fuzz ci")?);
    }
    let figures = runs
        .iter()
        .map(|r| {
            format!(
                "{} {} execs ({}/s)",
                r.target,
                r.executions.map_or("?".into(), |e| e.to_string()),
                r.per_second.unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let passed = runs.iter().all(|r| r.passed);
    report::verdict(name, passed, &figures, &runs)
}

fn run_target(
    tc: &Toolchain,
    target: &str,
    seconds: u64,
    pin: Option<u32>,
    fixed_seed: bool,
) -> Result<TargetRun> {
    let dir = root().join("fuzz");
    for sub in ["work", "artifacts", "corpus"] {
        std::fs::create_dir_all(dir.join(sub).join(target))?;
    }
    std::fs::create_dir_all(dir.join("work/logs"))?;
    let mut lib_args = vec![
        format!("-max_total_time={seconds}"),
        "-timeout=10".to_string(),
        "-rss_limit_mb=2048".to_string(),
        "-print_final_stats=1".to_string(),
        format!("-artifact_prefix=artifacts/{target}/"),
    ];
    let dict = dir.join(format!("dict/{target}.dict"));
    if dict.exists() {
        lib_args.push(format!("-dict=dict/{target}.dict"));
    }
    if fixed_seed {
        lib_args.push("-seed=1".to_string());
    }
    if let Ok(n) = std::fs::read_to_string(dir.join(format!("options/{target}.max_len"))) {
        lib_args.push(format!("-max_len={}", n.trim()));
    }
    // Long runs stay on one core at low priority; a backstop `timeout` ends a fuzzer that stops
    // reporting (libFuzzer itself stops at max_total_time).
    let mut wrapper = vec!["timeout".to_string(), (seconds + 300).to_string()];
    if let Some(cpu) = pin {
        wrapper.extend(["taskset", "-c", &cpu.to_string(), "nice", "-n", "10"].map(String::from));
    }
    let (work, corpus) = (format!("work/{target}"), format!("corpus/{target}"));
    let mut run_args = vec!["run", target, &work, &corpus, "--"];
    run_args.extend(lib_args.iter().map(String::as_str));
    let mut c = tc.command(&wrapper, &run_args);
    let log_path = dir.join(format!("work/logs/{target}.log"));
    let log_file = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    c.stdout(log_file.try_clone()?).stderr(log_file);
    log!("fuzz {target}: {seconds} s");
    let t = Instant::now();
    let status = c.status().context("cannot start cargo fuzz")?;
    let elapsed = t.elapsed();
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let stat = |key: &str| -> Option<u64> {
        text.lines()
            .rev()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
    };
    let executions = stat("stat::number_of_executed_units:");
    let passed = status.success() && executions.is_some();
    if !passed {
        log!("---- last lines of {} ----", log_path.display());
        for l in text
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            eprintln!("{l}");
        }
    }
    let secs = elapsed.max(Duration::from_secs(1)).as_secs_f64();
    let r = TargetRun {
        target: target.to_string(),
        passed,
        exit: status.code(),
        seconds: elapsed.as_secs_f64(),
        executions,
        per_second: executions.map(|e| (e as f64 / secs) as u64),
        peak_rss_mb: stat("stat::peak_rss_mb:"),
        new_corpus_files: count_files(&dir.join("work").join(target)),
        seeds: count_files(&dir.join("corpus").join(target)),
        log: log_path.display().to_string(),
    };
    log!(
        "fuzz {target}: {}, {} executions in {:.0} s, corpus {} new + {} seeds, peak RSS {} MB",
        if r.passed { "ok" } else { "FAILED" },
        r.executions.map_or("?".into(), |e| e.to_string()),
        r.seconds,
        r.new_corpus_files,
        r.seeds,
        r.peak_rss_mb.map_or("?".into(), |m| m.to_string())
    );
    Ok(r)
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.filter(|e| e.is_ok()).count())
}
