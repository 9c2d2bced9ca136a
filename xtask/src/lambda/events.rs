//! The cases the function is held to: every event in events/ with its expected answer
//! (events/expected.tsv, events/hostile/expected.tsv), and public payloads of
//! tests/data/test-data.json.gz wrapped in the four event formats. Answers are read as
//! `lambda_http` writes them (status, headers or multi-value headers, body, base64 flag).

use crate::util::{root, Entry};
use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

/// The four event sources, each with a `legit.json` template in events/<source>/.
pub const SOURCES: [&str; 4] = ["apigw-v2", "apigw-v1", "function-url", "alb"];

pub fn events_dir() -> PathBuf {
    root().join("events")
}

/// What an answer's body must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Exactly this JSON value.
    Json(Value),
    /// `{"error": "<non-empty>"}`.
    Error,
    /// `{"error": "<field>: ..."}`.
    ErrorAt(String),
}

/// One event file and its expected answer.
#[derive(Clone, Debug)]
pub struct Case {
    /// Path below events/.
    pub event: String,
    pub status: u16,
    pub expect: Expect,
}

/// A row of an expected.tsv: `event<TAB>status<TAB>body` (body: JSON, `error` or
/// `error:<field>`).
#[derive(Deserialize)]
struct Row {
    event: String,
    status: u16,
    body: String,
}

/// Reads an expected.tsv.
pub fn parse_table(text: &str) -> Result<Vec<Case>> {
    let mut reader =
        csv::ReaderBuilder::new().delimiter(b'\t').quoting(false).from_reader(text.as_bytes());
    let mut cases = Vec::new();
    for row in reader.deserialize::<Row>() {
        let row = row?;
        let expect = match row.body.as_str() {
            "error" => Expect::Error,
            b => match b.strip_prefix("error:") {
                Some(field) => Expect::ErrorAt(field.to_string()),
                None => Expect::Json(
                    serde_json::from_str(b).with_context(|| format!("{}: body", row.event))?,
                ),
            },
        };
        cases.push(Case { event: row.event, status: row.status, expect });
    }
    Ok(cases)
}

/// Every case of events/expected.tsv, then of events/hostile/expected.tsv.
pub fn cases() -> Result<Vec<Case>> {
    let mut all = Vec::new();
    for table in ["expected.tsv", "hostile/expected.tsv"] {
        let path = events_dir().join(table);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        all.extend(parse_table(&text).with_context(|| format!("in {}", path.display()))?);
    }
    Ok(all)
}

pub fn read_event(name: &str) -> Result<Vec<u8>> {
    let path = events_dir().join(name);
    std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// What the function answered, as `lambda_http` encodes it for every event source.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LambdaResponse {
    status_code: u16,
    #[serde(default)]
    headers: Option<HashMap<String, String>>,
    #[serde(default)]
    multi_value_headers: Option<HashMap<String, Vec<String>>>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    is_base64_encoded: bool,
}

/// A function error (the runtime's answer when the handler failed).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionError {
    error_type: String,
    error_message: String,
}

/// An HTTP answer, whatever the event source.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub allow: Option<String>,
    pub body: String,
}

impl Answer {
    /// Reads the function's JSON answer.
    pub fn parse(raw: &[u8]) -> Result<Answer> {
        let r: LambdaResponse = match serde_json::from_slice(raw) {
            Ok(r) => r,
            Err(_) => match serde_json::from_slice::<FunctionError>(raw) {
                Ok(e) => bail!("function error {}: {}", e.error_type, e.error_message),
                Err(_) => bail!("not a Lambda HTTP answer: {}", String::from_utf8_lossy(raw)),
            },
        };
        let mut headers: HashMap<String, String> = HashMap::new();
        for (k, v) in r.multi_value_headers.unwrap_or_default() {
            if let Some(first) = v.into_iter().next() {
                headers.insert(k.to_ascii_lowercase(), first);
            }
        }
        for (k, v) in r.headers.unwrap_or_default() {
            headers.insert(k.to_ascii_lowercase(), v);
        }
        let body = r.body.unwrap_or_default();
        let body = if r.is_base64_encoded {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(body)?)?
        } else {
            body
        };
        Ok(Answer {
            status: r.status_code,
            content_type: headers.remove("content-type"),
            allow: headers.remove("allow"),
            body,
        })
    }

    /// Why this answer does not meet `case`, if it does not.
    pub fn mismatch(&self, case: &Case) -> Option<String> {
        let body: Option<Value> = serde_json::from_str(&self.body).ok();
        let error = body
            .as_ref()
            .and_then(|b| b.get("error"))
            .and_then(|e| e.as_str())
            .filter(|e| !e.is_empty());
        let body_ok = match &case.expect {
            Expect::Json(want) => body.as_ref() == Some(want),
            Expect::Error => error.is_some(),
            Expect::ErrorAt(field) => error.is_some_and(|e| e.starts_with(&format!("{field}: "))),
        };
        let ok = self.status == case.status
            && self.content_type.as_deref() == Some("application/json")
            && body_ok
            && (case.status != 405 || self.allow.as_deref() == Some("POST"));
        (!ok).then(|| {
            format!(
                "{}: got {} {:?} allow {:?} {}, want {} {:?}",
                case.event,
                self.status,
                self.content_type,
                self.allow,
                self.body,
                case.status,
                case.expect
            )
        })
    }
}

/// `n` entries spread evenly over the file, then (with `edges`) every entry with exactly 3
/// frauds in 5 (fraud score 0.6, where a tie rule or an off-by-one would show).
pub fn spread(entries: &[Entry], n: usize, edges: bool) -> Vec<usize> {
    let mut picked = crate::util::spread(entries.len(), n);
    if edges {
        let first: std::collections::HashSet<usize> = picked.iter().copied().collect();
        let edge = |i: &usize| entries[*i].expected_fraud_score == 0.6 && !first.contains(i);
        picked.extend((0..entries.len()).filter(edge));
    }
    picked
}

/// The `legit.json` event of each source, to carry other bodies.
pub struct Templates(Vec<Value>);

impl Templates {
    pub fn load() -> Result<Templates> {
        let mut t = Vec::new();
        for s in SOURCES {
            t.push(serde_json::from_slice(&read_event(&format!("{s}/legit.json"))?)?);
        }
        Ok(Templates(t))
    }

    /// The event of source `i % 4` carrying `body`.
    pub fn event(&self, i: usize, body: &str) -> Vec<u8> {
        let mut e = self.0[i % self.0.len()].clone();
        e["body"] = Value::String(body.to_string());
        serde_json::to_vec(&e).expect("a JSON value serializes")
    }
}

/// Whether `answer` is the labeller's (`approved`, `fraud_score`).
pub fn matches(answer: &Answer, approved: bool, fraud_score: f64) -> bool {
    #[derive(Deserialize)]
    struct Decision {
        approved: bool,
        fraud_score: f64,
    }
    answer.status == 200
        && serde_json::from_str::<Decision>(&answer.body)
            .is_ok_and(|d| d.approved == approved && (d.fraud_score - fraud_score).abs() < 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_and_name_existing_events() {
        let cases = cases().unwrap();
        assert!(cases.len() >= 40, "{}", cases.len());
        for c in &cases {
            assert!(events_dir().join(&c.event).exists(), "{}", c.event);
        }
        let t =
            parse_table("event\tstatus\tbody\na.json\t400\terror:x.y\nb.json\t200\t{\"a\":1}\n")
                .unwrap();
        assert_eq!(t[0].expect, Expect::ErrorAt("x.y".into()));
        assert_eq!(t[1].expect, Expect::Json(serde_json::json!({"a": 1})));
    }

    #[test]
    fn answers_of_every_encoding_are_read() {
        let v2 = br#"{"statusCode":405,"headers":{"content-type":"application/json","allow":"POST"},"body":"{\"error\":\"method not allowed: use POST\"}","isBase64Encoded":false,"cookies":[]}"#;
        let a = Answer::parse(v2).unwrap();
        let case = Case { event: "x".into(), status: 405, expect: Expect::Error };
        assert_eq!(a.mismatch(&case), None);
        let v1 = br#"{"statusCode":200,"headers":{},"multiValueHeaders":{"Content-Type":["application/json"]},"body":"eyJyZWFkeSI6dHJ1ZX0=","isBase64Encoded":true}"#;
        let a = Answer::parse(v1).unwrap();
        assert_eq!(a.body, r#"{"ready":true}"#);
        assert_eq!(a.content_type.as_deref(), Some("application/json"));
        let err = Answer::parse(br#"{"errorType":"Runtime.ExitError","errorMessage":"boom"}"#);
        assert!(err.unwrap_err().to_string().contains("Runtime.ExitError"));
    }

    #[test]
    fn replayed_answers_and_the_edges_of_the_replay() {
        let body = r#"{"approved":false,"fraud_score":0.6}"#.into();
        let a = Answer {
            status: 200,
            content_type: Some("application/json".into()),
            allow: None,
            body,
        };
        assert!(matches(&a, false, 0.6) && !matches(&a, true, 0.6) && !matches(&a, false, 0.8));
        let entry = |expected_fraud_score| {
            let request = serde_json::value::RawValue::from_string("{}".into()).unwrap();
            Entry { request, expected_approved: true, expected_fraud_score }
        };
        let entries: Vec<Entry> = [0.0, 0.6, 0.0, 0.0, 0.6, 1.0].map(entry).into();
        assert_eq!(spread(&entries, 2, true), [0, 3, 1, 4]);
        assert_eq!(spread(&entries, 2, false), [0, 3]);
    }

    #[test]
    fn a_wrong_field_is_a_mismatch() {
        let a = Answer {
            status: 400,
            content_type: Some("application/json".into()),
            allow: None,
            body: r#"{"error":"merchant: missing field `mcc`"}"#.into(),
        };
        let at =
            |f: &str| Case { event: "x".into(), status: 400, expect: Expect::ErrorAt(f.into()) };
        assert_eq!(a.mismatch(&at("merchant")), None);
        assert!(a.mismatch(&at("terminal")).is_some());
    }
}
