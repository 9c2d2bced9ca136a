//! `explain`: why one request gets its answer. Prints the request's 14-dimension vector, its 5
//! nearest references (index in `references.json`, label, squared distance) and the vote, so
//! an analyst can see why a transaction was denied.
//!
//! The answer is the handler's own (`Scorer::handle`): a body the API refuses gets the API's
//! 400 message, naming the field, and the command fails. The neighbours come from the same
//! index and walk as the handler's vote: [`Searcher::nearest`] proves the 5 themselves (in the
//! labeller's order), where the handler's `Searcher::frauds` proves only their fraud count, the
//! same by construction (`cargo xtask verify` compares both with the labeller). With `--oracle`,
//! the labeller crate (the contest's brute force, SPEC.md) computes them again from the
//! references file, and the command fails if they differ.

use anyhow::{bail, Context, Result};
use function::search::Neighbour;
use function::{payload, vector, Decision, Scorer};
use index_pack::format::Identity;
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The options of `explain`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A file holding one request body (`-` or nothing: standard input).
    pub file: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also compute the neighbours with the labeller (reads the references file, a few
    /// seconds) and fail if they differ.
    #[arg(long)]
    pub oracle: bool,
    /// The references files for `--oracle`: the base's, then each delta's new references.
    #[arg(long, default_value = "resources/references.json.gz")]
    pub references: Vec<PathBuf>,
    /// The deltas' edits files for `--oracle`, in order (`index-pack delta --edits`).
    #[arg(long)]
    pub edits: Vec<PathBuf>,
}

/// The names of the 14 dimensions (SPEC.md), in order.
pub const DIMENSIONS: [&str; 14] = [
    "amount",
    "installments",
    "amount_vs_avg",
    "hour_of_day",
    "day_of_week",
    "minutes_since_last_tx",
    "km_from_last_tx",
    "km_from_home",
    "tx_count_24h",
    "is_online",
    "card_present",
    "unknown_merchant",
    "mcc_risk",
    "merchant_avg_amount",
];

/// One neighbour as printed.
#[derive(Serialize, Debug, PartialEq)]
pub struct Near {
    /// Position in the whole set (0-based): in references.json, then in the deltas' files (a
    /// removed reference is never one; positions do not move).
    pub index: u32,
    pub label: &'static str,
    /// Exact squared distance, as a decimal.
    pub squared_distance: String,
}

/// Everything `explain` says about a request.
#[derive(Serialize, Debug)]
pub struct Explanation {
    /// Components as decimals (value x 10000 is an integer).
    pub vector: Vec<String>,
    pub neighbours: Vec<Near>,
    pub frauds: usize,
    pub fraud_score: f64,
    pub approved: bool,
    /// The response body the API sends.
    pub response: String,
    /// The indexes that answered: the base, then its deltas.
    pub index: Vec<Identity>,
}

/// A fixed-point number of units of 10^-`places` as an exact decimal.
fn decimal(units: i64, places: u32) -> String {
    let scale = 10i64.pow(places);
    let sign = if units < 0 { "-" } else { "" };
    let (whole, frac) = (units.abs() / scale, units.abs() % scale);
    format!("{sign}{whole}.{frac:0width$}", width = places as usize)
}

/// Explains one body; `Err` carries the API's 400 answer for a body it refuses. `index` names
/// the indexes the scorer searches.
pub fn explain(scorer: &Scorer, body: &[u8], index: &[Identity]) -> Result<Explanation> {
    let response = scorer.handle(
        &function::Request::new("POST", "/fraud-score", body),
        function::Readiness::Ready,
    );
    if response.status != 200 {
        bail!("the API answers {} {}", response.status, response.body);
    }
    let q = payload::parse(body)
        .and_then(|p| vector::vectorize(&p))
        .context("the handler accepted a body its own parser refuses")?;
    let searcher = scorer
        .searcher()
        .context("explain needs the index in this process")?;
    let neighbours: Vec<Neighbour> = searcher.nearest(&q);
    let decision = Decision::new(neighbours.iter().filter(|n| n.fraud).count());
    if decision.body() != response.body {
        bail!(
            "the neighbours give {} but the handler answered {}",
            decision.body(),
            response.body
        );
    }
    Ok(Explanation {
        vector: q.iter().map(|&k| decimal(k.into(), 4)).collect(),
        neighbours: neighbours
            .iter()
            .map(|n| Near {
                index: n.index,
                label: if n.fraud { "fraud" } else { "legit" },
                squared_distance: decimal(n.distance, 8),
            })
            .collect(),
        frauds: decision.frauds,
        fraud_score: decision.fraud_score(),
        approved: decision.approved(),
        response: response.body.into_owned(),
        index: index.to_vec(),
    })
}

/// The text form.
pub fn render(e: &Explanation) -> String {
    let mut out = String::new();
    for (i, id) in e.index.iter().enumerate() {
        out += &format!(
            "{} {} references (positions {}..{}, {}), references sha256 {}, format v{}, crc32 {}, {}\n",
            if i == 0 { "index:" } else { "delta:" },
            id.references,
            id.first_position,
            id.end_position,
            id.part,
            id.references_sha256,
            id.format_version,
            id.crc32,
            id.packer
        );
    }
    out += "vector (14 dimensions):\n";
    for (i, (name, v)) in DIMENSIONS.iter().zip(&e.vector).enumerate() {
        out += &format!("  {i:>2}  {name:<22} {v:>7}\n");
    }
    out += "nearest references (index in references.json, label, squared distance):\n";
    for (rank, n) in e.neighbours.iter().enumerate() {
        out += &format!(
            "  {}.  {:>7}  {}  {}\n",
            rank + 1,
            n.index,
            n.label,
            n.squared_distance
        );
    }
    let verdict = if e.approved {
        "approved (denied from 3 frauds)"
    } else {
        "denied (3 or more frauds)"
    };
    out += &format!(
        "decision: {} of {} nearest are fraud, fraud_score {:.1}: {verdict}\n",
        e.frauds,
        e.neighbours.len(),
        e.fraud_score
    );
    out += &format!("response: {}\n", e.response);
    out
}

/// Reads the body from `file`, or standard input for `-` or none.
pub fn read_body(file: Option<&Path>) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    match file {
        Some(p) if p != Path::new("-") => {
            body = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?
        }
        _ => {
            std::io::stdin()
                .read_to_end(&mut body)
                .context("cannot read standard input")?;
        }
    }
    Ok(body)
}

/// The labeller's 5 neighbours of `body` over the set `references` and `edits` describe
/// (`labeller::edits`), checked against the search's.
pub fn check_with_oracle(
    e: &Explanation,
    body: &[u8],
    references: &[PathBuf],
    edits: &[PathBuf],
) -> Result<()> {
    let q = labeller::payload::query(body).map_err(|m| anyhow::anyhow!("labeller: {m}"))?;
    let Some((base, added)) = references.split_first() else {
        bail!("--oracle needs the references files");
    };
    let (set, _) = labeller::edits::read_set(base, false, added, edits)?;
    let hits = labeller::scan::nearest(&set.refs, &q);
    let want: Vec<u32> = hits.iter().map(|h| set.position(h.index)).collect();
    let got: Vec<u32> = e.neighbours.iter().map(|n| n.index).collect();
    if want != got {
        bail!("the labeller's neighbours are {want:?}, the search's {got:?}");
    }
    eprintln!(
        "labeller: the same 5 neighbours, by brute force over {} references",
        set.refs.len()
    );
    Ok(())
}

/// Runs the command. A body the API refuses ends the process with status 1 after printing the
/// API's answer on stderr.
pub fn run(scorer: &Scorer, index: &[Identity], args: &Args) -> Result<()> {
    let body = read_body(args.file.as_deref())?;
    let response = scorer.handle(
        &function::Request::new("POST", "/fraud-score", &body),
        function::Readiness::Ready,
    );
    if response.status != 200 {
        eprintln!("the API answers {} {}", response.status, response.body);
        std::process::exit(1);
    }
    let e = explain(scorer, &body, index)?;
    if args.json {
        println!("{}", serde_json::to_string(&e)?);
    } else {
        print!("{}", render(&e));
    }
    if args.oracle {
        check_with_oracle(&e, &body, &args.references, &args.edits)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal(442, 4), "0.0442");
        assert_eq!(decimal(-10_000, 4), "-1.0000");
        assert_eq!(decimal(10_000, 4), "1.0000");
        assert_eq!(decimal(2_925, 8), "0.00002925");
        assert_eq!(decimal(123_456_789, 8), "1.23456789");
        assert_eq!(decimal(0, 8), "0.00000000");
    }
}
