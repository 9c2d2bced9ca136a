//! `verify`: replays a file in the contest's test format through the handler, JSON in and JSON
//! out, and reports the confusion matrix, the contest's detection score and the handler's
//! latency.
//!
//! Each request's original JSON text is passed to [`Scorer::handle`] exactly as a client would
//! send it; the response body is parsed back, so what is checked is what a client would see.
//! Latency is the wall time of `handle` alone (parse + vectorize + search + response).
//!
//! `verify --neighbours` (the binary's `neighbours` module) reads the same files through
//! [`read`] and compares neighbours with the labeller instead.

use anyhow::{bail, Context, Result};
use function::{Readiness, Request, Scorer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// A file in the contest's test format.
#[derive(Deserialize)]
pub struct TestFile {
    /// SHA-256 of the references the answers were labelled against.
    #[serde(default)]
    pub references_checksum_sha256: Option<String>,
    pub entries: Vec<Entry>,
}

/// One payload and its labelled answer.
#[derive(Deserialize)]
pub struct Entry {
    /// The request body exactly as written in the file.
    pub request: Box<RawValue>,
    pub expected_approved: bool,
    pub expected_fraud_score: f64,
}

#[derive(Deserialize)]
struct Answer {
    approved: bool,
    fraud_score: f64,
}

/// The summary line; its keys are part of the interface.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct Report {
    pub total: u64,
    pub tp: u64,
    pub tn: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub errors: u64,
    pub score_mismatches: u64,
    pub detection_score: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// The contest's detection score for N requests.
pub fn detection_score(n: u64, fp: u64, fn_: u64, errors: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let e = (fp + 3 * fn_ + 5 * errors) as f64;
    if (fp + fn_ + errors) as f64 / n as f64 > 0.15 {
        return -3000.0;
    }
    1000.0 * (1.0 / (e / n as f64).max(0.001)).log10() - 300.0 * (1.0 + e).log10()
}

/// Reads a test file (gzip when it ends in .gz).
pub fn read(path: &Path) -> Result<TestFile> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut text = String::new();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file).read_to_string(&mut text)
    } else {
        std::io::BufReader::new(file).read_to_string(&mut text)
    }
    .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a contest test file", path.display()))
}

/// Replays `path`; prints progress lines for the human and returns the report.
pub fn run(
    scorer: &Scorer,
    path: &Path,
    source_sha256: &str,
    show_mismatches: usize,
) -> Result<Report> {
    let file = read(path)?;
    if let Some(expected) = &file.references_checksum_sha256 {
        if !expected.eq_ignore_ascii_case(source_sha256) {
            eprintln!("warning: {} was labelled against references {expected}, the index was built from {source_sha256}", path.display());
        }
    }
    if file.entries.is_empty() {
        bail!("{} holds no entries", path.display());
    }
    let mut r = Report::default();
    let mut lat = Vec::with_capacity(file.entries.len());
    let mut shown = 0;
    for (i, e) in file.entries.iter().enumerate() {
        let body = e.request.get().as_bytes();
        let t = Instant::now();
        let resp = scorer.handle(
            &Request::new("POST", "/fraud-score", body),
            Readiness::Ready,
        );
        lat.push(t.elapsed().as_nanos() as u64);
        r.total += 1;
        let answer = (resp.status == 200)
            .then(|| serde_json::from_str::<Answer>(&resp.body).ok())
            .flatten();
        let Some(a) = answer else {
            r.errors += 1;
            if shown < show_mismatches {
                eprintln!("entry {i}: HTTP {} {}", resp.status, resp.body);
                shown += 1;
            }
            continue;
        };
        match (e.expected_approved, a.approved) {
            (false, false) => r.tp += 1,
            (true, true) => r.tn += 1,
            (true, false) => r.fp += 1,
            (false, true) => r.fn_ += 1,
        }
        if (a.fraud_score - e.expected_fraud_score).abs() > 1e-9 {
            r.score_mismatches += 1;
            if shown < show_mismatches {
                eprintln!(
                    "entry {i}: fraud_score {} expected {}",
                    a.fraud_score, e.expected_fraud_score
                );
                shown += 1;
            }
        }
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1] as f64 / 1000.0
    };
    r.p50_us = pct(0.50);
    r.p99_us = pct(0.99);
    r.detection_score = detection_score(r.total, r.fp, r.fn_, r.errors);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_score_matches_spec_examples() {
        assert!((detection_score(54_059, 0, 0, 0) - 3000.0).abs() < 1e-9);
        // SPEC: at N = 54,059 one FP costs about 90 points, one FN 181, one error 233.
        let base = detection_score(54_059, 0, 0, 0);
        assert!((base - detection_score(54_059, 1, 0, 0) - 90.3).abs() < 1.0);
        assert!((base - detection_score(54_059, 0, 1, 0) - 180.6).abs() < 1.0);
        assert!((base - detection_score(54_059, 0, 0, 1) - 233.4).abs() < 1.0);
        assert_eq!(detection_score(100, 16, 0, 0), -3000.0);
    }
}
