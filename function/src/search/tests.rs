//! The search against a literal transcription of the labeller, on small in-memory indexes.

use super::*;
use index_pack::format::{self, CodecKind};
use index_pack::layout::{self, LayoutParams, References};
use proptest::prelude::*;
use rkyv::util::AlignedVec;

/// The contest labeller: f64 distances over all references in file order, a candidate enters
/// only when strictly closer than one of the current 5.
pub(crate) fn labeller_top5(refs: &References, q: &[i16; DIMS]) -> Vec<u32> {
    let mut best: Vec<(f64, u32)> = Vec::with_capacity(K + 1);
    for (i, v) in refs.vectors.iter().enumerate() {
        let r = v.map(|k| k as f64 / SCALE);
        let d = labeller_distance(q, &r);
        if best.len() < K || d < best[best.len() - 1].0 {
            let pos = best.iter().position(|&(x, _)| d < x).unwrap_or(best.len());
            best.insert(pos, (d, i as u32));
            best.truncate(K);
        }
    }
    best.into_iter().map(|(_, i)| i).collect()
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
        kmeans_iters: 0,
        kmeans_seed: 0,
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

fn check_query(searcher: &Searcher, refs: &References, q: &[i16; DIMS]) {
    let got: Vec<u32> = searcher.nearest(q).iter().map(|n| n.index).collect();
    let want = labeller_top5(refs, q);
    assert_eq!(got, want, "query {q:?}");
    let frauds = want.iter().filter(|&&i| refs.fraud[i as usize]).count();
    assert_eq!(searcher.frauds(q), frauds);
}

fn searchers(idx: &ArchivedIndex) -> Vec<Searcher<'_>> {
    let mut s = vec![Searcher::scalar(idx, SearchParams::default())];
    for probe in [0, 1, 64] {
        s.push(Searcher::new(idx, SearchParams { probe }));
    }
    s
}

#[test]
fn exact_on_random_data_fine_and_coarse_grids() {
    for (seed, coarse) in [(1, false), (2, true), (3, true)] {
        let refs = random_refs(3_000, seed, coarse);
        let bytes = small_index(&refs, 37, CodecKind::I16, 16);
        let idx = format::open(&bytes).unwrap();
        let mut rng = Lcg(seed + 100);
        for s in searchers(idx) {
            for _ in 0..150 {
                check_query(&s, &refs, &random_vector(&mut rng, coarse));
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
    for s in searchers(idx) {
        for q in &queries {
            check_query(&s, &refs, q);
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
    for s in searchers(idx) {
        check_query(&s, &refs, &dup);
    }
}

#[test]
fn fewer_references_than_k() {
    let refs = random_refs(3, 5, false);
    let bytes = small_index(&refs, 2, CodecKind::I16, 8);
    let idx = format::open(&bytes).unwrap();
    let s = Searcher::new(idx, SearchParams::default());
    let got: Vec<u32> = s.nearest(&[0; DIMS]).iter().map(|n| n.index).collect();
    assert_eq!(got, labeller_top5(&refs, &[0; DIMS]));
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
    let mut rng = Lcg(99);
    let mut agree = 0;
    for _ in 0..300 {
        let q = random_vector(&mut rng, false);
        let a = fast.nearest(&q);
        assert_eq!(a, slow.nearest(&q), "AVX2 and scalar fp16 kernels disagree");
        let got: Vec<u32> = a.iter().map(|n| n.index).collect();
        agree += (got == labeller_top5(&refs, &q)) as usize;
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
    let mut rng = Lcg(5);
    for _ in 0..200 {
        check_query(&s, &refs, &random_vector(&mut rng, false));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn search_equals_labeller(seed in any::<u64>(), coarse in any::<bool>(), cells in 1usize..40, block in 1u32..5, probe in 0usize..6) {
        let refs = random_refs(600, seed, coarse);
        let bytes = small_index(&refs, cells, CodecKind::I16, block * 8);
        let idx = format::open(&bytes).unwrap();
        let s = Searcher::new(idx, SearchParams { probe });
        let mut rng = Lcg(seed ^ 0xdead_beef);
        for _ in 0..20 {
            let q = random_vector(&mut rng, coarse);
            let got: Vec<u32> = s.nearest(&q).iter().map(|n| n.index).collect();
            prop_assert_eq!(got, labeller_top5(&refs, &q));
        }
    }
}

mod kernels_agree {
    use super::*;
    use index_pack::format::{Bounds, BoundsGroup, F16Group, I16Group, PAIRS};

    fn lanes(rng: &mut Lcg, extreme: bool) -> [i16; LANES] {
        let mut l = [0i16; LANES];
        for (i, x) in l.iter_mut().enumerate().take(LANES - 1) {
            let signed = ROW_DIMS[i] == 5 || ROW_DIMS[i] == 6;
            *x = match (extreme, signed) {
                (true, true) => [-10_000, 10_000][(rng.next() % 2) as usize],
                (true, false) => [0, 10_000][(rng.next() % 2) as usize],
                (false, true) => (rng.next() % 20_001) as i16 - 10_000,
                (false, false) => (rng.next() % 10_001) as i16,
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
        for case in 0..20_000 {
            let extreme = case % 4 == 0;
            let q = Prepared::new(lanes(&mut rng, extreme));
            let rows: Vec<[i16; LANES]> = (0..8).map(|_| lanes(&mut rng, extreme)).collect();
            let Codes::I16(g) = index_pack::codec::encode(CodecKind::I16, &rows) else {
                unreachable!()
            };
            let Codes::F16(h) = index_pack::codec::encode(CodecKind::F16, &rows) else {
                unreachable!()
            };
            let base = (rng.next() % 300_000_000) as i32;
            assert_eq!(
                avx.i16_group(&g[0], &q, base),
                Scalar.i16_group(&g[0], &q, base)
            );
            let (a, b) = (
                avx.f16_group(&h[0], &q, base),
                Scalar.f16_group(&h[0], &q, base),
            );
            for r in 0..8 {
                // FMA order is the same; allow one unit of the final conversion.
                assert!((a[r] - b[r]).abs() <= 1, "{a:?} vs {b:?}");
            }
            // Boxes from two random rows, so lo <= hi lane by lane.
            let mut bx = Bounds {
                lo: [0; 16],
                hi: [0; 16],
            };
            for l in 0..LANES {
                bx.lo[l] = rows[0][l].min(rows[1][l]);
                bx.hi[l] = rows[0][l].max(rows[1][l]);
            }
            assert_eq!(
                avx.box_lower_bound(&bx, &q),
                Scalar.box_lower_bound(&bx, &q)
            );
            let mut bg = BoundsGroup {
                lo: [[0; 16]; PAIRS],
                hi: [[0; 16]; PAIRS],
            };
            for p in 0..PAIRS {
                for r in 0..8 {
                    for j in 0..2 {
                        let (x, y) = (rows[r][2 * p + j], rows[(r + 1) % 8][2 * p + j]);
                        bg.lo[p][2 * r + j] = x.min(y);
                        bg.hi[p][2 * r + j] = x.max(y);
                    }
                }
            }
            assert_eq!(
                avx.boxes_lower_bound(&bg, &q),
                Scalar.boxes_lower_bound(&bg, &q)
            );
        }
    }

    #[test]
    fn scalar_kernels_are_plain_distances() {
        let mut rng = Lcg(3);
        for _ in 0..2_000 {
            let ql = lanes(&mut rng, false);
            let q = Prepared::new(ql);
            let rows: Vec<[i16; LANES]> = (0..8).map(|_| lanes(&mut rng, false)).collect();
            let Codes::I16(g) = index_pack::codec::encode(CodecKind::I16, &rows) else {
                unreachable!()
            };
            let d = Scalar.i16_group(&g[0], &q, 7);
            for r in 0..8 {
                let want: i32 = (0..LANES)
                    .map(|l| (rows[r][l] as i32 - ql[l] as i32).pow(2))
                    .sum();
                assert_eq!(d[r], want + 7);
            }
            let _: &I16Group = &g[0];
            let _: Option<&F16Group> = None;
        }
    }

    use index_pack::format::Codes;
}
