//! `bootstrap`: the fraud scorer as an AWS Lambda function (custom runtime `provided.al2023`).
//!
//! `lambda_http` turns each event (API Gateway REST API v1, HTTP API v2, Function URL, ALB) into
//! one `http::Request`; [`answer`] hands it to [`function::Scorer::handle`], the same handler the
//! HTTP server uses, and [`respond`] turns the [`function::Response`] back into the event
//! source's response format. Nothing here takes part in the decision, and a bad body is the
//! handler's normal 400 answer, never a function error.
//!
//! Start-up opens the index embedded in this binary in place (no copy). With `FRAUD_PREFAULT=1`
//! (template.yaml's default, `PrefaultIndex`) the init reads and CRC-checks every page, so no
//! invocation waits for the index to come from storage: from cold storage it adds less to the
//! init than it saves over the first ten queries (docs/results/2026-11-30-lambda-cold-start.md;
//! docs/LAMBDA.md, "Cold start"). Otherwise pages are mapped as queries touch them and the init
//! reads only the footer.
//!
//! Logs go through `tracing` (`lambda_http::tracing`): JSON lines when the function's
//! `LoggingConfig` says `LogFormat: JSON` (Lambda then sets `AWS_LAMBDA_LOG_FORMAT`), level from
//! `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`. At INFO: one line at init (kernels, codec, index
//! checksums, init time), one WARN line per failed request but at most one a second, with the
//! count of those left out ([`FailureLog`]: status, method, path, the field a 400 names; never
//! the body), nothing per successful request; the runtime's own errors.
//!
//! Any panic aborts the process after logging it (and running the default hook, which prints the
//! standard message): Lambda then reports the invocation as failed and starts a fresh execution
//! environment, rather than reusing one in an unknown state.

use function::Scorer;
use index_pack::format::{self, Footer};
use lambda_http::http::header::{ALLOW, CONTENT_TYPE};
use lambda_http::{service_fn, tracing, Body, Error, Request, RequestExt, Response};
use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest path or field name written to a log line, in characters (both come from the client).
const MAX_LOGGED_CHARS: usize = 100;

/// The one call into the transport-neutral handler.
///
/// The path is the event's raw path (`rawPath` for v2 and Function URLs, `path` for v1 and ALB),
/// which carries no REST API stage prefix.
fn answer(scorer: &Scorer<'_>, req: &Request) -> function::Response {
    scorer.handle(
        &function::Request {
            method: req.method().as_str(),
            target: req.raw_http_path(),
            content_type: req.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
            body: req.body().as_ref(),
        },
        function::Readiness::Ready,
    )
}

/// Answers one request in the event source's format; logs it only if it failed.
fn respond(scorer: &Scorer<'_>, failures: &FailureLog, req: &Request) -> Response<Body> {
    let answer = answer(scorer, req);
    if answer.status >= 400 {
        failures.note(Instant::now(), req, &answer);
    }
    let mut builder = Response::builder()
        .status(answer.status)
        .header(CONTENT_TYPE, answer.content_type);
    if let Some(allow) = answer.allow {
        builder = builder.header(ALLOW, allow);
    }
    builder
        .body(Body::Text(answer.body.into_owned()))
        .expect("status and headers come from the handler's fixed set")
}

/// The log of failed requests: at most one WARN line per `every`, so that a flood of bad
/// requests cannot drive the log volume (and its bill); each line counts the failures left out
/// since the one before. A line says status, method, path and, for a 400, the field the
/// handler's error names. The request body, and the error message (which may quote it), are
/// never logged.
struct FailureLog {
    every: Duration,
    /// When the last line was written, and the failures not logged since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl FailureLog {
    fn new(every: Duration) -> FailureLog {
        FailureLog {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Notes a failed request at `now`: a line if one is due, else one more left out.
    fn note(&self, now: Instant, req: &Request, answer: &function::Response) {
        let not_logged = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.0.is_some_and(|t| now.duration_since(t) < self.every) {
                s.1 += 1;
                return;
            }
            s.0 = Some(now);
            std::mem::take(&mut s.1)
        };
        tracing::warn!(
            status = answer.status,
            method = %req.method(),
            path = clip(req.raw_http_path()),
            field = answer.field.as_deref().map(clip),
            not_logged,
            "request failed"
        );
    }
}

/// At most [`MAX_LOGGED_CHARS`] characters of `s`.
fn clip(s: &str) -> &str {
    s.char_indices()
        .nth(MAX_LOGGED_CHARS)
        .map_or(s, |(cut, _)| &s[..cut])
}

/// Logs the panic, runs the default hook (the standard message, a backtrace if asked), then
/// aborts the whole process.
fn install_abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panic, aborting");
        default(info);
        std::process::abort();
    }));
}

fn main() -> ExitCode {
    let started = Instant::now();
    tracing::init_default_subscriber();
    install_abort_on_panic();
    // A failed start or a failed runtime loop is logged like everything else (JSON on Lambda).
    let invocations = AtomicU64::new(0);
    match serve(started, &invocations) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if invocations.load(Ordering::Relaxed) > 0 && runtime_api_gone(&*e) => {
            // Lambda never closes its runtime API under a live function; an emulator that ran
            // its events does (`sam local invoke` after one event). That is the end of the run,
            // not a failure.
            tracing::info!(
                invocations = invocations.load(Ordering::Relaxed),
                error = %e,
                "the runtime API went away, exiting"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "bootstrap failed");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` says the runtime API's connection is gone (refused, reset, closed mid-request),
/// as opposed to any other failure of the runtime loop.
fn runtime_api_gone(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::*;
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | BrokenPipe
                    | UnexpectedEof
            ) {
                return true;
            }
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

/// Opens the index, logs the init line, then answers invocations until the runtime stops.
fn serve(started: Instant, invocations: &AtomicU64) -> Result<(), Error> {
    let scorer = function::embedded_scorer()?;
    let prefault = std::env::var_os("FRAUD_PREFAULT").is_some_and(|v| v == "1");
    if prefault {
        function::index::prefault()?;
    }
    let artifact = function::index::artifact()?;
    // The footer is the artifact's last bytes: reading it touches one page, not the index.
    let footer = Footer::read(artifact)?;
    let header = &scorer.searcher().index().header;
    tracing::info!(
        kernels = scorer.searcher().kernels_name(),
        codec = header.codec.native().name(),
        index_source_sha256 = %format::hex(&header.source_sha256),
        artifact_crc32 = %format_args!("{:08x}", footer.crc32),
        artifact_bytes = artifact.len(),
        prefault,
        init_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "index ready"
    );
    let failures = &FailureLog::new(Duration::from_secs(1));
    // One invocation at a time per execution environment: a single-threaded runtime suffices.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(lambda_http::run(service_fn(
        move |req: Request| async move {
            invocations.fetch_add(1, Ordering::Relaxed);
            Ok::<_, Infallible>(respond(&scorer, failures, &req))
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn event(name: &str) -> Request {
        let path = format!("{}/../events/{name}", env!("CARGO_MANIFEST_DIR"));
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        lambda_http::request::from_str(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A failure log that writes every line (the rate limit has its own test).
    fn every_failure() -> FailureLog {
        FailureLog::new(Duration::ZERO)
    }

    fn answer(name: &str) -> (u16, serde_json::Value) {
        let scorer = function::embedded_scorer().unwrap();
        let res = respond(&scorer, &every_failure(), &event(name));
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
                respond(scorer, &failures, &event(name));
            }
        })
    }

    /// The JSON lines `f` logs, given the embedded scorer.
    fn logged_with(f: impl FnOnce(&Scorer<'static>)) -> Vec<serde_json::Value> {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing::subscriber::fmt()
            .json()
            .with_writer(move || writer.clone())
            .finish();
        let scorer = function::embedded_scorer().unwrap();
        tracing::dispatcher::with_default(&tracing::Dispatch::new(subscriber), || f(&scorer));
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
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
            let answer = super::answer(scorer, &bad);
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
