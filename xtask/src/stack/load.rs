//! What every loaded stack shares: a [`Session`] (up, checked, counters) and [`load_run`] (k6).

use super::cgroup::{Cgroup, Snapshot};
use super::compose::{inspect, Compose, Up};
use super::k6::{self, Summary};
use super::probe::{self, haproxy_stat, sample, wait_ready, Monitor, StatRow};
use super::prometheus::{Observed, Prometheus, Watch};
use super::{check, Common};
use crate::prelude::*;
use crate::util::Background;

/// A container's limits, counters over the run, and state after it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Container {
    pub service: String,
    pub cpus: f64,
    pub before: Snapshot,
    pub after: Snapshot,
    pub restarts: u32,
    pub oom_killed: bool,
    pub running: bool,
}

impl Container {
    fn grew(&self, f: fn(&Snapshot) -> u64) -> u64 {
        f(&self.after).saturating_sub(f(&self.before))
    }
    pub fn cpu_s(&self) -> f64 {
        self.grew(|s| s.cpu_ns) as f64 / 1e9
    }
    /// CFS periods in which the container's quota ran out during the run.
    pub fn throttled(&self) -> u64 {
        self.grew(|s| s.nr_throttled)
    }
    pub fn oom_kills(&self) -> u64 {
        self.grew(|s| s.oom_kill)
    }
    pub fn peak_mb(&self) -> f64 {
        util::mb(self.after.memory_peak)
    }
    pub fn limit_mb(&self) -> f64 {
        util::mb(self.after.memory_limit)
    }
    /// What went wrong with this container during the run, if anything.
    pub fn trouble(&self) -> Option<String> {
        let (a, peak, limit) = (&self.after, self.peak_mb(), self.limit_mb());
        let failcnt = a.memory_failcnt;
        let memory = format!("memory at its limit ({peak:.1} of {limit:.0} MB, failcnt {failcnt})");
        let t = util::failed([
            (!self.running, "not running".to_string()),
            (self.restarts > 0, format!("restarted {} times", self.restarts)),
            (self.oom_killed || self.oom_kills() > 0, "OOM kill".into()),
            (a.memory_failcnt > 0 || a.memory_peak >= a.memory_limit, memory),
        ]);
        (!t.is_empty()).then(|| format!("{}: {}", self.service, t.join(", ")))
    }
}

/// A project up and checked, its counters read at the start, files at `<base>.*`; down on drop.
pub struct Session {
    pub compose: Compose,
    pub base: PathBuf,
    pub started: String,
    pub problems: Vec<String>,
    pub load_start: String,
    watched: Vec<(String, String, Cgroup, Snapshot, u32)>,
    up: Up,
}

impl Session {
    /// Brings `compose` up and waits until it serves; checks ours.
    pub fn start(name: &str, compose: &Compose) -> Result<Session> {
        let (t, up) = (Instant::now(), Up(compose.clone()));
        let serving = compose.external.unwrap_or(wait_serving);
        let up_and_serving = compose.up().and_then(|()| serving(compose));
        up_and_serving.inspect_err(|_| log!("last log lines:\n{}", compose.log_tail()))?;
        log!("{} ready in {:.1} s", compose.project, t.elapsed().as_secs_f64());
        let ours = compose.external.is_none() && !compose.apis.is_empty();
        let problems = if ours { check::check(compose, true)?.problems } else { vec![] };
        let watched = compose.services()?.into_iter().map(|svc| {
            let i = inspect(&compose.id(&svc)?)?;
            let id = i["Id"].as_str().context("no container id")?.to_string();
            let cg = Cgroup::of(&id)?;
            cg.reset_peak()?;
            Ok((svc, id, cg.clone(), cg.snapshot()?, restarts(&i)))
        });
        let (watched, started) = (watched.collect::<Result<_>>()?, util::stamp());
        let base = util::xtask_dir("stack")?.join(format!("{started}-{name}"));
        let (compose, load_start) = (compose.clone(), util::loadavg());
        Ok(Session { compose, base, started, problems, load_start, watched, up })
    }

    /// Counters afresh (peaks reset) for [`Session::containers`]; restarts count from the start.
    pub fn restart_counters(&mut self) -> Result<()> {
        for (_, _, cg, before, _) in &mut self.watched {
            cg.reset_peak()?;
            *before = cg.snapshot()?;
        }
        Ok(())
    }

    /// A gate's session of the stack (`None` when `FRAUD_SKIP_STACK=1` skips the gate).
    pub fn gate(gate: &str, common: &Common, wrk: bool) -> Result<Option<Session>> {
        if !super::gate_may_run(&format!("stack {gate}"))? {
            return Ok(None);
        }
        common.prepare(true, wrk)?;
        Session::start(gate, &Compose::stack(&common.overrides)).map(Some)
    }

    /// Samples the stack every `every` until stopped, each also a line of `<base>.monitor.jsonl`.
    pub fn monitor(&self, every: Duration, probe: bool, memory: bool) -> Result<Monitor> {
        let (socket_dir, apis) = (self.compose.socket_dir()?, self.compose.apis.clone());
        let memory = self.watched.iter().filter(|_| memory).map(|w| (w.0.clone(), w.2.clone()));
        let (memory, file): (Vec<_>, _) =
            (memory.collect(), fs::File::create(self.base.with_extension("monitor.jsonl"))?);
        let mut out = std::io::LineWriter::new(file);
        Ok(Background::every(every, vec![], move |all| {
            let s = sample(&socket_dir, &apis, probe, &memory);
            let _ = serde_json::to_writer(&mut out, &s).map(|_| writeln!(out));
            all.push(s);
        }))
    }

    /// Every container's counters now, against the start.
    pub fn containers(&self) -> Result<Vec<Container>> {
        let each = self.watched.iter().map(|(service, id, cg, before, restarts)| {
            let (i, service, before, after) =
                (inspect(id)?, service.clone(), *before, cg.snapshot()?);
            let (state, restarts) = (&i["State"], self::restarts(&i) - restarts);
            let cpus = i["HostConfig"]["NanoCpus"].as_f64().unwrap_or(0.0) / 1e9;
            let (oom_killed, running) = (state["OOMKilled"] == true, state["Running"] == true);
            Ok(Container { service, cpus, before, after, restarts, oom_killed, running })
        });
        each.collect()
    }

    /// Takes the project down, writes the report to `<base>.json`, then the gate's verdict.
    pub fn finish(self, gate: &str, figures: &str, mut report: serde_json::Value) -> Result<()> {
        drop(self.up);
        report["load_start"] = self.load_start.into();
        report["load_end"] = util::loadavg().into();
        report["problems"] = self.problems.clone().into();
        util::write_json(&self.base.with_extension("json"), &report)?;
        util::verdict(&format!("stack {gate}"), self.problems.is_empty(), figures, &report)
    }
}

fn restarts(inspect: &serde_json::Value) -> u32 {
    inspect["RestartCount"].as_u64().unwrap_or(0) as u32
}

/// Each API's own `/ready`, HAProxy's, every server UP.
fn wait_serving(compose: &Compose) -> Result<()> {
    let (half, s) = (Duration::from_millis(500), Duration::from_secs);
    for api in &compose.apis {
        let sock = compose.socket_dir()?.join(format!("{api}.sock"));
        wait_ready(api, s(90), || probe::ready_unix(&sock, half))?;
    }
    wait_ready("haproxy", s(30), || probe::ready_tcp(9999, half))?;
    (!compose.apis.is_empty()).then(|| wait_all_up(compose, s(15))).transpose()?;
    Ok(())
}

/// Polls HAProxy's stats socket every 100 ms until `done` says `Ok` to its rows.
fn poll_stat<T>(
    c: &Compose,
    what: &str,
    limit: Duration,
    done: impl Fn(&[StatRow]) -> Result<T, String>,
) -> Result<T> {
    let sock = c.socket_dir()?.join("haproxy.sock");
    util::poll(what, limit, Duration::from_millis(100), || {
        Ok(done(&haproxy_stat(&sock).unwrap_or_default()))
    })
}

pub fn wait_all_up(compose: &Compose, limit: Duration) -> Result<()> {
    poll_stat(compose, "HAProxy: every server UP", limit, |rows| {
        let is_up = |a: &&String| rows.iter().any(|r| &r.svname == *a && r.up());
        let (up, n) = (compose.apis.iter().filter(is_up).count(), compose.apis.len());
        (up == n).then_some(()).ok_or(format!("{up} of {n} UP"))
    })
}

/// When (Unix ms) HAProxy's backend holds over 10 connections: the load generator is sending.
pub fn wait_traffic(compose: &Compose) -> Result<u64> {
    let what = "traffic through HAProxy after the load generator started";
    poll_stat(compose, what, Duration::from_secs(60), |rows| {
        let busy = |r: &StatRow| r.pxname == "apis" && r.svname == "BACKEND" && r.scur > Some(10);
        rows.iter().any(busy).then(util::now_ms).ok_or("at most 10 connections".into())
    })
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadRun {
    pub config: String,
    /// k6's environment (`k6::start` adds the public set's TEST_DATA when it names none).
    pub load: Vec<(String, String)>,
    pub started: String,
    pub load_before: String,
    pub load_after: String,
    pub k6_exit: Option<i32>,
    pub summary: Summary,
    pub containers: Vec<Container>,
    /// What Prometheus scraped from the APIs' metrics listeners over the run (the smoke gate's
    /// runs; `None` for others).
    #[serde(default)]
    pub metrics: Option<Observed>,
    pub problems: Vec<String>,
}

impl LoadRun {
    /// Microseconds of the container's CPU per request served.
    pub fn cpu_us_per_request(&self, service: &str) -> Option<f64> {
        let c = self.containers.iter().find(|c| c.service == service)?;
        (self.summary.requests > 0).then(|| c.cpu_s() * 1e6 / self.summary.requests as f64)
    }

    /// A gate's replica run passes with no problem and every request answered right.
    pub fn passed(&self) -> bool {
        let s = &self.summary;
        self.problems.is_empty() && s.requests > 0 && s.errors + s.fp + s.fn_ == 0
    }
}

/// Brings `compose` up, runs `k6/fraud-test.js` with `env`, takes it down; the run also as JSON.
/// As `watch` says, Prometheus scrapes the APIs during the run ([`Prometheus`]) and its graphs
/// are captured after it.
pub fn load_run(config: &str, compose: &Compose, env: &k6::Env, watch: &Watch) -> Result<LoadRun> {
    let mode = env.iter().find(|(k, _)| *k == "MODE").map_or("", |(_, v)| v.as_str());
    let s = Session::start(&format!("{config}-{mode}"), compose)?;
    let observe = !matches!(watch, Watch::No);
    let prometheus =
        observe.then(|| Prometheus::start(&s.compose, &s.base.with_extension("prometheus")));
    let prometheus = prometheus.transpose()?;
    log!("{config}: k6 {mode} run (load {})", s.load_start);
    let k6 = k6::start("fraud-test.js", env, &s.base)?;
    let (status, summary) = k6::finish(&k6, &s.base)?;
    let containers = s.containers()?;
    let metrics = prometheus.as_ref().map(|p| p.observed(summary.requests)).transpose()?;
    if let (Some(p), Watch::Capture(png)) = (&prometheus, watch) {
        p.capture(png)?;
    }
    let Session { mut problems, base, started, load_start: load_before, up, .. } = s;
    drop(up);
    problems.extend(containers.iter().filter_map(Container::trouble));
    let run = LoadRun {
        config: config.into(),
        load: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        started,
        load_before,
        load_after: util::loadavg(),
        k6_exit: status.code(),
        summary,
        containers,
        metrics,
        problems,
    };
    let path = base.with_extension("json");
    util::write_json(&path, &run)?;
    log!("{}: {} ({})", run.config, run_figures(&run), path.display());
    for c in &run.containers {
        let per = run.cpu_us_per_request(&c.service).unwrap_or(0.0);
        log!("  {:8} cpus {:.2}  CPU {:.2} s ({per:.0} us/request)  throttled {}  peak {:.1} of {:.0} MB  restarts {}", c.service, c.cpus, c.cpu_s(), c.throttled(), c.peak_mb(), c.limit_mb(), c.restarts);
    }
    Ok(run)
}

/// `<service> <peak>/<limit> MB` for a verdict line.
pub fn memory_figures(containers: &[Container]) -> String {
    util::list(containers, |c| format!("{} {:.0}/{:.0} MB", c.service, c.peak_mb(), c.limit_mb()))
}

pub fn run_figures(r: &LoadRun) -> String {
    let (s, k6::Trend { med, p99 }) = (&r.summary, r.summary.latency());
    let (n, errors, fp, fn_, score) = (s.requests, s.errors, s.fp, s.fn_, s.final_score);
    let (memory, problems) = (memory_figures(&r.containers), r.problems.join("; "));
    let problems = if problems.is_empty() { problems } else { format!(", problems: {problems}") };
    format!("requests {n}, errors {errors}, FP {fp}, FN {fn_}, p50 {med:.3} ms, p99 {p99:.3} ms, score {score:.1}, {memory}{problems}")
}
