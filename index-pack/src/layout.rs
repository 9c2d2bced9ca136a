//! From references, trained centroids and an assignment to an [`Index`]: lists, blocks, bounds.
//!
//! This part is pure and deterministic (no faiss, no threads), so tests build small indexes in
//! memory with any centroids they like, and the packer's output depends only on its inputs.
//!
//! - Lists: references grouped by (cell, key), ordered by cell then key; inside a list the rows
//!   keep ascending original index until the k-d split reorders them.
//! - Blocks: a list is split recursively on its widest row lane (ties: lowest lane; order inside
//!   a side: value, then original index) at a multiple of [`GROUP_ROWS`] near the middle, until a
//!   piece has at most `block_rows` rows. Small boxes are what make block pruning work.

use crate::codec::{self, RowLanes};
use crate::format::{
    Block, Bounds, BoundsGroup, CodecKind, Header, Index, List, DIMS, FORMAT_VERSION, GROUP_ROWS,
    KEYS, KEY_DIMS, LANES, PAD_ID, PAIRS, ROW_DIMS, SCALE, SUPER_BLOCKS,
};

/// Reference vectors in fixed point, with their labels, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct References {
    pub vectors: Vec<[i16; DIMS]>,
    pub fraud: Vec<bool>,
    /// SHA-256 of the source they were read from (zero for synthetic data).
    pub source_sha256: [u8; 32],
}

/// Why a reference vector cannot go into an index.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum VectorError {
    #[error("dimension {dim} is {value}, outside [{lo}, {hi}]")]
    OutOfRange {
        dim: usize,
        value: f64,
        lo: f64,
        hi: f64,
    },
    #[error("dimension {dim} is {value}, which has more than 4 decimals")]
    NotOnGrid { dim: usize, value: f64 },
    #[error("dimension {dim} is {value}, but it is binary (0 or 1)")]
    NotBinary { dim: usize, value: f64 },
}

/// Converts one reference vector to fixed point, enforcing the domain the search relies on:
/// dims 5 and 6 in [-1, 1], all others in [0, 1], at most 4 decimals, binary dims 0 or 1.
pub fn to_fixed(v: &[f64; DIMS]) -> Result<[i16; DIMS], VectorError> {
    let mut out = [0i16; DIMS];
    for (dim, &value) in v.iter().enumerate() {
        let lo = if dim == 5 || dim == 6 { -1.0 } else { 0.0 };
        if !(lo..=1.0).contains(&value) {
            return Err(VectorError::OutOfRange {
                dim,
                value,
                lo,
                hi: 1.0,
            });
        }
        let scaled = value * SCALE;
        let k = scaled.round();
        if (scaled - k).abs() > 1e-6 {
            return Err(VectorError::NotOnGrid { dim, value });
        }
        if KEY_DIMS.contains(&dim) && k != 0.0 && k != SCALE {
            return Err(VectorError::NotBinary { dim, value });
        }
        out[dim] = k as i16;
    }
    Ok(out)
}

/// The key of a vector: bit i set when KEY_DIMS[i] is 1.
pub fn key_of(v: &[i16; DIMS]) -> u32 {
    KEY_DIMS
        .iter()
        .enumerate()
        .map(|(i, &d)| ((v[d] != 0) as u32) << i)
        .sum()
}

/// The stored lanes of a vector.
pub fn lanes_of(v: &[i16; DIMS]) -> RowLanes {
    let mut out = [0i16; LANES];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        out[l] = v[d];
    }
    out
}

/// Parameters of the layout, recorded in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct LayoutParams {
    pub codec: CodecKind,
    pub block_rows: u32,
    pub kmeans_iters: u32,
    pub kmeans_seed: u32,
}

/// An index without k-means, for tests and fuzzing (no faiss): about `cells` centroids taken
/// as every n-th reference, each reference assigned to its exact nearest centroid. Lists come
/// out of very different sizes, which exercises the search more than k-means cells would.
pub fn build_sampled(refs: &References, cells: usize, params: &LayoutParams) -> Index {
    let step = (refs.vectors.len() / cells.max(1)).max(1);
    let centroids: Vec<[f32; DIMS]> = refs
        .vectors
        .iter()
        .step_by(step)
        .map(|v| v.map(|k| (k as f64 / SCALE) as f32))
        .collect();
    let assignment: Vec<u32> = refs
        .vectors
        .iter()
        .map(|v| {
            let d = |c: &[f32; DIMS]| -> f32 {
                (0..DIMS).map(|i| (v[i] as f32 / 1e4 - c[i]).powi(2)).sum()
            };
            (0..centroids.len())
                .min_by(|&a, &b| d(&centroids[a]).total_cmp(&d(&centroids[b])))
                .unwrap() as u32
        })
        .collect();
    build(refs, &centroids, &assignment, params)
}

/// Builds the index. `assignment[i]` is the cell of reference i, `< centroids.len()`.
pub fn build(
    refs: &References,
    centroids: &[[f32; DIMS]],
    assignment: &[u32],
    params: &LayoutParams,
) -> Index {
    assert_eq!(refs.vectors.len(), refs.fraud.len());
    assert_eq!(refs.vectors.len(), assignment.len());
    assert!(
        params.block_rows as usize >= GROUP_ROWS
            && (params.block_rows as usize).is_multiple_of(GROUP_ROWS)
    );
    let n = refs.vectors.len();
    assert!(n < (1 << 31), "ids hold the original index in 31 bits");

    // Lists: sort reference indices by (key, cell, index). Lists of one key are contiguous, so
    // the search can skip a whole key group whose key distance alone exceeds its threshold.
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&i| (key_of(&refs.vectors[i as usize]), assignment[i as usize], i));

    let mut lists = Vec::new();
    let mut list_keys = Vec::new();
    let mut list_boxes = Vec::new();
    let mut list_centroid_lanes = Vec::new();
    let mut blocks = Vec::new();
    let mut block_bounds = Vec::new();
    let mut super_bounds = Vec::new();
    let mut ids: Vec<u32> = Vec::with_capacity(n + n / 8);
    let mut rows: Vec<RowLanes> = Vec::with_capacity(n + n / 8);

    let mut start = 0;
    while start < n {
        let first = order[start] as usize;
        let (cell, key) = (assignment[first], key_of(&refs.vectors[first]));
        let mut end = start;
        while end < n && {
            let j = order[end] as usize;
            assignment[j] == cell && key_of(&refs.vectors[j]) == key
        } {
            end += 1;
        }
        let members = &mut order[start..end];
        let mut pieces = Vec::new();
        split(
            members,
            &refs.vectors,
            params.block_rows as usize,
            &mut pieces,
        );

        let first_block = blocks.len() as u32;
        let mut list_box = empty_box();
        let mut boxes = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let first_slot = ids.len();
            let mut b = empty_box();
            for &i in &members[piece.clone()] {
                let lanes = lanes_of(&refs.vectors[i as usize]);
                grow(&mut b, &lanes);
                rows.push(lanes);
                ids.push((i << 1) | refs.fraud[i as usize] as u32);
            }
            grow_box(&mut list_box, &b);
            blocks.push(Block {
                first_slot: first_slot as u32,
                n_slots: piece.len() as u32,
            });
            boxes.push(b);
        }
        // Pad the list to a whole group.
        while !ids.len().is_multiple_of(GROUP_ROWS) {
            rows.push([0; LANES]);
            ids.push(PAD_ID);
        }

        let first_super = super_bounds.len() as u32;
        for run in boxes.chunks(SUPER_BLOCKS) {
            let mut b = empty_box();
            run.iter().for_each(|r| grow_box(&mut b, r));
            super_bounds.push(b);
            block_bounds.push(bounds_group(run));
        }
        lists.push(List {
            cell,
            first_block,
            n_blocks: blocks.len() as u32 - first_block,
            first_super,
        });
        list_keys.push(key);
        list_boxes.push(list_box);
        let c = &centroids[cell as usize];
        let mut c_lanes = [0i16; LANES];
        for (l, &d) in ROW_DIMS.iter().enumerate() {
            c_lanes[l] = ((c[d] as f64) * SCALE).round().clamp(-SCALE, SCALE) as i16;
        }
        list_centroid_lanes.push(c_lanes);
        start = end;
    }

    // key_lists[k]..key_lists[k + 1] are the lists of key k.
    let mut key_lists = vec![0u32; KEYS + 1];
    for &k in &list_keys {
        key_lists[k as usize + 1] += 1;
    }
    for k in 0..KEYS {
        key_lists[k + 1] += key_lists[k];
    }
    // Pad the per-list tables to whole groups of 8 lists.
    while list_keys.len() % GROUP_ROWS != 0 {
        list_keys.push(0);
        list_boxes.push(Bounds {
            lo: [0; 16],
            hi: [0; 16],
        });
        list_centroid_lanes.push([0; LANES]);
    }
    // The centroids use the i16 row layout, so the list pass reuses the row kernel.
    let crate::format::Codes::I16(list_centroids) =
        codec::encode(CodecKind::I16, &list_centroid_lanes)
    else {
        unreachable!("the i16 codec yields i16 groups")
    };
    let list_bounds = list_boxes
        .chunks_exact(GROUP_ROWS)
        .map(bounds_group)
        .collect();

    let n_fraud = refs.fraud.iter().filter(|&&f| f).count() as u32;
    Index {
        header: Header {
            format_version: FORMAT_VERSION,
            codec: params.codec,
            n_refs: n as u32,
            n_fraud,
            source_sha256: refs.source_sha256,
            cells: centroids.len() as u32,
            kmeans_iters: params.kmeans_iters,
            kmeans_seed: params.kmeans_seed,
            block_rows: params.block_rows,
            packer: concat!("index-pack ", env!("CARGO_PKG_VERSION")).to_string(),
        },
        centroids: centroids.to_vec(),
        lists,
        list_keys,
        key_lists,
        list_centroids,
        list_bounds,
        blocks,
        block_bounds,
        super_bounds,
        ids,
        codes: codec::encode(params.codec, &rows),
    }
}

/// Splits `members` (reordered in place) into pieces of at most `max` rows, every piece but the
/// last a multiple of GROUP_ROWS long; pushes piece ranges in order.
fn split(
    members: &mut [u32],
    vectors: &[[i16; DIMS]],
    max: usize,
    out: &mut Vec<std::ops::Range<usize>>,
) {
    fn go(
        m: &mut [u32],
        base: usize,
        v: &[[i16; DIMS]],
        max: usize,
        out: &mut Vec<std::ops::Range<usize>>,
    ) {
        if m.len() <= max {
            out.push(base..base + m.len());
            return;
        }
        let mut widest = (0usize, -1i32);
        for &d in ROW_DIMS.iter() {
            let (lo, hi) = m.iter().fold((i16::MAX, i16::MIN), |(lo, hi), &i| {
                let x = v[i as usize][d];
                (lo.min(x), hi.max(x))
            });
            let spread = hi as i32 - lo as i32;
            if spread > widest.1 {
                widest = (d, spread);
            }
        }
        let d = widest.0;
        m.sort_unstable_by_key(|&i| (v[i as usize][d], i));
        let half = (m.len() / 2 / GROUP_ROWS * GROUP_ROWS).max(GROUP_ROWS);
        let (left, right) = m.split_at_mut(half);
        go(left, base, v, max, out);
        go(right, base + half, v, max, out);
    }
    go(members, 0, vectors, max, out);
}

fn empty_box() -> Bounds {
    let mut b = Bounds {
        lo: [0; 16],
        hi: [0; 16],
    };
    b.lo[..LANES].fill(i16::MAX);
    b.hi[..LANES].fill(i16::MIN);
    b.lo[LANES - 1] = 0; // the padding lane is 0 everywhere
    b.hi[LANES - 1] = 0;
    b
}

fn grow(b: &mut Bounds, lanes: &RowLanes) {
    for l in 0..LANES {
        b.lo[l] = b.lo[l].min(lanes[l]);
        b.hi[l] = b.hi[l].max(lanes[l]);
    }
}

fn grow_box(b: &mut Bounds, other: &Bounds) {
    for l in 0..LANES {
        b.lo[l] = b.lo[l].min(other.lo[l]);
        b.hi[l] = b.hi[l].max(other.hi[l]);
    }
}

fn bounds_group(boxes: &[Bounds]) -> BoundsGroup {
    let mut g = BoundsGroup {
        lo: [[0; 16]; PAIRS],
        hi: [[0; 16]; PAIRS],
    };
    for (r, b) in boxes.iter().enumerate() {
        for p in 0..PAIRS {
            for j in 0..2 {
                g.lo[p][2 * r + j] = b.lo[2 * p + j];
                g.hi[p][2 * r + j] = b.hi[2 * p + j];
            }
        }
    }
    g
}
