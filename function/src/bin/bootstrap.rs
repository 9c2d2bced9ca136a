//! `bootstrap`: the fraud scorer as an AWS Lambda function (custom runtime `provided.al2023`).
//!
//! `lambda_http` turns each event (API Gateway REST API v1, HTTP API v2, Function URL, ALB) into
//! one `http::Request`; [`respond`] hands its method, raw path and body to
//! [`function::Scorer::handle`], the same handler the HTTP server uses, and turns the
//! [`function::Response`] back into the event source's response format. Nothing here takes part in
//! the decision, and a bad body is the handler's normal 400 answer, never a function error.
//!
//! Start-up opens the index embedded in this binary in place (no copy, pages mapped lazily), so the
//! Lambda init phase stays in the milliseconds. `FRAUD_PREFAULT=1` reads (and CRC-checks) every
//! page during init instead, moving the page faults out of the first invocations.
//!
//! Any panic aborts the process after logging it: Lambda then reports the invocation as failed and
//! starts a fresh execution environment, rather than reusing one in an unknown state.

use function::Scorer;
use lambda_http::http::header::{ALLOW, CONTENT_TYPE};
use lambda_http::{service_fn, Body, Error, Request, RequestExt, Response};
use std::convert::Infallible;
use std::time::Instant;

/// Answers one request through the transport-neutral handler.
///
/// The path is the event's raw path (`rawPath` for v2 and Function URLs, `path` for v1 and ALB),
/// which carries no REST API stage prefix.
fn respond(scorer: &Scorer<'_>, req: &Request) -> Response<Body> {
    let answer = scorer.handle(
        req.method().as_str(),
        req.raw_http_path(),
        req.body().as_ref(),
    );
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

/// Logs the panic, then aborts the whole process.
fn install_abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        eprintln!("bootstrap: panic, aborting");
        std::process::abort();
    }));
}

fn main() -> Result<(), Error> {
    let started = Instant::now();
    install_abort_on_panic();
    let scorer = function::embedded_scorer()?;
    if std::env::var_os("FRAUD_PREFAULT").is_some_and(|v| v == "1") {
        function::index::prefault()?;
    }
    eprintln!(
        "bootstrap: index ready in {} us ({} bytes embedded)",
        started.elapsed().as_micros(),
        function::index::artifact().len()
    );
    // One invocation at a time per execution environment: a single-threaded runtime suffices.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(lambda_http::run(service_fn(
        move |req: Request| async move { Ok::<_, Infallible>(respond(&scorer, &req)) },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str) -> Request {
        let path = format!("{}/../events/{name}", env!("CARGO_MANIFEST_DIR"));
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        lambda_http::request::from_str(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn answer(name: &str) -> (u16, serde_json::Value) {
        let scorer = function::embedded_scorer().unwrap();
        let res = respond(&scorer, &event(name));
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
        let res = respond(&scorer, &event("apigw-v2/wrong-method.json"));
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers()[ALLOW], "POST");
    }
}
