//! From references, trained centroids and an assignment to an [`Index`]: lists, blocks, bounds.
//!
//! This part is pure and deterministic (no faiss, no threads), so tests build small indexes in
//! memory with any centroids they like, and the packer's output depends only on its inputs.
//!
//! - Partitions: references grouped by (key, label), lists by k-means cell inside them; inside
//!   a list the rows keep ascending original index until the k-d splits reorder them.
//! - Each partition is one tree of fan-out 8. Its upper nodes group lists: three halvings by
//!   list count on the widest lane of the lists' row means. Below a list, its rows: three
//!   halvings on the widest row lane (ties: lowest lane; order inside a side: value, then
//!   original index) at a multiple of [`GROUP_ROWS`] near the middle, until a piece has at most
//!   `block_rows` rows; such a piece is a block (a leaf). Small boxes are what make pruning work.
//! - Slots follow the depth-first walk, so a subtree's rows are contiguous; a node's child
//!   nodes get consecutive indices.

use crate::codec::{self, RowLanes};
use crate::format::{
    Block, Bounds, BoundsGroup, ChildRef, CodecKind, Header, Index, List, Part, Partition,
    BLOCK_BIT, DIMS, FANOUT, FORMAT_VERSION, GROUP_ROWS, KEY_DIMS, LANES, NO_CHILD, PAD_ID, PAIRS,
    ROW_DIMS, SCALE,
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
    /// By dimension: how much a row lane's spread counts when a k-d split picks its lane (and
    /// when lists are grouped by their means). See [`DEFAULT_SPLIT_WEIGHTS`].
    pub split_weights: [u32; DIMS],
    /// The position of the first reference in the whole set ([`Header::first_position`]).
    pub first_position: u32,
    /// What part of a set the index holds.
    pub part: Part,
}

impl Default for LayoutParams {
    fn default() -> Self {
        LayoutParams {
            codec: CodecKind::I16,
            block_rows: 32,
            kmeans_iters: 0,
            kmeans_seed: 0,
            split_weights: DEFAULT_SPLIT_WEIGHTS,
            first_position: 0,
            part: Part::Whole,
        }
    }
}

/// The split weights the packer uses: 1 for every dimension but minutes_since_last_tx
/// (dimension 5), 16. In the contest's data a last transaction is 1 minute to 10 years old
/// (its generator's `--randomize-payload-dates`), so queries sit at 1.0 in that dimension (or at
/// the -1 sentinel), while every reference lies in [0, 0.4993] or at -1: each query's distance
/// to a reference grows steeply with 0.5 - that value, so boxes that are narrow in it prune
/// most. Measured on the public set (docs/results/2026-12-01-search.md): weight 16 cuts the
/// blocks a mixed vote opens from 53 to 33 on average; 4 changes nothing, 64 gives 41. The
/// weights only change the layout, never an answer.
pub const DEFAULT_SPLIT_WEIGHTS: [u32; DIMS] = [1, 1, 1, 1, 1, 16, 1, 1, 1, 1, 1, 1, 1, 1];

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
    let first = params.first_position;
    assert!(
        first as u64 + n as u64 <= 1 << 31,
        "ids hold the position in 31 bits"
    );

    // Partitions by (key, label), lists by cell inside them, file order inside a list (until
    // the k-d splits reorder it).
    let part_of = |i: usize| (key_of(&refs.vectors[i]), refs.fraud[i]);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&i| (part_of(i as usize), assignment[i as usize], i));

    let mut b = Builder {
        refs,
        block_rows: params.block_rows as usize,
        split_weights: params.split_weights,
        node_children: Vec::new(),
        node_bounds: Vec::new(),
        blocks: Vec::new(),
        lists: Vec::new(),
        first_position: first,
        ids: Vec::with_capacity(n + n / 8),
        rows: Vec::with_capacity(n + n / 8),
    };
    let mut partitions = Vec::new();
    let mut start = 0;
    while start < n {
        let (key, fraud) = part_of(order[start] as usize);
        let end = start + order[start..].partition_point(|&i| part_of(i as usize) == (key, fraud));
        let mut lists = Vec::new();
        let mut at = start;
        while at < end {
            let cell = assignment[order[at] as usize];
            let len = order[at..end].partition_point(|&i| assignment[i as usize] == cell);
            lists.push(ListItem {
                cell,
                center: center(&order[at..at + len], &refs.vectors),
                rows: at..at + len,
            });
            at += len;
        }
        let first_slot = b.ids.len() as u32;
        let partition = partitions.len() as u32;
        let (root, bounds) = b.lists_child(&mut order, &mut lists, partition);
        partitions.push(Partition {
            key,
            fraud,
            root,
            first_slot,
            end_slot: b.ids.len() as u32,
            bounds,
        });
        start = end;
    }

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
            split_weights: params.split_weights,
            packer: concat!("index-pack ", env!("CARGO_PKG_VERSION")).to_string(),
            first_position: first,
            part: params.part.clone(),
        },
        centroids: centroids.to_vec(),
        partitions,
        lists: b.lists,
        node_children: b.node_children,
        node_bounds: b.node_bounds,
        blocks: b.blocks,
        codes: codec::encode(params.codec, &b.rows),
        ids: b.ids,
    }
}

/// One inverted list while its partition's tree is built: its cell, the mean of its rows (the
/// upper nodes group lists by it) and its rows, a range of the sorted reference order.
struct ListItem {
    cell: u32,
    center: [i32; LANES],
    rows: std::ops::Range<usize>,
}

/// The tables a tree is written into, in the order the depth-first walk emits them.
struct Builder<'a> {
    refs: &'a References,
    block_rows: usize,
    split_weights: [u32; DIMS],
    /// Added to a reference's index in `refs` to give its position.
    first_position: u32,
    node_children: Vec<[ChildRef; FANOUT]>,
    node_bounds: Vec<BoundsGroup>,
    blocks: Vec<Block>,
    lists: Vec<List>,
    ids: Vec<u32>,
    rows: Vec<RowLanes>,
}

impl Builder<'_> {
    /// A node with no children yet; its index is final (siblings get consecutive indices).
    fn reserve_node(&mut self) -> u32 {
        self.node_children.push([NO_CHILD; FANOUT]);
        self.node_bounds.push(bounds_group(&[]));
        (self.node_children.len() - 1) as u32
    }

    fn set_node(&mut self, node: u32, children: [ChildRef; FANOUT], boxes: &[Bounds]) -> Bounds {
        self.node_children[node as usize] = children;
        self.node_bounds[node as usize] = bounds_group(boxes);
        union(boxes)
    }

    /// The subtree over `lists` (one list: that list's own subtree).
    fn lists_child(
        &mut self,
        order: &mut [u32],
        lists: &mut [ListItem],
        partition: u32,
    ) -> (ChildRef, Bounds) {
        if let [list] = lists {
            return self.list_child(order, list, partition);
        }
        let node = self.reserve_node();
        let bounds = self.fill_lists_node(node, order, lists, partition);
        (node, bounds)
    }

    /// Up to [`FANOUT`] groups of nearby lists (halvings on the widest spread of their centers,
    /// balanced by rows), each a child.
    fn fill_lists_node(
        &mut self,
        node: u32,
        order: &mut [u32],
        lists: &mut [ListItem],
        partition: u32,
    ) -> Bounds {
        let parts = FANOUT.min(lists.len());
        let weights = self.split_weights;
        let groups = split_into(lists.len(), parts, &mut |r, left, parts| {
            let part = &mut lists[r];
            let lane = widest(part.iter().map(|l| l.center), &weights);
            part.sort_by_key(|l| (l.center[lane], l.cell));
            // The first `left` of `parts` shares of the rows, at least one list each side.
            let total: usize = part.iter().map(|l| l.rows.len()).sum();
            let want = total * left / parts;
            let mut acc = 0;
            let cut = part
                .iter()
                .position(|l| {
                    acc += l.rows.len();
                    acc >= want
                })
                .map_or(1, |i| i + 1);
            cut.clamp(left.min(part.len() - 1), part.len() - (parts - left))
        });
        let mut children = [NO_CHILD; FANOUT];
        for (c, g) in groups.iter().enumerate() {
            if g.len() > 1 {
                children[c] = self.reserve_node();
            }
        }
        let mut boxes = Vec::with_capacity(groups.len());
        for (c, g) in groups.into_iter().enumerate() {
            let (child, b) = if children[c] == NO_CHILD {
                self.list_child(order, &mut lists[g.start], partition)
            } else {
                let b = self.fill_lists_node(children[c], order, &mut lists[g], partition);
                (children[c], b)
            };
            children[c] = child;
            boxes.push(b);
        }
        self.set_node(node, children, &boxes)
    }

    /// One list's subtree, its rows padded to a whole group after it.
    fn list_child(
        &mut self,
        order: &mut [u32],
        list: &mut ListItem,
        partition: u32,
    ) -> (ChildRef, Bounds) {
        let first_slot = self.ids.len() as u32;
        let members = &mut order[list.rows.clone()];
        let (root, bounds) = if members.len() <= self.block_rows {
            self.block(members)
        } else {
            let node = self.reserve_node();
            (node, self.fill_rows_node(node, members))
        };
        while !self.ids.len().is_multiple_of(GROUP_ROWS) {
            self.rows.push([0; LANES]);
            self.ids.push(PAD_ID);
        }
        self.lists.push(List {
            cell: list.cell,
            partition,
            root,
            first_slot,
            end_slot: self.ids.len() as u32,
        });
        (root, bounds)
    }

    /// A node over a list's rows: as few children as keep the subtree at its least height (a
    /// node of height h holds at most 8^h blocks), cut by k-d halvings on the widest lane into
    /// pieces of even block counts, each piece a whole number of groups but the last.
    fn fill_rows_node(&mut self, node: u32, members: &mut [u32]) -> Bounds {
        let vectors = &self.refs.vectors;
        let weights = self.split_weights;
        let br = self.block_rows;
        let blocks = members.len().div_ceil(br);
        let mut per_child = 1;
        while per_child * FANOUT < blocks {
            per_child *= FANOUT;
        }
        let parts = blocks.div_ceil(per_child);
        let cap = per_child * br;
        let pieces = split_into(members.len(), parts, &mut |r, left, parts| {
            let part = &mut members[r];
            let lane = widest(
                part.iter().map(|&i| lanes32(&vectors[i as usize])),
                &weights,
            );
            part.sort_unstable_by_key(|&i| (vectors[i as usize][ROW_DIMS[lane]], i));
            // Near the proportional cut, a whole number of groups, each side within capacity.
            let n = part.len();
            let lo = n
                .saturating_sub((parts - left) * cap)
                .max(1)
                .next_multiple_of(GROUP_ROWS);
            let hi = (left * cap).min(n - 1) / GROUP_ROWS * GROUP_ROWS;
            let want = (n * left / parts + GROUP_ROWS / 2) / GROUP_ROWS * GROUP_ROWS;
            want.clamp(lo, hi.max(lo))
        });
        let mut children = [NO_CHILD; FANOUT];
        for (c, p) in pieces.iter().enumerate() {
            if p.len() > br {
                children[c] = self.reserve_node();
            }
        }
        let mut boxes = Vec::with_capacity(pieces.len());
        for (c, p) in pieces.into_iter().enumerate() {
            let (child, b) = if children[c] == NO_CHILD {
                self.block(&members[p])
            } else {
                (
                    children[c],
                    self.fill_rows_node(children[c], &mut members[p]),
                )
            };
            children[c] = child;
            boxes.push(b);
        }
        self.set_node(node, children, &boxes)
    }

    /// A leaf: the rows in slots, one block.
    fn block(&mut self, members: &[u32]) -> (ChildRef, Bounds) {
        let first_slot = self.ids.len() as u32;
        let mut b = empty_box();
        for &i in members {
            let lanes = lanes_of(&self.refs.vectors[i as usize]);
            grow(&mut b, &lanes);
            self.rows.push(lanes);
            let position = self.first_position + i;
            self.ids
                .push((position << 1) | self.refs.fraud[i as usize] as u32);
        }
        self.blocks.push(Block {
            first_slot,
            n_slots: members.len() as u32,
        });
        ((self.blocks.len() - 1) as u32 | BLOCK_BIT, b)
    }
}

/// Splits `0..len` into `parts` consecutive ranges by recursive halving: a range of `p > 1`
/// parts is cut by `cut(range, left, p)`, which may reorder that range and returns the length of
/// its first `left = p / 2` parts.
fn split_into(
    len: usize,
    parts: usize,
    cut: &mut dyn FnMut(std::ops::Range<usize>, usize, usize) -> usize,
) -> Vec<std::ops::Range<usize>> {
    fn go(
        r: std::ops::Range<usize>,
        parts: usize,
        cut: &mut dyn FnMut(std::ops::Range<usize>, usize, usize) -> usize,
        out: &mut Vec<std::ops::Range<usize>>,
    ) {
        if parts <= 1 || r.len() <= 1 {
            out.push(r);
            return;
        }
        let left = parts / 2;
        let at = r.start + cut(r.clone(), left, parts);
        go(r.start..at, left, cut, out);
        go(at..r.end, parts - left, cut, out);
    }
    let mut out = Vec::with_capacity(parts);
    go(0..len, parts, cut, &mut out);
    out
}

/// The lane (index into the row lanes) with the largest spread over `points`.
fn widest(points: impl Iterator<Item = [i32; LANES]>, weights: &[u32; DIMS]) -> usize {
    let (mut lo, mut hi) = ([i32::MAX; LANES], [i32::MIN; LANES]);
    for p in points {
        for l in 0..LANES {
            lo[l] = lo[l].min(p[l]);
            hi[l] = hi[l].max(p[l]);
        }
    }
    (0..ROW_DIMS.len())
        .max_by_key(|&l| {
            let spread = (hi[l] - lo[l]).max(0) as u64 * weights[ROW_DIMS[l]] as u64;
            (spread, std::cmp::Reverse(l))
        })
        .unwrap()
}

fn lanes32(v: &[i16; DIMS]) -> [i32; LANES] {
    lanes_of(v).map(i32::from)
}

/// The mean of some rows' lanes, rounded down.
fn center(members: &[u32], vectors: &[[i16; DIMS]]) -> [i32; LANES] {
    let mut sum = [0i64; LANES];
    for &i in members {
        for (s, x) in sum.iter_mut().zip(lanes32(&vectors[i as usize])) {
            *s += x as i64;
        }
    }
    sum.map(|s| s.div_euclid(members.len().max(1) as i64) as i32)
}

fn union(boxes: &[Bounds]) -> Bounds {
    let mut b = empty_box();
    boxes.iter().for_each(|x| grow_box(&mut b, x));
    b
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
