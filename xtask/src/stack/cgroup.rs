//! A container's cgroup v1 counters (cgroupfs driver): memory, OOM kills, CPU and throttling.

use crate::prelude::*;
use crate::util::read_text as read;

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
    pub nr_throttled: u64,
    pub throttled_ns: u64,
}

impl Cgroup {
    pub fn of(id: &str) -> Result<Cgroup> {
        let find = |ctl: &str| {
            let base = Path::new("/sys/fs/cgroup").join(ctl);
            let dir = base.join("docker").join(id);
            dir.is_dir().then_some(dir).with_context(|| {
                format!("no cgroup v1 {ctl} directory for container {id} under {}", base.display())
            })
        };
        Ok(Cgroup { memory: find("memory")?, cpuacct: find("cpuacct")?, cpu: find("cpu")? })
    }

    pub fn snapshot(&self) -> Result<Snapshot> {
        let mem = |f: &str| read(&self.memory.join(f)).and_then(|s| number(&s));
        let cpu = read(&self.cpu.join("cpu.stat"))?;
        Ok(Snapshot {
            memory_limit: mem("memory.limit_in_bytes")?,
            memory_peak: mem("memory.max_usage_in_bytes")?,
            memory_failcnt: mem("memory.failcnt")?,
            oom_kill: keyed(&read(&self.memory.join("memory.oom_control"))?, "oom_kill")?,
            cpu_ns: number(&read(&self.cpuacct.join("cpuacct.usage"))?)?,
            nr_throttled: keyed(&cpu, "nr_throttled")?,
            throttled_ns: keyed(&cpu, "throttled_time")?,
        })
    }

    /// Current memory use (page cache included, as the limit counts it).
    pub fn memory_usage(&self) -> Option<u64> {
        number(&read(&self.memory.join("memory.usage_in_bytes")).ok()?).ok()
    }

    /// Resets the peak and failcnt, so that the next reading is this run's.
    pub fn reset_peak(&self) -> Result<()> {
        for p in ["memory.max_usage_in_bytes", "memory.failcnt"].map(|f| self.memory.join(f)) {
            fs::write(&p, "0").with_context(|| format!("cannot reset {}", p.display()))?;
        }
        Ok(())
    }
}

pub fn number(s: &str) -> Result<u64> {
    s.trim().parse().with_context(|| format!("not a number: {s:?}"))
}

/// The value of `key` in `key value` lines (cpu.stat, memory.oom_control); 0 when absent.
pub fn keyed(s: &str, key: &str) -> Result<u64> {
    s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')).map_or(Ok(0), number)
}
