//! `labeller`: the brute-force labeller as a command.
//!
//! `labeller relabel FILE` reads a JSON array of cases `{"name", "what", "body", ...}` and
//! prints it back with what the labeller says about each body: its query `vector`, the 5
//! `neighbours` (reference indices, nearest first), the number of `frauds` among them and the
//! `expected` response body. `local-runner/tests/data/hostile-valid.json` is made this way:
//!
//! ```sh
//! cargo run --release -p labeller -- relabel local-runner/tests/data/hostile-valid.json > new.json
//! cargo run --release -p labeller -- relabel --check local-runner/tests/data/hostile-valid.json
//! ```
//!
//! With `--check` nothing is printed; the command fails if the file differs from what it would
//! print (so recorded answers cannot drift from the labeller).
//!
//! `labeller generate-csv --count N --seed S --out FILE.csv.gz` draws N requests from the contest
//! generator's distributions and writes them, labelled, in the contest's CSV layout
//! (`tests/data/final-test-data.csv.gz` is made this way; its README has the command).
//!
//! `labeller generate-references --count N --seed S --out FILE.json.gz` writes N labelled
//! references drawn the way the contest's generator draws its reference file, in its JSON
//! layout (gzip when FILE ends in .gz), streamed: reference sets of any size for the scaling
//! measurements (docs/SCALING.md).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use labeller::{payload, references, scan};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(about = "The contest's brute-force labeller, transcribed from SPEC.md")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Recompute vector, neighbours, frauds and expected body of every case in FILE.
    Relabel {
        file: PathBuf,
        /// The contest's references (their SHA-256 is checked).
        #[arg(long, default_value = "resources/references.json.gz")]
        references: PathBuf,
        /// Print nothing; fail if FILE differs from what would be printed.
        #[arg(long)]
        check: bool,
    },
    /// Draw COUNT requests from the contest generator's distributions (seeded), label each by
    /// brute force and write them in the contest's CSV layout, or in its JSON test-file layout
    /// when OUT ends in .json (gzip when OUT ends in .gz).
    GenerateCsv {
        #[arg(long)]
        count: usize,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        /// The references (their SHA-256 is checked to be the contest's unless
        /// --any-references).
        #[arg(long, default_value = "resources/references.json.gz")]
        references: PathBuf,
        /// Label against any references (a synthetic set).
        #[arg(long)]
        any_references: bool,
    },
    /// Write the labelled sample a new deployment is checked with before it takes traffic
    /// (`deploy-hook`): both decisions, the vote's edge, ties across 5th place (adversarial
    /// queries turned into bodies) and a malformed body, labelled over REFERENCES.
    DeploySample {
        #[arg(long, default_value = "resources/references.json.gz")]
        references: PathBuf,
        /// Label against any references (a synthetic set).
        #[arg(long)]
        any_references: bool,
        /// The new references of the deployed index's deltas, in order (after REFERENCES).
        #[arg(long)]
        delta_references: Vec<PathBuf>,
        /// The edits of its deltas, in order (`index-pack delta --edits`): the sample is
        /// labelled over the edited set and hits the edited references.
        #[arg(long)]
        edits: Vec<PathBuf>,
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Write COUNT references drawn the way the contest's generator draws its reference file
    /// (seeded), labelled by their profile, in its JSON layout (gzip when OUT ends in .gz).
    GenerateReferences {
        #[arg(long)]
        count: usize,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        /// Give each reference an id, this prefix and its index in the file (edits can name it).
        #[arg(long)]
        ids: Option<String>,
    },
    /// Write an edits file (`labeller::edits`) that removes REMOVE and relabels RELABEL distinct
    /// references of the set drawn at random (seeded; a relabel flips the label): a day's
    /// chargebacks and erasures for measurements and tests.
    GenerateEdits {
        /// The set's references files, in order (a base's, then its deltas' new ones).
        #[arg(long, required = true)]
        references: Vec<PathBuf>,
        /// Draw only positions in FROM..TO (default: the whole set).
        #[arg(long, default_value_t = 0)]
        from: u32,
        #[arg(long)]
        to: Option<u32>,
        #[arg(long)]
        remove: usize,
        #[arg(long)]
        relabel: usize,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        /// Name each reference by its id where its file gave it one (by position otherwise).
        #[arg(long)]
        by_id: bool,
        /// Draw the relabels among the positions this JSON array lists (the removals still from
        /// the whole range): e.g. the label frontier that `function`'s `frontier` example lists.
        #[arg(long, value_name = "FILE")]
        relabel_among: Option<PathBuf>,
    },
}

#[derive(Deserialize)]
struct Case {
    name: String,
    what: String,
    body: String,
}

#[derive(Serialize)]
struct Labelled<'a> {
    name: &'a str,
    what: &'a str,
    body: &'a str,
    vector: Vec<f64>,
    neighbours: Vec<u32>,
    frauds: usize,
    expected: String,
}

/// The response body for a number of frauds among the 5 neighbours, by SPEC.md's rule:
/// fraud_score = frauds / 5, approved = fraud_score < 0.6.
fn body(frauds: usize) -> String {
    let score = frauds as f64 / scan::K as f64;
    format!(r#"{{"approved":{},"fraud_score":{score:.1}}}"#, score < 0.6)
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Relabel {
            file,
            references,
            check,
        } => relabel(&file, &references, check),
        Command::GenerateCsv {
            count,
            seed,
            out,
            references,
            any_references,
        } => generate_csv(count, seed, &out, &references, !any_references),
        Command::GenerateReferences {
            count,
            seed,
            out,
            ids,
        } => generate_references(count, seed, ids.as_deref(), &out),
        Command::GenerateEdits {
            references,
            from,
            to,
            remove,
            relabel,
            seed,
            out,
            by_id,
            relabel_among,
        } => {
            let (edited, _) =
                labeller::edits::read_set(&references[0], false, &references[1..], &[])?;
            let refs = edited.refs;
            let range = from..to.unwrap_or(refs.len() as u32);
            let among: Option<Vec<u32>> = match &relabel_among {
                None => None,
                Some(path) => {
                    let text = std::fs::read(path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    Some(serde_json::from_slice(&text).with_context(|| {
                        format!("{}: not a JSON array of positions", path.display())
                    })?)
                }
            };
            let counts = (remove, relabel);
            let text = labeller::edits::draw(&refs, range, counts, among.as_deref(), seed, by_id)?;
            std::fs::write(&out, text)
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!(
                "wrote {remove} removals and {relabel} relabels to {}",
                out.display()
            );
            Ok(())
        }
        Command::DeploySample {
            references,
            any_references,
            delta_references,
            edits,
            seed,
            out,
        } => {
            let (edited, targets) =
                labeller::edits::read_set(&references, !any_references, &delta_references, &edits)?;
            let refs = edited.refs;
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let cases = labeller::sample::build(&refs, &targets, seed, threads);
            let kinds = |k: &str| cases.iter().filter(|c| c.kind == k).count();
            eprintln!(
                "{} cases: {} approved, {} denied, {} edge, {} tie, {} edited, {} edited_tie, {} \
                 bad request",
                cases.len(),
                kinds("approved"),
                kinds("denied"),
                kinds("edge"),
                kinds("tie"),
                kinds("edited"),
                kinds("edited_tie"),
                kinds("bad_request")
            );
            std::fs::write(&out, serde_json::to_string_pretty(&cases)? + "\n")
                .with_context(|| format!("cannot write {}", out.display()))
        }
    }
}

fn generate_references(count: usize, seed: u64, ids: Option<&str>, out: &Path) -> Result<()> {
    use std::io::Write;
    let started = std::time::Instant::now();
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut file = std::io::BufWriter::with_capacity(1 << 20, file);
    let bar = indicatif::ProgressBar::new(count as u64).with_style(
        indicatif::ProgressStyle::with_template("generating [{bar:40}] {pos}/{len} ({eta})")?
            .progress_chars("=> "),
    );
    let progress = |done: usize| bar.set_position(done as u64);
    use labeller::generate::write_references as write;
    let frauds = if out.extension().is_some_and(|e| e == "gz") {
        // Fast compression: a 30M set is ~4.5 GB of JSON.
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let frauds = write(&mut gz, count, seed, ids, &progress)?;
        gz.finish()?.flush()?;
        frauds
    } else {
        let frauds = write(&mut file, count, seed, ids, &progress)?;
        file.flush()?;
        frauds
    };
    bar.finish_and_clear();
    eprintln!(
        "wrote {} references ({frauds} fraud, {:.2} %) to {} in {:.1} s",
        count,
        100.0 * frauds as f64 / count.max(1) as f64,
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn generate_csv(
    count: usize,
    seed: u64,
    out: &Path,
    refs_path: &Path,
    contest: bool,
) -> Result<()> {
    let bodies = labeller::generate::payloads(count, seed);
    let queries = bodies
        .iter()
        .map(|b| payload::query(b.as_bytes()).map_err(|e| anyhow::anyhow!("{e}: {b}")))
        .collect::<Result<Vec<_>>>()?;
    eprintln!(
        "{count} requests (seed {seed}); reading {}",
        refs_path.display()
    );
    let refs = references::read(refs_path, contest)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    // Progress every 5 %: `nearest_many` reports the queries finished so far.
    let shown = std::sync::atomic::AtomicUsize::new(0);
    let hits = scan::nearest_many(&refs, &queries, scan::K, threads, &|done| {
        let step = done * 20 / count.max(1);
        if shown.fetch_max(step, std::sync::atomic::Ordering::Relaxed) < step {
            eprintln!(
                "labelled {done}/{count} in {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    });
    let frauds: Vec<usize> = hits
        .iter()
        .map(|h| h.iter().filter(|h| h.fraud).count())
        .collect();
    let name = out.to_string_lossy();
    let text = if name.ends_with(".json") || name.ends_with(".json.gz") {
        // The contest's test-file layout (what `local-runner verify` and the harness read),
        // each request as its generated text.
        #[derive(Serialize)]
        struct Entry {
            request: Box<serde_json::value::RawValue>,
            expected_approved: bool,
            expected_fraud_score: f64,
        }
        let entries = bodies
            .iter()
            .zip(&frauds)
            .map(|(b, &f)| {
                let score = f as f64 / scan::K as f64;
                let request = serde_json::value::RawValue::from_string(b.clone())?;
                Ok(Entry {
                    request,
                    expected_approved: score < 0.6,
                    expected_fraud_score: score,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        #[derive(Serialize)]
        struct File<'a> {
            references_checksum_sha256: &'a str,
            entries: Vec<Entry>,
        }
        let file = File {
            references_checksum_sha256: &refs.sha256,
            entries,
        };
        serde_json::to_string(&file)? + "\n"
    } else {
        let mut text = format!(
            "{}\n{}\n",
            labeller::csv::stats_line(&frauds),
            labeller::csv::HEADER
        );
        for (b, &f) in bodies.iter().zip(&frauds) {
            text.push_str(&labeller::csv::row(b, f).map_err(anyhow::Error::msg)?);
            text.push('\n');
        }
        text
    };
    let bytes = if out.extension().is_some_and(|e| e == "gz") {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(text.as_bytes())?;
        gz.finish()?
    } else {
        text.into_bytes()
    };
    std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "wrote {} ({})",
        out.display(),
        labeller::csv::stats_line(&frauds)
    );
    Ok(())
}

fn relabel(file: &Path, refs_path: &Path, check: bool) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let cases: Vec<Case> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON array of cases", file.display()))?;
    let queries = cases
        .iter()
        .map(|c| payload::query(c.body.as_bytes()).map_err(|e| anyhow::anyhow!("{}: {e}", c.name)))
        .collect::<Result<Vec<_>>>()?;
    eprintln!("{} cases; reading {}", cases.len(), refs_path.display());
    let refs = references::read(refs_path, true)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hits = scan::nearest_many(&refs, &queries, scan::K, threads, &|_| {});
    let labelled: Vec<Labelled> = cases
        .iter()
        .zip(&queries)
        .zip(&hits)
        .map(|((c, q), h)| {
            let frauds = h.iter().filter(|h| h.fraud).count();
            Labelled {
                name: &c.name,
                what: &c.what,
                body: &c.body,
                vector: q.to_vec(),
                neighbours: h.iter().map(|h| h.index).collect(),
                frauds,
                expected: body(frauds),
            }
        })
        .collect();
    // One-space indentation, as the file has always been written.
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    labelled.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))?;
    out.push(b'\n');
    if !check {
        print!("{}", String::from_utf8(out)?);
        return Ok(());
    }
    if out != text.as_bytes() {
        let old: Vec<serde_json::Value> = serde_json::from_str(&text)?;
        let new: Vec<serde_json::Value> = serde_json::from_slice(&out)?;
        let differing: Vec<String> = old
            .iter()
            .zip(&new)
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a["name"].to_string())
            .collect();
        bail!(
            "{} differs from the labeller's answers (cases {}); rerun without --check to rewrite it",
            file.display(),
            if differing.is_empty() {
                "none: formatting only".to_string()
            } else {
                differing.join(", ")
            }
        );
    }
    eprintln!(
        "{}: all {} cases are the labeller's answers",
        file.display(),
        cases.len()
    );
    Ok(())
}
