//! `cargo xtask ci`: what `.ci/run` runs after `scripts/setup.sh`, each step with its verdict (a
//! failure stops none); one linted workspace build serves all but the fuzz targets' own.

use crate::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// Run only the steps whose name contains this (e.g. `stack`, `lambda`).
    #[arg(long)]
    only: Option<String>,
    /// The loop of a change to the request path: formatting, the linted build, the unit tests
    /// and the public set's answers (`verify --public`).
    #[arg(long)]
    quick: bool,
}

/// Cheap checks, builds, gates: `cargo ..`, `xtask ..` (this binary) or `workspace <command> ..`.
pub fn steps(quick: bool) -> Vec<(&'static str, &'static str)> {
    let fmt = ("fmt", "cargo fmt --all -- --check");
    // Every target compiled once, with clippy's lints (-D warnings) on every workspace crate.
    let build = ("build", "xtask build");
    if quick {
        let (test, verify) = ("workspace test --lib --bins", "xtask verify --public");
        return vec![fmt, build, ("test", test), ("verify", verify)];
    }
    let submission =
        "xtask stack submission --no-build --test --image 127.0.0.1:5000/fraud-api:test";
    vec![
        fmt,
        build,
        // Unit, integration and doc tests of every crate.
        ("test", "workspace test"),
        ("verify", "xtask verify"),
        ("fuzz", "xtask fuzz ci"),
        // The API image's local-runner and the Lambda's bootstrap, in one build.
        ("shipped build", "xtask build --shipped"),
        ("lambda", "xtask lambda --skip-build"),
        // The smoke builds the images (from the shipped build); the other stack gates reuse
        // them. The smoke and chaos at the final's peak (1,130 req/s), the overload at 3x it.
        ("stack smoke", "xtask stack smoke"),
        ("stack chaos", "xtask stack chaos --no-build"),
        ("stack overload", "xtask stack overload --no-build"),
        // Hostile clients at the cap, against `local-runner serve` and the stack (short runs).
        ("stack attack", "xtask stack attack --no-build --seconds 4"),
        // Pushed to Debian's registry on loopback (started by the step); it removes the local
        // images (pulled back from the registry, retagged).
        ("stack submission", submission),
        // Faults at one of 3 shards under the emulator, and the sharded rollout's hook. It
        // rebuilds the workspace's bootstrap around each shard, as the next step does.
        ("shards faults", "xtask shards --faults"),
        // Last: it rebuilds the workspace's local-runner around a synthetic index.
        ("scale", "xtask scale"),
    ]
}

/// A step's command (`me`: this binary); cargo as a string, found on PATH (a `Path` would not be).
pub fn command(line: &str, me: &Path) -> duct::Expression {
    let words: Vec<&str> = line.split(' ').collect();
    match words[0] {
        "cargo" => duct::cmd("cargo", &words[1..]),
        "workspace" => util::cargo_workspace(words[1], &words[2..]),
        _ => duct::cmd(me, &words[1..]),
    }
    .dir(util::root())
}

#[derive(Debug, PartialEq, Serialize)]
pub struct Outcome {
    pub name: &'static str,
    pub passed: bool,
    pub seconds: f64,
    /// A failed step's own failed verdicts (`<command>: <figures>`), repeated at the end: a CI log
    /// is often read from its tail only.
    pub why: Vec<String>,
}

/// The verdicts (`util::verdict`'s records) written since `since` that failed.
fn failed_verdicts(since: std::time::SystemTime) -> Vec<String> {
    #[derive(Deserialize)]
    struct Record {
        command: String,
        passed: bool,
        figures: String,
    }
    let Ok(dir) = util::xtask_dir("").and_then(|d| Ok(fs::read_dir(d)?)) else { return vec![] };
    let recent =
        |e: &fs::DirEntry| e.metadata().and_then(|m| m.modified()).is_ok_and(|m| m >= since);
    let mut why: Vec<(std::time::SystemTime, String)> = dir
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json") && recent(e))
        .filter_map(|e| {
            let r: Record = serde_json::from_slice(&fs::read(e.path()).ok()?).ok()?;
            let modified = e.metadata().ok()?.modified().ok()?;
            (!r.passed).then(|| (modified, format!("{}: {}", r.command, r.figures)))
        })
        .collect();
    why.sort();
    why.into_iter().map(|(_, w)| w).collect()
}

pub fn run(args: Args) -> Result<()> {
    let me = std::env::current_exe().context("cannot find the xtask binary")?;
    let (started, mut done) = (Instant::now(), Vec::new());
    let only = |s: &&(&str, &str)| args.only.as_deref().is_none_or(|o| s.0.contains(o));
    for (name, line) in steps(args.quick).iter().filter(only) {
        log!("== ci: {name} ==");
        let (t, since) = (Instant::now(), std::time::SystemTime::now());
        let result = command(line, &me).run().inspect_err(|e| log!("ci: {name} failed: {e}"));
        let why = if result.is_ok() { vec![] } else { failed_verdicts(since) };
        let (passed, seconds) = (result.is_ok(), t.elapsed().as_secs_f64());
        done.push(Outcome { name, passed, seconds, why });
    }
    for (name, why) in
        done.iter().filter(|s| !s.passed).flat_map(|s| s.why.iter().map(|w| (s.name, w)))
    {
        log!("ci: {name} failed: {why}");
    }
    let passed = done.iter().all(|s| s.passed);
    let name = if args.quick { "ci quick" } else { "ci" };
    util::verdict(name, passed, &figures(&done, started.elapsed().as_secs_f64()), &done)
}

/// `fmt ok 3 s, build FAILED 80 s, ...; 1200 s in all`.
pub fn figures(done: &[Outcome], total_s: f64) -> String {
    let ok = |s: &Outcome| if s.passed { "ok" } else { "FAILED" };
    let each = util::list(done, |s| format!("{} {} {:.0} s", s.name, ok(s), s.seconds));
    format!("{each}; {total_s:.0} s in all")
}
