//! Shared pieces of the fuzz targets: a small deterministic index (no faiss, no embedded
//! artifact), a literal transcription of the contest labeller to check the search against, the
//! response invariants, and a structured payload generator with an independent vectorizer.

// Lane loops read several arrays in lockstep; indexing says that more plainly than zips.
#![allow(clippy::needless_range_loop)]

pub mod damage;
pub mod gen;
pub mod http;

use function::decision::BODIES;
use function::search::{SearchParams, Searcher, K};
use function::{Response, Scorer};
use index_pack::format::{self, ArchivedIndex, CodecKind, DIMS, KEY_DIMS, SCALE};
use index_pack::layout::{self, LayoutParams, References};
use std::sync::OnceLock;

/// The references and indexes every target searches, built once per process.
pub struct Fixture {
    pub refs: References,
    /// Exact codec (what production embeds): answers must equal the labeller's.
    pub i16_index: &'static ArchivedIndex,
    /// Lossy codec: only checked for crashes and well-formed answers.
    pub f16_index: &'static ArchivedIndex,
    /// The i16 artifact bytes (seed for the `index` target's mutations).
    pub i16_artifact: &'static [u8],
    /// Owners of the artifact bytes, kept reachable so LeakSanitizer sees no leak.
    _buffers: [&'static rkyv::util::AlignedVec<32>; 2],
}

/// The fixture, built on first use (a few milliseconds).
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let refs = references();
        // Kept for the whole process; `open` needs the 32-byte alignment AlignedVec gives.
        let i16_buf: &'static _ = Box::leak(Box::new(small_index(&refs, 37, CodecKind::I16, 16)));
        let f16_buf: &'static _ = Box::leak(Box::new(small_index(&refs, 23, CodecKind::F16, 8)));
        Fixture {
            i16_index: format::open(i16_buf).expect("the fuzz fixture index opens"),
            f16_index: format::open(f16_buf).expect("the fuzz fixture index opens"),
            i16_artifact: i16_buf.as_slice(),
            refs,
            _buffers: [i16_buf, f16_buf],
        }
    })
}

/// The scorer the handler targets use (i16 index, the fastest kernels this CPU has).
pub fn scorer() -> Scorer<'static> {
    Scorer::new(Searcher::new(fixture().i16_index, SearchParams::default()))
}

/// 3,000 references: two thirds on a fine grid, one third on a coarse grid so that exact
/// distance ties (the labeller's index rule) are common; a fifth have the -1 sentinel.
fn references() -> References {
    let mut rng = Lcg(0x5eed);
    let mut refs = References::default();
    for i in 0..3_000 {
        let coarse = i % 3 == 2;
        let mut v = [0i16; DIMS];
        let sentinel = rng.next().is_multiple_of(5);
        for (d, x) in v.iter_mut().enumerate() {
            *x = if KEY_DIMS.contains(&d) {
                (rng.next() % 2) as i16 * 10_000
            } else if sentinel && (d == 5 || d == 6) {
                -10_000
            } else if coarse {
                (rng.next() % 5) as i16 * 2_500
            } else {
                (rng.next() % 10_001) as i16
            };
        }
        refs.vectors.push(v);
        refs.fraud.push(rng.next().is_multiple_of(3));
    }
    refs
}

/// Deterministic pseudo-random numbers (the fixture must be the same in every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// A faiss-free index ([`layout::build_sampled`]), as in the function crate's search tests.
fn small_index(
    refs: &References,
    cells: usize,
    codec: CodecKind,
    block_rows: u32,
) -> rkyv::util::AlignedVec<32> {
    let params = LayoutParams {
        codec,
        block_rows,
        ..LayoutParams::default()
    };
    format::aligned_copy(&format::to_artifact(&layout::build_sampled(
        refs, cells, &params,
    )))
}

/// The contest labeller, transcribed: f64 distances over all references in file order; a
/// candidate enters only when strictly closer than the current 5th. Returns reference indexes.
pub fn labeller_top5(refs: &References, q: &[i16; DIMS]) -> Vec<u32> {
    let mut best: Vec<(f64, u32)> = Vec::with_capacity(K + 1);
    for (i, v) in refs.vectors.iter().enumerate() {
        let mut d = 0.0;
        for j in 0..DIMS {
            let e = q[j] as f64 / SCALE - v[j] as f64 / SCALE;
            d += e * e;
        }
        if best.len() < K || d < best[best.len() - 1].0 {
            let pos = best.iter().position(|&(x, _)| d < x).unwrap_or(best.len());
            best.insert(pos, (d, i as u32));
            best.truncate(K);
        }
    }
    best.into_iter().map(|(_, i)| i).collect()
}

/// Exact squared distance in fixed point (units of 1e-8).
pub fn fixed_distance(q: &[i16; DIMS], r: &[i16; DIMS]) -> i64 {
    (0..DIMS).map(|i| (q[i] as i64 - r[i] as i64).pow(2)).sum()
}

/// Checks the search for `q` against the labeller on the i16 index (AVX2 when present, scalar,
/// and the vote without parking), and that the lossy
/// index answers with 5 distinct neighbours. Returns the labeller's fraud count.
pub fn check_search(q: &[i16; DIMS]) -> usize {
    let f = fixture();
    let want = labeller_top5(&f.refs, q);
    let frauds = want.iter().filter(|&&i| f.refs.fraud[i as usize]).count();
    for s in [
        Searcher::new(f.i16_index, SearchParams::default()),
        Searcher::new(
            f.i16_index,
            SearchParams {
                park: false,
                ..SearchParams::default()
            },
        ),
        Searcher::scalar(f.i16_index, SearchParams::default()),
    ] {
        let got = s.nearest(q);
        // The same 5 references as the labeller. Their order may differ only among references
        // at exactly the same fixed-point distance: the search orders those by index unless
        // the tie crosses 5th place, the labeller by its f64 rounding of the equal distances.
        let mut got_set: Vec<u32> = got.iter().map(|n| n.index).collect();
        let mut want_set = want.clone();
        got_set.sort_unstable();
        want_set.sort_unstable();
        assert_eq!(
            got_set,
            want_set,
            "{} search differs from the labeller for {q:?}",
            s.kernels_name()
        );
        for (n, &w) in got.iter().zip(&want) {
            assert_eq!(
                n.distance,
                fixed_distance(q, &f.refs.vectors[w as usize]),
                "rank of {} for {q:?}",
                n.index
            );
            assert_eq!(n.fraud, f.refs.fraud[n.index as usize]);
        }
        assert_eq!(s.frauds(q), frauds, "fraud count for {q:?}");
    }
    for s in [
        Searcher::new(f.f16_index, SearchParams::default()),
        Searcher::scalar(f.f16_index, SearchParams::default()),
    ] {
        let got = s.nearest(q);
        assert_eq!(got.len(), K, "f16 search for {q:?}");
        assert!(got.windows(2).all(|w| w[0].distance <= w[1].distance));
        let mut ids: Vec<u32> = got.iter().map(|n| n.index).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(
            ids.len(),
            K,
            "f16 search returned a neighbour twice for {q:?}"
        );
    }
    frauds
}

/// Checks what every query vector must satisfy: components in fixed point [-1, 1], the -1
/// sentinel only in the two last-transaction dims, binary dims exactly 0 or 1.
pub fn check_vector(q: &[i16; DIMS]) {
    for (d, &x) in q.iter().enumerate() {
        let ok = if KEY_DIMS.contains(&d) {
            x == 0 || x == 10_000
        } else if d == 5 || d == 6 {
            x == -10_000 || (0..=10_000).contains(&x)
        } else {
            (0..=10_000).contains(&x)
        };
        assert!(ok, "component {d} = {x} out of range in {q:?}");
    }
    assert_eq!(
        q[5] == -10_000,
        q[6] == -10_000,
        "sentinel in one of dims 5, 6 only: {q:?}"
    );
}

/// Checks a `POST /fraud-score` answer: 200 with one of the six bodies, or 400 with a JSON
/// object whose `error` is a non-empty string. Returns the fraud count of a 200.
pub fn check_score_response(r: &Response) -> Option<usize> {
    assert_eq!(r.content_type, function::handler::JSON);
    assert_eq!(r.allow, None);
    match r.status {
        200 => {
            let frauds = BODIES.iter().position(|b| *b == r.body);
            assert!(
                frauds.is_some(),
                "200 with a body that is no decision: {}",
                r.body
            );
            frauds
        }
        400 => {
            let v: serde_json::Value = serde_json::from_str(&r.body)
                .unwrap_or_else(|e| panic!("400 body is not JSON ({e}): {}", r.body));
            let msg = v.get("error").and_then(|e| e.as_str());
            assert!(
                msg.is_some_and(|m| !m.is_empty()),
                "400 body without an error string: {}",
                r.body
            );
            assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{}", r.body);
            None
        }
        s => panic!("POST /fraud-score answered {s}: {}", r.body),
    }
}

/// `POST /fraud-score` with `body` through the handler (no Content-Type, ready).
pub fn post(body: &[u8]) -> function::Response {
    scorer().handle(
        &function::Request::new("POST", "/fraud-score", body),
        function::Readiness::Ready,
    )
}

/// Scores one body through the full handler and, when it is accepted, checks the answer
/// against the labeller's vote over the fixture. Returns whether it was accepted.
pub fn score_and_check(body: &[u8]) -> bool {
    // The parser's fast path answers only where serde answers the same (`Debug` tells -0.0 from
    // 0.0 and prints every double exactly).
    if let Some(p) = function::payload::fast_path(body) {
        assert!(body.is_ascii(), "the fast path answered a body outside ASCII");
        let text = std::str::from_utf8(body).unwrap();
        let q = function::payload::with_serde(text);
        assert_eq!(
            Ok(format!("{p:?}")),
            q.map(|q| format!("{q:?}")),
            "fast path and serde differ on {text}"
        );
    }
    let r = post(body);
    let Some(frauds) = check_score_response(&r) else {
        // A rejected body must be rejected by one of the two stages, never accepted by both.
        let parsed = function::payload::parse(body);
        assert!(
            parsed
                .as_ref()
                .map_or(true, |p| function::vector::vectorize(p).is_err()),
            "400 for a body that parses and vectorizes: {}",
            r.body
        );
        return false;
    };
    let p = function::payload::parse(body).expect("a body answered 200 parses");
    let q = function::vector::vectorize(&p).expect("a body answered 200 vectorizes");
    check_vector(&q);
    assert_eq!(
        frauds,
        check_search(&q),
        "decision differs from the labeller's vote for {q:?}"
    );
    // The query string is ignored: same answer.
    assert_eq!(
        scorer().handle(
            &function::Request::new("POST", "/fraud-score?x=1", body),
            function::Readiness::Ready
        ),
        r
    );
    true
}
