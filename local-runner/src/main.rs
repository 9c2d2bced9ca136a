//! `local-runner`: the fraud scorer outside Lambda.
//!
//! - `verify FILE`: replay a contest test file through the handler and report accuracy and
//!   latency (last line: one JSON object). With `--neighbours`, compare the query vectors and
//!   the 5 nearest references with the labeller crate instead (`neighbours.rs`).
//! - `explain [FILE]`: one request's vector, 5 nearest references and decision (`explain.rs`).
//! - `selftest`: open the index and answer one request (time the whole process with hyperfine
//!   to get exec-to-ready).
//! - `serve`: the handler over HTTP/1.1 on a Unix socket or TCP address (`serve.rs`, on the
//!   `http-server` crate).
//!
//! Any panic aborts the process (after logging it): a server must not go on in an unknown state,
//! and the orchestrator restarts it. The workspace profile keeps `panic = "unwind"` on purpose
//! (see the workspace Cargo.toml), so the hook does it.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use function::{Scorer, SearchParams, Searcher};
use index_pack::format;
#[cfg(feature = "embedded-index")]
use local_runner::serve;
use local_runner::verify;
use std::path::PathBuf;
#[cfg(feature = "embedded-index")]
use std::time::Instant;

#[cfg(feature = "embedded-index")]
mod explain;
mod neighbours;

#[derive(Parser)]
#[command(version, about = "Runs the fraud-scoring handler outside Lambda")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a contest test file (plain or .gz) through the handler.
    Verify {
        file: PathBuf,
        /// Use this artifact instead of the embedded index (e.g. an fp16 one from index-pack).
        /// Required when built without the `embedded-index` feature (or give `--shard`).
        #[arg(long, conflicts_with = "shard")]
        index: Option<PathBuf>,
        /// A delta searched with the index, or with the shard it extends (repeatable; in any
        /// order: they are put in the order they were packed, and must extend their base).
        #[arg(long)]
        delta: Vec<PathBuf>,
        /// The shards of a split set (repeatable), searched each on its own and merged as a
        /// front merges them, instead of one index.
        #[arg(long)]
        shard: Vec<PathBuf>,
        /// Print at most this many mismatching entries.
        #[arg(long, default_value_t = 10)]
        show: usize,
        /// How the embedded index is made resident: lazy (zero-copy), prefault, hugepages.
        #[cfg(feature = "embedded-index")]
        #[arg(long, default_value = "lazy")]
        residency: function::index::Residency,
        /// Compare every payload's vector and 5 nearest references with the labeller (the
        /// contest's brute force) instead of replaying the answers.
        #[arg(long)]
        neighbours: bool,
        #[command(flatten)]
        oracle: neighbours::Args,
    },
    /// Explain one request: its vector, its 5 nearest references and the decision.
    #[cfg(feature = "embedded-index")]
    Explain(explain::Args),
    /// Open the embedded index, answer one request, and print the time from exec.
    #[cfg(feature = "embedded-index")]
    Selftest {
        /// Read every page of the index (and check its CRC32) before answering.
        #[arg(long)]
        prefault: bool,
    },
    /// Serve the handler over HTTP/1.1 (one single-threaded event loop) until SIGTERM.
    #[cfg(feature = "embedded-index")]
    Serve(serve::ServeArgs),
}

/// An artifact file read whole into memory aligned for the archive (each is checked in full
/// where it is opened: [`checked`], and the deltas').
fn read_artifact(path: &std::path::Path) -> Result<rkyv::util::AlignedVec<32>> {
    let mut bytes = format::aligned_copy(&[]);
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    std::io::copy(&mut file, &mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes)
}

/// A searcher over an artifact read whole, checked in full first: it takes the plain kernels.
fn checked(bytes: &[u8]) -> Result<Searcher<'_>> {
    let v = format::verify_deep(bytes)?;
    Ok(Searcher::new(v.index(), SearchParams::default()).trusting(v))
}

/// Logs the panic through tracing (and stderr), then aborts the whole process.
fn install_abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panic: aborting");
        default(info);
        std::process::abort();
    }));
}

#[cfg(feature = "embedded-index")]
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("FRAUD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

#[cfg(feature = "embedded-index")]
/// An example request from the contest documentation (a legit one).
const EXAMPLE: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;

fn main() -> Result<()> {
    install_abort_on_panic();
    let cli = Cli::parse();
    match cli.command {
        #[cfg(feature = "embedded-index")]
        Command::Serve(args) => {
            init_logging();
            serve::run(args)
        }
        Command::Verify {
            file,
            index,
            delta,
            shard,
            show,
            #[cfg(feature = "embedded-index")]
            residency,
            neighbours,
            oracle,
        } => {
            let shards = shard
                .iter()
                .map(|p| read_artifact(p))
                .collect::<Result<Vec<_>>>()?;
            let deltas = delta
                .iter()
                .map(|p| read_artifact(p))
                .collect::<Result<Vec<_>>>()?;
            let base_bytes = index.as_deref().map(read_artifact).transpose()?;
            let mut opened_deltas = deltas
                .iter()
                .map(|b| format::verify_deep(b).and_then(|_| format::open_with_footer(b)))
                .collect::<Result<Vec<_>, _>>()?;
            // By base, then in the order they were packed.
            opened_deltas.sort_by_key(|o| (o.base_ref_crc32(), o.chain_order()));
            let target = if !shards.is_empty() {
                // Each shard with the deltas packed for it.
                let searchers = shards
                    .iter()
                    .map(|b| {
                        let crc = format::Footer::read(b)?.crc32;
                        // Sorted by base: a shard's deltas are contiguous.
                        let mine = |d: &format::Opened| d.base_ref_crc32() == crc;
                        let start = opened_deltas.iter().position(mine).unwrap_or(0);
                        let end = start
                            + opened_deltas[start..]
                                .iter()
                                .take_while(|d| mine(d))
                                .count();
                        Ok(checked(b)?.with_deltas(
                            format::Footer::read(b)?,
                            &opened_deltas[start..end],
                            format::Serving::Shard,
                        )?)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let used: usize = searchers.iter().map(|s| s.deltas().len()).sum();
                anyhow::ensure!(
                    used == opened_deltas.len(),
                    "{} of the deltas extend none of the shards given",
                    opened_deltas.len() - used
                );
                neighbours::Target::Shards(function::shard::InProcess(searchers))
            } else {
                let (searcher, footer) = match &base_bytes {
                    Some(bytes) => (checked(bytes)?, format::Footer::read(bytes)?),
                    #[cfg(feature = "embedded-index")]
                    None => {
                        function::index::load(residency)?;
                        (function::embedded_searcher()?, function::index::footer()?)
                    }
                    #[cfg(not(feature = "embedded-index"))]
                    None => anyhow::bail!(
                        "built without the embedded index: pass --index FILE or --shard FILE"
                    ),
                };
                let searcher =
                    searcher.with_deltas(footer, &opened_deltas, format::Serving::WholeSet)?;
                neighbours::Target::Searcher(searcher)
            };
            eprintln!("{}", target.describe());
            if neighbours {
                let report = neighbours::run(&target, &file, &oracle, show)?;
                neighbours::print(&report);
                println!("{}", serde_json::to_string(&report)?);
                return Ok(());
            }
            let scorer = match &target {
                neighbours::Target::Searcher(s) => Scorer::new(*s),
                neighbours::Target::Shards(shards) => Scorer::remote(shards),
            };
            let source_sha256 = match target.inputs().first() {
                Some(neighbours::Input::References(s)) => s.clone(),
                _ => String::new(),
            };
            let report = verify::run(&scorer, &file, &source_sha256, show)?;
            eprintln!(
                "total {}  TP {}  TN {}  FP {}  FN {}  errors {}  score mismatches {}",
                report.total,
                report.tp,
                report.tn,
                report.fp,
                report.fn_,
                report.errors,
                report.score_mismatches
            );
            eprintln!(
                "detection score {:.2}  handler latency p50 {:.2} us  p99 {:.2} us",
                report.detection_score, report.p50_us, report.p99_us
            );
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        #[cfg(feature = "embedded-index")]
        Command::Explain(args) => {
            let mut index = vec![function::index::identity()?];
            index.extend(function::index::deltas()?.iter().map(format::Identity::of));
            explain::run(&function::embedded_scorer()?, &index, &args)
        }
        #[cfg(feature = "embedded-index")]
        Command::Selftest { prefault } => {
            let t = Instant::now();
            if prefault {
                function::index::prefault()?;
            }
            let scorer = function::embedded_scorer()?;
            let resp = scorer.handle(
                &function::Request::new("POST", "/fraud-score", EXAMPLE.as_bytes()),
                function::Readiness::Ready,
            );
            anyhow::ensure!(resp.status == 200, "selftest request failed: {}", resp.body);
            println!(
                "{{\"open_and_first_answer_ms\":{:.3},\"prefault\":{prefault},\"answer\":{}}}",
                t.elapsed().as_secs_f64() * 1000.0,
                resp.body
            );
            Ok(())
        }
    }
}
