//! The embedded 3M-reference index answers every public test payload exactly as the contest
//! labeller did (approved and fraud_score), through the same handler the servers use.
//! Needs feature `embedded-index` (enabled when the whole workspace is tested).
#![cfg(feature = "embedded-index")]

use function::{Readiness, Request};
use std::io::Read;

#[test]
fn every_public_payload_matches_the_labeller() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/test-data.json.gz"
    );
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let scorer = function::embedded_scorer().expect("embedded index opens");
    let entries = file["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 54_100);
    let mut wrong = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let body = serde_json::to_vec(&e["request"]).unwrap();
        let resp = scorer.handle(
            &Request::new("POST", "/fraud-score", &body),
            Readiness::Ready,
        );
        assert_eq!(resp.status, 200, "entry {i}: {}", resp.body);
        let got: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
        if got["approved"] != e["expected_approved"]
            || got["fraud_score"].as_f64() != e["expected_fraud_score"].as_f64()
        {
            wrong.push((
                i,
                got,
                e["expected_approved"].clone(),
                e["expected_fraud_score"].clone(),
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} differ, first: {:?}",
        wrong.len(),
        entries.len(),
        &wrong[..wrong.len().min(5)]
    );
}
