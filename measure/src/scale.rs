//! `cargo measure scale`: the same function over reference sets of other sizes (docs/SCALING.md).
//!
//! For each size N: references drawn the way the contest's generator draws its own (`labeller
//! generate-references`, seeded), packed (`index-pack build`: time by phase, peak memory,
//! artifact bytes), searched on the public set's queries (the `search_stats` example of the
//! workspace build: hot, and with 8 MiB of other memory walked before each query; rows, blocks,
//! bytes per query), held exact against the labeller's brute force (`local-runner verify
//! --neighbours`: generated and adversarial queries), embedded in the shipped binaries (the
//! build's time and peak memory, GNU time), and the Lambda bootstrap started from cold storage
//! (`cold_start`: init, first 10 queries; root). `--contest` adds the contest's own 3M set as a
//! row beside the synthetic ones. Drawing, packing and the exactness check are `cargo xtask
//! scale`'s own steps (`xtask::scale`).
//!
//! Each result is kept under `<target>/scale/<set>/` by a [`key`] of everything it depends on
//! (the set, the step's options, the sources of the programs that made it) and reused by a
//! later run with the same key (`--fresh` runs every step anew). A record needs every step of
//! every set: with one missing the command fails instead of writing it. It ends with a log-log
//! chart of each cost against N.

use crate::cold_start::{self, Mode, Start, Summary, FIRST_10_MS, INIT_REPORT_MS, RSS_FILE_MB};
use anyhow::{bail, Context, Result};
use index_pack::report::{Neighbours, Packed, Searched};
use plotters::prelude::*;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xtask::lambda::package;
use xtask::scale::{self as steps, exact};
use xtask::util::{self, cmd, log, root};

#[derive(clap::Args)]
pub struct Args {
    /// Reference counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values = ["1000000", "3000000", "10000000", "30000000"])]
    sizes: Vec<usize>,
    /// Seed of the synthetic references (and of the generated queries).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also the contest's own 3M references, as a row.
    #[arg(long)]
    contest: bool,
    /// Steps to run (default all): pack, search, exact, build, cold.
    #[arg(long, value_delimiter = ',', value_parser = STEPS)]
    steps: Vec<String>,
    /// Run every step again, even when its result is kept.
    #[arg(long)]
    fresh: bool,
    /// Cold starts per mode at each size.
    #[arg(long, default_value_t = 3)]
    starts: usize,
    /// Write the record here (Markdown) and its chart beside it (.svg).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

/// The steps of a set, in order (`search` keeps two results: hot and evicted).
const STEPS: [&str; 5] = ["pack", "search", "exact", "build", "cold"];

/// What the shipped build with a set's index took.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Built {
    wall_s: f64,
    /// The largest process's peak memory (GNU time's %M over cargo and the rustc it waits for).
    peak_rss_mb: f64,
    /// How the binary carries the index (`index_pack::embed`).
    form: String,
    local_runner_bytes: u64,
    bootstrap_bytes: u64,
}

/// The Lambda package of a set's index, and its starts from cold storage.
#[derive(Default, Serialize, Deserialize)]
struct Cold {
    bootstrap_bytes: u64,
    zip_bytes: u64,
    starts: Vec<Start>,
    summary: Vec<Summary>,
}

impl Cold {
    /// The median over the starts in `mode` of the figure at `at` of [`Start::v`].
    fn median(&self, mode: Mode, at: usize) -> f64 {
        let m = self.summary.iter().find(|s| s.median.mode == mode);
        m.map_or(f64::NAN, |s| s.median.v[at])
    }
}

/// What was measured of one set.
#[derive(Default, Serialize)]
struct Row {
    name: String,
    n: usize,
    pack: Option<Packed>,
    search_hot: Option<Searched>,
    search_evicted: Option<Searched>,
    exact: Option<Neighbours>,
    build: Option<Built>,
    cold: Option<Cold>,
}

impl Row {
    /// The steps this set has no result of.
    fn missing(&self) -> Vec<&'static str> {
        let have = [
            self.pack.is_some(),
            self.search_hot.is_some() && self.search_evicted.is_some(),
            self.exact.is_some(),
            self.build.is_some(),
            self.cold.is_some(),
        ];
        STEPS.into_iter().zip(have).filter(|(_, h)| !h).map(|(s, _)| s).collect()
    }

    /// A figure of the search, hot or evicted.
    fn search(&self, hot: bool, figure: &str) -> Option<index_pack::report::Spread> {
        let s = if hot { &self.search_hot } else { &self.search_evicted };
        Some(s.as_ref()?.figure(figure))
    }
}

/// The key a result is kept under: a digest of everything it depends on.
fn key(parts: &[&str]) -> String {
    util::sha256(parts.join("\n").as_bytes())[..16].to_string()
}

/// The sources under `paths` as they are: their tree at HEAD and the uncommitted changes to
/// them (files git does not track aside), as one key.
fn sources(paths: &[&str]) -> Result<String> {
    let trees = paths.iter().map(|p| util::read(&cmd!("git", "rev-parse", format!("HEAD:{p}"))));
    let trees = trees.collect::<Result<Vec<_>>>()?.join(" ");
    let diff =
        util::read(&duct::cmd("git", ["diff", "HEAD", "--"].iter().chain(paths)).dir(root()))?;
    Ok(key(&[&trees, &diff]))
}

/// Where a set's results are kept, each under its step's name and key.
#[derive(Clone, Copy)]
struct Cache<'a> {
    dir: &'a Path,
    set: &'a str,
    fresh: bool,
    steps: &'a [String],
}

impl Cache<'_> {
    /// Whether `--steps` asks for `step` (all of them when it names none).
    fn wanted(&self, step: &str) -> bool {
        self.steps.is_empty() || self.steps.iter().any(|s| s == step)
    }

    /// The result of `name` kept under `key`, else made by `run` when `wanted` (then kept).
    fn step<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
        wanted: bool,
        run: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        let file = self.dir.join(format!("{name}-{key}.json"));
        let kept = std::fs::read_to_string(&file).ok().filter(|_| !self.fresh);
        if let Some(v) = kept.and_then(|text| serde_json::from_str(&text).ok()) {
            return Ok(Some(v));
        }
        if !wanted {
            return Ok(None);
        }
        log!("scale {}: {name}", self.set);
        let v = run().with_context(|| format!("scale {}: {name}", self.set))?;
        util::write_json(&file, &v)?;
        Ok(Some(v))
    }
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let base = util::target_dir().join("scale");
    let mut sets: Vec<(String, usize, bool)> =
        a.sizes.iter().map(|&n| (short(n), n, false)).collect();
    if a.contest {
        sets.insert(0, ("contest 3M".into(), 3_000_000, true));
    }
    let (labeller, index_pack, local_runner) =
        (util::built("labeller")?, util::built("index-pack")?, util::built("local-runner")?);
    util::build_workspace()?; // the search_stats example
                              // What made each result: the generator's, the packer's and every program's sources.
    let drawn_by = sources(&["labeller", "Cargo.lock"])?;
    let packed_by = sources(&["index-pack", "Cargo.lock"])?;
    let run_by = sources(&["function", "index-pack", "labeller", "local-runner", "Cargo.lock"])?;
    let (seed, embed) =
        (a.seed.to_string(), std::env::var("FRAUD_INDEX_EMBED").unwrap_or_default());
    let mut rows = Vec::new();
    for (name, n, contest) in sets {
        let dir = base.join(if contest { "contest".into() } else { n.to_string() });
        std::fs::create_dir_all(&dir)?;
        let cache = Cache { dir: &dir, set: &name, fresh: a.fresh, steps: &a.steps };
        let (refs, refs_key) = if contest {
            let refs = "resources/references.json.gz";
            (root().join(refs), sources(&[refs])?)
        } else {
            let k = key(&["references", &n.to_string(), &seed, &drawn_by]);
            let refs = dir.join(format!("references-{k}.json.gz"));
            if !refs.exists() {
                // Compressed because the name ends in .gz; renamed once whole.
                let drawing = dir.join("references.drawing.json.gz");
                steps::draw(&labeller, n, a.seed, None, &drawing)?;
                std::fs::rename(drawing, &refs)?;
            }
            (refs, k)
        };
        let pack_key = key(&["pack", &refs_key, &packed_by]);
        let index = dir.join(format!("index-{pack_key}.idx"));
        let mut row = Row { name: name.clone(), n, ..Row::default() };
        // Every later step reads the index: packed whenever it is not there.
        let packing = Cache { fresh: a.fresh || !index.exists(), ..cache };
        row.pack = packing
            .step("pack", &pack_key, true, || steps::pack(&index_pack, &refs, &index, ""))?;
        let k = |step: &str, options: &str| key(&[step, &pack_key, options, &run_by]);
        let search = |evict| search_stats(&index, evict);
        let wanted = cache.wanted("search");
        row.search_hot = cache.step("search_hot", &k("search", "0"), wanted, || search(0))?;
        row.search_evicted =
            cache.step("search_evicted", &k("search", "8192"), wanted, || search(8192))?;
        let options = format!("{refs_key} {seed} {} {}", steps::GENERATED, steps::ADVERSARIAL);
        let neighbours = || steps::neighbours(&local_runner, &refs, Some(&index), a.seed);
        row.exact =
            cache.step("exact", &k("exact", &options), cache.wanted("exact"), neighbours)?;
        let options = format!("{embed} {}", util::SHIPPED_RUSTFLAGS);
        let build = || timed_shipped_build(&index);
        row.build = cache.step("build", &k("build", &options), cache.wanted("build"), build)?;
        let options = format!("{} {contest}", a.starts);
        let cold = || cold_starts(&index, a.starts, contest);
        row.cold = cache.step("cold", &k("cold", &options), cache.wanted("cold"), cold)?;
        rows.push(row);
    }
    let record = record(&a, &rows);
    match &record {
        Ok(md) => {
            println!("{md}");
            if let Some(path) = &a.markdown {
                std::fs::write(path, md)?;
                chart(&path.with_extension("svg"), &rows)?;
                log!("wrote {} and its chart", path.display());
            }
        }
        Err(e) => log!("{e:#}"),
    }
    let exact = rows.iter().all(|r| r.exact.as_ref().is_some_and(exact));
    let written =
        record.as_ref().map_or_else(|e| format!("no record: {e:#}"), |_| "record written".into());
    let figures = format!(
        "{} sets, exact: {exact}, {written}, {:.0} s",
        rows.len(),
        t.elapsed().as_secs_f64()
    );
    util::verdict("measure scale", exact && record.is_ok(), &figures, &rows)
}

fn short(n: usize) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1_000)
    }
}

/// The `search_stats` example of the workspace build on the public set's queries.
fn search_stats(index: &Path, evict_kb: usize) -> Result<Searched> {
    let example = util::target_dir().join(util::PROFILE).join("examples/search_stats");
    anyhow::ensure!(example.exists(), "no {}: run `cargo xtask build`", example.display());
    let e = cmd!(example).env("INDEX_FILE", index).env("JSON", "1");
    util::last_json(&util::read(&e.env("EVICT_KB", evict_kb.to_string()))?, "search_stats")
}

/// The shipped build with `index` embedded: its wall time and the largest process's peak
/// memory (GNU time's %M over cargo and the rustc it waits for).
fn timed_shipped_build(index: &Path) -> Result<Built> {
    util::require("/usr/bin/time", "to time the builds (Debian's time)")?;
    // Only what embeds the index is rebuilt; the first build of the dependencies is apart.
    util::build_shipped()?;
    let stats = util::target_dir().join("scale/build-time.txt");
    // The workspace build at the start may have relinked this very binary (Linux then names the
    // running one "... (deleted)"); the new one at the same path is the same program.
    let me = std::env::current_exe()?;
    let me = PathBuf::from(me.to_string_lossy().trim_end_matches(" (deleted)"));
    let t = Instant::now();
    let e = duct::cmd!("/usr/bin/time", "-f", "%M %e", "-o", &stats, me, "shipped-build")
        .env("FRAUD_INDEX_ARTIFACT_IN", index);
    util::run(&e)?;
    let wall_s = t.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&stats)?;
    let kb: f64 =
        text.split_whitespace().next().and_then(|v| v.parse().ok()).context("GNU time's %M")?;
    // The binaries just built (another build_shipped here would embed the default index again).
    let dir = util::target_dir().join(util::TRIPLE).join(util::PROFILE);
    let len = |bin: &str| std::fs::metadata(dir.join(bin)).map(|m| m.len()).unwrap_or(0);
    let embed = std::env::var("FRAUD_INDEX_EMBED").ok();
    let form = index_pack::embed::Embed::choose(std::fs::metadata(index)?.len(), embed.as_deref())
        .map_err(anyhow::Error::msg)?;
    let (local_runner_bytes, bootstrap_bytes) = (len("local-runner"), len("bootstrap"));
    let form = format!("{form:?}").to_lowercase();
    Ok(Built { wall_s, peak_rss_mb: kb / 1024.0, form, local_runner_bytes, bootstrap_bytes })
}

/// The package of the shipped build with `index` (built again only if the last shipped build
/// embedded another), started from cold storage.
fn cold_starts(index: &Path, starts: usize, contest: bool) -> Result<Cold> {
    std::env::set_var("FRAUD_INDEX_ARTIFACT_IN", index);
    let pkg = package::build(false);
    std::env::remove_var("FRAUD_INDEX_ARTIFACT_IN");
    let pkg = pkg?;
    let (starts, summary) = cold_start::cold_starts(&pkg, starts, contest)?;
    Ok(Cold { bootstrap_bytes: pkg.unzipped_bytes, zip_bytes: pkg.zipped_bytes, starts, summary })
}

/// A figure as the record shows it: whole numbers whole, others with two decimals.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// A table column: its header and how a row shows in it.
type Column = (&'static str, fn(&Row) -> Option<String>);

/// A Markdown table of one row per set under `title`.
fn table(title: &str, columns: &[Column], rows: &[Row]) -> String {
    let headers: Vec<&str> = columns.iter().map(|c| c.0).collect();
    let rule = "---|".repeat(columns.len());
    let mut s = format!("\n### {title}\n\n| set | {} |\n|---|{rule}\n", headers.join(" | "));
    for r in rows {
        let cells: Vec<String> = columns.iter().map(|c| c.1(r).unwrap_or("-".into())).collect();
        s += &format!("| {} | {} |\n", r.name, cells.join(" | "));
    }
    s
}

/// The record: one row per set, every figure; refused when a set misses a step.
fn record(a: &Args, rows: &[Row]) -> Result<String> {
    let missing = util::list(rows.iter().filter(|r| !r.missing().is_empty()), |r| {
        format!("{} {}", r.name, r.missing().join(" "))
    });
    if !missing.is_empty() {
        bail!("no record without every step of every set; missing: {missing} (run them: `--steps` leaves others out)");
    }
    let commit = util::read(&cmd!("git", "rev-parse", "--short", "HEAD")).unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines().find_map(|l| {
            Some(l.strip_prefix("model name")?.trim_start_matches([' ', '\t', ':']).to_string())
        })
    });
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = format!(
        "# The same function at {} references\n\nCommand: `cargo measure scale --sizes {} --seed {}{}`; {}; commit {}; {} cores ({}); load average {}. Each result is kept under `target/scale/<N>/` by a key of all it depends on (the set, the step's options, the sources of the programs that made it) and reused by a run with the same key, so the rows of one record may come from several runs.\n",
        util::list(&a.sizes, |&n| short(n)),
        util::list(&a.sizes, |n| n.to_string()).replace(", ", ","),
        a.seed,
        if a.contest { " --contest" } else { "" },
        util::date(),
        commit.trim(),
        cores,
        cpu.as_deref().unwrap_or("CPU unknown"),
        util::loadavg()
    );
    let packing: [Column; 9] = [
        ("references", |r| Some(r.n.to_string())),
        ("read s", |r| Some(num(r.pack.as_ref()?.phases_s.read_s))),
        ("k-means s", |r| Some(num(r.pack.as_ref()?.phases_s.kmeans_s))),
        ("assignment s", |r| Some(num(r.pack.as_ref()?.phases_s.assign_s))),
        ("layout s", |r| Some(num(r.pack.as_ref()?.phases_s.layout_s))),
        ("write s", |r| Some(num(r.pack.as_ref()?.phases_s.write_s))),
        ("total s", |r| Some(num(r.pack.as_ref()?.total_s))),
        ("peak MB", |r| Some(num(r.pack.as_ref()?.peak_rss_mb))),
        ("artifact bytes", |r| Some(r.pack.as_ref()?.bytes.to_string())),
    ];
    s += &table("Packing (`index-pack build`)", &packing, rows);
    let search: [Column; 10] = [
        ("hot p50", |r| Some(r.search(true, Searched::HOT_NS)?.p50.to_string())),
        ("hot p99", |r| Some(r.search(true, Searched::HOT_NS)?.p99.to_string())),
        ("evicted p50", |r| Some(r.search(false, Searched::NS)?.p50.to_string())),
        ("evicted p99", |r| Some(r.search(false, Searched::NS)?.p99.to_string())),
        ("rows mean", |r| Some(r.search(true, Searched::ROWS)?.mean.to_string())),
        ("rows p99", |r| Some(r.search(true, Searched::ROWS)?.p99.to_string())),
        ("blocks mean", |r| Some(r.search(true, Searched::BLOCKS)?.mean.to_string())),
        ("blocks p99", |r| Some(r.search(true, Searched::BLOCKS)?.p99.to_string())),
        ("bytes mean", |r| Some(r.search(true, Searched::BYTES)?.mean.to_string())),
        ("bytes p99", |r| Some(r.search(true, Searched::BYTES)?.p99.to_string())),
    ];
    s += &table("Search per query (public set's 54,100 queries; ns; hot: best of 10 runs of 5,000 queries; evicted: 8 MiB walked before each)", &search, rows);
    let exactness: [Column; 8] = [
        ("compared", |r| Some(r.exact.as_ref()?.compared.to_string())),
        ("generated", |r| Some(r.exact.as_ref()?.generated.to_string())),
        ("adversarial", |r| Some(r.exact.as_ref()?.adversarial.to_string())),
        ("vector differences", |r| Some(r.exact.as_ref()?.vector_differences.to_string())),
        ("neighbour differences", |r| Some(r.exact.as_ref()?.neighbour_differences.to_string())),
        ("decision differences", |r| Some(r.exact.as_ref()?.decision_differences.to_string())),
        ("ties across 5th", |r| Some(r.exact.as_ref()?.ties_across_fifth.to_string())),
        ("wall s", |r| Some(num(r.exact.as_ref()?.wall_s))),
    ];
    s += &table("Exactness (`local-runner verify --neighbours`, the labeller's brute force over the same references)", &exactness, rows);
    let binary: [Column; 10] = [
        ("form", |r| Some(r.build.as_ref()?.form.clone())),
        ("build s", |r| Some(num(r.build.as_ref()?.wall_s))),
        ("build peak MB", |r| Some(num(r.build.as_ref()?.peak_rss_mb))),
        ("local-runner bytes", |r| Some(r.build.as_ref()?.local_runner_bytes.to_string())),
        ("bootstrap bytes", |r| Some(r.build.as_ref()?.bootstrap_bytes.to_string())),
        ("init lazy ms", |r| Some(num(r.cold.as_ref()?.median(Mode::Lazy, INIT_REPORT_MS)))),
        ("init prefault ms", |r| {
            Some(num(r.cold.as_ref()?.median(Mode::Prefault, INIT_REPORT_MS)))
        }),
        ("first 10 lazy ms", |r| Some(num(r.cold.as_ref()?.median(Mode::Lazy, FIRST_10_MS)))),
        ("first 10 prefault ms", |r| {
            Some(num(r.cold.as_ref()?.median(Mode::Prefault, FIRST_10_MS)))
        }),
        ("index MB resident after 100, lazy", |r| {
            Some(num(r.cold.as_ref()?.median(Mode::Lazy, RSS_FILE_MB)))
        }),
    ];
    s += &table("The index in the binary (`cargo xtask build --shipped` with the artifact embedded; form: `index_pack::embed`, `file` = beside the binary) and the Lambda bootstrap from cold storage in the runtime interface emulator (medians of the starts; init: INIT REPORT; first 10: the Duration of the first 10 queries summed; resident: file-backed RSS after 100 queries)", &binary, rows);
    Ok(s + &ratios(rows))
}

/// Figures of a row the ratios and the chart compare.
fn hot_p99(r: &Row) -> Option<f64> {
    Some(r.search(true, Searched::HOT_NS)?.p99 as f64)
}
fn evicted_p99(r: &Row) -> Option<f64> {
    Some(r.search(false, Searched::NS)?.p99 as f64)
}
fn rows_mean(r: &Row) -> Option<f64> {
    Some(r.search(true, Searched::ROWS)?.mean as f64)
}
fn pack_s(r: &Row) -> Option<f64> {
    Some(r.pack.as_ref()?.total_s)
}

/// The ratios the scaling targets are stated in (docs/SCALING.md): the largest synthetic set
/// against the synthetic 3M, and the synthetic 3M against the contest's.
fn ratios(rows: &[Row]) -> String {
    let get = |name: &str| rows.iter().find(|r| r.name == name);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let bytes_mean = |r: &Row| Some(r.search(true, Searched::BYTES)?.mean as f64);
    let mut s = String::new();
    let synthetic = rows.iter().filter(|r| !r.name.starts_with("contest"));
    if let Some(base) = get("3M") {
        let mut table = String::new();
        for big in synthetic.filter(|r| r.n > base.n) {
            let pack = big.pack.as_ref();
            let (peak, bytes) = (pack.map(|p| p.peak_rss_mb), pack.map(|p| p.bytes as f64));
            let allowance = bytes.map(|b| 3.0 * b / 1e6 + 1000.0);
            table += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                big.name,
                ratio(hot_p99(big), hot_p99(base)),
                ratio(evicted_p99(big), evicted_p99(base)),
                ratio(pack_s(big), pack_s(base)),
                peak.map_or("-".into(), |p| format!("{p:.0}")),
                allowance.map_or("-".into(), |a| format!("{a:.0}")),
            );
        }
        if !table.is_empty() {
            s += "\n### Against 3M (same generator, same queries)\n\n| set | search p99 hot | search p99 evicted | packing time | packing peak MB | 3 x artifact + 1 GB, MB |\n|---|---|---|---|---|---|\n";
            s += &table;
        }
    }
    if let (Some(syn), Some(contest)) = (get("3M"), get("contest 3M")) {
        s += &format!(
            "\n### Synthetic 3M against the contest's 3M\n\n| rows mean | bytes mean | search p99 hot | search p99 evicted |\n|---|---|---|---|\n| {} | {} | {} | {} |\n",
            ratio(rows_mean(syn), rows_mean(contest)),
            ratio(bytes_mean(syn), bytes_mean(contest)),
            ratio(hot_p99(syn), hot_p99(contest)),
            ratio(evicted_p99(syn), evicted_p99(contest)),
        );
    }
    s
}

/// Each cost against N, both axes logarithmic, one line per cost (normalised to its value at the
/// smallest N, so that the slopes compare).
fn chart(path: &Path, rows: &[Row]) -> Result<()> {
    let synthetic: Vec<&Row> = rows.iter().filter(|r| !r.name.starts_with("contest")).collect();
    type Cost = (&'static str, fn(&Row) -> Option<f64>);
    let costs: [Cost; 9] = [
        ("artifact bytes", |r| Some(r.pack.as_ref()?.bytes as f64)),
        ("packing time", pack_s),
        ("packing peak memory", |r| Some(r.pack.as_ref()?.peak_rss_mb)),
        ("search p99 hot", hot_p99),
        ("search p99 evicted", evicted_p99),
        ("rows per query (mean)", rows_mean),
        ("build time", |r| Some(r.build.as_ref()?.wall_s)),
        ("build peak memory", |r| Some(r.build.as_ref()?.peak_rss_mb)),
        ("Lambda init, prefault (cold storage)", |r| {
            Some(r.cold.as_ref()?.median(Mode::Prefault, INIT_REPORT_MS))
        }),
    ];
    let series: Vec<(&str, Vec<(f64, f64)>)> = costs
        .iter()
        .map(|(name, get)| {
            let pts: Vec<(f64, f64)> =
                synthetic.iter().filter_map(|r| Some((r.n as f64, get(r)?))).collect();
            let first = pts.first().map_or(1.0, |p| p.1);
            (*name, pts.into_iter().map(|(n, v)| (n, v / first)).collect())
        })
        .collect();
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 640)).into_drawing_area();
        root.fill(&WHITE)?;
        let all = || series.iter().flat_map(|s| s.1.iter());
        let (x0, x1) = (
            all().map(|p| p.0).fold(f64::INFINITY, f64::min),
            all().map(|p| p.0).fold(1.0, f64::max),
        );
        let y1 = all().map(|p| p.1).fold(1.0, f64::max) * 1.5;
        let mut c = ChartBuilder::on(&root)
            .caption(
                "cost against the number of references (each at its smallest N = 1; log-log)",
                ("sans-serif", 18),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), (0.5f64..y1).log_scale())?;
        c.configure_mesh()
            .x_desc("references")
            .y_desc("relative cost")
            .x_labels(6)
            .max_light_lines(0)
            .x_label_formatter(&|x| short(x.round() as usize))
            .y_label_formatter(&|y| format!("{y}"))
            .draw()?;
        let colours = [
            (31, 119, 180),
            (214, 39, 40),
            (44, 160, 44),
            (148, 103, 189),
            (255, 127, 14),
            (90, 90, 90),
            (23, 190, 207),
            (188, 189, 34),
            (227, 119, 194),
        ];
        for (i, (name, pts)) in series.iter().enumerate() {
            let (r, g, b) = colours[i % colours.len()];
            let colour = RGBColor(r, g, b);
            c.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
        // The linear growth, for reference.
        let linear: Vec<(f64, f64)> =
            synthetic.iter().map(|r| (r.n as f64, r.n as f64 / synthetic[0].n as f64)).collect();
        c.draw_series(DashedLineSeries::new(linear, 6, 4, BLACK.stroke_width(1)))?
            .label("linear (dashed)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_kept_under_the_key_of_all_it_depends_on() {
        let k = |seed: &str, by: &str| key(&["references", "3000000", seed, by]);
        assert_eq!(k("42", "tree a"), k("42", "tree a"));
        assert_ne!(k("42", "tree a"), k("7", "tree a"));
        assert_ne!(k("42", "tree a"), k("42", "tree b"));
        assert_ne!(key(&["pack", "ab", "c"]), key(&["pack", "a", "bc"]));
        let dir = std::env::temp_dir().join(format!("measure-scale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let steps = ["exact".to_string()];
        let cache = Cache { dir: &dir, set: "3M", fresh: false, steps: &steps };
        let (mut ran, one, two) = (0, k("42", "tree a"), k("7", "tree a"));
        let mut step = |key: &str, fresh, wanted| {
            let c = Cache { fresh, ..cache };
            c.step("exact", key, wanted, || {
                ran += 1;
                Ok(ran)
            })
            .unwrap()
        };
        assert_eq!(step(&one, false, true), Some(1));
        assert_eq!(step(&one, false, true), Some(1), "kept under its key");
        assert_eq!(step(&two, false, false), None, "another seed's result is not this one");
        assert_eq!(step(&two, false, true), Some(2));
        assert_eq!(step(&one, true, true), Some(3), "--fresh");
        assert!(cache.wanted("exact") && !cache.wanted("build"));
        assert_eq!(sources(&["measure/src"]).unwrap().len(), 16);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_record_needs_every_step_of_every_set() {
        let a = Args {
            sizes: vec![3_000_000],
            seed: 42,
            contest: false,
            steps: vec![],
            fresh: false,
            starts: 1,
            markdown: None,
        };
        let start = |mode| Start { mode, v: [12.5; 12] };
        let summary =
            || [Mode::Lazy, Mode::Prefault].map(|m| Summary { starts: 1, median: start(m) });
        let full = || Row {
            name: "3M".into(),
            n: 3_000_000,
            pack: Some(Packed { bytes: 91_655_408, total_s: 60.5, ..Packed::default() }),
            search_hot: Some(Searched::default()),
            search_evicted: Some(Searched::default()),
            exact: Some(Neighbours { compared: 2500, ..Neighbours::default() }),
            build: Some(Built { form: "bytes".into(), ..Built::default() }),
            cold: Some(Cold { summary: summary().into(), ..Cold::default() }),
        };
        let md = record(&a, &[full()]).unwrap();
        assert!(md.contains("| 3M | 3000000 | 0 | 0 | 0 | 0 | 0 | 60.50 | 0 | 91655408 |"), "{md}");
        assert!(
            md.contains("| 3M | bytes | 0 | 0 | 0 | 0 | 12.50 | 12.50 | 12.50 | 12.50 | 12.50 |"),
            "{md}"
        );
        let partial = Row { exact: None, search_evicted: None, ..full() };
        assert_eq!(partial.missing(), ["search", "exact"]);
        let refused = record(&a, &[full(), partial]).unwrap_err().to_string();
        assert!(refused.contains("missing: 3M search exact"), "{refused}");
    }
}
