//! The coarse quantizer: faiss k-means over a sample of the references.
//!
//! faiss trains on at most `max_points_per_centroid` points per cell. The sample is drawn
//! here, before any conversion: evenly spaced positions of the file (all of them when the set
//! is small), so only the sample is ever held as floats (at 100M references, 262,144 rows
//! rather than 5.6 GB of them). The same input and parameters give the same centroids. Which
//! cell a reference lands in only decides where it is stored ([`crate::assign`]); the search
//! stays exact whatever it is.

use crate::format::{DIMS, SCALE};
use crate::layout::Partitioned;
use faiss::cluster::{Clustering, ClusteringParameters};
use faiss::index::flat::FlatIndex;

/// k-means settings.
#[derive(Clone, Debug, PartialEq)]
pub struct KMeans {
    pub cells: u32,
    pub iters: u32,
    pub seed: u32,
    pub max_points_per_centroid: u32,
}

/// Trains up to `cells` centroids (at most one per reference) on the sample of
/// [`sample_positions`].
pub fn train(parts: &Partitioned, km: &KMeans) -> anyhow::Result<Vec<[f32; DIMS]>> {
    let n = parts.len as u64;
    anyhow::ensure!(n > 0, "no references to train on");
    let cells = km.cells.min(parts.len).max(1);
    let m = n.min(cells as u64 * km.max_points_per_centroid.max(1) as u64);
    let mut data = vec![0f32; m as usize * DIMS];
    for (p, rows) in parts.parts.iter().enumerate() {
        for row in rows {
            if let Some(s) = sample_slot(row.index as u64, n, m) {
                let v = Partitioned::vector(p, row);
                for (x, &k) in data[s as usize * DIMS..][..DIMS].iter_mut().zip(&v) {
                    *x = (k as f64 / SCALE) as f32;
                }
            }
        }
    }
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

/// The sample of `m` of `n` positions (`m <= n`): position `floor(s n / m)` is sample `s`.
/// Returns the sample number of position `j`, if it is one.
pub fn sample_slot(j: u64, n: u64, m: u64) -> Option<u64> {
    debug_assert!(0 < m && m <= n && j < n);
    // The least s with floor(s n / m) >= j.
    let s = (j * m).div_ceil(n);
    (s < m && s * n / m == j).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_takes_m_evenly_spaced_positions_in_order() {
        for (n, m) in [
            (1, 1),
            (10, 10),
            (10, 3),
            (3_000_000, 262_144),
            (1_000_003, 7),
        ] {
            let picked: Vec<(u64, u64)> = (0..n)
                .filter_map(|j| sample_slot(j, n, m).map(|s| (j, s)))
                .collect();
            assert_eq!(picked.len() as u64, m, "{n} {m}");
            for (k, &(j, s)) in picked.iter().enumerate() {
                assert_eq!((s, j), (k as u64, k as u64 * n / m), "{n} {m}");
            }
        }
    }
}
