//! What the function must log (function/src/bin/bootstrap.rs), checked on the emulator's log:
//! one INFO line at init naming the kernels, the codec, the index's source SHA-256 and the
//! artifact's CRC32 (equal to those of the artifact the build embedded) and the init time; one
//! WARN line per failed request with status, method, path and at most the field a 400 names
//! (nothing else: never the body); no line for a successful request.

use super::emulator::{Line, Log};
use anyhow::{Context, Result};
use index_pack::format::{self, Footer};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The init line's fields, all of them.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Init {
    pub message: String,
    pub kernels: String,
    pub codec: String,
    pub index_source_sha256: String,
    pub artifact_crc32: String,
    pub artifact_bytes: u64,
    pub prefault: bool,
    pub init_us: u64,
}

/// A failed request's line, all of its fields.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub message: String,
    pub status: u16,
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub field: Option<String>,
}

/// What the init line must say about the index and the CPU.
#[derive(Clone, Debug, Serialize)]
pub struct Expected {
    pub kernels: &'static str,
    pub codec: String,
    pub index_source_sha256: String,
    pub artifact_crc32: String,
    pub artifact_bytes: u64,
}

impl Expected {
    /// From the artifact the build embedded, and this CPU's features (the search uses AVX2
    /// kernels when AVX2, FMA and F16C are all there).
    pub fn of(artifact: &Path) -> Result<Expected> {
        let bytes = std::fs::read(artifact)
            .with_context(|| format!("cannot read {}", artifact.display()))?;
        let footer = Footer::read(&bytes)?;
        let aligned = format::aligned_copy(&bytes);
        let header = &format::open(&aligned)?.header;
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags: Vec<&str> = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags"))
            .map(|f| f.split_whitespace().collect())
            .unwrap_or_default();
        let avx2 = ["avx2", "fma", "f16c"].iter().all(|f| flags.contains(f));
        Ok(Expected {
            kernels: if avx2 { "avx2" } else { "scalar" },
            codec: header.codec.native().name().to_string(),
            index_source_sha256: format::hex(&header.source_sha256),
            artifact_crc32: format!("{:08x}", footer.crc32),
            artifact_bytes: bytes.len() as u64,
        })
    }
}

/// The outcome of the log checks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub init: Option<Init>,
    pub failure_lines: usize,
    /// JSON lines that are neither the init line nor a failure line.
    pub unexpected_lines: usize,
    pub failed_requests: usize,
    pub bad_requests: usize,
    pub other_lines: usize,
    pub problems: Vec<String>,
}

impl Report {
    pub fn problem(p: String) -> Report {
        Report { problems: vec![p], ..Report::default() }
    }
}

/// Checks the log of a run whose invocations answered `statuses`, in order.
pub fn check(log: &Log, statuses: &[u16], want: &Expected, prefault: bool) -> Report {
    let mut r = Report {
        failed_requests: statuses.iter().filter(|s| **s >= 400).count(),
        bad_requests: statuses.iter().filter(|s| **s == 400).count(),
        other_lines: log.other.len(),
        ..Report::default()
    };
    let (inits, rest): (Vec<&Line>, Vec<&Line>) =
        log.lines.iter().partition(|l| l.message() == "index ready");
    match inits.as_slice() {
        [line] => match line.typed::<Init>() {
            Ok(init) => {
                let got = (
                    init.kernels.as_str(),
                    init.codec.as_str(),
                    init.index_source_sha256.as_str(),
                    init.artifact_crc32.as_str(),
                    init.artifact_bytes,
                    init.prefault,
                );
                let expected = (
                    want.kernels,
                    want.codec.as_str(),
                    want.index_source_sha256.as_str(),
                    want.artifact_crc32.as_str(),
                    want.artifact_bytes,
                    prefault,
                );
                if got != expected || line.level != "INFO" {
                    r.problems.push(format!(
                        "init line {} {init:?}, want {want:?} prefault {prefault}",
                        line.level
                    ));
                }
                r.init = Some(init);
            }
            Err(e) => r.problems.push(format!("init line: {e}: {:?}", line.fields)),
        },
        other => r.problems.push(format!("{} init lines, want 1", other.len())),
    }
    let failed: Vec<u16> = statuses.iter().copied().filter(|s| *s >= 400).collect();
    let mut logged = Vec::new();
    for line in rest {
        match line.typed::<Failure>() {
            Ok(f) if line.level == "WARN" && f.message == "request failed" => {
                if f.field.is_some() != (f.status == 400) {
                    r.problems.push(format!("field present iff 400: {f:?}"));
                }
                logged.push(f.status);
            }
            _ => {
                r.unexpected_lines += 1;
                r.problems.push(format!("unexpected line {} {:?}", line.level, line.fields));
            }
        }
    }
    r.failure_lines = logged.len();
    if logged != failed {
        r.problems.push(format!(
            "failure lines for statuses {logged:?}, want one per failed request {failed:?}"
        ));
    }
    if !log.other.is_empty() {
        r.problems.push(format!(
            "{} lines neither JSON nor the emulator's, first {:?}",
            log.other.len(),
            log.other[0]
        ));
    }
    if log.crashed {
        r.problems.push("the bootstrap crashed or panicked".into());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want() -> Expected {
        Expected {
            kernels: "avx2",
            codec: "i16".into(),
            index_source_sha256: "ab".into(),
            artifact_crc32: "0000000f".into(),
            artifact_bytes: 10,
        }
    }

    const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","kernels":"avx2","codec":"i16","index_source_sha256":"ab","artifact_crc32":"0000000f","artifact_bytes":10,"prefault":false,"init_us":300}}"#;
    const FAILED: &str = r#"{"level":"WARN","fields":{"message":"request failed","status":400,"method":"POST","path":"/fraud-score","field":"transaction.amount"},"span":{"requestId":"x"}}"#;

    #[test]
    fn one_init_line_and_one_line_per_failure_pass() {
        let log = Log::parse(&format!("{INIT}\n{FAILED}\n"));
        let r = check(&log, &[200, 400, 200], &want(), false);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!((r.failure_lines, r.bad_requests), (1, 1));
    }

    #[test]
    fn a_line_per_success_or_a_logged_body_fails() {
        let extra = r#"{"level":"INFO","fields":{"message":"answered","status":200}}"#;
        let log = Log::parse(&format!("{INIT}\n{extra}\n{FAILED}\n"));
        assert!(!check(&log, &[200, 400], &want(), false).problems.is_empty());
        let body = FAILED.replace(r#""field""#, r#""body":"{}","field""#);
        let log = Log::parse(&format!("{INIT}\n{body}\n"));
        assert!(!check(&log, &[400], &want(), false).problems.is_empty());
        let log = Log::parse(&format!("{INIT}\n"));
        assert!(!check(&log, &[400], &want(), false).problems.is_empty());
    }

    #[test]
    fn a_different_index_or_mode_fails() {
        let log = Log::parse(&format!("{INIT}\n"));
        assert!(!check(&log, &[200], &want(), true).problems.is_empty());
        let mut other = want();
        other.artifact_crc32 = "00000010".into();
        assert!(!check(&log, &[200], &other, false).problems.is_empty());
    }
}
