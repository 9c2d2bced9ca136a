//! `cargo xtask verify`: every public and final-shape answer exact, vectors and 5 nearest equal to
//! the `labeller` crate's, the recorded hostile answers current (`--public`: the public answers).

use crate::prelude::*;
use crate::scale::{ADVERSARIAL, GENERATED};
use crate::util::TEST_SET;
use index_pack::report::{Answers, Neighbours};

pub const PUBLIC: u64 = 54_100;
const FINAL: (&str, u64) = ("tests/data/final-test-data.csv.gz", 72_100);
const HOSTILE: &str = "local-runner/tests/data/hostile-valid.json";

/// Public payloads compared at the neighbour level, beside generated and adversarial ones (`SEED`).
const SAMPLE: u64 = 2_000;
const SEED: u64 = 2026;

#[derive(clap::Args)]
pub struct Args {
    /// Only the public set's answers through the handler (the quick check).
    #[arg(long)]
    public: bool,
}

#[derive(Serialize, Default)]
pub struct Gathered {
    pub answers: Answers,
    pub answers_wall_s: f64,
    pub final_answers: Answers,
    pub neighbours: Neighbours,
    pub hostile_current: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.public {
        let (answers, wall_s) = public_answers(&util::built("local-runner")?)?;
        let (exact, right) = (exact(&answers, PUBLIC), answers.total - answers.inexact());
        let figures = format!("answers {right}/{PUBLIC} exact ({wall_s:.1} s)");
        return util::verdict("verify public", exact, &figures, &answers);
    }
    let g = gather()?;
    util::verdict("verify", judge(&g), &figures(&g), &g)
}

/// All `n` answers, every one exact.
fn exact(a: &Answers, n: u64) -> bool {
    a.total == n && a.inexact() == 0
}

/// `local-runner verify` of the public set; its last line and the wall time.
fn public_answers(local_runner: &Path) -> Result<(Answers, f64)> {
    log!("answers: the {PUBLIC} public payloads through the handler");
    let (t, out) = (Instant::now(), util::read(&cmd!(local_runner, "verify", TEST_SET))?);
    Ok((util::last_json(&out, "local-runner verify")?, t.elapsed().as_secs_f64()))
}

fn gather() -> Result<Gathered> {
    let (bin, labeller) = (util::built("local-runner")?, util::built("labeller")?);
    let (answers, answers_wall_s) = public_answers(&bin)?;
    log!("answers: the {} payloads of {} through the handler", FINAL.1, FINAL.0);
    let out = util::read(&cmd!(&bin, "verify", FINAL.0))?;
    let final_answers = util::last_json(&out, "local-runner verify (final set)")?;
    log!("neighbours: the embedded index's search against the labeller");
    let words = format!("verify --neighbours {TEST_SET} --generated {GENERATED} --adversarial {ADVERSARIAL} --seed {SEED} --sample {SAMPLE}");
    let out = util::read(&util::command(&bin, &words, &[]))?;
    let neighbours = util::last_json(&out, "local-runner verify --neighbours")?;
    log!("hostile cases: recorded answers against the labeller");
    let check = cmd!(labeller, "relabel", "--check", HOSTILE).unchecked().run();
    let hostile_current = check?.status.success();
    Ok(Gathered { answers, answers_wall_s, final_answers, neighbours, hostile_current })
}

pub fn judge(g: &Gathered) -> bool {
    let n = &g.neighbours;
    let answers_ok = exact(&g.answers, PUBLIC) && exact(&g.final_answers, FINAL.1);
    let neighbours_ok = (n.public, n.generated, n.adversarial) == (SAMPLE, GENERATED, ADVERSARIAL)
        && n.compared == n.public + n.generated + n.adversarial
        && n.differences() == 0
        && n.ties_across_fifth > 0;
    answers_ok && neighbours_ok && g.hostile_current
}

pub fn figures(g: &Gathered) -> String {
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
