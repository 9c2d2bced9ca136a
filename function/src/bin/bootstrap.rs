//! `bootstrap`: the fraud scorer as an AWS Lambda function (custom runtime `provided.al2023`).
//!
//! Two roles, by `FRAUD_LAMBDA_ROLE`:
//! - `http` (the default): `lambda_http` turns each event (API Gateway REST API v1, HTTP API
//!   v2, Function URL, ALB) into one `http::Request`; [`answer`] hands it to
//!   [`function::Scorer::handle`], the same handler the HTTP server uses, and [`respond`] turns
//!   the [`function::Response`] back into the event source's response format. Nothing here takes
//!   part in the decision, and a bad body is the handler's normal 400 answer, never a function
//!   error.
//! - `shard`: a shard of a set split across functions (`index-pack split`): each invocation is a
//!   query vector from the front ([`function::shard::NearestRequest`]) and its answer the
//!   shard's 5 nearest references with their positions in the whole set
//!   ([`function::shard::NearestResponse`]).
//!
//! Start-up opens the index embedded in this binary in place (no copy), with the deltas that
//! extend it (`function::index::deltas`). `FRAUD_PREFAULT` says whether the init reads and
//! CRC-checks every page first, so that no invocation waits for the index to come from storage:
//! `1`, `0`, or `auto` (the template's default: [`prefault_auto`], by the index's size and the
//! function's memory). Otherwise pages are mapped as queries touch them and the init reads only
//! the tables.
//!
//! Logs go through `tracing` (`lambda_http::tracing`): JSON lines when the function's
//! `LoggingConfig` says `LogFormat: JSON` (Lambda then sets `AWS_LAMBDA_LOG_FORMAT`), level from
//! `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`. At INFO: one line at init (kernels, codec, the index's
//! identity, init time), one WARN line per failed request but at most one a second, with the
//! count of those left out ([`FailureLog`]: status, method, path, the field a 400 names; never
//! the body), nothing per successful request; the runtime's own errors.
//!
//! Metrics ([`Metrics`]): what the `http` role decided, counted per execution environment and
//! written to stdout as CloudWatch Embedded Metric Format documents every
//! `FRAUD_METRICS_FLUSH_SECONDS` (at the end of the first invocation past that interval; `0`:
//! after every invocation; `off`: never), and once more when Lambda ends the environment (a
//! no-op internal extension makes it send SIGTERM first) or the runtime API goes away.
//!
//! Any panic aborts the process after logging it (and running the default hook, which prints the
//! standard message): Lambda then reports the invocation as failed and starts a fresh execution
//! environment, rather than reusing one in an unknown state.

use function::lambda::{Metrics, Process};
use function::shard::{self, NearestRequest};
use index_pack::format::Identity;
use lambda_http::{tracing, Error};
use std::process::ExitCode;
use std::time::Instant;

/// Whether `FRAUD_PREFAULT=auto` reads the index during init: when it fits the function's
/// memory with 64 MiB to spare (less memory than the index would evict its pages again) and is
/// at most 1 GiB (read in order at ~1.1 ms per MB, about 1.2 s of the 10 s init, and of the
/// first invocation's timeout under `sam local invoke`). Larger indexes are read lazily, as the
/// queries touch them.
fn prefault_auto(index_bytes: u64, memory_mb: u64) -> bool {
    index_bytes + (64 << 20) <= memory_mb << 20 && index_bytes <= 1 << 30
}

/// `FRAUD_PREFAULT`: `1`, `0`, or `auto` (also when unset).
fn prefault(setting: Option<&str>, index_bytes: u64, memory_mb: u64) -> Result<bool, String> {
    match setting.unwrap_or("auto") {
        "1" => Ok(true),
        "0" => Ok(false),
        "auto" | "" => Ok(prefault_auto(index_bytes, memory_mb)),
        other => Err(format!(
            "FRAUD_PREFAULT must be 1, 0 or auto, not {other:?}"
        )),
    }
}

fn main() -> ExitCode {
    let started = Instant::now();
    function::lambda::main("bootstrap", |process| serve(started, process))
}

/// The two roles (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Http,
    Shard,
}

/// Opens the index, logs the init line, then answers invocations until the runtime stops.
fn serve(started: Instant, process: &'static Process) -> Result<(), Error> {
    let role = match std::env::var("FRAUD_LAMBDA_ROLE").as_deref() {
        Err(_) | Ok("") | Ok("http") => Role::Http,
        Ok("shard") => Role::Shard,
        Ok(other) => {
            return Err(format!("FRAUD_LAMBDA_ROLE must be http or shard, not {other:?}").into())
        }
    };
    // Each role takes only its part of a set: the http role a whole set (with its deltas), the
    // shard role a shard; the other is refused here with a sentence, before any traffic.
    let (scorer, searcher) = match role {
        Role::Http => {
            let scorer = function::embedded_scorer()?;
            let searcher = *scorer
                .searcher()
                .expect("the bootstrap searches its own index");
            (Some(scorer), searcher)
        }
        Role::Shard => (None, function::embedded_shard()?),
    };
    let artifact = function::index::artifact()?;
    let memory_mb = std::env::var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let setting = std::env::var("FRAUD_PREFAULT").ok();
    let prefault = prefault(setting.as_deref(), artifact.len() as u64, memory_mb)?;
    if prefault {
        function::index::prefault()?;
    }
    let identity = function::index::identity()?;
    let deltas = function::index::deltas()?;
    tracing::info!(
        role = ?role,
        kernels = searcher.kernels_name(),
        codec = searcher.index().header.codec.native().name(),
        index_references_sha256 = %identity.references_sha256,
        index_references = identity.references,
        index_part = %identity.part,
        index_format_version = identity.format_version,
        index_crc32 = %identity.crc32,
        index_packer = %identity.packer,
        artifact_bytes = artifact.len(),
        deltas = deltas.len(),
        delta_references = deltas
            .iter()
            .map(|d| d.index.header.n_refs.to_native() as u64)
            .sum::<u64>(),
        prefault,
        init_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "index ready"
    );
    match scorer {
        Some(scorer) => {
            let mut index = vec![identity];
            index.extend(deltas.iter().map(Identity::of));
            let scorer: &'static function::Scorer = Box::leak(Box::new(scorer));
            function::lambda::serve_http(scorer, process, Metrics::from_env(index)?)
        }
        None => {
            // A shard answers with its edits in its identity (`Identity::edited`).
            let identity = if deltas.is_empty() {
                identity
            } else {
                let edits: Vec<Identity> = deltas.iter().map(Identity::of).collect();
                let live = u32::try_from(searcher.references()).expect("positions are 31 bits");
                identity.edited(&edits, live)
            };
            let identity: &'static Identity = Box::leak(Box::new(identity));
            function::lambda::serve_events(process, move |request: NearestRequest| {
                shard::answer(&searcher, identity, &request)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use function::lambda::{respond, FailureLog};
    use function::Scorer;
    use lambda_http::http::header::{ALLOW, CONTENT_TYPE};
    use lambda_http::Request;
    use lambda_http::{Body, RequestExt};
    use std::time::Duration;

    fn event(name: &str) -> Request {
        let path = format!("{}/../events/{name}", env!("CARGO_MANIFEST_DIR"));
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        lambda_http::request::from_str(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A failure log that writes every line (the rate limit has its own test).
    fn every_failure() -> FailureLog {
        FailureLog::new(Duration::ZERO)
    }

    fn no_metrics() -> Metrics {
        Metrics::off()
    }

    #[test]
    fn auto_prefault_follows_the_index_and_the_memory() {
        const MB: u64 = 1 << 20;
        // The contest's 3M (92 MB) and a zip's largest (250 MB) at the template's 512 MB.
        assert!(prefault_auto(92 * MB, 512));
        assert!(prefault_auto(250 * MB, 512));
        // 30M (908 MB): lazy at 512 MB, read whole with the memory for it.
        assert!(!prefault_auto(908 * MB, 512));
        assert!(prefault_auto(908 * MB, 1024));
        // 100M (3,024 MB): lazy whatever the memory (its read would take most of the init).
        assert!(!prefault_auto(3024 * MB, 10_240));
        assert_eq!(prefault(Some("1"), 3024 * MB, 512), Ok(true));
        assert_eq!(prefault(None, 92 * MB, 512), Ok(true));
        assert!(prefault(Some("yes"), 1, 512).is_err());
    }

    fn answer(name: &str) -> (u16, serde_json::Value) {
        let scorer = function::embedded_scorer().unwrap();
        let res = respond(&scorer, &every_failure(), &no_metrics(), &event(name));
        assert_eq!(res.headers()[CONTENT_TYPE], "application/json", "{name}");
        let body = match res.body() {
            Body::Text(s) => s.clone(),
            other => panic!("{name}: expected a text body, got {other:?}"),
        };
        (res.status().as_u16(), serde_json::from_str(&body).unwrap())
    }

    #[test]
    fn every_event_source_reaches_the_handler() {
        for source in ["apigw-v2", "apigw-v1", "function-url", "alb"] {
            let (status, body) = answer(&format!("{source}/legit.json"));
            assert_eq!(
                (status, body["approved"].as_bool()),
                (200, Some(true)),
                "{source}"
            );
            let (status, body) = answer(&format!("{source}/fraud.json"));
            assert_eq!(
                (status, body["approved"].as_bool()),
                (200, Some(false)),
                "{source}"
            );
            let (status, body) = answer(&format!("{source}/malformed.json"));
            assert_eq!(status, 400, "{source}");
            assert!(body["error"].is_string(), "{source}: {body}");
            let (status, body) = answer(&format!("{source}/ready.json"));
            assert_eq!(
                (status, body["ready"].as_bool()),
                (200, Some(true)),
                "{source}"
            );
        }
    }

    #[test]
    fn rest_api_stage_is_not_part_of_the_route() {
        let req = event("apigw-v1/legit.json");
        assert_eq!(req.raw_http_path(), "/fraud-score");
    }

    #[test]
    fn wrong_method_carries_allow() {
        let scorer = function::embedded_scorer().unwrap();
        let res = respond(
            &scorer,
            &every_failure(),
            &no_metrics(),
            &event("apigw-v2/wrong-method.json"),
        );
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers()[ALLOW], "POST");
    }

    /// The JSON lines `respond` logs for these events, as Lambda's JSON format would write them.
    fn logged(events: &[&str]) -> Vec<serde_json::Value> {
        let failures = every_failure();
        logged_with(|scorer| {
            for name in events {
                respond(scorer, &failures, &no_metrics(), &event(name));
            }
        })
    }

    thread_local! {
        /// What the test subscriber wrote on this thread.
        static LOGGED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Writes into the calling thread's `LOGGED`.
    struct ThreadBuffer;
    impl std::io::Write for ThreadBuffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            LOGGED.with(|l| l.borrow_mut().extend_from_slice(b));
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The JSON lines `f` logs, given the embedded scorer.
    ///
    /// One global subscriber for the whole test binary, writing into the logging thread's own
    /// buffer: a thread-local dispatcher (`with_default`) misses events whose callsite another
    /// test thread registered first while no subscriber was interested (tracing caches a
    /// callsite's interest globally): about one run in 300 lost its line.
    fn logged_with(f: impl FnOnce(&Scorer<'static>)) -> Vec<serde_json::Value> {
        static SUBSCRIBER: std::sync::Once = std::sync::Once::new();
        SUBSCRIBER.call_once(|| {
            let subscriber = tracing::subscriber::fmt()
                .json()
                .with_writer(|| ThreadBuffer)
                .finish();
            tracing::dispatcher::set_global_default(tracing::Dispatch::new(subscriber)).unwrap();
        });
        let scorer = function::embedded_scorer().unwrap();
        LOGGED.with(|l| l.borrow_mut().clear());
        f(&scorer);
        let text =
            LOGGED.with(|l| String::from_utf8(std::mem::take(&mut *l.borrow_mut())).unwrap());
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn successful_requests_log_nothing() {
        let lines = logged(&[
            "apigw-v2/legit.json",
            "apigw-v1/fraud.json",
            "function-url/null-last.json",
            "alb/ready.json",
        ]);
        assert!(lines.is_empty(), "{lines:?}");
    }

    #[test]
    fn a_failed_request_logs_one_line_without_the_body() {
        let lines = logged(&["hostile/wrong-type.json"]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let fields = &lines[0]["fields"];
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(fields["status"], 400);
        assert_eq!(fields["method"], "POST");
        assert_eq!(fields["path"], "/fraud-score");
        assert_eq!(fields["field"], "transaction.amount");
        assert_eq!(fields["not_logged"], 0);
        // The offending value ("441.59" as a string) is in the error message, not in the log.
        assert!(!lines[0].to_string().contains("441.59"), "{}", lines[0]);

        let lines = logged(&["apigw-v2/not-found.json", "apigw-v2/wrong-method.json"]);
        let statuses: Vec<_> = lines
            .iter()
            .map(|l| l["fields"]["status"].clone())
            .collect();
        assert_eq!(statuses, [404, 405], "{lines:?}");
        assert!(lines.iter().all(|l| l["fields"].get("field").is_none()));
    }

    #[test]
    fn failures_are_logged_at_most_once_a_second_with_a_count() {
        let failures = FailureLog::new(Duration::from_secs(1));
        let bad = event("hostile/wrong-type.json");
        let t0 = Instant::now();
        let lines = logged_with(|scorer| {
            let answer = function::lambda::answer(scorer, &bad);
            // Six failures within 1.2 s: a line at 0 s, four left out, a line at 1.2 s.
            for ms in [0, 100, 400, 900, 999, 1200] {
                failures.note(t0 + Duration::from_millis(ms), &bad, &answer);
            }
        });
        let counts: Vec<_> = lines
            .iter()
            .map(|l| l["fields"]["not_logged"].clone())
            .collect();
        assert_eq!(counts, [0, 4], "{lines:?}");
        assert!(lines
            .iter()
            .all(|l| l["fields"]["field"] == "transaction.amount"));
    }
}
