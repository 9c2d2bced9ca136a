//! Per-query search time over the public test set: our exact IVF (i16 and fp16 codecs) against
//! the labeller's brute-force scan, all on the contest's 3M references, in one run.
//!
//! `cargo bench -p function --bench search` (it packs both codecs first). Each benchmark cycles
//! through the 54,100 public queries in file order, so a reported time is the mean over the set;
//! the table at the end gives the medians of criterion's samples and their ratios to our i16
//! search. faiss's own approximate `IVF4096,SQfp16` (the original design) is no longer beside
//! them: the build compiles only faiss's k-means (.cargo/faiss.cmake); its figures are those of
//! docs/results/2026-11-30-core.md, at the commit that record names.

use criterion::{black_box, Criterion};
use function::search::{labeller_distance, SearchParams, Searcher};
use function::{payload, vector};
use index_pack::format::{self, DIMS, SCALE};
use index_pack::source::{read_references, Expect};
use index_pack::{CodecKind, PackOptions};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn queries() -> Vec<[i16; DIMS]> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(root().join("tests/data/test-data.json.gz")).unwrap(),
    )
    .read_to_string(&mut text)
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let body = serde_json::to_vec(&e["request"]).unwrap();
            let q = vector::vectorize(&payload::parse(&body).unwrap()).unwrap();
            q
        })
        .collect()
}

fn main() {
    let refs = read_references(
        &root().join("resources/references.json.gz"),
        &Expect::Contest,
        &|_| {},
    )
    .unwrap();
    let qs = queries();
    let pack = |codec| {
        format::aligned_copy(
            &index_pack::pack(
                &refs,
                &PackOptions {
                    codec,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let (i16_bytes, f16_bytes) = (pack(CodecKind::I16), pack(CodecKind::F16));
    let (i16_idx, f16_idx) = (
        format::open(&i16_bytes).unwrap(),
        format::open(&f16_bytes).unwrap(),
    );

    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    let mut g = c.benchmark_group("per_query");
    for (name, idx) in [("ivf_exact_i16", i16_idx), ("ivf_exact_fp16", f16_idx)] {
        let s = Searcher::new(idx, SearchParams::default());
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % qs.len();
                black_box(s.frauds(&qs[i]))
            })
        });
    }
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    let mut i = 0;
    let reals: Vec<[f64; DIMS]> = refs
        .vectors
        .iter()
        .map(|v| v.map(|k| k as f64 / SCALE))
        .collect();
    g.bench_function("brute_force_labeller_scan", |b| {
        b.iter(|| {
            i = (i + 1) % qs.len();
            let q = &qs[i];
            let mut best = [(f64::INFINITY, 0usize); 5];
            for (j, r) in reals.iter().enumerate() {
                let d = labeller_distance(q, r);
                if d < best[4].0 {
                    let pos = best.iter().position(|&(x, _)| d < x).unwrap();
                    best.copy_within(pos..4, pos + 1);
                    best[pos] = (d, j);
                }
            }
            black_box(best)
        })
    });
    g.finish();
    c.final_summary();
    summary();
}

/// Reads criterion's estimates and prints medians and ratios to the i16 search.
fn summary() {
    let dir = root().join("target/criterion/per_query");
    let median = |name: &str| -> Option<f64> {
        let text = std::fs::read_to_string(dir.join(name).join("new/estimates.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["median"]["point_estimate"].as_f64()
    };
    let names = [
        "ivf_exact_i16",
        "ivf_exact_fp16",
        "brute_force_labeller_scan",
    ];
    let Some(base) = median(names[0]) else { return };
    println!(
        "\n{:<32} {:>14} {:>12}",
        "per query (mean over the public set)", "median", "x i16 exact"
    );
    for n in names {
        if let Some(m) = median(n) {
            println!("{n:<32} {:>11.2} us {:>11.1}x", m / 1000.0, m / base);
        }
    }
}
