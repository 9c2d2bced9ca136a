//! The fraud scorer's harness (`cargo xtask`): each command logs on stderr and ends with a verdict
//! line, also as JSON under `<target>/xtask/`. [`util`] imports nothing of the rest.

pub mod ci;
pub mod fuzz;
pub mod lambda;
pub mod scale;
pub mod shards;
pub mod stack;
pub mod util;
pub mod verify;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// What nearly every module uses: errors, serde's derives, paths and times, the shared helpers.
mod prelude {
    pub use crate::util::{self, cmd, log, root};
    pub use anyhow::{bail, ensure, Context, Result};
    pub use serde::{Deserialize, Serialize};
    pub use std::collections::BTreeMap;
    pub use std::fs;
    pub use std::io::{Read, Write};
    pub use std::path::{Path, PathBuf};
    pub use std::time::{Duration, Instant};
}

#[derive(Parser)]
#[command(about = "The fraud scorer's harness: CI, verification, Lambda, contest stack, fuzzing")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Everything CI checks (after scripts/setup.sh): fmt, clippy, tests and every gate.
    Ci(ci::Args),
    /// What CI builds: every target of the workspace in the `ci` profile, linted by clippy as it
    /// compiles (`--bin NAME`: one binary of that build; `--shipped`: the API image's and the
    /// Lambda's static x86_64 binaries).
    Build(BuildArgs),
    /// The public test set through the handler (every answer exact), then vectors and 5 neighbours
    /// against the labeller crate (public, generated and adversarial queries; 0 differences).
    Verify(verify::Args),
    /// The Lambda function: emulator run of the sample events and the replay, `sam build`.
    Lambda(lambda::Args),
    /// The contest stack (HAProxy + two APIs in docker compose) under k6.
    Stack(stack::Args),
    /// The cargo-fuzz targets (AddressSanitizer).
    Fuzz(fuzz::Args),
    /// A synthetic reference set of a few hundred thousand packed, embedded, served and held
    /// exact against the labeller (the path to other data, docs/SCALING.md).
    Scale(scale::Args),
    /// A reference set split into shards, each a bootstrap under AWS's emulator, with a front
    /// (`front serve`) serving HTTP until stopped.
    Shards(shards::Args),
}

#[derive(clap::Args)]
struct BuildArgs {
    /// Only this binary of the workspace build.
    #[arg(long, conflicts_with = "shipped")]
    bin: Option<String>,
    /// The shipped binaries (one build for both).
    #[arg(long)]
    shipped: bool,
}

fn build(a: BuildArgs) -> Result<()> {
    let t = std::time::Instant::now();
    let built = match (a.bin, a.shipped) {
        (Some(name), _) => util::built(&name)?.display().to_string(),
        (None, true) => {
            let s = util::build_shipped()?;
            format!("{} {}", s.local_runner.display(), s.bootstrap.display())
        }
        (None, false) => util::build_workspace().map(|()| "the workspace".to_string())?,
    };
    let figures = format!("{built} in {:.0} s", t.elapsed().as_secs_f64());
    util::verdict("build", true, &figures, &built)
}

/// `cargo xtask`: parses the command line and runs the command.
pub fn main() -> Result<()> {
    util::absolute_target_dir()?;
    match Cli::parse().command {
        Command::Ci(a) => ci::run(a),
        Command::Build(a) => build(a),
        Command::Verify(a) => verify::run(a),
        Command::Lambda(a) => lambda::run(a),
        Command::Stack(a) => stack::run(a),
        Command::Fuzz(a) => fuzz::run(a),
        Command::Scale(a) => scale::run(a),
        Command::Shards(a) => shards::run(a),
    }
}
