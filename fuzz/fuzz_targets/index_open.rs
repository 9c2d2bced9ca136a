//! The path the lazy residencies serve: an artifact that only `format::open` accepted (footer,
//! archive validation, table layout; no CRC32, no row or box read), then searched. A lazily
//! mapped index (the file form, `--residency lazy`) is served without `verify_deep`, so the
//! search must hold on any bytes that pass `open`: no panic, no memory error (AddressSanitizer,
//! cargo fuzz's default), no distance overflow (the kernels clamp every lane: a debug assertion
//! in the search checks every lower bound, and this target builds with debug assertions), and
//! answers of at most 5 neighbours.
//!
//! The input is the `index` target's (`fraud_fuzz::damage`): edits of the fixture's artifact,
//! with its footer kept or recomputed, plus queries; the queries are searched as given (the
//! search clamps them) and mapped into the vectorizer's domain.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use fraud_fuzz::damage::Input;
use function::search::{SearchParams, Searcher, K};
use index_pack::format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let artifact = input.artifact();
    let Ok(index) = format::open(&artifact) else {
        return;
    };
    let mut queries = input.domain_queries();
    queries.extend(input.queries.iter().copied());
    let no_park = SearchParams {
        park: false,
        ..SearchParams::default()
    };
    for q in &queries {
        for s in [
            Searcher::new(index, SearchParams::default()),
            Searcher::new(index, no_park),
            Searcher::scalar(index, SearchParams::default()),
        ] {
            let got = s.nearest(q);
            assert!(got.len() <= K);
            assert!(got.windows(2).all(|w| w[0].distance <= w[1].distance));
            assert!(s.frauds(q) <= K);
        }
    }
});
