//! The label frontier of the embedded index's references: the positions of those whose own 5
//! nearest (the reference itself among them) hold both labels, as a JSON array on stdout.
//! Relabels drawn among them (`labeller generate-edits --relabel-among`) model chargebacks on
//! transactions that looked ambiguous, against a uniform draw over the whole set
//! (docs/results/2026-12-07-edits.md measures both).
//!
//! `cargo run --profile ci -p function --features embedded-index --example frontier -- resources/references.json.gz > frontier.json`
//!
//! The references file must be the one the index was packed from (its SHA-256 is checked).

use function::search::{SearchParams, Searcher};
use index_pack::format::hex;
use index_pack::source::{read_references, Expect};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: frontier REFERENCES.json.gz")?;
    let index = function::index::load(Default::default())?;
    let refs = read_references(
        path.as_ref(),
        &Expect::Sha256(hex(&index.header.source_sha256)),
        &|_| {},
    )?;
    if refs.vectors.len() as u64 != u64::from(index.header.n_refs.to_native()) {
        return Err(format!(
            "{path} holds {} references, the index {}",
            refs.vectors.len(),
            index.header.n_refs
        )
        .into());
    }
    let searcher = Searcher::new(index, SearchParams::default());
    let frontier: Vec<u32> = (0..refs.vectors.len() as u32)
        .filter(|&i| matches!(searcher.frauds(&refs.vectors[i as usize]), 1..=4))
        .collect();
    eprintln!(
        "{} of {} references have both labels among their 5 nearest",
        frontier.len(),
        refs.vectors.len()
    );
    println!("{}", serde_json::to_string(&frontier)?);
    Ok(())
}
