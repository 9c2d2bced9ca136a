//! `cargo xtask lambda ...`: the AWS Lambda function (`bootstrap`, template.yaml, docs/LAMBDA.md)
//! built once, tested under AWS's Runtime Interface Emulator, and shipped by `sam build` as the
//! very binary the tests ran.
//!
//! | command | what it does |
//! |---|---|
//! | `lambda` | CI: SAM CLI (into a venv if missing), `sam validate --lint`, the build ([`package`]), the emulator run of every event in events/ and of ~4,600 public payloads with the function's logs checked, package sizes, `sam build` and the SHA-256 check ([`gate`]) |
//! | `lambda build` | the bootstrap build and package; `--artifacts-dir` copies the binary for `sam build` (the Makefile's target) |
//! | `lambda events` | writes the sample events of events/ and their expected answers ([`gen`]) |
//! | `lambda cold-start` | instrument: starts from cold storage, lazy index against prefault ([`measure`]) |
//! | `lambda sam-local` | instrument: `sam local invoke` in Docker against a stand-in base image ([`measure`]) |
//!
//! The emulator (`aws-lambda-rie-x86_64`, shipped in the PyPI aws-sam-cli package, [`sam`]) runs
//! the bootstrap without Docker, on loopback ([`emulator`]); answers and expected answers are
//! read with serde ([`events`]); the function's log lines are checked by [`logs`]. Results go to
//! `<target>/xtask/lambda*.json`.

mod emulator;
mod events;
mod gate;
mod gen;
mod logs;
mod measure;
mod package;
mod sam;

use crate::util::{self, mb};
use anyhow::Result;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    ci: gate::CiArgs,
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
    ColdStart(measure::cold::Args),
    /// `sam build`, then `sam local invoke` of sample events in Docker (stand-in base image).
    SamLocal(measure::sam_local::Args),
    /// Write events/ (sample events of the four sources, the bad-input events, expected.tsv).
    Events(gen::Args),
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        None => gate::run(args.ci),
        Some(Command::Build { artifacts_dir }) => {
            let t = Instant::now();
            let pkg = package::build()?;
            if let Some(dir) = artifacts_dir {
                pkg.copy_to(&dir)?;
            }
            let (mb, s) = (mb(pkg.unzipped_bytes), t.elapsed().as_secs_f64());
            let figures = format!("bootstrap sha256 {}, {mb:.1} MB, {s:.0} s", pkg.sha256);
            util::verdict("lambda build", true, &figures, &pkg)
        }
        Some(Command::ColdStart(a)) => measure::cold::run(a),
        Some(Command::SamLocal(a)) => measure::sam_local::run(a),
        Some(Command::Events(a)) => gen::run(a),
    }
}
