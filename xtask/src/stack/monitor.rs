//! A sampler thread under load: HAProxy's view of each server, each API's own `/ready`, a
//! `/ready` through HAProxy on a new connection (optional) and memory, as JSON lines.

use super::cgroup::Cgroup;
use super::probe::{haproxy_stat, ready_tcp, ready_unix, Probe, State};
use crate::util;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// HAProxy's state of one server.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Server {
    pub status: State,
    pub scur: u64,
    pub stot: u64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Sample {
    /// Unix time in ms.
    pub t: u64,
    pub servers: BTreeMap<String, Server>,
    /// Connections open and queued on the backend (all servers), and on the frontend.
    pub backend_scur: Option<u64>,
    pub backend_qcur: Option<u64>,
    pub frontend_scur: Option<u64>,
    pub haproxy_error: Option<String>,
    pub ready: BTreeMap<String, Probe>,
    pub probe: Option<Probe>,
    pub mem_mb: BTreeMap<String, f64>,
}

pub struct Config {
    pub socket_dir: PathBuf,
    pub apis: Vec<String>,
    pub interval: Duration,
    pub probe: bool,
    pub memory: Vec<(String, Cgroup)>,
    pub out: PathBuf,
}

/// One sample of the stack as it is now.
fn sample(cfg: &Config) -> Sample {
    let mut s = Sample { t: util::now_ms(), ..Sample::default() };
    match haproxy_stat(&cfg.socket_dir.join("haproxy.sock")) {
        Ok(rows) => {
            for r in rows {
                match (r.pxname.as_str(), r.svname.as_str()) {
                    (_, "FRONTEND") => s.frontend_scur = r.scur,
                    ("apis", "BACKEND") => (s.backend_scur, s.backend_qcur) = (r.scur, r.qcur),
                    ("apis", name) => {
                        let server = Server {
                            status: r.status,
                            scur: r.scur.unwrap_or(0),
                            stot: r.stot.unwrap_or(0),
                        };
                        s.servers.insert(name.to_string(), server);
                    }
                    _ => {}
                }
            }
        }
        Err(e) => s.haproxy_error = Some(format!("{e:#}")),
    }
    for api in &cfg.apis {
        let p = ready_unix(&cfg.socket_dir.join(format!("{api}.sock")), Duration::from_millis(300));
        s.ready.insert(api.clone(), p);
    }
    s.probe = cfg.probe.then(|| ready_tcp(9999, Duration::from_millis(500)));
    for (name, cg) in &cfg.memory {
        s.mem_mb.extend(cg.memory_usage().map(|b| (name.clone(), util::mb(b))));
    }
    s
}

pub struct Monitor {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Sample>>,
}

impl Monitor {
    pub fn start(cfg: Config) -> std::io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut out = std::io::BufWriter::new(std::fs::File::create(&cfg.out)?);
        let handle = std::thread::spawn(move || {
            let mut all = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                let s = sample(&cfg);
                let _ = serde_json::to_writer(&mut out, &s).map(|_| writeln!(out));
                all.push(s);
                std::thread::sleep(cfg.interval.saturating_sub(t.elapsed()));
            }
            let _ = out.flush();
            all
        });
        Ok(Monitor { stop, handle })
    }

    /// Stops sampling and returns every sample.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}
