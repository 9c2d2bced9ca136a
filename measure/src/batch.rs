//! `cargo measure batch` (`run`, `floor`: a batch of one): configurations of the contest stack
//! in alternated rounds (drift hits them alike), every run's table, medians and a chart.

use crate::median;
use crate::plot::{self, Series};
use anyhow::{ensure, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use serde::Serialize;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use xtask::stack::compose::{self, Compose};
use xtask::stack::k6::{self, Window};
use xtask::stack::load::{load_run, LoadRun};
use xtask::stack::prometheus::Watch;
use xtask::stack::{self, check, Common};
use xtask::util::{self, log, root};

/// The bound: the stack with APIs that answer a constant 200 (`local-runner serve --no-work`).
pub const BOUND: &str = "docker/bound.yml";

#[derive(clap::Args)]
pub struct Args {
    /// Runs of each configuration.
    #[arg(long, default_value_t = 2)]
    runs: u32,
    /// One of ours (repeatable, order kept).
    #[arg(long = "config", value_parser = PossibleValuesParser::new(OURS).map(|s| ours(&s)))]
    configs: Vec<Configuration>,
    /// NAME=FILE: the stack with FILE as one more compose override (repeatable).
    #[arg(long = "variant", value_parser = named)]
    variants: Vec<Named>,
    /// NAME=FILE: an external compose project on port 9999, run as is (no `-f`). Repeatable.
    #[arg(long = "external", value_parser = named)]
    externals: Vec<Named>,
    /// Also write docs/results/<date>-stack-batch[-N].{md,svg}.
    #[arg(long)]
    publish: bool,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    common: Common,
}

/// The load shape of a run of `k6/fraud-test.js`.
#[derive(clap::Args, Clone, Copy, Debug, Default, PartialEq)]
pub struct Shape {
    /// `final`: the contest's final ramp over tests/data/final-test-data.csv.gz (~100 s);
    /// `preview`: 1 -> 900 req/s over 120 s, the public set; `smoke`: --rate for --seconds.
    #[arg(long, value_enum, default_value = "final")]
    shape: Kind,
    /// Requests per second of `--shape smoke`.
    #[arg(long, default_value_t = stack::SMOKE_RATE)]
    rate: u32,
    /// Seconds of `--shape smoke`.
    #[arg(long, default_value_t = 15)]
    seconds: u32,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Final,
    Preview,
    Smoke,
}

impl Shape {
    /// k6's environment: the script's MODE and its test set.
    fn env(&self) -> Result<Vec<(&'static str, String)>> {
        let (mode, set) = match self.shape {
            Kind::Final => ("final", "tests/data/final-test-data.csv.gz"),
            Kind::Preview => ("full", util::TEST_SET),
            Kind::Smoke => ("smoke", util::TEST_SET),
        };
        let mut env = vec![
            ("MODE", mode.to_string()),
            ("TEST_DATA", k6::test_data(set)?.display().to_string()),
        ];
        if self.shape == Kind::Smoke {
            env.extend([
                ("RATE", self.rate.to_string()),
                ("DURATION", format!("{}s", self.seconds)),
            ]);
        }
        Ok(env)
    }
}

/// Ours: HAProxy answering by itself, [`BOUND`], the contest stack.
const OURS: [&str; 3] = ["floor", "bound", "stack"];

fn ours(name: &str) -> Configuration {
    match name {
        "floor" => Configuration::Floor,
        "bound" => Variant(Named { name: "bound".into(), file: BOUND.into() }),
        _ => Configuration::Stack,
    }
}

/// `NAME=FILE` of `--variant` and `--external`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct Named {
    name: String,
    file: PathBuf,
}

fn named(s: &str) -> Result<Named, String> {
    let parts = s.split_once('=').filter(|(n, f)| !n.is_empty() && !f.is_empty());
    parts
        .map(|(name, file)| Named { name: name.into(), file: file.into() })
        .ok_or(format!("{s:?} is not NAME=FILE"))
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Configuration {
    Floor,
    Stack,
    /// The stack with one more override (the bound is one).
    Variant(Named),
    External(Named),
}

use Configuration::{External, Variant};

impl Configuration {
    /// In round order; floor, bound, stack when none is given.
    fn all(a: &Args) -> Result<Vec<Configuration>> {
        let none = a.configs.is_empty() && a.variants.is_empty() && a.externals.is_empty();
        let ours = if none { OURS.map(ours).to_vec() } else { a.configs.clone() };
        let all = ours.into_iter().chain(a.variants.iter().cloned().map(Variant));
        let all: Vec<_> = all.chain(a.externals.iter().cloned().map(External)).collect();
        let mut seen = std::collections::HashSet::new();
        let twice = all.iter().map(Configuration::name).find(|n| !seen.insert(*n));
        ensure!(twice.is_none(), "two configurations named {twice:?}");
        Ok(all)
    }

    fn name(&self) -> &str {
        match self {
            Configuration::Floor => "floor",
            Configuration::Stack => "stack",
            Variant(n) | External(n) => &n.name,
        }
    }

    /// The compose project, with `extra` (the batch's `-f` files) where it applies.
    fn compose(&self, extra: &[PathBuf]) -> Compose {
        match self {
            Configuration::Floor => {
                let dir = root().join("docker");
                Compose::ours("fraudfloor", dir.clone(), vec![dir.join("compose.floor.yml")], &[])
            }
            Configuration::Stack => Compose::stack(extra),
            Variant(n) => Compose::stack(&[extra, std::slice::from_ref(&n.file)].concat()),
            External(n) => external(&n.name, &n.file),
        }
    }

    /// The configuration as the batch's markdown names it.
    fn describe(&self) -> String {
        match self {
            Variant(n) => format!("`{}` (`{}`)", n.name, n.file.display()),
            External(n) => {
                let (name, file) = (&n.name, n.file.display());
                format!(
                    "`{name}` (external compose `{file}`, run as is; our stack check not applied)"
                )
            }
            _ => format!("`{}`", self.name()),
        }
    }
}

/// A project from elsewhere, as `fraud<name>` (what compose keeps of it), run from its file's
/// directory as it is (the batch's `-f` overrides do not reach it).
fn external(name: &str, file: &Path) -> Compose {
    let keep = |c: &char| c.is_ascii_alphanumeric() || *c == '-' || *c == '_';
    let project: String =
        format!("fraud{name}").to_ascii_lowercase().chars().filter(keep).collect();
    let file = compose::absolute(file);
    let dir = file.parent().map_or_else(root, Path::to_path_buf);
    Compose { external: Some(serving), ..Compose::ours(&project, dir, vec![file], &[]) }
}

/// An external project serves when port 9999 has answered once per service (so that a
/// round-robin balancer passed a probe to each API): the limits it sets are only logged.
fn serving(c: &Compose) -> Result<()> {
    let limits = c.config().and_then(|yaml| check::rules(&yaml));
    let limits = limits.map_or_else(
        |e| format!("limits unreadable: {e:#}"),
        |r| format!("limits sum {:.2} CPU, {:.0} MB", r.cpus, r.memory_mb),
    );
    log!("{}: external compose, run as is: our stack check is skipped ({limits})", c.project);
    let n = c.services()?.len();
    let agent = probe_agent();
    for i in 1..=n {
        let (limit, every) = (Duration::from_secs(90), Duration::from_millis(100));
        util::poll(&format!("port 9999 ({i} of {n})"), limit, every, || {
            Ok(ready_or_score(&agent, "http://127.0.0.1:9999"))
        })?;
    }
    Ok(())
}

/// A client that keeps no connection: each probe is a new one, for the balancer to pass on.
fn probe_agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder().max_idle_connections(0).http_status_as_error(false);
    config.timeout_global(Some(Duration::from_millis(500))).build().into()
}

/// The contest documentation's first worked example (5 legit neighbours, approved).
const SAMPLE: &str = r#"{"id":"tx-xtask-ready","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;

/// An unknown project's readiness: `GET /ready` 2xx or, on a 4xx, `POST /fraud-score` 200.
fn ready_or_score(agent: &ureq::Agent, base: &str) -> Result<(), String> {
    type Answer = Result<ureq::http::Response<ureq::Body>, ureq::Error>;
    let status = |a: Answer| a.map(|r| r.status().as_u16()).map_err(|e| e.to_string());
    match status(agent.get(format!("{base}/ready")).call())? {
        200..=299 => Ok(()),
        ready @ 400..=499 => {
            let post = agent.post(format!("{base}/fraud-score")).content_type("application/json");
            match status(post.send(SAMPLE)) {
                Ok(200) => Ok(()),
                score => {
                    let score = score.map_or_else(|e| e, |s| s.to_string());
                    Err(format!("/ready {ready}, POST /fraud-score {score}"))
                }
            }
        }
        other => Err(other.to_string()),
    }
}

/// The column of a run's CPU per request summed over all its containers.
const ALL: &str = "all";

/// The CPU columns: every service of the batch's runs in order of appearance, then `all`.
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

/// Microseconds of CPU per request of `column` (a service, or [`ALL`]) in `r`.
fn cpu_of(r: &LoadRun, column: &str) -> Option<f64> {
    match column {
        ALL => r.containers.iter().map(|c| r.cpu_us_per_request(&c.service)).sum(),
        service => r.cpu_us_per_request(service),
    }
}

fn runs_of<'a>(runs: &'a [LoadRun], name: &'a str) -> impl Iterator<Item = &'a LoadRun> {
    runs.iter().filter(move |r| r.config == name)
}

fn p99s(runs: &[LoadRun], name: &str) -> f64 {
    median(runs_of(runs, name).map(|r| r.summary.latency().p99).collect())
}

/// The markdown tables: every run, then the medians per configuration.
fn tables(configs: &[Configuration], runs: &[LoadRun]) -> String {
    let columns = service_columns(runs);
    let (head, services) =
        (format!("CPU us/request {}", columns.join(" | ")), &columns[..columns.len() - 1]);
    let rule = |n: usize| "|---".repeat(n + columns.len()) + "|\n";
    let cell = |v: Option<f64>| v.filter(|v| !v.is_nan()).map_or("-".into(), |v| format!("{v:.0}"));
    let cpu = |f: &dyn Fn(&str) -> Option<f64>| {
        columns.iter().map(|c| cell(f(c))).collect::<Vec<_>>().join(" | ")
    };
    let throttled = |r: &LoadRun| {
        let of = |s: &String| r.containers.iter().find(|c| &c.service == s);
        let each = services.iter().map(|s| of(s).map_or("-".into(), |c| c.throttled().to_string()));
        each.collect::<Vec<_>>().join(" | ")
    };
    let mut t = format!("| # | configuration | started (UTC) | load avg | requests | p50 ms | p99 ms | score | errors | FP / FN | {head} | throttled {} |\n{}", services.join(" | "), rule(10 + services.len()));
    for (i, r) in runs.iter().enumerate() {
        let (s, st, k6::Trend { med, p99 }) = (&r.summary, &r.started, r.summary.latency());
        let (config, load, n, score, errors, fp, fn_) =
            (&r.config, &r.load_before, s.requests, s.final_score, s.errors, s.fp, s.fn_);
        let time = format!("{}:{}:{}", &st[9..11], &st[11..13], &st[13..15]);
        let (cpu, throttled) = (cpu(&|c| cpu_of(r, c)), throttled(r));
        t += &format!("| {} | {config} | {time} | {load} | {n} | {med:.3} | {p99:.3} | {score:.1} | {errors} | {fp} / {fn_} | {cpu} | {throttled} |\n", i + 1);
    }
    // The reference: the bound (the stack without the scorer) when the batch has it, else the floor.
    let reference = ["bound", "floor"]
        .into_iter()
        .find(|n| runs_of(runs, n).next().is_some())
        .unwrap_or("floor");
    let reference_p99 = p99s(runs, reference);
    t += &format!("\n| configuration | runs | median p50 ms | median p99 ms | p99 / {reference} | median score | median {head} |\n{}", rule(6));
    for c in configs {
        let rs: Vec<&LoadRun> = runs_of(runs, c.name()).collect();
        let m =
            |f: &dyn Fn(&LoadRun) -> Option<f64>| median(rs.iter().filter_map(|r| f(r)).collect());
        let (med, p99) =
            (m(&|r| Some(r.summary.latency().med)), m(&|r| Some(r.summary.latency().p99)));
        let ratio = Some(p99 / reference_p99)
            .filter(|r| !r.is_nan())
            .map_or("-".into(), |r| format!("{r:.2}x"));
        let (name, n, score) = (c.name(), rs.len(), m(&|r| Some(r.summary.final_score)));
        let cpu = cpu(&|col| Some(m(&|r| cpu_of(r, col))));
        t += &format!("| {name} | {n} | {med:.3} | {p99:.3} | {ratio} | {score:.1} | {cpu} |\n");
    }
    t
}

/// Per-second medians over a configuration's runs (each run's last window, partial, left out).
fn series<'a>(c: &'a Configuration, runs: &'a [LoadRun]) -> Series {
    let full = |r: &'a LoadRun| &r.summary.windows[..r.summary.windows.len().saturating_sub(1)];
    let rs: Vec<&[Window]> = runs_of(runs, c.name()).map(full).collect();
    let last = rs.iter().flat_map(|ws| ws.iter().map(|w| w.w)).max().unwrap_or(0);
    let point = |sec| {
        let ws: Vec<&Window> = rs.iter().filter_map(|r| r.iter().find(|w| w.w == sec)).collect();
        let m = |f: &dyn Fn(&Window) -> f64| median(ws.iter().map(|w| f(w)).collect());
        (!ws.is_empty()).then(|| (sec, m(&|w| w.n as f64), m(&|w| w.p50), m(&|w| w.p99)))
    };
    Series { name: c.name().to_string(), points: (0..=last).filter_map(point).collect() }
}

/// `cargo measure run` and `floor`: a batch of one run of one of ours.
pub fn one(verdict: &str, name: &str, shape: Shape, common: Common) -> Result<()> {
    let (configs, variants, externals) = (vec![ours(name)], vec![], vec![]);
    run(verdict, Args { runs: 1, configs, variants, externals, publish: false, shape, common })
}

pub fn run(verdict: &str, a: Args) -> Result<()> {
    let _lock = stack::exclusive()?;
    let configs = Configuration::all(&a)?;
    let names: Vec<&str> = configs.iter().map(Configuration::name).collect();
    a.common.prepare(true, false)?;
    let load_start = util::loadavg();
    log!("batch: {} rounds of {names:?} (load {load_start})", a.runs);
    let (mut runs, mut failed) = (Vec::new(), Vec::new());
    for (round, c) in (1..=a.runs).flat_map(|r| configs.iter().map(move |c| (r, c))) {
        log!("round {round}/{}: {}", a.runs, c.name());
        match load_run(c.name(), &c.compose(&a.common.overrides), &a.shape.env()?, &Watch::No) {
            Ok(r) => runs.push(r),
            Err(e) => failed.push(format!("{} round {round}: {e:#}", c.name())),
        }
    }
    ensure!(!runs.is_empty(), "no run of the batch completed: {failed:?}");
    let (stamp, dir) = (util::stamp(), util::xtask_dir("stack")?);
    let [svg, md_path, json] =
        ["svg", "md", "json"].map(|e| dir.join(format!("{stamp}-batch.{e}")));
    let series: Vec<Series> = configs.iter().map(|c| series(c, &runs)).collect();
    plot::draw(&svg, &format!("Contest stack batch {stamp}: {}", names.join(", ")), &series)?;
    let table = tables(&configs, &runs);
    println!("{table}");
    // docs/results/<date>-stack-batch[-N]: one pair of files per batch, never overwritten.
    let (results, date) = (root().join("docs/results"), util::date());
    let free = |s: &String| !results.join(format!("{s}.md")).exists();
    let stems = std::iter::once(String::new()).chain((2..).map(|n| format!("-{n}")));
    let stem = stems.map(|n| format!("{date}-stack-batch{n}")).find(free).unwrap_or_default();
    // The record: command, machine, configurations, the tables, the chart.
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let (described, load_end) = (util::list(&configs, Configuration::describe), util::loadavg());
    let unfinished = failed
        .first()
        .map_or(String::new(), |_| format!("Runs that did not complete: {}\n", failed.join("; ")));
    let md = format!(
        "# Contest stack batch, {stamp}\n\n\
         Command: `cargo measure {command}`  \n\
         Machine: 2-core VM, load average {load_start} at the start, {load_end} at the end; k6 1.1.0 on the same machine.  \n\
         Configurations: {described}.  \n\
         Runs alternate (one of each configuration per round). CPU per request is each container's \
         cgroup CPU time over the run divided by the requests of the run; `all` is the sum over the \
         run's containers; throttled: CFS periods in which a container's quota ran out (nr_throttled).\n\n\
         {table}\n{unfinished}\n\
         ![offered rate and per-second p50/p99 per configuration]({stem}.svg)\n"
    );
    std::fs::write(&md_path, &md)?;
    let record = serde_json::json!({"configs": configs, "runs": runs, "failed_runs": failed});
    util::write_json(&json, &record)?;
    if a.publish {
        std::fs::create_dir_all(&results)?;
        std::fs::write(results.join(format!("{stem}.md")), &md)?;
        std::fs::copy(&svg, results.join(format!("{stem}.svg")))?;
        log!("published docs/results/{stem}.md and {stem}.svg");
    }
    let problems = judge(&runs, &failed);
    let figures = figures(&configs, &runs, &md_path.display().to_string(), &problems);
    util::verdict(verdict, problems.is_empty(), &figures, &record)
}

/// The batch's problems: every run's, runs with errors, runs that did not complete.
fn judge(runs: &[LoadRun], failed: &[String]) -> Vec<String> {
    let each = runs
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{} {}: {p}", r.config, r.started)));
    let errors = runs.iter().filter(|r| r.summary.errors > 0);
    let errors = errors.map(|r| format!("{} {}: {} errors", r.config, r.started, r.summary.errors));
    each.chain(errors).chain(failed.iter().cloned()).collect()
}

fn figures(configs: &[Configuration], runs: &[LoadRun], md: &str, problems: &[String]) -> String {
    let each =
        util::list(configs, |c| format!("{} p99 median {:.3} ms", c.name(), p99s(runs, c.name())));
    let ratio = Some(p99s(runs, "stack") / p99s(runs, "bound")).filter(|r| r.is_finite());
    let ratio = ratio.map_or(String::new(), |r| format!(", stack / bound p99 {r:.2}x"));
    format!("{each}{ratio} ({} runs, {md}){}", runs.len(), util::problems_suffix(problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtask::stack::k6::{Summary, Trend};
    use xtask::stack::load::Container;

    /// `A` as clap parses `argv`.
    fn parse<A: clap::Args>(argv: &str) -> Result<A, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli<A: clap::Args> {
            #[command(flatten)]
            args: A,
        }
        let argv = std::iter::once("x").chain(argv.split_whitespace());
        <Cli<A> as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    }

    /// A stack run of `config` with 1,000 requests whose containers used `cpu_ms` each.
    fn run_of(config: &str, cpu_ms: &[(&str, u64)]) -> LoadRun {
        let container = |&(service, ms): &(&str, u64)| {
            let mut c = Container { service: service.into(), running: true, ..Default::default() };
            (c.after.memory_limit, c.after.cpu_ns) = (1, ms * 1_000_000);
            c
        };
        let latency_ms = Some(Trend { med: 0.4, p99: 0.9 });
        let summary =
            Summary { requests: 1000, latency_ms, final_score: 6000.0, ..Default::default() };
        let (containers, started) =
            (cpu_ms.iter().map(container).collect(), "20261130T170200Z".into());
        LoadRun { config: config.into(), started, summary, containers, ..LoadRun::default() }
    }

    fn configs(line: &str) -> Result<Vec<Configuration>> {
        Configuration::all(&parse(line).unwrap())
    }

    #[test]
    fn the_configurations_of_a_batch() {
        let names = |line| util::list(configs(line).unwrap(), |c| c.name().to_string());
        let cases = [
            ("", "floor, bound, stack"),
            ("--external peer=/p/c.yml --config stack --variant one=o.yml", "stack, one, peer"),
        ];
        for (line, want) in cases {
            assert_eq!(names(line), want);
        }
        assert!(configs("--config stack --variant stack=x.yml").is_err());
        assert!(named("peer=").is_err() && named("=x.yml").is_err() && named("x.yml").is_err());
        let c = configs("--external peer=/work/peer/compose.yml --config bound --variant one=x/one.yml --config floor").unwrap();
        let extra = [PathBuf::from("o.yml")];
        let [bound, floor, one, peer] = [0, 1, 2, 3].map(|i| c[i].compose(&extra));
        let f = &bound.files;
        assert!(f.len() == 3 && f[1].ends_with("o.yml") && f[2].ends_with(BOUND));
        assert!(one.files.len() == 3 && one.files[2].ends_with("x/one.yml"));
        assert_eq!((floor.project.as_str(), floor.files.len()), ("fraudfloor", 1));
        let described = [0, 1, 2, 3].map(|i| c[i].describe());
        assert_eq!(
            described[..3],
            ["`bound` (`docker/bound.yml`)", "`floor`", "`one` (`x/one.yml`)"]
        );
        // An external project is run as it is: the batch's `-f` overrides do not reach it.
        let got =
            (peer.project.as_str(), peer.files.len(), peer.dir.to_str(), peer.external.is_some());
        assert_eq!(got, ("fraudpeer", 1, Some("/work/peer"), true));
        let dotted = external("Peer.2", Path::new("/x/peer/compose.yml"));
        assert_eq!(
            (dotted.project.as_str(), dotted.dir.as_path()),
            ("fraudpeer2", Path::new("/x/peer"))
        );
        assert!(described[3].contains("external compose `/work/peer/compose.yml`, run as is"));
    }

    #[test]
    fn the_load_shape_is_typed() {
        let env = |argv: &str| {
            let e = parse::<Shape>(argv).unwrap().env().unwrap();
            util::list(e, |(k, v)| format!("{k}={}", v.rsplit('/').next().unwrap()))
        };
        let cases = [
            ("", "MODE=final, TEST_DATA=final-test-data.csv"),
            ("--shape preview", "MODE=full, TEST_DATA=test-data.json"),
            (
                "--shape smoke --rate 900 --seconds 20",
                "MODE=smoke, TEST_DATA=test-data.json, RATE=900, DURATION=20s",
            ),
        ];
        for (argv, want) in cases {
            assert_eq!(env(argv), want);
        }
        assert!(parse::<Shape>("--shape fast").is_err());
    }

    #[test]
    fn an_external_project_is_ready_on_ready_or_a_scored_request() {
        use std::io::{Read, Write};
        // A loopback listener that answers every connection with one canned status line.
        let serve = |answers: &'static [&'static str]| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            std::thread::spawn(move || {
                for (a, s) in answers.iter().zip(l.incoming()) {
                    let mut s = s.unwrap();
                    let _ = s.read(&mut [0; 1024]);
                    let _ = s
                        .write_all(format!("HTTP/1.1 {a}\r\ncontent-length: 0\r\n\r\n").as_bytes());
                }
            });
            format!("http://127.0.0.1:{port}")
        };
        let agent = probe_agent();
        let cases: [(&'static [&'static str], Result<(), &str>); 4] = [
            (&["204 No Content"], Ok(())),
            (&["404 Not Found", "200 OK"], Ok(())),
            (&["405 No", "503 No"], Err("/ready 405, POST /fraud-score 503")),
            (&["502 Bad Gateway"], Err("502")),
        ];
        for (answers, want) in cases {
            let got = ready_or_score(&agent, &serve(answers));
            assert_eq!(got, want.map_err(String::from), "{answers:?}");
        }
        let v: serde_json::Value = serde_json::from_str(SAMPLE).unwrap();
        assert!(v["merchant"]["mcc"] == "5411" && v["last_transaction"].is_null());
    }

    #[test]
    fn tables_problems_and_figures_of_a_batch() {
        let batch = configs("--config stack --external peer=/p/c.yml").unwrap();
        let mut runs = [
            run_of("stack", &[("haproxy", 80), ("api1", 40), ("api2", 45)]),
            run_of("peer", &[("api1", 60), ("api2", 70), ("lb", 10)]),
        ];
        runs[0].containers[2].after.nr_throttled = 3;
        assert_eq!(service_columns(&runs), ["haproxy", "api1", "api2", "lb", "all"]);
        assert_eq!((cpu_of(&runs[1], "haproxy"), cpu_of(&runs[1], "all")), (None, Some(140.0)));
        let t = tables(&batch, &runs);
        for want in [
            "| CPU us/request haproxy | api1 | api2 | lb | all | throttled haproxy | api1 | api2 | lb |",
            "| 0 / 0 | 80 | 40 | 45 | - | 165 | 0 | 0 | 3 | - |",
            "| 0 / 0 | - | 60 | 70 | 10 | 140 | - | 0 | 0 | 0 |",
            "| peer | 1 | 0.400 | 0.900 | - | 6000.0 | - | 60 | 70 | 10 | 140 |",
        ] {
            assert!(t.contains(want), "{want}: {t}");
        }
        // Every row has as many cells as its header.
        let cells = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = t.lines().filter(|l| !l.is_empty()).collect();
        let even = |rows: &[&str]| rows.iter().all(|l| cells(l) == cells(rows[0]));
        assert!(even(&lines[..4]) && even(&lines[4..]), "{t}");
        let runs = [run_of("stack", &[("api1", 40)]), run_of("peer", &[("lb", 10)])];
        let failed = ["peer round 2: not ready".to_string()];
        assert_eq!(judge(&runs, &failed), failed);
        let want = "stack p99 median 0.900 ms, peer p99 median 0.900 ms (2 runs, b.md); problems: peer round 2: not ready";
        assert_eq!(figures(&batch, &runs, "b.md", &failed), want);
        let pair = [run_of("bound", &[]), run_of("stack", &[])];
        let f = figures(&configs("--config bound --config stack").unwrap(), &pair, "m", &[]);
        assert!(f.contains("stack p99 median 0.900 ms, stack / bound p99 1.00x (2 runs"), "{f}");
    }
}
