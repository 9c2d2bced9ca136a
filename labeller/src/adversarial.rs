//! Queries built from the references to stress the tie rules, on any references file.
//!
//! Every component of a reference has at most 4 decimals (checked here: a component that is
//! not `k / 10000` exactly is never used), so a reference is also the integer vector
//! k = value x 10000, and squared distances between such vectors are integers D (units of
//! 1e-8). Equal D is where ties come from; the labeller's f64 distances of references at equal
//! D may still differ in the last bits, and then they, not the file order, decide.
//!
//! Four kinds, a quarter of the queries each:
//! - [`Kind::Copy`]: a reference itself (distance 0 to it).
//! - [`Kind::Midpoint`]: halfway between a reference and its nearest other reference,
//!   component by component (rounded down where the sum is odd); where every sum is even the
//!   two are at exactly equal D.
//! - [`Kind::Tie`]: a reference moved along one component by the integer step that makes its
//!   5th and 6th nearest references exactly equidistant (D5 = D6), kept only when, at the moved
//!   point, the labeller's 5th and 6th neighbours are indeed at equal D: a tie that crosses 5th
//!   place, resolved by the f64 distances and then the file order.
//! - [`Kind::NearDuplicate`]: the two references of the closest pairs found (the contest file
//!   holds no two equal vectors), each queried where the other one is, so the pair sits at
//!   D = 0 and D = their distance.
//!
//! Over an edited set, [`around`] adds two more kinds, around the references the edits removed
//! or relabelled: [`Kind::OnEdited`] and [`Kind::TieOnEdited`].
//!
//! The anchors are references drawn at random (seeded); which queries qualify is decided by
//! the labeller's own answers ([`crate::scan::nearest_many`]), so building them costs two
//! passes over the references.

use crate::generate::Rng;
use crate::references::References;
use crate::scan::{self, Hit};
use crate::{Query, DIMS};

/// What an adversarial query is built to exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Copy,
    Midpoint,
    Tie,
    NearDuplicate,
    /// On a reference an edit removed or relabelled ([`around`]).
    OnEdited,
    /// A tie across 5th place with an edited reference in reach ([`around`]).
    TieOnEdited,
}

impl Kind {
    /// The kinds [`queries`] builds.
    pub const ALL: [Kind; 4] = [Kind::Copy, Kind::Midpoint, Kind::Tie, Kind::NearDuplicate];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Copy => "copy",
            Kind::Midpoint => "midpoint",
            Kind::Tie => "tie",
            Kind::NearDuplicate => "near_duplicate",
            Kind::OnEdited => "on_edited",
            Kind::TieOnEdited => "tie_on_edited",
        }
    }
}

/// A vector in units of 1e-4, if every component is exactly k / 10000.
pub fn fixed(v: &Query) -> Option<[i64; DIMS]> {
    let mut k = [0i64; DIMS];
    for (o, &x) in k.iter_mut().zip(v) {
        let r = (x * 10_000.0).round();
        if r / 10_000.0 != x {
            return None;
        }
        *o = r as i64;
    }
    Some(k)
}

/// The vector of integer components k (each k / 10000).
pub fn real(k: &[i64; DIMS]) -> Query {
    k.map(|x| x as f64 / 10_000.0)
}

/// Exact squared distance in units of 1e-8.
pub fn integer_distance(a: &[i64; DIMS], b: &[i64; DIMS]) -> i64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Whether the labeller's 5th and 6th neighbours of `q` are at equal integer distance.
pub fn tie_across_fifth(refs: &References, q: &[i64; DIMS], hits: &[Hit]) -> bool {
    let d = |h: &Hit| fixed(&refs.rows[h.index as usize]).map(|r| integer_distance(q, &r));
    hits.len() > scan::K
        && d(&hits[scan::K - 1]).is_some()
        && d(&hits[scan::K - 1]) == d(&hits[scan::K])
}

/// Components a [`Kind::Tie`] query may move along: not the binary ones, and not a -1
/// sentinel (dimensions 5 and 6 without a last transaction).
fn movable(j: usize, v: i64) -> bool {
    !(9..12).contains(&j) && v >= 0
}

/// Candidate moves tried per anchor for [`Kind::Tie`].
const TIE_TRIES: usize = 3;

/// Moves of `a` (steps along one or two components) after which `r5` and `r6` are at equal
/// squared distance. Moving component j by s changes D(r) by 2 s (a_j - r_j) + s^2, so D5 - D6
/// changes by 2 s (r6_j - r5_j): the moves solve 2 s (r6_j - r5_j) + 2 t (r6_l - r5_l) = D6 - D5
/// in integers (the smallest solution of each pair, by the extended Euclidean algorithm).
fn tie_moves(a: &[i64; DIMS], r5: &[i64; DIMS], r6: &[i64; DIMS]) -> Vec<Vec<(i64, usize)>> {
    let gap = integer_distance(a, r6) - integer_distance(a, r5);
    let coef: Vec<(i64, usize)> = (0..DIMS)
        .filter(|&j| movable(j, a[j]) && r6[j] != r5[j])
        .map(|j| (2 * (r6[j] - r5[j]), j))
        .collect();
    let inside = |m: &[(i64, usize)]| m.iter().all(|&(s, j)| (0..=10_000).contains(&(a[j] + s)));
    let mut out: Vec<Vec<(i64, usize)>> = Vec::new();
    for (x, &(c, j)) in coef.iter().enumerate() {
        if gap % c == 0 {
            out.push(vec![(gap / c, j)]);
        }
        for &(d, l) in &coef[x + 1..] {
            let (g, u, v) = extended_gcd(c, d);
            if gap % g != 0 {
                continue;
            }
            // All solutions: s = s0 + t d/g, u = u0 - t c/g; take the t nearest to the
            // smallest move.
            let (s0, t0) = (u * (gap / g), v * (gap / g));
            let (ds, dt) = (d / g, -c / g);
            let t = -((s0 * ds + t0 * dt) as f64 / (ds * ds + dt * dt) as f64).round() as i64;
            out.push(vec![(s0 + t * ds, j), (t0 + t * dt, l)]);
        }
    }
    out.retain(|m| inside(m));
    out
}

/// (g, u, v) with u a + v b = g = gcd(a, b) (g > 0).
fn extended_gcd(a: i64, b: i64) -> (i64, i64, i64) {
    let (mut r0, mut r1, mut s0, mut s1, mut t0, mut t1) = (a, b, 1, 0, 0, 1);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (s0, s1) = (s1, s0 - q * s1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    if r0 < 0 {
        (-r0, -s0, -t0)
    } else {
        (r0, s0, t0)
    }
}

/// `n` adversarial queries (about n / 4 of each kind) from `refs`, with their kinds.
pub fn queries(refs: &References, n: usize, seed: u64, threads: usize) -> Vec<(Kind, [i64; DIMS])> {
    let per_kind = n.div_ceil(Kind::ALL.len());
    let mut rng = Rng::new(seed);
    // Anchors: distinct random references with 4-decimal components.
    let mut anchors: Vec<(usize, [i64; DIMS])> = Vec::new();
    let want = 4 * per_kind;
    for _ in 0..20 * want {
        if anchors.len() == want || refs.is_empty() {
            break;
        }
        let i = rng.int(0, refs.len() as i64) as usize;
        if anchors.iter().any(|&(j, _)| j == i) {
            continue;
        }
        if let Some(k) = fixed(&refs.rows[i]) {
            anchors.push((i, k));
        }
    }
    let anchor_queries: Vec<Query> = anchors.iter().map(|(_, k)| real(k)).collect();
    let near = scan::nearest_many(refs, &anchor_queries, scan::MAX_K, threads, &|_| {});

    let mut out: Vec<(Kind, [i64; DIMS])> = Vec::new();
    // Copies.
    out.extend(anchors.iter().take(per_kind).map(|&(_, k)| (Kind::Copy, k)));

    // For each anchor, its nearest other reference (the file has no equal vectors, but a
    // different file may: skip those at distance 0).
    let mut pairs: Vec<(i64, [i64; DIMS], [i64; DIMS])> = Vec::new();
    for ((_, a), hits) in anchors.iter().zip(&near) {
        let other = hits.iter().filter_map(|h| {
            let b = fixed(&refs.rows[h.index as usize])?;
            let d = integer_distance(a, &b);
            (d > 0).then_some((d, *a, b))
        });
        if let Some(p) = other.min_by_key(|p| p.0) {
            pairs.push(p);
        }
    }
    // Midpoints, where the pair shares its binary components (it almost always does).
    out.extend(
        pairs
            .iter()
            .filter(|(_, a, b)| (9..12).all(|j| a[j] == b[j]))
            .take(per_kind)
            .map(|(_, a, b)| {
                let mut m = [0; DIMS];
                for j in 0..DIMS {
                    m[j] = (a[j] + b[j]).div_euclid(2);
                }
                (Kind::Midpoint, m)
            }),
    );
    // Near duplicates: the closest pairs, each member queried.
    pairs.sort_by_key(|p| p.0);
    let mut dups = Vec::new();
    for (_, a, b) in &pairs {
        for q in [a, b] {
            if dups.len() < per_kind && !dups.contains(q) {
                dups.push(*q);
            }
        }
    }
    out.extend(dups.into_iter().map(|q| (Kind::NearDuplicate, q)));

    // Ties: move each anchor along one or two components so that its 5th and 6th neighbours
    // become equidistant (smallest moves first); keep the ones where the tie holds at the new
    // point.
    // (rank of the move for its anchor, query): every anchor's smallest move comes first.
    let mut candidates: Vec<(usize, [i64; DIMS])> = Vec::new();
    for ((_, a), hits) in anchors.iter().zip(&near) {
        if hits.len() <= scan::K {
            continue;
        }
        let (Some(r5), Some(r6)) = (
            fixed(&refs.rows[hits[scan::K - 1].index as usize]),
            fixed(&refs.rows[hits[scan::K].index as usize]),
        ) else {
            continue;
        };
        let mut moves = tie_moves(a, &r5, &r6);
        moves.sort_by_key(|m| m.iter().map(|&(s, _)| s * s).sum::<i64>());
        for (rank, m) in moves.iter().take(TIE_TRIES).enumerate() {
            let mut q = *a;
            for &(s, j) in m {
                q[j] += s;
            }
            candidates.push((rank, q));
        }
    }
    candidates.sort_by_key(|&(rank, _)| rank);
    let candidates: Vec<[i64; DIMS]> = candidates.into_iter().map(|(_, q)| q).collect();
    let cq: Vec<Query> = candidates.iter().map(real).collect();
    let checked = scan::nearest_many(refs, &cq, scan::MAX_K, threads, &|_| {});
    out.extend(
        candidates
            .iter()
            .zip(&checked)
            .filter(|(q, hits)| tie_across_fifth(refs, q, hits))
            .take(per_kind)
            .map(|(q, _)| (Kind::Tie, *q)),
    );
    out
}

/// A reference an edit changed: its vector (units of 1e-4) and its row in the edited set, if
/// it is still there (relabelled; `None`: removed).
pub type Target = ([i64; DIMS], Option<u32>);

/// Up to `n` queries over the edited set `refs` around the references edits changed, half of
/// each kind:
/// - [`Kind::OnEdited`]: the edited reference itself. A removed one must not answer; a
///   relabelled one is the nearest and votes with its new label.
/// - [`Kind::TieOnEdited`]: a tie across 5th place with the edited reference in reach (at a
///   distance no greater than the tied 5th): moved from the edited reference's own point, and
///   from each of its nearest references whose 5th or 6th it is (so that it is one of the
///   tied pair). A search that still saw a removed reference, or its old label, would answer
///   differently there.
pub fn around(
    refs: &References,
    targets: &[Target],
    n: usize,
    threads: usize,
) -> Vec<(Kind, [i64; DIMS])> {
    if targets.is_empty() || n == 0 {
        return Vec::new();
    }
    // At most n targets, and n anchors around them: two passes over the references each.
    let targets = &targets[..targets.len().min(n)];
    let half = n.div_ceil(2);
    let mut out: Vec<(Kind, [i64; DIMS])> = targets
        .iter()
        .take(half)
        .map(|(v, _)| (Kind::OnEdited, *v))
        .collect();
    let fixed_row = |i: u32| fixed(&refs.rows[i as usize]);
    let at: Vec<Query> = targets.iter().map(|(v, _)| real(v)).collect();
    let near = scan::nearest_many(refs, &at, scan::MAX_K, threads, &|_| {});
    // (edited reference, anchor, the pair to tie).
    let mut tries: Vec<([i64; DIMS], [i64; DIMS], u32, u32)> = Vec::new();
    // (edited reference, its row, one of its nearest references as the anchor).
    let mut second: Vec<([i64; DIMS], u32, [i64; DIMS])> = Vec::new();
    for ((v, row), hits) in targets.iter().zip(&near) {
        if hits.len() > scan::K {
            tries.push((*v, *v, hits[scan::K - 1].index, hits[scan::K].index));
        }
        if let Some(row) = *row {
            for h in hits.iter().filter(|h| h.index != row) {
                if let Some(a) = fixed_row(h.index) {
                    second.push((*v, row, a));
                }
            }
        }
    }
    second.truncate(n);
    let sq: Vec<Query> = second.iter().map(|(_, _, a)| real(a)).collect();
    let second_near = scan::nearest_many(refs, &sq, scan::MAX_K, threads, &|_| {});
    for ((v, row, a), hits) in second.iter().zip(&second_near) {
        if hits.len() > scan::K && [hits[scan::K - 1].index, hits[scan::K].index].contains(row) {
            tries.push((*v, *a, hits[scan::K - 1].index, hits[scan::K].index));
        }
    }
    let mut candidates: Vec<([i64; DIMS], [i64; DIMS])> = Vec::new();
    for (v, a, i5, i6) in tries {
        let (Some(r5), Some(r6)) = (fixed_row(i5), fixed_row(i6)) else {
            continue;
        };
        let mut moves = tie_moves(&a, &r5, &r6);
        moves.sort_by_key(|m| m.iter().map(|&(s, _)| s * s).sum::<i64>());
        for m in moves.iter().take(TIE_TRIES) {
            let mut q = a;
            for &(s, j) in m {
                q[j] += s;
            }
            candidates.push((v, q));
        }
    }
    let cq: Vec<Query> = candidates.iter().map(|(_, q)| real(q)).collect();
    let checked = scan::nearest_many(refs, &cq, scan::MAX_K, threads, &|_| {});
    let mut ties = 0;
    for ((v, q), hits) in candidates.iter().zip(&checked) {
        if ties == half {
            break;
        }
        let reach = fixed_row(hits.get(scan::K - 1).map_or(0, |h| h.index))
            .map(|r5| integer_distance(q, v) <= integer_distance(q, &r5));
        if tie_across_fifth(refs, q, hits) && reach == Some(true) {
            out.push((Kind::TieOnEdited, *q));
            ties += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_round_trip() {
        let v = [
            0.0041, 0.1667, 0.05, 0.7826, 0.3333, -1.0, -1.0, 0.0292, 0.15, 0.0, 1.0, 0.0, 0.15,
            0.006,
        ];
        let k = fixed(&v).unwrap();
        assert_eq!(k[0], 41);
        assert_eq!(k[5], -10_000);
        assert_eq!(real(&k), v);
        let mut w = v;
        w[0] = 0.00415;
        assert_eq!(fixed(&w), None);
    }

    #[test]
    fn tie_moves_make_fifth_and_sixth_equidistant() {
        assert_eq!(extended_gcd(12, 18).0, 6);
        let (g, u, v) = extended_gcd(-14, 10);
        assert_eq!((g, -14 * u + 10 * v), (2, 2));
        let a = [5000; DIMS];
        let mut r5 = a;
        r5[0] += 30;
        r5[3] -= 7;
        let mut r6 = a;
        r6[1] += 25;
        r6[4] += 20; // D6 - D5 must be even: every move changes it by an even number
        let moves = tie_moves(&a, &r5, &r6);
        assert!(!moves.is_empty());
        for m in moves {
            let mut q = a;
            for (s, j) in m {
                q[j] += s;
            }
            assert_eq!(
                integer_distance(&q, &r5),
                integer_distance(&q, &r6),
                "{q:?}"
            );
        }
    }

    #[test]
    fn builds_every_kind_on_a_small_file() {
        // A lattice-like file (coarse steps) has many equal distances, so ties are found.
        let mut rng = Rng::new(3);
        let mut rows = Vec::new();
        for _ in 0..4_000 {
            let mut v = [0.0; DIMS];
            for (j, x) in v.iter_mut().enumerate() {
                *x = if (9..12).contains(&j) {
                    rng.int(0, 2) as f64
                } else {
                    rng.int(0, 40) as f64 * 250.0 / 10_000.0
                };
            }
            rows.push(v);
        }
        let fraud = (0..rows.len()).map(|i| i % 3 == 0).collect();
        let refs = References::from_rows(rows, fraud);
        let qs = queries(&refs, 80, 1, 2);
        for kind in Kind::ALL {
            let n = qs.iter().filter(|(k, _)| *k == kind).count();
            assert!(n > 5, "{kind:?}: {n}");
        }
        for (kind, q) in &qs {
            if *kind == Kind::Tie {
                let hits = scan::nearest_many(&refs, &[real(q)], scan::MAX_K, 1, &|_| {});
                assert!(tie_across_fifth(&refs, q, &hits[0]));
            }
        }
    }
}
