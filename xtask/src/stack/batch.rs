//! `cargo xtask stack batch`: alternated runs of several configurations (round after round, so
//! the machine's drift hits them alike), then a table of every run (p50, p99, score, errors, CPU
//! per request per container = cgroup CPU over the run / requests), the medians per configuration,
//! and a chart of the per-second offered rate and p50/p99 (plot.rs). Written to
//! target/xtask/stack/<time>-batch.{md,svg,json}; `--publish` also writes
//! docs/results/<date>-stack-batch[-N].{md,svg} (the first free name).
//!
//! A configuration is `NAME` or `NAME=FILE[,FILE...]`: `floor` is HAProxy answering by itself
//! (docker/compose.floor.yml + FILEs); any other name is the contest stack with FILEs as compose
//! overrides. Default: floor, bound (backends that do no work), stack.

use super::docker::Compose;
use super::plot::{self, Series};
use super::run::{load_run, LoadRun};
use super::{loadavg, results_dir, utc_date, utc_stamp, Common, Shape};
use crate::cmd::root;
use crate::report::verdict;
use anyhow::{bail, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The bound: the stack with APIs that answer every request with a constant 200 from the same
/// event loop, without parsing or searching (`local-runner serve --no-work`).
pub const BOUND: &str = "docker/bound.yml";

#[derive(clap::Args)]
pub struct Args {
    /// Runs of each configuration.
    #[arg(long, default_value_t = 2)]
    runs: u32,
    /// NAME or NAME=FILE[,FILE...] (repeatable; order kept). Default: floor, bound, stack.
    #[arg(long = "config")]
    configs: Vec<String>,
    /// Also write docs/results/<date>-stack-batch[-N].{md,svg}.
    #[arg(long)]
    publish: bool,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Debug, Serialize)]
struct Configuration {
    name: String,
    files: Vec<PathBuf>,
}

impl Configuration {
    fn parse(spec: &str) -> Configuration {
        let (name, files) = spec.split_once('=').unwrap_or((spec, ""));
        let mut files: Vec<PathBuf> = files
            .split(',')
            .filter(|f| !f.is_empty())
            .map(PathBuf::from)
            .collect();
        // `bound` alone means the bound, as in the default list (not the plain stack).
        if name == "bound" && files.is_empty() {
            files.push(PathBuf::from(BOUND));
        }
        Configuration {
            name: name.to_string(),
            files,
        }
    }
    fn compose(&self, extra: &[PathBuf]) -> Compose {
        if self.name == "floor" {
            Compose::floor(&self.files)
        } else {
            Compose::stack(&[extra, &self.files[..]].concat())
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

const SERVICES: [&str; 3] = ["haproxy", "api1", "api2"];

fn cpu_cells(r: &LoadRun) -> String {
    SERVICES
        .iter()
        .map(|s| {
            r.cpu_us_per_request(s)
                .map_or("-".into(), |v| format!("{v:.0}"))
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The markdown tables: every run, then the medians per configuration.
fn tables(configs: &[Configuration], runs: &[LoadRun]) -> String {
    let mut t = String::from(
        "| # | configuration | started (UTC) | load avg | requests | p50 ms | p99 ms | score | errors | FP / FN | CPU us/request haproxy | api1 | api2 |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, r) in runs.iter().enumerate() {
        let s = &r.summary;
        let _ = writeln!(
            t,
            "| {} | {} | {}:{}:{} | {} | {} | {:.3} | {:.3} | {:.1} | {} | {} / {} | {} |",
            i + 1,
            r.config,
            &r.started[9..11],
            &r.started[11..13],
            &r.started[13..15],
            r.load_before,
            s.requests,
            s.latency_ms.med,
            s.latency_ms.p99,
            s.final_score,
            s.answers.errors,
            s.answers.fp,
            s.answers.fn_,
            cpu_cells(r)
        );
    }
    let floor = median(
        runs_of(runs, "floor")
            .map(|r| r.summary.latency_ms.p99)
            .collect(),
    );
    t.push_str(
        "\n| configuration | runs | median p50 ms | median p99 ms | p99 / floor | median score | median CPU us/request haproxy | api1 | api2 |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for c in configs {
        let rs: Vec<&LoadRun> = runs_of(runs, &c.name).collect();
        let m =
            |f: &dyn Fn(&LoadRun) -> Option<f64>| median(rs.iter().filter_map(|r| f(r)).collect());
        let cpu = SERVICES
            .iter()
            .map(|s| {
                let v = m(&|r| r.cpu_us_per_request(s));
                if v.is_nan() {
                    "-".into()
                } else {
                    format!("{v:.0}")
                }
            })
            .collect::<Vec<_>>()
            .join(" | ");
        let p99 = m(&|r| Some(r.summary.latency_ms.p99));
        let _ = writeln!(
            t,
            "| {} | {} | {:.3} | {:.3} | {} | {:.1} | {} |",
            c.name,
            rs.len(),
            m(&|r| Some(r.summary.latency_ms.med)),
            p99,
            if floor.is_nan() {
                "-".into()
            } else {
                format!("{:.2}x", p99 / floor)
            },
            m(&|r| Some(r.summary.final_score)),
            cpu
        );
    }
    t
}

/// A run's windows but the last, which is partial (requests started in the run's last fraction of
/// a second).
fn full(r: &LoadRun) -> &[super::k6::Window] {
    &r.summary.windows[..r.summary.windows.len().saturating_sub(1)]
}

fn runs_of<'a>(runs: &'a [LoadRun], name: &'a str) -> impl Iterator<Item = &'a LoadRun> {
    runs.iter().filter(move |r| r.config == name)
}

/// Per-second medians over a configuration's runs.
fn series(c: &Configuration, runs: &[LoadRun]) -> Series {
    let rs: Vec<&LoadRun> = runs_of(runs, &c.name).collect();
    let last = rs
        .iter()
        .flat_map(|r| full(r).iter().map(|w| w.w))
        .max()
        .unwrap_or(0);
    let points = (0..=last)
        .filter_map(|sec| {
            let ws: Vec<_> = rs
                .iter()
                .filter_map(|r| full(r).iter().find(|w| w.w == sec))
                .collect();
            (!ws.is_empty()).then(|| {
                let m = |f: &dyn Fn(&super::k6::Window) -> f64| {
                    median(ws.iter().map(|w| f(w)).collect())
                };
                (sec, m(&|w| w.n as f64), m(&|w| w.p50), m(&|w| w.p99))
            })
        })
        .collect();
    Series {
        name: c.name.clone(),
        points,
    }
}

#[derive(Serialize)]
struct Record<'a> {
    configs: &'a [Configuration],
    runs: &'a [LoadRun],
    failed_runs: &'a [String],
}

pub fn run(a: Args) -> Result<()> {
    let specs = if a.configs.is_empty() {
        vec![
            "floor".to_string(),
            format!("bound={BOUND}"),
            "stack".to_string(),
        ]
    } else {
        a.configs.clone()
    };
    let configs: Vec<Configuration> = specs.iter().map(|s| Configuration::parse(s)).collect();
    let mode = a.shape.mode()?;
    a.common.prepare(true, false)?;
    let load_start = loadavg();
    crate::log!(
        "batch: {} rounds of {:?} (load {load_start})",
        a.runs,
        specs
    );
    let (mut runs, mut failed) = (Vec::new(), Vec::new());
    for round in 1..=a.runs {
        for c in &configs {
            crate::log!("round {round}/{}: {}", a.runs, c.name);
            match load_run(&c.name, &c.compose(&a.common.overrides), &mode, false) {
                Ok(r) => runs.push(r),
                Err(e) => failed.push(format!("{} round {round}: {e:#}", c.name)),
            }
        }
    }
    if runs.is_empty() {
        bail!("no run of the batch completed: {failed:?}");
    }
    let stamp = utc_stamp();
    let base = results_dir()?.join(format!("{stamp}-batch"));
    let title = format!("Contest stack batch {stamp}: {}", specs.join(", "));
    let all: Vec<Series> = configs.iter().map(|c| series(c, &runs)).collect();
    plot::draw(&base.with_extension("svg"), &title, &all)?;
    let table = tables(&configs, &runs);
    println!("{table}");
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // docs/results/<date>-stack-batch[-N]: one pair of files per batch, never overwritten.
    let results = root().join("docs/results");
    let stem = (1..)
        .map(|n| match n {
            1 => format!("{}-stack-batch", utc_date()),
            n => format!("{}-stack-batch-{n}", utc_date()),
        })
        .find(|s| !results.join(format!("{s}.md")).exists())
        .unwrap_or_default();
    let svg_name = format!("{stem}.svg");
    let md = format!(
        "# Contest stack batch, {stamp}\n\n\
         Command: `cargo xtask stack {}`  \n\
         Machine: 2-core VM, load average {load_start} at the start, {} at the end; k6 1.1.0 on the same machine.  \n\
         Configurations: {}.  \n\
         Runs alternate (one of each configuration per round). CPU per request is each container's \
         cgroup CPU time over the run divided by the requests of the run.\n\n\
         {table}\n{}\n\
         ![offered rate and per-second p50/p99 per configuration]({svg_name})\n",
        command.split(" stack ").nth(1).unwrap_or("batch"),
        loadavg(),
        configs
            .iter()
            .map(|c| format!("`{}`{}", c.name, if c.files.is_empty() { String::new() } else { format!(" ({})", c.files.iter().map(|f| format!("`{}`", f.display())).collect::<Vec<_>>().join(", ")) }))
            .collect::<Vec<_>>()
            .join(", "),
        if failed.is_empty() { String::new() } else { format!("Runs that did not complete: {}\n", failed.join("; ")) },
    );
    std::fs::write(base.with_extension("md"), &md)?;
    std::fs::write(
        base.with_extension("json"),
        serde_json::to_string_pretty(&Record {
            configs: &configs,
            runs: &runs,
            failed_runs: &failed,
        })? + "\n",
    )?;
    if a.publish {
        std::fs::create_dir_all(&results)?;
        std::fs::write(results.join(format!("{stem}.md")), &md)?;
        std::fs::copy(base.with_extension("svg"), results.join(&svg_name))?;
        crate::log!("published docs/results/{stem}.md and {svg_name}");
    }
    let problems: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("{} {}: {p}", r.config, r.started))
        })
        .chain(
            runs.iter()
                .filter(|r| r.summary.answers.errors > 0)
                .map(|r| {
                    format!(
                        "{} {}: {} errors",
                        r.config, r.started, r.summary.answers.errors
                    )
                }),
        )
        .chain(failed.iter().cloned())
        .collect();
    let figures = configs
        .iter()
        .map(|c| {
            let p99 = median(
                runs_of(&runs, &c.name)
                    .map(|r| r.summary.latency_ms.p99)
                    .collect(),
            );
            format!("{} p99 median {p99:.3} ms", c.name)
        })
        .collect::<Vec<_>>()
        .join(", ");
    let figures = format!(
        "{figures} ({} runs, {}){}",
        runs.len(),
        base.with_extension("md").display(),
        if problems.is_empty() {
            String::new()
        } else {
            format!("; problems: {}", problems.join("; "))
        }
    );
    verdict(
        "stack batch",
        problems.is_empty(),
        &figures,
        &Record {
            configs: &configs,
            runs: &runs,
            failed_runs: &failed,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations() {
        assert_eq!(
            Configuration::parse("bound").files,
            vec![PathBuf::from(BOUND)]
        );
        let c = Configuration::parse("bound=docker/bound.yml,x.yml");
        assert_eq!(c.name, "bound");
        assert_eq!(c.files.len(), 2);
        assert!(Configuration::parse("floor").files.is_empty());
        assert_eq!(
            Configuration::parse("floor").compose(&[]).project,
            "fraudfloor"
        );
        assert_eq!(c.compose(&[]).files.len(), 3);
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
