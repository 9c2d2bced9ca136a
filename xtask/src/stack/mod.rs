//! `cargo xtask stack ...`: the contest stack (docs/STACK.md): images, checks, gates.

pub mod attack;
pub mod cgroup;
pub mod chaos;
pub mod check;
pub mod compose;
mod images;
pub mod k6;
pub mod load;
pub mod overload;
pub mod probe;
pub mod prometheus;
pub mod submission;

use crate::prelude::*;
use compose::Compose;
use prometheus::Watch;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
pub struct Common {
    /// Extra compose file on top of ours (repeatable), e.g. docker/experiments/cpuset-1.yml.
    #[arg(short = 'f', long = "override")]
    pub overrides: Vec<PathBuf>,
    /// Use the images as they are (skip `stack images`).
    #[arg(long, env = "STACK_SKIP_BUILD")]
    no_build: bool,
    /// The smoke gate: capture Prometheus's graphs of the run (the decision rate, the p99) into
    /// this PNG with Debian's headless Chromium.
    #[arg(long)]
    pub capture: Option<PathBuf>,
}

impl Common {
    pub fn prepare(&self, k6: bool, wrk: bool) -> Result<()> {
        compose::require_tools(k6, wrk)?;
        (!self.no_build).then(images::build).transpose()?;
        Ok(())
    }
}

/// The final's peak rate (its requests ran out ~100 s into the ramp); overload runs at 3x.
pub const SMOKE_RATE: u32 = 1130;

/// The smoke gate's load: `k6/fraud-test.js`, [`SMOKE_RATE`], `seconds` (the gate's 15, the
/// submission's check of its pulled images 5), public set.
fn smoke(seconds: u32) -> Vec<(&'static str, String)> {
    let rate = SMOKE_RATE.to_string();
    vec![("MODE", "smoke".into()), ("RATE", rate), ("DURATION", format!("{seconds}s"))]
}

#[derive(clap::Subcommand)]
enum Command {
    /// Build the API image and the HAProxy stand-in (no registry needed).
    Images,
    /// Contest rules and least privilege (compose config; with --running also the live stack).
    Check {
        #[arg(long)]
        running: bool,
    },
    /// Gate: a short constant-rate run of the whole stack; fails on any error, FP, FN or crash.
    Smoke(Common),
    /// Gate: instance loss (SIGKILL of each API under steady load through HAProxy).
    Chaos(chaos::Args),
    /// Gate: overload at 3x the contest peak, then recovery.
    Overload(Common),
    /// Gate: slowhttptest's slow attacks and a pipelined flood at the connection cap, each with
    /// a benign client beside it, against `local-runner serve` and the stack.
    Attack(attack::Args),
    /// The contest's `submission` branch: images pushed and pinned by digest, compose, info.json.
    Submission(submission::Args),
}

/// One stack command at a time per machine (projects, port 9999 and tags are shared): a lock.
pub fn exclusive() -> Result<fs::File> {
    let path = std::env::temp_dir().join("fraud-stack.lock");
    let f = fs::File::create(&path)?;
    if f.try_lock().is_err() {
        log!("another stack command (xtask or measure) holds {}: waiting", path.display());
        f.lock()?;
    }
    Ok(f)
}

pub fn run(args: Args) -> Result<()> {
    let _lock = (!matches!(args.command, Command::Check { .. })).then(exclusive).transpose()?;
    match args.command {
        Command::Images => {
            util::docker_usable()?;
            let built = images::build()?;
            util::verdict("stack images", true, &built.join(" "), &built)
        }
        Command::Check { running } => {
            let r = check::check(&Compose::stack(&[]), running)?;
            let (cpus, mb, n) = (r.cpus, r.memory_mb, r.problems.len());
            let also = if running { " (running stack too)" } else { "" };
            let figures = format!("cpus {cpus:.2}/1.00, memory {mb:.0}/350 MB, problems {n}{also}");
            util::verdict("stack check", r.problems.is_empty(), &figures, &r)
        }
        Command::Smoke(common) if gate_may_run("stack smoke")? => {
            let t = std::time::Instant::now();
            common.prepare(true, false)?;
            let watch = common.capture.clone().map_or(Watch::Scrape, Watch::Capture);
            let r =
                load::load_run("stack", &Compose::stack(&common.overrides), &smoke(15), &watch)?;
            // What Prometheus scraped of the APIs' own counts: every request k6 sent decided,
            // approved as often as the labeller approves, and the server's share of the time.
            let (s, k6_p99) = (&r.summary, r.summary.latency().p99);
            let m = r.metrics.unwrap_or_default();
            let problems = util::failed([
                (m.up != 2, format!("{} of 2 APIs scraped", m.up)),
                (
                    m.decisions != s.requests,
                    format!("{} decisions counted of {} sent", m.decisions, s.requests),
                ),
                (
                    m.approved != s.tn + s.fp,
                    format!("{} approved where the labeller approves {}", m.approved, s.tn + s.fp),
                ),
                (m.refused != 0, format!("{} refusals counted", m.refused)),
                // The server's time is part of each request's: its p99 cannot pass k6's, but for
                // the bucket k6's falls in (histogram_quantile interpolates inside a bucket).
                (
                    !(m.p99_ms > 0.0 && m.p99_ms <= bucket_above(k6_p99)),
                    format!("histogram p99 {:.3} ms against k6's {k6_p99:.3} ms", m.p99_ms),
                ),
            ]);
            let rate = 100.0 * m.approved as f64 / m.decisions.max(1) as f64;
            let figures = format!(
                "{}; Prometheus: {} decisions, approval rate {rate:.2} %, {} refusals, server p99 {:.3} ms; {:.0} s{}",
                load::run_figures(&r), m.decisions, m.refused, m.p99_ms, t.elapsed().as_secs_f64(), util::problems_suffix(&problems)
            );
            util::verdict("stack smoke", r.passed() && problems.is_empty(), &figures, &r)
        }
        Command::Smoke(_) => Ok(()),
        Command::Chaos(a) => chaos::run(a),
        Command::Overload(common) => overload::run(common),
        Command::Attack(a) => attack::run(a),
        Command::Submission(a) => submission::run(a),
    }
}

/// The upper bound, in ms, of the histogram bucket `ms` falls in (`http_server::latency`'s).
fn bucket_above(ms: f64) -> f64 {
    let bounds = http_server::latency::BUCKETS.iter().map(|s| s * 1000.0);
    bounds.into_iter().find(|b| ms <= *b).unwrap_or(f64::INFINITY)
}

/// `FRAUD_SKIP_STACK=1` skips a gate loudly (false); otherwise an unusable Docker fails it.
pub fn gate_may_run(name: &str) -> Result<bool> {
    if std::env::var("FRAUD_SKIP_STACK").is_ok_and(|v| v == "1") {
        let warning =
            "WARNING: FRAUD_SKIP_STACK=1: the contest stack is NOT tested (CI never sets this)";
        eprintln!("{warning}\n{warning}\n{warning}");
        println!("{name}: SKIPPED (FRAUD_SKIP_STACK=1, no stack test ran)");
        return Ok(false);
    }
    if let Err(e) = util::docker_usable() {
        let figures = format!("Docker not usable: {e:#} (FRAUD_SKIP_STACK=1 skips this gate)");
        util::verdict(name, false, &figures, &())?;
    }
    Ok(true)
}
