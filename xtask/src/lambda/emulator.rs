//! One run of AWS's Runtime Interface Emulator (RIE) with the packaged bootstrap on loopback
//! ([`session`]); the RIE starts the bootstrap at the first invocation, both write one [`Log`].

use super::events::Answer;
use crate::util::{self, log, ms};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const INVOKE: &str = "/2015-03-31/functions/function/invocations";

/// What the function is configured with (template.yaml's defaults, [`super::sam::defaults`],
/// unless overridden).
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub memory_mb: u32,
    pub timeout_s: u32,
    pub prefault: bool,
    /// CPU share of the bootstrap (Lambda: memory / 1,769 MB), cgroup v1; `None` = unlimited.
    pub cpus: Option<f64>,
}

/// One run of the emulator: what each event sent in order got (the first starts the bootstrap).
pub struct Session {
    pub launch_to_first_ms: f64,
    /// Each event's answer and round trip (ms), or why there is none.
    pub answers: Vec<Result<(Answer, f64), String>>,
    /// The bootstrap's memory after the last answer.
    pub memory: Option<Memory>,
    pub log: Log,
}

/// Runs the RIE for the bootstrap in `package_dir` (output to `log`), sends `events`, stops it.
pub fn session(
    rie: &Path,
    package_dir: &Path,
    s: &Settings,
    log: PathBuf,
    events: &[Vec<u8>],
) -> Result<Session> {
    let (api, runtime_api) = (free_port()?, free_port()?);
    let limited = |cpus| cpu_limited(cpus, log.with_extension("wrapper"));
    let (entry, cgroup) = s.cpus.map(limited).transpose()?.unzip();
    let entry = entry.unwrap_or_else(|| PathBuf::from("./bootstrap"));
    let out =
        std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let (api_s, runtime_s) = (api.to_string(), runtime_api.to_string());
    let flags =
        ["--runtime-interface-emulator-address", &api_s, "--runtime-api-address", &runtime_s];
    let e = duct::cmd(rie, flags.map(OsString::from).into_iter().chain([entry.into()]));
    let e = e.dir(package_dir).stdin_null().stdout_file(out.try_clone()?).stderr_file(out);
    let child = e
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", s.memory_mb.to_string())
        .env("AWS_LAMBDA_FUNCTION_TIMEOUT", s.timeout_s.to_string())
        // What LoggingConfig (LogFormat JSON, ApplicationLogLevel INFO) sets on Lambda.
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
        .env("FRAUD_PREFAULT", if s.prefault { "1" } else { "0" })
        .env_remove("RUST_LOG")
        .unchecked()
        .start()
        .with_context(|| format!("cannot start {}", rie.display()))?;
    let (launched, emu) = (Instant::now(), Emulator { child, log, cgroup });
    log!("emulator started, log in {}", emu.log.display());
    let (limit, every) = (Duration::from_secs(20), Duration::from_millis(5));
    util::poll("the emulator's API", limit, every, || {
        if TcpStream::connect_timeout(&api, Duration::from_secs(1)).is_ok() {
            return Ok(Ok(()));
        }
        if let Some(out) = emu.child.try_wait()? {
            bail!("the emulator exited ({}); log in {}", out.status, emu.log.display());
        }
        Ok(Err("not listening".into()))
    })?;
    let (agent, url) = (util::http_agent(Duration::from_secs(15)), format!("http://{api}{INVOKE}"));
    let invoke = |event: &[u8]| -> Result<(Answer, f64)> {
        let t = Instant::now();
        let req = agent.post(&url).header("content-type", "application/json");
        let mut resp = req.send(event).context("invoke through the emulator")?;
        let body = resp.body_mut().read_to_vec()?;
        let rtt = ms(t.elapsed());
        if resp.status() != 200 {
            let shown = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            bail!("the emulator answered HTTP {}: {shown}", resp.status());
        }
        Ok((Answer::parse(&body)?, rtt))
    };
    let mut answers = Vec::new();
    let mut launch_to_first_ms = f64::NAN;
    for event in events {
        answers.push(invoke(event).map_err(|e| format!("{e:#}")));
        if answers.len() == 1 {
            launch_to_first_ms = ms(launched.elapsed());
        }
    }
    let memory = emu.bootstrap_memory();
    Ok(Session { launch_to_first_ms, answers, memory, log: emu.stop()? })
}

/// The running RIE (killed with the bootstrap when dropped).
struct Emulator {
    child: duct::Handle,
    log: PathBuf,
    cgroup: Option<PathBuf>,
}

impl Emulator {
    /// Memory of the running bootstrap (its index pages count as file-backed RSS).
    fn bootstrap_memory(&self) -> Option<Memory> {
        let pids = self.child.pids().into_iter().flat_map(descendants);
        let pid = pids.into_iter().find(|p| comm(*p).as_deref() == Some("bootstrap"))?;
        Memory::parse(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
    }

    /// Stops the RIE and the bootstrap, then reads the log as it was before they were stopped
    /// (what they print about being killed is not part of the run).
    fn stop(mut self) -> Result<Log> {
        let len = std::fs::metadata(&self.log)?.len() as usize;
        self.kill();
        let mut text = std::fs::read(&self.log)
            .with_context(|| format!("cannot read {}", self.log.display()))?;
        text.truncate(len);
        Ok(Log::parse(&String::from_utf8_lossy(&text)))
    }

    fn kill(&mut self) {
        for pid in self.child.pids().into_iter().flat_map(descendants) {
            let _ = util::signal(pid, nix::sys::signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(cg) = self.cgroup.take() {
            // The group empties once the killed bootstrap is reaped by init.
            let (limit, every) = (Duration::from_secs(1), Duration::from_millis(20));
            let gone = util::poll("the CPU group", limit, every, || {
                Ok(std::fs::remove_dir(&cg).map_err(|e| e.to_string()))
            });
            if let Err(e) = gone {
                log!("cannot remove {}: {e:#}", cg.display());
            }
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The bootstrap's memory (MB), from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Memory {
    pub peak_rss_mb: f64,
    pub rss_anon_mb: f64,
    pub rss_file_mb: f64,
}

impl Memory {
    fn parse(status: &str) -> Option<Memory> {
        let mb = |key: &str| -> Option<f64> {
            let line = status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
            Some(line.split_whitespace().next()?.parse::<f64>().ok()? / 1024.0)
        };
        Some(Memory {
            peak_rss_mb: mb("VmHWM")?,
            rss_anon_mb: mb("RssAnon")?,
            rss_file_mb: mb("RssFile")?,
        })
    }
}

/// A free loopback TCP address (the port is released for the RIE to take).
pub fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?)
}

/// A cgroup v1 CPU group with a quota of `cpus` per 100 ms period, and a two-line shell wrapper
/// that moves itself into it and execs the bootstrap (the RIE starts the wrapper).
fn cpu_limited(cpus: f64, wrapper: PathBuf) -> Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let cg = PathBuf::from(format!("/sys/fs/cgroup/cpu/xtask-lambda-{}", std::process::id()));
    std::fs::create_dir(&cg).with_context(|| {
        format!("cannot create {} (needs root and a cgroup v1 cpu controller)", cg.display())
    })?;
    std::fs::write(cg.join("cpu.cfs_period_us"), "100000")?;
    std::fs::write(cg.join("cpu.cfs_quota_us"), ((cpus * 100_000.0).round() as u64).to_string())?;
    let procs = cg.join("cgroup.procs").display().to_string();
    std::fs::write(&wrapper, format!("#!/bin/sh\necho $$ > {procs} && exec ./bootstrap\n"))?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    log!("bootstrap limited to {cpus} CPU ({})", cg.display());
    Ok((wrapper, cg))
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim().to_string())
}

/// Every descendant of `pid`, from the `children` lists of its threads in /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let lists =
        tasks.map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default());
    let children: Vec<u32> = lists
        .flat_map(|l| l.split_whitespace().filter_map(|c| c.parse().ok()).collect::<Vec<_>>())
        .collect();
    children.into_iter().flat_map(|c| std::iter::once(c).chain(descendants(c))).collect()
}

/// One JSON line the bootstrap wrote (tracing-subscriber's JSON format, as Lambda stores it).
#[derive(Clone, Debug, Deserialize)]
pub struct Line {
    pub level: String,
    pub fields: BTreeMap<String, serde_json::Value>,
}

impl Line {
    pub fn message(&self) -> &str {
        self.fields.get("message").and_then(|m| m.as_str()).unwrap_or("")
    }

    /// The fields as a typed record; fails on a missing or an unexpected field.
    pub fn typed<T: for<'de> Deserialize<'de>>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(&self.fields)?)
    }
}

/// What the log file says after a run.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// `INIT REPORT(durationMs: ...)`: exec of the bootstrap to its first request for work.
    pub init_report_ms: Option<f64>,
    /// `Duration` of each `REPORT` line, in invocation order.
    pub durations_ms: Vec<f64>,
    /// The bootstrap's JSON lines, in order.
    pub lines: Vec<Line>,
    /// Lines that are neither the bootstrap's JSON nor the emulator's own.
    pub other: Vec<String>,
    /// A runtime exit or a panic.
    pub crashed: bool,
}

/// The number that follows `key` in `line` (`INIT REPORT(durationMs: 3.25)`).
fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl Log {
    pub fn parse(text: &str) -> Log {
        let mut log = Log::default();
        for l in text.lines() {
            if log.init_report_ms.is_none() {
                log.init_report_ms = number_after(l, "INIT REPORT(durationMs: ");
            }
            if l.starts_with("REPORT ") {
                log.durations_ms.extend(number_after(l, "\tDuration: "));
            }
            log.crashed |= l.contains("Runtime.ExitError") || l.contains("panic");
            if l.starts_with('{') {
                match serde_json::from_str::<Line>(l) {
                    Ok(line) => log.lines.push(line),
                    Err(_) => log.other.push(l.to_string()),
                }
            } else if !is_emulator_line(l) {
                log.other.push(l.to_string());
            }
        }
        log
    }
}

/// The RIE's own lines: `START`/`END`/`REPORT`/`INIT REPORT` and its timestamped messages
/// (`30 Nov 2026 14:52:00,123 [INFO] (rapid) ...`).
fn is_emulator_line(l: &str) -> bool {
    l.is_empty()
        || ["START ", "END ", "REPORT ", "INIT "].iter().any(|p| l.starts_with(p))
        || l.contains(" (rapid) ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_sorted_by_origin() {
        let text = "30 Nov 2026 14:52:00,123 [INFO] (rapid) exec './bootstrap' (cwd=/x, handler=)\n\
            {\"level\":\"INFO\",\"fields\":{\"message\":\"index ready\",\"init_us\":412}}\n\
            START RequestId: 1 Version: $LATEST\n\
            INIT REPORT(durationMs: 3.25)\n\
            END RequestId: 1\n\
            REPORT RequestId: 1\tInit Duration: 0.31 ms\tDuration: 4.50 ms\tBilled Duration: 5 ms\n\
            {\"level\":\"WARN\",\"fields\":{\"message\":\"request failed\",\"status\":400},\"span\":{\"requestId\":\"2\"}}\n\
            REPORT RequestId: 2\tDuration: 0.75 ms\tBilled Duration: 1 ms\n\
            something else\n";
        let log = Log::parse(text);
        assert_eq!(log.init_report_ms, Some(3.25));
        assert_eq!(log.durations_ms, [4.5, 0.75]);
        assert_eq!(log.lines.len(), 2);
        assert_eq!(log.lines[0].message(), "index ready");
        assert_eq!(log.lines[1].fields["status"], 400);
        assert_eq!(log.other, ["something else"]);
        assert!(!log.crashed);
        assert!(Log::parse("thread 'main' panicked at x").crashed);
    }

    #[test]
    fn memory_from_proc_status_and_descendants_from_proc() {
        let status =
            "Name:\tbootstrap\nVmHWM:\t   93824 kB\nRssAnon:\t     412 kB\nRssFile:\t   93400 kB\n";
        let want = Memory { peak_rss_mb: 91.625, rss_anon_mb: 0.40234375, rss_file_mb: 91.2109375 };
        assert_eq!(Memory::parse(status), Some(want));
        assert_eq!(Memory::parse("Name:\tx\n"), None);
        let child = duct::cmd!("sleep", "5").start().unwrap();
        let found = descendants(std::process::id());
        child.kill().unwrap();
        assert!(found.contains(&child.pids()[0]), "{found:?}");
    }
}
