//! `cargo measure bench`: the search's criterion benchmark against faiss and the labeller's
//! brute force.

use anyhow::{Context, Result};
use serde::Serialize;
use xtask::util::{self, cmd};

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

pub fn run() -> Result<()> {
    util::run(&cmd!("cargo", "bench", "-p", "function", "--bench", "search"))?;
    let median_us = |name| -> Result<f64> {
        let path =
            util::target_dir().join(format!("criterion/per_query/{name}/new/estimates.json"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (run the benchmark)", path.display()))?;
        let e: serde_json::Value = serde_json::from_str(&text)?;
        let ns = e["median"]["point_estimate"].as_f64();
        Ok(ns.with_context(|| format!("{} is not criterion's estimates", path.display()))? / 1e3)
    };
    let rows = rows(&NAMES.into_iter().map(median_us).collect::<Result<Vec<_>>>()?);
    let figures = util::list(&rows, |r| {
        format!("{} {:.2} us ({:.1}x)", r.name, r.median_us, r.ratio_to_ours)
    });
    util::verdict("measure bench", true, &figures, &rows)
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
