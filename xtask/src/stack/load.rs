//! One load run of a compose project under the k6 contest replica (`k6/fraud-test.js`): bring the
//! project up, wait for `/ready` (each API on its own socket, then through HAProxy, then both
//! servers UP in HAProxy; an external project only through port 9999), check the contest rules
//! (our stack only), read each container's cgroup counters before and after k6, and keep the
//! result (k6 summary with its per-second windows, CPU per request per container, peak memory,
//! restarts) as JSON under `<target>/xtask/stack/`.
//! `stack run`, `stack floor`, `stack smoke` and `stack batch` are all made of this.

use super::cgroup::{Cgroup, Snapshot};
use super::check;
use super::compose::{inspect, Compose, Layout, Up};
use super::k6::{self, ReplicaSummary};
use super::probe::{haproxy_stat, ready_or_score, ready_tcp, ready_unix, wait_ready, State};
use crate::util::{self, log};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The load shape of `k6/fraud-test.js`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub enum Shape {
    /// The contest's ramp: 1 -> 900 req/s over 120 s.
    Full,
    /// A constant `rate` for `seconds`.
    Smoke { rate: u32, seconds: u32 },
}

impl Shape {
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Shape::Full => vec![("MODE", "full".into())],
            Shape::Smoke { rate, seconds } => {
                vec![
                    ("MODE", "smoke".into()),
                    ("RATE", rate.to_string()),
                    ("DURATION", format!("{seconds}s")),
                ]
            }
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Shape::Full => "full",
            Shape::Smoke { .. } => "smoke",
        }
    }
}

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
    pub fn throttled(&self) -> u64 {
        self.after.nr_throttled.saturating_sub(self.before.nr_throttled)
    }
    pub fn peak_mb(&self) -> f64 {
        util::mb(self.after.memory_peak)
    }
    pub fn limit_mb(&self) -> f64 {
        util::mb(self.after.memory_limit)
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
        if self.oom_killed || a.oom_kill > self.before.oom_kill {
            t.push("OOM kill".into());
        }
        if a.memory_failcnt > 0 || a.memory_peak >= a.memory_limit {
            t.push(format!(
                "memory at its limit ({:.1} of {:.0} MB, failcnt {})",
                self.peak_mb(),
                self.limit_mb(),
                a.memory_failcnt
            ));
        }
        (!t.is_empty()).then(|| format!("{}: {}", self.service, t.join(", ")))
    }
}

/// The containers of a running project, with their counters at the start of a run.
pub struct Watch {
    start: Vec<(String, String, Cgroup, Snapshot, u32)>,
}

impl Watch {
    /// Reads every container's counters; with `reset_peak`, resets its memory peak first.
    pub fn start(compose: &Compose, reset_peak: bool) -> Result<Watch> {
        let mut start = Vec::new();
        for svc in compose.services()? {
            let id = compose.id(&svc)?;
            let i = inspect(&id)?;
            let cg = Cgroup::of(&i.id)?;
            if reset_peak {
                cg.reset_peak()?;
            }
            let snap = cg.snapshot()?;
            start.push((svc, i.id, cg, snap, i.restart_count));
        }
        Ok(Watch { start })
    }

    pub fn cgroups(&self) -> Vec<(String, Cgroup)> {
        self.start.iter().map(|(s, _, cg, _, _)| (s.clone(), cg.clone())).collect()
    }

    /// The counters now, against the start.
    pub fn finish(&self) -> Result<Vec<Container>> {
        self.start
            .iter()
            .map(|(svc, id, cg, before, restarts)| {
                let i = inspect(id)?;
                Ok(Container {
                    service: svc.clone(),
                    cpus: i.host_config.nano_cpus as f64 / 1e9,
                    before: *before,
                    after: cg.snapshot()?,
                    restarts: i.restart_count - restarts,
                    oom_killed: i.state.oom_killed,
                    running: i.state.running,
                })
            })
            .collect()
    }
}

/// Brings `compose` up and waits until it serves: each API's own `/ready` on its socket, `/ready`
/// through HAProxy, and (with a stats socket) every server UP in HAProxy. An external project is
/// asked through port 9999 only ([`ready_or_score`]), once per service it has, so that a
/// round-robin balancer has had the chance to pass a probe to each API.
pub fn up<'a>(compose: &'a Compose, keep: bool) -> Result<Up<'a>> {
    let t = Instant::now();
    // The guard first: a project that `up` leaves half made (one container created, the next
    // refused) is taken down as well.
    let guard = Up { compose, keep };
    if let Err(e) = compose.up().and_then(|()| wait_serving(compose)) {
        log!("last log lines:\n{}", compose.log_tail());
        return Err(e);
    }
    log!("{} ready in {:.1} s", compose.project, t.elapsed().as_secs_f64());
    Ok(guard)
}

fn wait_serving(compose: &Compose) -> Result<()> {
    let half = Duration::from_millis(500);
    if compose.layout == Layout::External {
        let n = compose.services()?.len();
        for i in 1..=n {
            let what = format!("port 9999 ({i} of {n})");
            let every = Duration::from_millis(100);
            util::poll(&what, Duration::from_secs(90), every, || Ok(ready_or_score(9999, half)))?;
        }
        return Ok(());
    }
    if !compose.apis.is_empty() {
        let dir = compose.socket_dir()?;
        for api in &compose.apis {
            let sock = dir.join(format!("{api}.sock"));
            wait_ready(api, Duration::from_secs(90), || ready_unix(&sock, half))?;
        }
    }
    wait_ready("haproxy", Duration::from_secs(30), || ready_tcp(9999, half))?;
    if !compose.apis.is_empty() {
        wait_all_up(compose, Duration::from_secs(15))?;
    }
    Ok(())
}

/// Waits until HAProxy reports every API server UP.
pub fn wait_all_up(compose: &Compose, limit: Duration) -> Result<()> {
    let sock = compose.socket_dir()?.join("haproxy.sock");
    util::poll("HAProxy: every server UP", limit, Duration::from_millis(100), || {
        let rows = haproxy_stat(&sock).unwrap_or_default();
        let is_up = |a: &String| rows.iter().any(|r| &r.svname == a && r.status == State::Up);
        let up = compose.apis.iter().filter(|a| is_up(a)).count();
        Ok(if up == compose.apis.len() {
            Ok(())
        } else {
            Err(format!("{up} of {} UP", compose.apis.len()))
        })
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
            rows.iter().any(|r| r.pxname == "apis" && r.svname == "BACKEND" && r.scur.or0() > 10);
        Ok(if busy { Ok(util::now_ms()) } else { Err("at most 10 connections".into()) })
    })
}

/// One replica run and what it measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadRun {
    pub config: String,
    pub mode: String,
    pub started: String,
    pub load_before: String,
    pub load_after: String,
    pub k6_exit: Option<i32>,
    pub summary: ReplicaSummary,
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
/// down (unless `keep`) and returns the run; also written to `<target>/xtask/stack/<time>-<config>.json`.
pub fn load_run(config: &str, compose: &Compose, shape: Shape, keep: bool) -> Result<LoadRun> {
    let guard = up(compose, keep)?;
    let mut problems = Vec::new();
    match compose.layout {
        Layout::Ours if !compose.apis.is_empty() => {
            problems.extend(check::check(compose, true)?.problems)
        }
        Layout::Ours => {}
        Layout::External => {
            // Our check (check.rs) is of our layout (`haproxy`, `api*`, least privilege);
            // another entry is run as its author wrote it, so only its limits are reported.
            let limits = compose.config().and_then(|c| check::rules(&c)).map_or_else(
                |e| format!("limits unreadable: {e:#}"),
                |r| format!("limits sum {:.2} CPU, {:.0} MB", r.cpus, r.memory_mb),
            );
            log!("{config}: external compose, run as is: our stack check is skipped ({limits})");
        }
    }
    let watch = Watch::start(compose, true)?;
    let stamp = util::stamp();
    let base = util::xtask_dir("stack")?.join(format!("{stamp}-{config}-{}", shape.name()));
    let summary_path = base.with_extension("k6.json");
    let load_before = util::loadavg();
    log!("{config}: k6 {} run (load {load_before})", shape.name());
    let k6 =
        k6::start("fraud-test.js", &shape.env(), &summary_path, &base.with_extension("k6.log"))?;
    let status = k6::wait(&k6)?;
    let containers = watch.finish()?;
    drop(guard);
    let summary: ReplicaSummary = k6::read_summary(&summary_path)?;
    problems.extend(containers.iter().filter_map(Container::trouble));
    let run = LoadRun {
        config: config.to_string(),
        mode: shape.name().to_string(),
        started: stamp,
        load_before,
        load_after: util::loadavg(),
        k6_exit: status.code(),
        summary,
        containers,
        problems,
    };
    let path = base.with_extension("json");
    std::fs::write(&path, serde_json::to_string_pretty(&run)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    show(&run, &path);
    Ok(run)
}

/// The run's figures and each container's, on stderr.
fn show(run: &LoadRun, path: &std::path::Path) {
    let s = &run.summary;
    log!(
        "{}: {} requests, p50 {:.3} ms, p99 {:.3} ms, errors {}, FP {}, FN {}, score {:.1} ({})",
        run.config,
        s.requests,
        s.latency_ms.med,
        s.latency_ms.p99,
        s.answers.errors,
        s.answers.fp,
        s.answers.fn_,
        s.final_score,
        path.display()
    );
    for c in &run.containers {
        log!(
            "  {:8} cpus {:.2}  CPU {:.2} s ({:.0} us/request)  throttled {}  peak {:.1} of {:.0} MB  restarts {}",
            c.service,
            c.cpus,
            c.cpu_s(),
            run.cpu_us_per_request(&c.service).unwrap_or(0.0),
            c.throttled(),
            c.peak_mb(),
            c.limit_mb(),
            c.restarts
        );
    }
}

/// `<service> <peak>/<limit> MB` for the verdict line.
pub fn memory_figures(containers: &[Container]) -> String {
    let each = containers
        .iter()
        .map(|c| format!("{} {:.0}/{:.0} MB", c.service, c.peak_mb(), c.limit_mb()));
    each.collect::<Vec<_>>().join(", ")
}

/// The verdict figures of a replica run.
pub fn run_figures(r: &LoadRun) -> String {
    let s = &r.summary;
    let problems = if r.problems.is_empty() {
        String::new()
    } else {
        format!(", problems: {}", r.problems.join("; "))
    };
    format!(
        "requests {}, errors {}, FP {}, FN {}, p50 {:.3} ms, p99 {:.3} ms, score {:.1}, {}{problems}",
        s.requests,
        s.answers.errors,
        s.answers.fp,
        s.answers.fn_,
        s.latency_ms.med,
        s.latency_ms.p99,
        s.final_score,
        memory_figures(&r.containers),
    )
}

/// A stack run of `config` with 1,000 requests whose containers used `cpu_ms` each (tests).
#[cfg(test)]
pub fn run_of(config: &str, cpu_ms: &[(&str, u64)]) -> LoadRun {
    let snapshot = |ns: u64| {
        serde_json::json!({"memory_limit": 1, "memory_peak": 0,
        "memory_failcnt": 0, "oom_kill": 0, "cpu_ns": ns, "nr_periods": 0,
        "nr_throttled": 0, "throttled_ns": 0})
    };
    serde_json::from_value(serde_json::json!({
        "config": config, "mode": "full", "started": "20261130T170200Z",
        "load_before": "1.00", "load_after": "1.00", "k6_exit": 0, "problems": [],
        "summary": {"mode": "full", "requests": 1000, "dropped_iterations": 0, "tp": 1,
            "tn": 1, "fp": 0, "fn": 0, "errors": 0,
            "latency_ms": {"med": 0.4, "p99": 0.9, "max": 2.0},
            "p99_score": 3000.0, "detection_score": 3000.0, "final_score": 6000.0,
            "t0_ms": 0, "windows": []},
        "containers": cpu_ms.iter().map(|(service, ms)| serde_json::json!({
            "service": service, "cpus": 0.4, "before": snapshot(0),
            "after": snapshot(ms * 1_000_000), "restarts": 0, "oom_killed": false,
            "running": true})).collect::<Vec<_>>(),
    }))
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_in_trouble_is_named() {
        let mut r = run_of("stack", &[("api1", 40)]);
        let c = &mut r.containers[0];
        assert_eq!((c.trouble(), c.cpu_s()), (None, 0.04));
        (c.restarts, c.after.memory_peak, c.after.memory_limit) = (1, 150 << 20, 150 << 20);
        let why = "api1: restarted 1 times, memory at its limit (150.0 of 150 MB, failcnt 0)";
        assert_eq!(c.trouble().as_deref(), Some(why));
        assert_eq!(r.cpu_us_per_request("api1"), Some(40.0));
    }

    #[test]
    fn the_replica_figures() {
        let mut r = run_of("stack", &[("haproxy", 80), ("api1", 40)]);
        let want = "requests 1000, errors 0, FP 0, FN 0, p50 0.400 ms, p99 0.900 ms, score 6000.0, haproxy 0/0 MB, api1 0/0 MB";
        assert_eq!(run_figures(&r), want);
        r.problems.push("api1: OOM kill".into());
        assert!(run_figures(&r).ends_with(", problems: api1: OOM kill"));
    }
}
