//! `cargo measure` (alias in `.cargo/config.toml`): the instruments CI never runs. Each builds on
//! the harness's own sessions and checks (the `xtask` library) and ends, like a gate, with one
//! verdict line and its JSON under `<target>/xtask/`.

mod batch;
mod bench;
mod cold_start;
mod fan_out;
mod plot;
mod pool;
mod sam_local;
mod scale;

use anyhow::Result;
use batch::Shape;
use clap::{Parser, Subcommand};
use xtask::stack::Common;

#[derive(Parser)]
#[command(about = "The fraud scorer's instruments: stack batches, Lambda cold starts, benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `run` and `floor`: one run of a load shape.
#[derive(clap::Args)]
struct One {
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
enum Command {
    /// Alternated full runs of several configurations of the contest stack: tables, medians,
    /// SVG, markdown.
    Batch(batch::Args),
    /// One k6 replica of the official test against the stack (a batch of one run).
    Run(One),
    /// The same k6 scenario against HAProxy answering by itself (the floor of this machine).
    Floor(One),
    /// Lambda cold starts with the page cache dropped before each (root): init and first
    /// queries, lazy index against FRAUD_PREFAULT=1, alternated.
    ColdStart(cold_start::Args),
    /// `sam build`, then `sam local invoke` of sample events in Docker (stand-in base image
    /// under a private tag) and `sam local start-api` on loopback.
    SamLocal(sam_local::Args),
    /// Benchmarks (criterion) of the search against brute force and faiss.
    Bench,
    /// The function over reference sets of other sizes: packing, search, exactness, the index
    /// in the binary, the Lambda's cold start; a record and a log-log chart (docs/SCALING.md).
    Scale(scale::Args),
    /// The front over S shards under AWS's emulator (`cargo xtask shards`), warm and cold,
    /// beside one shard invoked directly; the cost per million requests.
    FanOut(fan_out::Args),
    /// The front over S shards, each under a pool of emulators behind HAProxy, invocations
    /// optionally held (the Invoke API's round trip, modelled), until stopped: its concurrency.
    Pool(pool::Args),
    /// The shipped build alone (what `scale` times under GNU time).
    #[command(hide = true)]
    ShippedBuild,
}

/// The middle value, the mean of the two middle ones for an even count (NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() -> Result<()> {
    xtask::util::absolute_target_dir()?;
    match Cli::parse().command {
        Command::Batch(a) => batch::run("measure batch", a),
        Command::Run(One { shape, common }) => batch::one("measure run", "stack", shape, common),
        Command::Floor(One { shape, common }) => {
            batch::one("measure floor", "floor", shape, common)
        }
        Command::ColdStart(a) => cold_start::run(a),
        Command::SamLocal(a) => sam_local::run(a),
        Command::Bench => bench::run(),
        Command::Scale(a) => scale::run(a),
        Command::FanOut(a) => fan_out::run(a),
        Command::Pool(a) => pool::run(a),
        Command::ShippedBuild => xtask::util::build_shipped().map(drop),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
        let median = super::median;
        assert_eq!([median(vec![3.0, 1.0, 2.0]), median(vec![4.0, 1.0, 2.0, 3.0])], [2.0, 2.5]);
        assert!(median(vec![]).is_nan());
    }
}
