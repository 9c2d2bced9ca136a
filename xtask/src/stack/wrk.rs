//! wrk (Debian's 4.1) as the overload generator: request bodies from the test set, a paced run
//! (`k6/wrk-post.lua`: each connection waits `delay_ms` before each request) and its summary line
//! `WRKJSON {...}` parsed with serde.

use crate::util::{self, root};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What wrk-post.lua's done() prints.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub duration_us: u64,
    pub status200: u64,
    pub non200: u64,
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Summary {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / (self.duration_us as f64 / 1e6)
    }
    pub fn errors(&self) -> u64 {
        self.non200 + self.connect + self.read + self.write + self.timeout
    }
}

pub fn parse(output: &str) -> Result<Summary> {
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix("WRKJSON "))
        .context("wrk printed no WRKJSON line")?;
    serde_json::from_str(line).context("parsing wrk's WRKJSON line")
}

/// `n` compact request bodies spread over the test set, one per line (written once).
pub fn bodies(n: usize) -> Result<PathBuf> {
    let out = util::target_dir().join(format!("stack-data/wrk-bodies-{n}.txt"));
    if out.exists() {
        return Ok(out);
    }
    let entries = util::test_entries()?;
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(&out)?);
    for i in util::spread(entries.len(), n) {
        let v: serde_json::Value = serde_json::from_str(entries[i].request.get())?;
        writeln!(f, "{}", serde_json::to_string(&v)?)?;
    }
    f.flush()?;
    Ok(out)
}

/// A paced wrk run with the `bodies` file: `connections` connections for `seconds`, each waiting
/// `delay_ms` before each request; output kept in `log`.
pub fn run(
    bodies: &Path,
    connections: u32,
    delay_ms: u32,
    seconds: u32,
    log: &Path,
) -> Result<Summary> {
    let (c, d) = (format!("-c{connections}"), format!("-d{seconds}s"));
    let script = root().join("k6/wrk-post.lua");
    let e =
        duct::cmd!("wrk", "-t2", c, d, "--timeout", "2s", "-s", script, "http://127.0.0.1:9999");
    let e = e.env("WRK_BODIES", bodies).env("WRK_DELAY_MS", delay_ms.to_string());
    let out = e.stdout_capture().stderr_capture().unchecked().run().context("cannot start wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(log, format!("{text}{}", String::from_utf8_lossy(&out.stderr)))?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_summary_line() {
        let out = "Running 10s test\n  2 threads\nWRKJSON {\"requests\":18000,\"duration_us\":10000000,\"status200\":17990,\"non200\":10,\"connect\":0,\"read\":1,\"write\":0,\"timeout\":2,\"p50_us\":800,\"p99_us\":4000,\"max_us\":9000}\n";
        let s = super::parse(out).unwrap();
        assert_eq!(s.rate(), 1800.0);
        assert_eq!(s.errors(), 13);
        assert!(super::parse("nothing").is_err());
    }
}
