//! Stage 5: one transport-neutral handler, `(request, readiness) -> (status, content type, body)`.
//!
//! The Lambda adapter and the HTTP server only move bytes in and out of [`Scorer::handle`]; they
//! add nothing to the decision. Every answer either transport can give is built here, so the two
//! cannot drift apart: the routes below, and the transport's own refusals ([`Response`]'s
//! constructors, used by `local-runner serve` when a request cannot be read at all).
//!
//! | method and path      | answer |
//! |----------------------|--------|
//! | `POST /fraud-score`  | 200 `{"approved":…,"fraud_score":…}`, or 400 `{"error":"<field>: <what is wrong>"}` |
//! | `POST /fraud-score` with a Content-Type other than `application/json` | 415 `{"error":…}` |
//! | `GET`/`HEAD /ready`  | 200 `{"ready":true,"index":{…}}`, or 503 `{"ready":false,"index":{…}}` while warming up (the index's identity, `index_pack::format::Identity`, when the scorer knows it; with deltas also `"deltas":[…]`) |
//! | other method, known path | 405 `{"error":…}` with the allowed methods |
//! | anything else        | 404 `{"error":"not found"}` |
//!
//! A query string is ignored when routing. Content-Type: none, or `application/json` in any case
//! with or without parameters (`application/json; charset=utf-8`), is accepted; anything else
//! gets 415, because the body would not be what the client meant.
//!
//! Every [`Response`] says what it was ([`Outcome`]): a decision, a readiness answer, or a
//! refusal and its [`Reason`]. The transports count outcomes for their metrics
//! ([`crate::metrics`]) without reading bodies back.
//!
//! The search behind the scorer is in this process ([`Searcher`]) or, for a front over shards,
//! behind a [`Remote`]: then a shard that fails or times out is a 502 or 504 naming the shard,
//! never a partial answer.

use crate::decision::Decision;
use crate::payload::{self, PayloadError};
use crate::search::Searcher;
use crate::vector;
use index_pack::format::{Identity, DIMS};
use std::borrow::Cow;

/// The JSON content type of every answer.
pub const JSON: &str = "application/json";

/// Longest error message returned, in characters (longer ones are cut and end in `...`).
pub const MAX_ERROR_CHARS: usize = 200;

/// One request, as any transport sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path, with or without a query string (ignored).
    pub target: &'a str,
    /// The Content-Type header's value, if the request has one.
    pub content_type: Option<&'a [u8]>,
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// A request without a Content-Type header.
    pub fn new(method: &'a str, target: &'a str, body: &'a [u8]) -> Request<'a> {
        Request {
            method,
            target,
            content_type: None,
            body,
        }
    }
}

/// Whether the instance may take traffic yet (answered on `/ready`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Still warming up: `/ready` says 503 so a balancer keeps traffic away; requests that
    /// arrive anyway are answered normally.
    WarmingUp,
}

/// A response, ready for any transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Methods allowed on the path, for the `Allow` header of a 405.
    pub allow: Option<&'static str>,
    /// For a 400 about the body: the field its error names (`.` for the whole body), so that a
    /// transport can log it without reading the body back.
    pub field: Option<Cow<'static, str>>,
    pub body: Cow<'static, str>,
    /// What the answer is, for the metrics.
    pub outcome: Outcome,
}

/// What an answer was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A scored transaction.
    Decided(Decision),
    /// `/ready` (whether ready or warming up).
    Ready,
    /// A transport's own metrics route (`local-runner serve`'s `/metrics`): not counted.
    Metrics,
    /// Refused, and why.
    Rejected(Reason),
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// 400: the transaction cannot be read (a field's value or the JSON).
    BadBody,
    /// 415.
    UnsupportedMediaType,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 400: the request itself cannot be read (head, framing).
    BadRequest,
    /// 408.
    Timeout,
    /// 413.
    BodyTooLarge,
    /// 431.
    HeadTooLarge,
    /// 501.
    NotImplemented,
    /// 505.
    VersionNotSupported,
    /// 503: the connection cap or the memory budget.
    Busy,
    /// 502 or 504: a shard behind a front failed or timed out.
    ShardUnavailable,
}

impl Reason {
    /// Every reason, in the order of [`Reason::index`].
    pub const ALL: [Reason; 12] = [
        Reason::BadBody,
        Reason::UnsupportedMediaType,
        Reason::NotFound,
        Reason::MethodNotAllowed,
        Reason::BadRequest,
        Reason::Timeout,
        Reason::BodyTooLarge,
        Reason::HeadTooLarge,
        Reason::NotImplemented,
        Reason::VersionNotSupported,
        Reason::Busy,
        Reason::ShardUnavailable,
    ];

    /// Its position in [`Reason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name in metrics (snake case).
    pub fn name(self) -> &'static str {
        match self {
            Reason::BadBody => "bad_body",
            Reason::UnsupportedMediaType => "unsupported_media_type",
            Reason::NotFound => "not_found",
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::BadRequest => "bad_request",
            Reason::Timeout => "timeout",
            Reason::BodyTooLarge => "body_too_large",
            Reason::HeadTooLarge => "head_too_large",
            Reason::NotImplemented => "not_implemented",
            Reason::VersionNotSupported => "version_not_supported",
            Reason::Busy => "busy",
            Reason::ShardUnavailable => "shard_unavailable",
        }
    }
}

impl Response {
    fn json(status: u16, body: Cow<'static, str>, outcome: Outcome) -> Response {
        Response {
            status,
            content_type: JSON,
            allow: None,
            field: None,
            body,
            outcome,
        }
    }

    fn fixed(status: u16, body: &'static str, reason: Reason) -> Response {
        Response::json(status, Cow::Borrowed(body), Outcome::Rejected(reason))
    }

    fn error(status: u16, message: &str, reason: Reason) -> Response {
        // serde's messages quote the offending value, which the client chose (up to the body
        // limit): keep the field and the reason, cut the echo.
        let message = match message.char_indices().nth(MAX_ERROR_CHARS) {
            Some((cut, _)) => Cow::Owned(format!("{}...", &message[..cut])),
            None => Cow::Borrowed(message),
        };
        Response::json(
            status,
            Cow::Owned(serde_json::json!({ "error": message }).to_string()),
            Outcome::Rejected(reason),
        )
    }

    /// 400: the request itself cannot be read (malformed head, bad framing). `what` says what
    /// is wrong, without echoing the client's bytes.
    pub fn bad_request(what: &str) -> Response {
        Response::error(400, &format!("bad request: {what}"), Reason::BadRequest)
    }

    /// 408: the head did not arrive in time.
    pub fn head_timeout() -> Response {
        Response::fixed(
            408,
            r#"{"error":"request head not received in time"}"#,
            Reason::Timeout,
        )
    }

    /// 408: the body did not arrive in time after its head.
    pub fn body_timeout() -> Response {
        Response::fixed(
            408,
            r#"{"error":"body not received in time"}"#,
            Reason::Timeout,
        )
    }

    /// 413: the body is longer than the server accepts.
    pub fn body_too_large() -> Response {
        Response::fixed(413, r#"{"error":"body too large"}"#, Reason::BodyTooLarge)
    }

    /// 431: the request head (line and headers) is too large or has too many headers.
    pub fn head_too_large() -> Response {
        Response::fixed(
            431,
            r#"{"error":"request head too large"}"#,
            Reason::HeadTooLarge,
        )
    }

    /// 501: the request is well-formed but uses what the server does not implement (a transfer
    /// coding other than chunked). `what` says what, without echoing the client's bytes.
    pub fn not_implemented(what: &str) -> Response {
        Response::error(
            501,
            &format!("not implemented: {what}"),
            Reason::NotImplemented,
        )
    }

    /// 505: the request's major HTTP version is not served (HTTP/1.0 and 1.1 are).
    pub fn version_not_supported() -> Response {
        Response::fixed(
            505,
            r#"{"error":"HTTP version not supported: HTTP/1.0 and 1.1 are served"}"#,
            Reason::VersionNotSupported,
        )
    }

    /// 503: the server is at its connection limit.
    pub fn too_many_connections() -> Response {
        Response::fixed(503, r#"{"error":"too many connections"}"#, Reason::Busy)
    }

    /// 503: the server holds as much for its clients as its memory budget allows.
    pub fn server_busy() -> Response {
        Response::fixed(503, r#"{"error":"server busy"}"#, Reason::Busy)
    }

    /// The same answer to every request, without reading it: the body of a backend that does
    /// no work (`local-runner serve --no-work`, a measurement of the stack's lower bound).
    pub fn constant() -> Response {
        Response::decided(0)
    }

    /// 200 for a transport's metrics route: the caller sets the body and its content type.
    pub fn metrics() -> Response {
        Response::json(200, Cow::Borrowed(""), Outcome::Metrics)
    }

    /// 502 (a shard failed) or 504 (it did not answer in time), naming the shard and what went
    /// wrong in the front's own words; what the shard itself said is logged, never echoed.
    pub fn shard_unavailable(u: &Unavailable) -> Response {
        let status = if u.timed_out { 504 } else { 502 };
        Response::error(status, &u.summary(), Reason::ShardUnavailable)
    }

    /// 503 from a front whose shards are not proven yet to tile one set.
    pub fn shards_not_ready() -> Response {
        Response::fixed(
            503,
            r#"{"error":"the shards are not proven to tile one reference set yet"}"#,
            Reason::ShardUnavailable,
        )
    }

    /// 404, for a route a transport does not serve.
    pub fn not_found() -> Response {
        Response::error(404, "not found", Reason::NotFound)
    }

    /// The decision of `frauds` among the 5 nearest.
    pub fn decided(frauds: usize) -> Response {
        let d = Decision::new(frauds);
        Response::json(200, Cow::Borrowed(d.body()), Outcome::Decided(d))
    }

    /// The answer to a search that ran elsewhere: its decision, or why there is none.
    pub fn searched(frauds: Result<usize, Unavailable>) -> Response {
        match frauds {
            Ok(f) => Response::decided(f),
            Err(u) => Response::shard_unavailable(&u),
        }
    }
}

/// A search that runs elsewhere (the shards behind a front): the fraud count among the 5 nearest
/// references of the whole set, or why it cannot be had.
pub trait Remote: Sync {
    fn frauds(&self, q: &[i16; DIMS]) -> Result<usize, Unavailable>;
}

/// Why a remote search has no answer: which shard, what went wrong, whether it timed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    pub timed_out: bool,
    /// The shard, e.g. `shard 2 (fraud-shard-2)`.
    pub shard: String,
    /// What went wrong, in the front's words, e.g. `did not answer within 1000 ms`.
    pub what: String,
    /// What the shard or the client library said, for the log only: it may quote anything.
    pub detail: String,
}

impl Unavailable {
    /// What the caller is told: the shard and what went wrong.
    pub fn summary(&self) -> String {
        format!("{} {}", self.shard, self.what)
    }
}

/// True when a Content-Type value names JSON: `application/json`, any case, optionally followed
/// by parameters (`; charset=utf-8`).
pub fn is_json_content_type(value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    media.trim_ascii().eq_ignore_ascii_case(JSON.as_bytes())
}

/// What routing a request gave: its answer, or the query vector of a transaction to search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    Answer(Response),
    Search([i16; DIMS]),
}

/// Routes requests and reads transactions into query vectors: everything but the search. The
/// front over shards routes with it and searches elsewhere, asynchronously; [`Scorer`] adds a
/// search to it.
#[derive(Clone, Copy)]
pub struct Router {
    /// `/ready`'s bodies, ready and warming up.
    ready: [&'static str; 2],
}

impl Default for Router {
    fn default() -> Router {
        Router {
            ready: [r#"{"ready":true}"#, r#"{"ready":false}"#],
        }
    }
}

impl Router {
    /// The same router, naming the indexes it serves in `/ready` (the base or the shards first,
    /// then the deltas). The bodies are made once, for the life of the process.
    pub fn with_identity(self, index: &[Identity], deltas: &[Identity]) -> Router {
        #[derive(serde::Serialize)]
        struct ReadyBody<'i> {
            ready: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            index: Option<&'i Identity>,
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            shards: &'i [Identity],
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            deltas: &'i [Identity],
        }
        let body = |ready: bool| -> &'static str {
            let (index, shards) = match index {
                [one] => (Some(one), &[][..]),
                many => (None, many),
            };
            let body = ReadyBody {
                ready,
                index,
                shards,
                deltas,
            };
            let json = serde_json::to_string(&body).expect("a ready body serializes");
            Box::leak(json.into_boxed_str())
        };
        Router {
            ready: [body(true), body(false)],
        }
    }

    /// Routes one request: the answer of every route but a transaction to score, whose query
    /// vector comes back to be searched.
    pub fn route(&self, req: &Request<'_>, readiness: Readiness) -> Routed {
        let path = req.target.split_once('?').map_or(req.target, |(p, _)| p);
        let answer = match (req.method, path) {
            ("POST", "/fraud-score") => {
                if req.content_type.is_some_and(|ct| !is_json_content_type(ct)) {
                    Response::error(
                        415,
                        "unsupported content type: send application/json",
                        Reason::UnsupportedMediaType,
                    )
                } else {
                    match query(req.body) {
                        Ok(q) => return Routed::Search(q),
                        Err(e) => Response {
                            field: Some(Cow::Owned(e.field().to_owned())),
                            ..Response::error(400, &e.to_string(), Reason::BadBody)
                        },
                    }
                }
            }
            ("GET" | "HEAD", "/ready") => {
                let (status, body) = match readiness {
                    Readiness::Ready => (200, self.ready[0]),
                    Readiness::WarmingUp => (503, self.ready[1]),
                };
                Response::json(status, Cow::Borrowed(body), Outcome::Ready)
            }
            (_, "/fraud-score") => Response {
                allow: Some("POST"),
                ..Response::error(
                    405,
                    "method not allowed: use POST",
                    Reason::MethodNotAllowed,
                )
            },
            (_, "/ready") => Response {
                allow: Some("GET, HEAD"),
                ..Response::error(405, "method not allowed: use GET", Reason::MethodNotAllowed)
            },
            _ => Response::not_found(),
        };
        Routed::Answer(answer)
    }
}

/// A transaction's query vector.
fn query(body: &[u8]) -> Result<[i16; DIMS], PayloadError> {
    vector::vectorize(&payload::parse(body)?)
}

/// Why a transaction has no decision.
#[derive(Debug)]
pub enum ScoreError {
    /// The body is not a transaction.
    Payload(PayloadError),
    /// The remote search has no answer.
    Unavailable(Unavailable),
}

impl From<PayloadError> for ScoreError {
    fn from(e: PayloadError) -> ScoreError {
        ScoreError::Payload(e)
    }
}

/// The fraud scorer: route, parse, vectorize, search, decide.
#[derive(Clone, Copy)]
pub struct Scorer<'a> {
    router: Router,
    search: Search<'a>,
}

/// Where the 5 nearest references are found.
#[derive(Clone, Copy)]
enum Search<'a> {
    Local(Searcher<'a>),
    Remote(&'a dyn Remote),
}

impl<'a> Scorer<'a> {
    pub fn new(searcher: Searcher<'a>) -> Scorer<'a> {
        Scorer {
            router: Router::default(),
            search: Search::Local(searcher),
        }
    }

    /// A scorer whose search runs elsewhere, synchronously (shards searched in this process).
    pub fn remote(remote: &'a dyn Remote) -> Scorer<'a> {
        Scorer {
            router: Router::default(),
            search: Search::Remote(remote),
        }
    }

    /// The same scorer, naming the index it serves and its deltas in `/ready`.
    pub fn with_identity(self, index: &Identity, deltas: &[Identity]) -> Scorer<'a> {
        Scorer {
            router: self
                .router
                .with_identity(std::slice::from_ref(index), deltas),
            ..self
        }
    }

    /// The in-process searcher (none for a remote search).
    pub fn searcher(&self) -> Option<&Searcher<'a>> {
        match &self.search {
            Search::Local(s) => Some(s),
            Search::Remote(_) => None,
        }
    }

    /// Frauds among the 5 nearest references of `q`.
    pub fn frauds(&self, q: &[i16; DIMS]) -> Result<usize, Unavailable> {
        match &self.search {
            Search::Local(s) => Ok(s.frauds(q)),
            Search::Remote(r) => r.frauds(q),
        }
    }

    /// Scores one request body.
    pub fn score(&self, body: &[u8]) -> Result<Decision, ScoreError> {
        let frauds = self
            .frauds(&query(body)?)
            .map_err(ScoreError::Unavailable)?;
        Ok(Decision::new(frauds))
    }

    /// Answers one request.
    pub fn handle(&self, req: &Request<'_>, readiness: Readiness) -> Response {
        match self.router.route(req, readiness) {
            Routed::Answer(r) => r,
            Routed::Search(q) => Response::searched(self.frauds(&q)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tests::{random_refs, small_index};
    use crate::search::SearchParams;
    use index_pack::format::{self, CodecKind};

    const BODY: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},
        "customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},
        "merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},
        "terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;

    fn with_scorer(f: impl FnOnce(Scorer)) {
        let refs = random_refs(400, 3, false);
        let bytes = small_index(&refs, 8, CodecKind::I16, 16);
        f(Scorer::new(Searcher::new(
            format::open(&bytes).unwrap(),
            SearchParams::default(),
        )));
    }

    fn call(s: &Scorer, method: &str, target: &str, body: &[u8]) -> Response {
        s.handle(&Request::new(method, target, body), Readiness::Ready)
    }

    fn error_of(r: &Response) -> String {
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        v["error"].as_str().unwrap().to_string()
    }

    #[test]
    fn routes() {
        with_scorer(|s| {
            let ok = call(&s, "POST", "/fraud-score", BODY.as_bytes());
            assert_eq!((ok.status, ok.content_type), (200, JSON));
            assert!(crate::decision::BODIES.contains(&ok.body.as_ref()));
            assert_eq!(call(&s, "POST", "/fraud-score?x=1", BODY.as_bytes()), ok);
            assert_eq!(call(&s, "GET", "/ready", b"").status, 200);
            assert_eq!(call(&s, "HEAD", "/ready", b"").status, 200);
            let r = call(&s, "GET", "/fraud-score", b"");
            assert_eq!((r.status, r.allow), (405, Some("POST")));
            assert_eq!(call(&s, "DELETE", "/ready", b"").status, 405);
            assert_eq!(call(&s, "GET", "/nope", b"").status, 404);
        });
    }

    #[test]
    fn readiness_is_answered_on_ready_only() {
        with_scorer(|s| {
            let warming = |m, t, b: &[u8]| s.handle(&Request::new(m, t, b), Readiness::WarmingUp);
            let r = warming("GET", "/ready", b"");
            assert_eq!((r.status, r.body.as_ref()), (503, r#"{"ready":false}"#));
            assert_eq!(warming("HEAD", "/ready", b"").status, 503);
            // Requests that reach a warming instance are still answered.
            let ok = warming("POST", "/fraud-score", BODY.as_bytes());
            assert_eq!(ok, call(&s, "POST", "/fraud-score", BODY.as_bytes()));
            assert_eq!(warming("POST", "/ready", b"").status, 405);
        });
    }

    #[test]
    fn content_type_policy() {
        with_scorer(|s| {
            let with = |ct: &str| {
                s.handle(
                    &Request {
                        content_type: Some(ct.as_bytes()),
                        ..Request::new("POST", "/fraud-score", BODY.as_bytes())
                    },
                    Readiness::Ready,
                )
            };
            let ok = call(&s, "POST", "/fraud-score", BODY.as_bytes());
            assert_eq!(ok.status, 200);
            for ct in [
                "application/json",
                "Application/JSON",
                "application/json; charset=utf-8",
                "application/json;charset=UTF-8",
                " application/json ",
            ] {
                assert_eq!(with(ct), ok, "{ct:?}");
            }
            for ct in [
                "text/plain",
                "application/x-www-form-urlencoded",
                "application/jsonp",
                "application/json-patch+json",
                "",
                "multipart/form-data; boundary=x",
            ] {
                let r = with(ct);
                assert_eq!(r.status, 415, "{ct:?}");
                assert!(error_of(&r).contains("application/json"), "{ct:?}");
            }
            // Only the scored route reads a body: elsewhere the type does not matter.
            let r = s.handle(
                &Request {
                    content_type: Some(b"text/plain"),
                    ..Request::new("GET", "/ready", b"")
                },
                Readiness::Ready,
            );
            assert_eq!(r.status, 200);
        });
    }

    #[test]
    fn transport_answers_are_json_errors() {
        for (r, status) in [
            (Response::bad_request("malformed request head"), 400),
            (Response::head_timeout(), 408),
            (Response::body_timeout(), 408),
            (Response::body_too_large(), 413),
            (Response::head_too_large(), 431),
            (Response::too_many_connections(), 503),
            (Response::server_busy(), 503),
        ] {
            assert_eq!((r.status, r.content_type, r.allow), (status, JSON, None));
            assert!(!error_of(&r).is_empty(), "{r:?}");
        }
        assert!(error_of(&Response::bad_request("x")).starts_with("bad request: x"));
        assert!(crate::decision::BODIES.contains(&Response::constant().body.as_ref()));
    }

    #[test]
    fn bad_bodies_name_the_field() {
        with_scorer(|s| {
            let cases: Vec<(String, &str)> = vec![
                (String::new(), "."),
                ("{".into(), "."),
                (BODY.replace(r#""amount":41.12"#, r#""amount":"41.12""#), "transaction.amount"),
                (BODY.replace(r#""mcc":"5411","#, ""), "merchant"),
                (BODY.replace(r#""is_online":false"#, r#""is_online":null"#), "terminal.is_online"),
                (BODY.replace("2026-03-11T18:45:53Z", "yesterday"), "transaction.requested_at"),
                (BODY.replace(r#""last_transaction":null"#, r#""last_transaction":{"timestamp":"2026-13-01T00:00:00Z","km_from_current":1}"#), "last_transaction.timestamp"),
                (BODY.replace("41.12", "1e999"), "transaction.amount"),
                (format!("{BODY} trailing"), "."),
            ];
            for (body, field) in cases {
                let r = call(&s, "POST", "/fraud-score", body.as_bytes());
                assert_eq!(r.status, 400, "{body}");
                let e = error_of(&r);
                assert!(e.starts_with(field), "{field}: {e}");
                // The same field, carried for the transports' logs.
                assert_eq!(r.field.as_deref(), Some(field), "{e}");
            }
            // Answers that are not about the body's fields carry none.
            assert_eq!(call(&s, "GET", "/nope", b"").field, None);
            assert_eq!(Response::bad_request("malformed request head").field, None);
            // Missing field inside an object names the object and the field.
            let r = call(
                &s,
                "POST",
                "/fraud-score",
                BODY.replace(r#""mcc":"5411","#, "").as_bytes(),
            );
            assert!(error_of(&r).contains("missing field `mcc`"));
            // Non-UTF-8 bytes are a 400, not a panic.
            assert_eq!(
                call(&s, "POST", "/fraud-score", b"{\"id\":\"\xff\"}").status,
                400
            );
        });
    }

    #[test]
    fn long_errors_are_cut() {
        with_scorer(|s| {
            let body = BODY.replace("41.12", &format!("\"{}\"", "9".repeat(50_000)));
            let e = error_of(&call(&s, "POST", "/fraud-score", body.as_bytes()));
            assert!(
                e.starts_with("transaction.amount: invalid type: string"),
                "{e}"
            );
            assert!(e.ends_with("..."), "{e}");
            assert_eq!(e.chars().count(), MAX_ERROR_CHARS + 3);
            // Multi-byte characters are cut at a character boundary.
            let body = BODY.replace("2026-03-11T18:45:53Z", &"\u{e9}".repeat(300));
            let e = error_of(&call(&s, "POST", "/fraud-score", body.as_bytes()));
            assert!(e.starts_with("transaction.requested_at: "), "{e}");
            assert_eq!(e.chars().count(), MAX_ERROR_CHARS + 3);
            // Short ones are left alone.
            let e = error_of(&call(&s, "POST", "/fraud-score", b"{"));
            assert!(!e.ends_with("..."), "{e}");
        });
    }

    #[test]
    fn odd_but_valid_inputs_are_answered() {
        with_scorer(|s| {
            for body in [
                BODY.replace(r#""avg_amount":82.24"#, r#""avg_amount":0"#),
                BODY.replace(r#""mcc":"5411""#, r#""mcc":"0000""#),
                BODY.replace(r#""id":"tx-1","#, "").replace('{', r#"{"extra":[1,2],"#),
                BODY.replace(r#""last_transaction":null"#, r#""last_transaction":{"timestamp":"2030-01-01T00:00:00Z","km_from_current":-5}"#),
                BODY.replace(r#","last_transaction":null"#, ""),
            ] {
                assert_eq!(call(&s, "POST", "/fraud-score", body.as_bytes()).status, 200, "{body}");
            }
        });
    }
}
