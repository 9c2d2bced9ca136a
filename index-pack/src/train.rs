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
    single_threaded_blas();
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

/// Caps at `n` the OpenMP threads that faiss's k-means starts from the calling thread. Shards
/// packed side by side would otherwise each start one thread per core, and OpenMP's spinning
/// waits take the cores from each other: the 300,000 references of `cargo xtask scale` in 3
/// shards, 2 at a time on 2 cores, the same bytes each time: 14.2 s with OpenMP's and OpenBLAS's
/// threads per core, 11.5 s with OpenMP capped at one, 9.0 s with OpenBLAS capped too
/// ([`single_threaded_blas`]).
pub fn limit_threads(n: usize) {
    extern "C" {
        fn omp_set_num_threads(num_threads: std::os::raw::c_int);
    }
    let n = n.clamp(1, i32::MAX as usize) as std::os::raw::c_int;
    // SAFETY: libgomp's `omp_set_num_threads` (faiss-sys links libgomp) takes any positive int
    // and sets a control variable of the calling thread's implicit task; it touches no memory of
    // ours.
    unsafe { omp_set_num_threads(n) }
}

/// Runs OpenBLAS, where it is the system's BLAS (faiss-sys links `libblas`), on the calling
/// thread only, unless `OPENBLAS_NUM_THREADS` says otherwise. faiss's k-means already spreads
/// each iteration over OpenMP threads, and OpenBLAS's own threads then spin beside them. With
/// them (`OPENBLAS_NUM_THREADS=2`, 2 cores) and without, the same bytes each time: 300,000
/// references, 1,024 cells, k-means 17.6 s against 11.4 s; 3 shards of them 2 at a time 11.5 s
/// against 9.0 s.
fn single_threaded_blas() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if std::env::var_os("OPENBLAS_NUM_THREADS").is_some() {
            return;
        }
        let name = c"openblas_set_num_threads";
        // SAFETY: dlsym only reads the NUL-terminated name; a null result means another BLAS.
        let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if found.is_null() {
            return;
        }
        // SAFETY: OpenBLAS declares `void openblas_set_num_threads(int)`; the symbol found by
        // that name is that function, and it takes any int.
        let set: extern "C" fn(std::os::raw::c_int) = unsafe { std::mem::transmute(found) };
        set(1);
    });
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

    /// Training on one OpenMP thread gives the centroids of training on all: the cap only
    /// changes how the work is shared.
    #[test]
    fn one_thread_trains_the_same_centroids() {
        let mut refs = crate::layout::References::default();
        for i in 0..4000u64 {
            // Spread over the grid of the fixed-point values (dims 5 and 6 may be negative).
            refs.vectors.push(std::array::from_fn(|d| {
                ((i * 2_654_435_761 + d as u64 * 40_503) % 10_000) as i16
            }));
            refs.fraud.push(i % 3 == 0);
        }
        let parts = Partitioned::from_references(&refs);
        let km = KMeans {
            cells: 16,
            iters: 10,
            seed: 7,
            max_points_per_centroid: 256,
        };
        let all = train(&parts, &km).unwrap();
        let one = std::thread::spawn(move || {
            limit_threads(1);
            train(&parts, &km).unwrap()
        });
        assert_eq!(one.join().unwrap(), all);
    }

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
