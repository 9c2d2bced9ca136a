//! The JSON lines the workspace's commands end with, as the types the harness (`xtask`,
//! `measure`) reads them back into: `index-pack build`'s ([`Packed`]), `local-runner verify`'s
//! ([`Answers`]), `verify --neighbours`' ([`Neighbours`]) and the `search_stats` example's
//! ([`Searched`]). Both sides share these types, so a
//! field renamed on one side fails to compile on the other instead of reading as a zero. They
//! live here because the programs and the harness all depend on this crate, and they add only
//! serde to it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Seconds each phase of packing took.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub read_s: f64,
    pub kmeans_s: f64,
    pub assign_s: f64,
    pub layout_s: f64,
    pub write_s: f64,
}

/// What `index-pack build` packed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Packed {
    pub artifact: PathBuf,
    /// SHA-256 of the artifact's bytes.
    pub sha256: String,
    pub bytes: u64,
    pub references: u64,
    pub cells: u32,
    pub phases_s: Phases,
    pub total_s: f64,
    /// The packer's peak resident memory (`VmHWM`).
    pub peak_rss_mb: f64,
}

/// `local-runner verify FILE`: the handler's answers to a test file against its labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Answers {
    pub total: u64,
    pub tp: u64,
    pub tn: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub errors: u64,
    pub score_mismatches: u64,
    pub detection_score: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Answers {
    /// Answers that are not the expected ones (FP, FN, errors, another score).
    pub fn inexact(&self) -> u64 {
        self.fp + self.fn_ + self.errors + self.score_mismatches
    }
}

/// `local-runner verify --neighbours`: the search's vectors, neighbours and votes against the
/// labeller's brute force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Neighbours {
    /// Queries whose neighbours were compared.
    pub compared: u64,
    pub public: u64,
    pub generated: u64,
    pub adversarial: u64,
    /// Adversarial queries by kind.
    pub adversarial_kinds: BTreeMap<String, u64>,
    /// Bodies both the scorer and the labeller refuse (nothing to compare).
    pub refused_by_both: u64,
    pub vector_differences: u64,
    pub neighbour_differences: u64,
    /// Queries where the fraud count differs (a different answer).
    pub decision_differences: u64,
    /// Compared queries whose 5th and 6th nearest references are at equal distance.
    pub ties_across_fifth: u64,
    /// Of those, the ones where the labeller's f64 distances put a later reference of the
    /// file ahead of an earlier one (file order alone would answer differently).
    pub ties_decided_by_f64: u64,
    pub wall_s: f64,
}

impl Neighbours {
    /// Vector, neighbour and decision differences together.
    pub fn differences(&self) -> u64 {
        self.vector_differences + self.neighbour_differences + self.decision_differences
    }
}

/// The spread of one figure over the queries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub mean: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// The `search_stats` example's line (`JSON=1`): the request path's search over the public set's
/// queries, each figure under the name it is printed with ([`Searched::HOT_NS`] and the others).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Searched {
    pub references: u64,
    pub queries: u64,
    pub kernels: String,
    /// Other memory walked before each query of [`Searched::NS`], KiB.
    pub evict_kb: u64,
    pub figures: BTreeMap<String, Spread>,
}

impl Searched {
    /// Nanoseconds per query with a hot cache (the best of repeated runs of each).
    pub const HOT_NS: &str = "hot search ns";
    /// Nanoseconds per query, `evict_kb` of other memory walked before each.
    pub const NS: &str = "search ns";
    pub const ROWS: &str = "rows scanned";
    pub const BLOCKS: &str = "blocks scanned";
    pub const BYTES: &str = "bytes touched";

    /// A figure by its name (zeros where the run did not show it).
    pub fn figure(&self, name: &str) -> Spread {
        self.figures.get(name).copied().unwrap_or_default()
    }
}
