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
    let mut e = Encoder::with_capacity(kind, rows.len());
    rows.iter().for_each(|r| e.push(r));
    e.finish()
}

/// Encodes rows one at a time, a group as soon as it is full, so a layout never holds its rows
/// twice (as lanes and as codes).
pub struct Encoder {
    codes: Codes,
    /// The rows of the group being filled.
    pending: Vec<RowLanes>,
}

impl Encoder {
    /// An encoder with room for `rows` rows (rounded up to whole groups).
    pub fn with_capacity(kind: CodecKind, rows: usize) -> Encoder {
        let groups = rows.div_ceil(GROUP_ROWS);
        Encoder {
            codes: match kind {
                CodecKind::I16 => Codes::I16(Vec::with_capacity(groups)),
                CodecKind::F16 => Codes::F16(Vec::with_capacity(groups)),
            },
            pending: Vec::with_capacity(GROUP_ROWS),
        }
    }

    pub fn push(&mut self, row: &RowLanes) {
        self.pending.push(*row);
        if self.pending.len() == GROUP_ROWS {
            match &mut self.codes {
                Codes::I16(g) => g.push(i16_group(&self.pending)),
                Codes::F16(g) => g.push(f16_group(&self.pending)),
            }
            self.pending.clear();
        }
    }

    /// The codes; the rows pushed must fill whole groups.
    pub fn finish(self) -> Codes {
        assert!(self.pending.is_empty(), "rows must fill whole groups");
        self.codes
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
