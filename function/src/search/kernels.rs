//! The four inner loops of the search, each in a portable scalar form and an AVX2 form, each in
//! two kinds: plain (`CLAMP = false`) and clamped (`CLAMP = true`, the default).
//!
//! All distances are fixed-point squared L2 (units of 1e-8) in `i32`. Every value the packer
//! writes lies in its lane's domain (dims 5 and 6 in [-10000, 10000], the other row lanes in
//! [0, 10000], the padding lane 0) and the query is clamped into the same domain
//! ([`Prepared::new`]), so a per-lane difference is at most its lane's span (20000) and a whole
//! distance, key constant included, at most `MAX_DISTANCE` = 2.0e9 < `i32::MAX`.
//!
//! - **Plain** kernels rely on that: a 16-bit difference squared and summed in pairs
//!   (`vpmaddwd`). The search takes them only over an index whose values were all read and
//!   checked (`index_pack::format::Verified`: `verify_deep` in this process, or the build
//!   script's over the bytes compiled into the binary), so they cost nothing for safety.
//! - **Clamped** kernels rely on nothing: an artifact that is only opened (a lazily mapped
//!   file, `index_pack::format::open` reads no row) could hold any `i16`, so every kernel
//!   saturates each per-lane difference and clamps its magnitude to the lane's span before
//!   squaring (fp16: clamps the value into its lane's range). On values of the domain this
//!   changes nothing, and on any other bytes no distance can overflow: a damaged index gives
//!   wrong distances, never undefined or wrapped ones. It costs two instructions per pair of
//!   lanes on every row scanned and box bounded (docs/results/2026-12-07-vote-path.md).
//!
//! `avx2_matches_scalar` compares every AVX2 kernel with its scalar twin: the clamped ones on
//! in-domain, extreme and arbitrary `i16`, the plain ones in the domain.
//!
//! The AVX2 forms are compiled with `#[target_feature]` and are only reachable through
//! [`Avx2::new`], which checks the CPU at run time.

use index_pack::format::{
    Bounds, BoundsGroup, F16Group, I16Group, GROUP_ROWS, LANES, LANE_MAX, LANE_MIN, PAIRS, SCALE,
};

/// The largest per-lane difference between two values of the domain: 20000 for the lanes of
/// dims 5 and 6 (the -1 sentinel), 10000 for the others, 0 for the padding lane. The clamped
/// kernels clamp a difference's magnitude to it, in the layouts the kernels read.
#[derive(Debug)]
#[repr(C, align(32))]
struct Spans {
    /// By lane, lanes past [`LANES`] 0 (matches [`Bounds`]).
    lanes: [u16; 16],
    /// Pair-interleaved for 8 rows (matches [`I16Group`] and [`BoundsGroup`]).
    pairs: [[u16; 16]; PAIRS],
    /// The lanes' ranges as real numbers, for the fp16 codec (matches [`F16Group`]'s lanes).
    real_lo: [f32; LANES],
    real_hi: [f32; LANES],
}

static SPANS: Spans = {
    let mut s = Spans {
        lanes: [0; 16],
        pairs: [[0; 16]; PAIRS],
        real_lo: [0.0; LANES],
        real_hi: [0.0; LANES],
    };
    let mut l = 0;
    while l < LANES {
        let span = (LANE_MAX[l] as i32 - LANE_MIN[l] as i32) as u16;
        s.lanes[l] = span;
        let mut r = 0;
        while r < GROUP_ROWS {
            s.pairs[l / 2][2 * r + l % 2] = span;
            r += 1;
        }
        s.real_lo[l] = LANE_MIN[l] as f32 / SCALE as f32;
        s.real_hi[l] = LANE_MAX[l] as f32 / SCALE as f32;
        l += 1;
    }
    s
};

/// `|a - b|` with the difference saturated to `i16`, then clamped to `span`: the exact
/// difference for values of the domain, at most `span` for any others.
#[inline(always)]
fn clamped_difference(a: i16, b: i16, span: u16) -> i32 {
    a.saturating_sub(b).unsigned_abs().min(span) as i32
}

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
    /// The query's row lanes, each clamped into its lane's domain.
    pub fn new(lanes: [i16; LANES]) -> Prepared {
        let lanes: [i16; LANES] = std::array::from_fn(|l| lanes[l].clamp(LANE_MIN[l], LANE_MAX[l]));
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
            p.real[l] = (lanes[l] as f64 / SCALE) as f32;
        }
        p
    }
}

/// The kernels the search needs. Implementations must agree exactly (the fp16 one up to the
/// documented rounding of its final conversion), on any stored values.
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

/// Portable kernels: clamped (`Scalar`) or plain (`Scalar::<false>`, verified indexes only).
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar<const CLAMP: bool = true>;

/// Squared distance scale of the fp16 kernel: real squared distance x 1e8 = fixed point.
const F16_TO_FIXED: f32 = 1e8;

/// How far `x` lies outside `lo..=hi` (0 inside), saturated, clamped to `span`.
#[inline(always)]
fn clamped_gap(lo: i16, hi: i16, x: i16, span: u16) -> i32 {
    let gap = lo.saturating_sub(x).max(x.saturating_sub(hi)).max(0);
    (gap as u16).min(span) as i32
}

impl<const CLAMP: bool> Kernels for Scalar<CLAMP> {
    #[inline(always)]
    fn i16_group(self, g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
        let mut out = [base; GROUP_ROWS];
        for (p, pair) in g.pairs.iter().enumerate() {
            for (r, o) in out.iter_mut().enumerate() {
                let (i, j) = (2 * r, 2 * r + 1);
                let (a, b) = if CLAMP {
                    (
                        clamped_difference(pair[i], q.pairs[p][i], SPANS.pairs[p][i]),
                        clamped_difference(pair[j], q.pairs[p][j], SPANS.pairs[p][j]),
                    )
                } else {
                    (
                        pair[i] as i32 - q.pairs[p][i] as i32,
                        pair[j] as i32 - q.pairs[p][j] as i32,
                    )
                };
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
                let v = half::f16::from_bits(lane[r]).to_f32();
                // `max` first: a NaN becomes the low end, as the AVX2 `max_ps` does.
                let v = if CLAMP {
                    v.max(SPANS.real_lo[l]).min(SPANS.real_hi[l])
                } else {
                    v
                };
                let d = v - q.real[l];
                *a = d.mul_add(d, *a);
            }
        }
        acc.map(|a| base + (a * F16_TO_FIXED) as i32)
    }

    #[inline(always)]
    fn box_lower_bound(self, b: &Bounds, q: &Prepared) -> i32 {
        let mut lb = 0;
        for l in 0..16 {
            let e = gap::<CLAMP>(b.lo[l], b.hi[l], q.lanes[l], SPANS.lanes[l]);
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
                    let i = 2 * r + j;
                    let e = gap::<CLAMP>(g.lo[p][i], g.hi[p][i], q.pairs[p][i], SPANS.pairs[p][i]);
                    *o += e * e;
                }
            }
        }
        out
    }
}

/// How far `x` lies outside `lo..=hi` (0 inside); clamped: saturated, then at most `span`.
#[inline(always)]
fn gap<const CLAMP: bool>(lo: i16, hi: i16, x: i16, span: u16) -> i32 {
    if CLAMP {
        return clamped_gap(lo, hi, x, span);
    }
    let x = x as i32;
    (lo as i32 - x).max(x - hi as i32).max(0)
}

#[cfg(target_arch = "x86_64")]
pub use avx2::Avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// AVX2 + FMA + F16C kernels (Haswell and later), clamped (`Avx2`) or plain
    /// (`Avx2<false>`, from [`Avx2::plain`]). Only [`Avx2::new`] makes one, after checking the
    /// CPU, which is what makes calling the `#[target_feature]` functions sound.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx2<const CLAMP: bool = true>(());

    impl Avx2 {
        /// The AVX2 kernels, if this CPU has AVX2, FMA and F16C.
        pub fn new() -> Option<Avx2> {
            let ok = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            ok.then_some(Avx2(()))
        }

        /// The plain kernels, for verified indexes (the CPU was checked already).
        pub fn plain(self) -> Avx2<false> {
            Avx2(())
        }
    }

    impl<const CLAMP: bool> Kernels for Avx2<CLAMP> {
        #[inline(always)]
        fn i16_group(self, g: &I16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
            // SAFETY: an Avx2 value exists only when the CPU has the features.
            unsafe { i16_group::<CLAMP>(g, q, base) }
        }
        #[inline(always)]
        fn f16_group(self, g: &F16Group, q: &Prepared, base: i32) -> [i32; GROUP_ROWS] {
            // SAFETY: as above.
            unsafe { f16_group::<CLAMP>(g, q, base) }
        }
        #[inline(always)]
        fn box_lower_bound(self, b: &Bounds, q: &Prepared) -> i32 {
            // SAFETY: as above.
            unsafe { box_lower_bound::<CLAMP>(b, q) }
        }
        #[inline(always)]
        fn boxes_lower_bound(self, g: &BoundsGroup, q: &Prepared) -> [i32; GROUP_ROWS] {
            // SAFETY: as above.
            unsafe { boxes_lower_bound::<CLAMP>(g, q) }
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

    // All loads below are aligned: every operand type (and `Spans`) is `#[repr(C, align(32))]`
    // and each loaded row of 16 i16 / 8 i32 / 8 f32 starts at a multiple of 32 bytes within it
    // (the 16-byte f16 rows use unaligned 128-bit loads).

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn i16_group<const CLAMP: bool>(
        g: &I16Group,
        q: &Prepared,
        base: i32,
    ) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_set1_epi32(base);
        for p in 0..PAIRS {
            let v = _mm256_load_si256(g.pairs[p].as_ptr().cast());
            let w = _mm256_load_si256(q.pairs[p].as_ptr().cast());
            let d = if CLAMP {
                // |v - w| saturated, then at most the lane's span (<= 20000).
                let span = _mm256_load_si256(SPANS.pairs[p].as_ptr().cast());
                _mm256_min_epu16(_mm256_abs_epi16(_mm256_subs_epi16(v, w)), span)
            } else {
                // In the domain |v - w| <= 20000 fits an i16.
                _mm256_sub_epi16(v, w)
            };
            // d0^2 + d1^2 per row as i32, without overflow.
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, d));
        }
        let mut out = [0i32; GROUP_ROWS];
        _mm256_storeu_si256(out.as_mut_ptr().cast(), acc);
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn f16_group<const CLAMP: bool>(
        g: &F16Group,
        q: &Prepared,
        base: i32,
    ) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_setzero_ps();
        for l in 0..LANES {
            let mut v = _mm256_cvtph_ps(_mm_loadu_si128(g.lanes[l].as_ptr().cast()));
            if CLAMP {
                // Into the lane's range; `max_ps` returns its second operand for a NaN.
                v = _mm256_max_ps(v, _mm256_set1_ps(SPANS.real_lo[l]));
                v = _mm256_min_ps(v, _mm256_set1_ps(SPANS.real_hi[l]));
            }
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
    unsafe fn box_lower_bound<const CLAMP: bool>(b: &Bounds, q: &Prepared) -> i32 {
        let lo = _mm256_load_si256(b.lo.as_ptr().cast());
        let hi = _mm256_load_si256(b.hi.as_ptr().cast());
        let x = _mm256_load_si256(q.lanes.as_ptr().cast());
        let e = gap::<CLAMP>(lo, hi, x, SPANS.lanes.as_ptr());
        let s = _mm256_madd_epi16(e, e);
        hsum(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn boxes_lower_bound<const CLAMP: bool>(
        g: &BoundsGroup,
        q: &Prepared,
    ) -> [i32; GROUP_ROWS] {
        let mut acc = _mm256_setzero_si256();
        for p in 0..PAIRS {
            let lo = _mm256_load_si256(g.lo[p].as_ptr().cast());
            let hi = _mm256_load_si256(g.hi[p].as_ptr().cast());
            let x = _mm256_load_si256(q.pairs[p].as_ptr().cast());
            let e = gap::<CLAMP>(lo, hi, x, SPANS.pairs[p].as_ptr());
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(e, e));
        }
        let mut out = [0i32; GROUP_ROWS];
        _mm256_storeu_si256(out.as_mut_ptr().cast(), acc);
        out
    }

    /// How far `x` lies outside `[lo, hi]` lane by lane (0 inside); clamped: saturated, then
    /// at most the 16 spans at `span` (32-byte aligned, read only when clamping).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn gap<const CLAMP: bool>(
        lo: __m256i,
        hi: __m256i,
        x: __m256i,
        span: *const u16,
    ) -> __m256i {
        if !CLAMP {
            return _mm256_max_epi16(
                _mm256_max_epi16(_mm256_sub_epi16(lo, x), _mm256_sub_epi16(x, hi)),
                _mm256_setzero_si256(),
            );
        }
        let e = _mm256_max_epi16(
            _mm256_max_epi16(_mm256_subs_epi16(lo, x), _mm256_subs_epi16(x, hi)),
            _mm256_setzero_si256(),
        );
        _mm256_min_epu16(e, _mm256_load_si256(span.cast()))
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
