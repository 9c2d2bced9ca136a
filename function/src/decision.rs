//! Stage 4: the vote. The count of frauds among the 5 nearest picks one of six answers, whose
//! JSON bodies are built once.

use crate::search::K;

/// The response body for each fraud count 0..=5: score = frauds / 5, approved = score < 0.6.
pub const BODIES: [&str; K + 1] = [
    r#"{"approved":true,"fraud_score":0.0}"#,
    r#"{"approved":true,"fraud_score":0.2}"#,
    r#"{"approved":true,"fraud_score":0.4}"#,
    r#"{"approved":false,"fraud_score":0.6}"#,
    r#"{"approved":false,"fraud_score":0.8}"#,
    r#"{"approved":false,"fraud_score":1.0}"#,
];

/// The decision for a number of frauds among the neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub frauds: usize,
}

impl Decision {
    pub fn new(frauds: usize) -> Decision {
        assert!(frauds <= K, "at most {K} neighbours vote");
        Decision { frauds }
    }
    pub fn fraud_score(self) -> f64 {
        self.frauds as f64 / K as f64
    }
    /// The labeller's rule: approved when the score is below 0.6 (fewer than 3 frauds).
    pub fn approved(self) -> bool {
        self.fraud_score() < 0.6
    }
    pub fn body(self) -> &'static str {
        BODIES[self.frauds]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_the_rule() {
        for f in 0..=K {
            let d = Decision::new(f);
            let v: serde_json::Value = serde_json::from_str(d.body()).unwrap();
            assert_eq!(v["approved"], d.approved());
            assert_eq!(v["fraud_score"].as_f64().unwrap(), d.fraud_score());
            assert_eq!(d.approved(), f < 3);
        }
    }
}
