//! `front`: the fraud scorer over shards, one binary for both places it runs.
//!
//! - `front serve --listen ADDR --shards A,B,C`: HTTP/1.1 on the `http-server` event loop (the
//!   contest API's hardened layer: limits, deadlines, drain), the shards invoked through the
//!   Lambda Invoke API; many requests in flight, none blocking the loop
//!   (`fan_out::front::FrontApp`). `GET /metrics` on `--metrics-listen` only.
//! - `front` with no command, as Lambda runs it (`provided.al2023`, `template-sharded.yaml`):
//!   the same routes and bodies as the single function's `bootstrap`, through the same Lambda
//!   adapter (`function::lambda`), each event's shards awaited (`fan_out::front::LambdaFront`).
//!   Environment: `FRAUD_SHARDS` (comma-separated, in shard order), `FRAUD_SHARD_TIMEOUT_MS`
//!   (default 1000), `FRAUD_METRICS_FLUSH_SECONDS` as for `bootstrap`.
//!
//! Either way the shards are invoked once at start and proven to tile one set before anything
//! is answered (`fan_out::Fanout::prove`); a shard that fails, times out or answers wrongly
//! makes the request a 502 or 504 naming it.

use clap::{Parser, Subcommand};
use fan_out::front::{FailureLog, FrontApp, LambdaFront};
use fan_out::{Fanout, ShardTarget};
use function::lambda::{Metrics, Process};
use http_server::{Endpoint, Limits, ReadyFlag, Server};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(version, about = "The fraud scorer over shard functions")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP/1.1 until SIGTERM (without a command: the Lambda function).
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Where to listen: `unix:/path/to.sock` (or a path starting with `/`), or `HOST:PORT`.
    #[arg(long, env = "FRAUD_LISTEN", default_value = "127.0.0.1:9999")]
    listen: String,
    /// Where `GET /metrics` is served (Prometheus text), apart from `--listen`; none if unset.
    #[arg(long, env = "FRAUD_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// The shard functions, in shard order, comma-separated: `NAME[:VERSION]`, an ARN, or
    /// `ENDPOINT#NAME` for an emulator (e.g. `http://127.0.0.1:9001#function`).
    #[arg(long, env = "FRAUD_SHARDS", value_delimiter = ',', required = true)]
    shards: Vec<String>,
    /// How long each shard may take, retries included (504 naming a shard that does not answer
    /// in time, 502 one that fails).
    #[arg(long, env = "FRAUD_SHARD_TIMEOUT_MS", default_value_t = 1000)]
    shard_timeout_ms: u64,
    /// Connections served at once (the HTTP layer's other limits keep their defaults:
    /// `http_server::Limits`).
    #[arg(long, env = "FRAUD_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway.
    #[arg(long, env = "FRAUD_DRAIN_MS", default_value_t = 5_000)]
    drain_ms: u64,
}

fn main() -> ExitCode {
    let started = Instant::now();
    match Cli::parse().command {
        Some(Command::Serve(args)) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("FRAUD_LOG")
                        .unwrap_or_else(|_| "info".into()),
                )
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .init();
            function::lambda::install_abort_on_panic();
            match serve(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "front failed");
                    ExitCode::FAILURE
                }
            }
        }
        None => function::lambda::main("front", |process| lambda(started, process)),
    }
}

fn targets(names: &[String]) -> anyhow::Result<Vec<ShardTarget>> {
    names
        .iter()
        .map(|s| s.trim().parse().map_err(anyhow::Error::msg))
        .collect()
}

/// The container front: the event loop on this thread, the fan-outs on a runtime thread.
fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let endpoint: Endpoint = args.listen.parse()?;
    let limits = Limits {
        max_connections: args.max_connections.max(1),
        drain: Duration::from_millis(args.drain_ms),
        ..Limits::default()
    };
    let limits = http_server::server::fit_open_files(limits)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fan-out")
        .enable_all()
        .build()?;
    let timeout = Duration::from_millis(args.shard_timeout_ms);
    let fanout = Arc::new(runtime.block_on(Fanout::new(targets(&args.shards)?, timeout))?);
    // `/ready` is the app's (the proof), not the flag's: the flag only says 503 while draining.
    let ready = ReadyFlag::default();
    ready.set(true);
    let listener = http_server::listener::Listener::bind(&endpoint)?;
    let mut server = Server::new_with(listener, ready, limits, |completions| {
        FrontApp::start(fanout.clone(), runtime.handle().clone(), completions)
    })?;
    if let Some(m) = &args.metrics_listen {
        server.serve_metrics(http_server::listener::Listener::bind(&m.parse()?)?)?;
    }
    server.stop_on_signals()?;
    let names: Vec<String> = fanout.targets().map(|s| s.to_string()).collect();
    tracing::info!(
        ?endpoint,
        metrics = args.metrics_listen.as_deref().unwrap_or("off"),
        shards = %names.join(","),
        timeout_ms = args.shard_timeout_ms,
        "listening; front over shards (ready once they are proven to tile one set)"
    );
    server.run(&mut ())?;
    tracing::info!("drained; exiting");
    Ok(())
}

/// The Lambda front: the shards proven during the init (which also starts an environment of
/// each), then one event at a time.
fn lambda(started: Instant, process: &'static Process) -> Result<(), lambda_http::Error> {
    let names =
        std::env::var("FRAUD_SHARDS").map_err(|_| "FRAUD_SHARDS names no shard function")?;
    let names: Vec<String> = names.split(',').map(String::from).collect();
    let timeout = match std::env::var("FRAUD_SHARD_TIMEOUT_MS") {
        Ok(ms) => Duration::from_millis(
            ms.parse()
                .map_err(|_| format!("FRAUD_SHARD_TIMEOUT_MS must be milliseconds, not {ms:?}"))?,
        ),
        Err(_) => Duration::from_secs(1),
    };
    let runtime = function::lambda::runtime()?;
    let fanout = Arc::new(runtime.block_on(Fanout::new(targets(&names)?, timeout))?);
    let proof = runtime.block_on(fanout.prove()).map(|t| t.shards.clone());
    let index = match &proof {
        Ok(shards) => shards.clone(),
        Err(e) => {
            tracing::warn!(error = %e, "the shards are not proven yet: each event tries again");
            Vec::new()
        }
    };
    let crcs: Vec<&str> = index.iter().map(|s| s.crc32.as_str()).collect();
    tracing::info!(
        shards = %names.join(","),
        proven = proof.is_ok(),
        shard_crc32 = %crcs.join(","),
        timeout_ms = timeout.as_millis() as u64,
        init_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "front ready"
    );
    let front: &'static LambdaFront = Box::leak(Box::new(LambdaFront {
        fanout,
        proven: Default::default(),
        failures: FailureLog::default(),
    }));
    function::lambda::serve_http_on(runtime, front, process, Metrics::from_env(index)?)
}
