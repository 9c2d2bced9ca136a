//! `cargo measure fan-out`: the front over S shards under AWS's emulator (`cargo xtask shards`),
//! warm and cold, beside one shard invoked directly; what a request costs at list prices.
//!
//! Per shard count: `--cold` fresh starts, each timing the first request through the front (every
//! shard's init and search, in parallel); then, warm, each query sent through the front and
//! directly to every shard in turn (the front's time against one invocation's), each shard's
//! search time (its answer's `search_ns`) and the rest of an invocation's round trip (the
//! emulator's HTTP hops, JSON, the runtime API). The cost per million requests takes the
//! emulator's `Duration` of the shards' invocations (Lambda bills it, rounded up to 1 ms) and
//! the front's round trip as its duration, with each shard's memory sized for a 100M set split
//! S ways (its index plus 64 MB).

use crate::median;
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use xtask::shards;
use xtask::util::{self, log, Quantiles};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "resources/references.json.gz")]
    references: PathBuf,
    /// Shard counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    counts: Vec<u32>,
    /// Warm queries (the public set's payloads, evenly spread).
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Fresh starts per shard count, each timing its first request (a cold fan-out).
    #[arg(long, default_value_t = 3)]
    cold: usize,
    /// Write the record here (markdown).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

/// The artifact of 100M references (docs/results/2026-12-06-scale-100m.md), what the cost model
/// splits S ways.
const INDEX_100M_MB: f64 = 3024.0;
/// The front's memory (template-sharded.yaml's FrontMemoryMB).
const FRONT_MB: f64 = 512.0;
/// AWS list prices, us-east-1, x86: per request, per GB-second.
const PER_REQUEST: f64 = 0.20e-6;
const PER_GB_S: f64 = 0.0000166667;

#[derive(Debug, Default, Serialize)]
struct Row {
    shards: u32,
    cold_first_ms: Vec<f64>,
    front: Quantiles,
    /// One shard invoked directly, all shards' invocations pooled.
    invocation: Quantiles,
    /// The slowest of the S direct invocations of each query: what a parallel fan-out waits for.
    slowest_invocation: Quantiles,
    search_us: Quantiles,
    /// An invocation's round trip less its search.
    overhead: Quantiles,
    /// The shards' `Duration` in the emulator's REPORT lines (warm queries).
    shard_duration: Quantiles,
    cost_per_million: f64,
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let entries = util::test_entries()?;
    let picked: Vec<&util::Entry> =
        util::spread(entries.len(), a.queries).into_iter().map(|i| &entries[i]).collect();
    let bodies: Vec<String> = picked.iter().map(|e| e.request.get().to_string()).collect();
    let vectors = bodies
        .iter()
        .map(|b| {
            let p = function::payload::parse(b.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
            function::vector::vectorize(&p).map_err(|e| anyhow::anyhow!("{e:?}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let listen = util::free_port()?.to_string();
    let agent = util::http_agent(Duration::from_secs(10));
    let front_url = format!("http://{listen}/fraud-score");
    let post = |url: &str, body: &[u8]| -> Result<(f64, Vec<u8>)> {
        let t = Instant::now();
        let mut r = agent.post(url).header("content-type", "application/json").send(body)?;
        let out = r.body_mut().read_to_vec()?;
        ensure!(r.status() == 200, "{url}: {} {}", r.status(), String::from_utf8_lossy(&out));
        Ok((t.elapsed().as_secs_f64() * 1e3, out))
    };
    let mut rows = Vec::new();
    for &s in &a.counts {
        let dirs = shards::prepare(&a.references, s, &util::xtask_dir("shards")?)?;
        let mut row = Row { shards: s, ..Row::default() };
        for i in 0..a.cold.max(1) {
            let running = shards::serve(&dirs, &listen)?;
            row.cold_first_ms.push(post(&front_url, bodies[i % bodies.len()].as_bytes())?.0);
            if i + 1 < a.cold.max(1) {
                drop(running);
                continue;
            }
            log!("fan-out {s}: {} warm queries, through the front and to each shard", bodies.len());
            let reports_before: Vec<usize> = dirs.iter().map(|d| durations(d).len()).collect();
            for b in bodies.iter().take(200) {
                post(&front_url, b.as_bytes())?;
            }
            let (mut front, mut one, mut slowest, mut search, mut overhead) =
                (vec![], vec![], vec![], vec![], vec![]);
            for (b, v) in bodies.iter().zip(&vectors) {
                front.push(post(&front_url, b.as_bytes())?.0);
                let request = serde_json::to_vec(&function::shard::NearestRequest { vector: *v })?;
                let mut worst: f64 = 0.0;
                for shard in &running.shards {
                    let (ms, out) = post(&shard.url, &request)?;
                    let answer: function::shard::NearestResponse = serde_json::from_slice(&out)
                        .with_context(|| String::from_utf8_lossy(&out).into_owned())?;
                    let us = answer.search_ns as f64 / 1e3;
                    worst = worst.max(ms);
                    one.push(ms);
                    search.push(us);
                    overhead.push(ms - us / 1e3);
                }
                slowest.push(worst);
            }
            drop(running);
            let warm: Vec<f64> = dirs
                .iter()
                .zip(&reports_before)
                .flat_map(|(d, &n)| durations(d).into_iter().skip(n + 200))
                .collect();
            row.front = Quantiles::of(front);
            row.invocation = Quantiles::of(one);
            row.slowest_invocation = Quantiles::of(slowest);
            row.search_us = Quantiles::of(search);
            row.overhead = Quantiles::of(overhead);
            row.shard_duration = Quantiles::of(warm);
        }
        row.cost_per_million = cost(s, row.shard_duration.p50, row.front.p50);
        log!("fan-out {s}: front p50 {:.2} ms p99 {:.2} ms; one invocation p50 {:.2} p99 {:.2}; cold first {:?} ms; ${:.2} per million", row.front.p50, row.front.p99, row.invocation.p50, row.invocation.p99, row.cold_first_ms, row.cost_per_million);
        rows.push(row);
    }
    let md = record(&a, &rows, t.elapsed().as_secs_f64());
    println!("{md}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &md)?;
    }
    let ok = rows.iter().all(|r| r.front.p99 <= r.invocation.p99 + 2.0);
    let figures = util::list(&rows, |r| {
        format!(
            "{} shards: front p99 {:.2} ms, one invocation p99 {:.2} ms",
            r.shards, r.front.p99, r.invocation.p99
        )
    });
    util::verdict("measure fan-out", ok, &figures, &rows)
}

/// Every `Duration` of the shard's emulator log, in order.
fn durations(dir: &std::path::Path) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join("rie.log")).unwrap_or_default();
    xtask::lambda::logs::Log::parse(&text).durations_ms
}

/// Dollars per million requests through a front over `s` shards of a 100M set: S + 1 requests,
/// each shard billed its duration rounded up to 1 ms at its index plus 64 MB, the front its own.
fn cost(s: u32, shard_ms: f64, front_ms: f64) -> f64 {
    let shard_gb = (INDEX_100M_MB / s as f64 + 64.0) / 1024.0;
    let (shard_s, front_s) = (shard_ms.ceil() / 1e3, front_ms.ceil() / 1e3);
    let per = (s + 1) as f64 * PER_REQUEST
        + (s as f64 * shard_gb * shard_s + FRONT_MB / 1024.0 * front_s) * PER_GB_S;
    per * 1e6
}

fn record(a: &Args, rows: &[Row], seconds: f64) -> String {
    let mut md = format!(
        "# The front over shards under AWS's emulator\n\nCommand: `cargo measure fan-out --references {} --counts {} --queries {} --cold {}`; {}; {}; load average {}; {seconds:.0} s.\n\n",
        a.references.display(),
        util::list(&a.counts, |c| c.to_string()).replace(", ", ","),
        a.queries,
        a.cold,
        util::date(),
        xtask::util::stamp(),
        util::loadavg(),
    );
    md += "| shards | front p50 ms | front p99 ms | one invocation p50 ms | one invocation p99 ms | slowest of the S p99 ms | search p50 us | search p99 us | invocation less search p50 ms | shard Duration p50 ms | cold first request ms (median) | $ per million (100M set) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        md += &format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} | {:.2} |\n",
            r.shards, r.front.p50, r.front.p99, r.invocation.p50, r.invocation.p99,
            r.slowest_invocation.p99, r.search_us.p50, r.search_us.p99, r.overhead.p50,
            r.shard_duration.p50, median(r.cold_first_ms.clone()), r.cost_per_million
        );
    }
    md
}
