//! The odd-but-valid requests of docs/HOSTILE.md (`tests/data/hostile-valid.json`) at the
//! neighbour level: for each one, the scorer's query vector and the 5 nearest references of the
//! embedded index must be the ones the labeller recorded, in its order, not only the response
//! body (which `hostile.rs` checks over HTTP).
//!
//! The file is the labeller crate's output (`cargo run --release -p labeller -- relabel
//! local-runner/tests/data/hostile-valid.json`, a brute force over all 3M references written
//! from SPEC.md); `cargo xtask verify` checks with `relabel --check` that it still is.

use function::{payload, vector};

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    body: String,
    vector: Vec<f64>,
    neighbours: Vec<u32>,
    frauds: usize,
    expected: String,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(include_str!("data/hostile-valid.json")).expect("hostile-valid.json")
}

#[test]
fn recorded_vectors_and_neighbours_are_the_searchs() {
    let scorer = function::embedded_scorer().expect("the embedded index opens");
    let searcher = scorer
        .searcher()
        .expect("the embedded index is searched in process");
    let cases = cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let q = vector::vectorize(&payload::parse(c.body.as_bytes()).unwrap()).unwrap();
        let ours: Vec<f64> = q.iter().map(|&k| k as f64 / 10_000.0).collect();
        if ours != c.vector {
            failures.push(format!(
                "{}: vector {ours:?}, recorded {:?}",
                c.name, c.vector
            ));
            continue;
        }
        let got: Vec<u32> = searcher.nearest(&q).iter().map(|n| n.index).collect();
        if got != c.neighbours {
            failures.push(format!(
                "{}: neighbours {got:?}, recorded {:?}",
                c.name, c.neighbours
            ));
        }
        let frauds = searcher.frauds(&q);
        let body = scorer
            .handle(
                &function::Request::new("POST", "/fraud-score", c.body.as_bytes()),
                function::Readiness::Ready,
            )
            .body;
        if frauds != c.frauds || body != c.expected {
            failures.push(format!(
                "{}: {frauds} frauds, body {body}; recorded {} frauds, {}",
                c.name, c.frauds, c.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn recorded_vectors_are_the_labellers() {
    // The labeller crate's own transcription of the body gives the recorded vector too, so the
    // two vectorizers agree on every odd input of the file.
    for c in cases() {
        let q = labeller::payload::query(c.body.as_bytes()).unwrap();
        assert_eq!(q.to_vec(), c.vector, "{}", c.name);
    }
}
