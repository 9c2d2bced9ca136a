//! A search split across functions: a front sends each shard the query vector
//! ([`NearestRequest`]), each shard answers its own 5 nearest references with their positions in
//! the whole set, labels and distances ([`NearestResponse`], from `Searcher::nearest`), and the
//! front merges them ([`merge`]) and takes the vote.
//!
//! **Why the merge is exact.** The labeller's answer is the first 5 references of the whole set
//! in one total order: by distance, then by position. Each shard's answer is its own first 5 in
//! that order ([`Neighbour::labeller_order`]: fixed-point distance, then the labeller's f64
//! distance, which orders equal fixed-point distances, then position). A reference among the
//! global first 5 is among its shard's first 5: fewer than 5 references of its shard precede it,
//! since all of them precede it globally too. So the union of the answers holds the global first
//! 5, and sorting the union in the same order gives them. The shards prove their 5 neighbours
//! rather than the vote, since a shard cannot know the global vote (parking does not compose
//! across processes; within one process a base and its deltas share one walk instead).

use crate::search::{Neighbour, Searcher, K};
use index_pack::format::{Identity, SetPart, DIMS, MAX_DISTANCE};
use serde::{Deserialize, Serialize};

/// What a front sends a shard: the transaction's vector (value x 10000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NearestRequest {
    pub vector: [i16; DIMS],
}

/// A shard's answer: its first 5 references in the labeller's order, the index it searched, and
/// how long the search took in the shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NearestResponse {
    pub neighbours: Vec<ShardNeighbour>,
    pub index: Identity,
    pub search_ns: u64,
}

/// One of a shard's nearest references.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardNeighbour {
    /// Position in the whole set.
    pub position: u32,
    pub fraud: bool,
    /// Fixed-point squared distance.
    pub distance: i64,
    /// The labeller's f64 squared distance (JSON keeps every bit of an f64).
    pub labeller_distance: f64,
}

impl From<Neighbour> for ShardNeighbour {
    fn from(n: Neighbour) -> ShardNeighbour {
        ShardNeighbour {
            position: n.index,
            fraud: n.fraud,
            distance: n.distance,
            labeller_distance: n.labeller_distance,
        }
    }
}

impl From<ShardNeighbour> for Neighbour {
    fn from(n: ShardNeighbour) -> Neighbour {
        Neighbour {
            index: n.position,
            fraud: n.fraud,
            distance: n.distance,
            labeller_distance: n.labeller_distance,
        }
    }
}

/// A shard's answer to `request`, from its searcher.
pub fn answer(
    searcher: &Searcher<'_>,
    index: &Identity,
    request: &NearestRequest,
) -> NearestResponse {
    let t = std::time::Instant::now();
    let neighbours = searcher.nearest(&request.vector);
    let search_ns = t.elapsed().as_nanos() as u64;
    NearestResponse {
        neighbours: neighbours.into_iter().map(ShardNeighbour::from).collect(),
        index: index.clone(),
        search_ns,
    }
}

/// The first 5 of the shards' answers together, in the labeller's order.
pub fn merge(answers: impl IntoIterator<Item = ShardNeighbour>) -> Vec<ShardNeighbour> {
    let mut all: Vec<Neighbour> = answers.into_iter().map(Neighbour::from).collect();
    all.sort_by(Neighbour::labeller_order);
    all.into_iter().take(K).map(ShardNeighbour::from).collect()
}

/// Frauds among the merged first 5: the vote.
pub fn frauds(merged: &[ShardNeighbour]) -> usize {
    merged.iter().filter(|n| n.fraud).count()
}

/// Shards proven to tile one reference set: their identities, in shard order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tiling {
    pub shards: Vec<Identity>,
}

impl Tiling {
    /// Proves that `shards` (each shard's identity, as it answered, in the order the front was
    /// given them) tile one set: shard k of the same S at place k, one set (its SHA-256 and
    /// total), one format and codec, positions from 0 to the total, each shard starting where
    /// the one before it ends. The error says which shard breaks what.
    pub fn prove(shards: Vec<Identity>) -> Result<Tiling, String> {
        let count = shards.len();
        let Some(first) = shards.first() else {
            return Err("no shard".into());
        };
        let SetPart::Shard {
            total, set_sha256, ..
        } = &first.part
        else {
            return Err(format!(
                "shard 0 answered as {} ({}), not as a shard: give the front the shards of a \
                 split set (index-pack split)",
                first.part, first.crc32
            ));
        };
        let mut next = 0u64;
        for (k, id) in shards.iter().enumerate() {
            let name = format!("shard {k}");
            match &id.part {
                SetPart::Shard {
                    number,
                    count: c,
                    total: t,
                    set_sha256: set,
                } => {
                    if (*number as usize, *c as usize) != (k, count) {
                        return Err(format!(
                            "{name} answered as {} where shard {k} of {count} was due: give the \
                             shards in order, all of them",
                            id.part
                        ));
                    }
                    if (t, set) != (total, set_sha256) {
                        return Err(format!(
                            "{name} belongs to another set (of {t} references, {}) than shard 0 \
                             (of {total}, {})",
                            &set[..12.min(set.len())],
                            &set_sha256[..12.min(set_sha256.len())]
                        ));
                    }
                }
                other => return Err(format!("{name} answered as {other}, not as a shard")),
            }
            if (id.format_version, &id.codec) != (first.format_version, &first.codec) {
                return Err(format!(
                    "{name} has format {} and codec {}, shard 0 format {} and codec {}",
                    id.format_version, id.codec, first.format_version, first.codec
                ));
            }
            let range = id.positions();
            if range.start != next {
                let what = if range.start > next {
                    "a gap"
                } else {
                    "an overlap"
                };
                return Err(format!(
                    "{name} holds positions {}..{} but the shards before it end at {next}: {what}",
                    range.start, range.end
                ));
            }
            if u64::from(id.references) > range.end.saturating_sub(range.start) {
                return Err(format!(
                    "{name} holds {} references in {} positions",
                    id.references,
                    range.end.saturating_sub(range.start)
                ));
            }
            next = range.end;
        }
        if next != u64::from(*total) {
            return Err(format!(
                "the shards hold positions 0..{next}, the set {total} references: a gap at the end"
            ));
        }
        Ok(Tiling { shards })
    }

    /// Checks shard `k`'s answer against what was proven of it: the same index; exactly
    /// min(5, its references) neighbours, inside its range, none twice, in the labeller's
    /// order; distances in the index's domain. The error says what was wrong (in the front's
    /// words: nothing of the answer is quoted but numbers).
    pub fn check(&self, k: usize, answer: &NearestResponse) -> Result<(), String> {
        let want = &self.shards[k];
        if answer.index != *want {
            return Err(format!(
                "answered for another index ({}, CRC32 {}) than the one proven ({}, CRC32 {})",
                answer.index.part, answer.index.crc32, want.part, want.crc32
            ));
        }
        let due = K.min(want.references as usize);
        let got = &answer.neighbours;
        if got.len() != due {
            return Err(format!(
                "answered {} neighbours where {due} are due",
                got.len()
            ));
        }
        let range = want.positions();
        for (i, n) in got.iter().enumerate() {
            if !range.contains(&u64::from(n.position)) {
                return Err(format!(
                    "answered position {}, outside its range {}..{}",
                    n.position, range.start, range.end
                ));
            }
            if got[..i].iter().any(|m| m.position == n.position) {
                return Err(format!("answered position {} twice", n.position));
            }
            let finite = n.labeller_distance.is_finite() && n.labeller_distance >= 0.0;
            if !(0..=MAX_DISTANCE).contains(&n.distance) || !finite {
                return Err("answered a distance outside the index's domain".into());
            }
        }
        let ordered = got.windows(2).all(|w| {
            Neighbour::from(w[0]).labeller_order(&Neighbour::from(w[1])) == std::cmp::Ordering::Less
        });
        if !ordered {
            return Err("answered its neighbours out of the labeller's order".into());
        }
        Ok(())
    }
}

/// Shards searched in this process and merged as a front merges them (`verify`, and the model
/// the remote front is held to).
pub struct InProcess<'a>(pub Vec<Searcher<'a>>);

impl InProcess<'_> {
    /// The merged first 5.
    pub fn nearest(&self, q: &[i16; DIMS]) -> Vec<ShardNeighbour> {
        merge(
            self.0
                .iter()
                .flat_map(|s| s.nearest(q).into_iter().map(ShardNeighbour::from)),
        )
    }
}

impl crate::handler::Remote for InProcess<'_> {
    fn frauds(&self, q: &[i16; DIMS]) -> Result<usize, crate::handler::Unavailable> {
        Ok(frauds(&self.nearest(q)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tests::{random_refs, random_vector, small_index, Lcg, Oracle};
    use crate::search::SearchParams;
    use index_pack::format::{self, CodecKind, Part};
    use index_pack::layout::{self, LayoutParams, References};

    fn shard_id(number: u32, count: u32, first: u32, references: u32) -> Identity {
        Identity {
            references_sha256: "ab".repeat(32),
            references,
            first_position: first,
            end_position: first + references,
            part: SetPart::Shard {
                number,
                count,
                total: 3_000,
                set_sha256: "cd".repeat(32),
            },
            format_version: 6,
            codec: "i16".into(),
            crc32: format!("{number:08x}"),
            packer: "index-pack test".into(),
            edited_by: Vec::new(),
        }
    }

    fn three() -> Vec<Identity> {
        vec![
            shard_id(0, 3, 0, 1_000),
            shard_id(1, 3, 1_000, 1_100),
            shard_id(2, 3, 2_100, 900),
        ]
    }

    /// Only shards 0 to S-1 of one set, in order, whose positions follow each other from 0 to
    /// the total, tile it; each other wiring is named.
    #[test]
    fn only_shards_that_tile_one_set_are_proven() {
        assert!(Tiling::prove(three()).is_ok());
        let broken = |f: &dyn Fn(&mut Vec<Identity>)| {
            let mut ids = three();
            f(&mut ids);
            Tiling::prove(ids).unwrap_err()
        };
        let e = broken(&|ids| ids.swap(0, 1));
        assert!(e.contains("shard 0 answered as shard 1 of 3"), "{e}");
        let e = broken(&|ids| ids.truncate(2));
        assert!(e.contains("where shard 0 of 2 was due"), "{e}");
        let e = broken(&|ids| ids[1].first_position = 1_001);
        assert!(e.contains("a gap"), "{e}");
        let e = broken(&|ids| ids[2].first_position = 2_000);
        assert!(e.contains("an overlap"), "{e}");
        let e = broken(&|ids| {
            ids[2].end_position = 2_900;
            ids[2].references = 800;
        });
        assert!(e.contains("a gap at the end"), "{e}");
        let e = broken(&|ids| ids[2].references = 901);
        assert!(e.contains("901 references in 900 positions"), "{e}");
        let e = broken(&|ids| {
            if let SetPart::Shard { set_sha256, .. } = &mut ids[1].part {
                *set_sha256 = "ef".repeat(32);
            }
        });
        assert!(e.contains("shard 1 belongs to another set"), "{e}");
        let e = broken(&|ids| ids[2].codec = "fp16".into());
        assert!(e.contains("codec fp16"), "{e}");
        let e = broken(&|ids| ids[0].part = SetPart::Whole);
        assert!(e.contains("not as a shard"), "{e}");
    }

    /// Every way a shard's answer could change the vote silently is refused, naming what.
    #[test]
    fn a_shard_answer_is_checked_in_full() {
        let tiling = Tiling::prove(three()).unwrap();
        let n = |position: u32, distance: i64| ShardNeighbour {
            position,
            fraud: false,
            distance,
            labeller_distance: distance as f64 * 1e-8,
        };
        let right = NearestResponse {
            neighbours: vec![
                n(1_000, 1),
                n(1_500, 2),
                n(1_001, 3),
                n(1_002, 3),
                n(2_099, 9),
            ],
            index: tiling.shards[1].clone(),
            search_ns: 1,
        };
        assert_eq!(tiling.check(1, &right), Ok(()));
        let wrong = |f: &dyn Fn(&mut NearestResponse)| {
            let mut a = right.clone();
            f(&mut a);
            tiling.check(1, &a).unwrap_err()
        };
        let e = wrong(&|a| {
            a.neighbours.pop();
        });
        assert_eq!(e, "answered 4 neighbours where 5 are due");
        let e = wrong(&|a| a.neighbours[4] = a.neighbours[0]);
        assert!(e.contains("twice") || e.contains("order"), "{e}");
        let e = wrong(&|a| a.neighbours[4].position = 2_100);
        assert_eq!(e, "answered position 2100, outside its range 1000..2100");
        let e = wrong(&|a| a.neighbours.swap(0, 1));
        assert!(e.contains("out of the labeller's order"), "{e}");
        let e = wrong(&|a| a.neighbours[4].distance = -1);
        assert!(e.contains("domain"), "{e}");
        let e = wrong(&|a| a.index = tiling.shards[2].clone());
        assert!(e.contains("another index"), "{e}");
        // A duplicate placed in order is still a duplicate.
        let e = wrong(&|a| a.neighbours[3].position = 1_001);
        assert_eq!(e, "answered position 1001 twice");
        // A shard of fewer than 5 references answers all of them.
        let small = Tiling::prove(vec![shard_id(0, 1, 0, 3)]);
        assert!(
            small.is_err(),
            "a total of 3,000 is not tiled by 3 references"
        );
    }

    /// A shard's index served as a whole set is refused at start, with a sentence.
    #[test]
    fn a_shard_served_as_a_whole_set_is_refused() {
        let all = random_refs(300, 5, false);
        let params = LayoutParams {
            block_rows: 16,
            part: Part::Shard {
                number: 1,
                count: 3,
                total: 900,
                set_sha256: [7; 32],
            },
            ..LayoutParams::default()
        };
        let refs = References {
            vectors: all.vectors.clone(),
            fraud: all.fraud.clone(),
            source_sha256: [7; 32],
        };
        let bytes = format::aligned_copy(&format::to_artifact(&layout::build_sampled(
            &refs, 8, &params,
        )));
        let o = format::open_with_footer(&bytes).unwrap();
        let s = Searcher::new(o.index, SearchParams::default());
        let e = s
            .with_deltas(o.footer, &[], format::Serving::WholeSet)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("this index is shard 1 of 3"), "{e}");
        assert!(s.with_deltas(o.footer, &[], format::Serving::Shard).is_ok());
    }

    /// A set split into 3 shards of consecutive positions: the merge of the shards' answers,
    /// through their JSON, is the labeller's first 5 over the whole set, on a coarse grid where
    /// ties across shards are common.
    #[test]
    fn the_merged_shards_answer_as_the_whole_set() {
        let all = random_refs(3_000, 31, true);
        let oracle = Oracle::new(&all);
        let cuts = [0, 1_000, 2_100, 3_000];
        let artifacts: Vec<_> = (0..3)
            .map(|k| {
                let r = cuts[k]..cuts[k + 1];
                let refs = References {
                    vectors: all.vectors[r.clone()].to_vec(),
                    fraud: all.fraud[r.clone()].to_vec(),
                    source_sha256: [7; 32],
                };
                let params = LayoutParams {
                    block_rows: 16,
                    first_position: r.start as u32,
                    part: Part::Shard {
                        number: k as u32,
                        count: 3,
                        total: 3_000,
                        set_sha256: [7; 32],
                    },
                    ..LayoutParams::default()
                };
                format::aligned_copy(&format::to_artifact(&layout::build_sampled(
                    &refs, 8, &params,
                )))
            })
            .collect();
        let shards: Vec<_> = artifacts
            .iter()
            .map(|a| format::open_with_footer(a).unwrap())
            .collect();
        let whole = small_index(&all, 20, CodecKind::I16, 16);
        let whole = Searcher::new(format::open(&whole).unwrap(), SearchParams::default());
        let mut rng = Lcg(9);
        for _ in 0..300 {
            let request = NearestRequest {
                vector: random_vector(&mut rng, true),
            };
            let answers = shards.iter().flat_map(|o| {
                let id = Identity::of(o);
                let a = answer(
                    &Searcher::new(o.index, SearchParams::default()),
                    &id,
                    &request,
                );
                let json = serde_json::to_string(&a).unwrap();
                serde_json::from_str::<NearestResponse>(&json)
                    .unwrap()
                    .neighbours
            });
            let merged = merge(answers);
            let got: Vec<u32> = merged.iter().map(|n| n.position).collect();
            assert_eq!(got, oracle.top5(&request.vector), "{request:?}");
            assert_eq!(frauds(&merged), whole.frauds(&request.vector));
        }
    }
}
