//! `index-pack`: build, inspect and verify fraud index artifacts.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use index_pack::source::{read_references, Expect};
use index_pack::{format, CodecKind, PackOptions, Phases};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    version,
    about = "Builds the exact IVF index of the fraud scorer from the contest references"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read references (JSON, optionally .gz), train, lay out and write an artifact.
    Build {
        /// The references file.
        #[arg(long, default_value = "resources/references.json.gz")]
        references: PathBuf,
        /// Where to write the artifact.
        #[arg(long, short)]
        output: PathBuf,
        #[arg(long, value_enum, default_value_t = Codec::I16)]
        codec: Codec,
        /// k-means cells.
        #[arg(long, default_value_t = PackOptions::default().cells)]
        cells: u32,
        #[arg(long, default_value_t = PackOptions::default().kmeans_iters)]
        kmeans_iters: u32,
        #[arg(long, default_value_t = PackOptions::default().kmeans_seed)]
        seed: u32,
        /// Maximum rows per block (a multiple of 8).
        #[arg(long, default_value_t = PackOptions::default().block_rows)]
        block_rows: u32,
        /// How much dimension DIM's spread counts when a k-d split picks its lane, as DIM=WEIGHT
        /// (repeatable; dimensions not named keep the default, 16 for dimension 5 and 1 else).
        #[arg(long = "split-weight", value_parser = parse_weight)]
        split_weights: Vec<(usize, u32)>,
        /// Require this SHA-256 of the decompressed JSON instead of the contest's.
        #[arg(long, conflicts_with = "accept_any_references")]
        references_sha256: Option<String>,
        /// Index any references (the digest is still recorded in the artifact).
        #[arg(long)]
        accept_any_references: bool,
    },
    /// Check an artifact (footer, archive, checksum) and print its header.
    Inspect { artifact: PathBuf },
}

#[derive(Clone, Copy, ValueEnum)]
enum Codec {
    I16,
    Fp16,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Build {
            references,
            output,
            codec,
            cells,
            kmeans_iters,
            seed,
            block_rows,
            split_weights,
            references_sha256,
            accept_any_references,
        } => {
            let expect = match (references_sha256, accept_any_references) {
                (Some(s), _) => Expect::Sha256(s),
                (None, true) => Expect::Any,
                (None, false) => Expect::Contest,
            };
            let opts = PackOptions {
                codec: match codec {
                    Codec::I16 => CodecKind::I16,
                    Codec::Fp16 => CodecKind::F16,
                },
                cells,
                kmeans_iters,
                kmeans_seed: seed,
                block_rows,
                ..PackOptions::default()
            };
            let mut opts = opts;
            for (dim, w) in split_weights {
                opts.split_weights[dim] = w;
            }
            build(&references, &output, &expect, &opts)
        }
        Command::Inspect { artifact } => inspect(&artifact),
    }
}

/// `DIM=WEIGHT` of `--split-weight`.
fn parse_weight(s: &str) -> Result<(usize, u32), String> {
    let (d, w) = s.split_once('=').ok_or("expected DIM=WEIGHT, e.g. 5=16")?;
    let d: usize = d
        .parse()
        .map_err(|_| format!("{d:?} is not a dimension number"))?;
    let w: u32 = w
        .parse()
        .map_err(|_| format!("{w:?} is not a whole weight"))?;
    if d >= format::DIMS || w == 0 {
        return Err(format!(
            "dimension must be below {} and weight at least 1",
            format::DIMS
        ));
    }
    Ok((d, w))
}

fn build(
    references: &std::path::Path,
    output: &std::path::Path,
    expect: &Expect,
    opts: &PackOptions,
) -> Result<()> {
    let started = Instant::now();
    let total = std::fs::metadata(references)
        .with_context(|| format!("cannot read {}", references.display()))?
        .len();
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{msg:12} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_message("reading");
    let refs = read_references(references, expect, &|read| bar.set_position(read))?;
    bar.finish_and_clear();
    let mut phases = Phases {
        read_s: started.elapsed().as_secs_f64(),
        ..Phases::default()
    };
    let (n, frauds) = (
        refs.vectors.len(),
        refs.fraud.iter().filter(|&&f| f).count(),
    );
    eprintln!(
        "read {n} references ({frauds} fraud) in {:.1} s, source SHA-256 {}",
        phases.read_s,
        format::hex(&refs.source_sha256)
    );
    let spinner = ProgressBar::new_spinner().with_message(format!(
        "training {} cells with faiss k-means, assigning, laying out lists",
        opts.cells
    ));
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let index = index_pack::build(&refs, opts, &mut phases)?;
    drop(refs);
    spinner.finish_and_clear();
    let t = Instant::now();
    let (archive, footer) = format::to_archive(&index);
    drop(index);
    index_pack::write_parts_atomically(output, &[&archive, &footer])?;
    phases.write_s = t.elapsed().as_secs_f64();
    let bytes = archive.len() + footer.len();
    let sha256 = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(&archive);
        h.update(footer);
        format::hex(&h.finalize())
    };
    let (peak_rss_mb, total_s) = (peak_rss_mb(), started.elapsed().as_secs_f64());
    let Phases {
        read_s,
        kmeans_s,
        assign_s,
        layout_s,
        write_s,
    } = &phases;
    eprintln!(
        "wrote {} ({bytes} bytes) in {total_s:.1} s: read {read_s:.1} s, k-means {kmeans_s:.1} s, \
         assignment {assign_s:.1} s, layout {layout_s:.1} s, write {write_s:.1} s; peak memory \
         {peak_rss_mb:.0} MB",
        output.display(),
    );
    let report = index_pack::report::Packed {
        artifact: output.to_path_buf(),
        sha256,
        bytes: bytes as u64,
        references: n as u64,
        cells: opts.cells,
        phases_s: phases,
        total_s,
        peak_rss_mb,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The process's peak resident memory (`VmHWM`), MB; 0 where /proc does not say.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"));
    kb.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn inspect(path: &std::path::Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let aligned = format::aligned_copy(&bytes);
    format::verify_deep(&aligned)?;
    let index = format::open(&aligned)?;
    let h = &index.header;
    println!("artifact        {}", path.display());
    println!("sha256          {}", index_pack::sha256_hex(&bytes));
    println!("format version  {}", h.format_version);
    println!("codec           {}", h.codec.native().name());
    println!("references      {} ({} fraud)", h.n_refs, h.n_fraud);
    println!("source sha256   {}", format::hex(&h.source_sha256));
    println!(
        "cells           {} (k-means, {} iterations, seed {})",
        h.cells, h.kmeans_iters, h.kmeans_seed
    );
    println!(
        "partitions      {} (key x label), lists {}",
        index.partitions.len(),
        index.lists.len()
    );
    println!(
        "tree            {} nodes ({:.1} MB of boxes), depth {}..{}",
        index.node_children.len(),
        (index.node_bounds.len() * std::mem::size_of::<format::BoundsGroup>()) as f64 / 1e6,
        depths(index).0,
        depths(index).1
    );
    println!(
        "split weights   {:?} (by dimension)",
        h.split_weights.map(|w| w.to_native())
    );
    println!(
        "blocks          {} (at most {} rows)",
        index.blocks.len(),
        h.block_rows
    );
    println!("slots           {}", index.ids.len());
    println!("packer          {}", h.packer);
    println!("checksum        ok");
    Ok(())
}

/// The shortest and the longest root-to-block path over all partitions' trees.
fn depths(index: &format::ArchivedIndex) -> (usize, usize) {
    let (mut lo, mut hi) = (usize::MAX, 0);
    let mut stack: Vec<(u32, usize)> = index
        .partitions
        .iter()
        .map(|p| (p.root.to_native(), 0))
        .collect();
    while let Some((c, d)) = stack.pop() {
        if c & format::BLOCK_BIT != 0 {
            (lo, hi) = (lo.min(d), hi.max(d));
            continue;
        }
        for child in index.node_children[c as usize].iter() {
            if child.to_native() != format::NO_CHILD {
                stack.push((child.to_native(), d + 1));
            }
        }
    }
    (lo, hi)
}
