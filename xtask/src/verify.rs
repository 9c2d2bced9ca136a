//! `cargo xtask verify`: the scorer against the contest's answers and against the labeller.
//!
//! 1. Answers: `local-runner verify tests/data/test-data.json.gz` replays the 54,100 public
//!    payloads through the handler; every answer must be the labelled one (0 FP, 0 FN, 0
//!    errors, 0 score mismatches).
//! 2. Neighbours: `local-runner verify --neighbours` compares query vectors and the 5 nearest
//!    references of the embedded index with the `labeller` crate (the contest's brute force,
//!    sharing no code with the scorer) on 2,000 public payloads spread over the file, 2,000
//!    payloads drawn from the contest generator's distributions and 500 adversarial queries
//!    (copies of references, midpoints of close pairs, 5th/6th-place ties, closest pairs);
//!    0 differences, and the ties must be there. `--all-neighbours` takes all 54,100 instead of
//!    the 2,000 (a few minutes).
//! 3. Hostile cases: `labeller relabel --check` confirms that the recorded answers of the
//!    odd-but-valid requests (local-runner/tests/data/hostile-valid.json) are still the
//!    labeller's.
//!
//! Verdict: `verify: PASS|FAIL answers 54100/54100 ...; neighbours N compared, 0 differences ...`.

use crate::cmd::{cmd, output, root, run as run_cmd};
use crate::report::verdict;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The public test set.
const TEST_SET: &str = "tests/data/test-data.json.gz";
/// Its size: every one must be answered exactly.
const PUBLIC: u64 = 54_100;
const HOSTILE: &str = "local-runner/tests/data/hostile-valid.json";

#[derive(clap::Args)]
pub struct Args {
    /// Public payloads compared at the neighbour level (spread over the file).
    #[arg(long, default_value_t = 2_000)]
    sample: u64,
    /// Compare all 54,100 public payloads at the neighbour level instead.
    #[arg(long)]
    all_neighbours: bool,
    /// Generated payloads compared at the neighbour level.
    #[arg(long, default_value_t = 2_000)]
    generated: u64,
    /// Adversarial queries compared at the neighbour level.
    #[arg(long, default_value_t = 500)]
    adversarial: u64,
    /// Seed of the generated payloads and the adversarial anchors.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
}

/// The last line of `local-runner verify`.
#[derive(Deserialize, Serialize, Debug)]
struct Answers {
    total: u64,
    tp: u64,
    tn: u64,
    fp: u64,
    #[serde(rename = "fn")]
    fn_: u64,
    errors: u64,
    score_mismatches: u64,
    detection_score: f64,
    p50_us: f64,
    p99_us: f64,
}

/// The last line of `local-runner verify --neighbours`.
#[derive(Deserialize, Serialize, Debug)]
struct Neighbours {
    compared: u64,
    public: u64,
    generated: u64,
    adversarial: u64,
    refused_by_both: u64,
    vector_differences: u64,
    neighbour_differences: u64,
    decision_differences: u64,
    ties_across_fifth: u64,
    ties_decided_by_f64: u64,
    wall_s: f64,
}

#[derive(Serialize)]
struct Detail {
    answers: Answers,
    answers_wall_s: f64,
    neighbours: Neighbours,
    hostile_current: bool,
}

/// The JSON object on the last line of a command's stdout.
fn last_json<T: for<'de> Deserialize<'de>>(stdout: &str, what: &str) -> Result<T> {
    let line = stdout
        .lines()
        .last()
        .with_context(|| format!("{what} printed nothing"))?;
    serde_json::from_str(line).with_context(|| format!("{what}: unexpected last line {line:?}"))
}

pub fn run(args: Args) -> Result<()> {
    run_cmd(&mut cmd(
        "cargo",
        ["build", "--release", "-p", "local-runner", "-p", "labeller"],
    ))?;
    let bin = |name: &str| {
        root()
            .join("target/release")
            .join(name)
            .display()
            .to_string()
    };
    let local_runner = &bin("local-runner");

    crate::log!("answers: the {PUBLIC} public payloads through the handler");
    let t = Instant::now();
    let answers: Answers = last_json(
        &output(&mut cmd(local_runner, ["verify", TEST_SET]))?,
        "local-runner verify",
    )?;
    let answers_wall_s = t.elapsed().as_secs_f64();

    let (sample, generated, adversarial, seed) = (
        args.sample.to_string(),
        args.generated.to_string(),
        args.adversarial.to_string(),
        args.seed.to_string(),
    );
    let mut neighbours_cmd = cmd(
        local_runner,
        [
            "verify",
            "--neighbours",
            TEST_SET,
            "--generated",
            &generated,
            "--adversarial",
            &adversarial,
            "--seed",
            &seed,
        ],
    );
    if !args.all_neighbours {
        neighbours_cmd.args(["--sample", &sample]);
    }
    crate::log!("neighbours: the embedded index's search against the labeller");
    let neighbours: Neighbours = last_json(
        &output(&mut neighbours_cmd)?,
        "local-runner verify --neighbours",
    )?;

    crate::log!("hostile cases: recorded answers against the labeller");
    let hostile_current = cmd(&bin("labeller"), ["relabel", "--check", HOSTILE])
        .status()
        .context("cannot start labeller")?
        .success();

    let public_wanted = if args.all_neighbours {
        PUBLIC
    } else {
        args.sample.min(PUBLIC)
    };
    let answers_ok = answers.total == PUBLIC
        && answers.fp + answers.fn_ + answers.errors + answers.score_mismatches == 0;
    let n = &neighbours;
    let neighbours_ok = n.public == public_wanted
        && n.generated == args.generated
        && n.adversarial == args.adversarial
        && n.compared == n.public + n.generated + n.adversarial
        && n.vector_differences + n.neighbour_differences + n.decision_differences == 0
        && (args.adversarial == 0 || n.ties_across_fifth > 0);
    let figures = format!(
        "answers {}/{} exact (FP {}, FN {}, errors {}, detection {:.2}, {:.1} s); \
         neighbours {} compared ({} public, {} generated, {} adversarial), {} vector, {} neighbour, \
         {} decision differences, {} ties across 5th ({} decided by f64), {:.1} s; hostile cases {}",
        // A wrong decision is also a wrong score, so these two count every inexact answer.
        answers
            .total
            .saturating_sub(answers.errors + answers.score_mismatches),
        answers.total,
        answers.fp,
        answers.fn_,
        answers.errors,
        answers.detection_score,
        answers_wall_s,
        n.compared,
        n.public,
        n.generated,
        n.adversarial,
        n.vector_differences,
        n.neighbour_differences,
        n.decision_differences,
        n.ties_across_fifth,
        n.ties_decided_by_f64,
        n.wall_s,
        if hostile_current { "current" } else { "STALE" },
    );
    let passed = answers_ok && neighbours_ok && hostile_current;
    verdict(
        "verify",
        passed,
        &figures,
        &Detail {
            answers,
            answers_wall_s,
            neighbours,
            hostile_current,
        },
    )
}
