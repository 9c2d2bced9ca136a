//! `verify --neighbours`: the scorer's query vector and 5 nearest references against the
//! `labeller` crate (the contest's brute force transcribed from SPEC.md, sharing no code with
//! the scorer), payload by payload.
//!
//! Queries come from up to three places:
//! - the test file (every entry, or `--sample N` of them evenly spread over the file);
//! - `--generated N` request bodies drawn from the contest generator's distributions
//!   (`labeller::generate`, seeded by `--seed`), payloads no one has seen;
//! - `--adversarial N` queries built from the references to hit the tie rules
//!   (`labeller::adversarial`: copies of references, midpoints of close pairs, 5th/6th-place
//!   ties, the closest pairs), compared at the vector level.
//!
//! For a body, the scorer's vector (`function::vector`) must equal the labeller's, component by
//! component in units of 1e-4, or both must refuse the body. For every query, the 5 positions of
//! [`Searcher::nearest`] must be the labeller's 5, in its order, and the fraud count of
//! [`Searcher::frauds`] (the request path) the labeller's. The searcher may be a base with its
//! deltas (the labeller then reads the base's references file and the deltas' after it, each
//! checked against the digest its index records), or the shards of a split set merged as a
//! front merges them ([`Target::Shards`]). The last line on stderr gives the number of queries
//! compared, the differences and the wall time; stdout ends with the same as JSON ([`Report`]).

use anyhow::{bail, Context, Result};
use function::shard::InProcess;
use function::{payload, vector, Searcher};
use index_pack::format::{hex, ArchivedIndex, ArchivedPart};
use labeller::adversarial::{self, Kind};
use labeller::{scan, Query};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What is held to the labeller: a searcher (a base and its deltas), or shards merged.
pub enum Target<'a> {
    Searcher(Searcher<'a>),
    Shards(InProcess<'a>),
}

impl Target<'_> {
    /// The 5 nearest positions.
    fn nearest(&self, q: &[i16; 14]) -> Vec<u32> {
        match self {
            Target::Searcher(s) => s.nearest(q).iter().map(|n| n.index).collect(),
            Target::Shards(s) => s.nearest(q).iter().map(|n| n.position).collect(),
        }
    }

    /// The fraud count of the request path.
    fn frauds(&self, q: &[i16; 14]) -> usize {
        match self {
            Target::Searcher(s) => s.frauds(q),
            Target::Shards(s) => function::shard::frauds(&s.nearest(q)),
        }
    }

    /// The files the labeller must read, in order, with the digests the indexes record: the
    /// references files of the parts that add references (a compacted base's folded deltas
    /// included) and the edits files of those that edit.
    pub fn inputs(&self) -> Vec<Input> {
        let mut out = Vec::new();
        let chain = |base: &ArchivedIndex, deltas: &[&ArchivedIndex], out: &mut Vec<Input>| {
            let set = match &base.header.part {
                ArchivedPart::Shard { set_sha256, .. } => set_sha256,
                _ => &base.header.source_sha256,
            };
            let refs = Input::References(hex(set));
            if !out.contains(&refs) {
                out.push(refs);
            }
            for f in base.header.folded.iter() {
                out.extend(Input::of(&f.source_sha256, &f.edits_sha256));
            }
            for d in deltas {
                let h = &d.header;
                let added = h.end_position != h.first_position;
                let source = if added { h.source_sha256 } else { [0; 32] };
                if let ArchivedPart::Delta { edits_sha256, .. } = &h.part {
                    out.extend(Input::of(&source, edits_sha256));
                }
            }
        };
        match self {
            Target::Searcher(s) => {
                let deltas: Vec<_> = s.deltas().iter().map(|d| d.index).collect();
                chain(s.index(), &deltas, &mut out);
            }
            Target::Shards(shards) => {
                for s in &shards.0 {
                    let deltas: Vec<_> = s.deltas().iter().map(|d| d.index).collect();
                    chain(s.index(), &deltas, &mut out);
                }
            }
        }
        out
    }

    /// One line naming what is searched.
    pub fn describe(&self) -> String {
        let one = |s: &Searcher| {
            let h = &s.index().header;
            format!(
                "{} codec, {} references from position {}, {} kernels",
                h.codec.native().name(),
                h.n_refs,
                h.first_position,
                s.kernels_name()
            )
        };
        match self {
            Target::Searcher(s) => format!("index: {}; {} deltas", one(s), s.deltas().len()),
            Target::Shards(s) => {
                let shards: Vec<String> = s.0.iter().map(one).collect();
                format!("{} shards: {}", s.0.len(), shards.join("; "))
            }
        }
    }
}

/// A file the labeller reads, named by the SHA-256 (hex) its index records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    References(String),
    Edits(String),
}

impl Input {
    /// What a delta (or a folded one) was packed from: its references file, its edits file,
    /// either or both (zeros: none).
    fn of(source: &[u8; 32], edits: &[u8; 32]) -> impl Iterator<Item = Input> {
        let refs = (*source != [0; 32]).then(|| Input::References(hex(source)));
        let edits = (*edits != [0; 32]).then(|| Input::Edits(hex(edits)));
        refs.into_iter().chain(edits)
    }
}

/// The options of `verify --neighbours`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The references, read by the labeller (their SHA-256 is checked and must be the one the
    /// index was built from); repeated for a base and its deltas, in order.
    #[arg(
        long,
        requires = "neighbours",
        default_value = "resources/references.json.gz"
    )]
    pub references: Vec<PathBuf>,
    /// The edits files (`index-pack delta --edits`) of the deltas that remove or relabel, in
    /// order; the labeller applies them itself (`labeller::edits`).
    #[arg(long, requires = "neighbours")]
    pub edits: Vec<PathBuf>,
    /// Compare only this many entries of the file, evenly spread (default: all).
    #[arg(long, requires = "neighbours")]
    pub sample: Option<usize>,
    /// Also compare this many generated payloads.
    #[arg(long, requires = "neighbours", default_value_t = 0)]
    pub generated: usize,
    /// Also compare this many adversarial queries.
    #[arg(long, requires = "neighbours", default_value_t = 0)]
    pub adversarial: usize,
    /// Seed of the generated payloads and of the adversarial anchors.
    #[arg(long, requires = "neighbours", default_value_t = 2026)]
    pub seed: u64,
}

/// The summary line (its keys are part of the interface: the harness reads it as this type).
pub use index_pack::report::Neighbours as Report;

/// Where a query came from, for messages.
#[derive(Clone, Copy, Debug)]
enum Source {
    Public(usize),
    Generated(usize),
    Adversarial(Kind, usize),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Source::Public(i) => write!(f, "entry {i}"),
            Source::Generated(i) => write!(f, "generated payload {i}"),
            Source::Adversarial(k, i) => write!(f, "adversarial query {i} ({})", k.name()),
        }
    }
}

/// A query both sides agree on: fixed point for the scorer, doubles for the labeller.
struct Case {
    source: Source,
    fixed: [i16; 14],
    real: Query,
}

/// Prints at most `limit` lines.
struct Shown {
    left: usize,
}

impl Shown {
    fn line(&mut self, text: std::fmt::Arguments) {
        if self.left > 0 {
            eprintln!("  {text}");
            self.left -= 1;
        }
    }
}

/// The labeller's vector in units of 1e-4 (its components are 4-decimal doubles).
fn to_fixed(q: &Query) -> Option<[i16; 14]> {
    let k = adversarial::fixed(q)?;
    let mut out = [0i16; 14];
    for (o, &x) in out.iter_mut().zip(&k) {
        *o = i16::try_from(x).ok()?;
    }
    Some(out)
}

/// Compares the scorer's and the labeller's reading of one body.
fn compare_body(
    source: Source,
    body: &[u8],
    report: &mut Report,
    shown: &mut Shown,
    cases: &mut Vec<Case>,
) {
    let ours = payload::parse(body).and_then(|p| vector::vectorize(&p));
    let theirs = labeller::payload::query(body);
    match (ours, theirs) {
        (Err(_), Err(_)) => report.refused_by_both += 1,
        (Ok(k), Ok(q)) if to_fixed(&q) == Some(k) => cases.push(Case {
            source,
            fixed: k,
            real: q,
        }),
        (ours, theirs) => {
            report.vector_differences += 1;
            shown.line(format_args!(
                "{source}: scorer vector {ours:?}, labeller vector {theirs:?}"
            ));
        }
    }
}

/// Runs the comparison; `file` is a test file, `show` the most differences printed.
pub fn run(searcher: &Target, file: &Path, args: &Args, show: usize) -> Result<Report> {
    let start = Instant::now();
    let mut report = Report::default();
    let mut shown = Shown { left: show };
    let mut cases = Vec::new();

    let test = local_runner::verify::read(file)?;
    let total = test.entries.len();
    let picked: Vec<usize> = match args.sample {
        Some(n) if n < total => (0..n).map(|i| i * total / n).collect(),
        _ => (0..total).collect(),
    };
    for &i in &picked {
        let body = test.entries[i].request.get().as_bytes();
        compare_body(Source::Public(i), body, &mut report, &mut shown, &mut cases);
    }
    report.public = picked.len() as u64;
    for (i, body) in labeller::generate::payloads(args.generated, args.seed)
        .iter()
        .enumerate()
    {
        compare_body(
            Source::Generated(i),
            body.as_bytes(),
            &mut report,
            &mut shown,
            &mut cases,
        );
    }
    report.generated = args.generated as u64;

    let inputs = searcher.inputs();
    let wanted = |kind: fn(&Input) -> Option<&String>| -> Vec<String> {
        inputs.iter().filter_map(kind).cloned().collect()
    };
    let sources = wanted(|i| match i {
        Input::References(s) => Some(s),
        Input::Edits(_) => None,
    });
    let edit_sources = wanted(|i| match i {
        Input::Edits(s) => Some(s),
        Input::References(_) => None,
    });
    if sources.len() != args.references.len() || edit_sources.len() != args.edits.len() {
        bail!(
            "{} references files and {} edits files for indexes packed from {} and {}: give \
             the base's references, then each delta's new references (--references) and edits \
             (--edits), in order; shards take the set's references once, and their deltas' edits",
            args.references.len(),
            args.edits.len(),
            sources.len(),
            edit_sources.len()
        );
    }
    let mut refs = labeller::References::default();
    for (path, want) in args.references.iter().zip(&sources) {
        eprintln!("reading {} (labeller)", path.display());
        let part = labeller::references::read(path, false)
            .with_context(|| "the labeller needs the references the index was built from")?;
        if &part.sha256 != want {
            bail!(
                "{} has SHA-256 {}, the index was built from {want}: their neighbours cannot be compared",
                path.display(),
                part.sha256
            );
        }
        // The first part is moved, not copied: at 100M references the rows are 11.2 GB, and a
        // copy beside them does not fit a 24 GB machine.
        refs.append(part);
    }
    let mut edits = Vec::new();
    let ids = refs.rows_by_id()?;
    for (path, want) in args.edits.iter().zip(&edit_sources) {
        let e = labeller::edits::Edits::read(path, &ids)?;
        if &e.sha256 != want {
            bail!(
                "{} has SHA-256 {}, the delta was packed from {want}",
                path.display(),
                e.sha256
            );
        }
        edits.push(e);
    }
    // The references edits changed, where they were: queried on, and tied around.
    let changed = labeller::edits::changed(&refs, &edits);
    let edited = labeller::edits::Edited::apply(refs, &edits)?;
    let refs = &edited.refs;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.adversarial > 0 {
        let mut built = adversarial::queries(refs, args.adversarial, args.seed, threads);
        let targets = edited.targets(&changed);
        built.extend(adversarial::around(
            refs,
            &targets,
            args.adversarial,
            threads,
        ));
        for (i, (kind, k)) in built.iter().enumerate() {
            *report
                .adversarial_kinds
                .entry(kind.name().into())
                .or_default() += 1;
            let fixed = k.map(|x| x as i16);
            cases.push(Case {
                source: Source::Adversarial(*kind, i),
                fixed,
                real: adversarial::real(k),
            });
        }
        report.adversarial = built.len() as u64;
        if built.len() < args.adversarial {
            eprintln!(
                "warning: only {} of {} adversarial queries could be built",
                built.len(),
                args.adversarial
            );
        }
    }

    eprintln!(
        "labeller: {} queries against {} references on {threads} threads",
        cases.len(),
        refs.len()
    );
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    let queries: Vec<Query> = cases.iter().map(|c| c.real).collect();
    let oracle = scan::nearest_many(refs, &queries, scan::K + 1, threads, &|n| {
        bar.set_position(n as u64)
    });
    bar.finish_and_clear();

    for (case, hits) in cases.iter().zip(&oracle) {
        report.compared += 1;
        let want: Vec<u32> = hits
            .iter()
            .take(scan::K)
            .map(|h| edited.position(h.index))
            .collect();
        let got: Vec<u32> = searcher.nearest(&case.fixed);
        if got != want {
            report.neighbour_differences += 1;
            shown.line(format_args!(
                "{}: search {got:?}, labeller {want:?}",
                case.source
            ));
        }
        let frauds = hits.iter().take(scan::K).filter(|h| h.fraud).count();
        if searcher.frauds(&case.fixed) != frauds {
            report.decision_differences += 1;
            shown.line(format_args!(
                "{}: search counts {} frauds, labeller {frauds}",
                case.source,
                searcher.frauds(&case.fixed)
            ));
        }
        let k = case.fixed.map(i64::from);
        if adversarial::tie_across_fifth(refs, &k, hits) {
            report.ties_across_fifth += 1;
            if hits[scan::K].index < hits[scan::K - 1].index {
                report.ties_decided_by_f64 += 1;
            }
        }
    }
    report.wall_s = start.elapsed().as_secs_f64();
    Ok(report)
}

/// The human summary (stderr), ending with the line the command promises.
pub fn print(r: &Report) {
    let kinds: Vec<String> = r
        .adversarial_kinds
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    eprintln!(
        "queries: {} from the file, {} generated, {} adversarial{}",
        r.public,
        r.generated,
        r.adversarial,
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        }
    );
    eprintln!(
        "vectors: {} differences ({} bodies refused by both)",
        r.vector_differences, r.refused_by_both
    );
    eprintln!(
        "ties across 5th place: {} ({} decided by the f64 distances against the file order)",
        r.ties_across_fifth, r.ties_decided_by_f64
    );
    eprintln!(
        "compared {} queries: {} neighbour differences, {} decision differences, wall {:.1} s",
        r.compared, r.neighbour_differences, r.decision_differences, r.wall_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_of_the_labellers_vector() {
        let mut q = [0.5; 14];
        q[5] = -1.0;
        q[13] = 0.0001;
        let mut want = [5_000; 14];
        want[5] = -10_000;
        want[13] = 1;
        assert_eq!(to_fixed(&q), Some(want));
        // Not a 4-decimal value, or out of the i16 range: no fixed point.
        q[0] = 0.00415;
        assert_eq!(to_fixed(&q), None);
        q[0] = 4.0;
        assert_eq!(to_fixed(&q), None);
    }
}
