//! What the function must log (function/src/bin/bootstrap.rs): one INFO line at init, one WARN
//! line per failed request (never the body), nothing for a success, at most one closing line.

use super::emulator::{Line, Log};
use anyhow::{Context, Result};
use index_pack::format::{self, Footer};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The init line's fields, all of them.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
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

/// The init line the function must write with the artifact the build embedded, on this CPU (the
/// search uses AVX2 kernels when AVX2, FMA and F16C are all there); `prefault` and `init_us` are
/// the run's.
pub fn expected(artifact: &Path) -> Result<Init> {
    let bytes =
        std::fs::read(artifact).with_context(|| format!("cannot read {}", artifact.display()))?;
    let footer = Footer::read(&bytes)?;
    let aligned = format::aligned_copy(&bytes);
    let header = &format::open(&aligned)?.header;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or_default();
    let avx2 = ["avx2", "fma", "f16c"].iter().all(|f| flags.split_whitespace().any(|g| g == *f));
    Ok(Init {
        message: "index ready".into(),
        kernels: if avx2 { "avx2" } else { "scalar" }.into(),
        codec: header.codec.native().name().to_string(),
        index_source_sha256: format::hex(&header.source_sha256),
        artifact_crc32: format!("{:08x}", footer.crc32),
        artifact_bytes: bytes.len() as u64,
        prefault: false,
        init_us: 0,
    })
}

/// The message of the bootstrap's closing line.
pub const CLOSING: &str = "the runtime API went away, exiting";

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
    /// The closing line was there (last).
    pub closing_line: bool,
    pub problems: Vec<String>,
}

impl Report {
    pub fn problem(p: String) -> Report {
        Report { problems: vec![p], ..Report::default() }
    }
}

/// Checks the log of a run whose invocations answered `statuses`, in order.
pub fn check(log: &Log, statuses: &[u16], want: &Init, prefault: bool) -> Report {
    let failed: Vec<u16> = statuses.iter().copied().filter(|s| *s >= 400).collect();
    let mut r = Report {
        failed_requests: failed.len(),
        bad_requests: failed.iter().filter(|s| **s == 400).count(),
        other_lines: log.other.len(),
        ..Report::default()
    };
    let (inits, rest): (Vec<&Line>, Vec<&Line>) =
        log.lines.iter().partition(|l| l.message() == "index ready");
    match inits[..] {
        [line] => match line.typed::<Init>() {
            Ok(init) => {
                let want = Init { prefault, init_us: init.init_us, ..want.clone() };
                if init != want || line.level != "INFO" {
                    r.problems.push(format!("init line {} {init:?}, want {want:?}", line.level));
                }
                r.init = Some(init);
            }
            Err(e) => r.problems.push(format!("init line: {e}: {:?}", line.fields)),
        },
        _ => r.problems.push(format!("{} init lines, want 1", inits.len())),
    }
    let (mut logged, last) = (Vec::new(), log.lines.last());
    for line in rest {
        let keys: Vec<&str> = line.fields.keys().map(String::as_str).collect();
        let closing = line.message() == CLOSING && keys == ["error", "invocations", "message"];
        if closing && line.level == "INFO" && last.is_some_and(|l| std::ptr::eq(l, line)) {
            r.closing_line = true;
            continue;
        }
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
    if let Some(first) = log.other.first() {
        r.problems.push(format!(
            "{} lines neither JSON nor the emulator's, first {first:?}",
            log.other.len()
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

    /// The init line of [`INIT`] (a run's `init_us` is its own).
    fn want() -> Init {
        Init { init_us: 0, ..Log::parse(INIT).lines[0].typed().unwrap() }
    }

    const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","kernels":"avx2","codec":"i16","index_source_sha256":"ab","artifact_crc32":"0000000f","artifact_bytes":10,"prefault":false,"init_us":300}}"#;
    const FAILED: &str = r#"{"level":"WARN","fields":{"message":"request failed","status":400,"method":"POST","path":"/fraud-score","field":"transaction.amount"},"span":{"requestId":"x"}}"#;
    const CLOSED: &str = r#"{"level":"INFO","fields":{"message":"the runtime API went away, exiting","invocations":3,"error":"connection closed"}}"#;

    #[test]
    fn one_init_line_and_one_line_per_failure_pass() {
        let log = Log::parse(&format!("{INIT}\n{FAILED}\n"));
        let r = check(&log, &[200, 400, 200], &want(), false);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!((r.failure_lines, r.bad_requests, r.init.unwrap().init_us), (1, 1, 300));
        let r =
            check(&Log::parse(&format!("{INIT}\n{FAILED}\n{CLOSED}\n")), &[400], &want(), false);
        assert!(r.problems.is_empty() && r.closing_line, "{:?}", r.problems);
    }

    #[test]
    fn a_line_per_success_a_logged_body_a_missing_line_another_index_or_mode_fail() {
        let extra = r#"{"level":"INFO","fields":{"message":"answered","status":200}}"#;
        let body = FAILED.replace(r#""field""#, r#""body":"{}","field""#);
        let other = Init { artifact_crc32: "00000010".into(), ..want() };
        let cases: [(String, &[u16], Init, bool); 8] = [
            (format!("{INIT}\n{CLOSED}\n{FAILED}\n"), &[400], want(), false),
            (format!("{INIT}\n{CLOSED}\n{CLOSED}\n"), &[200], want(), false),
            (format!("{INIT}\n{}\n", CLOSED.replace("INFO", "ERROR")), &[200], want(), false),
            (format!("{INIT}\n{extra}\n{FAILED}\n"), &[200, 400], want(), false),
            (format!("{INIT}\n{body}\n"), &[400], want(), false),
            (format!("{INIT}\n"), &[400], want(), false),
            (format!("{INIT}\n"), &[200], want(), true),
            (format!("{INIT}\n"), &[200], other, false),
        ];
        for (text, statuses, want, prefault) in cases {
            assert!(
                !check(&Log::parse(&text), statuses, &want, prefault).problems.is_empty(),
                "{text}"
            );
        }
    }
}
