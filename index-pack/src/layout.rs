//! From references, trained centroids and an assignment to an [`Index`]: lists, blocks, bounds.
//!
//! This part is pure and deterministic (no faiss, no threads), so tests build small indexes in
//! memory with any centroids they like, and the packer's output depends only on its inputs.
//!
//! - Partitions: references grouped by (key, label) as they are read ([`Partitioned`]), lists by
//!   k-means cell inside them (the cells where a partition has at most a block's rows make one
//!   list, its root's last child); inside a list the rows keep ascending position until the k-d
//!   splits reorder them.
//! - Each partition is one tree of fan-out 8. Its upper nodes group lists: three halvings by
//!   list count on the widest lane of the lists' row means. Below a list, its rows: three
//!   halvings on the widest row lane (ties: lowest lane; sides split by value, then position)
//!   at a multiple of [`GROUP_ROWS`] near the middle, until a piece has at most `block_rows`
//!   rows; such a piece is a block (a leaf). Small boxes are what make pruning work.
//! - Slots follow the depth-first walk, so a subtree's rows are contiguous; a node's child
//!   nodes get consecutive indices.
//!
//! **Cost.** A list's rows are gathered into a buffer of their own before they are split, and a
//! split selects its cut (`select_nth_unstable`) rather than sorting, so the layout is linear in
//! the rows per level of the k-d tree and reads them from cache. Each partition's rows are
//! dropped once its part of the index is written, so the references and the index being built
//! are not both held whole (docs/SCALING.md, "Packing").

use crate::codec::{self, RowLanes};
use crate::format::{
    Block, Bounds, BoundsGroup, ChildRef, CodecKind, Folded, Header, Index, List, Part, Partition,
    BLOCK_BIT, DIMS, FANOUT, FORMAT_VERSION, GROUP_ROWS, KEYS, KEY_DIMS, LANES, NO_CHILD, PAD_ID,
    PAIRS, ROW_DIMS, SCALE,
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
    /// The position of the first reference in the whole set ([`Header::first_position`]): a
    /// row's id holds `first_position + index` (wrapping, so a delta's relabelled rows, below
    /// it, keep their positions).
    pub first_position: u32,
    /// [`Header::end_position`]; `None`: `first_position` plus the rows.
    pub end_position: Option<u32>,
    /// What part of a set the index holds.
    pub part: Part,
    /// [`Header::folded`] (a compacted base's).
    pub folded: Vec<Folded>,
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
            end_position: None,
            part: Part::Whole,
            folded: Vec::new(),
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
    build_sampled_partitioned(Partitioned::from_references(refs), cells, params)
}

/// [`build_sampled`] over rows already partitioned (a delta's with relabelled rows, a
/// compacted base's).
pub fn build_sampled_partitioned(parts: Partitioned, cells: usize, params: &LayoutParams) -> Index {
    let all = || {
        parts
            .parts
            .iter()
            .enumerate()
            .flat_map(|(p, rows)| rows.iter().map(move |r| Partitioned::vector(p, r)))
    };
    let step = (parts.len as usize / cells.max(1)).max(1);
    let centroids: Vec<[f32; DIMS]> = all()
        .step_by(step)
        .map(|v| v.map(|k| (k as f64 / SCALE) as f32))
        .collect();
    let nearest = |v: &[i16; DIMS]| {
        let d = |c: &[f32; DIMS]| -> f32 {
            (0..DIMS).map(|i| (v[i] as f32 / 1e4 - c[i]).powi(2)).sum()
        };
        (0..centroids.len())
            .min_by(|&a, &b| d(&centroids[a]).total_cmp(&d(&centroids[b])))
            .map_or(0, |c| c as u16)
    };
    let assignment: Vec<Vec<u16>> = parts
        .parts
        .iter()
        .enumerate()
        .map(|(p, rows)| {
            rows.iter()
                .map(|r| nearest(&Partitioned::vector(p, r)))
                .collect()
        })
        .collect();
    build_partitioned(parts, assignment, &centroids, params)
}

/// One reference as the layout holds it: its row lanes (the padding lane 0) and its index
/// among the references of this part, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub lanes: RowLanes,
    pub index: u32,
}

/// References grouped by partition as they are read: partition `key << 1 | fraud` (see
/// [`key_of`]) holds its rows in file order. The packer lays partitions out one by one and
/// drops each one's rows once laid out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Partitioned {
    pub parts: [Vec<Row>; 2 * KEYS],
    /// References in all.
    pub len: u32,
    /// SHA-256 of the source they were read from (zero for synthetic data).
    pub source_sha256: [u8; 32],
    /// The ids the source gave its references, as (index, id) in index order; none for a source
    /// without ids. The packer keeps them beside the artifact (`names`), never in it.
    pub ids: Vec<(u32, String)>,
}

impl Partitioned {
    /// Adds the next reference of the file.
    pub fn push(&mut self, v: &[i16; DIMS], fraud: bool) {
        let index = self.len;
        self.push_at(v, fraud, index);
    }

    /// Adds a reference whose index (its position less the part's first, wrapping) is given:
    /// a delta's relabelled references, a compacted base's survivors.
    pub fn push_at(&mut self, v: &[i16; DIMS], fraud: bool, index: u32) {
        let p = (key_of(v) << 1 | fraud as u32) as usize;
        self.parts[p].push(Row {
            lanes: lanes_of(v),
            index,
        });
        self.len += 1;
    }

    /// Each partition's rows in index order, as a file would have pushed them.
    pub fn sort_by_index(&mut self) {
        for rows in &mut self.parts {
            rows.sort_unstable_by_key(|r| r.index);
        }
    }

    pub fn from_references(refs: &References) -> Partitioned {
        assert_eq!(refs.vectors.len(), refs.fraud.len());
        let mut out = Partitioned {
            source_sha256: refs.source_sha256,
            ..Partitioned::default()
        };
        for (v, &fraud) in refs.vectors.iter().zip(&refs.fraud) {
            out.push(v, fraud);
        }
        out
    }

    pub fn n_fraud(&self) -> usize {
        self.parts.iter().skip(1).step_by(2).map(Vec::len).sum()
    }

    /// Splits the references into consecutive ranges of positions, `bounds[k]..bounds[k + 1]`
    /// for part k (`bounds` ascending from 0 to `len`), each numbered from 0 again. A
    /// partition's rows are dropped once shared out, so the whole is held at most once and
    /// one partition twice.
    pub fn split_at_positions(self, bounds: &[u32]) -> Vec<Partitioned> {
        assert!(bounds.len() >= 2 && bounds[0] == 0 && bounds[bounds.len() - 1] == self.len);
        assert!(bounds.is_sorted(), "bounds ascend");
        let mut out: Vec<Partitioned> = bounds
            .windows(2)
            .map(|w| Partitioned {
                len: w[1] - w[0],
                source_sha256: self.source_sha256,
                ..Partitioned::default()
            })
            .collect();
        for (p, rows) in self.parts.into_iter().enumerate() {
            // A partition's rows are in file order.
            for (k, w) in bounds.windows(2).enumerate() {
                let (lo, hi) = (
                    rows.partition_point(|r| r.index < w[0]),
                    rows.partition_point(|r| r.index < w[1]),
                );
                out[k].parts[p] = rows[lo..hi]
                    .iter()
                    .map(|r| Row {
                        index: r.index - w[0],
                        ..*r
                    })
                    .collect();
            }
        }
        for (i, id) in self.ids {
            let k = bounds.partition_point(|&b| b <= i) - 1;
            out[k].ids.push((i - bounds[k], id));
        }
        out
    }

    /// A row's whole vector: its lanes, and the key dimensions of its partition `p`.
    pub fn vector(p: usize, row: &Row) -> [i16; DIMS] {
        let mut v = [0i16; DIMS];
        for (l, &d) in ROW_DIMS.iter().enumerate() {
            v[d] = row.lanes[l];
        }
        for (i, &d) in KEY_DIMS.iter().enumerate() {
            v[d] = (((p >> 1) >> i) & 1) as i16 * SCALE as i16;
        }
        v
    }
}

/// Builds the index. `assignment[i]` is the cell of reference i, `< centroids.len()`.
pub fn build(
    refs: &References,
    centroids: &[[f32; DIMS]],
    assignment: &[u32],
    params: &LayoutParams,
) -> Index {
    assert_eq!(refs.vectors.len(), assignment.len());
    let parts = Partitioned::from_references(refs);
    let cells = parts
        .parts
        .iter()
        .map(|rows| {
            rows.iter()
                .map(|r| assignment[r.index as usize] as u16)
                .collect()
        })
        .collect();
    build_partitioned(parts, cells, centroids, params)
}

/// Builds the index from references read by partition, consuming them: `cells[p][i]` is the
/// cell of row i of partition p, `< centroids.len()` (at most 65,536 cells). Partitions are laid
/// out one after the other straight into the index's tables, and each one's rows are dropped
/// once laid out, so at most one partition is held twice, as rows and as codes (at 100M
/// references, partitions laid out side by side on two threads peaked at 5.0 GB against 4.2 GB
/// so, for 15.5 s of layout against 27.2 s).
pub fn build_partitioned(
    parts: Partitioned,
    cells: Vec<Vec<u16>>,
    centroids: &[[f32; DIMS]],
    params: &LayoutParams,
) -> Index {
    assert!(
        params.block_rows as usize >= GROUP_ROWS
            && (params.block_rows as usize).is_multiple_of(GROUP_ROWS)
    );
    assert!(centroids.len() <= 1 << 16, "cells are u16");
    assert_eq!(cells.len(), parts.parts.len());
    let (n, n_fraud) = (parts.len as usize, parts.n_fraud());
    let first = params.first_position;
    let end = params.end_position.unwrap_or(first + n as u32);
    assert!(
        end as u64 <= crate::format::MAX_POSITIONS,
        "ids hold the position in 31 bits"
    );
    // Every list starts on a group boundary: the slots in all, known before the layout, so the
    // two largest tables are allocated once.
    let mut slots = 0;
    for c in &cells {
        let mut per_cell = vec![0usize; centroids.len()];
        c.iter().for_each(|&cell| per_cell[cell as usize] += 1);
        slots += per_cell
            .iter()
            .map(|n| n.next_multiple_of(GROUP_ROWS))
            .sum::<usize>();
    }
    let mut t = Tables {
        node_children: Vec::new(),
        node_bounds: Vec::new(),
        blocks: Vec::new(),
        lists: Vec::new(),
        ids: Vec::with_capacity(slots),
        codes: codec::Encoder::with_capacity(params.codec, slots),
    };
    let mut partitions = Vec::new();
    for (p, (rows, cells)) in parts.parts.into_iter().zip(cells).enumerate() {
        if rows.is_empty() {
            continue;
        }
        let first_slot = t.ids.len() as u32;
        let (root, bounds) = lay_out(
            &mut t,
            partitions.len() as u32,
            p,
            rows,
            cells,
            centroids.len(),
            params,
        );
        partitions.push(Partition {
            key: (p >> 1) as u32,
            fraud: p & 1 == 1,
            root,
            first_slot,
            end_slot: t.ids.len() as u32,
            bounds,
        });
    }
    Index {
        header: Header {
            format_version: FORMAT_VERSION,
            codec: params.codec,
            n_refs: n as u32,
            n_fraud: n_fraud as u32,
            source_sha256: parts.source_sha256,
            cells: centroids.len() as u32,
            kmeans_iters: params.kmeans_iters,
            kmeans_seed: params.kmeans_seed,
            block_rows: params.block_rows,
            split_weights: params.split_weights,
            packer: concat!("index-pack ", env!("CARGO_PKG_VERSION")).to_string(),
            first_position: first,
            end_position: end,
            part: params.part.clone(),
            folded: params.folded.clone(),
        },
        centroids: centroids.to_vec(),
        partitions,
        lists: t.lists,
        node_children: t.node_children,
        node_bounds: t.node_bounds,
        blocks: t.blocks,
        codes: t.codes.finish(),
        ids: t.ids,
    }
}

/// The index's tables as the partitions are written into them.
struct Tables {
    node_children: Vec<[ChildRef; FANOUT]>,
    node_bounds: Vec<BoundsGroup>,
    blocks: Vec<Block>,
    lists: Vec<List>,
    ids: Vec<u32>,
    codes: codec::Encoder,
}

/// Lays out partition `p` (its rows in file order, and their cells) as partition number
/// `partition` of the index; returns its tree's root and box.
fn lay_out(
    t: &mut Tables,
    partition: u32,
    p: usize,
    rows: Vec<Row>,
    cells: Vec<u16>,
    n_cells: usize,
    params: &LayoutParams,
) -> (ChildRef, Bounds) {
    // The rows by (cell, position): a counting sort, stable, so file order inside a cell.
    let mut starts = vec![0u32; n_cells + 1];
    cells.iter().for_each(|&c| starts[c as usize + 1] += 1);
    for c in 0..n_cells {
        starts[c + 1] += starts[c];
    }
    let mut by_cell = vec![0u32; rows.len()];
    let mut next = starts.clone();
    for (i, &c) in cells.iter().enumerate() {
        by_cell[next[c as usize] as usize] = i as u32;
        next[c as usize] += 1;
    }
    drop(cells);
    // A cell with more rows than a block is a list. Where more than a node's fan-out of cells
    // hold at most a block's rows of the partition (its label's few rows among the other
    // label's: the frontier, and what relabels and deltas in the base's cells leave), their
    // rows are one list, put after the others; fewer are lists like the rest.
    let br = params.block_rows as usize;
    let rows_of = |c: usize| starts[c] as usize..starts[c + 1] as usize;
    let (mut large, mut small): (Vec<usize>, Vec<usize>) = (0..n_cells)
        .filter(|&c| starts[c + 1] > starts[c])
        .partition(|&c| rows_of(c).len() > br);
    if small.len() <= FANOUT {
        large.append(&mut small);
        large.sort_unstable();
    }
    let order: Vec<u32> = large
        .iter()
        .chain(&small)
        .flat_map(|&c| by_cell[rows_of(c)].iter().copied())
        .collect();
    drop(by_cell);
    let mut at = 0;
    let mut item = |cell: usize, n: usize| {
        let range = at..at + n;
        at += n;
        ListItem {
            cell: cell as u32,
            center: center(order[range.clone()].iter().map(|&i| &rows[i as usize])),
            rows: range,
        }
    };
    let mut lists: Vec<ListItem> = large.iter().map(|&c| item(c, rows_of(c).len())).collect();
    let few = small
        .first()
        .map(|&c| item(c, small.iter().map(|&c| rows_of(c).len()).sum()));
    let fraud = p & 1 == 1;
    let mut b = Builder {
        t,
        partition,
        rows: &rows,
        order: &order,
        block_rows: params.block_rows as usize,
        split_weights: params.split_weights,
        id_bits: |index: u32| (params.first_position.wrapping_add(index) << 1) | fraud as u32,
        gathered: Vec::new(),
    };
    b.partition_child(&mut lists, few)
}

/// One inverted list while its partition's tree is built: its cell, the mean of its rows (the
/// upper nodes group lists by it) and its rows, a range of the partition's order.
struct ListItem {
    cell: u32,
    center: [i32; LANES],
    rows: std::ops::Range<usize>,
}

/// One partition's tree, written into the tables in the order the depth-first walk emits it.
struct Builder<'a, F> {
    t: &'a mut Tables,
    /// The partition's number in the index.
    partition: u32,
    rows: &'a [Row],
    /// The partition's row numbers by (cell, position).
    order: &'a [u32],
    block_rows: usize,
    split_weights: [u32; DIMS],
    /// A row's id from its index in the part.
    id_bits: F,
    /// The rows of the list being split, gathered from `rows` (reused from list to list).
    gathered: Vec<Row>,
}

impl<F: Fn(u32) -> u32> Builder<'_, F> {
    /// A node with no children yet; its index is final (siblings get consecutive indices).
    fn reserve_node(&mut self) -> u32 {
        self.t.node_children.push([NO_CHILD; FANOUT]);
        self.t.node_bounds.push(bounds_group(&[]));
        (self.t.node_children.len() - 1) as u32
    }

    fn set_node(&mut self, node: u32, children: [ChildRef; FANOUT], boxes: &[Bounds]) -> Bounds {
        self.t.node_children[node as usize] = children;
        self.t.node_bounds[node as usize] = bounds_group(boxes);
        union(boxes)
    }

    /// A partition's tree: its lists grouped under the root, and the list of its few rows
    /// (`few`, the cells where it has at most a block's rows) a child of the root of its own.
    /// As lists among the others, those cells' rows, scattered over the other label's regions,
    /// widened every box above them, and a query there expanded each level to show that none
    /// was near (a day's random relabels of the contest's 3M: about 17 more nodes a query, search
    /// p99 1.5x, docs/results/2026-12-07-edits.md). Together, k-d split into blocks, they cost a
    /// few blocks of rows a query and leave the other boxes as tight as they were.
    fn partition_child(
        &mut self,
        lists: &mut [ListItem],
        few: Option<ListItem>,
    ) -> (ChildRef, Bounds) {
        match few {
            None => self.lists_child(lists),
            Some(mut few) if lists.is_empty() => self.list_child(&mut few),
            Some(mut few) => {
                let node = self.reserve_node();
                (node, self.fill_lists_node(node, lists, Some(&mut few)))
            }
        }
    }

    /// The subtree over `lists` (one list: that list's own subtree).
    fn lists_child(&mut self, lists: &mut [ListItem]) -> (ChildRef, Bounds) {
        if let [list] = lists {
            return self.list_child(list);
        }
        let node = self.reserve_node();
        let bounds = self.fill_lists_node(node, lists, None);
        (node, bounds)
    }

    /// Up to [`FANOUT`] groups of nearby lists (halvings on the widest spread of their centers,
    /// balanced by rows), each a child; with a list `apart`, it is the last child and the
    /// groups one fewer.
    fn fill_lists_node(
        &mut self,
        node: u32,
        lists: &mut [ListItem],
        apart: Option<&mut ListItem>,
    ) -> Bounds {
        let slots = if apart.is_none() { FANOUT } else { FANOUT - 1 };
        let parts = slots.min(lists.len());
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
        let mut boxes = Vec::with_capacity(groups.len() + 1);
        for (c, g) in groups.into_iter().enumerate() {
            let (child, b) = if children[c] == NO_CHILD {
                self.list_child(&mut lists[g.start])
            } else {
                let b = self.fill_lists_node(children[c], &mut lists[g], None);
                (children[c], b)
            };
            children[c] = child;
            boxes.push(b);
        }
        if let Some(list) = apart {
            let (child, b) = self.list_child(list);
            children[boxes.len()] = child;
            boxes.push(b);
        }
        self.set_node(node, children, &boxes)
    }

    /// One list's subtree, its rows padded to a whole group after it.
    fn list_child(&mut self, list: &mut ListItem) -> (ChildRef, Bounds) {
        let first_slot = self.t.ids.len() as u32;
        let mut members = std::mem::take(&mut self.gathered);
        members.clear();
        members.extend(
            self.order[list.rows.clone()]
                .iter()
                .map(|&i| self.rows[i as usize]),
        );
        let (root, bounds) = if members.len() <= self.block_rows {
            self.block(&members)
        } else {
            let node = self.reserve_node();
            (node, self.fill_rows_node(node, &mut members))
        };
        self.gathered = members;
        while !self.t.ids.len().is_multiple_of(GROUP_ROWS) {
            self.t.codes.push(&[0; LANES]);
            self.t.ids.push(PAD_ID);
        }
        self.t.lists.push(List {
            cell: list.cell,
            partition: self.partition,
            root,
            first_slot,
            end_slot: self.t.ids.len() as u32,
        });
        (root, bounds)
    }

    /// A node over a list's rows: as few children as keep the subtree at its least height (a
    /// node of height h holds at most 8^h blocks), cut by k-d halvings on the widest lane into
    /// pieces of even block counts, each piece a whole number of groups but the last.
    fn fill_rows_node(&mut self, node: u32, members: &mut [Row]) -> Bounds {
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
            let lane = widest(part.iter().map(|r| r.lanes.map(i32::from)), &weights);
            // Near the proportional cut, a whole number of groups, each side within capacity.
            let n = part.len();
            let lo = n
                .saturating_sub((parts - left) * cap)
                .max(1)
                .next_multiple_of(GROUP_ROWS);
            let hi = (left * cap).min(n - 1) / GROUP_ROWS * GROUP_ROWS;
            let want = (n * left / parts + GROUP_ROWS / 2) / GROUP_ROWS * GROUP_ROWS;
            let cut = want.clamp(lo, hi.max(lo));
            // The `cut` rows smallest by (value, position) on the left; order within a side
            // is left to the splits below.
            if 0 < cut && cut < n {
                part.select_nth_unstable_by_key(cut, |r| (r.lanes[lane], r.index));
            }
            cut
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
    fn block(&mut self, members: &[Row]) -> (ChildRef, Bounds) {
        let first_slot = self.t.ids.len() as u32;
        let mut b = empty_box();
        for r in members {
            grow(&mut b, &r.lanes);
            self.t.codes.push(&r.lanes);
            self.t.ids.push((self.id_bits)(r.index));
        }
        self.t.blocks.push(Block {
            first_slot,
            n_slots: members.len() as u32,
        });
        ((self.t.blocks.len() - 1) as u32 | BLOCK_BIT, b)
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

/// The mean of some rows' lanes, rounded down.
fn center<'r>(rows: impl Iterator<Item = &'r Row>) -> [i32; LANES] {
    let (mut sum, mut n) = ([0i64; LANES], 0i64);
    for r in rows {
        for (s, &x) in sum.iter_mut().zip(&r.lanes) {
            *s += x as i64;
        }
        n += 1;
    }
    sum.map(|s| s.div_euclid(n.max(1)) as i32)
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
