//! `cargo xtask` (alias in `.cargo/config.toml`): every command logs on stderr and ends with one
//! verdict line (`<command>: PASS|FAIL <figures>`), also kept as JSON under `<target>/xtask/`.
//! [`util`] imports nothing of the harness; each command module only `util` and its children;
//! the instruments CI never runs (`bench`, `lambda::measure`, `stack::measure`) sit apart.

mod bench;
mod ci;
mod fuzz;
mod lambda;
mod stack;
mod util;
mod verify;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    about = "The fraud scorer's harness: CI, verification, Lambda, contest stack, fuzzing, benchmarks"
)]
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
    /// Benchmarks (criterion) of the search against brute force and faiss.
    Bench,
}

fn main() -> Result<()> {
    // A relative CARGO_TARGET_DIR is relative to where cargo was started; the commands run from
    // the workspace root, so it is made absolute once, here.
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        std::env::set_var("CARGO_TARGET_DIR", std::path::absolute(dir)?);
    }
    match Cli::parse().command {
        Command::Ci(a) => ci::run(a),
        Command::Verify => verify::run(),
        Command::Lambda(a) => lambda::run(a),
        Command::Stack(a) => stack::run(a),
        Command::Fuzz(a) => fuzz::run(a),
        Command::Bench => bench::run(),
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
