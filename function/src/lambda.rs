//! The Lambda adapter shared by the Lambda binaries (`bootstrap`, the scorer over its embedded
//! index, and `fan-out`'s `front`, the scorer over shards): one event in, the handler's answer
//! out in the event source's format, the failure log, the metrics, and the end of the process.
//! Nothing here takes part in a decision. Feature `lambda-runtime`.
//!
//! `lambda_http` turns each event (API Gateway REST API v1, HTTP API v2, Function URL, ALB)
//! into one `http::Request`; [`answer`] hands it to [`Scorer::handle`] and [`respond`] turns the
//! [`crate::Response`] back into the event source's response format.
//!
//! Logs go through `tracing` (`lambda_http::tracing`): JSON lines when the function's
//! `LoggingConfig` says `LogFormat: JSON`. At INFO, one WARN line per failed request but at most
//! one a second, with the count of those left out ([`FailureLog`]: status, method, path, the
//! field a 400 names; never the body), nothing per successful request.
//!
//! Metrics ([`Metrics`]): what the scorer decided, counted per execution environment and written
//! to stdout as CloudWatch Embedded Metric Format documents every `FRAUD_METRICS_FLUSH_SECONDS`
//! (at the end of the first invocation past that interval; `0`: after every invocation; `off`:
//! never), and once more when Lambda ends the environment (a no-op internal extension makes it
//! send SIGTERM first) or the runtime API goes away.

use crate::metrics::Counters;
use crate::{Outcome, Scorer};
use index_pack::format::Identity;
use lambda_http::http::header::{ALLOW, CONTENT_TYPE};
use lambda_http::{
    lambda_runtime, service_fn, tracing, Body, Error, LambdaEvent, Request, RequestExt, Response,
};
use serde::{de::DeserializeOwned, Serialize};
use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// What a Lambda process keeps for its whole life: the invocations it answered, its metrics.
pub struct Process {
    pub invocations: AtomicU64,
    pub metrics: OnceLock<Metrics>,
}

/// The life of a Lambda process around its `serve`: logs (JSON on Lambda), panics that abort,
/// and its end. `serve` answers invocations until the runtime stops. A failed start or a
/// failed runtime loop is logged like everything else and exits 1; the runtime API closing
/// after at least one invocation (an emulator that ran its events does: `sam local invoke`
/// after one event; Lambda never does under a live function) is the end of the run, and of
/// the environment: what was counted is written, and the process exits 0.
pub fn main(name: &str, serve: impl FnOnce(&'static Process) -> Result<(), Error>) -> ExitCode {
    tracing::init_default_subscriber();
    install_abort_on_panic();
    static PROCESS: Process = Process {
        invocations: AtomicU64::new(0),
        metrics: OnceLock::new(),
    };
    let process = &PROCESS;
    match serve(process) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if process.invocations.load(Ordering::Relaxed) > 0 && runtime_api_gone(&*e) => {
            if let Some(m) = process.metrics.get() {
                m.flush();
            }
            tracing::info!(
                invocations = process.invocations.load(Ordering::Relaxed),
                error = %e,
                "the runtime API went away, exiting"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "{name} failed");
            ExitCode::FAILURE
        }
    }
}

/// One invocation at a time per execution environment: a single-threaded runtime suffices.
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// What answers a Lambda's HTTP events: the scorer (at once), or the front over shards
/// (once its shards have answered).
pub trait Handler: Sync {
    fn handle<'a>(
        &'a self,
        req: crate::Request<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::Response> + Send + 'a>>;
}

impl Handler for Scorer<'_> {
    fn handle<'a>(
        &'a self,
        req: crate::Request<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::Response> + Send + 'a>> {
        Box::pin(std::future::ready(Scorer::handle(
            self,
            &req,
            crate::Readiness::Ready,
        )))
    }
}

/// Answers HTTP events (API Gateway, Function URL, ALB) with `handler` until the runtime
/// stops, counting what it decides in `metrics`.
pub fn serve_http(
    handler: &'static dyn Handler,
    process: &'static Process,
    metrics: Metrics,
) -> Result<(), Error> {
    serve_http_on(runtime()?, handler, process, metrics)
}

/// [`serve_http`] on a runtime the caller made (and may have used during its init: the
/// connections it opened stay with it).
pub fn serve_http_on(
    runtime: tokio::runtime::Runtime,
    handler: &'static dyn Handler,
    process: &'static Process,
    metrics: Metrics,
) -> Result<(), Error> {
    let _ = process.metrics.set(metrics);
    let metrics: &'static Metrics = process.metrics.get().expect("set above");
    let failures: &'static FailureLog =
        Box::leak(Box::new(FailureLog::new(Duration::from_secs(1))));
    runtime.block_on(async move {
        metrics.flush_on_shutdown().await;
        lambda_http::run(service_fn(move |req: Request| async move {
            process.invocations.fetch_add(1, Ordering::Relaxed);
            let answer = handler.handle(request(&req)).await;
            Ok::<_, Infallible>(reply(answer, failures, metrics, &req))
        }))
        .await
    })
}

/// Answers events of type `E` with `answer` until the runtime stops (a shard's queries).
pub fn serve_events<E, A>(
    process: &'static Process,
    answer: impl Fn(E) -> A + Copy + Send + 'static,
) -> Result<(), Error>
where
    E: DeserializeOwned + Send + 'static,
    A: Serialize + Send + 'static,
{
    runtime()?.block_on(lambda_runtime::run(service_fn(
        move |event: LambdaEvent<E>| async move {
            process.invocations.fetch_add(1, Ordering::Relaxed);
            Ok::<_, Infallible>(answer(event.payload))
        },
    )))
}

/// Longest path or field name written to a log line, in characters (both come from the client).
const MAX_LOGGED_CHARS: usize = 100;

/// The one call into the transport-neutral handler.
///
/// The path is the event's raw path (`rawPath` for v2 and Function URLs, `path` for v1 and ALB),
/// which carries no REST API stage prefix.
pub fn answer(scorer: &Scorer<'_>, req: &Request) -> crate::Response {
    scorer.handle(&request(req), crate::Readiness::Ready)
}

/// The handler's view of an event's request.
pub fn request(req: &Request) -> crate::Request<'_> {
    crate::Request {
        method: req.method().as_str(),
        target: req.raw_http_path(),
        content_type: req.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
        body: req.body().as_ref(),
    }
}

/// Answers one request in the event source's format; logs it only if it failed, and counts it.
pub fn respond(
    scorer: &Scorer<'_>,
    failures: &FailureLog,
    metrics: &Metrics,
    req: &Request,
) -> Response<Body> {
    reply(answer(scorer, req), failures, metrics, req)
}

/// `answer` to `req` in the event source's format; logged only if it failed, and counted.
pub fn reply(
    answer: crate::Response,
    failures: &FailureLog,
    metrics: &Metrics,
    req: &Request,
) -> Response<Body> {
    let now = Instant::now();
    if answer.status >= 400 {
        failures.note(now, req, &answer);
    }
    metrics.record(answer.outcome, now);
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
pub struct FailureLog {
    every: Duration,
    /// When the last line was written, and the failures not logged since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl FailureLog {
    pub fn new(every: Duration) -> FailureLog {
        FailureLog {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Notes a failed request at `now`: a line if one is due, else one more left out.
    pub fn note(&self, now: Instant, req: &Request, answer: &crate::Response) {
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

/// What the scorer decided, counted in this execution environment and written out as
/// Embedded Metric Format lines ([`Counters::emf`]) on stdout, which Lambda sends to CloudWatch
/// Logs and CloudWatch turns into metrics (namespace `FraudScore`).
///
/// One line per invocation would cost a ~1 KB write and its log ingestion per request (about
/// $0.50 per million requests at $0.50 per GB, twice Lambda's own request fee): counted and
/// written once per interval, a busy environment writes a few lines a minute whatever its
/// traffic (docs/LAMBDA.md, "Operate", has the measured costs of both).
pub struct Metrics {
    /// `None`: metrics off; zero: a line set after every invocation.
    every: Option<Duration>,
    function: String,
    /// The executing version (`AWS_LAMBDA_FUNCTION_VERSION`): a canary's own counts.
    version: String,
    index: Vec<Identity>,
    /// The counts not written yet, and when they were last written.
    state: Mutex<(Counters, Instant)>,
}

impl Metrics {
    /// From `FRAUD_METRICS_FLUSH_SECONDS` (default 60; `off`).
    pub fn from_env(index: Vec<Identity>) -> Result<Metrics, String> {
        let every = match std::env::var("FRAUD_METRICS_FLUSH_SECONDS").as_deref() {
            Err(_) | Ok("") => Some(Duration::from_secs(60)),
            Ok("off") => None,
            Ok(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
                format!("FRAUD_METRICS_FLUSH_SECONDS must be a number of seconds or off, not {s:?}")
            })?)),
        };
        let env = |k| std::env::var(k).unwrap_or_default();
        let state = Mutex::new((Counters::default(), Instant::now()));
        Ok(Metrics {
            every,
            function: env("AWS_LAMBDA_FUNCTION_NAME"),
            version: env("AWS_LAMBDA_FUNCTION_VERSION"),
            index,
            state,
        })
    }

    /// Metrics off.
    pub fn off() -> Metrics {
        let state = Mutex::new((Counters::default(), Instant::now()));
        Metrics {
            every: None,
            function: String::new(),
            version: String::new(),
            index: Vec::new(),
            state,
        }
    }

    /// Counts one answer; writes the counts when the interval is over.
    pub fn record(&self, outcome: Outcome, now: Instant) {
        let Some(every) = self.every else { return };
        let due = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.0.record(outcome);
            if now.duration_since(s.1) < every {
                return;
            }
            s.1 = now;
            std::mem::take(&mut s.0)
        };
        self.write(&due);
    }

    /// Writes whatever is counted (at the end of the environment).
    pub fn flush(&self) {
        let counts = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut s.0)
        };
        self.write(&counts);
    }

    fn write(&self, counts: &Counters) {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let emitter = crate::metrics::Emitter {
            function: &self.function,
            version: &self.version,
        };
        let lines = counts.emf(&emitter, &self.index, ms);
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    /// Registers a no-op internal extension, so that Lambda sends SIGTERM before it ends the
    /// execution environment, and flushes on that signal. Where the runtime has no Extensions
    /// API, says so and goes on: only the last interval's counts are then lost.
    pub async fn flush_on_shutdown(&'static self) {
        if self.every.is_none() {
            return;
        }
        let registered = lambda_extension::Extension::new()
            .with_events(&[])
            .with_extension_name("fraud-metrics-flush")
            .register()
            .await;
        let extension = match registered {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "no extension registered: the metrics of the last interval are lost at shutdown");
                return;
            }
        };
        let Ok(mut sigterm) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = sigterm.recv() => {
                    self.flush();
                    std::process::exit(0);
                }
                _ = extension.run() => {}
            }
        });
    }
}

/// Logs the panic, runs the default hook (the standard message, a backtrace if asked), then
/// aborts the whole process.
pub fn install_abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panic, aborting");
        default(info);
        std::process::abort();
    }));
}

/// Whether `e` says the runtime API's connection is gone (refused, reset, closed mid-request),
/// as opposed to any other failure of the runtime loop.
pub fn runtime_api_gone(e: &(dyn std::error::Error + 'static)) -> bool {
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
