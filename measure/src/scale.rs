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
//! row beside the synthetic ones. Each step keeps its result under `<target>/scale/<N>/` and is
//! not run again while it is there (`--fresh` runs every step anew). Ends with a Markdown
//! record and a log-log chart of each cost against N.

use crate::cold_start;
use anyhow::{ensure, Context, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xtask::lambda::package;
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
    #[arg(long, value_delimiter = ',', value_parser = ["pack", "search", "exact", "build", "cold"])]
    steps: Vec<String>,
    /// Run every step again, even when its result is there.
    #[arg(long)]
    fresh: bool,
    /// Cold starts per mode at each size.
    #[arg(long, default_value_t = 3)]
    starts: usize,
    /// Write the record here (Markdown) and its chart beside it (.svg).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

/// One reference set: its name and files.
struct Set {
    name: String,
    n: usize,
    dir: PathBuf,
    refs: PathBuf,
}

/// What was measured of one set (each step's own JSON, as it printed it).
#[derive(Default, Serialize, Deserialize)]
struct Row {
    name: String,
    n: usize,
    pack: Option<Value>,
    search_hot: Option<Value>,
    search_evicted: Option<Value>,
    exact: Option<Value>,
    build: Option<Value>,
    cold: Option<Value>,
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let base = util::target_dir().join("scale");
    std::fs::create_dir_all(&base)?;
    let mut sets: Vec<Set> = a
        .sizes
        .iter()
        .map(|&n| {
            let dir = base.join(n.to_string());
            Set { name: short(n), n, refs: dir.join("references.json.gz"), dir }
        })
        .collect();
    if a.contest {
        let dir = base.join("contest");
        let refs = root().join("resources/references.json.gz");
        sets.insert(0, Set { name: "contest 3M".into(), n: 3_000_000, dir, refs });
    }
    // A step's name on the command line; its two searches are one step there.
    let want = |s: &str| {
        let s = s.strip_prefix("search_").map_or(s, |_| "search");
        a.steps.is_empty() || a.steps.iter().any(|x| x == s)
    };
    let (labeller, index_pack, local_runner) =
        (util::built("labeller")?, util::built("index-pack")?, util::built("local-runner")?);
    util::build_workspace()?; // the search_stats example
    let mut rows = Vec::new();
    for set in &sets {
        std::fs::create_dir_all(&set.dir)?;
        let step = |name: &str, f: &mut dyn FnMut() -> Result<Value>| -> Result<Option<Value>> {
            let file = set.dir.join(format!("{name}.json"));
            if !a.fresh && file.exists() {
                return Ok(Some(serde_json::from_str(&std::fs::read_to_string(&file)?)?));
            }
            if !want(name) && !matches!(name, "references" | "pack") {
                return Ok(None);
            }
            log!("scale {}: {name}", set.name);
            let v = f().with_context(|| format!("scale {}: {name}", set.name))?;
            util::write_json(&file, &v)?;
            Ok(Some(v))
        };
        if !set.refs.exists() {
            let out = set.refs.display().to_string();
            let (n, seed) = (set.n.to_string(), a.seed.to_string());
            util::run(&cmd!(
                &labeller,
                "generate-references",
                "--count",
                n,
                "--seed",
                seed,
                "--out",
                out
            ))?;
        }
        let index = set.dir.join("index.idx");
        let mut row = Row { name: set.name.clone(), n: set.n, ..Row::default() };
        row.pack = step("pack", &mut || {
            let (refs, out) = (set.refs.display().to_string(), index.display().to_string());
            let e = cmd!(
                &index_pack,
                "build",
                "--references",
                refs,
                "--output",
                out,
                "--accept-any-references"
            );
            util::last_json(&util::read(&e)?, "index-pack build")
        })?;
        for (name, evict) in [("search_hot", 0), ("search_evicted", 8192)] {
            let v = step(name, &mut || search_stats(&index, evict))?;
            if name == "search_hot" {
                row.search_hot = v
            } else {
                row.search_evicted = v
            }
        }
        row.exact = step("exact", &mut || {
            let (refs, idx, seed) =
                (set.refs.display().to_string(), index.display().to_string(), a.seed.to_string());
            let e = cmd!(
                &local_runner,
                "verify",
                util::TEST_SET,
                "--neighbours",
                "--index",
                idx,
                "--references",
                refs,
                "--sample",
                "0",
                "--generated",
                "2000",
                "--adversarial",
                "500",
                "--seed",
                seed
            );
            util::last_json(&util::read(&e)?, "local-runner verify --neighbours")
        })?;
        row.build = step("build", &mut || timed_shipped_build(&index))?;
        row.cold = step("cold", &mut || {
            // The package of the shipped build with this index (built again only if the last
            // shipped build embedded another).
            std::env::set_var("FRAUD_INDEX_ARTIFACT_IN", &index);
            let pkg = package::build(false);
            std::env::remove_var("FRAUD_INDEX_ARTIFACT_IN");
            let pkg = pkg?;
            let (starts, summary) =
                cold_start::cold_starts(&pkg, a.starts, set.name.starts_with("contest"))?;
            Ok(
                serde_json::json!({"bootstrap_bytes": pkg.unzipped_bytes, "zip_bytes": pkg.zipped_bytes, "starts": starts, "summary": summary}),
            )
        })?;
        rows.push(row);
    }
    let record = markdown(&a, &rows);
    println!("{record}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &record)?;
        chart(&path.with_extension("svg"), &rows)?;
        log!("wrote {} and its chart", path.display());
    }
    let exact = rows.iter().all(|r| {
        r.exact.as_ref().is_none_or(|e| {
            e["vector_differences"] == 0
                && e["neighbour_differences"] == 0
                && e["decision_differences"] == 0
        })
    });
    let figures =
        format!("{} sets, exact: {exact}, {:.0} s", rows.len(), t.elapsed().as_secs_f64());
    util::verdict("measure scale", exact, &figures, &rows)
}

fn short(n: usize) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1_000)
    }
}

/// The `search_stats` example of the workspace build on the public set's queries, its JSON.
fn search_stats(index: &Path, evict_kb: usize) -> Result<Value> {
    let example = util::target_dir().join(util::PROFILE).join("examples/search_stats");
    ensure!(example.exists(), "no {}: run `cargo xtask build`", example.display());
    let e = cmd!(example)
        .env("INDEX_FILE", index)
        .env("JSON", "1")
        .env("EVICT_KB", evict_kb.to_string());
    util::last_json(&util::read(&e)?, "search_stats")
}

/// The shipped build with `index` embedded: its wall time and the largest process's peak
/// memory (GNU time's %M over cargo and the rustc it waits for).
fn timed_shipped_build(index: &Path) -> Result<Value> {
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
    Ok(serde_json::json!({
        "wall_s": wall_s, "peak_rss_mb": kb / 1024.0, "form": format!("{form:?}").to_lowercase(),
        "local_runner_bytes": len("local-runner"), "bootstrap_bytes": len("bootstrap"),
    }))
}

/// The record: one row per set, every figure.
fn markdown(a: &Args, rows: &[Row]) -> String {
    let commit = util::read(&cmd!("git", "rev-parse", "--short", "HEAD")).unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines().find_map(|l| {
            Some(l.strip_prefix("model name")?.trim_start_matches([' ', '\t', ':']).to_string())
        })
    });
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = format!(
        "# The same function at {} references\n\nCommand: `cargo measure scale --sizes {} --seed {}{}`; {}; commit {}; {} cores ({}); load average {}. A step's result is kept under `target/scale/<N>/` and reused by the next run, so the rows of one record may come from runs of one day.\n\n",
        a.sizes.iter().map(|&n| short(n)).collect::<Vec<_>>().join(", "),
        a.sizes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
        a.seed,
        if a.contest { " --contest" } else { "" },
        util::date(),
        commit.trim(),
        cores,
        cpu.as_deref().unwrap_or("CPU unknown"),
        util::loadavg()
    );
    let f = |v: &Option<Value>, path: &[&str]| -> String {
        let mut x = match v {
            Some(v) => v,
            None => return "-".into(),
        };
        for p in path {
            // A step's JSON holds arrays too (the cold starts' summary): "0" indexes them.
            x = match (x, p.parse::<usize>()) {
                (Value::Array(_), Ok(i)) => &x[i],
                _ => &x[*p],
            };
        }
        match x.as_f64() {
            Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{n:.0}"),
            Some(n) => format!("{n:.2}"),
            None if x.is_null() => "-".into(),
            None => x.as_str().map_or_else(|| x.to_string(), str::to_string),
        }
    };
    s += "### Packing (`index-pack build`)\n\n| set | references | read s | k-means s | assignment s | layout s | write s | total s | peak MB | artifact bytes |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        let p = &r.pack;
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            r.n,
            f(p, &["phases_s", "read_s"]),
            f(p, &["phases_s", "kmeans_s"]),
            f(p, &["phases_s", "assign_s"]),
            f(p, &["phases_s", "layout_s"]),
            f(p, &["phases_s", "write_s"]),
            f(p, &["total_s"]),
            f(p, &["peak_rss_mb"]),
            f(p, &["bytes"])
        );
    }
    s += "\n### Search per query (public set's 54,100 queries; ns; hot: best of 10 runs of 5,000 queries; evicted: 8 MiB walked before each)\n\n| set | hot p50 | hot p99 | evicted p50 | evicted p99 | rows mean | rows p99 | blocks mean | blocks p99 | bytes mean | bytes p99 |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        let (h, e) = (&r.search_hot, &r.search_evicted);
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            f(h, &["figures", "hot search ns", "p50"]),
            f(h, &["figures", "hot search ns", "p99"]),
            f(e, &["figures", "search ns", "p50"]),
            f(e, &["figures", "search ns", "p99"]),
            f(h, &["figures", "rows scanned", "mean"]),
            f(h, &["figures", "rows scanned", "p99"]),
            f(h, &["figures", "blocks scanned", "mean"]),
            f(h, &["figures", "blocks scanned", "p99"]),
            f(h, &["figures", "bytes touched", "mean"]),
            f(h, &["figures", "bytes touched", "p99"])
        );
    }
    s += "\n### Exactness (`local-runner verify --neighbours`, the labeller's brute force over the same references)\n\n| set | compared | generated | adversarial | vector differences | neighbour differences | decision differences | ties across 5th | wall s |\n|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        let x = &r.exact;
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            f(x, &["compared"]),
            f(x, &["generated"]),
            f(x, &["adversarial"]),
            f(x, &["vector_differences"]),
            f(x, &["neighbour_differences"]),
            f(x, &["decision_differences"]),
            f(x, &["ties_across_fifth"]),
            f(x, &["wall_s"])
        );
    }
    s += "\n### The index in the binary (`cargo xtask build --shipped` with the artifact embedded; form: `index_pack::embed`, `file` = beside the binary) and the Lambda bootstrap from cold storage in the runtime interface emulator (medians of the starts; init: INIT REPORT; first 10: the Duration of the first 10 queries summed; resident: file-backed RSS after 100 queries)\n\n| set | form | build s | build peak MB | local-runner bytes | bootstrap bytes | init lazy ms | init prefault ms | first 10 lazy ms | first 10 prefault ms | index MB resident after 100, lazy |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        let (b, c) = (&r.build, &r.cold);
        let med = |mode: usize, k: usize| {
            f(c, &["summary", &mode.to_string(), "median", "v", &k.to_string()])
        };
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            f(b, &["form"]),
            f(b, &["wall_s"]),
            f(b, &["peak_rss_mb"]),
            f(b, &["local_runner_bytes"]),
            f(b, &["bootstrap_bytes"]),
            med(0, 0),
            med(1, 0),
            med(0, 4),
            med(1, 4),
            med(0, 11)
        );
    }
    s + &ratios(rows)
}

/// The ratios the scaling targets are stated in (docs/SCALING.md): the largest synthetic set
/// against the synthetic 3M, and the synthetic 3M against the contest's.
fn ratios(rows: &[Row]) -> String {
    let get = |name: &str| rows.iter().find(|r| r.name == name);
    let num = |v: &Option<Value>, path: &[&str]| {
        path.iter().try_fold(v.as_ref()?, |x, p| x.get(*p))?.as_f64()
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let hot = |r: &Row| num(&r.search_hot, &["figures", "hot search ns", "p99"]);
    let evicted = |r: &Row| num(&r.search_evicted, &["figures", "search ns", "p99"]);
    let rows_mean = |r: &Row| num(&r.search_hot, &["figures", "rows scanned", "mean"]);
    let bytes_mean = |r: &Row| num(&r.search_hot, &["figures", "bytes touched", "mean"]);
    let pack_s = |r: &Row| num(&r.pack, &["total_s"]);
    let mut s = String::new();
    let synthetic = rows.iter().filter(|r| !r.name.starts_with("contest"));
    if let Some(base) = get("3M") {
        let mut table = String::new();
        for big in synthetic.filter(|r| r.n > base.n) {
            let (peak, bytes) = (num(&big.pack, &["peak_rss_mb"]), num(&big.pack, &["bytes"]));
            let allowance = bytes.map(|b| 3.0 * b / 1e6 + 1000.0);
            table += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                big.name,
                ratio(hot(big), hot(base)),
                ratio(evicted(big), evicted(base)),
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
            ratio(hot(syn), hot(contest)),
            ratio(evicted(syn), evicted(contest)),
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
        ("artifact bytes", |r| r.pack.as_ref()?["bytes"].as_f64()),
        ("packing time", |r| r.pack.as_ref()?["total_s"].as_f64()),
        ("packing peak memory", |r| r.pack.as_ref()?["peak_rss_mb"].as_f64()),
        ("search p99 hot", |r| r.search_hot.as_ref()?["figures"]["hot search ns"]["p99"].as_f64()),
        ("search p99 evicted", |r| {
            r.search_evicted.as_ref()?["figures"]["search ns"]["p99"].as_f64()
        }),
        ("rows per query (mean)", |r| {
            r.search_hot.as_ref()?["figures"]["rows scanned"]["mean"].as_f64()
        }),
        ("build time", |r| r.build.as_ref()?["wall_s"].as_f64()),
        ("build peak memory", |r| r.build.as_ref()?["peak_rss_mb"].as_f64()),
        ("Lambda init, prefault (cold storage)", |r| {
            r.cold.as_ref()?["summary"][1]["median"]["v"][0].as_f64()
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
