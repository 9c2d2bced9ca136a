//! One server process over the embedded index: its command line, the index's residency, the
//! warm-up, start and drain. This is the only part of `serve` that needs the embedded index
//! (feature `embedded-index`).

mod warmup;

use super::answer::{NoWork, ReadyFlag, Scoring};
use super::config::{Endpoint, Limits};
use super::listener::{self, Listener};
use super::server::Server;
use anyhow::{Context, Result};
use index_pack::format::Identity;
use std::time::{Duration, Instant};
use tracing::info;
use warmup::Warmup;

/// Command-line and environment settings of `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen: `unix:/path/to.sock` (or any path starting with `/`), or `HOST:PORT`.
    #[arg(long, env = "FRAUD_LISTEN", default_value = "127.0.0.1:9999")]
    pub listen: String,
    /// Largest request body accepted; longer bodies get 413.
    #[arg(long, env = "FRAUD_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Time a client has to send the complete request head (slow or silent clients); also how
    /// long an idle keep-alive connection stays open.
    #[arg(long, env = "FRAUD_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Time a client has to send the complete body once the head is in (408 after that).
    #[arg(long, env = "FRAUD_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,
    /// Time a client has to take answers once they wait to be written, however slowly it
    /// reads meanwhile (closed after that).
    #[arg(long, env = "FRAUD_SEND_TIMEOUT_MS", default_value_t = 10_000)]
    pub send_timeout_ms: u64,
    /// Connections served at once. At the cap a new connection takes the place of one that has
    /// delivered nothing for a second or more; if there is none, it gets 503 and is closed.
    #[arg(long, env = "FRAUD_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Bytes of answers one connection may have waiting; its pipelined requests are not read
    /// beyond that until the client takes them.
    #[arg(long, env = "FRAUD_MAX_UNSENT_BYTES", default_value_t = 16 * 1024)]
    pub max_unsent_bytes: usize,
    /// Requests of one connection answered per turn of the event loop (fairness between
    /// clients; one read per connection per turn).
    #[arg(long, env = "FRAUD_MAX_REQUESTS_PER_TURN", default_value_t = 16)]
    pub max_requests_per_turn: usize,
    /// MiB that all connections together may hold (unfinished and pipelined requests, unsent
    /// answers); beyond it, new connections and the connection that grows get 503.
    #[arg(long, env = "FRAUD_MEMORY_BUDGET_MB", default_value_t = 16)]
    pub memory_budget_mb: usize,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway.
    #[arg(long, env = "FRAUD_DRAIN_MS", default_value_t = 5_000)]
    pub drain_ms: u64,
    /// Microseconds the event loop keeps polling without sleeping after each event (0: it
    /// sleeps at once). Costs CPU in proportion; see `Limits::spin`.
    #[arg(long, env = "FRAUD_SPIN_US", default_value_t = 0)]
    pub spin_us: u64,
    /// Queries run on the loop thread during warm-up, after the index pages are read.
    #[arg(long, env = "FRAUD_WARMUP_QUERIES", default_value_t = 512)]
    pub warmup_queries: usize,
    /// How the embedded index is made resident: `lazy` (zero-copy; warm-up reads every page
    /// before ready), `prefault` (zero-copy, every page read and checked before the bind) or
    /// `hugepages` (a copy in 2 MiB pages; see "Index residency" in the `serve` docs).
    #[arg(long, env = "FRAUD_INDEX_RESIDENCY", default_value = "lazy")]
    pub residency: function::index::Residency,
    /// MEASUREMENT ONLY: answer every request with the same 200, from the same event loop and
    /// HTTP layer but without parsing the body or searching (the stack's lower bound). The
    /// index is not opened.
    #[arg(long, env = "FRAUD_NO_WORK")]
    pub no_work: bool,
    /// Deltas searched with the embedded index: `*.idx` files, or directories of them,
    /// `:`-separated (they must extend the embedded index; see `index-pack delta`). Default:
    /// the directory `deltas` beside the binary, if there is one.
    #[arg(long, env = "FRAUD_DELTAS")]
    pub deltas: Option<std::ffi::OsString>,
    /// `on`: count every answer and serve the counts at `GET /metrics` (Prometheus text);
    /// `off`: neither (the route is then a 404).
    #[arg(long, env = "FRAUD_METRICS", default_value = "on", value_parser = ["on", "off"])]
    pub metrics: String,
    /// A front over shards instead of the embedded index: the shard functions, in shard order,
    /// comma-separated (`NAME`, an ARN, or `ENDPOINT#NAME` for an emulator, e.g.
    /// `http://127.0.0.1:9001#function`), invoked through the Lambda Invoke API in parallel and
    /// merged exactly (`fan-out`). One request is fanned out at a time per process.
    #[cfg(feature = "shards")]
    #[arg(long, env = "FRAUD_SHARDS", value_delimiter = ',')]
    pub shards: Vec<String>,
    /// With `--shards`: how long each shard may take (502 naming a shard that fails, 504 one
    /// that does not answer in time).
    #[cfg(feature = "shards")]
    #[arg(long, env = "FRAUD_SHARD_TIMEOUT_MS", default_value_t = 1000)]
    pub shard_timeout_ms: u64,
}

impl From<&ServeArgs> for Limits {
    fn from(a: &ServeArgs) -> Limits {
        Limits {
            max_body_bytes: a.max_body_bytes,
            header_timeout: Duration::from_millis(a.header_timeout_ms),
            body_timeout: Duration::from_millis(a.body_timeout_ms),
            send_timeout: Duration::from_millis(a.send_timeout_ms),
            max_connections: a.max_connections.max(1),
            max_unsent_bytes: a.max_unsent_bytes.max(1),
            max_requests_per_turn: a.max_requests_per_turn.max(1),
            memory_budget: a.memory_budget_mb << 20,
            max_shedding: super::server::MAX_SHEDDING,
            drain: Duration::from_millis(a.drain_ms),
            spin: Duration::from_micros(a.spin_us),
        }
    }
}

/// Entry point of `local-runner serve`: serves until SIGTERM or SIGINT, then drains and exits.
pub fn run(args: ServeArgs) -> Result<()> {
    let endpoint: Endpoint = args.listen.parse()?;
    let limits = fit_descriptors(Limits::from(&args))?;
    let ready = ReadyFlag::default();
    if args.no_work {
        ready.set(true);
        let mut server = Server::new(Listener::bind(&endpoint)?, NoWork, ready, limits)?;
        server.stop_on_signals()?;
        info!(
            ?endpoint,
            "listening; no-work backend (constant answer, no search)"
        );
        return server.run(&mut ());
    }
    #[cfg(feature = "shards")]
    if !args.shards.is_empty() {
        return front(&args, endpoint, limits, ready);
    }
    if let Some(deltas) = &args.deltas {
        // Read by `function::index::deltas`, once, before any thread starts.
        std::env::set_var("FRAUD_DELTAS", deltas);
    }
    let t = Instant::now();
    function::index::load(args.residency).context("cannot open the embedded index")?;
    info!(
        residency = ?args.residency,
        ms = t.elapsed().as_millis() as u64,
        anon_huge_mb = function::index::anon_huge_bytes().map(|b| b >> 20),
        "index resident"
    );
    let scorer = function::embedded_scorer().context("cannot open the embedded index")?;
    let mut index = vec![function::index::identity()?];
    index.extend(function::index::deltas()?.iter().map(Identity::of));
    info!(
        references_sha256 = %index[0].references_sha256,
        references = index[0].references,
        part = %index[0].part,
        format_version = index[0].format_version,
        crc32 = %index[0].crc32,
        packer = %index[0].packer,
        deltas = index.len() - 1,
        delta_references = index[1..].iter().map(|d| d.references as u64).sum::<u64>(),
        "index identity"
    );
    let metrics = args.metrics == "on";
    let app = Scoring {
        scorer,
        ready: ready.clone(),
        metrics: metrics.then_some(index),
    };
    let mut server = Server::new(Listener::bind(&endpoint)?, app, ready.clone(), limits)?;
    server.count_answers(metrics);
    server.stop_on_signals()?;
    let mut warmup = Warmup::start(scorer, ready, args.warmup_queries, server.waker()?);
    info!(?endpoint, ?limits, "listening; warming up");
    server.run(&mut warmup)?;
    info!("drained; exiting");
    Ok(())
}

/// `serve --shards`: the handler over the shard functions, no index of its own, ready at once.
#[cfg(feature = "shards")]
fn front(args: &ServeArgs, endpoint: Endpoint, limits: Limits, ready: ReadyFlag) -> Result<()> {
    let shards = args
        .shards
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<Result<Vec<fan_out::ShardTarget>>>()?;
    let timeout = Duration::from_millis(args.shard_timeout_ms);
    let fanout: &'static fan_out::Fanout =
        Box::leak(Box::new(fan_out::Fanout::start(shards, timeout)?));
    let metrics = args.metrics == "on";
    let app = Scoring {
        scorer: function::Scorer::remote(fanout),
        ready: ready.clone(),
        metrics: metrics.then(Vec::new),
    };
    ready.set(true);
    let mut server = Server::new(Listener::bind(&endpoint)?, app, ready, limits)?;
    server.count_answers(metrics);
    server.stop_on_signals()?;
    let names: Vec<String> = fanout.shards().iter().map(|s| s.to_string()).collect();
    info!(?endpoint, shards = %names.join(","), timeout_ms = args.shard_timeout_ms, "listening; front over shards");
    server.run(&mut ())?;
    info!("drained; exiting");
    Ok(())
}

/// Fits the limits to the process's open-files limits (`server::fit_descriptors`: a clear
/// error when the connection cap cannot fit), raising the soft limit as far as they need.
fn fit_descriptors(mut limits: Limits) -> Result<Limits> {
    let (soft, hard) = listener::open_files_limit()?;
    if let Some(raised) = super::server::fit_descriptors(&mut limits, soft, hard)? {
        listener::set_open_files_limit(raised, hard)?;
        info!(from = soft, to = raised, "raised the open-files limit");
    }
    Ok(limits)
}
