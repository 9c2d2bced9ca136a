//! One k6 run of a compose project (`stack run`, `floor`, `smoke`, `batch`) with each
//! container's cgroup counters around it, and [`Gate`], what the resilience gates share.

use super::cgroup::{Cgroup, Snapshot};
use super::compose::{inspect, Compose, Layout, Up};
use super::k6::{self, Summary};
use super::probe::{haproxy_stat, ready_or_score, ready_tcp, ready_unix, wait_ready};
use super::probe::{Config, Monitor, StatRow, State};
use super::{check, Common, Shape};
use crate::util::{self, log};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A container's limits, counters over the run, and state after it.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    pub fn cpu_s(&self) -> f64 {
        self.after.cpu_ns.saturating_sub(self.before.cpu_ns) as f64 / 1e9
    }
    pub fn peak_mb(&self) -> f64 {
        util::mb(self.after.memory_peak)
    }
    pub fn limit_mb(&self) -> f64 {
        util::mb(self.after.memory_limit)
    }
    /// CFS periods in which the container's quota ran out during the run.
    pub fn throttled(&self) -> u64 {
        self.after.nr_throttled.saturating_sub(self.before.nr_throttled)
    }
    pub fn oom_kills(&self) -> u64 {
        self.after.oom_kill.saturating_sub(self.before.oom_kill)
    }
    /// What went wrong with this container during the run, if anything.
    pub fn trouble(&self) -> Option<String> {
        let a = &self.after;
        let mut t = Vec::new();
        if !self.running {
            t.push("not running".to_string());
        }
        if self.restarts > 0 {
            t.push(format!("restarted {} times", self.restarts));
        }
        if self.oom_killed || self.oom_kills() > 0 {
            t.push("OOM kill".into());
        }
        if a.memory_failcnt > 0 || a.memory_peak >= a.memory_limit {
            let (peak, limit, failcnt) = (self.peak_mb(), self.limit_mb(), a.memory_failcnt);
            t.push(format!("memory at its limit ({peak:.1} of {limit:.0} MB, failcnt {failcnt})"));
        }
        (!t.is_empty()).then(|| format!("{}: {}", self.service, t.join(", ")))
    }
}

/// The containers of a running project, with their counters at the start of a run.
pub struct Watch(Vec<(String, String, Cgroup, Snapshot, u32)>);

impl Watch {
    /// Reads every container's counters, its memory peak reset first.
    pub fn start(compose: &Compose) -> Result<Watch> {
        let each = compose.services()?.into_iter().map(|svc| {
            let i = inspect(&compose.id(&svc)?)?;
            let cg = Cgroup::of(&i.id)?;
            cg.reset_peak()?;
            Ok((svc, i.id, cg.clone(), cg.snapshot()?, i.restart_count))
        });
        Ok(Watch(each.collect::<Result<_>>()?))
    }

    pub fn cgroups(&self) -> Vec<(String, Cgroup)> {
        self.0.iter().map(|(s, _, cg, _, _)| (s.clone(), cg.clone())).collect()
    }

    /// The counters now, against the start.
    pub fn finish(&self) -> Result<Vec<Container>> {
        let each = self.0.iter().map(|(service, id, cg, before, restarts)| {
            let (i, service, before, after) =
                (inspect(id)?, service.clone(), *before, cg.snapshot()?);
            let (cpus, restarts) =
                (i.host_config.nano_cpus as f64 / 1e9, i.restart_count - restarts);
            let (oom_killed, running) = (i.state.oom_killed, i.state.running);
            Ok(Container { service, cpus, before, after, restarts, oom_killed, running })
        });
        each.collect()
    }
}

/// Brings `compose` up and waits until it serves: each API's own `/ready` on its socket, `/ready`
/// through HAProxy, and (with a stats socket) every server UP in HAProxy. An external project is
/// asked through port 9999 only ([`ready_or_score`]), once per service it has, so that a
/// round-robin balancer has had the chance to pass a probe to each API.
pub fn up(compose: &Compose, keep: bool) -> Result<Up> {
    let t = Instant::now();
    // The guard first: a project that `up` leaves half made is taken down as well.
    let guard = Up { compose: compose.clone(), keep };
    if let Err(e) = compose.up().and_then(|()| wait_serving(compose)) {
        log!("last log lines:\n{}", compose.log_tail());
        return Err(e);
    }
    log!("{} ready in {:.1} s", compose.project, t.elapsed().as_secs_f64());
    Ok(guard)
}

fn wait_serving(compose: &Compose) -> Result<()> {
    let (half, every, s) =
        (Duration::from_millis(500), Duration::from_millis(100), Duration::from_secs);
    if compose.layout == Layout::External {
        let n = compose.services()?.len();
        for i in 1..=n {
            util::poll(&format!("port 9999 ({i} of {n})"), s(90), every, || {
                Ok(ready_or_score(9999, half))
            })?;
        }
        return Ok(());
    }
    if !compose.apis.is_empty() {
        let dir = compose.socket_dir()?;
        for api in &compose.apis {
            wait_ready(api, s(90), || ready_unix(&dir.join(format!("{api}.sock")), half))?;
        }
    }
    wait_ready("haproxy", s(30), || ready_tcp(9999, half))?;
    if !compose.apis.is_empty() {
        wait_all_up(compose, Duration::from_secs(15))?;
    }
    Ok(())
}

pub fn wait_all_up(compose: &Compose, limit: Duration) -> Result<()> {
    let sock = compose.socket_dir()?.join("haproxy.sock");
    util::poll("HAProxy: every server UP", limit, Duration::from_millis(100), || {
        let rows = haproxy_stat(&sock).unwrap_or_default();
        let is_up = |a: &&String| rows.iter().any(|r| &r.svname == *a && r.status == State::Up);
        let (up, n) = (compose.apis.iter().filter(is_up).count(), compose.apis.len());
        Ok(if up == n { Ok(()) } else { Err(format!("{up} of {n} UP")) })
    })
}

/// Waits until HAProxy's backend holds more than 10 connections (the load generator is sending:
/// its keep-alive connections stay open) and returns when, in Unix ms.
pub fn wait_traffic(compose: &Compose) -> Result<u64> {
    let sock = compose.socket_dir()?.join("haproxy.sock");
    let what = "traffic through HAProxy after the load generator started";
    util::poll(what, Duration::from_secs(60), Duration::from_millis(100), || {
        let rows = haproxy_stat(&sock).unwrap_or_default();
        let busy =
            |r: &StatRow| r.pxname == "apis" && r.svname == "BACKEND" && r.scur.unwrap_or(0) > 10;
        let busy = rows.iter().any(busy);
        Ok(if busy { Ok(util::now_ms()) } else { Err("at most 10 connections".into()) })
    })
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadRun {
    pub config: String,
    pub shape: Shape,
    pub started: String,
    pub load_before: String,
    pub load_after: String,
    pub k6_exit: Option<i32>,
    pub summary: Summary,
    pub containers: Vec<Container>,
    pub problems: Vec<String>,
}

impl LoadRun {
    /// Microseconds of the container's CPU per request served.
    pub fn cpu_us_per_request(&self, service: &str) -> Option<f64> {
        let c = self.containers.iter().find(|c| c.service == service)?;
        (self.summary.requests > 0).then(|| c.cpu_s() * 1e6 / self.summary.requests as f64)
    }
}

/// Brings `compose` up (checking the contest rules on a stack), runs k6 in `shape`, takes it
/// down (unless `keep`) and returns the run, also written to `<target>/xtask/stack/<time>-<config>-<mode>.json`.
pub fn load_run(config: &str, compose: &Compose, shape: Shape, keep: bool) -> Result<LoadRun> {
    let guard = up(compose, keep)?;
    let mut problems = Vec::new();
    if compose.layout == Layout::External {
        // Our check is of our layout (`haproxy`, `api*`, least privilege); another entry is run
        // as its author wrote it, so only its limits are reported.
        let limits =
            |r: check::Report| format!("limits sum {:.2} CPU, {:.0} MB", r.cpus, r.memory_mb);
        let limits = compose.config().and_then(|c| check::rules(&c)).map(limits);
        let limits = limits.unwrap_or_else(|e| format!("limits unreadable: {e:#}"));
        log!("{config}: external compose, run as is: our stack check is skipped ({limits})");
    } else if !compose.apis.is_empty() {
        problems.extend(check::check(compose, true)?.problems);
    }
    let watch = Watch::start(compose)?;
    let mode = format!("{:?}", shape.shape).to_lowercase();
    let (started, load_before) = (util::stamp(), util::loadavg());
    let base = util::xtask_dir("stack")?.join(format!("{started}-{config}-{mode}"));
    log!("{config}: k6 {mode} run (load {load_before})");
    let k6 = k6::start("fraud-test.js", &shape.env()?, &base)?;
    let (status, summary) = k6::finish(&k6, &base)?;
    let containers = watch.finish()?;
    drop(guard);
    problems.extend(containers.iter().filter_map(Container::trouble));
    let (config, load_after, k6_exit) = (config.to_string(), util::loadavg(), status.code());
    let run = LoadRun {
        config,
        shape,
        started,
        load_before,
        load_after,
        k6_exit,
        summary,
        containers,
        problems,
    };
    let path = base.with_extension("json");
    util::write_json(&path, &run)?;
    log!("{}: {} ({})", run.config, run_figures(&run), path.display());
    for c in &run.containers {
        let (svc, cpus, cpu, peak, limit) =
            (&c.service, c.cpus, c.cpu_s(), c.peak_mb(), c.limit_mb());
        let per = run.cpu_us_per_request(svc).unwrap_or(0.0);
        let (throttled, restarts) = (c.throttled(), c.restarts);
        log!("  {svc:8} cpus {cpus:.2}  CPU {cpu:.2} s ({per:.0} us/request)  throttled {throttled}  peak {peak:.1} of {limit:.0} MB  restarts {restarts}");
    }
    Ok(run)
}

/// `<service> <peak>/<limit> MB` for a verdict line.
pub fn memory_figures(containers: &[Container]) -> String {
    util::list(containers, |c| format!("{} {:.0}/{:.0} MB", c.service, c.peak_mb(), c.limit_mb()))
}

pub fn run_figures(r: &LoadRun) -> String {
    let (s, a, k6::Trend { med, p99 }) = (&r.summary, &r.summary.answers, r.summary.latency());
    let (n, errors, fp, fn_, score) = (s.requests, a.errors, a.fp, a.fn_, s.final_score);
    let memory = memory_figures(&r.containers);
    let problems: String = r
        .problems
        .first()
        .map(|_| format!(", problems: {}", r.problems.join("; ")))
        .unwrap_or_default();
    format!("requests {n}, errors {errors}, FP {fp}, FN {fn_}, p50 {med:.3} ms, p99 {p99:.3} ms, score {score:.1}, {memory}{problems}")
}

/// A resilience gate's stack: up and checked, its files at `<target>/xtask/stack/<time>-<gate>.*`.
pub struct Gate {
    pub compose: Compose,
    pub base: PathBuf,
    pub problems: Vec<String>,
    pub load_start: String,
    up: Up,
}

impl Gate {
    /// `None` when `FRAUD_SKIP_STACK=1` skips the gate.
    pub fn start(gate: &str, common: &Common, wrk: bool) -> Result<Option<Gate>> {
        if !super::gate_may_run(&format!("stack {gate}"))? {
            return Ok(None);
        }
        common.prepare(true, wrk)?;
        let compose = Compose::stack(&common.overrides);
        let up = up(&compose, common.keep)?;
        let problems = check::check(&compose, true)?.problems;
        let base = util::xtask_dir("stack")?.join(format!("{}-{gate}", util::stamp()));
        Ok(Some(Gate { compose, base, problems, load_start: util::loadavg(), up }))
    }

    /// A monitor of the stack every `interval`, writing `<base>.monitor.jsonl`.
    pub fn monitor(
        &self,
        interval: Duration,
        probe: bool,
        memory: Vec<(String, Cgroup)>,
    ) -> Result<Monitor> {
        let (socket_dir, apis) = (self.compose.socket_dir()?, self.compose.apis.clone());
        let out = self.base.with_extension("monitor.jsonl");
        Ok(Monitor::start(Config { socket_dir, apis, interval, probe, memory, out })?)
    }

    /// Takes the stack down, writes the report to `<base>.json`, then the verdict.
    pub fn finish(self, gate: &str, figures: &str, report: serde_json::Value) -> Result<()> {
        drop(self.up);
        let mut report = report;
        report["load_start"] = self.load_start.into();
        report["load_end"] = util::loadavg().into();
        report["problems"] = self.problems.clone().into();
        util::write_json(&self.base.with_extension("json"), &report)?;
        util::verdict(&format!("stack {gate}"), self.problems.is_empty(), figures, &report)
    }
}

/// A stack run of `config` with 1,000 requests whose containers used `cpu_ms` each (tests).
#[cfg(test)]
pub fn run_of(config: &str, cpu_ms: &[(&str, u64)]) -> LoadRun {
    let snapshot = |cpu_ns| Snapshot { memory_limit: 1, cpu_ns, ..Snapshot::default() };
    let container = |&(service, ms): &(&str, u64)| Container {
        service: service.into(),
        cpus: 0.4,
        before: snapshot(0),
        after: snapshot(ms * 1_000_000),
        restarts: 0,
        oom_killed: false,
        running: true,
    };
    let latency_ms = Some(k6::Trend { med: 0.4, p99: 0.9 });
    let summary = Summary { requests: 1000, latency_ms, final_score: 6000.0, ..Summary::default() };
    let (started, load) = ("20261130T170200Z".to_string(), "1.00".to_string());
    let shape = Shape { shape: super::Kind::Final, rate: 200, seconds: 15 };
    let containers = cpu_ms.iter().map(container).collect();
    LoadRun {
        config: config.into(),
        shape,
        started,
        load_before: load.clone(),
        load_after: load,
        k6_exit: Some(0),
        summary,
        containers,
        problems: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_in_trouble_is_named_and_the_replica_figures() {
        let mut r = run_of("stack", &[("haproxy", 80), ("api1", 40)]);
        let want = "requests 1000, errors 0, FP 0, FN 0, p50 0.400 ms, p99 0.900 ms, score 6000.0, haproxy 0/0 MB, api1 0/0 MB";
        assert_eq!(run_figures(&r), want);
        r.problems.push("api1: OOM kill".into());
        assert!(run_figures(&r).ends_with(", problems: api1: OOM kill"));
        let c = &mut r.containers[1];
        assert_eq!((c.trouble(), c.cpu_s()), (None, 0.04));
        (c.restarts, c.after.memory_peak, c.after.memory_limit) = (1, 150 << 20, 150 << 20);
        let why = "api1: restarted 1 times, memory at its limit (150.0 of 150 MB, failcnt 0)";
        assert_eq!(c.trouble().as_deref(), Some(why));
        (c.running, c.after.oom_kill, c.after.memory_limit) = (false, 1, 1 << 30);
        assert_eq!(c.trouble().as_deref(), Some("api1: not running, restarted 1 times, OOM kill"));
        assert_eq!(r.cpu_us_per_request("api1"), Some(40.0));
    }
}
