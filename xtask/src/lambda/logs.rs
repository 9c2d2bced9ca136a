//! A run's log and what the bootstrap must log: one init line, failure lines (at most one a
//! second, counting those left out before it), a closing one, its metrics as EMF documents.

use crate::prelude::*;
use function::metrics::EmfDocument;
use index_pack::format::{self, Identity};

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

    pub fn typed<T: for<'de> Deserialize<'de>>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(&self.fields)?)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Log {
    /// `INIT REPORT(durationMs: ...)`: exec of the bootstrap to its first request for work.
    pub init_report_ms: Option<f64>,
    /// `Duration` of each `REPORT` line, in invocation order.
    pub durations_ms: Vec<f64>,
    pub lines: Vec<Line>,
    /// The EMF documents (`{"_aws": ...}`) in order, and their bytes as CloudWatch ingests them.
    pub emf: Vec<EmfDocument>,
    pub emf_bytes: usize,
    /// Lines that are neither the bootstrap's JSON nor the emulator's own.
    pub other: Vec<String>,
    /// A runtime exit or a panic.
    pub crashed: bool,
}

impl Log {
    pub fn parse(text: &str) -> Log {
        let number_after = |line: &str, key: &str| -> Option<f64> {
            let rest = &line[line.find(key)? + key.len()..];
            let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
            rest[..end].parse().ok()
        };
        // The RIE's own: `START`/`END`/`REPORT`/`INIT REPORT` and `... [INFO] (rapid) ...`.
        let emulator = |l: &str| {
            let ours = ["START ", "END ", "REPORT ", "INIT "].iter().any(|p| l.starts_with(p));
            l.is_empty() || ours || l.contains(" (rapid) ")
        };
        let mut log = Log::default();
        for l in text.lines() {
            let init = || number_after(l, "INIT REPORT(durationMs: ");
            log.init_report_ms = log.init_report_ms.or_else(init);
            let report = l.strip_prefix("REPORT ").and_then(|r| number_after(r, "\tDuration: "));
            log.durations_ms.extend(report);
            log.crashed |= l.contains("Runtime.ExitError") || l.contains("panic");
            let emf = l.starts_with(r#"{"_aws":"#).then(|| serde_json::from_str::<EmfDocument>(l));
            match (emf, serde_json::from_str::<Line>(l)) {
                (Some(Ok(doc)), _) => {
                    log.emf.push(doc);
                    log.emf_bytes += l.len() + 1;
                }
                (None, Ok(line)) => log.lines.push(line),
                (None, Err(_)) if !l.starts_with('{') && emulator(l) => {}
                _ => log.other.push(l.to_string()),
            }
        }
        log
    }
}

/// The init line: the index's identity (`format::Identity`), its size and how it was made resident.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Init {
    pub message: String,
    pub role: String,
    pub kernels: String,
    pub codec: String,
    pub index_references_sha256: String,
    pub index_references: u64,
    pub index_part: String,
    pub index_format_version: u32,
    pub index_crc32: String,
    pub index_packer: String,
    pub artifact_bytes: u64,
    pub deltas: u64,
    pub delta_references: u64,
    pub prefault: bool,
    pub init_us: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub message: String,
    pub status: u16,
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub field: Option<String>,
    /// Failed requests since the previous failure line that had no line of their own.
    pub not_logged: u64,
}

/// The identity of an artifact file, as the binary that embeds it reports it.
pub fn identity(path: &Path) -> Result<Identity> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Identity::of(&format::open_with_footer(&format::aligned_copy(&bytes))?))
}

/// The init line the embedded artifact gives on this CPU (`prefault`, `init_us`: the run's).
pub fn expected(artifact: &Path) -> Result<Init> {
    let (id, bytes) = (identity(artifact)?, fs::read(artifact)?);
    let codec = format::open(&format::aligned_copy(&bytes))?.header.codec.native().name();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or_default();
    let avx2 = ["avx2", "fma", "f16c"].iter().all(|f| flags.split_whitespace().any(|g| g == *f));
    Ok(Init {
        message: "index ready".into(),
        role: "Http".into(),
        kernels: if avx2 { "avx2" } else { "scalar" }.into(),
        codec: codec.into(),
        index_references_sha256: id.references_sha256,
        index_references: id.references.into(),
        index_part: id.part.to_string(),
        index_format_version: id.format_version,
        index_crc32: id.crc32,
        index_packer: id.packer,
        artifact_bytes: bytes.len() as u64,
        deltas: 0,
        delta_references: 0,
        prefault: false,
        init_us: 0,
    })
}

/// Each metric of a run's EMF documents summed per dimensions (`Approved Function=..`); no 0s.
pub fn emf_sums(log: &Log) -> Result<BTreeMap<String, u64>, String> {
    let mut sums = BTreeMap::new();
    for doc in &log.emf {
        for v in doc.metrics()? {
            let dims: Vec<String> = v.dimensions.iter().map(|(k, v)| format!("{k}={v}")).collect();
            *sums.entry(format!("{} {}", v.name, dims.join(" "))).or_default() += v.value as u64;
        }
    }
    // A count of 0 says what no document would.
    sums.retain(|_, n| *n > 0);
    Ok(sums)
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub init: Option<Init>,
    pub failure_lines: usize,
    /// Failed requests counted by a failure line instead of having their own.
    pub failures_not_logged: u64,
    /// JSON lines that are neither the init line nor a failure line.
    pub unexpected_lines: usize,
    pub failed_requests: usize,
    pub bad_requests: usize,
    /// The closing line was there (last).
    pub closing_line: bool,
    pub problems: Vec<String>,
}

/// Checks the log of a run whose invocations answered `statuses`, in order.
pub fn check(log: &Log, statuses: &[u16], want: &Init, prefault: bool) -> Report {
    let failed: Vec<u16> = statuses.iter().copied().filter(|s| *s >= 400).collect();
    let bad_requests = failed.iter().filter(|s| **s == 400).count();
    let mut r = Report { failed_requests: failed.len(), bad_requests, ..Report::default() };
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
    // Index into `failed` of the failure the next line is about.
    let (mut next_failure, last) = (0, log.lines.last());
    for line in rest {
        let closing = line.message() == "the runtime API went away, exiting"
            && line.fields.keys().eq(["error", "invocations", "message"]);
        if closing && line.level == "INFO" && last.is_some_and(|l| std::ptr::eq(l, line)) {
            r.closing_line = true;
            continue;
        }
        match line.typed::<Failure>() {
            Ok(f) if line.level == "WARN" && f.message == "request failed" => {
                let shaped = f.field.is_some() == (f.status == 400) && !f.method.is_empty();
                let shape = format!("{f:?}: want a method, a path, a field iff 400");
                r.problems.extend((!shaped || f.path.is_empty()).then_some(shape));
                // The line is about the failure after the `not_logged` it counts.
                next_failure += f.not_logged as usize;
                let (had, status) = (failed.get(next_failure), f.status);
                let wrong = format!("a line for status {status} where failed request {next_failure} had {had:?} ({failed:?})");
                r.problems.extend((had != Some(&status)).then_some(wrong));
                next_failure += 1;
                r.failure_lines += 1;
                r.failures_not_logged += f.not_logged;
            }
            _ => {
                r.unexpected_lines += 1;
                r.problems.push(format!("unexpected line {} {:?}", line.level, line.fields));
            }
        }
    }
    // The first failure always has its line; later ones may be counted by the next line.
    let unlogged = !failed.is_empty() && r.failure_lines == 0;
    let (n, first) = (log.other.len(), log.other.first().map_or("", String::as_str));
    r.problems.extend(util::failed([
        (unlogged, format!("no failure line for the failed requests {failed:?}")),
        (n > 0, format!("{n} lines neither JSON nor the emulator's, first {first:?}")),
        (log.crashed, "the bootstrap crashed or panicked".into()),
    ]));
    r
}
