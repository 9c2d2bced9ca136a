//! `front`: the fraud scorer over shards as an AWS Lambda function (custom runtime
//! `provided.al2023`, `template-sharded.yaml`). The same handler and Lambda adapter as the single
//! function's `bootstrap` (`function::lambda`), with the search fanned out to the shard
//! functions ([`fan_out::Fanout`]): the same routes, bodies and metrics; a shard that fails or
//! times out is a 502 or 504 naming it.
//!
//! Environment: `FRAUD_SHARDS`, the shard functions in shard order, comma-separated (a name, an
//! ARN, or `ENDPOINT#NAME` for an emulator); `FRAUD_SHARD_TIMEOUT_MS`, each invocation's bound
//! (default 1000); `FRAUD_METRICS_FLUSH_SECONDS` as for `bootstrap`.

use fan_out::{Fanout, ShardTarget};
use function::lambda::{Metrics, Process};
use function::Scorer;
use lambda_http::{tracing, Error};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let started = Instant::now();
    function::lambda::main("front", |process| serve(started, process))
}

fn serve(started: Instant, process: &'static Process) -> Result<(), Error> {
    let shards: Vec<ShardTarget> = std::env::var("FRAUD_SHARDS")
        .map_err(|_| "FRAUD_SHARDS names no shard function")?
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let timeout = match std::env::var("FRAUD_SHARD_TIMEOUT_MS") {
        Ok(ms) => Duration::from_millis(
            ms.parse()
                .map_err(|_| format!("FRAUD_SHARD_TIMEOUT_MS must be milliseconds, not {ms:?}"))?,
        ),
        Err(_) => Duration::from_secs(1),
    };
    let fanout: &'static Fanout = Box::leak(Box::new(Fanout::start(shards, timeout)?));
    let names: Vec<String> = fanout.shards().iter().map(|s| s.to_string()).collect();
    tracing::info!(
        shards = %names.join(","),
        timeout_ms = timeout.as_millis() as u64,
        init_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "front ready"
    );
    function::lambda::serve_http(
        Scorer::remote(fanout),
        process,
        Metrics::from_env(Vec::new())?,
    )
}
