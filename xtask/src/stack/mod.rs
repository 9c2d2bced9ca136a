//! `cargo xtask stack ...`: the contest stack (being ported from scripts/stack-*.sh).

use anyhow::{bail, Result};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Build the API image and the HAProxy stand-in (no registry needed).
    Images,
    /// One k6 replica of the official test against the stack.
    Run,
    /// The same k6 scenario against HAProxy answering by itself.
    Floor,
    /// CI: a short k6 run of the whole stack; fails on any error, FP or FN.
    Smoke,
    /// Instance loss under load.
    Chaos,
    /// Overload at 3x the contest peak.
    Overload,
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Images
        | Command::Run
        | Command::Floor
        | Command::Smoke
        | Command::Chaos
        | Command::Overload => bail!("cargo xtask stack: not ported yet"),
    }
}
