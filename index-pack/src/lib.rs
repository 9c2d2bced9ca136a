//! # index-pack: the fraud index format and the packer that builds it
//!
//! The fraud scorer answers by an exact 5-nearest-neighbour vote over 3,000,000 labelled
//! reference vectors. This crate owns everything about the stored index:
//!
//! - [`format`]: the archived types (coarse quantizer, inverted lists with exact bounding boxes,
//!   scalar codes), the footer with version and checksum, and [`format::open`], which validates
//!   an artifact in place (zero-copy) for the search in the `function` crate.
//! - [`codec`]: the two scalar codecs, exact `i16` (value x 10000) and lossy `fp16`.
//! - [`layout`]: references + centroids + assignment -> lists, k-d blocks and bounds
//!   (deterministic).
//! - [`report`]: the JSON lines `index-pack build` and `local-runner verify` end with, as the
//!   harness reads them.
//! - `source`, `train` and `assign` (feature `pack`): reading the contest JSON (pipelined, with
//!   its SHA-256 check), faiss k-means on a sample for the coarse centroids, and each
//!   reference's nearest one in exact integer arithmetic.
//!
//! Data flows one way: references -> [`layout::Partitioned`] -> [`format::Index`] -> artifact
//! bytes. The reader side needs only `format` and `codec`, so the serving binaries build this
//! crate with `default-features = false` and link neither faiss nor the JSON reader.

// Lane loops read several arrays in lockstep; indexing says that more plainly than zips.
#![allow(clippy::needless_range_loop)]

#[cfg(target_endian = "big")]
compile_error!("the index stores little-endian integers and the search reads them natively");

#[cfg(feature = "pack")]
pub mod assign;
pub mod chain;
pub mod codec;
#[cfg(feature = "pack")]
pub mod edits;
pub mod embed;
pub mod format;
pub mod layout;
#[cfg(feature = "pack")]
pub mod names;
pub mod report;
#[cfg(feature = "pack")]
pub mod source;
#[cfg(feature = "pack")]
pub mod train;

pub use format::{CodecKind, FormatError};
pub use report::Phases;

/// Everything that determines an artifact besides the references.
#[derive(Clone, Debug, PartialEq)]
pub struct PackOptions {
    pub codec: CodecKind,
    /// k-means cells (inverted lists before the split by binary key).
    pub cells: u32,
    pub kmeans_iters: u32,
    pub kmeans_seed: u32,
    pub max_points_per_centroid: u32,
    /// Maximum rows per block (a multiple of 8).
    pub block_rows: u32,
    /// See [`layout::DEFAULT_SPLIT_WEIGHTS`].
    pub split_weights: [u32; format::DIMS],
    /// The position of the first reference in the whole set (0 for a base).
    pub first_position: u32,
    /// Where its positions end (`None`: after its references).
    pub end_position: Option<u32>,
    /// What part of a set the index holds ([`format::Part`]).
    pub part: format::Part,
    /// The deltas a compacted base folds ([`format::Header::folded`]).
    pub folded: Vec<format::Folded>,
    /// Cells already trained (a base's, for its deltas and compactions): no k-means, `cells`
    /// and the k-means fields then only describe where they came from.
    pub centroids: Option<Vec<[f32; format::DIMS]>>,
}

impl Default for PackOptions {
    fn default() -> Self {
        // 32-row blocks: 16, 32 and 64 were compared on the contest data
        // (docs/results/2026-11-30-core.md, "Where the time goes", index format v2). 1024 cells keep both the per-list pass and the rows scanned small; to
        // compare another count: `index-pack build --cells N -o x.idx`, then
        // `INDEX_FILE=x.idx cargo run --release -p function --features embedded-index --example
        // search_stats`. 25 k-means iterations rather than 10: better settled cells, whose
        // trees the vote's tail walks less (the contest's 3M, 3 seeds each: nodes expanded at the
        // 99th percentile 45-48 against 49-50, docs/results/2026-12-07-vote-path.md), for 2.5x
        // the k-means phase (seconds at 100M).
        PackOptions {
            codec: CodecKind::I16,
            cells: 1024,
            kmeans_iters: 25,
            kmeans_seed: 1234,
            max_points_per_centroid: 256,
            block_rows: 32,
            split_weights: layout::DEFAULT_SPLIT_WEIGHTS,
            first_position: 0,
            end_position: None,
            part: format::Part::Whole,
            folded: Vec::new(),
            centroids: None,
        }
    }
}

/// Trains the cells, assigns the references and lays the index out, timing each phase. The
/// references are consumed: each partition's rows are dropped once laid out.
#[cfg(feature = "pack")]
pub fn build(
    parts: layout::Partitioned,
    opts: &PackOptions,
    phases: &mut Phases,
) -> anyhow::Result<format::Index> {
    anyhow::ensure!(
        opts.block_rows >= 8 && opts.block_rows.is_multiple_of(8),
        "block rows must be a positive multiple of 8"
    );
    anyhow::ensure!(
        (1..=1 << 16).contains(&opts.cells),
        "cells must be 1 to 65,536"
    );
    let params = layout::LayoutParams {
        codec: opts.codec,
        block_rows: opts.block_rows,
        kmeans_iters: opts.kmeans_iters,
        kmeans_seed: opts.kmeans_seed,
        split_weights: opts.split_weights,
        first_position: opts.first_position,
        end_position: opts.end_position,
        part: opts.part.clone(),
        folded: opts.folded.clone(),
    };
    if parts.len == 0 {
        // A delta that only removes references: no row, no cell.
        let cells = vec![Vec::new(); parts.parts.len()];
        return Ok(layout::build_partitioned(parts, cells, &[], &params));
    }
    let km = train::KMeans {
        cells: opts.cells,
        iters: opts.kmeans_iters,
        seed: opts.kmeans_seed,
        max_points_per_centroid: opts.max_points_per_centroid,
    };
    let t = std::time::Instant::now();
    let coarse = match &opts.centroids {
        Some(c) => assign::Coarse::new(c),
        None => assign::Coarse::new(&train::train(&parts, &km)?),
    };
    phases.kmeans_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let cells = assign::assign(&parts, &coarse);
    phases.assign_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let index = layout::build_partitioned(parts, cells, &coarse.centroids(), &params);
    phases.layout_s = t.elapsed().as_secs_f64();
    Ok(index)
}

/// Trains, lays out and serializes an index over `refs`. Returns the artifact bytes.
#[cfg(feature = "pack")]
pub fn pack(refs: &layout::References, opts: &PackOptions) -> anyhow::Result<Vec<u8>> {
    let parts = layout::Partitioned::from_references(refs);
    Ok(format::to_artifact(&build(
        parts,
        opts,
        &mut Phases::default(),
    )?))
}

/// SHA-256 of a byte string, as hex.
#[cfg(feature = "pack")]
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    format::hex(&sha2::Sha256::digest(bytes))
}

/// Reads a references file and packs it into `output`: the whole `index-pack build`.
#[cfg(feature = "pack")]
pub fn pack_file(
    references: &std::path::Path,
    expect: &source::Expect,
    opts: &PackOptions,
    output: &std::path::Path,
) -> anyhow::Result<Written> {
    let mut parts = source::read_partitioned(references, expect, &|_| {})?;
    let ids = names::Names::of_file(std::mem::take(&mut parts.ids), opts.first_position)?;
    let written = write_index(output, &build(parts, opts, &mut Phases::default())?)?;
    ids.write_beside(output, written.footer.crc32)?;
    Ok(written)
}

/// An artifact as written.
#[cfg(feature = "pack")]
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub footer: format::Footer,
    pub bytes: u64,
    /// SHA-256 of the artifact, as hex.
    pub sha256: String,
}

/// Writes an index's artifact to `path` atomically ([`write_atomically`]) as it is serialized
/// ([`format::write_artifact`]), hashing it on the way.
#[cfg(feature = "pack")]
pub fn write_index(path: &std::path::Path, index: &format::Index) -> anyhow::Result<Written> {
    let mut written = None;
    write_with(path, &mut |file| {
        use sha2::Digest;
        let mut sha = sha2::Sha256::new();
        let mut w = format::Observed::new(file, |b: &[u8]| sha.update(b));
        let footer = format::write_artifact(index, &mut w)?;
        let bytes = w.len;
        written = Some(Written {
            footer,
            bytes,
            sha256: format::hex(&sha.finalize()),
        });
        Ok(())
    })?;
    Ok(written.expect("written when write_with succeeds"))
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees half
/// an artifact.
#[cfg(feature = "pack")]
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_with(path, &mut |f| std::io::Write::write_all(f, bytes))
}

/// Creates `path`'s directory, lets `write` fill a buffered temporary file beside `path`, syncs
/// it and renames it over `path`.
#[cfg(feature = "pack")]
fn write_with(
    path: &std::path::Path,
    write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        write(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", tmp.display()));
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    Ok(())
}
