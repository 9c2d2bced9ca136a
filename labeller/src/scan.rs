//! The brute force: every reference, in file order, at its IEEE double squared distance.
//!
//! [`nearest`] is SPEC.md's labeller written out: `sum += d * d` over the 14 components in
//! order, and a reference enters the 5 kept ones only when strictly closer (`<`) than one of
//! them, in front of the first such one. Among equal distances the earlier reference therefore
//! stays ahead, and the answer is the first 5 references ordered by (distance, file index).
//!
//! [`nearest_many`] gives the same answers for many queries at once, fast enough for CI (the
//! tests compare the two). It changes only which work is skipped, never an answer:
//!
//! - **Batches and threads.** Queries are taken a batch at a time per pass over the
//!   references; each thread scans a contiguous chunk of the file with the same rule, and the
//!   chunks' kept references are then offered, chunk by chunk and in file order, to the first
//!   chunk's list through the same rule. That equals one scan of the whole file: a reference
//!   its own chunk did not keep has k references of that chunk ahead of it in (distance, index)
//!   order, so it could not have been kept by the whole scan either, and offering the others in
//!   index order is exactly what the whole scan does with them.
//! - **Skipping references that cannot enter.** Rounding to nearest is monotone, so adding a
//!   non-negative double never lowers a sum, and by induction the f64 sum of the 14 squared
//!   differences in order is >= the f64 sum, in the same order, of any subset of them (replace
//!   the left-out terms by 0: each partial sum is >= its counterpart). A reference enters only
//!   if its distance is `<` the k-th kept distance, so one whose partial sum is already >= that
//!   distance can be skipped without changing anything. Queries are grouped by their binary
//!   components (9, 10, 11), so the partial sum of those three terms, one number per group and
//!   reference, skips a reference for a whole group when it exceeds every kept distance of the
//!   group; inside a group, 4 queries at a time (one AVX2 register of doubles) skip the rest of
//!   the sum when the first 5 terms already exceed all 4 kept distances. Every distance that is
//!   compared is the full sum, computed in the same order as [`distance`]: SIMD lanes round
//!   each operation like scalar code, and nothing is fused.

use crate::references::References;
use crate::{Query, DIMS};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Neighbours that vote.
pub const K: usize = 5;

/// Largest k [`nearest_many`] keeps (k > 5 shows whether a tie crosses 5th place).
pub const MAX_K: usize = 8;

/// One of the nearest references.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    /// Position of the reference in the file (0-based).
    pub index: u32,
    pub fraud: bool,
    /// The labeller's squared distance.
    pub distance: f64,
}

/// The labeller's squared distance: `sum += d * d` over the components in order.
pub fn distance(q: &Query, r: &[f64; DIMS]) -> f64 {
    let mut sum = 0.0;
    for i in 0..DIMS {
        let d = q[i] - r[i];
        sum += d * d;
    }
    sum
}

/// The kept references of one query, nearest first; unused slots have distance +inf.
#[derive(Clone, Copy, Debug)]
struct Kept {
    distance: [f64; MAX_K],
    index: [u32; MAX_K],
}

impl Kept {
    const EMPTY: Kept = Kept {
        distance: [f64::INFINITY; MAX_K],
        index: [u32::MAX; MAX_K],
    };

    /// The labeller's rule: the candidate goes in front of the first kept reference it is
    /// strictly closer than, if any, and the last one falls off.
    #[inline]
    fn offer(&mut self, k: usize, d: f64, index: u32) {
        for j in 0..k {
            if d < self.distance[j] {
                for m in (j + 1..k).rev() {
                    self.distance[m] = self.distance[m - 1];
                    self.index[m] = self.index[m - 1];
                }
                self.distance[j] = d;
                self.index[j] = index;
                return;
            }
        }
    }

    fn hits(&self, k: usize, refs: &References) -> Vec<Hit> {
        (0..k)
            .filter(|&j| self.index[j] != u32::MAX)
            .map(|j| Hit {
                index: self.index[j],
                fraud: refs.fraud[self.index[j] as usize],
                distance: self.distance[j],
            })
            .collect()
    }
}

/// The labeller for one query: the 5 nearest references, nearest first.
pub fn nearest(refs: &References, q: &Query) -> Vec<Hit> {
    let mut kept = Kept::EMPTY;
    for (i, r) in refs.rows.iter().enumerate() {
        kept.offer(K, distance(q, r), i as u32);
    }
    kept.hits(K, refs)
}

/// Queries per pass over the references.
const BATCH: usize = 128;

/// The `k` nearest references of every query (`k` <= [`MAX_K`]), nearest first: the same as
/// [`nearest`] for k = 5, computed on `threads` threads. `progress` is called with the number
/// of queries finished so far (from any thread).
pub fn nearest_many(
    refs: &References,
    queries: &[Query],
    k: usize,
    threads: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<Hit>> {
    assert!((1..=MAX_K).contains(&k), "k must be in 1..={MAX_K}");
    // Queries sorted by their binary dimensions, so each batch holds few groups.
    let mut order: Vec<usize> = (0..queries.len()).collect();
    order.sort_by_key(|&i| binary_key(&queries[i]));
    let sorted: Vec<Query> = order.iter().map(|&i| queries[i]).collect();

    if refs.is_empty() {
        return vec![Vec::new(); queries.len()];
    }
    let chunk = refs.len().div_ceil(threads.max(1));
    let chunks = refs.len().div_ceil(chunk);
    let done = AtomicUsize::new(0);
    let per_chunk: Vec<Vec<Kept>> = std::thread::scope(|s| {
        let workers: Vec<_> = refs
            .rows
            .chunks(chunk)
            .enumerate()
            .map(|(c, rows)| {
                let (sorted, done) = (&sorted, &done);
                s.spawn(move || {
                    let mut kept = vec![Kept::EMPTY; sorted.len()];
                    for (b, batch) in sorted.chunks(BATCH).enumerate() {
                        let out = &mut kept[b * BATCH..b * BATCH + batch.len()];
                        scan_rows(rows, c * chunk, batch, k, out);
                        // A batch is finished when every chunk has scanned it.
                        let n = done.fetch_add(batch.len(), Ordering::Relaxed) + batch.len();
                        progress(n / chunks);
                    }
                    kept
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("scan thread"))
            .collect()
    });

    let mut out = vec![Vec::new(); queries.len()];
    for (pos, &qi) in order.iter().enumerate() {
        let mut kept = per_chunk[0][pos];
        for later in &per_chunk[1..] {
            let mut offered: Vec<(u32, f64)> = (0..k)
                .filter(|&j| later[pos].index[j] != u32::MAX)
                .map(|j| (later[pos].index[j], later[pos].distance[j]))
                .collect();
            offered.sort_by_key(|&(i, _)| i);
            for (i, d) in offered {
                kept.offer(k, d, i);
            }
        }
        out[qi] = kept.hits(k, refs);
    }
    out
}

/// Components 9, 10, 11 (is_online, card_present, unknown_merchant), bit for bit.
fn binary_key(q: &Query) -> [u64; 3] {
    [q[9].to_bits(), q[10].to_bits(), q[11].to_bits()]
}

/// Rows between refreshes of the per-group bound (a stale one is larger, so still safe).
const REFRESH: usize = 512;

/// SIMD lanes of the distance loop (4 doubles: one AVX2 register).
const LANES: usize = 4;

/// Scans `rows` (file positions from `first`) for one batch of queries sorted by binary key,
/// with the kernels this CPU runs fastest; the arithmetic is IEEE double either way (SIMD
/// lanes round each operation exactly like scalar code, and nothing is fused).
fn scan_rows(rows: &[[f64; DIMS]], first: usize, batch: &[Query], k: usize, kept: &mut [Kept]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { scan_rows_avx2(rows, first, batch, k, kept) };
    }
    scan_rows_body(rows, first, batch, k, kept)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_rows_avx2(
    rows: &[[f64; DIMS]],
    first: usize,
    batch: &[Query],
    k: usize,
    kept: &mut [Kept],
) {
    scan_rows_body(rows, first, batch, k, kept)
}

#[inline(always)]
fn scan_rows_body(
    rows: &[[f64; DIMS]],
    first: usize,
    batch: &[Query],
    k: usize,
    kept: &mut [Kept],
) {
    let n = batch.len();
    assert!(n <= BATCH && kept.len() == n);
    // Components one query after the other (padded to whole lanes), so one group's distances
    // are computed LANES queries at a time.
    let mut cols = vec![[0.0; BATCH + LANES]; DIMS];
    for (i, q) in batch.iter().enumerate() {
        for j in 0..DIMS {
            cols[j][i] = q[j];
        }
    }
    // Padded with -inf: lanes past the batch never keep a block of lanes alive.
    let mut bound = [f64::NEG_INFINITY; BATCH + LANES];
    for (b, t) in bound.iter_mut().zip(kept.iter()) {
        *b = t.distance[k - 1];
    }
    let mut dist = [0.0; BATCH + LANES];
    // Runs of queries with the same binary components, and the largest bound of each.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for (i, q) in batch.iter().enumerate() {
        match groups.last_mut() {
            Some((start, end)) if binary_key(&batch[*start]) == binary_key(q) => *end = i + 1,
            _ => groups.push((i, i + 1)),
        }
    }
    let mut group_bound = vec![f64::INFINITY; groups.len()];
    for (row, r) in rows.iter().enumerate() {
        if row % REFRESH == 0 {
            for (g, &(a, b)) in groups.iter().enumerate() {
                group_bound[g] = bound[a..b].iter().copied().fold(0.0, f64::max);
            }
        }
        for (g, &(a, b)) in groups.iter().enumerate() {
            // The group's queries share components 9..12, so they share these three terms.
            let t: [f64; 3] = std::array::from_fn(|i| {
                let d = batch[a][9 + i] - r[9 + i];
                d * d
            });
            // ((0 + t9) + t10) + t11 is a partial sum of every query's distance.
            if (0.0 + t[0]) + t[1] + t[2] >= group_bound[g] {
                continue;
            }
            // The whole distance, `sum += d * d` in dimension order, for LANES queries at a
            // time (lanes past the group are computed and ignored).
            for l0 in (a - a % LANES..b).step_by(LANES) {
                let mut s = [0.0; LANES];
                let add = |j: usize, s: &mut [f64; LANES]| {
                    let c: &[f64; LANES] = cols[j][l0..l0 + LANES].try_into().unwrap();
                    for (x, &q) in s.iter_mut().zip(c) {
                        let d = q - r[j];
                        *x += d * d;
                    }
                };
                for j in 0..5 {
                    add(j, &mut s);
                }
                // A partial sum already >= the bound rules the reference out for that query;
                // when it does for all LANES queries, the rest is not computed.
                let b: &[f64; LANES] = bound[l0..l0 + LANES].try_into().unwrap();
                if s.iter().zip(b).all(|(x, b)| x >= b) {
                    dist[l0..l0 + LANES].fill(f64::INFINITY);
                    continue;
                }
                for j in 5..9 {
                    add(j, &mut s);
                }
                for term in t {
                    for x in &mut s {
                        *x += term;
                    }
                }
                add(12, &mut s);
                add(13, &mut s);
                dist[l0..l0 + LANES].copy_from_slice(&s);
            }
            let enters = dist[a..b]
                .iter()
                .zip(&bound[a..b])
                .fold(false, |any, (d, b)| any | (d < b));
            if enters {
                for i in a..b {
                    if dist[i] < bound[i] {
                        kept[i].offer(k, dist[i], (first + row) as u32);
                        bound[i] = kept[i].distance[k - 1];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (tests only).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
        /// A 4-decimal vector; `coarse` draws from 5 values per dimension (many exact ties).
        fn vector(&mut self, coarse: bool) -> Query {
            let mut v = [0.0; DIMS];
            let none = self.below(5) == 0;
            for (i, x) in v.iter_mut().enumerate() {
                *x = if (9..12).contains(&i) {
                    self.below(2) as f64
                } else if none && (i == 5 || i == 6) {
                    -1.0
                } else if coarse {
                    self.below(5) as f64 * 2_500.0 / 10_000.0
                } else {
                    self.below(10_001) as f64 / 10_000.0
                };
            }
            v
        }
    }

    fn refs(n: usize, seed: u64, coarse: bool) -> References {
        let mut rng = Lcg(seed);
        let rows: Vec<Query> = (0..n).map(|_| rng.vector(coarse)).collect();
        let fraud = (0..n).map(|_| rng.below(3) == 0).collect();
        References::from_rows(rows, fraud)
    }

    #[test]
    fn literal_rule_keeps_the_earlier_of_equal_distances() {
        let v = [0.5; DIMS];
        let mut far = v;
        far[0] = 0.9;
        // Index 0 is farther; 1..=7 are copies of the query (distance 0).
        let mut rows = vec![far];
        rows.extend(std::iter::repeat_n(v, 7));
        let r = References::from_rows(rows, vec![false; 8]);
        let got: Vec<u32> = nearest(&r, &v).iter().map(|h| h.index).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn many_equals_one_by_one() {
        for (seed, coarse, threads) in [(1, false, 1), (2, true, 2), (3, true, 3), (4, false, 7)] {
            let r = refs(2_000, seed, coarse);
            let mut rng = Lcg(seed + 50);
            let mut queries: Vec<Query> = (0..300).map(|_| rng.vector(coarse)).collect();
            // Copies of references: distance 0 and ties with their duplicates.
            queries.extend(r.rows.iter().step_by(40).copied());
            let many = nearest_many(&r, &queries, K, threads, &|_| {});
            for (q, got) in queries.iter().zip(&many) {
                assert_eq!(got, &nearest(&r, q), "query {q:?}");
            }
            // k = 8: its first 5 are the 5 nearest.
            let eight = nearest_many(&r, &queries, 8, threads, &|_| {});
            for (a, b) in eight.iter().zip(&many) {
                assert_eq!(&a[..K], &b[..]);
            }
        }
    }

    #[test]
    fn fewer_references_than_k() {
        let r = refs(3, 9, false);
        let q = [0.0; DIMS];
        assert_eq!(nearest(&r, &q).len(), 3);
        assert_eq!(nearest_many(&r, &[q], K, 2, &|_| {})[0], nearest(&r, &q));
    }

    #[test]
    fn distance_is_summed_in_dimension_order() {
        // 0.1 + 0.2 + 0.3 in this order is not 0.6 in f64: the order is the labeller's.
        let mut q = [0.0; DIMS];
        let r = [0.0; DIMS];
        q[0] = 0.1f64.sqrt();
        q[1] = 0.2f64.sqrt();
        q[2] = 0.3f64.sqrt();
        let mut want = 0.0;
        for x in [q[0] * q[0], q[1] * q[1], q[2] * q[2]] {
            want += x;
        }
        assert_eq!(distance(&q, &r), want);
    }
}
