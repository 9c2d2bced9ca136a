//! `cargo xtask bench`, an instrument (CI does not run it): the criterion benchmark of the search
//! (`function/benches/search.rs`): our exact IVF (i16, fp16) against faiss `IVF4096,SQfp16` at
//! nprobe 8 and the labeller's brute-force scan, per query over the public set, in one run (~6
//! minutes). The verdict line gives each median and its ratio to ours; criterion's estimates are
//! read from `<target>/criterion/per_query/<name>/new/estimates.json`.

use crate::util::{self, cmd};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(clap::Args)]
pub struct Args {
    /// Read the estimates of the last run instead of running the benchmark again.
    #[arg(long)]
    no_run: bool,
}

/// The part of criterion's `estimates.json` that is read: the median in nanoseconds.
#[derive(Deserialize)]
struct Estimates {
    median: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
}

#[derive(Debug, PartialEq, Serialize)]
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
        util::run(&cmd!("cargo", "bench", "-p", "function", "--bench", "search"))?;
    }
    let medians = NAMES.map(|name| {
        let path =
            util::target_dir().join(format!("criterion/per_query/{name}/new/estimates.json"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (run the benchmark)", path.display()))?;
        let e: Estimates = serde_json::from_str(&text)
            .with_context(|| format!("{} is not criterion's estimates", path.display()))?;
        Ok(e.median.point_estimate / 1000.0)
    });
    let rows = rows(&medians.into_iter().collect::<Result<Vec<_>>>()?);
    let figures =
        rows.iter().map(|r| format!("{} {:.2} us ({:.1}x)", r.name, r.median_us, r.ratio_to_ours));
    util::verdict("bench", true, &figures.collect::<Vec<_>>().join(", "), &rows)
}

/// Each median (microseconds, in the order of [`NAMES`]) with its ratio to ours (the first).
fn rows(medians_us: &[f64]) -> Vec<Row> {
    let zipped = NAMES.into_iter().zip(medians_us);
    zipped.map(|(name, &m)| Row { name, median_us: m, ratio_to_ours: m / medians_us[0] }).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ratios_are_to_ours() {
        let r = super::rows(&[8.0, 10.0, 110.4, 8000.0]);
        assert_eq!(
            (r[0].ratio_to_ours, r[2].ratio_to_ours, r[3].name),
            (1.0, 13.8, "brute_force_labeller_scan")
        );
    }
}
