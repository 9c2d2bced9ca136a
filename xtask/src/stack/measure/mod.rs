//! The stack's instrument, which CI does not run: `cargo xtask stack batch`, alternated runs of
//! several configurations (round after round, so the machine's drift hits them alike), then a
//! table of every run (p50, p99, score, errors, CPU per request per container = cgroup CPU over
//! the run / requests), the medians per configuration, and a chart of the per-second offered
//! rate and p50/p99 ([`plot`]). Written to `<target>/xtask/stack/<time>-batch.{md,svg,json}`;
//! `--publish` also writes docs/results/<date>-stack-batch[-N].{md,svg} (the first free name).
//!
//! The configurations, in each round in this order:
//! - `--config floor|bound|stack` (repeatable): HAProxy answering by itself
//!   (docker/compose.floor.yml), the stack with backends that do no work (docker/bound.yml), the
//!   stack; the batch's `-f` files apply to the last two;
//! - `--variant NAME=FILE`: the stack with the batch's `-f` files, then FILE, as overrides;
//! - `--external NAME=FILE`: a whole compose project of its own, e.g. another entry's rebuilt
//!   by hand outside the repository and run as its author wrote it: the batch's `-f` files do
//!   not apply, the project is named `fraud<NAME>` and runs from FILE's directory, and its
//!   images must exist (the harness builds only ours). It must serve on port 9999; readiness is
//!   asked there only (`GET /ready` 2xx, or `POST /fraud-score` 200 where it has no `/ready`),
//!   our stack's layout and least-privilege check is skipped (its limit sums are logged), and
//!   CPU per request is reported for each of its services by name.
//!
//! Default (none of the three given): floor, bound, stack. The tables have one CPU column per
//! service name seen in the batch, and `all`, the sum over a run's containers.

mod plot;

use super::compose::Compose;
use super::k6::Window;
use super::load::{load_run, LoadRun};
use super::{Common, ShapeArgs};
use crate::util::{self, log, median, root};
use anyhow::{bail, ensure, Result};
use plot::Series;
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
    /// One of ours (repeatable, order kept).
    #[arg(long = "config", value_enum)]
    configs: Vec<Ours>,
    /// NAME=FILE: the stack with FILE as one more compose override (repeatable).
    #[arg(long = "variant", value_parser = named)]
    variants: Vec<Named>,
    /// NAME=FILE: a whole external compose project serving on port 9999, run as it is (e.g.
    /// another entry's, built outside this repository; `-f` does not apply). Repeatable.
    #[arg(long = "external", value_parser = named)]
    externals: Vec<Named>,
    /// Also write docs/results/<date>-stack-batch[-N].{md,svg}.
    #[arg(long)]
    publish: bool,
    #[command(flatten)]
    shape: ShapeArgs,
    #[command(flatten)]
    common: Common,
}

/// Our configurations.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Ours {
    /// HAProxy answering by itself.
    Floor,
    /// The stack with backends that do no work.
    Bound,
    /// The contest stack.
    Stack,
}

/// `NAME=FILE` of `--variant` and `--external`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct Named {
    name: String,
    file: PathBuf,
}

fn named(s: &str) -> Result<Named, String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok(Named { name: name.into(), file: file.into() })
        }
        _ => Err(format!("{s:?} is not NAME=FILE")),
    }
}

/// One configuration of the batch.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Configuration {
    Ours(Ours),
    Variant(Named),
    External(Named),
}

impl Configuration {
    /// Every configuration of the command line, in round order; the default when none.
    fn all(a: &Args) -> Result<Vec<Configuration>> {
        let mut all: Vec<Configuration> =
            a.configs.iter().map(|c| Configuration::Ours(*c)).collect();
        all.extend(a.variants.iter().cloned().map(Configuration::Variant));
        all.extend(a.externals.iter().cloned().map(Configuration::External));
        if all.is_empty() {
            all = [Ours::Floor, Ours::Bound, Ours::Stack].map(Configuration::Ours).into();
        }
        let mut names: Vec<&str> = all.iter().map(Configuration::name).collect();
        names.sort();
        ensure!(
            names.windows(2).all(|w| w[0] != w[1]),
            "two configurations of one name: {names:?}"
        );
        Ok(all)
    }

    fn name(&self) -> &str {
        match self {
            Configuration::Ours(Ours::Floor) => "floor",
            Configuration::Ours(Ours::Bound) => "bound",
            Configuration::Ours(Ours::Stack) => "stack",
            Configuration::Variant(n) | Configuration::External(n) => &n.name,
        }
    }

    /// The compose project, with `extra` (the batch's `-f` files) where it applies.
    fn compose(&self, extra: &[PathBuf]) -> Compose {
        match self {
            Configuration::Ours(Ours::Floor) => Compose::floor(&[]),
            Configuration::Ours(Ours::Bound) => {
                Compose::stack(&[extra, &[PathBuf::from(BOUND)]].concat())
            }
            Configuration::Ours(Ours::Stack) => Compose::stack(extra),
            Configuration::Variant(n) => {
                Compose::stack(&[extra, std::slice::from_ref(&n.file)].concat())
            }
            Configuration::External(n) => Compose::external(&n.name, &n.file),
        }
    }

    /// The configuration as the batch's markdown names it.
    fn describe(&self) -> String {
        match self {
            Configuration::Ours(Ours::Bound) => format!("`bound` (`{BOUND}`)"),
            Configuration::Ours(_) => format!("`{}`", self.name()),
            Configuration::Variant(n) => format!("`{}` (`{}`)", n.name, n.file.display()),
            Configuration::External(n) => {
                format!(
                    "`{}` (external compose `{}`, run as is; our stack check not applied)",
                    n.name,
                    n.file.display()
                )
            }
        }
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
        r.containers.iter().map(|c| r.cpu_us_per_request(&c.service)).sum()
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
            columns.iter().map(|c| cpu_cell(cpu_of(r, c))).collect::<Vec<_>>().join(" | ")
        );
    }
    // The reference: the bound (what the stack costs without the scorer) when the batch has it,
    // else the floor.
    let reference = ["bound", "floor"]
        .into_iter()
        .find(|name| runs_of(runs, name).next().is_some())
        .unwrap_or("floor");
    let reference_p99 =
        median(runs_of(runs, reference).map(|r| r.summary.latency_ms.p99).collect());
    let _ = write!(
        t,
        "\n| configuration | runs | median p50 ms | median p99 ms | p99 / {reference} | median score | median {cpu_head} |\n{}",
        rule(6 + columns.len())
    );
    for c in configs {
        let rs: Vec<&LoadRun> = runs_of(runs, c.name()).collect();
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
            c.name(),
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
fn full(r: &LoadRun) -> &[Window] {
    &r.summary.windows[..r.summary.windows.len().saturating_sub(1)]
}

fn runs_of<'a>(runs: &'a [LoadRun], name: &'a str) -> impl Iterator<Item = &'a LoadRun> {
    runs.iter().filter(move |r| r.config == name)
}

/// Per-second medians over a configuration's runs.
fn series(c: &Configuration, runs: &[LoadRun]) -> Series {
    let rs: Vec<&LoadRun> = runs_of(runs, c.name()).collect();
    let last = rs.iter().flat_map(|r| full(r).iter().map(|w| w.w)).max().unwrap_or(0);
    let points = (0..=last)
        .filter_map(|sec| {
            let ws: Vec<_> =
                rs.iter().filter_map(|r| full(r).iter().find(|w| w.w == sec)).collect();
            (!ws.is_empty()).then(|| {
                let m = |f: &dyn Fn(&Window) -> f64| median(ws.iter().map(|w| f(w)).collect());
                (sec, m(&|w| w.n as f64), m(&|w| w.p50), m(&|w| w.p99))
            })
        })
        .collect();
    Series { name: c.name().to_string(), points }
}

#[derive(Serialize)]
struct Record<'a> {
    configs: &'a [Configuration],
    runs: &'a [LoadRun],
    failed_runs: &'a [String],
}

pub fn run(a: Args) -> Result<()> {
    let configs = Configuration::all(&a)?;
    let names: Vec<&str> = configs.iter().map(Configuration::name).collect();
    let shape = a.shape.shape();
    a.common.prepare(true, false)?;
    let load_start = util::loadavg();
    log!("batch: {} rounds of {names:?} (load {load_start})", a.runs);
    let (mut runs, mut failed) = (Vec::new(), Vec::new());
    for round in 1..=a.runs {
        for c in &configs {
            log!("round {round}/{}: {}", a.runs, c.name());
            match load_run(c.name(), &c.compose(&a.common.overrides), shape, false) {
                Ok(r) => runs.push(r),
                Err(e) => failed.push(format!("{} round {round}: {e:#}", c.name())),
            }
        }
    }
    if runs.is_empty() {
        bail!("no run of the batch completed: {failed:?}");
    }
    let stamp = util::stamp();
    let base = util::xtask_dir("stack")?.join(format!("{stamp}-batch"));
    let title = format!("Contest stack batch {stamp}: {}", names.join(", "));
    plot::draw(
        &base.with_extension("svg"),
        &title,
        &configs.iter().map(|c| series(c, &runs)).collect::<Vec<_>>(),
    )?;
    let table = tables(&configs, &runs);
    println!("{table}");
    // docs/results/<date>-stack-batch[-N]: one pair of files per batch, never overwritten.
    let results = root().join("docs/results");
    let date = util::date();
    let stem = (1..).map(|n| {
        if n == 1 {
            format!("{date}-stack-batch")
        } else {
            format!("{date}-stack-batch-{n}")
        }
    });
    let stem =
        stem.into_iter().find(|s| !results.join(format!("{s}.md")).exists()).unwrap_or_default();
    let md = markdown(&stamp, &load_start, &configs, &table, &failed, &format!("{stem}.svg"));
    std::fs::write(base.with_extension("md"), &md)?;
    let record = Record { configs: &configs, runs: &runs, failed_runs: &failed };
    std::fs::write(base.with_extension("json"), serde_json::to_string_pretty(&record)? + "\n")?;
    if a.publish {
        std::fs::create_dir_all(&results)?;
        std::fs::write(results.join(format!("{stem}.md")), &md)?;
        std::fs::copy(base.with_extension("svg"), results.join(format!("{stem}.svg")))?;
        log!("published docs/results/{stem}.md and {stem}.svg");
    }
    let problems = judge(&runs, &failed);
    let figures =
        figures(&configs, &runs, &base.with_extension("md").display().to_string(), &problems);
    util::verdict("stack batch", problems.is_empty(), &figures, &record)
}

/// The batch's record in Markdown: command, machine, configurations, the tables, the chart.
fn markdown(
    stamp: &str,
    load_start: &str,
    configs: &[Configuration],
    table: &str,
    failed: &[String],
    svg: &str,
) -> String {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let described = configs.iter().map(Configuration::describe).collect::<Vec<_>>().join(", ");
    let failed = if failed.is_empty() {
        String::new()
    } else {
        format!("Runs that did not complete: {}\n", failed.join("; "))
    };
    format!(
        "# Contest stack batch, {stamp}\n\n\
         Command: `cargo xtask stack {}`  \n\
         Machine: 2-core VM, load average {load_start} at the start, {} at the end; k6 1.1.0 on the same machine.  \n\
         Configurations: {described}.  \n\
         Runs alternate (one of each configuration per round). CPU per request is each container's \
         cgroup CPU time over the run divided by the requests of the run; `all` is the sum over the \
         run's containers.\n\n\
         {table}\n{failed}\n\
         ![offered rate and per-second p50/p99 per configuration]({svg})\n",
        command.split_once(" stack ").map_or("batch", |(_, rest)| rest),
        util::loadavg(),
    )
}

/// The batch's problems: every run's, runs with errors, runs that did not complete.
fn judge(runs: &[LoadRun], failed: &[String]) -> Vec<String> {
    let each = runs
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{} {}: {p}", r.config, r.started)));
    let errors = runs.iter().filter(|r| r.summary.answers.errors > 0);
    let errors =
        errors.map(|r| format!("{} {}: {} errors", r.config, r.started, r.summary.answers.errors));
    each.chain(errors).chain(failed.iter().cloned()).collect()
}

fn figures(configs: &[Configuration], runs: &[LoadRun], md: &str, problems: &[String]) -> String {
    let each = configs.iter().map(|c| {
        let p99 = median(runs_of(runs, c.name()).map(|r| r.summary.latency_ms.p99).collect());
        format!("{} p99 median {p99:.3} ms", c.name())
    });
    format!(
        "{} ({} runs, {md}){}",
        each.collect::<Vec<_>>().join(", "),
        runs.len(),
        util::problems_suffix(problems)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::load::run_of;

    /// The batch's arguments as clap parses them.
    fn args(line: &str) -> Args {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        Cli::try_parse_from(["batch"].into_iter().chain(line.split_whitespace())).unwrap().args
    }

    fn configs(line: &str) -> Vec<Configuration> {
        Configuration::all(&args(line)).unwrap()
    }

    #[test]
    fn ours_by_default_and_in_round_order() {
        let names =
            |c: &[Configuration]| c.iter().map(|c| c.name().to_string()).collect::<Vec<_>>();
        assert_eq!(names(&configs("")), ["floor", "bound", "stack"]);
        let c = configs("--external peer=/p/compose.yml --config stack --variant one=docker/experiments/cpuset-1.yml");
        assert_eq!(names(&c), ["stack", "one", "peer"]);
        let extra = [PathBuf::from("o.yml")];
        assert_eq!(c[1].compose(&extra).files.len(), 3);
        let bound = &configs("--config bound")[0];
        let files = bound.compose(&extra).files;
        assert!(
            files.len() == 3 && files[1].ends_with("o.yml") && files[2].ends_with(BOUND),
            "{files:?}"
        );
        assert_eq!(bound.describe(), "`bound` (`docker/bound.yml`)");
        assert_eq!(configs("--config floor")[0].compose(&extra).project, "fraudfloor");
        assert!(Configuration::all(&args("--config stack --variant stack=x.yml")).is_err());
    }

    #[test]
    fn an_external_project_is_run_as_it_is() {
        let c = &configs("--external peer=/work/peer/compose.yml")[0];
        assert_eq!(
            c,
            &Configuration::External(Named {
                name: "peer".into(),
                file: "/work/peer/compose.yml".into()
            })
        );
        // The batch's `-f` overrides are ours: they do not reach another project.
        let compose = c.compose(&[PathBuf::from("docker/experiments/cpuset-1.yml")]);
        assert_eq!((compose.project.as_str(), compose.files.len()), ("fraudpeer", 1));
        assert_eq!(
            (compose.dir, compose.layout),
            (PathBuf::from("/work/peer"), super::super::compose::Layout::External)
        );
        assert!(c.describe().contains("external compose `/work/peer/compose.yml`, run as is"));
        assert!(named("peer=").is_err() && named("=x.yml").is_err() && named("x.yml").is_err());
    }

    #[test]
    fn cpu_columns_follow_the_services_of_each_configuration() {
        let configs = configs("--config stack --external peer=/p/c.yml");
        let runs = [
            run_of("stack", &[("haproxy", 80), ("api1", 40), ("api2", 45)]),
            run_of("peer", &[("api1", 60), ("api2", 70), ("lb", 10)]),
        ];
        assert_eq!(service_columns(&runs), ["haproxy", "api1", "api2", "lb", "all"]);
        assert_eq!(cpu_of(&runs[1], "haproxy"), None);
        assert_eq!(cpu_of(&runs[1], "all"), Some(140.0));
        let t = tables(&configs, &runs);
        assert!(t.contains("| CPU us/request haproxy | api1 | api2 | lb | all |"), "{t}");
        assert!(t.contains("| 0 / 0 | 80 | 40 | 45 | - | 165 |"), "{t}");
        assert!(t.contains("| 0 / 0 | - | 60 | 70 | 10 | 140 |"), "{t}");
        assert!(
            t.contains("| peer | 1 | 0.400 | 0.900 | - | 6000.0 | - | 60 | 70 | 10 | 140 |"),
            "{t}"
        );
        // Every row has as many cells as its header.
        let cells = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = t.lines().filter(|l| !l.is_empty()).collect();
        assert!(lines[..4].iter().all(|l| cells(l) == cells(lines[0])), "{t}");
        assert!(lines[4..].iter().all(|l| cells(l) == cells(lines[4])), "{t}");
    }

    #[test]
    fn problems_and_figures_of_a_batch() {
        let runs = [run_of("stack", &[("api1", 40)]), run_of("peer", &[("lb", 10)])];
        let failed = ["peer round 2: not ready".to_string()];
        let problems = judge(&runs, &failed);
        assert_eq!(problems, failed);
        let configs = configs("--config stack --external peer=/p/c.yml");
        assert_eq!(
            figures(&configs, &runs, "b.md", &problems),
            "stack p99 median 0.900 ms, peer p99 median 0.900 ms (2 runs, b.md); problems: peer round 2: not ready"
        );
    }
}
