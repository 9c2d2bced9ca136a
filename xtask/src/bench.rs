//! `cargo xtask bench`: the criterion benchmark of the search (`function/benches/search.rs`):
//! our exact IVF (i16, fp16) against faiss `IVF4096,SQfp16` at nprobe 8 and the labeller's
//! brute-force scan, per query over the public set, in one run (~6 minutes). The verdict line
//! gives each median and its ratio to ours; criterion's estimates are read from
//! `target/criterion/per_query/<name>/new/estimates.json`.

use crate::cmd::{self, root};
use crate::report;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(clap::Args)]
pub struct Args {
    /// Read the estimates of the last run instead of running the benchmark again.
    #[arg(long)]
    no_run: bool,
}

/// The part of criterion's `estimates.json` that is read.
#[derive(Deserialize)]
struct Estimates {
    median: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    /// Nanoseconds.
    point_estimate: f64,
}

#[derive(Serialize)]
struct Row {
    name: &'static str,
    median_us: f64,
    ratio_to_ours: f64,
}

const NAMES: [&str; 4] = [
    "ivf_exact_i16",
    "ivf_exact_fp16",
    "faiss_ivf4096_sqfp16_nprobe8",
    "brute_force_labeller_scan",
];

pub fn run(args: Args) -> Result<()> {
    if !args.no_run {
        cmd::run(&mut cmd::cmd(
            "cargo",
            ["bench", "-p", "function", "--bench", "search"],
        ))?;
    }
    let median = |name: &str| -> Result<f64> {
        let path = root().join(format!(
            "target/criterion/per_query/{name}/new/estimates.json"
        ));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (run the benchmark)", path.display()))?;
        let e: Estimates = serde_json::from_str(&text)
            .with_context(|| format!("{} is not criterion's estimates", path.display()))?;
        Ok(e.median.point_estimate / 1000.0)
    };
    let base = median(NAMES[0])?;
    let rows = NAMES
        .into_iter()
        .map(|name| {
            let m = median(name)?;
            Ok(Row {
                name,
                median_us: m,
                ratio_to_ours: m / base,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let figures = rows
        .iter()
        .map(|r| format!("{} {:.2} us ({:.1}x)", r.name, r.median_us, r.ratio_to_ours))
        .collect::<Vec<_>>()
        .join(", ");
    report::verdict("bench", true, &figures, &rows)
}
