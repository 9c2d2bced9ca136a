//! A container's cgroup v1 figures (this machine: cgroup v1, cgroupfs driver): memory peak
//! (`memory.max_usage_in_bytes`, resettable by writing 0), `memory.failcnt` (times usage hit the
//! limit), OOM kills (`memory.oom_control`), CPU time (`cpuacct.usage`) and CFS throttling
//! (`cpu.stat`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The controller directories of one container.
#[derive(Clone, Debug)]
pub struct Cgroup {
    memory: PathBuf,
    cpuacct: PathBuf,
    cpu: PathBuf,
}

/// One reading of the counters; differences of two readings give what a run used.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
pub struct Snapshot {
    pub memory_limit: u64,
    pub memory_peak: u64,
    pub memory_failcnt: u64,
    pub oom_kill: u64,
    pub cpu_ns: u64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
}

impl Cgroup {
    /// Finds the container's directories (`/sys/fs/cgroup/<controller>/docker/<id>` with the
    /// cgroupfs driver; a short search below the controller otherwise).
    pub fn of(id: &str) -> Result<Cgroup> {
        let find = |ctl: &str| -> Result<PathBuf> {
            let base = Path::new("/sys/fs/cgroup").join(ctl);
            let direct = base.join("docker").join(id);
            if direct.is_dir() {
                return Ok(direct);
            }
            search(&base, id, 3).with_context(|| {
                format!("no cgroup v1 {ctl} directory for container {id} under {}", base.display())
            })
        };
        Ok(Cgroup { memory: find("memory")?, cpuacct: find("cpuacct")?, cpu: find("cpu")? })
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mem = |f: &str| read_u64(&self.memory.join(f));
        let cpu_stat = read_keyed(&self.cpu.join("cpu.stat"))?;
        let oom = read_keyed(&self.memory.join("memory.oom_control"))?;
        let key = |kv: &[(String, u64)], k: &str| {
            kv.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap_or(0)
        };
        Ok(Snapshot {
            memory_limit: mem("memory.limit_in_bytes")?,
            memory_peak: mem("memory.max_usage_in_bytes")?,
            memory_failcnt: mem("memory.failcnt")?,
            oom_kill: key(&oom, "oom_kill"),
            cpu_ns: read_u64(&self.cpuacct.join("cpuacct.usage"))?,
            nr_periods: key(&cpu_stat, "nr_periods"),
            nr_throttled: key(&cpu_stat, "nr_throttled"),
            throttled_ns: key(&cpu_stat, "throttled_time"),
        })
    }

    /// Current memory use (page cache included, as the limit counts it).
    pub fn memory_usage(&self) -> Option<u64> {
        read_u64(&self.memory.join("memory.usage_in_bytes")).ok()
    }

    /// Resets the peak (and the limit-hit count), so that the next reading is this run's.
    pub fn reset_peak(&self) -> Result<()> {
        for f in ["memory.max_usage_in_bytes", "memory.failcnt"] {
            let p = self.memory.join(f);
            std::fs::write(&p, "0").with_context(|| format!("cannot reset {}", p.display()))?;
        }
        Ok(())
    }
}

fn search(dir: &Path, id: &str, depth: u32) -> Option<PathBuf> {
    if depth == 0 {
        return None;
    }
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy().contains(id) {
            return Some(p);
        }
        if let Some(found) = search(&p, id, depth - 1) {
            return Some(found);
        }
    }
    None
}

fn read_u64(p: &Path) -> Result<u64> {
    let s = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    s.trim().parse().with_context(|| format!("{}: not a number: {s:?}", p.display()))
}

/// `key value` lines (cpu.stat, memory.oom_control).
fn read_keyed(p: &Path) -> Result<Vec<(String, u64)>> {
    let s = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    parse_keyed(&s).with_context(|| format!("parsing {}", p.display()))
}

pub fn parse_keyed(s: &str) -> Result<Vec<(String, u64)>> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [k, v] => Ok((k.to_string(), v.parse()?)),
            _ => bail!("unexpected line {l:?}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_oom_control_and_cpu_stat() {
        let oom = parse_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(oom[2], ("oom_kill".to_string(), 2));
        let cpu = parse_keyed("nr_periods 757\nnr_throttled 36\nthrottled_time 123456\n").unwrap();
        assert_eq!(cpu.len(), 3);
        assert_eq!(cpu[1].1, 36);
        assert!(parse_keyed("bad line here\n").is_err());
    }
}
