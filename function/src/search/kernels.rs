//! The four inner loops of the search, each in a portable scalar form and an AVX2 form.
//!
//! All distances are fixed-point squared L2 (units of 1e-8) in `i32`. Every value of an index
//! lies in [-10000, 10000] (dims other than 5 and 6 in [0, 10000]): the packer writes only
//! such values and `index_pack::format::verify_deep` refuses an artifact with any other (the
//! build script runs it on every embedded artifact, the prefault and huge-page residencies on
//! the bytes served); the query comes from the same domain (the vectorizer clamps). So
//! per-lane differences fit an `i16`, and a whole distance, key constant included, is at most
//! `MAX_DISTANCE` = 2.0e9 < `i32::MAX`: no kernel can overflow, which is why the AVX2 code may
//! use wrapping 16-bit subtraction and `madd`.
//!
//! The AVX2 forms are compiled with `#[target_feature]` and are only reachable through
//! [`Avx2::new`], which checks the CPU at run time. A test compares every kernel with its scalar
//! twin on many random and extreme inputs.

use index_pack::format::{Bounds, BoundsGroup, F16Group, I16Group, GROUP_ROWS, LANES, PAIRS};

/// A query prepared for the kernels.
#[derive(Clone, Debug)]
#[repr(C, align(32))]
pub struct Prepared {
    /// Row lanes, lanes past [`LANES`] zero (matches [`Bounds`]).
    pub lanes: [i16; 16],
    /// `pairs[p]` = lanes (2p, 2p+1) repeated for 8 rows (matches [`I16Group`]).
    pub pairs: [[i16; 16]; PAIRS],
    /// Row lanes as real numbers (for the fp16 codec).
    pub real: [f32; 16],
}

impl Prepared {
    pub fn new(lanes: [i16; LANES]) -> Prepared {
        let mut p = Prepared {
            lanes: [0; 16],
            pairs: [[0; 16]; PAIRS],
            real: [0.0; 16],
        };
        p.lanes[..LANES].copy_from_slice(&lanes);
        for (pi, pair) in p.pairs.iter_mut().enumerate() {
            for r in 0..GROUP_ROWS {
                pair[2 * r] = lanes[2 * pi];
                pair[2 * r + 1] = lanes[2 * pi + 1];
            }
        }
        for l in 0..LANES {
            p.real[l] = (lanes[l] as f64 / index_pack::format::SCALE) as f32;
        }
        p
    }
}

/// The kernels the search needs. Implementations must agree exactly (the fp16 one up to the
/// documented rounding of its final conversion).
pub trait Kernels: Copy {
    /// Squared distances from the query to the 8 rows of an i16 group, plus `base`.
    fn i16_group(self, g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS];
    /// Squared distances to the 8 rows of an fp16 group in fixed point (rounded), plus `base`.
    fn f16_group(self, g: &F16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS];
    /// Lower bound of the squared distance from the query to any point of a box.
    fn box_lower_bound(self, b: &Bounds, q: &Prepared) -> i32;
    /// Lower bounds for the 8 boxes of a group.
    fn boxes_lower_bound(self, g: &BoundsGroup, q: &Prepared) -> [i32; GROUP_ROWS];
    /// Bit r set when `d[r] <= t`.
    fn at_most(self, d: &[i32; GROUP_ROWS], t: i32) -> u32 {
        d.iter()
            .enumerate()
            .map(|(r, &x)| ((x <= t) as u32) << r)
            .sum()
    }
}

/// Portable kernels.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

/// Squared distance scale of the fp16 kernel: real squared distance x 1e8 = fixed point.
const F16_TO_FIXED: f32 = 1e8;

impl Kernels for Scalar {
    #[inline(always)]
    fn i16_group(self, g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
        let mut out = [base; GROUP_ROWS];
        for (p, pair) in g.pairs.iter().enumerate() {
            for (r, o) in out.iter_mut().enumerate() {
                let a = pair[2 * r] as i32 - q.pairs[p][2 * r] as i32;
                let b = pair[2 * r + 1] as i32 - q.pairs[p][2 * r + 1] as i32;
                *o += a * a + b * b;
            }
        }
        out
    }

    #[inline(always)]
    fn f16_group(self, g: &F16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
        let mut acc = [0f32; GROUP_ROWS];
        for (l, lane) in g.lanes.iter().enumerate() {
            for (r, a) in acc.iter_mut().enumerate() {
                let d = half::f16::from_bits(lane[r]).to_f32() - q.real[l];
                *a = d.mul_add(d, *a);
            }
        }
        acc.map(|a| base + (a * F16_TO_FIXED) as i32)
    }

    #[inline(always)]
    fn box_lower_bound(self, b: &Bounds, q: &Prepared) -> i32 {
        let mut lb = 0;
        for l in 0..16 {
            let x = q.lanes[l] as i32;
            let e = (b.lo[l] as i32 - x).max(x - b.hi[l] as i32).max(0);
            lb += e * e;
        }
        lb
    }

    #[inline(always)]
    fn boxes_lower_bound(self, g: &BoundsGroup, q: &Prepared) -> [i32; GROUP_ROWS] {
        let mut out = [0; GROUP_ROWS];
        for p in 0..PAIRS {
            for (r, o) in out.iter_mut().enumerate() {
                for j in 0..2 {
                    let x = q.pairs[p][2 * r + j] as i32;
                    let e = (g.lo[p][2 * r + j] as i32 - x)
                        .max(x - g.hi[p][2 * r + j] as i32)
                        .max(0);
                    *o += e * e;
                }
            }
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
pub use avx2::Avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// AVX2 + FMA + F16C kernels (Haswell and later). Only [`Avx2::new`] makes one, after
    /// checking the CPU, which is what makes calling the `#[target_feature]` functions sound.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx2(());

    impl Avx2 {
        /// The AVX2 kernels, if this CPU has AVX2, FMA and F16C.
        pub fn new() -> Option<Avx2> {
            let ok = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            ok.then_some(Avx2(()))
        }
    }

    impl Kernels for Avx2 {
        #[inline(always)]
        fn i16_group(self, g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
            // SAFETY: an Avx2 value exists only when the CPU has the features.
            unsafe { i16_group(g, q, base) }
        }
        #[inline(always)]
        fn f16_group(self, g: &F16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
            // SAFETY: as above.
            unsafe { f16_group(g, q, base) }
        }
        #[inline(always)]
        fn box_lower_bound(self, b: &Bounds, q: &Prepared) -> i32 {
            // SAFETY: as above.
            unsafe { box_lower_bound(b, q) }
        }
        #[inline(always)]
        fn boxes_lower_bound(self, g: &BoundsGroup, q: &Prepared) -> [i32; GROUP_ROWS] {
            // SAFETY: as above.
            unsafe { boxes_lower_bound(g, q) }
        }
        #[inline(always)]
        fn at_most(self, d: &[i32; GROUP_ROWS], t: i32) -> u32 {
            // SAFETY: as above.
            unsafe { at_most(d, t) }
        }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn at_most(d: &[i32; GROUP_ROWS], t: i32) -> u32 {
        let v = _mm256_loadu_si256(d.as_ptr().cast());
        let gt = _mm256_cmpgt_epi32(v, _mm256_set1_epi32(t));
        !(_mm256_movemask_ps(_mm256_castsi256_ps(gt)) as u32) & 0xff
    }

    // All loads below are aligned: every operand type is `#[repr(C, align(32))]` and each
    // loaded row of 16 i16 / 8 i32 / 8 f32 starts at a multiple of 32 bytes within it (the
    // 16-byte f16 rows use unaligned 128-bit loads).

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn i16_group(g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_set1_epi32(base);
        for p in 0..PAIRS {
            let v = _mm256_load_si256(g.pairs[p].as_ptr().cast());
            let w = _mm256_load_si256(q.pairs[p].as_ptr().cast());
            // |v - w| <= 20000 fits i16; madd gives d0^2 + d1^2 per row as i32.
            let d = _mm256_sub_epi16(v, w);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, d));
        }
        let mut out = [0i32; GROUP_ROWS];
        _mm256_storeu_si256(out.as_mut_ptr().cast(), acc);
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn f16_group(g: &F16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_setzero_ps();
        for l in 0..LANES {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(g.lanes[l].as_ptr().cast()));
            let d = _mm256_sub_ps(v, _mm256_set1_ps(q.real[l]));
            acc = _mm256_fmadd_ps(d, d, acc);
        }
        // Truncation toward zero, like the scalar `as i32`.
        let fixed = _mm256_cvttps_epi32(_mm256_mul_ps(acc, _mm256_set1_ps(F16_TO_FIXED)));
        let mut out = [0i32; GROUP_ROWS];
        _mm256_storeu_si256(
            out.as_mut_ptr().cast(),
            _mm256_add_epi32(fixed, _mm256_set1_epi32(base)),
        );
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn box_lower_bound(b: &Bounds, q: &Prepared) -> i32 {
        let lo = _mm256_load_si256(b.lo.as_ptr().cast());
        let hi = _mm256_load_si256(b.hi.as_ptr().cast());
        let x = _mm256_load_si256(q.lanes.as_ptr().cast());
        let e = _mm256_max_epi16(
            _mm256_max_epi16(_mm256_sub_epi16(lo, x), _mm256_sub_epi16(x, hi)),
            _mm256_setzero_si256(),
        );
        let s = _mm256_madd_epi16(e, e);
        hsum(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn boxes_lower_bound(g: &BoundsGroup, q: &Prepared) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_setzero_si256();
        for p in 0..PAIRS {
            let lo = _mm256_load_si256(g.lo[p].as_ptr().cast());
            let hi = _mm256_load_si256(g.hi[p].as_ptr().cast());
            let x = _mm256_load_si256(q.pairs[p].as_ptr().cast());
            let e = _mm256_max_epi16(
                _mm256_max_epi16(_mm256_sub_epi16(lo, x), _mm256_sub_epi16(x, hi)),
                _mm256_setzero_si256(),
            );
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(e, e));
        }
        let mut out = [0i32; GROUP_ROWS];
        _mm256_storeu_si256(out.as_mut_ptr().cast(), acc);
        out
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn hsum(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }
}
