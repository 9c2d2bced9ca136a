//! Each reference's cell: its nearest centroid, in exact integer arithmetic, on every core.
//!
//! The centroids faiss trains are rounded to the data's fixed-point grid and clamped to its
//! domain ([`Coarse::new`]); the index stores them so. Then every distance between a row and a
//! centroid is an integer, and the nearest one (ties: the lowest cell) is the same whatever the
//! CPU, the order of the sums or the instruction set: the packer's output does not depend on
//! where it ran.
//!
//! Within a partition the key dimensions are constant, so a cell's distance to a row is
//! `||x||^2 + k_c - 2 x.c` over the 11 row lanes, where `k_c` folds in the key dimensions and
//! `||c||^2` ([`Coarse::offsets`], once per partition). The row's norm is the same for every
//! cell, so the nearest cell minimises `k_c - 2 x.c`. In the domain that value lies in
//! `[-14e8, 20e8]` (see [`Coarse::new`]), so it fits an `i32`; wrapping sums give it exactly.
//! The AVX2 kernel takes 8 cells at a time with `vpmaddwd` (the row's lane pairs against
//! `-2 c`, as `i16`); the portable one is the same sum, cell by cell. A test compares both with
//! a plain `i64` distance on many draws.
//!
//! **Cost.** At 100M references and 1,024 cells the AVX2 kernel assigns on two threads in a
//! few tens of seconds, where faiss took 264 s (its `f32` conversion of every reference and
//! its search over them; docs/SCALING.md, "Packing").

use crate::codec::RowLanes;
use crate::format::{DIMS, KEY_DIMS, LANES, PAIRS, ROW_DIMS, SCALE};
use crate::layout::{Partitioned, Row};

/// Cells per kernel step (one AVX2 register of `i32`).
const STEP: usize = 8;

/// The coarse quantizer on the grid, laid out for the kernels.
#[derive(Clone, Debug)]
pub struct Coarse {
    cells: usize,
    /// The centroids in fixed point, clamped to the domain.
    fixed: Vec<[i32; DIMS]>,
    /// `-2 c` by step of 8 cells and lane pair: `[step * PAIRS + p]` holds, for cell `8 step + j`,
    /// lanes `2p` and `2p + 1` at `2j` and `2j + 1` (zero beyond the last cell).
    minus_2c: Vec<[i16; 2 * STEP]>,
}

impl Coarse {
    /// Rounds `centroids` to the fixed-point grid and clamps them to the references' domain
    /// (dimensions 5 and 6 in [-1, 1], the others in [0, 1]). A mean of points in the domain
    /// lies in it, so the clamp only undoes float error; it is what bounds the distances: a
    /// row's value and a centroid's differ by at most 2e4 in dimensions 5 and 6 and 1e4 in
    /// the 12 others, so `||x - c||^2 <= 8e8 + 12e8 < 2^31`, and `k_c - 2 x.c = ||x - c||^2 -
    /// ||x||^2 >= -14e8`.
    pub fn new(centroids: &[[f32; DIMS]]) -> Coarse {
        assert!(
            !centroids.is_empty() && centroids.len() <= 1 << 16,
            "1 to 65,536 cells"
        );
        let fixed: Vec<[i32; DIMS]> = centroids
            .iter()
            .map(|c| {
                std::array::from_fn(|d| {
                    let lo = if d == 5 || d == 6 { -SCALE } else { 0.0 };
                    let v = (c[d] as f64 * SCALE).round();
                    // NaN (never from faiss on finite data) clamps to the low end.
                    (if v >= lo { v.min(SCALE) } else { lo }) as i32
                })
            })
            .collect();
        let steps = fixed.len().div_ceil(STEP);
        let mut minus_2c = vec![[0i16; 2 * STEP]; steps * PAIRS];
        for (cell, c) in fixed.iter().enumerate() {
            let (s, j) = (cell / STEP, cell % STEP);
            for (l, &d) in ROW_DIMS.iter().enumerate() {
                minus_2c[s * PAIRS + l / 2][2 * j + l % 2] = (-2 * c[d]) as i16;
            }
        }
        Coarse {
            cells: fixed.len(),
            fixed,
            minus_2c,
        }
    }

    pub fn cells(&self) -> usize {
        self.cells
    }

    /// The centroids as stored in the index: on the grid, as real numbers.
    pub fn centroids(&self) -> Vec<[f32; DIMS]> {
        self.fixed
            .iter()
            .map(|c| c.map(|k| (k as f64 / SCALE) as f32))
            .collect()
    }

    /// `k_c = ||c||^2 + sum over key dimensions of (x_d - c_d)^2 - sum of c_d^2` for the rows of
    /// partition `p` (key `p >> 1`), by cell; the cells past the last get `i32::MAX`, never
    /// chosen.
    pub fn offsets(&self, p: usize) -> Vec<i32> {
        let mut out = vec![i32::MAX; self.cells.next_multiple_of(STEP)];
        for (o, c) in out.iter_mut().zip(&self.fixed) {
            let rows: i64 = ROW_DIMS.iter().map(|&d| (c[d] as i64).pow(2)).sum();
            let keys: i64 = KEY_DIMS
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    let x = (((p >> 1) >> i) & 1) as i64 * SCALE as i64;
                    (x - c[d] as i64).pow(2)
                })
                .sum();
            *o = (rows + keys) as i32;
        }
        out
    }

    /// The nearest cell to a row of the partition whose [`Coarse::offsets`] are `offsets`.
    pub fn nearest(&self, offsets: &[i32], lanes: &RowLanes) -> u16 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above).
            return unsafe { self.nearest_avx2(offsets, lanes) };
        }
        self.nearest_portable(offsets, lanes)
    }

    /// The portable kernel: the same integer sums, cell by cell.
    pub fn nearest_portable(&self, offsets: &[i32], lanes: &RowLanes) -> u16 {
        let (mut best, mut best_cell) = (i32::MAX, 0usize);
        for cell in 0..self.cells {
            let (s, j) = (cell / STEP, cell % STEP);
            let mut v = offsets[cell];
            for p in 0..PAIRS {
                let m = &self.minus_2c[s * PAIRS + p];
                let pair = lanes[2 * p] as i32 * m[2 * j] as i32
                    + lanes[2 * p + 1] as i32 * m[2 * j + 1] as i32;
                v = v.wrapping_add(pair);
            }
            if v < best {
                (best, best_cell) = (v, cell);
            }
        }
        best_cell as u16
    }

    /// The AVX2 kernel: 8 cells per step, `vpmaddwd` of the row's lane pairs against `-2 c`.
    ///
    /// # Safety
    /// The CPU must support AVX2. `offsets` must come from [`Coarse::offsets`] (a whole number
    /// of steps long); the loads are unaligned, so no alignment is assumed.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub unsafe fn nearest_avx2(&self, offsets: &[i32], lanes: &RowLanes) -> u16 {
        use std::arch::x86_64::*;
        let steps = self.cells.div_ceil(STEP);
        assert!(offsets.len() >= steps * STEP && self.minus_2c.len() >= steps * PAIRS);
        // The row's lane pairs, each broadcast to all 8 cells.
        let pair = |p: usize| {
            let bits = (lanes[2 * p] as u16 as u32) | ((lanes[2 * p + 1] as u16 as u32) << 16);
            _mm256_set1_epi32(bits as i32)
        };
        let x: [__m256i; PAIRS] = std::array::from_fn(pair);
        let (mut best, mut best_cell) = (_mm256_set1_epi32(i32::MAX), _mm256_setzero_si256());
        let mut cell = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let eight = _mm256_set1_epi32(STEP as i32);
        for s in 0..steps {
            // SAFETY: s * STEP + 8 <= offsets.len() and (s + 1) * PAIRS <= minus_2c.len()
            // (asserted above); each `[i16; 16]` is 32 bytes.
            let mut v = _mm256_loadu_si256(offsets.as_ptr().add(s * STEP) as *const __m256i);
            for (p, xp) in x.iter().enumerate() {
                let m = self.minus_2c.as_ptr().add(s * PAIRS + p) as *const __m256i;
                v = _mm256_add_epi32(v, _mm256_madd_epi16(*xp, _mm256_loadu_si256(m)));
            }
            // Strictly smaller only, so each lane keeps its lowest cell among equals.
            let smaller = _mm256_cmpgt_epi32(best, v);
            best = _mm256_blendv_epi8(best, v, smaller);
            best_cell = _mm256_blendv_epi8(best_cell, cell, smaller);
            cell = _mm256_add_epi32(cell, eight);
        }
        let (mut values, mut cells) = ([0i32; STEP], [0i32; STEP]);
        _mm256_storeu_si256(values.as_mut_ptr() as *mut __m256i, best);
        _mm256_storeu_si256(cells.as_mut_ptr() as *mut __m256i, best_cell);
        let j = (0..STEP)
            .min_by_key(|&j| (values[j], cells[j]))
            .expect("8 lanes");
        cells[j] as u16
    }
}

/// Rows handed to a thread at a time.
const CHUNK: usize = 1 << 16;

/// Every row's cell, by partition (`cells[p][i]` for row i of partition p), on up to two
/// threads.
pub fn assign(parts: &Partitioned, coarse: &Coarse) -> Vec<Vec<u16>> {
    let mut out: Vec<Vec<u16>> = parts.parts.iter().map(|r| vec![0; r.len()]).collect();
    let offsets: Vec<Vec<i32>> = (0..parts.parts.len()).map(|p| coarse.offsets(p)).collect();
    let work: Vec<(usize, &[Row], &mut [u16])> = parts
        .parts
        .iter()
        .zip(out.iter_mut())
        .enumerate()
        .flat_map(|(p, (rows, cells))| {
            rows.chunks(CHUNK)
                .zip(cells.chunks_mut(CHUNK))
                .map(move |(r, c)| (p, r, c))
        })
        .collect();
    let queue = std::sync::Mutex::new(work.into_iter());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(2);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some((p, rows, cells)) =
                    queue.lock().expect("an assigning thread panicked").next()
                else {
                    return;
                };
                for (row, cell) in rows.iter().zip(cells) {
                    *cell = coarse.nearest(&offsets[p], &row.lanes);
                }
            });
        }
    });
    out
}

/// The padding lane of every row is 0 (the kernels sum all 12 lanes).
const _: () = assert!(LANES == 2 * PAIRS);

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so the draws are the same on every run.
    struct Draw(u64);
    impl Draw {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// A value of dimension `d` in fixed point, often at the domain's ends.
        fn value(&mut self, d: usize) -> i32 {
            let lo = if d == 5 || d == 6 { -10_000 } else { 0 };
            match self.next() % 8 {
                0 => lo,
                1 => 10_000,
                _ => lo + (self.next() % (10_001 - lo) as u64) as i32,
            }
        }
    }

    /// The plain distance over all dimensions, in i64.
    fn distance(v: &[i32; DIMS], c: &[i32; DIMS]) -> i64 {
        (0..DIMS).map(|d| (v[d] as i64 - c[d] as i64).pow(2)).sum()
    }

    #[test]
    fn both_kernels_pick_the_exact_nearest_cell_lowest_on_ties() {
        let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
        for round in 0..60 {
            // Few cells (ties likely, partial last step) to many.
            let cells = [1, 3, 8, 13, 64, 200][round % 6];
            let mut centroids: Vec<[f32; DIMS]> = (0..cells)
                .map(|_| std::array::from_fn(|d| draw.value(d) as f32 / 1e4))
                .collect();
            if cells > 2 {
                centroids[cells - 1] = centroids[1]; // an exact tie
            }
            let coarse = Coarse::new(&centroids);
            for _ in 0..200 {
                let p = (draw.next() % 16) as usize;
                let mut v: [i32; DIMS] = std::array::from_fn(|d| draw.value(d));
                for (i, &d) in KEY_DIMS.iter().enumerate() {
                    v[d] = (((p >> 1) >> i) & 1) as i32 * 10_000;
                }
                let lanes: RowLanes =
                    std::array::from_fn(|l| ROW_DIMS.get(l).map_or(0, |&d| v[d] as i16));
                let offsets = coarse.offsets(p);
                let want = (0..cells)
                    .min_by_key(|&c| (distance(&v, &coarse.fixed[c]), c))
                    .unwrap() as u16;
                assert_eq!(coarse.nearest_portable(&offsets, &lanes), want, "{v:?}");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 checked just above.
                    let got = unsafe { coarse.nearest_avx2(&offsets, &lanes) };
                    assert_eq!(got, want, "{v:?}");
                }
            }
        }
    }

    #[test]
    fn centroids_are_rounded_to_the_grid_and_clamped_to_the_domain() {
        let mut c = [0.5f32; DIMS];
        (c[0], c[5], c[6], c[9]) = (1.000_001, -1.2, 0.123_46, -0.000_01);
        let coarse = Coarse::new(&[c]);
        let stored = coarse.centroids()[0];
        assert_eq!(coarse.fixed[0][0], 10_000);
        assert_eq!(coarse.fixed[0][5], -10_000);
        assert_eq!(coarse.fixed[0][6], 1_235);
        assert_eq!(coarse.fixed[0][9], 0);
        assert_eq!(stored[6], 0.1235);
    }
}
