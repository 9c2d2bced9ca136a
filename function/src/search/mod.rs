//! Stage 3: the exact 5 nearest references of a query, identical to the contest labeller's.
//!
//! The labeller scans all references in file order with f64 squared distances and takes a
//! candidate only when strictly closer, so its top 5 is the first 5 of the references sorted
//! by (f64 distance, index). This module finds the same 5 without scanning everything:
//!
//! 1. **Fixed point.** Queries and references are integers k = value x 10000, so the exact
//!    squared distance D is an integer (units of 1e-8). The labeller's f64 distance differs
//!    from D x 1e-8 by less than 1e-13, far below the spacing 1e-8 of distinct D, so ordering by
//!    D agrees with the labeller except among references with *equal* D.
//! 2. **Pruned scan.** Lists are grouped by their key (the 3 binary dimensions); groups are
//!    taken nearest key first and skipped when the key distance alone exceeds the current 5th
//!    distance. In a group, the `probe` lists of nearest centroid go first (while no candidate
//!    exists yet), then every list whose bounding-box lower bound is <= the current 5th
//!    distance, in order of that bound, until none is left. Inside a list, super-block boxes and
//!    then block boxes are tested; passing blocks are scanned nearest box first (so the 5th
//!    distance falls fast) and stop at the first whose bound exceeds it. Bounds are exact, so no
//!    reference with D <= the final 5th distance is missed.
//! 3. **Ties.** Every reference with D <= the running 5th distance is kept, so at the end all
//!    references tied at the 5th distance are known; only if such a tie crosses the 5th place
//!    are the tied ones ordered by the labeller's own f64 formula, then by index. That fixes
//!    which 5 are taken, so the vote. [`Searcher::nearest`] also lists equal D inside the 5 in
//!    the labeller's order (f64, then index); [`Searcher::frauds`], the request path, needs
//!    only the set and skips it.
//!
//! There is no heuristic early stop: the work adapts to the query, the answer does not.
//!
//! The search is bound by memory latency (the index is 92 MB, the last-level cache 32 MB), so
//! the next list's boxes and the next blocks' rows are prefetched while the current ones are
//! tested; prefetches are hints and cannot change an answer.

mod kernels;

#[cfg(target_arch = "x86_64")]
pub use kernels::Avx2;
pub use kernels::{Kernels, Prepared, Scalar};

use index_pack::codec;
use index_pack::format::{
    ArchivedCodes, ArchivedIndex, Bounds, BoundsGroup, F16Group, I16Group, DIMS, GROUP_ROWS, KEYS,
    KEY_DIMS, LANES, ROW_DIMS, SCALE, SUPER_BLOCKS,
};
use std::cell::RefCell;

/// Neighbours the vote uses.
pub const K: usize = 5;

/// One of the nearest references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Index of the reference in the source file.
    pub index: u32,
    pub fraud: bool,
    /// Fixed-point squared distance (units of 1e-8).
    pub distance: i64,
}

/// Largest useful [`SearchParams::probe`].
pub const MAX_PROBE: usize = 16;

/// Search tuning. None of it changes answers, only how fast they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchParams {
    /// Lists visited first by centroid distance, before the bound-ordered pass (at most
    /// [`MAX_PROBE`]).
    pub probe: usize,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams { probe: 2 }
    }
}

/// Work counters of one search (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub lists_visited: u32,
    /// Super-block and block boxes tested.
    pub boxes_tested: u32,
    pub blocks_scanned: u32,
    pub rows_scanned: u32,
}

/// An exact k-NN searcher over an archived index.
#[derive(Clone, Copy)]
pub struct Searcher<'a> {
    index: &'a ArchivedIndex,
    params: SearchParams,
    simd: Simd,
}

#[derive(Clone, Copy, Debug)]
enum Simd {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
}

impl<'a> Searcher<'a> {
    /// A searcher using the fastest kernels this CPU supports.
    pub fn new(index: &'a ArchivedIndex, params: SearchParams) -> Searcher<'a> {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx2::new() {
            return Searcher {
                index,
                params,
                simd: Simd::Avx2(k),
            };
        }
        Searcher {
            index,
            params,
            simd: Simd::Scalar,
        }
    }

    /// A searcher using the portable kernels (for tests and comparisons).
    pub fn scalar(index: &'a ArchivedIndex, params: SearchParams) -> Searcher<'a> {
        Searcher {
            index,
            params,
            simd: Simd::Scalar,
        }
    }

    /// Which kernels are in use.
    pub fn kernels_name(&self) -> &'static str {
        match self.simd {
            Simd::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2(_) => "avx2",
        }
    }

    pub fn index(&self) -> &'a ArchivedIndex {
        self.index
    }

    /// The 5 nearest references (fewer only if the index holds fewer), nearest first.
    pub fn nearest(&self, q: &[i16; DIMS]) -> Vec<Neighbour> {
        self.nearest_with_stats(q).0
    }

    /// Number of frauds among the 5 nearest.
    pub fn frauds(&self, q: &[i16; DIMS]) -> usize {
        self.with_answer(q, |s| {
            s.cands
                .iter()
                .take(K)
                .filter(|c| self.decode(c).fraud)
                .count()
        })
    }

    /// As [`Searcher::nearest`], with work counters.
    pub fn nearest_with_stats(&self, q: &[i16; DIMS]) -> (Vec<Neighbour>, Stats) {
        self.with_answer(q, |s| {
            let mut top: Vec<Cand> = s.cands.iter().take(K).copied().collect();
            // Equal fixed-point distances inside the 5 (a tie across 5th place is already in
            // the labeller's order): the labeller lists them by f64 distance, then file order.
            // Which 5 they are, and so the vote, does not depend on it: `frauds` skips this.
            let mut i = 0;
            while i < top.len() {
                let run = top[i..]
                    .iter()
                    .take_while(|c| c.dist == top[i].dist)
                    .count();
                if run > 1 {
                    top[i..i + run].sort_by(|a, b| {
                        let key = |c: &Cand| {
                            let d = labeller_distance(q, &stored_vector(self.index, c.slot));
                            (d, self.decode(c).index)
                        };
                        let (ka, kb) = (key(a), key(b));
                        ka.0.total_cmp(&kb.0).then(ka.1.cmp(&kb.1))
                    });
                }
                i += run;
            }
            (top.iter().map(|c| self.decode(c)).collect(), s.stats)
        })
    }

    /// Runs the search in this thread's scratch and hands the ordered candidates to `f`.
    fn with_answer<R>(&self, q: &[i16; DIMS], f: impl FnOnce(&Scratch) -> R) -> R {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            self.run(q, &mut s);
            s.finish(self.index, q);
            f(&s)
        })
    }

    fn decode(&self, c: &Cand) -> Neighbour {
        let id = self.index.ids[c.slot as usize].to_native();
        Neighbour {
            index: id >> 1,
            fraud: id & 1 == 1,
            distance: c.dist as i64,
        }
    }

    fn run(&self, q: &[i16; DIMS], s: &mut Scratch) {
        match self.simd {
            Simd::Scalar => search::<Scalar>(Scalar, self.index, self.params, q, s),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `k` exists only if the CPU has AVX2, FMA and F16C.
            Simd::Avx2(k) => unsafe { search_avx2(k, self.index, self.params, q, s) },
        }
    }
}

/// The search compiled with AVX2 enabled, so the kernels inline into its loops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn search_avx2(
    k: Avx2,
    index: &ArchivedIndex,
    params: SearchParams,
    q: &[i16; DIMS],
    s: &mut Scratch,
) {
    search::<Avx2>(k, index, params, q, s)
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A reference kept as a candidate: its distance and slot.
#[derive(Clone, Copy, Debug)]
struct Cand {
    dist: i32,
    slot: u32,
}

/// Per-thread buffers reused across searches (no allocation per query once warm).
#[derive(Default)]
struct Scratch {
    list_dist: Vec<i32>,
    list_bound: Vec<i32>,
    visited: Vec<bool>,
    pending: Vec<(i32, u32)>,
    /// Blocks of the list being visited that passed their box test: (bound, block).
    blocks: Vec<(i32, u32)>,
    /// Super-blocks of the list being visited that passed: (super-block, first block, end).
    supers: Vec<(u32, u32, u32)>,
    /// All references seen with distance <= the running 5th distance.
    cands: Vec<Cand>,
    /// The 5 smallest distances seen (with repetition), ascending.
    best: [i32; K],
    stats: Stats,
}

impl Scratch {
    fn reset(&mut self, lists: usize) {
        // Entries of a key group are written before they are read: no need to clear them.
        self.list_dist.resize(lists.next_multiple_of(GROUP_ROWS), 0);
        self.list_bound
            .resize(lists.next_multiple_of(GROUP_ROWS), 0);
        self.visited.clear();
        self.visited.resize(lists, false);
        self.pending.clear();
        self.cands.clear();
        self.best = [i32::MAX; K];
        self.stats = Stats::default();
    }

    /// The running threshold: a reference can still matter only if its distance is <= this.
    #[inline(always)]
    fn threshold(&self) -> i32 {
        self.best[K - 1]
    }

    #[inline(never)]
    fn offer(&mut self, dist: i32, slot: u32) {
        if dist < self.best[K - 1] {
            let mut i = K - 1;
            while i > 0 && self.best[i - 1] > dist {
                self.best[i] = self.best[i - 1];
                i -= 1;
            }
            self.best[i] = dist;
        }
        self.cands.push(Cand { dist, slot });
        if self.cands.len() >= 64 {
            let t = self.threshold();
            self.cands.retain(|c| c.dist <= t);
        }
    }

    /// Orders the candidates as the labeller would; the first K are the answer.
    fn finish(&mut self, index: &ArchivedIndex, q: &[i16; DIMS]) {
        let t = self.threshold();
        self.cands.retain(|c| c.dist <= t);
        let orig = |c: &Cand| index.ids[c.slot as usize].to_native() >> 1;
        self.cands.sort_unstable_by_key(|c| (c.dist, orig(c)));
        if self.cands.len() > K && self.cands[K - 1].dist == self.cands[K].dist {
            // A tie crosses 5th place: order the tied ones by the labeller's f64 distance.
            let d = self.cands[K - 1].dist;
            let start = self.cands.iter().position(|c| c.dist == d).unwrap();
            let tied = &mut self.cands[start..];
            let mut keyed: Vec<(f64, u32, Cand)> = tied
                .iter()
                .map(|c| {
                    (
                        labeller_distance(q, &stored_vector(index, c.slot)),
                        orig(c),
                        *c,
                    )
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (dst, (_, _, c)) in tied.iter_mut().zip(keyed) {
                *dst = c;
            }
        }
    }
}

/// The labeller's distance: f64 components k / 10000, `sum += d * d` in dimension order.
pub fn labeller_distance(q: &[i16; DIMS], r: &[f64; DIMS]) -> f64 {
    let mut sum = 0.0;
    for i in 0..DIMS {
        let d = q[i] as f64 / SCALE - r[i];
        sum += d * d;
    }
    sum
}

/// The vector stored in a slot, as the codec holds it (exact for i16), with the key dims.
pub fn stored_vector(index: &ArchivedIndex, slot: u32) -> [f64; DIMS] {
    let slot = slot as usize;
    let list = list_of_slot(index, slot);
    let key = index.list_keys[list].to_native();
    let mut v = [0f64; DIMS];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        // For i16 this is k as f64 / 10000, the labeller's value of a 4-decimal component.
        v[d] = codec::decode_lane(&index.codes, slot, l);
    }
    for (i, &d) in KEY_DIMS.iter().enumerate() {
        v[d] = ((key >> i) & 1) as f64;
    }
    v
}

fn list_of_slot(index: &ArchivedIndex, slot: usize) -> usize {
    // Blocks are in slot order; find the block, then the list that owns it.
    let b = index
        .blocks
        .partition_point(|b| b.first_slot.to_native() as usize <= slot)
        - 1;
    index
        .lists
        .partition_point(|l| l.first_block.to_native() as usize <= b)
        - 1
}

// The archived row types have the same layout as the native ones on a little-endian target
// (the crate refuses big-endian targets): same fields of `i16_le`/`u16_le`, which are
// transparent over i16/u16, same `repr(C, align(32))`. These casts let the kernels take native
// types. The assertions make a layout drift a compile error.
macro_rules! native_view {
    ($name:ident, $archived:ty, $native:ty) => {
        const _: () = assert!(
            std::mem::size_of::<$archived>() == std::mem::size_of::<$native>()
                && std::mem::align_of::<$archived>() == std::mem::align_of::<$native>()
        );
        #[inline(always)]
        fn $name(a: &$archived) -> &$native {
            // SAFETY: identical size, alignment and field layout (see above); the native type
            // is plain integers, valid for any bit pattern.
            unsafe { &*(a as *const $archived as *const $native) }
        }
    };
}
native_view!(i16_group, index_pack::format::ArchivedI16Group, I16Group);
native_view!(f16_group, index_pack::format::ArchivedF16Group, F16Group);
native_view!(bounds, index_pack::format::ArchivedBounds, Bounds);
native_view!(
    bounds_group,
    index_pack::format::ArchivedBoundsGroup,
    BoundsGroup
);

/// Per-key constant: squared distance over the key dims between the query and key `k`.
fn key_constants(q: &[i16; DIMS]) -> [i32; KEYS] {
    let mut out = [0; KEYS];
    for (k, o) in out.iter_mut().enumerate() {
        for (i, &d) in KEY_DIMS.iter().enumerate() {
            let v = if (k >> i) & 1 == 1 { SCALE as i32 } else { 0 };
            let e = q[d] as i32 - v;
            *o += e * e;
        }
    }
    out
}

#[inline(always)]
fn search<S: Kernels>(
    k: S,
    index: &ArchivedIndex,
    params: SearchParams,
    q: &[i16; DIMS],
    s: &mut Scratch,
) {
    let n_lists = index.lists.len();
    s.reset(n_lists);
    let mut lanes = [0i16; LANES];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        lanes[l] = q[d];
    }
    let prep = Prepared::new(lanes);
    let keyc = key_constants(q);

    // Key groups nearest first. The query's own key (constant 0) usually holds all 5 neighbours;
    // a group whose key constant alone exceeds the threshold cannot hold any, so it is skipped
    // without even computing its lists' bounds (one binary dimension apart costs 1e8).
    let mut keys: [(i32, usize); KEYS] = std::array::from_fn(|key| (keyc[key], key));
    keys.sort_unstable();
    for (kc, key) in keys {
        if kc > s.threshold() {
            break;
        }
        let lists = index.key_lists[key].to_native() as usize
            ..index.key_lists[key + 1].to_native() as usize;
        if !lists.is_empty() {
            visit_key_group(k, index, params, lists, kc, &prep, s);
        }
    }
}

/// Visits, nearest bound first, every list of one key group whose bound is within the
/// threshold. `kc` is the group's key constant (the key dims' share of every distance in it).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn visit_key_group<S: Kernels>(
    k: S,
    index: &ArchivedIndex,
    params: SearchParams,
    lists: std::ops::Range<usize>,
    kc: i32,
    prep: &Prepared,
    s: &mut Scratch,
) {
    // Centroid distance and box lower bound of each list, 8 lists at a time. The groups at the
    // ends of the range may hold lists of other keys: their entries are not read here.
    for g in lists.start / GROUP_ROWS..lists.end.div_ceil(GROUP_ROWS) {
        let cd = k.i16_group(i16_group(&index.list_centroids[g]), prep, kc);
        let lb = k.boxes_lower_bound(bounds_group(&index.list_bounds[g]), prep);
        for r in 0..GROUP_ROWS {
            s.list_dist[g * GROUP_ROWS + r] = cd[r];
            s.list_bound[g * GROUP_ROWS + r] = lb[r] + kc;
        }
    }

    // With no candidate yet, probe the nearest centroids first: they give a small threshold early.
    if s.threshold() == i32::MAX {
        let probe = params.probe.min(lists.len()).min(MAX_PROBE);
        let mut nearest = [(i32::MAX, 0u32); MAX_PROBE];
        if probe > 0 {
            for i in lists.clone() {
                let d = s.list_dist[i];
                // Rarely taken: the common case is one compare per list.
                if d < nearest[probe - 1].0 {
                    let mut j = probe - 1;
                    while j > 0 && nearest[j - 1].0 > d {
                        nearest[j] = nearest[j - 1];
                        j -= 1;
                    }
                    nearest[j] = (d, i as u32);
                }
            }
        }
        for &(_, l) in &nearest[..probe] {
            prefetch_supers(index, l as usize);
        }
        for &(_, l) in &nearest[..probe] {
            visit_list(k, index, l as usize, kc, prep, s);
        }
    }

    // Then every list whose bound can still hold a reference <= the threshold, nearest bound first.
    let t = s.threshold();
    s.pending.clear();
    for i in lists {
        if s.list_bound[i] <= t && !s.visited[i] {
            s.pending.push((s.list_bound[i], i as u32));
        }
    }
    s.pending.sort_unstable();
    for j in 0..s.pending.len() {
        let (bound, l) = s.pending[j];
        if bound > s.threshold() {
            break;
        }
        // The next list's boxes load while this one is scanned.
        if let Some(&(next_bound, next)) = s.pending.get(j + 1) {
            if next_bound <= s.threshold() {
                prefetch_supers(index, next as usize);
            }
        }
        visit_list(k, index, l as usize, kc, prep, s);
    }
}

/// Visits one list: `c` is its key constant (the same for the whole key group).
#[inline(always)]
fn visit_list<S: Kernels>(
    k: S,
    index: &ArchivedIndex,
    l: usize,
    c: i32,
    prep: &Prepared,
    s: &mut Scratch,
) {
    s.visited[l] = true;
    if s.list_bound[l] > s.threshold() {
        return;
    }
    s.stats.lists_visited += 1;
    let list = &index.lists[l];
    let first = list.first_block.to_native() as usize;
    let end = first + list.n_blocks.to_native() as usize;
    let first_super = list.first_super.to_native() as usize;

    // Every block whose box can still hold a row <= the threshold, with its bound. Super-block
    // boxes first, so the block boxes of all passing super-blocks are requested together.
    s.supers.clear();
    for (i, run) in (first..end).step_by(SUPER_BLOCKS).enumerate() {
        let sup = first_super + i;
        s.stats.boxes_tested += 1;
        if c + k.box_lower_bound(bounds(&index.super_bounds[sup]), prep) <= s.threshold() {
            let run_end = (run + SUPER_BLOCKS).min(end);
            prefetch(std::slice::from_ref(&index.block_bounds[sup]));
            prefetch(&index.blocks[run..run_end]);
            s.supers.push((sup as u32, run as u32, run_end as u32));
        }
    }
    s.blocks.clear();
    for &(sup, run, run_end) in &s.supers {
        s.stats.boxes_tested += run_end - run;
        let lbs = k.boxes_lower_bound(bounds_group(&index.block_bounds[sup as usize]), prep);
        for (b, &lb) in (run..run_end).zip(&lbs) {
            if c + lb <= s.best[K - 1] {
                s.blocks.push((c + lb, b));
            }
        }
    }
    // Nearest box first: the threshold falls fastest and the blocks after it are pruned. Their
    // rows are requested a few blocks ahead so that the DRAM misses overlap (the search is bound
    // by memory latency over the 94 MB index, not by arithmetic).
    s.blocks.sort_unstable();
    for &(_, b) in s.blocks.iter().take(PREFETCH_BLOCKS) {
        prefetch_rows(index, b as usize);
    }
    for j in 0..s.blocks.len() {
        let (lb, b) = s.blocks[j];
        if lb > s.threshold() {
            break;
        }
        if let Some(&(ahead_lb, ahead)) = s.blocks.get(j + PREFETCH_BLOCKS) {
            if ahead_lb <= s.threshold() {
                prefetch_rows(index, ahead as usize);
            }
        }
        scan_block(k, index, b as usize, c, prep, s);
    }
}

/// Blocks whose rows are requested ahead of the one being scanned (2, 4, 6 and 8 measured:
/// 4 gave the lowest cold p50 and p99 on the public set).
const PREFETCH_BLOCKS: usize = 4;

/// Asks the CPU to start loading the rows of block `b` (a hint: no effect on results).
#[inline(always)]
fn prefetch_rows(index: &ArchivedIndex, b: usize) {
    let block = &index.blocks[b];
    let start = block.first_slot.to_native() as usize;
    let groups =
        start / GROUP_ROWS..(start + block.n_slots.to_native() as usize).div_ceil(GROUP_ROWS);
    match &index.codes {
        ArchivedCodes::I16(g) => prefetch(&g[groups]),
        ArchivedCodes::F16(g) => prefetch(&g[groups]),
    }
}

/// Asks the CPU to start loading the super-block boxes of list `l`.
#[inline(always)]
fn prefetch_supers(index: &ArchivedIndex, l: usize) {
    let list = &index.lists[l];
    let first = list.first_super.to_native() as usize;
    let n = (list.n_blocks.to_native() as usize).div_ceil(SUPER_BLOCKS);
    prefetch(&index.super_bounds[first..first + n]);
}

/// Prefetches every cache line of `data` into all cache levels.
#[inline(always)]
fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = data.as_ptr() as *const i8;
        for off in (0..std::mem::size_of_val(data)).step_by(64) {
            // SAFETY: a prefetch never faults and has no architectural effect; the address is
            // inside `data` anyway. SSE is part of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Scans the rows of a block whose box passed.
#[inline(always)]
fn scan_block<S: Kernels>(
    k: S,
    index: &ArchivedIndex,
    b: usize,
    c: i32,
    prep: &Prepared,
    s: &mut Scratch,
) {
    s.stats.blocks_scanned += 1;
    let block = &index.blocks[b];
    let start = block.first_slot.to_native() as usize;
    let slots = block.n_slots.to_native() as usize;
    s.stats.rows_scanned += slots as u32;
    let end = start + slots;
    for g in start / GROUP_ROWS..(start + slots).div_ceil(GROUP_ROWS) {
        let d = match &index.codes {
            ArchivedCodes::I16(groups) => k.i16_group(i16_group(&groups[g]), prep, c),
            ArchivedCodes::F16(groups) => k.f16_group(f16_group(&groups[g]), prep, c),
        };
        let t = s.threshold();
        if d.iter().all(|&x| x > t) {
            continue;
        }
        for (r, &x) in d.iter().enumerate() {
            let slot = g * GROUP_ROWS + r;
            // Slots past the block's rows pad its last group; the check needs no id load.
            if x <= s.threshold() && slot < end {
                // Its id is read when the candidates are ordered: start loading it now.
                prefetch(&index.ids[slot..slot + 1]);
                s.offer(x, slot as u32);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
