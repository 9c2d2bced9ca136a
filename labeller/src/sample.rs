//! The labelled sample a deployment is checked with before it takes traffic (the PreTraffic hook
//! of `deploy-hook`): request bodies with the labeller's answers over the references the new
//! index was built from, covering both decisions, the vote's edge (3 frauds of 5), ties across
//! 5th place, requests that hit references an edit removed or relabelled (when the set was
//! edited), and a body that must be refused.
//!
//! The ties are adversarial queries ([`crate::adversarial`], kind `Tie`) turned into bodies
//! ([`crate::invert::body_for`]): realistic requests almost never tie at 5th place (none in the
//! contest's 54,100 public payloads), so the tie-breaking path is only reached by construction.

use crate::adversarial::{self, Kind};
use crate::references::References;
use crate::{generate, invert, payload, scan};
use serde::{Deserialize, Serialize};

/// One request of the sample and the answer it must get.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleCase {
    pub name: String,
    /// `approved`, `denied`, `edge` (3 frauds of 5), `tie` (a tie across 5th place), `edited`
    /// or `edited_tie` ([`build`]), or `bad_request`.
    pub kind: String,
    /// The `POST /fraud-score` body.
    pub body: String,
    pub status: u16,
    /// For a 200: the decision (`fraud_score` = frauds / 5, approved below 0.6).
    pub approved: Option<bool>,
    pub fraud_score: Option<f64>,
}

/// At most this many cases of each kind.
const PER_KIND: usize = 6;

/// The sample for `refs`: up to [`PER_KIND`] cases of each decided kind drawn from generated
/// requests and adversarial ties (seeded), labelled by brute force, and one malformed body.
/// With `edited` (the references edits removed or relabelled, [`adversarial::around`]), also
/// up to [`PER_KIND`] `edited` cases (requests on them) and `edited_tie` ones (ties across 5th
/// place with one in reach).
pub fn build(
    refs: &References,
    edited: &[adversarial::Target],
    seed: u64,
    threads: usize,
) -> Vec<SampleCase> {
    let mut bodies: Vec<(Kind, String)> = generate::payloads(400, seed)
        .into_iter()
        .map(|b| (Kind::Copy, b))
        .collect();
    for (kind, k) in adversarial::around(refs, edited, 8 * PER_KIND, threads) {
        if let Some(body) = invert::body_for(&adversarial::real(&k)) {
            bodies.push((kind, body));
        }
    }
    for (kind, k) in adversarial::queries(refs, 200, seed, threads) {
        if kind == Kind::Tie {
            if let Some(body) = invert::body_for(&adversarial::real(&k)) {
                bodies.push((kind, body));
            }
        }
    }
    let queries: Vec<_> = bodies
        .iter()
        .map(|(_, b)| payload::query(b.as_bytes()).expect("generated bodies are valid"))
        .collect();
    let hits = scan::nearest_many(refs, &queries, scan::K + 1, threads, &|_| {});
    let mut out: Vec<SampleCase> = Vec::new();
    for (((kind, body), q), hits) in bodies.iter().zip(&queries).zip(&hits) {
        let frauds = hits.iter().take(scan::K).filter(|h| h.fraud).count();
        let tie =
            adversarial::fixed(q).is_some_and(|k| adversarial::tie_across_fifth(refs, &k, hits));
        let name = match (*kind, tie, frauds) {
            (Kind::Tie, true, _) => "tie",
            (Kind::Tie, false, _) => continue,
            (Kind::OnEdited, _, _) => "edited",
            (Kind::TieOnEdited, _, _) => "edited_tie",
            (_, _, 3) => "edge",
            (_, _, f) if f < 3 => "approved",
            _ => "denied",
        };
        if out.iter().filter(|c| c.kind == name).count() >= PER_KIND {
            continue;
        }
        let score = frauds as f64 / scan::K as f64;
        out.push(SampleCase {
            name: format!(
                "{name}-{}",
                out.iter().filter(|c| c.kind == name).count() + 1
            ),
            kind: name.into(),
            body: body.clone(),
            status: 200,
            approved: Some(score < 0.6),
            fraud_score: Some(score),
        });
    }
    out.push(SampleCase {
        name: "bad-request".into(),
        kind: "bad_request".into(),
        body: "{\"transaction\":".into(),
        status: 400,
        approved: None,
        fraud_score: None,
    });
    out
}
