//! `cargo xtask verify`: every public and final-shape answer exact through the handler, vectors
//! and the 5 nearest references equal to the `labeller` crate's (the contest's brute force, no
//! code shared), and the recorded hostile answers current. `--public` keeps only the first part
//! on the public set (the quick check's).

use crate::util::{self, cmd, log, TEST_SET};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

const PUBLIC: u64 = 54_100;
const FINAL: (&str, u64) = ("tests/data/final-test-data.csv.gz", 72_100);
const HOSTILE: &str = "local-runner/tests/data/hostile-valid.json";

/// Payloads compared at the neighbour level: public, generated and adversarial (from `SEED`).
const SAMPLE: u64 = 2_000;
const GENERATED: u64 = 2_000;
const ADVERSARIAL: u64 = 500;
const SEED: u64 = 2026;

/// The last line of `local-runner verify`.
#[derive(Deserialize, Serialize, Debug, Default)]
struct Answers {
    total: u64,
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
#[derive(Deserialize, Serialize, Debug, Default)]
struct Neighbours {
    compared: u64,
    public: u64,
    generated: u64,
    adversarial: u64,
    vector_differences: u64,
    neighbour_differences: u64,
    decision_differences: u64,
    ties_across_fifth: u64,
    ties_decided_by_f64: u64,
    wall_s: f64,
}

#[derive(Serialize, Default)]
struct Gathered {
    answers: Answers,
    answers_wall_s: f64,
    final_answers: Answers,
    neighbours: Neighbours,
    hostile_current: bool,
}

#[derive(clap::Args)]
pub struct Args {
    /// Only the public set's answers through the handler (the quick check).
    #[arg(long)]
    public: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.public {
        let (answers, wall_s) = public_answers(&util::built("local-runner")?)?;
        let exact = answers.total == PUBLIC && inexact(&answers) == 0;
        let figures =
            format!("answers {}/{PUBLIC} exact ({wall_s:.1} s)", answers.total - inexact(&answers));
        return util::verdict("verify public", exact, &figures, &answers);
    }
    let g = gather()?;
    util::verdict("verify", judge(&g), &figures(&g), &g)
}

/// Answers that are not the expected ones (FP, FN, errors, another score).
fn inexact(a: &Answers) -> u64 {
    a.fp + a.fn_ + a.errors + a.score_mismatches
}

/// `local-runner verify` of the public set; its last line and the wall time.
fn public_answers(local_runner: &Path) -> Result<(Answers, f64)> {
    log!("answers: the {PUBLIC} public payloads through the handler");
    let t = Instant::now();
    let out = util::read(&cmd!(local_runner, "verify", TEST_SET))?;
    Ok((util::last_json(&out, "local-runner verify")?, t.elapsed().as_secs_f64()))
}

fn gather() -> Result<Gathered> {
    let (bin, labeller) = (util::built("local-runner")?, util::built("labeller")?);
    let local_runner = |args: String| -> Result<_> {
        let out = util::read(&duct::cmd(&bin, args.split(' ')).dir(util::root()))?;
        Ok((out, format!("local-runner {args}")))
    };
    let (answers, answers_wall_s) = public_answers(&bin)?;
    log!("answers: the {} payloads of {} through the handler", FINAL.1, FINAL.0);
    let (out, what) = local_runner(format!("verify {}", FINAL.0))?;
    let final_answers = util::last_json(&out, &what)?;
    log!("neighbours: the embedded index's search against the labeller");
    let (out, what) = local_runner(format!("verify --neighbours {TEST_SET} --generated {GENERATED} --adversarial {ADVERSARIAL} --seed {SEED} --sample {SAMPLE}"))?;
    let neighbours = util::last_json(&out, &what)?;
    log!("hostile cases: recorded answers against the labeller");
    let check = cmd!(labeller, "relabel", "--check", HOSTILE).unchecked().run();
    let hostile_current = check?.status.success();
    Ok(Gathered { answers, answers_wall_s, final_answers, neighbours, hostile_current })
}

fn judge(g: &Gathered) -> bool {
    let (a, n) = (&g.answers, &g.neighbours);
    let exact = |a: &Answers, n| a.total == n && inexact(a) == 0;
    let answers_ok = exact(a, PUBLIC) && exact(&g.final_answers, FINAL.1);
    let neighbours_ok = (n.public, n.generated, n.adversarial) == (SAMPLE, GENERATED, ADVERSARIAL)
        && n.compared == n.public + n.generated + n.adversarial
        && n.vector_differences + n.neighbour_differences + n.decision_differences == 0
        && n.ties_across_fifth > 0;
    answers_ok && neighbours_ok && g.hostile_current
}

fn figures(g: &Gathered) -> String {
    let (a, f, n) = (&g.answers, &g.final_answers, &g.neighbours);
    // A wrong decision is also a wrong score, so these two count every inexact answer.
    let exact = |a: &Answers| a.total.saturating_sub(a.errors + a.score_mismatches);
    let (x, total, fp, fn_, errors) = (exact(a), a.total, a.fp, a.fn_, a.errors);
    let (fx, ftotal, ffp, ffn, wall, det) =
        (exact(f), f.total, f.fp, f.fn_, g.answers_wall_s, a.detection_score);
    let Neighbours { compared, public, generated, adversarial, wall_s, .. } = g.neighbours;
    let (vector, neighbour, decision) =
        (n.vector_differences, n.neighbour_differences, n.decision_differences);
    let (ties, f64_ties) = (n.ties_across_fifth, n.ties_decided_by_f64);
    let hostile = if g.hostile_current { "current" } else { "STALE" };
    format!("answers {x}/{total} exact (FP {fp}, FN {fn_}, errors {errors}, detection {det:.2}, {wall:.1} s); final set {fx}/{ftotal} exact (FP {ffp}, FN {ffn}); neighbours {compared} compared ({public} public, {generated} generated, {adversarial} adversarial), {vector} vector, {neighbour} neighbour, {decision} decision differences, {ties} ties across 5th ({f64_ties} decided by f64), {wall_s:.1} s; hostile cases {hostile}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `local-runner verify` and `verify --neighbours` print last.
    const ANSWERS: &str = r#"{"total":54100,"tp":24500,"tn":29600,"fp":0,"fn":0,"errors":0,"score_mismatches":0,"detection_score":3000.0,"p50_us":8.5,"p99_us":30.1}"#;
    const NEIGHBOURS: &str = r#"{"compared":4500,"public":2000,"generated":2000,"adversarial":500,"refused_by_both":0,"vector_differences":0,"neighbour_differences":0,"decision_differences":0,"ties_across_fifth":37,"ties_decided_by_f64":2,"wall_s":12.5}"#;

    fn gathered() -> Gathered {
        Gathered {
            answers: util::last_json(&format!("progress\n{ANSWERS}"), "a").unwrap(),
            answers_wall_s: 3.0,
            final_answers: util::last_json(&ANSWERS.replace("54100", "72100"), "f").unwrap(),
            neighbours: util::last_json(NEIGHBOURS, "n").unwrap(),
            hostile_current: true,
        }
    }

    #[test]
    fn exact_answers_and_no_difference_pass_and_anything_else_fails() {
        let g = gathered();
        assert!(judge(&g));
        assert_eq!(
            figures(&g),
            "answers 54100/54100 exact (FP 0, FN 0, errors 0, detection 3000.00, 3.0 s); \
             final set 72100/72100 exact (FP 0, FN 0); neighbours 4500 compared (2000 public, 2000 generated, 500 adversarial), 0 vector, \
             0 neighbour, 0 decision differences, 37 ties across 5th (2 decided by f64), 12.5 s; \
             hostile cases current"
        );
        let breaks: [fn(&mut Gathered); 5] = [
            |g| g.answers.fp = 1,
            |g| g.final_answers.total = 72_099,
            |g| g.neighbours.neighbour_differences = 1,
            |g| g.neighbours.ties_across_fifth = 0,
            |g| g.hostile_current = false,
        ];
        for f in breaks {
            let mut g = gathered();
            f(&mut g);
            assert!(!judge(&g));
        }
        let stale = Gathered { hostile_current: false, ..gathered() };
        assert!(figures(&stale).ends_with("hostile cases STALE"));
    }
}
