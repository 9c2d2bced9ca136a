//! `index-pack`: build, inspect and verify fraud index artifacts.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use index_pack::chain;
use index_pack::edits::Edits;
use index_pack::layout::Partitioned;
use index_pack::names::Names;
use index_pack::source::{read_partitioned, Expect};
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
    /// Pack a day's changes to a set into a delta, searched with its base without packing it
    /// again: new references (`--references`, at the positions that follow the base's and
    /// those of the deltas given with `--after`), and removals and relabels of references
    /// already in the set (`--edits`, by position or id). The delta records the base it extends; a
    /// binary refuses it with another base, and a chain whose edits name a position it does
    /// not hold.
    Delta {
        /// The base artifact the delta extends.
        #[arg(long)]
        base: PathBuf,
        /// Deltas already packed for this base, in order (the new one follows them).
        #[arg(long)]
        after: Vec<PathBuf>,
        /// The new references (JSON, optionally .gz).
        #[arg(long, required_unless_present = "edits")]
        references: Option<PathBuf>,
        /// The removals and relabels (`{"remove":[P..],"relabel":[{"position":P,"label":L}..]}`;
        /// a reference can be named by its id instead of its position, `"ID"` and `{"id":ID,..}`,
        /// where the references files gave ids: the maps `<artifact>.names` beside the chain's
        /// artifacts).
        #[arg(long)]
        edits: Option<PathBuf>,
        #[arg(long, short)]
        output: PathBuf,
        /// Train this many k-means cells over the delta's own rows (default: none trained, the
        /// base's cells, so that the delta's lists fall where the base's do).
        #[arg(long)]
        cells: Option<u32>,
        /// Require this SHA-256 of the new references' decompressed JSON.
        #[arg(long)]
        references_sha256: Option<String>,
    },
    /// Fold a base and its deltas into a new base: the same set (positions, labels, gaps where
    /// references were removed) in one index, so that the request path walks one part again.
    Compact {
        #[arg(long)]
        base: PathBuf,
        /// The base's deltas, in order.
        #[arg(long, required = true)]
        delta: Vec<PathBuf>,
        #[arg(long, short)]
        output: PathBuf,
        /// Train this many k-means cells afresh (default: none trained, the base's cells: the
        /// compaction is then a new layout, seconds at 3M).
        #[arg(long)]
        cells: Option<u32>,
        /// k-means iterations when training (fewer train faster; the answers are the same, the
        /// search's work per query may differ).
        #[arg(long, default_value_t = PackOptions::default().kmeans_iters, requires = "cells")]
        kmeans_iters: u32,
    },
    /// Split a reference set into shards of consecutive positions and pack them side by side:
    /// `<output-dir>/shard-<k>-of-<count>.idx`, each answering with positions in the whole set.
    Split {
        #[arg(long, default_value = "resources/references.json.gz")]
        references: PathBuf,
        /// Number of shards.
        #[arg(long)]
        count: u32,
        #[arg(long)]
        output_dir: PathBuf,
        /// Shards packed at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Require this SHA-256 of the decompressed JSON instead of the contest's.
        #[arg(long, conflicts_with = "accept_any_references")]
        references_sha256: Option<String>,
        /// Index any references (the digest is still recorded in each shard).
        #[arg(long)]
        accept_any_references: bool,
    },
    /// Check an artifact (footer, archive, checksum, values) and print its identity and layout
    /// (`--json`: the identity as one JSON line, as the binaries report it).
    Inspect {
        artifact: PathBuf,
        #[arg(long)]
        json: bool,
    },
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
        Command::Delta {
            base,
            after,
            references,
            edits,
            output,
            cells,
            references_sha256,
        } => delta(
            &base,
            &after,
            (references.as_deref(), edits.as_deref()),
            &output,
            cells,
            references_sha256,
        ),
        Command::Compact {
            base,
            delta,
            output,
            cells,
            kmeans_iters,
        } => compact(&base, &delta, &output, (cells, kmeans_iters)),
        Command::Split {
            references,
            count,
            output_dir,
            jobs,
            references_sha256,
            accept_any_references,
        } => {
            let expect = match (references_sha256, accept_any_references) {
                (Some(s), _) => Expect::Sha256(s),
                (None, true) => Expect::Any,
                (None, false) => Expect::Contest,
            };
            split(&references, &expect, count, &output_dir, jobs)
        }
        Command::Inspect { artifact, json } => inspect(&artifact, json),
    }
}

/// An artifact file mapped read-only (opening it reads its tables, not its rows).
struct Mapped(memmap2::Mmap);

impl Mapped {
    fn open(path: &std::path::Path) -> Result<Mapped> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        // SAFETY: read-only map of an artifact nobody rewrites in place (artifacts are only
        // ever replaced by renaming a new file over them); read as plain bytes.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        Ok(Mapped(map))
    }

    fn opened(&self, path: &std::path::Path) -> Result<format::Opened<'_>> {
        format::open_with_footer(&self.0)
            .with_context(|| format!("{} is not an index", path.display()))
    }
}

/// A base and deltas mapped, in order, held to `format::check_composition` and resolved
/// (`chain::hidden_rows`).
struct Chain {
    maps: Vec<Mapped>,
    paths: Vec<PathBuf>,
}

impl Chain {
    fn open(base: &std::path::Path, deltas: &[PathBuf]) -> Result<Chain> {
        let paths: Vec<PathBuf> = std::iter::once(base.to_path_buf())
            .chain(deltas.iter().cloned())
            .collect();
        let maps = paths
            .iter()
            .map(|p| Mapped::open(p))
            .collect::<Result<_>>()?;
        Ok(Chain { maps, paths })
    }

    /// The parts, opened and checked, and which of their rows the deltas hide.
    fn resolve(&self) -> Result<(Vec<format::Opened<'_>>, chain::Hidden)> {
        let opened = self
            .maps
            .iter()
            .zip(&self.paths)
            .map(|(m, p)| m.opened(p))
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<_> = opened.iter().map(|o| (o.index, o.footer)).collect();
        let serving = match opened[0].index.header.part {
            format::ArchivedPart::Shard { .. } => format::Serving::Shard,
            _ => format::Serving::WholeSet,
        };
        format::check_composition(&parts, serving)?;
        let indexes: Vec<_> = opened.iter().map(|o| o.index).collect();
        let hidden = chain::hidden_rows(&indexes)?;
        Ok((opened, hidden))
    }

    /// The ids of the chain's references: the maps kept beside its artifacts, together.
    fn names(&self, opened: &[format::Opened<'_>]) -> Result<Names> {
        let mut all = Names::default();
        for (o, path) in opened.iter().zip(&self.paths) {
            let h = &o.index.header;
            let range = h.first_position.to_native()..o.end_position();
            if let Some(names) = Names::read_beside(path, o.footer.crc32, range)? {
                all.extend(names)
                    .with_context(|| format!("{}: the chain's ids", path.display()))?;
            }
        }
        Ok(all)
    }
}

fn delta(
    base_path: &std::path::Path,
    after: &[PathBuf],
    (references, edits_path): (Option<&std::path::Path>, Option<&std::path::Path>),
    output: &std::path::Path,
    cells: Option<u32>,
    references_sha256: Option<String>,
) -> Result<()> {
    let started = Instant::now();
    let chain_files = Chain::open(base_path, after)?;
    let (opened, hidden) = chain_files.resolve()?;
    let base = opened[0];
    let expect = references_sha256.map_or(Expect::Any, Expect::Sha256);
    let mut added = match references {
        Some(r) => read_partitioned(r, &expect, &|_| {})?,
        None => Partitioned::default(),
    };
    let names = chain_files.names(&opened)?;
    let edits = edits_path
        .map(|p| Edits::read(p, &names))
        .transpose()?
        .unwrap_or_default();
    let ids = std::mem::take(&mut added.ids);
    let indexes: Vec<_> = opened.iter().map(|o| o.index).collect();
    let d = chain::delta_rows(&indexes, &hidden, added, &edits.remove, &edits.relabel)
        .with_context(|| match edits_path {
            Some(p) => format!("{} does not apply to this set", p.display()),
            None => "the new references do not fit".into(),
        })?;
    let new_ids = Names::of_file(ids, d.first_position)?;
    if let Some((id, there, p)) = names.shared(&new_ids) {
        anyhow::bail!("the new reference at position {p} has id {id:?}, which the set already names (position {there})");
    }
    let opts = PackOptions {
        codec: base.index.header.codec.native(),
        first_position: d.first_position,
        end_position: Some(d.end_position),
        part: format::Part::Delta {
            base: base.base_ref(),
            number: (opened.len() - 1) as u32,
            previous_crc32: opened.last().expect("a base").footer.crc32,
            hides: d.hides,
            edits_sha256: edits.sha256,
        },
        ..cells_of(base.index, cells, PackOptions::default().kmeans_iters)
    };
    let index = index_pack::build(d.rows, &opts, &mut Phases::default())?;
    let written = index_pack::write_index(output, &index)?;
    new_ids.write_beside(output, written.footer.crc32)?;
    eprintln!(
        "wrote {} ({} bytes): references at positions {}..{}, {} removed, {} relabelled, after \
         base {} (CRC32 {:08x}) in {:.1} s",
        output.display(),
        written.bytes,
        d.first_position,
        d.end_position,
        edits.remove.len(),
        edits.relabel.len(),
        base_path.display(),
        base.footer.crc32,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The cells of a delta or compaction of `base`: `cells` trained afresh with `kmeans_iters`
/// iterations, or (`None`) the base's own, kept with the k-means fields that describe them.
fn cells_of(base: &format::ArchivedIndex, cells: Option<u32>, kmeans_iters: u32) -> PackOptions {
    let h = &base.header;
    let kept = || {
        base.centroids
            .iter()
            .map(|c| c.map(|v| v.to_native()))
            .collect()
    };
    PackOptions {
        cells: cells.unwrap_or(h.cells.to_native()),
        kmeans_iters: if cells.is_some() {
            kmeans_iters
        } else {
            h.kmeans_iters.to_native()
        },
        kmeans_seed: h.kmeans_seed.to_native(),
        centroids: cells.is_none().then(kept),
        ..PackOptions::default()
    }
}

fn compact(
    base_path: &std::path::Path,
    deltas: &[PathBuf],
    output: &std::path::Path,
    (cells, kmeans_iters): (Option<u32>, u32),
) -> Result<()> {
    let started = Instant::now();
    let chain_files = Chain::open(base_path, deltas)?;
    let (opened, hidden) = chain_files.resolve()?;
    let indexes: Vec<_> = opened.iter().map(|o| o.index).collect();
    let (rows, folded) = chain::compacted_rows(&indexes, &hidden)?;
    let read_s = started.elapsed().as_secs_f64();
    let end = opened.last().expect("a base").end_position();
    let h = &opened[0].index.header;
    let opts = PackOptions {
        codec: h.codec.native(),
        first_position: h.first_position.to_native(),
        end_position: Some(end),
        part: rkyv::deserialize::<format::Part, rkyv::rancor::Error>(&h.part)?,
        folded,
        ..cells_of(opened[0].index, cells, kmeans_iters)
    };
    let live = rows.len;
    let names = chain_files.names(&opened)?;
    let kept = live_names(names, &rows, opts.first_position);
    let mut phases = Phases::default();
    let index = index_pack::build(rows, &opts, &mut phases)?;
    let written = index_pack::write_index(output, &index)?;
    kept.write_beside(output, written.footer.crc32)?;
    eprintln!(
        "wrote {} ({} bytes): the {live} live references of positions 0..{end}, a base and {} \
         deltas folded, in {:.1} s",
        output.display(),
        written.bytes,
        deltas.len(),
        started.elapsed().as_secs_f64()
    );
    let report = serde_json::json!({
        "artifact": output, "bytes": written.bytes, "references": live, "end_position": end,
        "deltas": deltas.len(), "read_s": read_s, "kmeans_s": phases.kmeans_s,
        "assign_s": phases.assign_s, "layout_s": phases.layout_s,
        "total_s": started.elapsed().as_secs_f64(), "peak_rss_mb": peak_rss_mb(),
    });
    println!("{report}");
    Ok(())
}

/// The names of `rows`' live references only: a removed reference's id leaves with its row.
fn live_names(mut names: Names, rows: &Partitioned, first_position: u32) -> Names {
    if names.is_empty() {
        return names;
    }
    let len = rows
        .parts
        .iter()
        .flatten()
        .map(|r| r.index as usize + 1)
        .max();
    let mut live = vec![false; len.unwrap_or(0)];
    for r in rows.parts.iter().flatten() {
        live[r.index as usize] = true;
    }
    let is_live = |p: u32| live.get(p.wrapping_sub(first_position) as usize) == Some(&true);
    names.positions.retain(|_, p| is_live(*p));
    names
}

fn split(
    references: &std::path::Path,
    expect: &Expect,
    count: u32,
    output_dir: &std::path::Path,
    jobs: usize,
) -> Result<()> {
    anyhow::ensure!(count >= 1, "--count must be at least 1");
    let started = Instant::now();
    let whole = read_partitioned(references, expect, &|_| {})?;
    let n = whole.len as u64;
    eprintln!(
        "read {n} references in {:.1} s; packing {count} shards, {jobs} at a time",
        started.elapsed().as_secs_f64()
    );
    let bounds: Vec<u32> = (0..=count as u64)
        .map(|k| (n * k / count as u64) as u32)
        .collect();
    let set_sha256 = whole.source_sha256;
    let shards: Vec<std::sync::Mutex<Option<Partitioned>>> = whole
        .split_at_positions(&bounds)
        .into_iter()
        .map(|s| std::sync::Mutex::new(Some(s)))
        .collect();
    let next = std::sync::atomic::AtomicU32::new(0);
    let pack_one = |k: u32| -> Result<()> {
        let (lo, hi) = (bounds[k as usize], bounds[k as usize + 1]);
        let mut shard = shards[k as usize]
            .lock()
            .expect("a packing thread panicked")
            .take()
            .expect("each shard is packed once");
        let ids = Names::of_file(std::mem::take(&mut shard.ids), lo)
            .with_context(|| format!("{}: its ids", references.display()))?;
        let opts = PackOptions {
            first_position: lo,
            part: format::Part::Shard {
                number: k,
                count,
                total: n as u32,
                set_sha256,
            },
            ..PackOptions::default()
        };
        let t = Instant::now();
        let index = index_pack::build(shard, &opts, &mut Phases::default())?;
        let path = output_dir.join(format!("shard-{k}-of-{count}.idx"));
        let written = index_pack::write_index(&path, &index)?;
        ids.write_beside(&path, written.footer.crc32)?;
        eprintln!(
            "shard {k}: positions {lo}..{hi}, {} bytes in {:.1} s",
            written.bytes,
            t.elapsed().as_secs_f64()
        );
        Ok(())
    };
    std::fs::create_dir_all(output_dir)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = jobs.clamp(1, count as usize);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    index_pack::train::limit_threads(cores.div_ceil(jobs));
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= count {
                            return Ok(());
                        }
                        pack_one(k)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a packing thread panicked"))
    })?;
    let report = serde_json::json!({
        "references": n, "shards": count, "output_dir": output_dir,
        "total_s": started.elapsed().as_secs_f64(), "peak_rss_mb": peak_rss_mb(),
    });
    println!("{report}");
    Ok(())
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
    let mut parts = read_partitioned(references, expect, &|read| bar.set_position(read))?;
    bar.finish_and_clear();
    let ids = Names::of_file(std::mem::take(&mut parts.ids), 0)
        .with_context(|| format!("{}: its ids", references.display()))?;
    let mut phases = Phases {
        read_s: started.elapsed().as_secs_f64(),
        ..Phases::default()
    };
    let (n, frauds) = (parts.len as usize, parts.n_fraud());
    eprintln!(
        "read {n} references ({frauds} fraud) in {:.1} s, source SHA-256 {}",
        phases.read_s,
        format::hex(&parts.source_sha256)
    );
    let spinner = ProgressBar::new_spinner().with_message(format!(
        "training {} cells with faiss k-means, assigning, laying out lists",
        opts.cells
    ));
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let index = index_pack::build(parts, opts, &mut phases)?;
    spinner.finish_and_clear();
    let t = Instant::now();
    let written = index_pack::write_index(output, &index)?;
    drop(index);
    ids.write_beside(output, written.footer.crc32)?;
    phases.write_s = t.elapsed().as_secs_f64();
    let (bytes, sha256) = (written.bytes, written.sha256);
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
        bytes,
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

fn inspect(path: &std::path::Path, json: bool) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let aligned = format::aligned_copy(&bytes);
    format::verify_deep(&aligned)?;
    let opened = format::open_with_footer(&aligned)?;
    let identity = format::Identity::of(&opened);
    if json {
        println!("{}", serde_json::to_string(&identity)?);
        return Ok(());
    }
    let index = opened.index;
    let h = &index.header;
    println!("artifact        {}", path.display());
    println!("sha256          {}", index_pack::sha256_hex(&bytes));
    println!("format version  {}", identity.format_version);
    println!("crc32           {}", identity.crc32);
    println!("codec           {}", h.codec.native().name());
    println!("references      {} ({} fraud)", h.n_refs, h.n_fraud);
    println!("references sha256 {}", identity.references_sha256);
    println!(
        "part            {} (positions {}..{})",
        identity.part, identity.first_position, identity.end_position
    );
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
    println!("packer          {}", identity.packer);
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
