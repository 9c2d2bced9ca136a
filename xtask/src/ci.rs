//! `cargo xtask ci`: what `.ci/run` runs after `scripts/setup.sh`. Each step prints its own
//! verdict; a failed step does not stop the later ones.

use crate::util::{self, log};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Run only the steps whose name contains this (e.g. `stack`, `lambda`).
    #[arg(long)]
    only: Option<String>,
}

/// What runs a step: cargo, or this binary again (`cargo xtask <args>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    Cargo,
    Xtask,
}

#[derive(Debug)]
struct Step {
    name: &'static str,
    program: Program,
    args: Vec<String>,
    /// The step builds `function` with other features or for another target: it embeds the index
    /// the workspace build packed instead of packing 3M references again (the workspace's own
    /// steps leave it alone: setting it would rebuild every crate above the build script).
    reuse_index: bool,
}

impl Step {
    /// The step's command, run in the workspace root. Cargo is named as a string, so that it is
    /// looked up on PATH (duct runs a one-component `Path` from the working directory).
    fn command(&self, me: &Path) -> duct::Expression {
        match self.program {
            Program::Cargo => duct::cmd("cargo", &self.args),
            Program::Xtask => duct::cmd(me, &self.args),
        }
        .dir(util::root())
    }
}

/// Where CI's submission test pushes the API image (Debian's registry, started by the step).
const LOOPBACK_IMAGE: &str = "127.0.0.1:5000/fraud-api:test";

/// The steps, in order: cheap checks first, then the gates that need the release build. Clippy
/// builds in release, so it shares the faiss build with `cargo test --release`.
fn steps(target_dir: &Path) -> Vec<Step> {
    use Program::{Cargo, Xtask};
    let step = |name, program, args: &[&str], reuse_index| Step {
        name,
        program,
        args: args.iter().map(|a| a.to_string()).collect(),
        reuse_index,
    };
    fn clippy<'a>(what: &[&'a str]) -> Vec<&'a str> {
        [&["clippy", "--release"], what, &["--all-targets", "--", "-D", "warnings"]].concat()
    }
    let target = target_dir.to_string_lossy();
    let submission = ["stack", "submission", "--no-build", "--test", "--image", LOOPBACK_IMAGE];
    vec![
        step("fmt", Cargo, &["fmt", "--all", "--", "--check"], false),
        step("clippy", Cargo, &clippy(&["--workspace"]), false),
        step("clippy lambda", Cargo, &clippy(&["-p", "function", "--features", "lambda"]), true),
        step("test", Cargo, &["test", "--release", "--workspace"], false),
        step("verify", Xtask, &["verify"], false),
        step("fuzz", Xtask, &["fuzz", "ci"], false),
        step("lambda", Xtask, &["lambda"], true),
        // The smoke builds the images; the other stack gates reuse them. The image's static
        // build shares the target directory with the steps above (faiss and the index packer
        // are host build dependencies, built once).
        step("stack smoke", Xtask, &["stack", "smoke", "--target-dir", &target], true),
        // The smoke and chaos at the final's peak (1,130 req/s), the overload at 3x it.
        step("stack chaos", Xtask, &["stack", "chaos", "--no-build"], false),
        step("stack overload", Xtask, &["stack", "overload", "--no-build"], false),
        // Last: it removes the local images (pulled back from the loopback registry, retagged).
        step("stack submission", Xtask, &submission, false),
    ]
}

#[derive(Debug, PartialEq, Serialize)]
struct Outcome {
    name: &'static str,
    passed: bool,
    seconds: f64,
}

pub fn run(args: Args) -> Result<()> {
    let me = std::env::current_exe().context("cannot find the xtask binary")?;
    let (started, mut done) = (Instant::now(), Vec::new());
    let only = |s: &&Step| args.only.as_deref().is_none_or(|o| s.name.contains(o));
    // The newest index a release build of the workspace packed, unless the caller chose one.
    let chosen = std::env::var_os("FRAUD_INDEX_ARTIFACT_IN").is_some();
    for step in steps(util::target_dir()).iter().filter(only) {
        log!("== ci: {} ==", step.name);
        let mut e = step.command(&me);
        // Looked up per step: the workspace's clippy step is what packs it.
        let packed = || util::newest_index_artifact(&util::target_dir().join("release/build"));
        if let Some(artifact) = (step.reuse_index && !chosen).then(packed).flatten() {
            e = e.env("FRAUD_INDEX_ARTIFACT_IN", artifact);
        }
        let (t, result) = (Instant::now(), e.run());
        if let Err(err) = &result {
            log!("ci: {} failed: {err}", step.name);
        }
        let (name, passed, seconds) = (step.name, result.is_ok(), t.elapsed().as_secs_f64());
        done.push(Outcome { name, passed, seconds });
    }
    let passed = done.iter().all(|s| s.passed);
    util::verdict("ci", passed, &figures(&done, started.elapsed().as_secs_f64()), &done)
}

/// `fmt ok 3 s, clippy FAILED 80 s, ...; 1200 s in all`.
fn figures(done: &[Outcome], total_s: f64) -> String {
    let each = util::list(done, |s| {
        format!("{} {} {:.0} s", s.name, if s.passed { "ok" } else { "FAILED" }, s.seconds)
    });
    format!("{each}; {total_s:.0} s in all")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_and_their_order() {
        let s = steps(Path::new("/t"));
        let names: Vec<&str> = s.iter().map(|s| s.name).collect();
        assert_eq!(names.join(", "), "fmt, clippy, clippy lambda, test, verify, fuzz, lambda, stack smoke, stack chaos, stack overload, stack submission");
        let clippy = s.iter().filter(|s| s.name.starts_with("clippy"));
        assert!(clippy.clone().all(|s| s.args[..2] == ["clippy", "--release"]));
        assert!(clippy.clone().all(|s| s.args.ends_with(&["-D".into(), "warnings".into()])));
        assert_eq!(s[3].args, ["test", "--release", "--workspace"]);
        assert_eq!(s[7].args, ["stack", "smoke", "--target-dir", "/t"]);
        assert_eq!((s[7].program, s[0].program), (Program::Xtask, Program::Cargo));
        let reuse: Vec<&str> = s.iter().filter(|s| s.reuse_index).map(|s| s.name).collect();
        assert_eq!(reuse, ["clippy lambda", "lambda", "stack smoke"]);
        let done = [
            Outcome { name: "fmt", passed: true, seconds: 2.6 },
            Outcome { name: "test", passed: false, seconds: 100.2 },
        ];
        assert_eq!(figures(&done, 103.0), "fmt ok 3 s, test FAILED 100 s; 103 s in all");
    }

    /// A cargo step runs the cargo found on PATH (a one-component `Path` would not be).
    #[test]
    fn a_cargo_step_runs_the_cargo_on_path() {
        let args = vec!["--version".to_string()];
        let step = Step { name: "v", program: Program::Cargo, args, reuse_index: false };
        let out = step.command(Path::new("/no/xtask")).read().unwrap();
        assert!(out.starts_with("cargo "), "{out}");
    }
}
