//! One run of AWS's Runtime Interface Emulator with the bootstrap on loopback ([`session`]).

use super::events::Answer;
use super::logs::Log;
use crate::prelude::*;
use std::ffi::OsString;
use std::net::TcpStream;

/// The Invoke API's path below the emulator's address.
pub const INVOKE: &str = "/2015-03-31/functions/function/invocations";

/// What the function is configured with (template.yaml's defaults unless overridden).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Settings {
    /// `FRAUD_PREFAULT`: `Some(true)` 1, `Some(false)` 0, `None` auto (by index and memory).
    pub prefault: Option<bool>,
    pub memory_mb: u32,
    pub timeout_s: u32,
    /// CPU share of the bootstrap (Lambda: memory / 1,769 MB), cgroup v1; `None` = unlimited.
    pub cpus: Option<f64>,
    /// More of the function's environment (a role, its name).
    pub env: Vec<(String, String)>,
}

/// What each event sent in order got (the first starts the bootstrap).
pub struct Session {
    pub launch_to_first_ms: f64,
    pub answers: Vec<Result<(Answer, f64), String>>,
    pub memory: Option<Memory>,
    pub log: Log,
}

pub fn session(
    rie: &Path,
    package_dir: &Path,
    s: &Settings,
    log: &Path,
    events: &[Vec<u8>],
) -> Result<Session> {
    let (launched, emu) = (Instant::now(), Emulator::start(rie, package_dir, s, log)?);
    let answer = |event: &Vec<u8>| {
        let (t, answer) = (Instant::now(), emu.invoke(event).and_then(|body| Answer::parse(&body)));
        answer.map(|a| (a, t.elapsed().as_secs_f64() * 1e3)).map_err(|e| format!("{e:#}"))
    };
    let mut answers: Vec<_> = events.iter().take(1).map(answer).collect();
    let launch_to_first_ms = launched.elapsed().as_secs_f64() * 1e3;
    answers.extend(events.iter().skip(1).map(answer));
    // The bootstrap's index pages count as file-backed RSS.
    let proc = |pid: u32, file| fs::read_to_string(format!("/proc/{pid}/{file}")).ok();
    let mut pids = emu.child.pids().into_iter().flat_map(descendants);
    let bootstrap = pids.find(|p| proc(*p, "comm").is_some_and(|c| c.trim() == "bootstrap"));
    let memory = bootstrap.and_then(|p| Memory::parse(&proc(p, "status")?));
    // Ended as Lambda ends an environment, so that its last writes (metrics) are in the log.
    emu.stop();
    let text = fs::read(log).with_context(|| format!("cannot read {}", log.display()))?;
    let log = Log::parse(&String::from_utf8_lossy(&text));
    Ok(Session { launch_to_first_ms, answers, memory, log })
}

/// The running RIE with the bootstrap: killed with it (and its CPU group removed) when dropped.
pub struct Emulator {
    child: duct::Handle,
    cgroup: Option<PathBuf>,
    /// Its Invoke API (`POST {url}` with an event).
    pub url: String,
    agent: ureq::Agent,
}

impl Emulator {
    /// Starts the RIE on free loopback ports with `package_dir`'s bootstrap (output in `log`).
    pub fn start(rie: &Path, package_dir: &Path, s: &Settings, log: &Path) -> Result<Emulator> {
        let (api, runtime_api) = (util::free_port()?, util::free_port()?);
        let limited = |cpus| cpu_limited(cpus, log.with_extension("wrapper"));
        let (entry, cgroup) = s.cpus.map(limited).transpose()?.unzip();
        let entry = entry.unwrap_or_else(|| PathBuf::from("./bootstrap"));
        let flags = format!(
            "--runtime-interface-emulator-address {api} --runtime-api-address {runtime_api}"
        );
        let e = duct::cmd(rie, flags.split(' ').map(OsString::from).chain([entry.into()]));
        let e = util::to_log(e.dir(package_dir).stdin_null(), log)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", s.memory_mb.to_string())
            .env("AWS_LAMBDA_FUNCTION_TIMEOUT", s.timeout_s.to_string())
            // What LoggingConfig (LogFormat JSON, ApplicationLogLevel INFO) sets on Lambda.
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
            .env("FRAUD_PREFAULT", s.prefault.map_or("auto", |p| if p { "1" } else { "0" }))
            .env_remove("RUST_LOG");
        let e = s.env.iter().fold(e, |e, (k, v)| e.env(k, v));
        let child = e.unchecked().start().context(format!("cannot start {}", rie.display()))?;
        let url = format!("http://{api}{INVOKE}");
        let emu = Emulator { child, cgroup, url, agent: util::http_agent(Duration::from_secs(15)) };
        log!("emulator started on {api}, log in {}", log.display());
        let (limit, every) = (Duration::from_secs(20), Duration::from_millis(5));
        util::poll("the emulator's API", limit, every, || {
            if TcpStream::connect_timeout(&api, Duration::from_secs(1)).is_ok() {
                return Ok(Ok(()));
            }
            if let Some(out) = emu.child.try_wait()? {
                bail!("the emulator exited ({}); log in {}", out.status, log.display());
            }
            Ok(Err("not listening".into()))
        })?;
        Ok(emu)
    }

    /// Invokes the function with `event`; the raw payload it answered.
    pub fn invoke(&self, event: &[u8]) -> Result<Vec<u8>> {
        let req = self.agent.post(&self.url).header("content-type", "application/json");
        let mut resp = req.send(event).context("invoke through the emulator")?;
        let body = resp.body_mut().read_to_vec()?;
        if resp.status() != 200 {
            let shown = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            bail!("the emulator answered HTTP {}: {shown}", resp.status());
        }
        Ok(body)
    }

    /// Ends the environment as Lambda does (SIGTERM, the shutdown phase), then kills it after 5 s.
    pub fn stop(self) {
        for pid in self.child.pids() {
            let _ = util::signal(pid, nix::sys::signal::SIGTERM);
        }
        let (limit, every) = (Duration::from_secs(5), Duration::from_millis(20));
        let ended = || Ok(self.child.try_wait()?.map(|_| ()).ok_or_else(|| "running".to_string()));
        let _ = util::poll("the emulator's shutdown", limit, every, ended);
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        for pid in self.child.pids().into_iter().flat_map(descendants) {
            let _ = util::signal(pid, nix::sys::signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(cg) = self.cgroup.take() {
            // The group empties once the killed bootstrap is reaped by init.
            let (limit, every) = (Duration::from_secs(1), Duration::from_millis(20));
            let removed = || Ok(fs::remove_dir(&cg).map_err(|e| e.to_string()));
            let gone = util::poll("the CPU group", limit, every, removed);
            gone.unwrap_or_else(|e| log!("cannot remove {}: {e:#}", cg.display()));
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Memory {
    pub peak_rss_mb: f64,
    pub rss_anon_mb: f64,
    pub rss_file_mb: f64,
}

impl Memory {
    pub fn parse(status: &str) -> Option<Memory> {
        let mb = |key| Some(util::status_kb(status, key)? as f64 / 1024.0);
        Some(Memory {
            peak_rss_mb: mb("VmHWM")?,
            rss_anon_mb: mb("RssAnon")?,
            rss_file_mb: mb("RssFile")?,
        })
    }
}

/// A cgroup v1 CPU quota of `cpus`, and a wrapper (the RIE starts it) that joins it and execs.
fn cpu_limited(cpus: f64, wrapper: PathBuf) -> Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let cg = PathBuf::from(format!("/sys/fs/cgroup/cpu/xtask-lambda-{}", std::process::id()));
    let why = format!("cannot create {} (needs root and a cgroup v1 cpu controller)", cg.display());
    fs::create_dir(&cg).context(why)?;
    fs::write(cg.join("cpu.cfs_period_us"), "100000")?;
    fs::write(cg.join("cpu.cfs_quota_us"), ((cpus * 100_000.0).round() as u64).to_string())?;
    let procs = cg.join("cgroup.procs").display().to_string();
    fs::write(&wrapper, format!("#!/bin/sh\necho $$ > {procs} && exec ./bootstrap\n"))?;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755))?;
    log!("bootstrap limited to {cpus} CPU ({})", cg.display());
    Ok((wrapper, cg))
}

pub fn descendants(pid: u32) -> Vec<u32> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let lists: Vec<String> =
        tasks.map(|t| fs::read_to_string(t.path().join("children")).unwrap_or_default()).collect();
    let children = lists.iter().flat_map(|l| l.split_whitespace()).filter_map(|c| c.parse().ok());
    children.flat_map(|c| std::iter::once(c).chain(descendants(c))).collect()
}
