//! Stage 5: one transport-neutral handler, `(method, path, body) -> (status, content type, body)`.
//!
//! The Lambda adapter and the HTTP server only move bytes in and out of [`Scorer::handle`]; they
//! add nothing to the decision. Routes:
//!
//! | method and path      | answer |
//! |----------------------|--------|
//! | `POST /fraud-score`  | 200 `{"approved":…,"fraud_score":…}`, or 400 `{"error":"<field>: <what is wrong>"}` |
//! | `GET`/`HEAD /ready`  | 200 `{"ready":true}` |
//! | other method, known path | 405 `{"error":…}` with the allowed methods |
//! | anything else        | 404 `{"error":"not found"}` |
//!
//! A query string is ignored when routing.

use crate::decision::Decision;
use crate::payload::{self, PayloadError};
use crate::search::Searcher;
use crate::vector;
use std::borrow::Cow;

/// The JSON content type of every answer.
pub const JSON: &str = "application/json";

/// A response, ready for any transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Methods allowed on the path, for the `Allow` header of a 405.
    pub allow: Option<&'static str>,
    pub body: Cow<'static, str>,
}

impl Response {
    fn json(status: u16, body: Cow<'static, str>) -> Response {
        Response {
            status,
            content_type: JSON,
            allow: None,
            body,
        }
    }

    fn error(status: u16, message: &str) -> Response {
        Response::json(
            status,
            Cow::Owned(serde_json::json!({ "error": message }).to_string()),
        )
    }
}

/// The fraud scorer: parse, vectorize, search, decide.
#[derive(Clone, Copy)]
pub struct Scorer<'a> {
    searcher: Searcher<'a>,
}

impl<'a> Scorer<'a> {
    pub fn new(searcher: Searcher<'a>) -> Scorer<'a> {
        Scorer { searcher }
    }

    pub fn searcher(&self) -> &Searcher<'a> {
        &self.searcher
    }

    /// Scores one request body.
    pub fn score(&self, body: &[u8]) -> Result<Decision, PayloadError> {
        let payload = payload::parse(body)?;
        let query = vector::vectorize(&payload)?;
        Ok(Decision::new(self.searcher.frauds(&query)))
    }

    /// Answers one HTTP request.
    pub fn handle(&self, method: &str, path: &str, body: &[u8]) -> Response {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        match (method, path) {
            ("POST", "/fraud-score") => match self.score(body) {
                Ok(d) => Response::json(200, Cow::Borrowed(d.body())),
                Err(e) => Response::error(400, &e.to_string()),
            },
            ("GET" | "HEAD", "/ready") => Response::json(200, Cow::Borrowed(r#"{"ready":true}"#)),
            (_, "/fraud-score") => Response {
                allow: Some("POST"),
                ..Response::error(405, "method not allowed: use POST")
            },
            (_, "/ready") => Response {
                allow: Some("GET, HEAD"),
                ..Response::error(405, "method not allowed: use GET")
            },
            _ => Response::error(404, "not found"),
        }
    }
}
