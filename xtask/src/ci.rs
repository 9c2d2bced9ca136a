//! `cargo xtask ci`: everything CI checks, in order, after `scripts/setup.sh` installed the tools
//! (`.ci/run` and the README's `scripts/test.sh` run exactly this).
//!
//! Each step is a command of its own (this binary again, or cargo), so each prints its own
//! verdict line with its figures; a failed step does not stop the later ones, so one CI log shows
//! every failure. The last line is the summary: every step with its wall time.

use crate::cmd::{self, root};
use crate::{log, report};
use anyhow::{Context, Result};
use serde::Serialize;
use std::process::Command;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Run only the steps whose name contains this (e.g. `stack`, `lambda`).
    #[arg(long)]
    only: Option<String>,
}

/// One step's outcome.
#[derive(Serialize)]
struct Step {
    name: &'static str,
    passed: bool,
    seconds: f64,
}

/// The steps, in order: cheap checks first, then the gates that need the release build.
fn steps() -> Vec<(&'static str, Vec<&'static str>)> {
    let x = "xtask";
    vec![
        ("fmt", vec!["cargo", "fmt", "--all", "--", "--check"]),
        (
            "clippy",
            vec![
                "cargo",
                "clippy",
                "--release",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        (
            "clippy lambda",
            vec![
                "cargo",
                "clippy",
                "--release",
                "-p",
                "function",
                "--features",
                "lambda",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        ("test", vec!["cargo", "test", "--release", "--workspace"]),
        ("verify", vec![x, "verify"]),
        ("fuzz", vec![x, "fuzz", "ci"]),
        ("lambda", vec![x, "lambda"]),
        // The smoke builds the images; the other stack gates reuse them. The image's static
        // build shares target/ with the steps above (faiss and the index packer are host
        // build dependencies, built once).
        (
            "stack smoke",
            vec![x, "stack", "smoke", "--target-dir", "target"],
        ),
        // 600 req/s, the floor for this gate: requests in flight on the killed API are
        // the ones that fail, and at 900 req/s a busy machine puts that count at the gate's
        // limit (7-10 per kill, docs/RESILIENCE.md).
        (
            "stack chaos",
            vec![x, "stack", "chaos", "--no-build", "--rate", "600"],
        ),
        ("stack overload", vec![x, "stack", "overload", "--no-build"]),
    ]
}

/// Steps that build `function` with other features or for another target: they embed the index
/// the workspace build packed (build.rs checks it) instead of packing 3M references again (about
/// a minute each). The workspace's own steps leave the variable alone: setting it would rerun
/// the build script and rebuild every crate above it.
const REUSE_INDEX: [&str; 3] = ["clippy lambda", "lambda", "stack smoke"];

pub fn run(args: Args) -> Result<()> {
    let me = std::env::current_exe().context("cannot find the xtask binary")?;
    let started = Instant::now();
    let mut done = Vec::new();
    for (name, argv) in steps() {
        if args.only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        log!("== ci: {name} ==");
        let mut c = if argv[0] == "xtask" {
            let mut c = Command::new(&me);
            c.args(&argv[1..]);
            c
        } else {
            cmd::cmd(argv[0], &argv[1..])
        };
        c.current_dir(root());
        if REUSE_INDEX.contains(&name) {
            if let Some(artifact) = packed_index() {
                c.env("FRAUD_INDEX_ARTIFACT_IN", artifact);
            }
        }
        let t = Instant::now();
        let passed = cmd::run(&mut c).is_ok();
        done.push(Step {
            name,
            passed,
            seconds: t.elapsed().as_secs_f64(),
        });
    }
    let figures = done
        .iter()
        .map(|s| {
            format!(
                "{} {} {:.0} s",
                s.name,
                if s.passed { "ok" } else { "FAILED" },
                s.seconds
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let passed = done.iter().all(|s| s.passed);
    report::verdict(
        "ci",
        passed,
        &format!("{figures}; {:.0} s in all", started.elapsed().as_secs_f64()),
        &done,
    )
}

/// The newest index artifact packed by a release build of the workspace, if any.
fn packed_index() -> Option<std::path::PathBuf> {
    if std::env::var_os("FRAUD_INDEX_ARTIFACT_IN").is_some() {
        return None; // the caller chose one
    }
    let dir = root().join("target/release/build");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("function-"))
        .map(|e| e.path().join("out/fraud-index.idx"))
        .filter(|p| p.exists())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}
