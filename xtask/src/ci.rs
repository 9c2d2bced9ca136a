//! `cargo xtask ci`: what `.ci/run` runs after `scripts/setup.sh`. Each step prints its own
//! verdict; a failed step does not stop the later ones.
//!
//! Everything is compiled once: the workspace build (one profile, every feature, every target,
//! linted by clippy as it compiles: `util::build_workspace`) serves the tests, verify and the
//! build scripts of the shipped binaries (`util::build_shipped`: one build for the API image and
//! the Lambda, embedding the index the workspace build packed). Only the fuzz targets, which
//! need sanitizer flags, are a build of their own.

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
    /// The loop of a change to the request path: formatting, the linted build, the unit tests
    /// and the public set's answers (`verify --public`).
    #[arg(long)]
    quick: bool,
}

/// What runs a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    /// `cargo <args>`.
    Cargo,
    /// `cargo <args[0]> --profile ci --workspace --all-features <args[1..]>`, linted
    /// (`util::cargo_workspace`): the same units as the workspace build.
    Workspace,
    /// This binary again (`cargo xtask <args>`).
    Xtask,
}

#[derive(Debug)]
struct Step {
    name: &'static str,
    program: Program,
    args: Vec<String>,
}

impl Step {
    /// The step's command, run in the workspace root. Cargo is named as a string, so that it is
    /// looked up on PATH (duct runs a one-component `Path` from the working directory).
    fn command(&self, me: &Path) -> duct::Expression {
        match self.program {
            Program::Cargo => duct::cmd("cargo", &self.args),
            Program::Workspace => {
                let rest: Vec<&str> = self.args[1..].iter().map(String::as_str).collect();
                util::cargo_workspace(&self.args[0], &rest)
            }
            Program::Xtask => duct::cmd(me, &self.args),
        }
        .dir(util::root())
    }
}

/// Where CI's submission test pushes the API image (Debian's registry, started by the step).
const LOOPBACK_IMAGE: &str = "127.0.0.1:5000/fraud-api:test";

/// The steps, in order: cheap checks first, then the builds, then the gates that use them.
fn steps(quick: bool) -> Vec<Step> {
    use Program::{Cargo, Workspace, Xtask};
    let step = |name, program, args: &[&str]| Step {
        name,
        program,
        args: args.iter().map(|a| a.to_string()).collect(),
    };
    let fmt = step("fmt", Cargo, &["fmt", "--all", "--", "--check"]);
    // Every target compiled once, with clippy's lints (-D warnings) on every workspace crate.
    let build = step("build", Xtask, &["build"]);
    if quick {
        return vec![
            fmt,
            build,
            step("test", Workspace, &["test", "--lib", "--bins"]),
            step("verify", Xtask, &["verify", "--public"]),
        ];
    }
    let submission = ["stack", "submission", "--no-build", "--test", "--image", LOOPBACK_IMAGE];
    vec![
        fmt,
        build,
        // Unit, integration and doc tests of every crate.
        step("test", Workspace, &["test"]),
        step("verify", Xtask, &["verify"]),
        step("fuzz", Xtask, &["fuzz", "ci"]),
        // The API image's local-runner and the Lambda's bootstrap, in one build.
        step("shipped build", Xtask, &["build", "--shipped"]),
        step("lambda", Xtask, &["lambda", "--skip-build"]),
        // The smoke builds the images (from the shipped build); the other stack gates reuse
        // them. The smoke and chaos at the final's peak (1,130 req/s), the overload at 3x it.
        step("stack smoke", Xtask, &["stack", "smoke"]),
        step("stack chaos", Xtask, &["stack", "chaos", "--no-build"]),
        step("stack overload", Xtask, &["stack", "overload", "--no-build"]),
        // Hostile clients at the cap, against `local-runner serve` and the stack (short runs).
        step("stack attack", Xtask, &["stack", "attack", "--no-build", "--seconds", "8"]),
        // It removes the local images (pulled back from the loopback registry, retagged).
        step("stack submission", Xtask, &submission),
        // Last: it rebuilds the workspace's local-runner around a synthetic index.
        step("scale", Xtask, &["scale"]),
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
    for step in steps(args.quick).iter().filter(only) {
        log!("== ci: {} ==", step.name);
        let (t, result) = (Instant::now(), step.command(&me).run());
        if let Err(err) = &result {
            log!("ci: {} failed: {err}", step.name);
        }
        let (name, passed, seconds) = (step.name, result.is_ok(), t.elapsed().as_secs_f64());
        done.push(Outcome { name, passed, seconds });
    }
    let passed = done.iter().all(|s| s.passed);
    let name = if args.quick { "ci quick" } else { "ci" };
    util::verdict(name, passed, &figures(&done, started.elapsed().as_secs_f64()), &done)
}

/// `fmt ok 3 s, build FAILED 80 s, ...; 1200 s in all`.
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
        let names = |quick| steps(quick).iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
        assert_eq!(names(false), "fmt, build, test, verify, fuzz, shipped build, lambda, stack smoke, stack chaos, stack overload, stack attack, stack submission, scale");
        assert_eq!(names(true), "fmt, build, test, verify");
        let s = steps(false);
        assert_eq!((s[1].program, &s[1].args[..]), (Program::Xtask, &["build".to_string()][..]));
        assert_eq!((s[2].program, &s[2].args[..]), (Program::Workspace, &["test".to_string()][..]));
        let quick = steps(true);
        assert_eq!(quick[2].args, ["test", "--lib", "--bins"]);
        assert_eq!(quick[3].args, ["verify", "--public"]);
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
        let step = Step { name: "v", program: Program::Cargo, args };
        let out = step.command(Path::new("/no/xtask")).read().unwrap();
        assert!(out.starts_with("cargo "), "{out}");
    }
}
