//! The coarse quantizer: faiss k-means over the references, then each reference's nearest cell.
//!
//! faiss trains on a deterministic subsample (`max_points_per_centroid` per cell, fixed seed),
//! so the same input and parameters give the same centroids. The assignment only decides where
//! a vector is stored; the search stays exact whatever it is.

use crate::format::{DIMS, SCALE};
use crate::layout::References;
use faiss::cluster::{Clustering, ClusteringParameters};
use faiss::index::flat::FlatIndex;
use faiss::Index as _;

/// k-means settings.
#[derive(Clone, Debug, PartialEq)]
pub struct KMeans {
    pub cells: u32,
    pub iters: u32,
    pub seed: u32,
    pub max_points_per_centroid: u32,
}

/// Trains `cells` centroids over the references (faiss draws its own sample of
/// `max_points_per_centroid` per cell from them).
pub fn train(refs: &References, km: &KMeans) -> anyhow::Result<Vec<[f32; DIMS]>> {
    let n = refs.vectors.len();
    let cells = km.cells.min(n as u32).max(1);
    let data = as_f32(&refs.vectors);
    let mut params = ClusteringParameters::new();
    params.set_niter(km.iters);
    params.set_seed(km.seed);
    params.set_max_points_per_centroid(km.max_points_per_centroid);
    params.set_min_points_per_centroid(1);
    params.set_verbose(false);
    let mut clustering = Clustering::new_with_params(DIMS as u32, cells, &params)?;
    let mut quantizer = FlatIndex::new_l2(DIMS as u32)?;
    clustering.train(&data, &mut quantizer)?;
    Ok(clustering
        .centroids()?
        .into_iter()
        .map(|c| c.try_into().expect("centroid has DIMS components"))
        .collect())
}

/// Each reference's nearest centroid, converted and assigned a chunk at a time (no copy of all
/// the references as floats).
pub fn assign(refs: &References, centroids: &[[f32; DIMS]]) -> anyhow::Result<Vec<u32>> {
    let mut index = FlatIndex::new_l2(DIMS as u32)?;
    index.add(&centroids.concat())?;
    let mut assignment = Vec::with_capacity(refs.vectors.len());
    // Chunks keep faiss's distance buffer small.
    for chunk in refs.vectors.chunks(65_536) {
        let labels = index.assign(&as_f32(chunk), 1)?.labels;
        for l in labels {
            let cell = l
                .get()
                .ok_or_else(|| anyhow::anyhow!("faiss left a vector unassigned"))?;
            assignment.push(cell as u32);
        }
    }
    Ok(assignment)
}

/// Fixed-point vectors as the real numbers faiss works with.
fn as_f32(vectors: &[[i16; DIMS]]) -> Vec<f32> {
    vectors
        .iter()
        .flat_map(|v| v.iter().map(|&x| (x as f64 / SCALE) as f32))
        .collect()
}
