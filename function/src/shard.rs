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
use index_pack::format::{Identity, DIMS};
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
