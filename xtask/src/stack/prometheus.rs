//! Debian's Prometheus scraping the stack's APIs during a run, and asked afterwards through its
//! HTTP API, as an operator's Prometheus would be: each API's metrics listener
//! (`FRAUD_METRICS_LISTEN`, port [`PORT`] on the stack's network, not published) every second.

use super::compose::{inspect, Compose};
use crate::prelude::*;

/// The APIs' metrics port (docker-compose.yml's `FRAUD_METRICS_LISTEN`).
pub const PORT: u16 = 9100;

/// Whether a run is scraped by Prometheus, and whether its graphs are captured afterwards.
#[derive(Clone, Debug, Default)]
pub enum Watch {
    #[default]
    No,
    Scrape,
    /// Scraped, then Prometheus's graph page of the run captured into this PNG ([`capture`]).
    Capture(PathBuf),
}

/// The graphs an operator looks at first: the decision rate and the request path's p99.
pub const GRAPHS: [&str; 2] = [
    "sum(rate(fraud_decisions_total[5s]))",
    "histogram_quantile(0.99, sum by (le) (rate(fraud_request_duration_seconds_bucket{route=\"/fraud-score\"}[5s])))",
];

/// A Prometheus server on loopback, stopped when dropped.
pub struct Prometheus {
    _server: util::Killed,
    url: String,
}

/// What Prometheus says the APIs counted over the run.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Observed {
    /// Targets up at the end (the two APIs).
    pub up: u64,
    pub decisions: u64,
    pub approved: u64,
    pub refused: u64,
    /// The 99th percentile of `fraud_request_duration_seconds` on `/fraud-score` over the run,
    /// by Prometheus's `histogram_quantile`, in ms.
    pub p99_ms: f64,
}

impl Prometheus {
    /// Starts scraping `compose`'s APIs (their addresses on the stack's network), data in `dir`.
    pub fn start(compose: &Compose, dir: &Path) -> Result<Prometheus> {
        util::require("prometheus", "scripts/setup.sh installs Debian's prometheus")?;
        let mut targets = Vec::new();
        for api in &compose.apis {
            let networks = inspect(&compose.id(api)?)?["NetworkSettings"]["Networks"].clone();
            let ip = networks
                .as_object()
                .and_then(|n| n.values().next()?["IPAddress"].as_str().map(String::from));
            targets.push(format!("\"{}:{PORT}\"", ip.context("an API without an address")?));
        }
        let config = dir.join("prometheus.yml");
        fs::create_dir_all(dir)?;
        fs::write(&config, format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: fraud-api\n    static_configs:\n      - targets: [{}]\n", targets.join(", ")))?;
        let addr = util::free_port()?;
        let server = cmd!(
            "prometheus",
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={addr}")
        );
        let server = util::Killed(util::to_log(server, &dir.join("prometheus.log")).start()?);
        let url = format!("http://{addr}");
        util::wait_200("Prometheus", &format!("{url}/-/ready"), Duration::from_secs(30))?;
        log!("prometheus scrapes {} every second ({url})", targets.join(", "));
        Ok(Prometheus { _server: server, url })
    }

    /// The value of an instant query (its one series; 0 when it has none).
    pub fn query(&self, q: &str) -> Result<f64> {
        let agent = util::http_agent(Duration::from_secs(5));
        let mut r = agent.get(format!("{}/api/v1/query", self.url)).query("query", q).call()?;
        let v: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string()?)?;
        ensure!(v["status"] == "success", "Prometheus refused {q}: {v}");
        let value = v["data"]["result"][0]["value"][1].as_str().unwrap_or("0");
        value.parse().with_context(|| format!("{q} gave {value}"))
    }

    /// Once its scrapes hold `decisions` decisions (or 15 s have passed), what it counted.
    pub fn observed(&self, decisions: u64) -> Result<Observed> {
        let count = |q: &str| -> Result<u64> { Ok(self.query(q)?.round() as u64) };
        let total = "sum(fraud_decisions_total)";
        let scraped = util::poll(
            "the last scrape",
            Duration::from_secs(15),
            Duration::from_millis(250),
            || {
                let n = count(total)?;
                Ok(if n >= decisions { Ok(()) } else { Err(format!("{n} decisions scraped")) })
            },
        );
        scraped.unwrap_or_else(|e| log!("prometheus: {e:#}"));
        let p99 = "histogram_quantile(0.99, sum by (le) (fraud_request_duration_seconds_bucket{route=\"/fraud-score\"}))";
        Ok(Observed {
            up: count("sum(up)")?,
            decisions: count(total)?,
            approved: count("sum(fraud_decisions_total{approved=\"true\"})")?,
            refused: count("sum(fraud_requests_rejected_total)")?,
            p99_ms: self.query(p99)? * 1000.0,
        })
    }

    /// Prometheus's own graph page of the last minute ([`GRAPHS`]), rendered by Debian's
    /// headless Chromium into `png`.
    pub fn capture(&self, png: &Path) -> Result<()> {
        util::require("chromium", "install Debian's chromium (`apt-get install chromium`)")?;
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (i, expr) in GRAPHS.iter().enumerate() {
            query.append_pair(&format!("g{i}.expr"), expr);
            query.append_pair(&format!("g{i}.tab"), "0");
            query.append_pair(&format!("g{i}.range_input"), "1m");
        }
        let page = format!("{}/graph?{}", self.url, query.finish());
        if let Some(dir) = png.parent() {
            fs::create_dir_all(dir)?;
        }
        let shot = format!("--screenshot={}", png.display());
        // The page draws its graphs in JavaScript: the virtual time lets them finish first.
        let args = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"];
        let size = ["--window-size=1280,1500", "--virtual-time-budget=15000"];
        let all = [&args[..], &size[..], &[shot.as_str(), page.as_str()]].concat();
        util::run(&duct::cmd("chromium", all))?;
        ensure!(
            fs::metadata(png).is_ok_and(|m| m.len() > 0),
            "Chromium wrote no {}",
            png.display()
        );
        log!("prometheus: {} captured into {}", page, png.display());
        Ok(())
    }
}
