//! Stage 3: the 5 nearest references of a query, and their vote, identical to the contest
//! labeller's.
//!
//! The labeller scans all references in file order with f64 squared distances and takes a
//! candidate only when strictly closer, so its top 5 is the first 5 of the references sorted
//! by (f64 distance, index). This module finds the same 5 (or, on the request path, the same
//! number of frauds among them) without scanning everything:
//!
//! 1. **Fixed point.** Queries and references are integers k = value x 10000, so the exact
//!    squared distance D is an integer (units of 1e-8). The labeller's f64 distance differs
//!    from D x 1e-8 by less than 1e-13, far below the spacing 1e-8 of distinct D, so ordering by
//!    D agrees with the labeller except among references with *equal* D.
//! 2. **Pruned best-first walk.** Every partition (key x label) is a tree of boxes. The walk
//!    keeps a heap of subtrees by the lower bound of their box (the key constant included) and
//!    always expands the nearest; a subtree whose bound exceeds the running 5th distance `t` is
//!    never opened. Bounds are exact, so no reference with D <= the final `t` is missed.
//! 3. **Ties.** Every reference with D <= `t` is kept, so at the end all references tied at the
//!    5th distance are known; only if such a tie crosses the 5th place are the tied ones ordered
//!    by the labeller's own f64 formula, then by index. That fixes which 5 are taken, so the
//!    vote. [`Searcher::nearest`] also lists equal D inside the 5 in the labeller's order (f64,
//!    then index); [`Searcher::frauds`] needs only the set and skips it, and when no tie
//!    crosses 5th place it counts the running top 5 without ordering anything.
//! 4. **The vote, not the neighbours** ([`Searcher::frauds`]). Let `T` be the top 5 of what was
//!    scanned so far, counted with every candidate tied at `t`, and for a label X let the
//!    *vote limit* `limit(X)` be the largest distance of a candidate *of the other label* in
//!    `T` (-1 if there is none; unlimited while fewer than 5 are known). A reference x of label
//!    X with D(x) > limit(X) ranks after every other-label member of `T` (a larger integer
//!    distance is a larger f64 distance), so adding it to the scanned set can only push out a
//!    member of its own label, or nothing: the number of frauds in `T` stays the same, and so
//!    does the limit of the other label, which only falls. By induction over all unscanned
//!    references, the count over everything equals the count over the scanned ones as long as
//!    every unscanned reference x of label X has D(x) > limit(X) at the end. So a subtree (all
//!    of one label: partitions are split by label) whose box's lower bound exceeds the limit of
//!    its label is *parked*, not opened; a limit can rise when an other-label candidate enters
//!    `T`, and then every parked subtree whose lower bound it now reaches is put back
//!    (*replayed*). When `T` is unanimous, the limit of its label is -1 and everything of that
//!    label is parked: the walk only has to show that nothing of the other label lies within
//!    `t`.
//!
//! Names: a box's *lower bound* (on the distance of anything below it), the *threshold* `t`
//! (the running 5th distance), the *vote limit* of a label (item 4), and the *opening limit* of
//! a label: what a subtree's lower bound must not exceed for it to be opened (the vote limit
//! when the walk parks, else the threshold).
//!
//! There is no heuristic early stop: the work adapts to the query, the answer does not.
//!
//! A row that a later delta removes or relabels (`index_pack::chain`) is skipped when its block
//! is scanned; the boxes above it still cover it, so every lower bound stays a lower bound.
//!
//! The search is bound by memory latency (the index is 91.7 MB), so the boxes of a child and the
//! rows of a block are prefetched when they enter the heap, before they are needed;
//! prefetches are hints and cannot change an answer.

mod kernels;

#[cfg(target_arch = "x86_64")]
pub use kernels::Avx2;
pub use kernels::{Kernels, Prepared, Scalar};

use crate::hint::prefetch;
use index_pack::format::{
    check_composition, clamp_query, ArchivedCodes, ArchivedIndex, Bounds, BoundsGroup, ChildRef,
    F16Group, Footer, FormatError, I16Group, Opened, Serving, Verified, BLOCK_BIT, DIMS,
    GROUP_ROWS, KEYS, KEY_DIMS, LANES, MAX_DISTANCE, NO_CHILD, ROW_DIMS, SCALE,
};
use index_pack::{chain, codec};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Neighbours the vote uses.
pub const K: usize = 5;

/// One of the nearest references.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbour {
    /// Position of the reference in the whole set (its index in the references file, deltas
    /// following the base).
    pub index: u32,
    pub fraud: bool,
    /// Fixed-point squared distance (units of 1e-8).
    pub distance: i64,
    /// The labeller's own f64 squared distance, which orders equal fixed-point distances (and
    /// so lets a front merge shards' answers in the labeller's order).
    pub labeller_distance: f64,
}

impl Neighbour {
    /// The labeller's order: by distance, then position (the fixed-point distance orders
    /// as the f64 one does wherever they differ, module docs item 1).
    pub fn labeller_order(&self, other: &Neighbour) -> std::cmp::Ordering {
        self.distance
            .cmp(&other.distance)
            .then(self.labeller_distance.total_cmp(&other.labeller_distance))
            .then(self.index.cmp(&other.index))
    }
}

/// Search switches. Every setting is exact; the defaults are the fastest, the others exist to
/// measure what each part gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchParams {
    /// [`Searcher::frauds`] parks subtrees that cannot change the vote (item 4 of the module
    /// docs). Off, it proves the 5 neighbours as [`Searcher::nearest`] does (same answers).
    pub park: bool,
    /// Prefetch a child's boxes or rows when it enters the heap.
    pub prefetch: bool,
    /// Parked subtrees are put back when the vote limits reach them. Off, the search is NOT
    /// exact: only the tests turn it off, to show that the replay is needed.
    #[cfg(test)]
    pub(crate) replay: bool,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            park: true,
            prefetch: true,
            #[cfg(test)]
            replay: true,
        }
    }
}

impl SearchParams {
    /// Whether parked subtrees are put back: always, outside the tests.
    #[cfg(not(test))]
    fn replays(&self) -> bool {
        true
    }

    #[cfg(test)]
    fn replays(&self) -> bool {
        self.replay
    }
}

/// Work counters of one search (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tree nodes whose children were bounded.
    pub nodes_expanded: u32,
    /// Boxes whose lower bound was computed (partitions and children).
    pub boxes_tested: u32,
    pub blocks_scanned: u32,
    pub rows_scanned: u32,
    /// Subtrees set aside because they could not change the vote, and those put back.
    pub parked: u32,
    pub replayed: u32,
}

impl Stats {
    /// Bytes of index read beyond the partition table: node boxes and children, rows, block
    /// entries (ids of candidates are not counted).
    pub fn bytes_touched(&self) -> u64 {
        let node = (std::mem::size_of::<BoundsGroup>() + 4 * GROUP_ROWS) as u64;
        self.nodes_expanded as u64 * node
            + self.rows_scanned as u64 * 2 * LANES as u64
            + self.blocks_scanned as u64 * 8
    }
}

/// An exact k-NN searcher over an archived index (a whole set, or a shard of one) and the
/// deltas that extend it.
#[derive(Clone, Copy)]
pub struct Searcher<'a> {
    parts: Parts<'a>,
    params: SearchParams,
    simd: Simd,
    trust: Trust,
}

/// Which kernels the index's bytes allow (`kernels.rs`): the plain ones only over values read
/// and checked in full (the base's; deltas are always read whole and checked, `index::deltas`).
#[derive(Clone, Copy, Debug)]
enum Trust {
    /// `index_pack::format::Verified`: plain kernels.
    Verified,
    /// Only opened: clamped kernels, safe on any bytes.
    Opened,
    /// Clamped until the flag says the bytes were checked (a lazily mapped index whose pages a
    /// warm-up reads and checks), plain after.
    Once(&'static AtomicBool),
}

impl Trust {
    #[inline(always)]
    fn plain(self) -> bool {
        match self {
            Trust::Verified => true,
            Trust::Opened => false,
            Trust::Once(flag) => flag.load(Ordering::Acquire),
        }
    }
}

/// The indexes one search walks: a base and the deltas after it, checked to compose one
/// reference set ([`Searcher::with_deltas`]). Part 0 is the base, part k the k-th delta.
#[derive(Clone, Copy)]
struct Parts<'a> {
    base: &'a ArchivedIndex,
    deltas: &'a [Opened<'a>],
    /// By part, the slots whose row a later delta hides (`chain::hidden_rows`); empty when no
    /// delta removes or relabels.
    hidden: &'a [Vec<u64>],
}

impl<'a> Parts<'a> {
    #[inline(always)]
    fn get(&self, part: u8) -> &'a ArchivedIndex {
        match part {
            0 => self.base,
            k => self.deltas[k as usize - 1].index,
        }
    }

    fn len(&self) -> usize {
        1 + self.deltas.len()
    }

    /// The hidden-slot bitmap of a part (empty: none hidden).
    #[inline(always)]
    fn hidden(&self, part: u8) -> &'a [u64] {
        self.hidden.get(part as usize).map_or(&[], |b| b.as_slice())
    }
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
                simd: Simd::Avx2(k),
                ..Searcher::scalar(index, params)
            };
        }
        Searcher::scalar(index, params)
    }

    /// A searcher using the portable kernels (for tests and comparisons).
    pub fn scalar(index: &'a ArchivedIndex, params: SearchParams) -> Searcher<'a> {
        Searcher {
            parts: Parts {
                base: index,
                deltas: &[],
                hidden: &[],
            },
            params,
            simd: Simd::Scalar,
            trust: Trust::Opened,
        }
    }

    /// The same searcher with the plain kernels: its index's values were all checked.
    /// Panics if `v` is another index than this searcher's.
    pub fn trusting(self, v: Verified<'a>) -> Searcher<'a> {
        assert!(
            std::ptr::eq(v.index(), self.parts.base),
            "another index was verified"
        );
        Searcher {
            trust: Trust::Verified,
            ..self
        }
    }

    /// The same searcher, with the plain kernels once `checked` is set (by whoever reads and
    /// checks this index's bytes in full), the clamped ones until then.
    pub fn trusting_once(self, checked: &'static AtomicBool) -> Searcher<'a> {
        Searcher {
            trust: Trust::Once(checked),
            ..self
        }
    }

    /// This searcher over its index (the base, whose footer is `base_footer`) and `deltas`,
    /// which must extend it in order, served as `serving` says (`format::check_composition`:
    /// a whole set and the deltas packed for it, at the positions that follow it; or a shard
    /// alone). The search then walks all of them at once, with one running top 5 (so parking
    /// stays exact across them), and the answers are those of the labeller over the set they
    /// describe (`index_pack::chain`): the base's references followed by the deltas', less
    /// those a delta removed, with the label a delta gave those it relabelled.
    ///
    /// A chain whose deltas hide rows keeps the resolved bitmaps (one bit per slot of each
    /// part with hidden rows) for the rest of the process: a searcher over deltas is built
    /// once, at start.
    pub fn with_deltas(
        self,
        base_footer: Footer,
        deltas: &'a [Opened<'a>],
        serving: Serving,
    ) -> Result<Searcher<'a>, FormatError> {
        let all: Vec<(&ArchivedIndex, Footer)> = std::iter::once((self.parts.base, base_footer))
            .chain(deltas.iter().map(|d| (d.index, d.footer)))
            .collect();
        check_composition(&all, serving)?;
        if deltas.len() >= u8::MAX as usize {
            return Err(FormatError::Composition("more than 254 deltas".into()));
        }
        let indexes: Vec<&ArchivedIndex> = all.iter().map(|(i, _)| *i).collect();
        let hidden = chain::hidden_rows(&indexes)?;
        let hidden: &'a [Vec<u64>] = if hidden.iter().all(|b| b.is_empty()) {
            &[]
        } else {
            Box::leak(hidden.into_boxed_slice())
        };
        Ok(Searcher {
            parts: Parts {
                base: self.parts.base,
                deltas,
                hidden,
            },
            ..self
        })
    }

    /// Which kernels are in use.
    pub fn kernels_name(&self) -> &'static str {
        match self.simd {
            Simd::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2(_) => "avx2",
        }
    }

    /// The base index (the only one without deltas).
    pub fn index(&self) -> &'a ArchivedIndex {
        self.parts.base
    }

    /// The deltas searched with the base.
    pub fn deltas(&self) -> &'a [Opened<'a>] {
        self.parts.deltas
    }

    /// The references of the set searched: every part's rows less those a later delta hides.
    pub fn references(&self) -> u64 {
        let rows: u64 = (0..self.parts.len())
            .map(|p| u64::from(self.parts.get(p as u8).header.n_refs.to_native()))
            .sum();
        let hidden: u64 = self
            .parts
            .hidden
            .iter()
            .flatten()
            .map(|w| u64::from(w.count_ones()))
            .sum();
        rows - hidden
    }

    /// The 5 nearest references (fewer only if the index holds fewer), nearest first.
    pub fn nearest(&self, q: &[i16; DIMS]) -> Vec<Neighbour> {
        self.nearest_with_stats(q).0
    }

    /// Number of frauds among the 5 nearest: the request path.
    pub fn frauds(&self, q: &[i16; DIMS]) -> usize {
        self.frauds_with_stats(q).0
    }

    /// As [`Searcher::frauds`], with work counters.
    pub fn frauds_with_stats(&self, q: &[i16; DIMS]) -> (usize, Stats) {
        let q = &clamp_query(q);
        self.with_search(q, self.params.park, |s| {
            // Without a tie across 5th place the 5 are those of `best`, whatever their order:
            // the candidates need no ordering (nor their ids, which the ordering reads).
            if s.tied == 0 {
                return (s.best.iter().filter(|b| b.1).count(), s.stats);
            }
            s.finish(self.parts, q);
            let frauds = s
                .cands
                .iter()
                .take(K)
                .filter(|c| self.decode(c).fraud)
                .count();
            (frauds, s.stats)
        })
    }

    /// As [`Searcher::nearest`], with work counters.
    pub fn nearest_with_stats(&self, q: &[i16; DIMS]) -> (Vec<Neighbour>, Stats) {
        let q = &clamp_query(q);
        self.with_search(q, false, |s| {
            s.finish(self.parts, q);
            // Equal fixed-point distances inside the 5 (a tie across 5th place is already in
            // the labeller's order): the labeller lists them by f64 distance, then file order.
            // Which 5 they are, and so the vote, does not depend on it: `frauds` skips this.
            let mut top: Vec<Neighbour> = s
                .cands
                .iter()
                .take(K)
                .map(|c| {
                    let mut n = self.decode(c);
                    n.labeller_distance =
                        labeller_distance(q, &stored_vector(self.parts.get(c.part), c.slot));
                    n
                })
                .collect();
            top.sort_by(Neighbour::labeller_order);
            (top, s.stats)
        })
    }

    /// Runs the search in this thread's scratch and hands it to `f`.
    fn with_search<R>(&self, q: &[i16; DIMS], park: bool, f: impl FnOnce(&mut Scratch) -> R) -> R {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let walk = Walk {
                park,
                replay: self.params.replays(),
                prefetch: self.params.prefetch,
            };
            let (parts, s_) = (self.parts, &mut *s);
            match (self.simd, self.trust.plain()) {
                (Simd::Scalar, false) => search(Scalar::<true>, parts, walk, q, s_),
                (Simd::Scalar, true) => search(Scalar::<false>, parts, walk, q, s_),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `k` exists only if the CPU has AVX2, FMA and F16C.
                (Simd::Avx2(k), false) => unsafe { search_avx2(k, parts, walk, q, s_) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                (Simd::Avx2(k), true) => unsafe { search_avx2(k.plain(), parts, walk, q, s_) },
            }
            f(&mut s)
        })
    }

    fn decode(&self, c: &Cand) -> Neighbour {
        let id = self.parts.get(c.part).ids[c.slot as usize].to_native();
        Neighbour {
            index: id >> 1,
            fraud: id & 1 == 1,
            distance: c.dist as i64,
            labeller_distance: f64::NAN,
        }
    }
}

/// What one walk does (from [`SearchParams`] and the entry point).
#[derive(Clone, Copy)]
struct Walk {
    park: bool,
    replay: bool,
    prefetch: bool,
}

/// The search compiled with AVX2 enabled, so the kernels inline into its loops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn search_avx2<K: Kernels>(
    k: K,
    parts: Parts<'_>,
    walk: Walk,
    q: &[i16; DIMS],
    s: &mut Scratch,
) {
    search::<K>(k, parts, walk, q, s)
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A reference kept as a candidate: its distance, slot and part.
#[derive(Clone, Copy, Debug)]
struct Cand {
    dist: i32,
    slot: u32,
    part: u8,
}

/// A subtree waiting in the heap or parked: its box's lower bound (key constant included), the
/// subtree, its part (base or delta) and partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    lower: i32,
    child: ChildRef,
    partition: u16,
    part: u8,
    fraud: bool,
}

/// Per-thread buffers reused across searches (no allocation per query once warm).
#[derive(Default)]
struct Scratch {
    /// Subtrees to open, lowest lower bound first: `lower << 32 | i` for `pending[i]`, so that a
    /// heap step compares one integer (comparing `Pending`'s four fields costs ~13 % of a mixed
    /// vote's search, by perf).
    heap: BinaryHeap<Reverse<u64>>,
    pending: Vec<Pending>,
    parked: Vec<Pending>,
    /// One dive's path: node, its children's bounds, the child taken.
    path: Vec<(u32, [i32; GROUP_ROWS], usize)>,
    /// All references seen with distance <= the running 5th distance.
    cands: Vec<Cand>,
    /// The 5 smallest distances seen (with repetition), ascending, with their labels.
    best: [(i32, bool); K],
    /// Labels (bit 0 legit, bit 1 fraud) of candidates at exactly the 5th distance that are
    /// not in `best` (ties across 5th place).
    tied: u8,
    /// Candidates offered so far (a change tells that the vote's bounds may have risen).
    offered: u32,
    /// Whether this walk parks (the vote) or proves the 5 neighbours.
    park: bool,
    /// The opening limit by label (legit, fraud): the vote limit when parking, else the
    /// threshold. Kept current by `offer` ([`Scratch::update_limits`]).
    opening_limit: [i32; 2],
    /// The lowest lower bound among parked subtrees, by label (i32::MAX when none).
    parked_min: [i32; 2],
    stats: Stats,
}

fn label_bit(fraud: bool) -> u8 {
    1 << fraud as u8
}

impl Scratch {
    fn reset(&mut self, park: bool) {
        self.heap.clear();
        self.pending.clear();
        self.parked.clear();
        self.cands.clear();
        self.best = [(i32::MAX, false); K];
        self.tied = 0;
        self.offered = 0;
        self.park = park;
        self.opening_limit = [i32::MAX; 2];
        self.parked_min = [i32::MAX; 2];
        self.stats = Stats::default();
    }

    /// The running threshold: a reference can still matter only if its distance is <= this.
    #[inline(always)]
    fn threshold(&self) -> i32 {
        self.best[K - 1].0
    }

    /// The opening limit of this label: a subtree whose lower bound exceeds it is not opened.
    #[inline(always)]
    fn opening_limit(&self, fraud: bool) -> i32 {
        self.opening_limit[fraud as usize]
    }

    /// Sets the opening limits. When parking, that of label X is its vote limit, how near a
    /// reference of label X must be to change the vote: the largest distance of an other-label
    /// candidate among the 5 and the ties at 5th place (module docs, item 4), -1 if there is
    /// none; both labels in one pass over the 5.
    fn update_limits(&mut self) {
        let t = self.threshold();
        if !self.park || t == i32::MAX {
            self.opening_limit = [t; 2];
            return;
        }
        let mut largest = [-1; 2];
        for &(d, fraud) in &self.best {
            largest[fraud as usize] = largest[fraud as usize].max(d);
        }
        let other = |fraud: bool| {
            if self.tied & label_bit(!fraud) != 0 {
                t
            } else {
                largest[!fraud as usize]
            }
        };
        self.opening_limit = [other(false), other(true)];
    }

    #[inline]
    fn offer(&mut self, dist: i32, slot: u32, part: u8, fraud: bool) {
        self.offered += 1;
        let t = self.threshold();
        if dist < t {
            let removed = self.best[K - 1];
            let mut i = K - 1;
            while i > 0 && self.best[i - 1].0 > dist {
                self.best[i] = self.best[i - 1];
                i -= 1;
            }
            self.best[i] = (dist, fraud);
            let now = self.threshold();
            if now < t {
                self.tied = 0;
            }
            if removed.0 == now {
                self.tied |= label_bit(removed.1);
            }
        } else {
            self.tied |= label_bit(fraud);
        }
        self.update_limits();
        self.cands.push(Cand { dist, slot, part });
        if self.cands.len() >= 64 {
            let t = self.threshold();
            self.cands.retain(|c| c.dist <= t);
        }
    }

    /// Orders the candidates as the labeller would; the first K are the answer.
    fn finish(&mut self, parts: Parts<'_>, q: &[i16; DIMS]) {
        let t = self.threshold();
        self.cands.retain(|c| c.dist <= t);
        let orig = |c: &Cand| parts.get(c.part).ids[c.slot as usize].to_native() >> 1;
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
                        labeller_distance(q, &stored_vector(parts.get(c.part), c.slot)),
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

    /// Files a subtree: into the heap, parked, or nowhere (too far for anything).
    #[inline(always)]
    fn file(&mut self, p: Pending) -> bool {
        if p.lower > self.threshold() {
            return false;
        }
        if p.lower > self.opening_limit(p.fraud) {
            self.park_it(p);
            return false;
        }
        self.push(p);
        true
    }

    fn push(&mut self, p: Pending) {
        // Lower bounds are at most MAX_DISTANCE < 2^31 and never negative (kernels.rs: the
        // plain kernels run over checked values only, the clamped ones clamp every lane).
        debug_assert!((0..=MAX_DISTANCE as i32).contains(&p.lower), "{}", p.lower);
        self.heap
            .push(Reverse((p.lower as u64) << 32 | self.pending.len() as u64));
        self.pending.push(p);
    }

    fn pop(&mut self) -> Option<Pending> {
        let Reverse(key) = self.heap.pop()?;
        Some(self.pending[(key & u32::MAX as u64) as usize])
    }

    fn park_it(&mut self, p: Pending) {
        self.stats.parked += 1;
        let m = &mut self.parked_min[p.fraud as usize];
        *m = (*m).min(p.lower);
        self.parked.push(p);
    }

    /// Puts back every parked subtree the opening limits now reach.
    fn replay(&mut self) {
        if self.parked_min[0] > self.opening_limit[0] && self.parked_min[1] > self.opening_limit[1]
        {
            return;
        }
        self.parked_min = [i32::MAX; 2];
        let mut i = 0;
        while i < self.parked.len() {
            let p = self.parked[i];
            if p.lower <= self.opening_limit(p.fraud) {
                self.parked.swap_remove(i);
                self.stats.replayed += 1;
                self.push(p);
            } else {
                let m = &mut self.parked_min[p.fraud as usize];
                *m = (*m).min(p.lower);
                i += 1;
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
    let part = index
        .partitions
        .partition_point(|p| p.first_slot.to_native() <= slot)
        - 1;
    let key = index.partitions[part].key.to_native();
    let mut v = [0f64; DIMS];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        // For i16 this is k as f64 / 10000, the labeller's value of a 4-decimal component.
        v[d] = codec::decode_lane(&index.codes, slot as usize, l);
    }
    for (i, &d) in KEY_DIMS.iter().enumerate() {
        v[d] = ((key >> i) & 1) as f64;
    }
    v
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

/// What every step of one search reads: the kernels, the indexes, how the walk goes, the query
/// (prepared for the kernels) and the key constants of its partitions.
#[derive(Clone, Copy)]
struct Ctx<'a, S> {
    k: S,
    parts: Parts<'a>,
    walk: Walk,
    prep: &'a Prepared,
    keyc: &'a [i32; KEYS],
}

impl<S> Ctx<'_, S> {
    /// The key constant of a partition of an index.
    #[inline(always)]
    fn key_constant(&self, index: &ArchivedIndex, partition: u16) -> i32 {
        self.keyc[index.partitions[partition as usize].key.to_native() as usize]
    }
}

#[inline(always)]
fn search<S: Kernels>(k: S, parts: Parts<'_>, walk: Walk, q: &[i16; DIMS], s: &mut Scratch) {
    s.reset(walk.park);
    let mut lanes = [0i16; LANES];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        lanes[l] = q[d];
    }
    let prep = Prepared::new(lanes);
    let keyc = key_constants(q);
    let cx = Ctx {
        k,
        parts,
        walk,
        prep: &prep,
        keyc: &keyc,
    };

    for part in 0..parts.len() {
        let index = parts.get(part as u8);
        for (i, p) in index.partitions.iter().enumerate() {
            s.stats.boxes_tested += 1;
            let lower =
                keyc[p.key.to_native() as usize] + k.box_lower_bound(bounds(&p.bounds), &prep);
            let pending = Pending {
                lower,
                child: p.root.to_native(),
                partition: i as u16,
                part: part as u8,
                fraud: p.fraud,
            };
            if s.file(pending) && walk.prefetch {
                prefetch_child(index, pending.child);
            }
        }
    }
    while let Some(p) = s.pop() {
        if p.lower > s.threshold() {
            break; // everything left in the heap is at least as far
        }
        if p.lower > s.opening_limit(p.fraud) {
            // Filed before the opening limit fell below it.
            s.park_it(p);
            continue;
        }
        dive(cx, p, s);
    }
}

/// Deepest dive; deeper trees file the rest of the way into the heap.
const MAX_DIVE: usize = 24;

/// From subtree `p`, follows the nearest child down to a block and scans it, then files every
/// other child met on the way (into the heap, parked, or pruned) under the threshold the scan
/// left: siblings are filed once the threshold is tight, so most are pruned without a heap entry.
#[inline(always)]
fn dive<S: Kernels>(cx: Ctx<'_, S>, p: Pending, s: &mut Scratch) {
    let (k, index) = (cx.k, cx.parts.get(p.part));
    let kc = cx.key_constant(index, p.partition);
    // The path lives in the scratch: a fresh array would be zeroed on every dive.
    let mut path = std::mem::take(&mut s.path);
    path.clear();
    let mut cur = p.child;
    while cur & BLOCK_BIT == 0 {
        let n = cur as usize;
        s.stats.nodes_expanded += 1;
        let children = &index.node_children[n];
        let lbs = k.boxes_lower_bound(bounds_group(&index.node_bounds[n]), cx.prep);
        let mut best = 0;
        for c in 1..GROUP_ROWS {
            if children[c].to_native() == NO_CHILD {
                break;
            }
            if lbs[c] < lbs[best] {
                best = c;
            }
        }
        // Once the threshold is finite, the siblings that may be opened after this dive start
        // loading now, while the dive goes on.
        if cx.walk.prefetch && s.threshold() != i32::MAX {
            let open = s.opening_limit(p.fraud) - kc;
            for c in 0..GROUP_ROWS {
                let child = children[c].to_native();
                if child == NO_CHILD {
                    break;
                }
                if c != best && lbs[c] <= open {
                    prefetch_child(index, child);
                }
            }
        }
        // Too far to open now (or too deep): it is filed with its siblings below.
        let stop = kc + lbs[best] > s.opening_limit(p.fraud) || path.len() + 1 == MAX_DIVE;
        path.push((cur, lbs, if stop { usize::MAX } else { best }));
        if stop {
            break;
        }
        cur = children[best].to_native();
    }
    if cur & BLOCK_BIT != 0 {
        let offered = s.offered;
        scan_block(
            cx,
            index,
            p.part,
            (cur & !BLOCK_BIT) as usize,
            kc,
            p.fraud,
            s,
        );
        if cx.walk.replay && s.offered != offered && !s.parked.is_empty() {
            s.replay();
        }
    }
    for &(n, lbs, taken) in path.iter().rev() {
        for (c, child) in index.node_children[n as usize].iter().enumerate() {
            let child = child.to_native();
            if child == NO_CHILD {
                break;
            }
            s.stats.boxes_tested += 1;
            if c == taken {
                continue;
            }
            let pending = Pending {
                lower: kc + lbs[c],
                child,
                ..p
            };
            s.file(pending);
        }
    }
    s.path = path;
}

/// Asks the CPU to start loading what expanding `child` reads first (a hint: no effect on
/// results): a node's child boxes, or a block's rows.
#[inline(always)]
fn prefetch_child(index: &ArchivedIndex, child: ChildRef) {
    if child & BLOCK_BIT == 0 {
        let n = child as usize;
        prefetch(std::slice::from_ref(&index.node_bounds[n]));
        prefetch(std::slice::from_ref(&index.node_children[n]));
        return;
    }
    let block = &index.blocks[(child & !BLOCK_BIT) as usize];
    let start = block.first_slot.to_native() as usize;
    let groups =
        start / GROUP_ROWS..(start + block.n_slots.to_native() as usize).div_ceil(GROUP_ROWS);
    match &index.codes {
        ArchivedCodes::I16(g) => prefetch(&g[groups]),
        ArchivedCodes::F16(g) => prefetch(&g[groups]),
    }
}

/// Scans the rows of a block of `index` (part `part`) whose box passed; `c` is its partition's
/// key constant.
#[inline(always)]
fn scan_block<S: Kernels>(
    cx: Ctx<'_, S>,
    index: &ArchivedIndex,
    part: u8,
    b: usize,
    c: i32,
    fraud: bool,
    s: &mut Scratch,
) {
    let (k, prep) = (cx.k, cx.prep);
    s.stats.blocks_scanned += 1;
    let block = &index.blocks[b];
    let start = block.first_slot.to_native() as usize;
    let slots = block.n_slots.to_native() as usize;
    s.stats.rows_scanned += slots as u32;
    let end = start + slots;
    let hidden = cx.parts.hidden(part);
    for g in start / GROUP_ROWS..end.div_ceil(GROUP_ROWS) {
        let d = match &index.codes {
            ArchivedCodes::I16(groups) => k.i16_group(i16_group(&groups[g]), prep, c),
            ArchivedCodes::F16(groups) => k.f16_group(f16_group(&groups[g]), prep, c),
        };
        let mut hits = k.at_most(&d, s.threshold());
        while hits != 0 {
            let r = hits.trailing_zeros() as usize;
            hits &= hits - 1;
            let slot = g * GROUP_ROWS + r;
            // Slots past the block's rows pad its last group; the check needs no id load. The
            // threshold may have fallen since the mask was taken. A row a later delta hides
            // is not in the set (a bit test, only on a hit, and only in a chain with edits).
            if slot < end && d[r] <= s.threshold() && !chain::is_hidden(hidden, slot) {
                // Its id is read when the candidates are ordered, which the neighbour path
                // always does (the vote only after a tie across 5th place): start loading it.
                if !s.park {
                    prefetch(&index.ids[slot..slot + 1]);
                }
                s.offer(d[r], slot as u32, part, fraud);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
