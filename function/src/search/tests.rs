//! The search against an independent oracle, on small in-memory indexes.
//!
//! The oracle is the `labeller` crate: the contest's brute force transcribed from SPEC.md (f64
//! squared distances over all references in file order, strict `<`), sharing no code with this
//! crate, so a mistake in the search's own tie-breaking cannot hide in its reference answer.

use super::*;
use index_pack::format::{self, CodecKind};
use index_pack::layout::{self, LayoutParams, References};
use proptest::prelude::*;
use rkyv::util::AlignedVec;

/// The labeller over the same references as an index.
pub(crate) struct Oracle(labeller::References);

/// A component k as the labeller holds it: the double nearest to the 4-decimal value k / 10000
/// (what reading its decimal text gives, and what rounding a query component gives).
fn real(v: &[i16; DIMS]) -> labeller::Query {
    v.map(|k| k as f64 / 10_000.0)
}

impl Oracle {
    pub(crate) fn new(refs: &References) -> Oracle {
        let rows = refs.vectors.iter().map(real).collect();
        Oracle(labeller::References::from_rows(rows, refs.fraud.clone()))
    }

    /// The labeller's 5 nearest references, nearest first.
    pub(crate) fn top5(&self, q: &[i16; DIMS]) -> Vec<u32> {
        labeller::scan::nearest(&self.0, &real(q))
            .iter()
            .map(|h| h.index)
            .collect()
    }

    /// The labeller's f64 distance from `q` to reference `i`.
    fn distance(&self, q: &[i16; DIMS], i: usize) -> f64 {
        labeller::scan::distance(&real(q), &self.0.rows[i])
    }
}

/// A faiss-free index ([`layout::build_sampled`]): lists of very different sizes.
pub(crate) fn small_index(
    refs: &References,
    cells: usize,
    codec: CodecKind,
    block_rows: u32,
) -> AlignedVec<32> {
    let params = LayoutParams {
        codec,
        block_rows,
        ..LayoutParams::default()
    };
    format::aligned_copy(&format::to_artifact(&layout::build_sampled(
        refs, cells, &params,
    )))
}

/// Random references on a coarse grid (many exact ties) or a fine one, with sentinels.
pub(crate) fn random_refs(n: usize, seed: u64, coarse: bool) -> References {
    let mut rng = Lcg(seed);
    let mut refs = References::default();
    for _ in 0..n {
        refs.vectors.push(random_vector(&mut rng, coarse));
        refs.fraud.push(rng.next().is_multiple_of(3));
    }
    refs
}

pub(crate) struct Lcg(pub u64);
impl Lcg {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

pub(crate) fn random_vector(rng: &mut Lcg, coarse: bool) -> [i16; DIMS] {
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
    v
}

fn check_query(searcher: &Searcher, refs: &References, oracle: &Oracle, q: &[i16; DIMS]) {
    let got: Vec<u32> = searcher.nearest(q).iter().map(|n| n.index).collect();
    let want = oracle.top5(q);
    assert_eq!(got, want, "query {q:?}");
    let frauds = want.iter().filter(|&&i| refs.fraud[i as usize]).count();
    assert_eq!(searcher.frauds(q), frauds);
}

/// Every kind of searcher over a packed (so valid) index: scalar and SIMD, with and without
/// parking and prefetch, with the clamped kernels and with the plain ones.
fn searchers(idx: &ArchivedIndex) -> Vec<Searcher<'_>> {
    let opened = opened_searchers(idx);
    let verified = format::Verified::by_the_build(idx);
    let plain = opened.iter().map(|s| s.trusting(verified));
    plain.chain(opened.clone()).collect()
}

/// The searchers an index that was only opened gets: the clamped kernels.
fn opened_searchers(idx: &ArchivedIndex) -> Vec<Searcher<'_>> {
    let mut s = vec![Searcher::scalar(idx, SearchParams::default())];
    for (park, prefetch) in [(true, true), (false, true), (true, false)] {
        let params = SearchParams {
            park,
            prefetch,
            ..SearchParams::default()
        };
        s.push(Searcher::new(idx, params));
    }
    s
}

#[test]
fn exact_on_random_data_fine_and_coarse_grids() {
    for (seed, coarse) in [(1, false), (2, true), (3, true)] {
        let refs = random_refs(3_000, seed, coarse);
        let bytes = small_index(&refs, 37, CodecKind::I16, 16);
        let idx = format::open(&bytes).unwrap();
        let oracle = Oracle::new(&refs);
        let mut rng = Lcg(seed + 100);
        for s in searchers(idx) {
            for _ in 0..150 {
                check_query(&s, &refs, &oracle, &random_vector(&mut rng, coarse));
            }
        }
    }
}

#[test]
fn exact_on_adversarial_queries() {
    let refs = random_refs(2_000, 7, true);
    let bytes = small_index(&refs, 20, CodecKind::I16, 8);
    let idx = format::open(&bytes).unwrap();
    let mut queries: Vec<[i16; DIMS]> = vec![[0; DIMS], [10_000; DIMS], {
        let mut q = [10_000; DIMS];
        q[5] = -10_000;
        q[6] = -10_000;
        q
    }];
    // Every reference itself (distance 0, and ties with its duplicates), and midpoints of pairs
    // (equal distance to both).
    queries.extend(refs.vectors.iter().take(200).copied());
    for w in refs.vectors.windows(2).take(200) {
        let mut q = [0i16; DIMS];
        for d in 0..DIMS {
            q[d] = ((w[0][d] as i32 + w[1][d] as i32) / 2) as i16;
        }
        queries.push(q);
    }
    let oracle = Oracle::new(&refs);
    for s in searchers(idx) {
        for q in &queries {
            check_query(&s, &refs, &oracle, q);
        }
    }
}

#[test]
fn exact_with_duplicates_straddling_fifth_place() {
    // 12 copies of one vector, alternating labels: the 5 chosen must be the 5 lowest indices.
    let mut refs = random_refs(500, 11, false);
    let dup = refs.vectors[0];
    for i in 0..12 {
        refs.vectors.insert(40 * i, dup);
        refs.fraud.insert(40 * i, i % 2 == 0);
    }
    let bytes = small_index(&refs, 9, CodecKind::I16, 8);
    let idx = format::open(&bytes).unwrap();
    let oracle = Oracle::new(&refs);
    for s in searchers(idx) {
        check_query(&s, &refs, &oracle, &dup);
    }
}

/// Components a constructed tie may differ in: not the key dimensions, not a -1 sentinel.
fn free_dims(q: &[i16; DIMS]) -> Vec<usize> {
    (0..DIMS)
        .filter(|&d| !KEY_DIMS.contains(&d) && q[d] >= 0)
        .collect()
}

/// Item 2 of the exactness issue: references at *equal* integer squared distance whose f64
/// distances (the labeller's) are in the opposite order of their file order, competing for
/// 5th place. Each is built by permuting the components of one difference vector: a
/// permutation keeps the integer distance, but not the rounding of the f64 sum. Four
/// references sit strictly closer; the tied ones, 2 or 3, take places 5, 6 (and 7) with the
/// f64-farthest first in the file, and their labels differ, so taking them by file order
/// would give another answer and another fraud count.
#[test]
fn f64_order_decides_equal_integer_distances_across_fifth_place() {
    let mut rng = Lcg(20_261_130);
    let mut built = 0;
    for _attempt in 0..2_000 {
        if built == 40 {
            break;
        }
        // A query away from the edges, so every constructed component stays in [0, 1].
        let mut q = random_vector(&mut rng, false);
        for d in free_dims(&q) {
            q[d] = 1_000 + (rng.next() % 8_001) as i16;
        }
        let free = free_dims(&q);
        // One difference vector, moved to other components by random swaps.
        let mut diff = [0i16; DIMS];
        for &d in &free {
            diff[d] = (rng.next() % 601) as i16 - 300;
        }
        let tied_n = 2 + (built % 2);
        let mut diffs = vec![diff];
        while diffs.len() < tied_n {
            let mut e = *diffs.last().unwrap();
            let (i, j) = (
                free[rng.next() as usize % free.len()],
                free[rng.next() as usize % free.len()],
            );
            e.swap(i, j);
            diffs.push(e);
        }
        let tied: Vec<[i16; DIMS]> = diffs
            .iter()
            .map(|e| std::array::from_fn(|d| q[d] + e[d]))
            .collect();
        let exact = |r: &[i16; DIMS]| -> i64 {
            (0..DIMS).map(|d| (q[d] as i64 - r[d] as i64).pow(2)).sum()
        };
        let d_tie = exact(&tied[0]);
        // Distinct vectors with equal integer distance and pairwise different f64 distances.
        let mut refs = References::default();
        for r in &tied {
            refs.vectors.push(*r);
            refs.fraud.push(false);
        }
        let probe = Oracle::new(&refs);
        let f: Vec<f64> = (0..tied_n).map(|i| probe.distance(&q, i)).collect();
        let distinct = (0..tied_n).all(|i| (i + 1..tied_n).all(|j| f[i] != f[j]));
        if d_tie <= 1 || tied.iter().any(|r| exact(r) != d_tie) || !distinct {
            continue;
        }

        // File: filler, the tied ones from f64-farthest to f64-nearest (nearest last), the 4
        // closer ones, more filler. Filler is kept only if strictly farther than the tie.
        let mut by_f64: Vec<usize> = (0..tied_n).collect();
        by_f64.sort_by(|&a, &b| f[b].total_cmp(&f[a]));
        let filler = random_refs(400, rng.next(), false);
        let mut refs = References::default();
        let push = |refs: &mut References, v: [i16; DIMS], fraud: bool| {
            refs.vectors.push(v);
            refs.fraud.push(fraud);
        };
        for (v, &fr) in filler.vectors.iter().zip(&filler.fraud).take(200) {
            if exact(v) > d_tie {
                push(&mut refs, *v, fr);
            }
        }
        let first_tied = refs.vectors.len() as u32;
        for (rank, &i) in by_f64.iter().enumerate() {
            // The f64-nearest (placed last) is a fraud, the others are not.
            push(&mut refs, tied[i], rank == tied_n - 1);
        }
        for n in 0..4 {
            // Closer: the query moved by one unit in one free component (distance 1 < d_tie).
            let mut c = q;
            c[free[n % free.len()]] += if n < free.len() { 1 } else { -1 };
            push(&mut refs, c, n < 2);
        }
        for (v, &fr) in filler.vectors.iter().zip(&filler.fraud).skip(200) {
            if exact(v) > d_tie {
                push(&mut refs, *v, fr);
            }
        }
        let oracle = Oracle::new(&refs);
        let want = oracle.top5(&q);
        let nearest_tied = first_tied + tied_n as u32 - 1;
        assert_eq!(want[4], nearest_tied, "the labeller takes the f64-nearest");
        // By file order alone the 5th would be the first tied one, with one fraud fewer.
        let mut by_index = want[..4].to_vec();
        by_index.push(first_tied);
        assert_ne!(by_index, want);

        let bytes = small_index(&refs, 7, CodecKind::I16, 8);
        let idx = format::open(&bytes).unwrap();
        for s in searchers(idx) {
            let got = s.nearest(&q);
            assert_eq!(
                got.iter().map(|n| n.index).collect::<Vec<_>>(),
                want,
                "query {q:?}, tied distances {f:?}"
            );
            assert_eq!(got[4].distance, d_tie);
            assert_eq!(
                s.frauds(&q),
                3,
                "2 closer frauds and the f64-nearest tied one"
            );
        }
        built += 1;
    }
    assert_eq!(built, 40, "constructed only {built} cases");
}

/// An index over `points` (lane values, label) with one k-means cell per point group: group g
/// of `groups` is cell g, so each group is its own list and block and the walk meets them in
/// the order of their boxes' bounds. Every other lane is 0, like the query's.
/// A reference placed by hand: (dimension, value) pairs (every other dimension 0) and its label.
type Placed<'a> = (&'a [(usize, i16)], bool);

fn placed(groups: &[&[Placed]]) -> (References, AlignedVec<32>) {
    let mut refs = References::default();
    let mut assignment = Vec::new();
    for (g, points) in groups.iter().enumerate() {
        for (lanes, fraud) in points.iter() {
            let mut v = [0i16; DIMS];
            for &(d, x) in lanes.iter() {
                v[d] = x;
            }
            refs.vectors.push(v);
            refs.fraud.push(*fraud);
            assignment.push(g as u32);
        }
    }
    let centroids = vec![[0f32; DIMS]; groups.len()];
    let params = LayoutParams {
        codec: CodecKind::I16,
        block_rows: 8,
        ..LayoutParams::default()
    };
    let index = layout::build(&refs, &centroids, &assignment, &params);
    (refs, format::aligned_copy(&format::to_artifact(&index)))
}

/// The vote with replay on and off, and the labeller's.
fn votes(refs: &References, bytes: &AlignedVec<32>) -> (usize, usize, usize) {
    let idx = format::open(bytes).unwrap();
    let q = [0i16; DIMS];
    let want = Oracle::new(refs)
        .top5(&q)
        .iter()
        .filter(|&&i| refs.fraud[i as usize])
        .count();
    let off = SearchParams {
        replay: false,
        ..SearchParams::default()
    };
    let on = Searcher::new(idx, SearchParams::default());
    assert_eq!(
        on.frauds(&q),
        Searcher::scalar(idx, SearchParams::default()).frauds(&q)
    );
    (on.frauds(&q), Searcher::new(idx, off).frauds(&q), want)
}

#[test]
fn replay_after_a_unanimous_vote_is_broken_late() {
    // Block A (nearest box): 5 legit at 1000..1500 on the amount lane, so the vote is unanimous
    // and block B (3 legit at 1110..1130) is parked. Block C's fraud at 1200 then enters the 5:
    // B must come back, and its 3 legit push the fraud out again.
    let a: &[Placed] = &[
        (&[(0, 1000)], false),
        (&[(0, 1100)], false),
        (&[(0, 1300)], false),
        (&[(0, 1400)], false),
        (&[(0, 1500)], false),
    ];
    let b: &[Placed] = &[
        (&[(0, 1110)], false),
        (&[(0, 1120)], false),
        (&[(0, 1130)], false),
    ];
    let c: &[Placed] = &[(&[(0, 1200)], true)];
    let (refs, bytes) = placed(&[a, b, c]);
    let (on, off, want) = votes(&refs, &bytes);
    assert_eq!(want, 0);
    assert_eq!(on, want, "with replay");
    assert_eq!(off, 1, "without replay the parked block is never seen");
    let idx = format::open(&bytes).unwrap();
    let (_, st) = Searcher::new(idx, SearchParams::default()).frauds_with_stats(&[0; DIMS]);
    assert!(st.parked >= 1 && st.replayed >= 1, "{st:?}");
}

#[test]
fn replay_decides_a_tie_of_mixed_labels_across_fifth_place() {
    // A: 4 legit at 1000..1300 and one at 1450 (unanimous, so B is parked). C: a fraud at
    // exactly 1400 on another lane enters 5th. B holds a legit at exactly 1400 too (its box
    // bound is lower, 1390^2, so the walk parks it before C is scanned): equal integer and
    // equal f64 distances, so the lower file index takes 5th place.
    let a: &[Placed] = &[
        (&[(0, 1000)], false),
        (&[(0, 1100)], false),
        (&[(0, 1200)], false),
        (&[(0, 1300)], false),
        (&[(0, 1450)], false),
    ];
    let b: &[Placed] = &[(&[(2, 1400)], false), (&[(0, 200), (2, 1390)], false)];
    let c: &[Placed] = &[(&[(1, 1400)], true)];
    // B before C in the file: the legit is 5th.
    let (refs, bytes) = placed(&[a, b, c]);
    let (on, off, want) = votes(&refs, &bytes);
    assert_eq!((on, want), (0, 0));
    assert_eq!(off, 1, "without replay the tied legit is never seen");
    // C before B in the file: the fraud is 5th, whatever the walk parked.
    let (refs, bytes) = placed(&[a, c, b]);
    let (on, off, want) = votes(&refs, &bytes);
    assert_eq!((on, off, want), (1, 1, 1));
}

#[test]
fn fewer_references_than_k() {
    let refs = random_refs(3, 5, false);
    let bytes = small_index(&refs, 2, CodecKind::I16, 8);
    let idx = format::open(&bytes).unwrap();
    let s = Searcher::new(idx, SearchParams::default());
    let got: Vec<u32> = s.nearest(&[0; DIMS]).iter().map(|n| n.index).collect();
    assert_eq!(got, Oracle::new(&refs).top5(&[0; DIMS]));
    assert_eq!(got.len(), 3);
}

#[test]
fn fp16_codec_is_close_but_not_guaranteed_exact() {
    let refs = random_refs(3_000, 21, false);
    let bytes = small_index(&refs, 30, CodecKind::F16, 32);
    let idx = format::open(&bytes).unwrap();
    let (fast, slow) = (
        Searcher::new(idx, SearchParams::default()),
        Searcher::scalar(idx, SearchParams::default()),
    );
    let oracle = Oracle::new(&refs);
    let mut rng = Lcg(99);
    let mut agree = 0;
    for _ in 0..300 {
        let q = random_vector(&mut rng, false);
        let a = fast.nearest(&q);
        assert_eq!(a, slow.nearest(&q), "AVX2 and scalar fp16 kernels disagree");
        let got: Vec<u32> = a.iter().map(|n| n.index).collect();
        agree += (got == oracle.top5(&q)) as usize;
    }
    assert!(agree >= 270, "fp16 matched only {agree}/300");
}

#[test]
fn faiss_trained_index_is_exact() {
    let refs = random_refs(4_000, 31, false);
    let opts = index_pack::PackOptions {
        cells: 16,
        kmeans_iters: 5,
        ..Default::default()
    };
    let bytes = format::aligned_copy(&index_pack::pack(&refs, &opts).unwrap());
    let idx = format::open(&bytes).unwrap();
    let s = Searcher::new(idx, SearchParams::default());
    let oracle = Oracle::new(&refs);
    let mut rng = Lcg(5);
    for _ in 0..200 {
        check_query(&s, &refs, &oracle, &random_vector(&mut rng, false));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn search_equals_labeller(seed in any::<u64>(), coarse in any::<bool>(), cells in 1usize..40, block in 1u32..5, park in any::<bool>()) {
        let refs = random_refs(600, seed, coarse);
        let bytes = small_index(&refs, cells, CodecKind::I16, block * 8);
        let idx = format::open(&bytes).unwrap();
        let s = Searcher::new(idx, SearchParams { park, ..SearchParams::default() });
        let oracle = Oracle::new(&refs);
        let mut rng = Lcg(seed ^ 0xdead_beef);
        for _ in 0..20 {
            let q = random_vector(&mut rng, coarse);
            let got: Vec<u32> = s.nearest(&q).iter().map(|n| n.index).collect();
            let frauds = got.iter().filter(|&&i| refs.fraud[i as usize]).count();
            prop_assert_eq!(&got, &oracle.top5(&q));
            prop_assert_eq!(s.frauds(&q), frauds);
        }
    }
}

mod kernels_agree {
    use super::*;
    use index_pack::format::{Bounds, BoundsGroup, PAIRS};

    /// How the values of a kernel test case are drawn.
    #[derive(Clone, Copy, PartialEq)]
    enum Draw {
        /// Anywhere in each lane's domain.
        Domain,
        /// At the ends of each lane's domain.
        Extreme,
        /// Any `i16` (any fp16 bits): what a damaged artifact opened without reading its rows
        /// may hold.
        Arbitrary,
    }

    fn lanes(rng: &mut Lcg, draw: Draw) -> [i16; LANES] {
        let mut l = [0i16; LANES];
        for (i, x) in l.iter_mut().enumerate() {
            let signed = i < LANES - 1 && (ROW_DIMS[i] == 5 || ROW_DIMS[i] == 6);
            *x = match (draw, signed) {
                (Draw::Arbitrary, _) => rng.next() as i16,
                _ if i == LANES - 1 => 0,
                (Draw::Extreme, true) => [-10_000, 10_000][(rng.next() % 2) as usize],
                (Draw::Extreme, false) => [0, 10_000][(rng.next() % 2) as usize],
                (Draw::Domain, true) => (rng.next() % 20_001) as i16 - 10_000,
                (Draw::Domain, false) => (rng.next() % 10_001) as i16,
            };
        }
        l
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        let Some(avx) = Avx2::new() else {
            eprintln!("this CPU has no AVX2: only the scalar kernels exist here");
            return;
        };
        let mut rng = Lcg(42);
        for case in 0..30_000 {
            let draw = [Draw::Domain, Draw::Extreme, Draw::Arbitrary][case % 3];
            // The query comes from the vectorizer (in the domain); `Prepared` clamps the rest.
            let q = Prepared::new(lanes(&mut rng, draw));
            let rows: Vec<[i16; LANES]> = (0..8).map(|_| lanes(&mut rng, draw)).collect();
            let Codes::I16(g) = index_pack::codec::encode(CodecKind::I16, &rows) else {
                unreachable!()
            };
            let Codes::F16(mut h) = index_pack::codec::encode(CodecKind::F16, &rows) else {
                unreachable!()
            };
            if draw == Draw::Arbitrary {
                // Any bits, NaN and infinities included.
                for lane in h[0].lanes.iter_mut() {
                    lane.iter_mut().for_each(|x| *x = rng.next() as u16);
                }
            }
            let base = (rng.next() % 300_000_000) as i32;
            let (a, b) = (
                avx.i16_group(&g[0], &q, base),
                Scalar::<true>.i16_group(&g[0], &q, base),
            );
            assert_eq!(a, b);
            if draw != Draw::Arbitrary {
                // In the domain the plain kernels give the same distances.
                assert_eq!(avx.plain().i16_group(&g[0], &q, base), a);
                assert_eq!(Scalar::<false>.i16_group(&g[0], &q, base), a);
            }
            assert!(
                a.iter()
                    .all(|&d| (base..=base + 1_700_000_000).contains(&d)),
                "{a:?}"
            );
            let (a, b) = (
                avx.f16_group(&h[0], &q, base),
                Scalar::<true>.f16_group(&h[0], &q, base),
            );
            if draw != Draw::Arbitrary {
                let plain = avx.plain().f16_group(&h[0], &q, base);
                let scalar = Scalar::<false>.f16_group(&h[0], &q, base);
                for r in 0..8 {
                    assert!((plain[r] - scalar[r]).abs() <= 1, "{plain:?} vs {scalar:?}");
                    assert!((plain[r] - a[r]).abs() <= 1, "{plain:?} vs {a:?}");
                }
            }
            for r in 0..8 {
                // FMA order is the same; allow one unit of the final conversion.
                assert!((a[r] - b[r]).abs() <= 1, "{a:?} vs {b:?}");
                assert!(a[r] >= base && a[r] <= base + 1_700_001_000, "{a:?}");
            }
            // Boxes from two rows: lo <= hi lane by lane, except for arbitrary bytes.
            let mut bx = Bounds {
                lo: [0; 16],
                hi: [0; 16],
            };
            for l in 0..LANES {
                (bx.lo[l], bx.hi[l]) = match draw {
                    Draw::Arbitrary => (rows[0][l], rows[1][l]),
                    _ => (rows[0][l].min(rows[1][l]), rows[0][l].max(rows[1][l])),
                };
            }
            if draw == Draw::Arbitrary {
                bx.lo[12..].iter_mut().for_each(|x| *x = rng.next() as i16);
            }
            let (a, b) = (
                avx.box_lower_bound(&bx, &q),
                Scalar::<true>.box_lower_bound(&bx, &q),
            );
            assert_eq!(a, b);
            if draw != Draw::Arbitrary {
                assert_eq!(avx.plain().box_lower_bound(&bx, &q), a);
                assert_eq!(Scalar::<false>.box_lower_bound(&bx, &q), a);
            }
            assert!((0..=1_700_000_000).contains(&a), "{a}");
            let mut bg = BoundsGroup {
                lo: [[0; 16]; PAIRS],
                hi: [[0; 16]; PAIRS],
            };
            for p in 0..PAIRS {
                for r in 0..8 {
                    for j in 0..2 {
                        let (x, y) = (rows[r][2 * p + j], rows[(r + 1) % 8][2 * p + j]);
                        let (lo, hi) = match draw {
                            Draw::Arbitrary => (x, y),
                            _ => (x.min(y), x.max(y)),
                        };
                        bg.lo[p][2 * r + j] = lo;
                        bg.hi[p][2 * r + j] = hi;
                    }
                }
            }
            let (a, b) = (
                avx.boxes_lower_bound(&bg, &q),
                Scalar::<true>.boxes_lower_bound(&bg, &q),
            );
            assert_eq!(a, b);
            if draw != Draw::Arbitrary {
                assert_eq!(avx.plain().boxes_lower_bound(&bg, &q), a);
                assert_eq!(Scalar::<false>.boxes_lower_bound(&bg, &q), a);
            }
            assert!(a.iter().all(|d| (0..=1_700_000_000).contains(d)), "{a:?}");
        }
    }

    /// The clamps change nothing in the domain: the kernels give the plain squared distances
    /// and box gaps, whatever the difference (extreme values included).
    #[test]
    fn clamped_kernels_are_plain_distances_in_the_domain() {
        let mut rng = Lcg(3);
        for case in 0..4_000 {
            let draw = [Draw::Domain, Draw::Extreme][case % 2];
            let ql = lanes(&mut rng, draw);
            let q = Prepared::new(ql);
            let rows: Vec<[i16; LANES]> = (0..8).map(|_| lanes(&mut rng, draw)).collect();
            let Codes::I16(g) = index_pack::codec::encode(CodecKind::I16, &rows) else {
                unreachable!()
            };
            let d = Scalar::<true>.i16_group(&g[0], &q, 7);
            for r in 0..8 {
                let want: i32 = (0..LANES)
                    .map(|l| (rows[r][l] as i32 - ql[l] as i32).pow(2))
                    .sum();
                assert_eq!(d[r], want + 7);
            }
            let mut bx = Bounds {
                lo: [0; 16],
                hi: [0; 16],
            };
            for l in 0..LANES {
                bx.lo[l] = rows[0][l].min(rows[1][l]);
                bx.hi[l] = rows[0][l].max(rows[1][l]);
            }
            let want: i32 = (0..LANES)
                .map(|l| {
                    let x = ql[l] as i32;
                    (bx.lo[l] as i32 - x).max(x - bx.hi[l] as i32).max(0).pow(2)
                })
                .sum();
            assert_eq!(Scalar::<true>.box_lower_bound(&bx, &q), want);
        }
    }

    /// Without the clamps, stored values outside the domain overflow an `i32` distance: the
    /// case the clamps exist for.
    #[test]
    fn out_of_domain_rows_would_overflow_unclamped() {
        let q = Prepared::new([10_000; LANES]);
        let rows = vec![[-32_768i16; LANES]; 8];
        let unclamped: i64 = (0..LANES).map(|_| (42_768i64).pow(2)).sum();
        assert!(unclamped > i32::MAX as i64);
        let Codes::I16(g) = index_pack::codec::encode(CodecKind::I16, &rows) else {
            unreachable!()
        };
        let d = Scalar::<true>.i16_group(&g[0], &q, 0);
        // Each lane counts at most its span: 9 x 10000^2 + 2 x 20000^2 (lane 11 is padding).
        assert_eq!(d, [1_700_000_000; 8]);
    }

    use index_pack::format::Codes;
}

/// What the lazy residencies serve: an artifact whose rows and boxes hold values outside the
/// domain, with a footer whose CRC32 matches them (a packer bug), which `open` accepts without
/// reading them. The search answers without a panic, and every distance stays in
/// `0..=MAX_DISTANCE` (without the kernels' clamps it wrapped past `i32::MAX`).
#[test]
fn a_damaged_index_that_only_open_accepted_searches_within_bounds() {
    let refs = random_refs(600, 11, false);
    let params = LayoutParams {
        codec: CodecKind::I16,
        block_rows: 16,
        ..LayoutParams::default()
    };
    let mut index = layout::build_sampled(&refs, 9, &params);
    let mut rng = Lcg(5);
    let mut any = || [i16::MIN, i16::MAX, -20_000, 32_000][(rng.next() % 4) as usize];
    let format::Codes::I16(groups) = &mut index.codes else {
        unreachable!()
    };
    for g in groups.iter_mut() {
        g.pairs.iter_mut().flatten().for_each(|x| *x = any());
    }
    for b in index.node_bounds.iter_mut() {
        b.lo.iter_mut().flatten().for_each(|x| *x = any());
        b.hi.iter_mut().flatten().for_each(|x| *x = any());
    }
    for p in index.partitions.iter_mut() {
        p.bounds.lo[..LANES].iter_mut().for_each(|x| *x = any());
    }
    let bytes = format::aligned_copy(&format::to_artifact(&index));
    let idx = format::open(&bytes).expect("open reads no row or box");
    assert!(format::verify_deep(&bytes).is_err());
    let mut rng = Lcg(6);
    for _ in 0..300 {
        let q = random_vector(&mut rng, false);
        for s in opened_searchers(idx) {
            let got = s.nearest(&q);
            assert!(got.len() == K);
            for n in &got {
                assert!((0..=MAX_DISTANCE).contains(&n.distance), "{got:?}");
            }
            assert!(s.frauds(&q) <= K);
        }
    }
}

/// A base and deltas after it, searched as one set: every answer is the labeller's over the
/// base's references followed by the deltas' (ties across parts broken by position, with and
/// without parking), on fine and coarse grids.
#[test]
fn a_base_and_its_deltas_answer_as_one_set() {
    for (seed, coarse) in [(21, false), (22, true)] {
        let all = random_refs(3_000, seed, coarse);
        let cut = |r: std::ops::Range<usize>| References {
            vectors: all.vectors[r.clone()].to_vec(),
            fraud: all.fraud[r].to_vec(),
            source_sha256: [seed as u8; 32],
        };
        let base_bytes = small_index(&cut(0..2_400), 20, CodecKind::I16, 16);
        let base = format::open_with_footer(&base_bytes).unwrap();
        let mut artifacts = Vec::new();
        let mut first = base.end_position();
        let mut previous = base.footer.crc32;
        for (number, range) in [2_400..2_900, 2_900..3_000].into_iter().enumerate() {
            let params = LayoutParams {
                block_rows: 16,
                first_position: first,
                part: delta_part(&base, number as u32, previous, Vec::new()),
                ..LayoutParams::default()
            };
            first += range.len() as u32;
            let index = layout::build_sampled(&cut(range), 6, &params);
            artifacts.push(format::aligned_copy(&format::to_artifact(&index)));
            previous = format::Footer::read(artifacts.last().unwrap())
                .unwrap()
                .crc32;
        }
        let deltas: Vec<Opened> = artifacts
            .iter()
            .map(|a| format::open_with_footer(a).unwrap())
            .collect();
        let oracle = Oracle::new(&all);
        let mut rng = Lcg(seed);
        for s in searchers(base.index) {
            let s = s.with_deltas(base.footer, &deltas, WHOLE).unwrap();
            for _ in 0..150 {
                let q = random_vector(&mut rng, coarse);
                check_query(&s, &all, &oracle, &q);
            }
        }
        // The deltas alone, out of order, or after another base do not compose.
        let s = Searcher::new(base.index, SearchParams::default());
        let swapped = [deltas[1], deltas[0]];
        let e = s.with_deltas(base.footer, &swapped, WHOLE).err().unwrap();
        assert!(e.to_string().contains("starts at position 2900"), "{e}");
        let e = s
            .with_deltas(base.footer, &deltas[1..], WHOLE)
            .err()
            .unwrap();
        assert!(e.to_string().contains("starts at position 2900"), "{e}");
        let other_footer = Footer {
            crc32: base.footer.crc32 ^ 1,
            ..base.footer
        };
        let e = s.with_deltas(other_footer, &deltas, WHOLE).err().unwrap();
        assert!(e.to_string().contains("extends another base"), "{e}");
        let d = Searcher::new(deltas[0].index, SearchParams::default());
        assert!(d.with_deltas(deltas[0].footer, &[], WHOLE).is_err());
        // A whole set served as a shard is refused too.
        let e = s
            .with_deltas(base.footer, &[], format::Serving::Shard)
            .err()
            .unwrap();
        assert!(e.to_string().contains("is a whole set, not a shard"), "{e}");
    }
}

const WHOLE: format::Serving = format::Serving::WholeSet;

/// Delta `number` of `base`, packed after the part whose CRC32 is `previous`, hiding `hides`.
fn delta_part(base: &Opened, number: u32, previous: u32, hides: Vec<u32>) -> format::Part {
    format::Part::Delta {
        base: base.base_ref(),
        number,
        previous_crc32: previous,
        hides,
        edits_sha256: [number as u8 + 1; 32],
    }
}

/// The delta that follows `chain` (a base and its deltas) with `added` references and the
/// edits, as `index-pack delta` packs it (faiss-free layout).
fn edit_delta(
    chain: &[Opened],
    added: &References,
    remove: &[u32],
    relabel: &[(u32, bool)],
) -> Result<AlignedVec<32>, format::FormatError> {
    let indexes: Vec<&ArchivedIndex> = chain.iter().map(|o| o.index).collect();
    let hidden = chain::hidden_rows(&indexes)?;
    let rows = layout::Partitioned::from_references(added);
    let d = chain::delta_rows(&indexes, &hidden, rows, remove, relabel)?;
    let params = LayoutParams {
        block_rows: 16,
        first_position: d.first_position,
        end_position: Some(d.end_position),
        part: delta_part(
            &chain[0],
            chain.len() as u32 - 1,
            chain.last().unwrap().footer.crc32,
            d.hides,
        ),
        ..LayoutParams::default()
    };
    let index = layout::build_sampled_partitioned(d.rows, 5, &params);
    let bytes = format::aligned_copy(&format::to_artifact(&index));
    format::verify_deep(&bytes)?;
    Ok(bytes)
}

/// Removals and relabels, in deltas after a base and an adding delta, answer as the labeller
/// over the corrected file (removed rows gone, labels changed, positions kept): random queries
/// and queries on every edited reference, every searcher. A removed reference is never a
/// neighbour, not even of its own vector; a relabelled one, queried on, is the nearest and
/// votes with its new label. Compacting the chain gives one base with the same answers. An
/// edit of a position the set does not hold is refused when the delta is packed.
#[test]
fn removals_and_relabels_answer_as_the_labeller_over_the_corrected_set() {
    for (seed, coarse) in [(31, false), (32, true)] {
        let all = random_refs(3_000, seed, coarse);
        let cut = |r: std::ops::Range<usize>| References {
            vectors: all.vectors[r.clone()].to_vec(),
            fraud: all.fraud[r].to_vec(),
            source_sha256: [seed as u8; 32],
        };
        let mut artifacts = vec![small_index(&cut(0..2_500), 20, CodecKind::I16, 16)];
        let open = |a: &[AlignedVec<32>]| -> Vec<Opened<'static>> {
            a.iter()
                .map(|b| {
                    let b: &'static [u8] = Box::leak(b.to_vec().into_boxed_slice());
                    let b: &'static AlignedVec<32> = Box::leak(Box::new(format::aligned_copy(b)));
                    format::open_with_footer(b).unwrap()
                })
                .collect()
        };
        // Delta 0 adds 2,500..3,000; delta 1 removes and relabels in the base and in delta 0;
        // delta 2 relabels back a row delta 1 relabelled and removes another.
        let add = edit_delta(&open(&artifacts), &cut(2_500..3_000), &[], &[]).unwrap();
        artifacts.push(add);
        let flip = |p: u32| (p, !all.fraud[p as usize]);
        let removed1 = [7, 640, 1_999, 2_501, 2_999];
        let relabelled1 = [flip(3), flip(1_000), flip(2_600)];
        let d1 = edit_delta(
            &open(&artifacts),
            &References::default(),
            &removed1,
            &relabelled1,
        );
        artifacts.push(d1.unwrap());
        let removed2 = [1_000];
        let relabelled2 = [(3, all.fraud[3]), flip(42)];
        let chain = open(&artifacts);
        let d2 = edit_delta(&chain, &References::default(), &removed2, &relabelled2).unwrap();
        artifacts.push(d2);
        let chain = open(&artifacts);

        // Refused at pack time: a removed position, one past the end, a relabel that keeps
        // the label, a position named twice.
        let none = References::default();
        for (remove, relabel, why) in [
            (vec![640], vec![], "not in the set"),
            (vec![3_000], vec![], "not in the set"),
            (vec![], vec![(42, !all.fraud[42])], "already labelled"),
            (vec![5], vec![(5, true)], "edited twice"),
        ] {
            let e = edit_delta(&chain, &none, &remove, &relabel).unwrap_err();
            assert!(e.to_string().contains(why), "{remove:?} {relabel:?}: {e}");
        }

        // The labeller over the corrected file.
        let real = |v: &[i16; DIMS]| v.map(|k| k as f64 / 10_000.0);
        let original = labeller::References::from_rows(
            all.vectors.iter().map(real).collect(),
            all.fraud.clone(),
        );
        let edits = [
            labeller::edits::Edits {
                remove: removed1.to_vec(),
                relabel: relabelled1.to_vec(),
                sha256: String::new(),
            },
            labeller::edits::Edits {
                remove: removed2.to_vec(),
                relabel: relabelled2.to_vec(),
                sha256: String::new(),
            },
        ];
        let edited = labeller::edits::Edited::apply(original, &edits).unwrap();
        let gone: Vec<u32> = removed1.iter().chain(&removed2).copied().collect();
        let label = |p: u32| {
            let i = edited.positions.binary_search(&p).unwrap();
            edited.refs.fraud[i]
        };
        assert!(label(3) == all.fraud[3] && label(42) != all.fraud[42]);

        let compacted = {
            let indexes: Vec<&ArchivedIndex> = chain.iter().map(|o| o.index).collect();
            let hidden = chain::hidden_rows(&indexes).unwrap();
            let (rows, folded) = chain::compacted_rows(&indexes, &hidden).unwrap();
            assert_eq!(folded.len(), 3);
            let params = LayoutParams {
                block_rows: 16,
                end_position: Some(3_000),
                folded,
                ..LayoutParams::default()
            };
            let index = layout::build_sampled_partitioned(rows, 20, &params);
            format::aligned_copy(&format::to_artifact(&index))
        };
        format::verify_deep(&compacted).unwrap();
        let compacted = format::open(&compacted).unwrap();
        assert_eq!(
            compacted.header.n_refs.to_native() as usize,
            3_000 - gone.len()
        );

        let mut queries: Vec<[i16; DIMS]> = gone
            .iter()
            .chain([3, 42, 2_600].iter())
            .map(|&p| all.vectors[p as usize])
            .collect();
        let mut rng = Lcg(seed);
        queries.extend((0..120).map(|_| random_vector(&mut rng, coarse)));
        let base = chain[0];
        let mut all_searchers: Vec<Searcher> = searchers(base.index)
            .into_iter()
            .map(|s| s.with_deltas(base.footer, &chain[1..], WHOLE).unwrap())
            .collect();
        all_searchers.extend(searchers(compacted));
        for s in &all_searchers {
            assert_eq!(s.references(), 3_000 - gone.len() as u64);
            for q in &queries {
                let hits = labeller::scan::nearest(&edited.refs, &real(q));
                let want: Vec<u32> = hits.iter().map(|h| edited.position(h.index)).collect();
                let got = s.nearest(q);
                assert_eq!(
                    got.iter().map(|n| n.index).collect::<Vec<_>>(),
                    want,
                    "{q:?}"
                );
                let frauds = hits.iter().filter(|h| h.fraud).count();
                assert_eq!(s.frauds(q), frauds, "{q:?}");
                assert!(got.iter().all(|n| !gone.contains(&n.index)));
                for n in &got {
                    assert_eq!(n.fraud, label(n.index), "position {}", n.index);
                }
            }
            // On a relabelled reference: it is among the 5 (at distance 0), with its new label.
            for p in [42, 2_600] {
                let got = s.nearest(&all.vectors[p as usize]);
                let hit = got.iter().find(|n| n.index == p).expect("at distance 0");
                assert_eq!(hit.fraud, label(p));
            }
        }
    }
}
