//! Scalar codecs: how the row lanes of 8 rows become one SIMD group, and back.
//!
//! Both codecs take the exact fixed-point lanes (value x 10000 as i16) and store them in a
//! group layout its search kernel reads with aligned loads. `decode_lane` returns the value the
//! codec actually holds, in fixed point, so tests and tie-breaking see what the kernels see.

use crate::format::{
    ArchivedCodes, CodecKind, Codes, F16Group, I16Group, GROUP_ROWS, LANES, PAIRS, SCALE,
};
use half::f16;

/// The lanes of one row in fixed point (lane 11 is padding and always 0).
pub type RowLanes = [i16; LANES];

/// Encodes rows (a multiple of [`GROUP_ROWS`] of them) with the chosen codec.
pub fn encode(kind: CodecKind, rows: &[RowLanes]) -> Codes {
    assert_eq!(rows.len() % GROUP_ROWS, 0, "rows must fill whole groups");
    match kind {
        CodecKind::I16 => Codes::I16(rows.chunks_exact(GROUP_ROWS).map(i16_group).collect()),
        CodecKind::F16 => Codes::F16(rows.chunks_exact(GROUP_ROWS).map(f16_group).collect()),
    }
}

fn i16_group(rows: &[RowLanes]) -> I16Group {
    let mut g = I16Group {
        pairs: [[0; 16]; PAIRS],
    };
    for (r, row) in rows.iter().enumerate() {
        for p in 0..PAIRS {
            g.pairs[p][2 * r] = row[2 * p];
            g.pairs[p][2 * r + 1] = row[2 * p + 1];
        }
    }
    g
}

fn f16_group(rows: &[RowLanes]) -> F16Group {
    let mut g = F16Group {
        lanes: [[0; GROUP_ROWS]; LANES],
    };
    for (r, row) in rows.iter().enumerate() {
        for (l, &v) in row.iter().enumerate() {
            g.lanes[l][r] = f16::from_f64(v as f64 / SCALE).to_bits();
        }
    }
    g
}

/// The value the codec stores for lane `lane` of slot `slot`, as a real number.
pub fn decode_lane(codes: &ArchivedCodes, slot: usize, lane: usize) -> f64 {
    let (g, r) = (slot / GROUP_ROWS, slot % GROUP_ROWS);
    match codes {
        ArchivedCodes::I16(groups) => {
            groups[g].pairs[lane / 2][2 * r + lane % 2].to_native() as f64 / SCALE
        }
        ArchivedCodes::F16(groups) => f16::from_bits(groups[g].lanes[lane][r].to_native()).to_f64(),
    }
}
