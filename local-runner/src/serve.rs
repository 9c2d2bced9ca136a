//! `local-runner serve`: the contest API, one server process over the embedded index (the
//! `http-server` crate's event loop): its command line, the index's residency, the warm-up,
//! start and drain.
//!
//! ## Lifecycle
//! 1. open the index (`--residency`), bind the socket (a stale Unix socket file is removed
//!    first; the new one is made world-writable so a balancer running as another user can
//!    connect);
//! 2. warm up: a helper thread reads every page of the index, then the loop thread runs a few
//!    hundred varied queries between events; until then `/ready` answers 503, so a balancer
//!    health check keeps the instance out of rotation (requests that still arrive are answered);
//! 3. serve; on SIGTERM or SIGINT stop accepting (the socket file is removed), `/ready` says
//!    503, idle connections close at once and busy ones after their current answer; exit 0 when
//!    none is left, or after `--drain-ms` anyway.
//!
//! ## Index residency (`--residency`, default `lazy`; the contest stack uses `hugepages`)
//! `lazy` reads the index in place (zero-copy); warm-up reads every page before `/ready` says
//! 200. `hugepages` instead copies it, before the bind, into anonymous memory backed by 2 MiB
//! transparent huge pages (the binary's file pages are released as the copy goes, so the
//! container is charged the artifact once, not twice). Between two requests of a served API the other
//! processes evict its caches and TLB, and with 4 KiB pages a search's page walks are a large
//! part of its cost (perf: its prefetch instructions stall on them). In full replica runs
//! alternated with `lazy`, the API's CPU per request was 84 and 83 us against 86 and 94 us
//! (docs/results/2026-11-30-api-cpu-levers.md), so docker-compose.yml asks for `hugepages`;
//! `lazy` stays the binary's default for the fastest start (Lambda's init, `verify`).
//! `docker/experiments/residency-lazy.yml` repeats the comparison.

mod warmup;

use anyhow::{Context, Result};
use http_server::listener::Listener;
use http_server::server::fit_open_files;
use http_server::{Endpoint, Limits, NoWork, ReadyFlag, Scoring, Server};
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
    /// Where to serve `GET /metrics` (Prometheus text: decisions, refusals, the request-duration
    /// histogram), apart from `--listen`: `HOST:PORT` or `unix:/path`. Unset: nothing is
    /// counted and no metrics are served (the public listener never serves them).
    #[arg(long, env = "FRAUD_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
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
            max_shedding: http_server::server::MAX_SHEDDING,
            drain: Duration::from_millis(a.drain_ms),
            spin: Duration::from_micros(a.spin_us),
        }
    }
}

/// Entry point of `local-runner serve`: serves until SIGTERM or SIGINT, then drains and exits.
pub fn run(args: ServeArgs) -> Result<()> {
    let endpoint: Endpoint = args.listen.parse()?;
    let metrics: Option<Endpoint> = args.metrics_listen.as_deref().map(str::parse).transpose()?;
    let limits = fit_open_files(Limits::from(&args))?;
    let ready = ReadyFlag::default();
    if args.no_work {
        ready.set(true);
        let mut server = Server::new(Listener::bind(&endpoint)?, NoWork, ready, limits)?;
        if let Some(m) = &metrics {
            server.serve_metrics(Listener::bind(m)?)?;
        }
        server.stop_on_signals()?;
        info!(
            ?endpoint,
            "listening; no-work backend (constant answer, no search)"
        );
        return server.run(&mut ());
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
    let app = Scoring {
        scorer,
        ready: ready.clone(),
        index,
    };
    let mut server = Server::new(Listener::bind(&endpoint)?, app, ready.clone(), limits)?;
    if let Some(m) = &metrics {
        server.serve_metrics(Listener::bind(m)?)?;
    }
    server.stop_on_signals()?;
    let mut warmup = Warmup::start(scorer, ready, args.warmup_queries, server.waker()?);
    info!(?endpoint, ?metrics, ?limits, "listening; warming up");
    server.run(&mut warmup)?;
    info!("drained; exiting");
    Ok(())
}
