//! Request bodies through the whole handler (`POST /fraud-score`).
//!
//! Each input is used twice: as the raw body (seeded with real contest payloads, so mutations
//! explore the JSON parser and the field checks), and as the description of a structured
//! payload (`fraud_fuzz::gen`), which reaches the vectorizer and the search on most inputs and
//! whose expected vector is computed independently from SPEC.md. Every accepted body's decision
//! is checked against a brute-force labeller over the fixture index.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use fraud_fuzz::gen::{Expect, GenPayload};
use fraud_fuzz::{check_score_response, check_search, post, score_and_check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    score_and_check(data);

    let Ok(p) = GenPayload::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let (body, expect) = p.render();
    let r = post(&body);
    let frauds = check_score_response(&r);
    let text = String::from_utf8_lossy(&body);
    match expect {
        Expect::Rejected => assert_eq!(r.status, 400, "accepted {text}\n{p:?}"),
        Expect::Vector(want) => {
            assert_eq!(r.status, 200, "rejected {text}: {}\n{p:?}", r.body);
            let parsed = function::payload::parse(&body).unwrap();
            let got = function::vector::vectorize(&parsed).unwrap();
            assert_eq!(got, want, "vector of {text}");
            assert_eq!(frauds, Some(check_search(&got)), "decision for {text}");
        }
        Expect::Either => {
            // Not modelled exactly: the generic checks (labeller vote, query string) still hold.
            score_and_check(&body);
        }
    }
});
