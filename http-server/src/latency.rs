//! How long the server took to answer, as a Prometheus histogram by route and outcome.
//!
//! A request's duration runs from the turn of the event loop that completed it (the instant
//! the loop woke up for its bytes) to the moment its answer was put in the connection's output:
//! the handler's time, the time it waited behind other connections' work in that turn, and for
//! a promised answer ([`crate::Answer::Later`]) the wait for the task behind it (a front's
//! shards). What happens before the loop wakes (the kernel's queue, a balancer in front, a CPU
//! quota that kept the process off the CPU) is not the server's to see; a client's own
//! latency is at least this one for every request, so each of its quantiles is at least the
//! histogram's.
//!
//! Recording is an array update (one bucket search over [`BUCKETS`]); the text is built only
//! when the metrics listener is asked (`crate::server`).

use function::{Outcome, Reason};
use std::fmt::Write as _;
use std::time::Duration;

/// Upper bounds of the buckets, in seconds: 50 us to 100 ms, about three per decade, then +Inf.
pub const BUCKETS: [f64; 11] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// The same bounds in nanoseconds (what is compared per request).
const BUCKETS_NS: [u64; BUCKETS.len()] = {
    let mut out = [0; BUCKETS.len()];
    let mut i = 0;
    while i < BUCKETS.len() {
        out[i] = (BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// The metric's name (with `_bucket`, `_sum` and `_count` series).
pub const NAME: &str = "fraud_request_duration_seconds";

/// Which route a request took (its path, a query string aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    FraudScore,
    Ready,
    /// Any other path, and requests refused before their path was read.
    Other,
}

impl Route {
    pub const ALL: [Route; 3] = [Route::FraudScore, Route::Ready, Route::Other];

    pub fn of(target: &str) -> Route {
        match target.split_once('?').map_or(target, |(p, _)| p) {
            "/fraud-score" => Route::FraudScore,
            "/ready" => Route::Ready,
            _ => Route::Other,
        }
    }

    /// The `route` label.
    pub fn label(self) -> &'static str {
        match self {
            Route::FraudScore => "/fraud-score",
            Route::Ready => "/ready",
            Route::Other => "other",
        }
    }
}

/// The `outcome` label of an answer: `decided`, `ready`, `refused` (a 4xx, or a 503 at a limit)
/// or `unavailable` (a 502 or 504 of a front whose shard failed); `None` for what is not
/// timed (the metrics listener's own answers).
pub fn outcome_label(o: Outcome) -> Option<&'static str> {
    match o {
        Outcome::Decided(_) => Some("decided"),
        Outcome::Ready => Some("ready"),
        Outcome::Metrics => None,
        Outcome::Rejected(Reason::ShardUnavailable) => Some("unavailable"),
        Outcome::Rejected(_) => Some("refused"),
    }
}

const OUTCOMES: [&str; 4] = ["decided", "ready", "refused", "unavailable"];

/// One series: bucket counts (the last one past every bound), their sum and count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Series {
    buckets: [u64; BUCKETS.len() + 1],
    sum_ns: u64,
    count: u64,
}

/// The histogram, by route and outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    series: [[Series; OUTCOMES.len()]; Route::ALL.len()],
}

impl Latency {
    /// Counts one answer that took `took`.
    #[inline]
    pub fn record(&mut self, route: Route, outcome: Outcome, took: Duration) {
        let Some(label) = outcome_label(outcome) else {
            return;
        };
        let o = OUTCOMES.iter().position(|&l| l == label).unwrap_or(0);
        let ns = took.as_nanos().min(u64::MAX as u128) as u64;
        let s = &mut self.series[route as usize][o];
        let b = BUCKETS_NS.partition_point(|&bound| bound < ns);
        s.buckets[b] += 1;
        s.sum_ns = s.sum_ns.saturating_add(ns);
        s.count += 1;
    }

    /// Answers counted in all.
    pub fn count(&self) -> u64 {
        self.series.iter().flatten().map(|s| s.count).sum()
    }

    /// Appends the histogram in Prometheus's text format (0.0.4): every series observed at
    /// least once, `index` as on the counters.
    pub fn prometheus(&self, index: &str, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP {NAME} Time from the event loop's turn that completed a request to its answer, by route and outcome.\n# TYPE {NAME} histogram"
        );
        for route in Route::ALL {
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                let s = &self.series[route as usize][o];
                if s.count == 0 {
                    continue;
                }
                let labels = format!(
                    "route=\"{}\",outcome=\"{outcome}\",index=\"{index}\"",
                    route.label()
                );
                let mut cumulative = 0;
                for (b, n) in s.buckets.iter().enumerate() {
                    cumulative += n;
                    let le = BUCKETS.get(b).map_or("+Inf".to_string(), |v| v.to_string());
                    let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
                }
                let sum = s.sum_ns as f64 / 1e9;
                let _ = writeln!(out, "{NAME}_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "{NAME}_count{{{labels}}} {}", s.count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use function::Decision;

    #[test]
    fn each_answer_lands_in_its_bucket_and_the_series_are_cumulative() {
        let mut l = Latency::default();
        let decided = Outcome::Decided(Decision::new(0));
        for us in [10, 50, 51, 700, 99_000, 500_000] {
            l.record(Route::FraudScore, decided, Duration::from_micros(us));
        }
        l.record(Route::Ready, Outcome::Ready, Duration::from_micros(3));
        l.record(Route::Other, Outcome::Metrics, Duration::from_micros(3));
        assert_eq!(l.count(), 7);
        let mut text = String::new();
        l.prometheus("abc", &mut text);
        let line = |le: &str| {
            let key = format!(
                "{NAME}_bucket{{route=\"/fraud-score\",outcome=\"decided\",index=\"abc\",le=\"{le}\"}} "
            );
            let at = text.find(&key).unwrap_or_else(|| panic!("{key} in {text}"));
            text[at + key.len()..]
                .lines()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        // 50 us is inside the first bucket (le is inclusive), 51 us is not.
        assert_eq!(
            [
                line("0.00005"),
                line("0.0001"),
                line("0.001"),
                line("0.1"),
                line("+Inf")
            ],
            [2, 3, 4, 5, 6]
        );
        assert!(text.contains(&format!(
            "{NAME}_count{{route=\"/ready\",outcome=\"ready\",index=\"abc\"}} 1"
        )));
        assert!(!text.contains("route=\"other\""), "{text}");
        assert_eq!(Route::of("/fraud-score?x=1"), Route::FraudScore);
        assert_eq!(Route::of("/readyz"), Route::Other);
    }
}
