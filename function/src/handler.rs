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

/// Longest error message returned, in characters (longer ones are cut and end in `...`).
pub const MAX_ERROR_CHARS: usize = 200;

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
        // serde's messages quote the offending value, which the client chose (up to the body
        // limit): keep the field and the reason, cut the echo.
        let message = match message.char_indices().nth(MAX_ERROR_CHARS) {
            Some((cut, _)) => Cow::Owned(format!("{}...", &message[..cut])),
            None => Cow::Borrowed(message),
        };
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

    fn error_of(r: &Response) -> String {
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        v["error"].as_str().unwrap().to_string()
    }

    #[test]
    fn routes() {
        with_scorer(|s| {
            let ok = s.handle("POST", "/fraud-score", BODY.as_bytes());
            assert_eq!((ok.status, ok.content_type), (200, JSON));
            assert!(crate::decision::BODIES.contains(&ok.body.as_ref()));
            assert_eq!(s.handle("POST", "/fraud-score?x=1", BODY.as_bytes()), ok);
            assert_eq!(s.handle("GET", "/ready", b"").status, 200);
            assert_eq!(s.handle("HEAD", "/ready", b"").status, 200);
            let r = s.handle("GET", "/fraud-score", b"");
            assert_eq!((r.status, r.allow), (405, Some("POST")));
            assert_eq!(s.handle("DELETE", "/ready", b"").status, 405);
            assert_eq!(s.handle("GET", "/nope", b"").status, 404);
        });
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
                let r = s.handle("POST", "/fraud-score", body.as_bytes());
                assert_eq!(r.status, 400, "{body}");
                let e = error_of(&r);
                assert!(e.starts_with(field), "{field}: {e}");
            }
            // Missing field inside an object names the object and the field.
            let r = s.handle(
                "POST",
                "/fraud-score",
                BODY.replace(r#""mcc":"5411","#, "").as_bytes(),
            );
            assert!(error_of(&r).contains("missing field `mcc`"));
            // Non-UTF-8 bytes are a 400, not a panic.
            assert_eq!(
                s.handle("POST", "/fraud-score", b"{\"id\":\"\xff\"}")
                    .status,
                400
            );
        });
    }

    #[test]
    fn long_errors_are_cut() {
        with_scorer(|s| {
            let body = BODY.replace("41.12", &format!("\"{}\"", "9".repeat(50_000)));
            let e = error_of(&s.handle("POST", "/fraud-score", body.as_bytes()));
            assert!(
                e.starts_with("transaction.amount: invalid type: string"),
                "{e}"
            );
            assert!(e.ends_with("..."), "{e}");
            assert_eq!(e.chars().count(), MAX_ERROR_CHARS + 3);
            // Multi-byte characters are cut at a character boundary.
            let body = BODY.replace("2026-03-11T18:45:53Z", &"\u{e9}".repeat(300));
            let e = error_of(&s.handle("POST", "/fraud-score", body.as_bytes()));
            assert!(e.starts_with("transaction.requested_at: "), "{e}");
            assert_eq!(e.chars().count(), MAX_ERROR_CHARS + 3);
            // Short ones are left alone.
            let e = error_of(&s.handle("POST", "/fraud-score", b"{"));
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
                assert_eq!(s.handle("POST", "/fraud-score", body.as_bytes()).status, 200, "{body}");
            }
        });
    }
}
