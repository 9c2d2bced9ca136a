//! Where the handler's time goes on the public set: parse + vectorize (and the same through serde
//! only) vs search, and the work counters of the request path's search (nodes, blocks, rows,
//! parked and replayed subtrees) at p50/p90/p99.
//!
//! `cargo run --release -p function --features embedded-index --example search_stats [_ [lazy|prefault|hugepages] [hot]]`
//! (`PARK=0` proves the 5 neighbours instead of the vote; `PREFETCH=0` turns prefetching off;
//! `MIXED=1` keeps only the payloads whose vote is mixed.)
//! (`EVICT_KB=8192` walks 8 MiB of other memory before each query: cold caches, as when served.)
//! (`JSON=1` ends with one JSON line of the figures: `cargo measure scale` reads it.)
//! (`DELTA_FILE=path` searches a delta with the index it extends: what a delta costs.)
//! (`CLAMPED=1` searches with the clamped kernels, those of an index only opened, instead of
//! the plain ones the request path takes over a checked index: what that safety costs.)

use function::search::{SearchParams, Searcher};
use function::{payload, vector};
use index_pack::report::{Searched, Spread};
use std::io::Read;
use std::time::Instant;

fn main() {
    // PARK=0 proves the 5 neighbours on the request path too (the search without the vote).
    let park = std::env::var("PARK").map_or(true, |v| v != "0");
    let prefetch = std::env::var("PREFETCH").map_or(true, |v| v != "0");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/test-data.json.gz"
    );
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    // MIXED=1 keeps only the payloads whose vote is mixed (1 to 4 frauds of 5).
    let mixed_only = std::env::var_os("MIXED").is_some();
    let bodies: Vec<Vec<u8>> = file["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            let score = e["expected_fraud_score"].as_f64().unwrap();
            !mixed_only || (score > 0.0 && score < 1.0)
        })
        .map(|e| serde_json::to_vec(&e["request"]).unwrap())
        .collect();
    let mode = std::env::args()
        .nth(2)
        .and_then(|m| m.parse().ok())
        .unwrap_or_default();
    // INDEX_FILE=path compares another artifact (e.g. other packing parameters) with the same queries.
    let file = std::env::var_os("INDEX_FILE")
        .map(|p| index_pack::format::aligned_copy(&std::fs::read(p).unwrap()));
    let idx = match &file {
        Some(bytes) => index_pack::format::open(bytes).unwrap(),
        None => function::index::load(mode).unwrap(),
    };
    let params = SearchParams { park, prefetch };
    // DELTA_FILE=path[:path..] searches deltas (`index-pack delta`, in the order packed) with
    // the index they extend.
    let delta: Vec<_> = std::env::var_os("DELTA_FILE")
        .map(|list| std::env::split_paths(&list).collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .map(|p| index_pack::format::aligned_copy(&std::fs::read(p).unwrap()))
        .collect();
    let deltas: Vec<_> = delta
        .iter()
        .map(|b| index_pack::format::open_with_footer(b).unwrap())
        .collect();
    // The kernels the request path takes: plain over a checked index (a file read here is
    // checked in full; the embedded one by its build, or once the residency read it).
    let opened = Searcher::new(idx, params);
    let searcher = match (&file, std::env::var_os("CLAMPED").is_some()) {
        (_, true) => opened,
        (Some(bytes), false) => opened.trusting(index_pack::format::verify_deep(bytes).unwrap()),
        (None, false) => match function::index::built_verified().unwrap() {
            Some(v) => opened.trusting(v),
            None => opened.trusting_once(function::index::checked()),
        },
    };
    let footer = match &file {
        Some(bytes) => index_pack::format::Footer::read(bytes).unwrap(),
        None => function::index::footer().unwrap(),
    };
    let whole = index_pack::format::Serving::WholeSet;
    let searcher = searcher.with_deltas(footer, &deltas, whole).unwrap();
    // EVICT_KB=n: walk n KiB of other memory before each timed query, as the cache (and TLB)
    // other processes leave behind between two requests of a served API.
    let mut evict =
        vec![0u8; std::env::var("EVICT_KB").map_or(0, |v| v.parse::<usize>().unwrap()) << 10];
    let (mut parse, mut search, mut nodes, mut blocks, mut rows) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut boxes, mut bytes, mut parked, mut replayed) = (vec![], vec![], vec![], vec![]);
    let mut by_vote: [Vec<u64>; 6] = Default::default();
    let mut work_by_vote: [Vec<function::search::Stats>; 6] = Default::default();
    for _ in 0..2 {
        parse.clear();
        search.clear();
        by_vote.iter_mut().for_each(Vec::clear);
        work_by_vote.iter_mut().for_each(Vec::clear);
        for b in &bodies {
            evict_caches(&mut evict);
            let t = Instant::now();
            let q = vector::vectorize(&payload::parse(b).unwrap()).unwrap();
            let t1 = Instant::now();
            let (frauds, st) = searcher.frauds_with_stats(&q);
            let t2 = Instant::now();
            by_vote[frauds].push((t2 - t1).as_nanos() as u64);
            work_by_vote[frauds].push(st);
            parse.push((t1 - t).as_nanos() as u64);
            search.push((t2 - t1).as_nanos() as u64);
            nodes.push(st.nodes_expanded as u64);
            blocks.push(st.blocks_scanned as u64);
            rows.push(st.rows_scanned as u64);
            boxes.push(st.boxes_tested as u64);
            bytes.push(st.bytes_touched());
            parked.push(st.parked as u64);
            replayed.push(st.replayed as u64);
        }
    }
    // Every figure shown, for the JSON line.
    let shown = std::cell::RefCell::new(std::collections::BTreeMap::new());
    let show = |name: &str, v: &mut Vec<u64>| {
        v.sort_unstable();
        let p = |x: f64| v[((v.len() as f64 * x) as usize).min(v.len() - 1)];
        // The mean is what a served instance pays per request in CPU.
        let mean = v.iter().sum::<u64>() / v.len() as u64;
        let (p50, p90, p99, max) = (p(0.5), p(0.9), p(0.99), v[v.len() - 1]);
        println!(
            "{name:<16} mean {mean:>8}  p50 {p50:>8}  p90 {p90:>8}  p99 {p99:>8}  max {max:>8}"
        );
        let spread = Spread {
            mean,
            p50,
            p90,
            p99,
            max,
        };
        shown.borrow_mut().insert(name.to_string(), spread);
    };
    println!(
        "park {park}, prefetch {prefetch}, kernels {}",
        searcher.kernels_name()
    );
    // The same queries with a hot cache: each one repeated, keep the fastest run.
    let mut hot = Vec::new();
    for b in bodies.iter().take(5000) {
        let q = vector::vectorize(&payload::parse(b).unwrap()).unwrap();
        let best = (0..if std::env::args().nth(3).is_some_and(|a| a == "hot") {
            200
        } else {
            10
        })
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(searcher.frauds(&q));
                t.elapsed().as_nanos() as u64
            })
            .min()
            .unwrap();
        hot.push(best);
    }
    show(Searched::HOT_NS, &mut hot);
    if std::env::args().nth(3).is_some_and(|a| a == "hot") {
        return;
    }
    // The whole handler as a server calls it (parse, vectorize, search, response), one pass
    // in file order.
    let scorer = function::Scorer::new(searcher);
    let mut handler: Vec<u64> = bodies
        .iter()
        .map(|b| {
            evict_caches(&mut evict);
            let t = Instant::now();
            let r = scorer.handle(
                &function::Request::new("POST", "/fraud-score", b),
                function::Readiness::Ready,
            );
            let ns = t.elapsed().as_nanos() as u64;
            assert_eq!(r.status, 200);
            ns
        })
        .collect();
    show("handler ns", &mut handler);
    // The same bodies through serde only (what the fast path saves), one pass in file order.
    let mut serde: Vec<u64> = bodies
        .iter()
        .map(|b| {
            let t = Instant::now();
            let text = std::str::from_utf8(b).unwrap();
            std::hint::black_box(vector::vectorize(&payload::with_serde(text).unwrap()).unwrap());
            t.elapsed().as_nanos() as u64
        })
        .collect();
    show("serde+vector ns", &mut serde);
    show("parse+vector ns", &mut parse);
    show(Searched::NS, &mut search);
    show("nodes expanded", &mut nodes);
    show(Searched::BLOCKS, &mut blocks);
    show(Searched::ROWS, &mut rows);
    show("boxes tested", &mut boxes);
    show(Searched::BYTES, &mut bytes);
    show("parked", &mut parked);
    show("replayed", &mut replayed);
    if std::env::var_os("JSON").is_some() {
        let searched = Searched {
            references: idx.header.n_refs.to_native().into(),
            queries: bodies.len() as u64,
            kernels: searcher.kernels_name().to_string(),
            evict_kb: (evict.len() >> 10) as u64,
            figures: shown.borrow().clone(),
        };
        println!("{}", serde_json::to_string(&searched).unwrap());
        return;
    }
    // The search time by vote: a mixed vote needs the boundary between the labels explored.
    for (frauds, v) in by_vote.iter_mut().enumerate() {
        if !v.is_empty() {
            show(&format!("search {frauds}/5 ns"), v);
            let w = &work_by_vote[frauds];
            let mean = |f: &dyn Fn(&function::search::Stats) -> u32| {
                w.iter().map(|s| f(s) as f64).sum::<f64>() / w.len() as f64
            };
            println!(
                "  {} queries, mean nodes {:.0}, blocks {:.0}, rows {:.0}, parked {:.0}, replayed {:.0}",
                w.len(),
                mean(&|s| s.nodes_expanded),
                mean(&|s| s.blocks_scanned),
                mean(&|s| s.rows_scanned),
                mean(&|s| s.parked),
                mean(&|s| s.replayed)
            );
        }
    }
}

/// Writes one byte of every cache line of `buf`: the caches and TLB a query finds when other
/// processes ran before it (`EVICT_KB`).
fn evict_caches(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(64) {
        buf[i] = buf[i].wrapping_add(1);
    }
    std::hint::black_box(buf);
}
