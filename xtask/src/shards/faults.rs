//! `cargo xtask shards --faults` (CI): a small synthetic set split in shards, each shard's
//! bootstrap under AWS's emulator behind a fault proxy ([`Proxy`]), `front serve` over the
//! proxies. Each fault is made at shard 1 in turn (slow, beyond the deadline, garbage, fewer
//! than 5 neighbours, a duplicate, another set, killed) while ten labelled transactions are sent
//! at once: a slow shard delays them together and `/ready` meanwhile not at all; every other
//! fault gives 502 or 504 naming the shard and never an answer; after each fault, and after the
//! killed shard comes back, every answer is the labeller's again, without restarting the front.
//! Then the sharded rollout: the deployment hook checks the front (as a Lambda function) over
//! the right set, and over a set with one wrong shard, which it must fail.

use super::prepare;
use crate::lambda::emulator::{Emulator, Settings};
use crate::lambda::{hook, package, sam::Tools};
use crate::prelude::*;
use crate::util::Entry;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// What a proxy does to the invocations it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Fault {
    None,
    Slow(u64),
    Garbage,
    Fewer,
    Duplicate,
    OtherSet,
}

/// A fault proxy in front of a shard's emulator: forwards each invocation (one at a time, as one
/// execution environment takes them) and alters the answer as its [`Fault`] says; with its
/// shard gone it drops the connection, as a dead endpoint would.
pub struct Proxy {
    pub target: String,
    state: Arc<Mutex<(String, Fault)>>,
}

impl Proxy {
    pub fn start(upstream: &str) -> Result<Proxy> {
        let state = Arc::new(Mutex::new((upstream.to_string(), Fault::None)));
        let (shared, one_at_a_time) = (state.clone(), Arc::new(Mutex::new(())));
        let agent = util::http_agent(Duration::from_secs(10));
        let addr = util::stand_in(move |(_, body): &util::Request| {
            let (upstream, fault) = shared.lock().ok()?.clone();
            if let Fault::Slow(ms) = fault {
                std::thread::sleep(Duration::from_millis(ms));
            }
            let answer = {
                let _turn = one_at_a_time.lock().ok()?;
                agent.post(&upstream).send(&body[..]).ok()?.body_mut().read_to_vec().ok()?
            };
            let mut a: Value = serde_json::from_slice(&answer).ok()?;
            let n = &mut a["neighbours"];
            match fault {
                Fault::Garbage => return Some(("200 OK".into(), b"<html>busy</html>".to_vec())),
                Fault::Fewer => drop(n.as_array_mut()?.pop()),
                Fault::Duplicate => n[4] = n[3].clone(),
                Fault::OtherSet => {
                    a["index"]["part"]["set_sha256"] = "0".repeat(64).into();
                    a["index"]["crc32"] = "0badc0de".into();
                }
                Fault::None | Fault::Slow(_) => {}
            }
            Some(("200 OK".into(), serde_json::to_vec(&a).ok()?))
        })?;
        Ok(Proxy { target: format!("http://{addr}#function"), state })
    }

    fn set(&self, fault: Fault) {
        self.state.lock().expect("the proxy panicked").1 = fault;
    }

    fn forward_to(&self, upstream: &str) {
        self.state.lock().expect("the proxy panicked").0 = upstream.to_string();
    }
}

/// How one batch of ten went.
#[derive(Debug, Serialize)]
struct Batch {
    fault: String,
    /// Each answer's status, and whether it was right (200) or named shard 1 (502, 504).
    statuses: Vec<u16>,
    as_expected: bool,
    ms: f64,
    /// `/ready`'s time during the batch (the slow shard only).
    ready_ms: Option<f64>,
}

/// Ten transactions sent at once to the front at `base`; each answer judged: right (`want` 200)
/// or a refusal with `want` naming shard 1.
fn batch(entries: &[Entry], base: &str, fault: &str, want: u16, probe_ready: bool) -> Batch {
    let agent = util::http_agent(Duration::from_secs(5));
    let t = Instant::now();
    let answers: Vec<Result<(u16, String), String>> = std::thread::scope(|s| {
        let sent: Vec<_> = entries[..10]
            .iter()
            .map(|e| {
                let agent = agent.clone();
                s.spawn(move || {
                    let post = agent.post(format!("{base}/fraud-score"));
                    let mut r = post.content_type("application/json").send(e.request.get());
                    let r = r.as_mut().map_err(|e| e.to_string())?;
                    Ok((r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()))
                })
            })
            .collect();
        sent.into_iter().map(|h| h.join().unwrap_or(Err("panicked".into()))).collect()
    });
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let ready_ms = probe_ready.then(|| {
        let t = Instant::now();
        let ok = agent.get(format!("{base}/ready")).call().is_ok_and(|r| r.status() == 200);
        if ok {
            t.elapsed().as_secs_f64() * 1000.0
        } else {
            f64::INFINITY
        }
    });
    let mut statuses = Vec::new();
    let mut as_expected = true;
    for (a, e) in answers.iter().zip(entries) {
        let (status, body) = a.clone().unwrap_or((0, String::new()));
        statuses.push(status);
        as_expected &= match want {
            200 => e.judge(status, &body).is_ok(),
            _ => status == want && body.contains("shard 1 ("),
        };
    }
    Batch { fault: fault.into(), statuses, as_expected, ms, ready_ms }
}

#[derive(Serialize, Default)]
struct Report {
    batches: Vec<Batch>,
    /// The front's `fraud_requests_rejected_total{reason="shard_unavailable"}` at the end.
    counted_unavailable: Option<u64>,
    refused: u64,
    /// The deployment hook through the front over the right set, and with one wrong shard.
    hook_right: Option<String>,
    hook_wrong: Option<String>,
}

/// The slow shard's delay, and the front's deadline per shard.
const SLOW_MS: u64 = 300;
const TIMEOUT_MS: u64 = 1000;

pub fn run(count: u32) -> Result<()> {
    let (t, dir) = (Instant::now(), util::xtask_dir("shards-faults")?);
    // Every binary of the workspace build first: the shards' builds then change the scorer's
    // index, and a workspace binary built after them would be rebuilt around it.
    let (labeller, front, hook) =
        (util::built("labeller")?, util::built("front")?, util::built("pretraffic")?);
    let (refs, tests) = (dir.join("references.json.gz"), dir.join("tests.json.gz"));
    crate::scale::draw(&labeller, 30_000, 11, None, &refs)?;
    let words = "generate-csv --count 10 --seed 11 --any-references";
    util::run(&util::command(&labeller, words, &[("--references", &refs), ("--out", &tests)]))?;
    let entries = util::entries_of(&tests)?;
    let shard_dirs = prepare(&refs, count, &dir)?;
    let rie = Tools::ensure()?.rie;
    let env = vec![("FRAUD_LAMBDA_ROLE".to_string(), "shard".to_string())];
    let shard = Settings { memory_mb: 512, timeout_s: 10, env, ..Settings::default() };
    let start = |d: &PathBuf| Emulator::start(&rie, d, &shard, &d.join("rie.log"));
    let mut shards = shard_dirs.iter().map(start).collect::<Result<Vec<_>>>()?;
    let proxies: Vec<Proxy> = shards.iter().map(|s| Proxy::start(&s.url)).collect::<Result<_>>()?;
    let targets: Vec<String> = proxies.iter().map(|p| p.target.clone()).collect();
    let (listen, metrics) = (util::free_port()?, util::free_port()?);
    let (l, m) = (listen.to_string(), metrics.to_string());
    let front_serve = cmd!(&front, "serve", "--listen", l, "--metrics-listen", m)
        .env("FRAUD_SHARDS", targets.join(","))
        .env("FRAUD_SHARD_TIMEOUT_MS", TIMEOUT_MS.to_string());
    let _front = util::Killed(util::to_log(front_serve, &dir.join("front.log")).start()?);
    let base = format!("http://{listen}");
    util::wait_200(
        "the front's proof of its shards",
        &format!("{base}/ready"),
        Duration::from_secs(30),
    )?;
    let mut r = Report::default();
    let cases = [
        (Fault::None, 200),
        (Fault::Slow(SLOW_MS), 200),
        (Fault::Slow(TIMEOUT_MS + 500), 504),
        (Fault::Garbage, 502),
        (Fault::Fewer, 502),
        (Fault::Duplicate, 502),
        (Fault::OtherSet, 502),
    ];
    for (fault, want) in cases {
        proxies[1].set(fault);
        log!("shards: {fault:?} at shard 1");
        r.batches.push(batch(
            &entries,
            &base,
            &format!("{fault:?}"),
            want,
            fault == Fault::Slow(SLOW_MS),
        ));
        proxies[1].set(Fault::None);
        r.batches.push(batch(&entries, &base, "none, after it", 200, false));
    }
    log!("shards: shard 1 killed, then started again");
    drop(shards.remove(1));
    r.batches.push(batch(&entries, &base, "killed", 502, false));
    shards.insert(1, start(&shard_dirs[1])?);
    proxies[1].forward_to(&shards[1].url);
    r.batches.push(batch(&entries, &base, "back", 200, false));
    r.refused = r.batches.iter().flat_map(|b| &b.statuses).filter(|s| **s >= 500).count() as u64;
    r.counted_unavailable = unavailable(&format!("http://{metrics}/metrics"));
    let (right, wrong) = rollout(&rie, &proxies, [&labeller, &front, &hook], &refs, &dir)?;
    (r.hook_right, r.hook_wrong) =
        (right.status().map(String::from), wrong.status().map(String::from));
    let bad: Vec<&Batch> = r.batches.iter().filter(|b| !b.as_expected).collect();
    let slow = r.batches.iter().find(|b| b.fault == format!("{:?}", Fault::Slow(SLOW_MS)));
    let (slow_ms, ready_ms) =
        slow.map_or((f64::NAN, f64::NAN), |b| (b.ms, b.ready_ms.unwrap_or(f64::NAN)));
    let checks = [
        (!bad.is_empty(), format!("answers not as expected: {bad:?}")),
        (
            slow_ms.is_nan() || slow_ms >= 2.0 * SLOW_MS as f64,
            format!("ten requests behind a {SLOW_MS} ms shard took {slow_ms:.0} ms"),
        ),
        (
            ready_ms.is_nan() || ready_ms >= 10.0,
            format!("/ready took {ready_ms:.1} ms while they waited"),
        ),
        (
            r.counted_unavailable != Some(r.refused),
            format!(
                "the front counted {:?} shard failures, {} were answered",
                r.counted_unavailable, r.refused
            ),
        ),
        (
            r.hook_right.as_deref() != Some("Succeeded"),
            format!("the hook said {:?} of the right set", r.hook_right),
        ),
        (
            r.hook_wrong.as_deref() != Some("Failed"),
            format!("the hook said {:?} of a set with a wrong shard", r.hook_wrong),
        ),
    ];
    let problems = util::failed(checks);
    let figures = format!(
        "{} batches of 10 over {count} shards, every fault a 502/504 naming shard 1 and every recovery right: {}; ten requests behind a {SLOW_MS} ms shard answered in {slow_ms:.0} ms, /ready meanwhile in {ready_ms:.1} ms; hook over the right set {:?}, over a wrong shard {:?}; {:.0} s{}",
        r.batches.len(), bad.is_empty(), r.hook_right, r.hook_wrong, t.elapsed().as_secs_f64(), util::problems_suffix(&problems)
    );
    util::verdict("shards faults", problems.is_empty(), &figures, &r)
}

/// The front's count of shard failures, from its metrics listener.
fn unavailable(url: &str) -> Option<u64> {
    let text = util::http_agent(Duration::from_secs(2))
        .get(url)
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("fraud_requests_rejected_total{reason=\"shard_unavailable\""))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// The sharded rollout under the emulators: the front as a Lambda function over the proxies,
/// checked by the deployment hook (its sample labelled over this set) through the Invoke API, as
/// CodeDeploy runs it before traffic shifts; once over the right set, once with shard 1
/// answering for another set (a new set deployed with a wrong shard).
fn rollout(
    rie: &Path,
    proxies: &[Proxy],
    [labeller, front_bin, hook_bin]: [&Path; 3],
    refs: &Path,
    dir: &Path,
) -> Result<(hook::Run, hook::Run)> {
    let front = dir.join("front-lambda");
    package::copy_bootstrap(front_bin, &front)?;
    let hook_dir = dir.join("hook");
    package::copy_bootstrap(hook_bin, &hook_dir)?;
    let paths = [("--references", refs), ("--out", &hook_dir.join("sample.json"))];
    util::run(&util::command(labeller, "deploy-sample --any-references", &paths))?;
    let targets: Vec<&str> = proxies.iter().map(|p| p.target.as_str()).collect();
    let env = vec![
        ("FRAUD_SHARDS".to_string(), targets.join(",")),
        ("AWS_REGION".into(), "us-east-1".into()),
    ];
    let settings = Settings { memory_mb: 512, timeout_s: 30, env, ..Settings::default() };
    let (right_logs, wrong_logs) = (dir.join("right"), dir.join("wrong"));
    fs::create_dir_all(&right_logs)?;
    fs::create_dir_all(&wrong_logs)?;
    log!("shards: the deployment hook through the front over the right set");
    let right = hook::run_with(rie, (&front, &settings), &hook_dir, &right_logs)?;
    proxies[1].set(Fault::OtherSet);
    log!("shards: the deployment hook through the front over a set with shard 1 of another set");
    let wrong = hook::run_with(rie, (&front, &settings), &hook_dir, &wrong_logs);
    proxies[1].set(Fault::None);
    Ok((right, wrong?))
}
