//! `cargo xtask stack batch`: alternated runs of several configurations (round after round, so
//! the machine's drift hits them alike), then a table of every run (p50, p99, score, errors, CPU
//! per request per container = cgroup CPU over the run / requests), the medians per configuration,
//! and a chart of the per-second offered rate and p50/p99 (plot.rs). Written to
//! target/xtask/stack/<time>-batch.{md,svg,json}; `--publish` also writes
//! docs/results/<date>-stack-batch[-N].{md,svg} (the first free name).
//!
//! A configuration is `NAME`, `NAME=FILE[,FILE...]` or `NAME=compose:FILE[,FILE...]`:
//! - `floor` is HAProxy answering by itself (docker/compose.floor.yml + FILEs);
//! - any other name is the contest stack with the batch's `-f` files, then FILEs, as compose
//!   overrides (`bound` alone is the stack with docker/bound.yml);
//! - `compose:` makes FILEs a whole compose project of its own, e.g. another entry's as its
//!   author wrote it (`--config peer=compose:docker/peer/compose.yml`): the first file is its
//!   base, the others its overrides, the batch's `-f` files do not apply, the project is named
//!   `fraud<NAME>` and runs from the first file's directory, and its images must exist (the
//!   harness builds only ours). It must serve on port 9999; readiness is asked there only
//!   (`GET /ready` 2xx, or `POST /fraud-score` 200 where it has no `/ready`), our stack's layout
//!   and least-privilege check is skipped (its limit sums are logged), and CPU per request is
//!   reported for each of its services by name (`docker-compose config --services`).
//!
//! Default: floor, bound (backends that do no work), stack. The tables have one CPU column per
//! service name seen in the batch, and `all`, the sum over a run's containers.

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
    /// NAME, NAME=FILE[,FILE...] (the stack, or `floor`, with FILEs as overrides) or
    /// NAME=compose:FILE[,FILE...] (a whole external compose project on port 9999, e.g. another
    /// entry's; `-f` does not apply). Repeatable; order kept. Default: floor, bound, stack.
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

/// What a configuration's files apply to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Base {
    /// docker/compose.floor.yml; the files are overrides.
    Floor,
    /// docker-compose.yml; the batch's `-f` files, then the files, are overrides.
    Stack,
    /// Nothing of ours: the files are a whole compose project (`compose:`).
    Compose,
}

#[derive(Clone, Debug, Serialize)]
struct Configuration {
    name: String,
    base: Base,
    files: Vec<PathBuf>,
}

impl Configuration {
    fn parse(spec: &str) -> Result<Configuration> {
        let (name, rest) = spec.split_once('=').unwrap_or((spec, ""));
        if name.is_empty() {
            bail!("--config {spec:?}: no name before `=`");
        }
        let (base, rest) = match rest.strip_prefix("compose:") {
            Some(files) => (Base::Compose, files),
            None if name == "floor" => (Base::Floor, rest),
            None => (Base::Stack, rest),
        };
        let mut files: Vec<PathBuf> = rest
            .split(',')
            .filter(|f| !f.is_empty())
            .map(PathBuf::from)
            .collect();
        match base {
            Base::Compose if files.is_empty() => {
                bail!("--config {spec:?}: `compose:` needs a compose file")
            }
            // `bound` alone means the bound, as in the default list (not the plain stack).
            Base::Stack if name == "bound" && files.is_empty() => files.push(PathBuf::from(BOUND)),
            _ => {}
        }
        Ok(Configuration {
            name: name.to_string(),
            base,
            files,
        })
    }
    fn compose(&self, extra: &[PathBuf]) -> Compose {
        match self.base {
            Base::Floor => Compose::floor(&self.files),
            Base::Stack => Compose::stack(&[extra, &self.files[..]].concat()),
            Base::Compose => Compose::external(&self.name, &self.files),
        }
    }
    /// The configuration as the batch's markdown names it.
    fn describe(&self) -> String {
        let files = self
            .files
            .iter()
            .map(|f| format!("`{}`", f.display()))
            .collect::<Vec<_>>()
            .join(", ");
        match self.base {
            Base::Compose => format!(
                "`{}` (external compose {files}, run as is; our stack check not applied)",
                self.name
            ),
            _ if self.files.is_empty() => format!("`{}`", self.name),
            _ => format!("`{}` ({files})", self.name),
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

/// The CPU columns: every service name of the batch's runs, in order of first appearance
/// (ours: haproxy, api1, api2; an external project's are its own), then `all`.
fn service_columns(runs: &[LoadRun]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in runs.iter().flat_map(|r| &r.containers) {
        if !names.contains(&c.service) {
            names.push(c.service.clone());
        }
    }
    names.push(ALL.into());
    names
}

/// The column of a run's CPU per request summed over all its containers.
const ALL: &str = "all";

/// Microseconds of CPU per request of `column` (a service, or [`ALL`]) in `r`.
fn cpu_of(r: &LoadRun, column: &str) -> Option<f64> {
    if column == ALL {
        r.containers
            .iter()
            .map(|c| r.cpu_us_per_request(&c.service))
            .sum()
    } else {
        r.cpu_us_per_request(column)
    }
}

fn cpu_cell(v: Option<f64>) -> String {
    match v {
        Some(v) if !v.is_nan() => format!("{v:.0}"),
        _ => "-".into(),
    }
}

/// The markdown tables: every run, then the medians per configuration.
fn tables(configs: &[Configuration], runs: &[LoadRun]) -> String {
    let columns = service_columns(runs);
    let cpu_head = format!("CPU us/request {}", columns.join(" | "));
    let rule = |n: usize| "|---".repeat(n) + "|\n";
    let mut t = format!(
        "| # | configuration | started (UTC) | load avg | requests | p50 ms | p99 ms | score | errors | FP / FN | {cpu_head} |\n{}",
        rule(10 + columns.len())
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
            columns
                .iter()
                .map(|c| cpu_cell(cpu_of(r, c)))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    // The reference: the bound (what the stack costs without the scorer) when the batch has it,
    // else the floor.
    let reference = ["bound", "floor"]
        .into_iter()
        .find(|name| runs_of(runs, name).next().is_some())
        .unwrap_or("floor");
    let reference_p99 = median(
        runs_of(runs, reference)
            .map(|r| r.summary.latency_ms.p99)
            .collect(),
    );
    let _ = write!(
        t,
        "\n| configuration | runs | median p50 ms | median p99 ms | p99 / {reference} | median score | median {cpu_head} |\n{}",
        rule(6 + columns.len())
    );
    for c in configs {
        let rs: Vec<&LoadRun> = runs_of(runs, &c.name).collect();
        let m =
            |f: &dyn Fn(&LoadRun) -> Option<f64>| median(rs.iter().filter_map(|r| f(r)).collect());
        let cpu = columns
            .iter()
            .map(|c| cpu_cell(Some(m(&|r| cpu_of(r, c)))))
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
            if reference_p99.is_nan() {
                "-".into()
            } else {
                format!("{:.2}x", p99 / reference_p99)
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
    let configs: Vec<Configuration> = specs
        .iter()
        .map(|s| Configuration::parse(s))
        .collect::<Result<_>>()?;
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
         cgroup CPU time over the run divided by the requests of the run; `all` is the sum over the \
         run's containers.\n\n\
         {table}\n{}\n\
         ![offered rate and per-second p50/p99 per configuration]({svg_name})\n",
        command.split_once(" stack ").map_or("batch", |(_, rest)| rest),
        loadavg(),
        configs
            .iter()
            .map(Configuration::describe)
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

    fn parse(spec: &str) -> Configuration {
        Configuration::parse(spec).unwrap()
    }

    #[test]
    fn configurations() {
        assert_eq!(parse("bound").files, vec![PathBuf::from(BOUND)]);
        assert_eq!(parse("bound").base, Base::Stack);
        let c = parse("bound=docker/bound.yml,x.yml");
        assert_eq!(c.name, "bound");
        assert_eq!(c.files.len(), 2);
        assert!(parse("floor").files.is_empty());
        assert_eq!(parse("floor").base, Base::Floor);
        assert_eq!(parse("floor").compose(&[]).project, "fraudfloor");
        assert_eq!(c.compose(&[]).files.len(), 3);
        assert_eq!(c.compose(&[PathBuf::from("o.yml")]).files.len(), 4);
    }

    #[test]
    fn external_compose_configurations() {
        let c = parse("peer=compose:/work/peer/compose.peer.yml");
        assert_eq!((c.name.as_str(), c.base), ("peer", Base::Compose));
        assert_eq!(c.files, vec![PathBuf::from("/work/peer/compose.peer.yml")]);
        // The batch's `-f` overrides are ours: they do not reach another project.
        let compose = c.compose(&[PathBuf::from("docker/experiments/cpuset-1.yml")]);
        assert_eq!(compose.project, "fraudpeer");
        assert_eq!(compose.files, c.files);
        assert_eq!(compose.dir, PathBuf::from("/work/peer"));
        assert_eq!(compose.layout, super::super::docker::Layout::External);
        let two = parse("floor=compose:/a/base.yml,/a/more.yml");
        assert_eq!((two.base, two.files.len()), (Base::Compose, 2));
        assert!(two
            .describe()
            .contains("external compose `/a/base.yml`, `/a/more.yml`"));
        assert!(Configuration::parse("peer=compose:").is_err());
        assert!(Configuration::parse("=x.yml").is_err());
        // Not a prefix anywhere else: a file named like it is an override.
        assert_eq!(parse("x=a.yml,compose:b.yml").base, Base::Stack);
    }

    /// A run of `config` with 1,000 requests whose containers used `cpu_ms` each.
    fn run_of(config: &str, cpu_ms: &[(&str, u64)]) -> LoadRun {
        let snapshot = |ns: u64| {
            serde_json::json!({"memory_limit": 1, "memory_peak": 0,
            "memory_failcnt": 0, "oom_kill": 0, "cpu_ns": ns, "nr_periods": 0,
            "nr_throttled": 0, "throttled_ns": 0})
        };
        serde_json::from_value(serde_json::json!({
            "config": config, "mode": "full", "started": "20261130T170200Z",
            "load_before": "1.00", "load_after": "1.00", "k6_exit": 0, "problems": [],
            "summary": {"mode": "full", "requests": 1000, "dropped_iterations": 0, "tp": 1,
                "tn": 1, "fp": 0, "fn": 0, "errors": 0,
                "latency_ms": {"med": 0.4, "p99": 0.9, "max": 2.0},
                "p99_score": 3000.0, "detection_score": 3000.0, "final_score": 6000.0,
                "t0_ms": 0, "windows": []},
            "containers": cpu_ms.iter().map(|(service, ms)| serde_json::json!({
                "service": service, "cpus": 0.4, "before": snapshot(0),
                "after": snapshot(ms * 1_000_000), "restarts": 0, "oom_killed": false,
                "running": true})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn cpu_columns_follow_the_services_of_each_configuration() {
        let configs = [parse("stack"), parse("peer=compose:/p/c.yml")];
        let runs = [
            run_of("stack", &[("haproxy", 80), ("api1", 40), ("api2", 45)]),
            run_of("peer", &[("api1", 60), ("api2", 70), ("lb", 10)]),
        ];
        assert_eq!(
            service_columns(&runs),
            ["haproxy", "api1", "api2", "lb", "all"]
        );
        assert_eq!(cpu_of(&runs[1], "haproxy"), None);
        assert_eq!(cpu_of(&runs[1], "all"), Some(140.0));
        let t = tables(&configs, &runs);
        assert!(
            t.contains("| CPU us/request haproxy | api1 | api2 | lb | all |"),
            "{t}"
        );
        assert!(t.contains("| 0 / 0 | 80 | 40 | 45 | - | 165 |"), "{t}");
        assert!(t.contains("| 0 / 0 | - | 60 | 70 | 10 | 140 |"), "{t}");
        assert!(
            t.contains("| peer | 1 | 0.400 | 0.900 | - | 6000.0 | - | 60 | 70 | 10 | 140 |"),
            "{t}"
        );
        // Every row has as many cells as its header.
        let cells = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = t.lines().filter(|l| !l.is_empty()).collect();
        assert!(
            lines[..4].iter().all(|l| cells(l) == cells(lines[0])),
            "{t}"
        );
        assert!(
            lines[4..].iter().all(|l| cells(l) == cells(lines[4])),
            "{t}"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
