//! The coarse quantizer: faiss k-means over a sample of the references.
//!
//! faiss trains on at most `max_points_per_centroid` points per cell. The sample is drawn
//! here, before any conversion, so only the sample is ever held as floats (at 100M references,
//! about 262,144 rows rather than 5.6 GB of them): each position is in it or not by a hash of
//! the position ([`sampled`]), as faiss's own random subsample would be, and all of them when
//! the set is small. Evenly spaced positions, tried before, clustered the contest's file so that
//! the search expanded 13 % more nodes at its 99th percentile (docs/results/2026-12-07-vote-path.md).
//! The same input and parameters give the same centroids. Which cell a reference lands in only
//! decides where it is stored ([`crate::assign`]); the search stays exact whatever it is.

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

/// Trains up to `cells` centroids (at most one per reference) on the sample of [`sampled`].
pub fn train(parts: &Partitioned, km: &KMeans) -> anyhow::Result<Vec<[f32; DIMS]>> {
    let n = parts.len as u64;
    anyhow::ensure!(n > 0, "no references to train on");
    let cells = km.cells.min(parts.len).max(1);
    let m = n.min(cells as u64 * km.max_points_per_centroid.max(1) as u64);
    let mut data = Vec::with_capacity((m + m / 16) as usize * DIMS);
    for (p, rows) in parts.parts.iter().enumerate() {
        for row in rows.iter().filter(|r| sampled(r.index as u64, n, m)) {
            let v = Partitioned::vector(p, row);
            data.extend(v.iter().map(|&k| (k as f64 / SCALE) as f32));
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

/// Whether position `j` of `n` is in the sample of about `m` (all of them when `m >= n`): a
/// hash of the position (splitmix64's finalizer) below `m / n` of its range, so the sample
/// follows no period of the file's order.
pub fn sampled(j: u64, n: u64, m: u64) -> bool {
    if m >= n {
        return true;
    }
    let mut z = j.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z as u128) < ((m as u128) << 64) / n as u128
}

#[cfg(test)]
mod tests {
    use super::*;

    /// About `m` positions of `n` (within 1 %, all of them when `m >= n`), the same each time,
    /// spread over the whole file.
    #[test]
    fn the_sample_takes_about_m_positions_from_the_whole_file() {
        for (n, m) in [
            (10, 10),
            (10, 30),
            (3_000_000, 262_144),
            (1_000_003, 70_000),
        ] {
            let picked: Vec<u64> = (0..n).filter(|&j| sampled(j, n, m)).collect();
            let want = m.min(n) as f64;
            assert!(
                (picked.len() as f64 - want).abs() <= want * 0.01,
                "{n} {m}: {}",
                picked.len()
            );
            // Each tenth of the file holds about a tenth of the sample.
            for tenth in 0..10 {
                let inside = picked.iter().filter(|&&j| j * 10 / n == tenth).count() as f64;
                assert!(
                    (inside - want / 10.0).abs() <= want * 0.01 + 2.0,
                    "{n} {m} {tenth}: {inside}"
                );
            }
        }
    }
}
