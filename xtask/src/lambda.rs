//! `cargo xtask lambda ...`: the AWS Lambda function (`bootstrap`, template.yaml, docs/LAMBDA.md)
//! built once, tested under AWS's Runtime Interface Emulator, and shipped by `sam build` as the
//! very binary the tests ran.
//!
//! | command | what it does |
//! |---|---|
//! | `lambda` | CI: SAM CLI (into a venv if missing), `sam validate --lint`, the build ([`package`]), the emulator run of every event in events/ and of ~4,600 public payloads with the function's logs checked ([`run`]), package sizes, `sam build` and the SHA-256 check ([`sam`]) |
//! | `lambda build` | the bootstrap build and package; `--artifacts-dir` copies the binary for `sam build` (the Makefile's target) |
//! | `lambda cold-start` | starts from cold storage (page cache dropped), lazy index against prefault ([`cold`]) |
//! | `lambda sam-local` | `sam local invoke` in Docker against the stand-in base image ([`sam`]) |
//! | `lambda events` | writes the sample events of events/ and their expected answers ([`gen`]) |
//!
//! The emulator (`aws-lambda-rie-x86_64`, shipped in the PyPI aws-sam-cli package) runs the
//! bootstrap without Docker, on loopback ([`emulator`]); answers and expected answers are read
//! with serde ([`events`]); the function's log lines are checked by [`logs`]. Results go to
//! target/xtask/lambda*.json.

mod cold;
mod emulator;
mod events;
mod gen;
mod logs;
mod package;
mod run;
mod sam;
mod tools;

use crate::report::verdict;
use anyhow::Result;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    ci: run::CiArgs,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Build the bootstrap (static, x86_64) and its zip; the same build the emulator tests.
    Build {
        /// Also copy the binary here as `bootstrap` (SAM's ARTIFACTS_DIR, from the Makefile).
        #[arg(long)]
        artifacts_dir: Option<PathBuf>,
    },
    /// Cold starts with the page cache dropped before each (root): init and first queries,
    /// lazy index against FRAUD_PREFAULT=1, alternated.
    ColdStart(cold::Args),
    /// `sam build`, then `sam local invoke` of sample events in Docker (stand-in base image).
    SamLocal(sam::LocalArgs),
    /// Write events/ (sample events of the four sources, the bad-input events, expected.tsv).
    Events(gen::Args),
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        None => run::run(args.ci),
        Some(Command::Build { artifacts_dir }) => {
            let t = Instant::now();
            let pkg = package::build()?;
            if let Some(dir) = artifacts_dir {
                pkg.copy_to(&dir)?;
            }
            let figures = format!(
                "bootstrap sha256 {}, {:.1} MB, {:.0} s",
                pkg.sha256,
                package::mb(pkg.unzipped_bytes),
                t.elapsed().as_secs_f64()
            );
            verdict("lambda build", true, &figures, &pkg)
        }
        Some(Command::ColdStart(a)) => cold::run(a),
        Some(Command::SamLocal(a)) => sam::local(a),
        Some(Command::Events(a)) => gen::run(a),
    }
}

/// Cargo's target directory (`CARGO_TARGET_DIR` if set); the Lambda outputs go below it.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => crate::cmd::root().join(d),
        None => crate::cmd::root().join("target"),
    }
}

/// `target/xtask/lambda/`, for logs and intermediate files, created on first use.
pub fn work_dir() -> Result<PathBuf> {
    let d = target_dir().join("xtask/lambda");
    std::fs::create_dir_all(&d)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::Args,
        }
        Cli::command().debug_assert();
    }
}
