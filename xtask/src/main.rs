//! `cargo xtask`: the command line of the harness (the library, `src/lib.rs`).

use anyhow::Result;
use clap::{Parser, Subcommand};
use xtask::{ci, fuzz, lambda, stack, verify};

#[derive(Parser)]
#[command(about = "The fraud scorer's harness: CI, verification, Lambda, contest stack, fuzzing")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Everything CI checks (after scripts/setup.sh): fmt, clippy, tests and every gate.
    Ci(ci::Args),
    /// The public test set through the handler (every answer exact), then vectors and 5 neighbours
    /// against the labeller crate (public, generated and adversarial queries; 0 differences).
    Verify,
    /// The Lambda function: emulator run of the sample events and the replay, `sam build`.
    Lambda(lambda::Args),
    /// The contest stack (HAProxy + two APIs in docker compose) under k6.
    Stack(stack::Args),
    /// The cargo-fuzz targets (AddressSanitizer).
    Fuzz(fuzz::Args),
}

fn main() -> Result<()> {
    xtask::util::absolute_target_dir()?;
    match Cli::parse().command {
        Command::Ci(a) => ci::run(a),
        Command::Verify => verify::run(),
        Command::Lambda(a) => lambda::run(a),
        Command::Stack(a) => stack::run(a),
        Command::Fuzz(a) => fuzz::run(a),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
