//! The cases the function is held to: events/ with its expected.tsv, and replayed payloads.

use crate::prelude::*;
use base64::Engine;
use serde_json::{json, Value};

/// The four event sources, each with a `legit.json` in events/<source>/.
const SOURCES: [&str; 4] = ["apigw-v2", "apigw-v1", "function-url", "alb"];

pub fn events_dir() -> PathBuf {
    root().join("events")
}

pub fn read_event(name: &str) -> Result<Vec<u8>> {
    let path = events_dir().join(name);
    fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    Json(Value),
    Error,
    ErrorAt(String),
    /// `GET /ready`: `{"ready":true,"index":...}` naming the index under test ([`Case::naming`]).
    Ready,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub event: String,
    pub status: u16,
    pub expect: Expect,
}

impl Case {
    /// The case with a [`Expect::Ready`] body made exact: the ready body naming `index`.
    pub fn naming(mut self, index: &Value) -> Case {
        if self.expect == Expect::Ready {
            self.expect = Expect::Json(json!({"ready": true, "index": index}));
        }
        self
    }
}

pub type Sent = (Vec<u8>, Case);

/// Reads an expected.tsv (`event<TAB>status<TAB>body`, a header line first).
pub fn parse_table(text: &str) -> Result<Vec<Case>> {
    let case = |line: &str| -> Result<Case> {
        let [event, status, body] = line.splitn(3, '\t').collect::<Vec<_>>()[..] else {
            bail!("not event<TAB>status<TAB>body: {line:?}")
        };
        let expect = match (body, body.strip_prefix("error:")) {
            ("error", _) => Expect::Error,
            ("ready", _) => Expect::Ready,
            (_, Some(field)) => Expect::ErrorAt(field.to_string()),
            (b, None) => Expect::Json(serde_json::from_str(b).with_context(|| event.to_string())?),
        };
        Ok(Case { event: event.into(), status: status.parse()?, expect })
    };
    text.lines().skip(1).filter(|l| !l.is_empty()).map(case).collect()
}

pub fn cases() -> Result<Vec<Case>> {
    let tables = ["expected.tsv", "hostile/expected.tsv"].map(|t| {
        parse_table(&String::from_utf8(read_event(t)?)?).with_context(|| format!("in events/{t}"))
    });
    Ok(tables.into_iter().collect::<Result<Vec<_>>>()?.concat())
}

/// The HTTP request body an event carries (base64-decoded when the event says so).
pub fn request_body(event: &str) -> Result<Vec<u8>> {
    let e: Value = serde_json::from_slice(&read_event(event)?)
        .with_context(|| format!("events/{event} is not JSON"))?;
    body(&e)
}

/// The `body` of an event or an answer, base64-decoded when it says so.
fn body(v: &Value) -> Result<Vec<u8>> {
    let b = v["body"].as_str().unwrap_or_default().as_bytes();
    let base64 = v["isBase64Encoded"] == true;
    Ok(if base64 { base64::engine::general_purpose::STANDARD.decode(b)? } else { b.to_vec() })
}

/// GET /ready in `source`'s format: the first invocation of a run.
pub fn ready(source: &str) -> Result<Sent> {
    let (event, expect) = (format!("{source}/ready.json"), Expect::Ready);
    Ok((read_event(&event)?, Case { event, status: 200, expect }))
}

/// `n` public payloads, then (`edges`) every score 0.6, where a tie rule or an off-by-one shows.
pub fn replay(n: usize, edges: bool, source: impl Fn(usize) -> usize) -> Result<Vec<Sent>> {
    let entries = util::test_entries()?;
    let each =
        SOURCES.map(|s| Ok(serde_json::from_slice(&read_event(&format!("{s}/legit.json"))?)?));
    let templates: Vec<Value> = each.into_iter().collect::<Result<_>>()?;
    let scores: Vec<f64> = entries.iter().map(|e| e.expected_fraud_score).collect();
    let sent = spread(&scores, n, edges).into_iter().enumerate().map(|(k, i)| {
        let (e, mut event) = (&entries[i], templates[source(k) % 4].clone());
        event["body"] = Value::String(e.request.get().to_string());
        let body = json!({"approved": e.expected_approved, "fraud_score": e.expected_fraud_score});
        let case = Case { event: format!("entry {i}"), status: 200, expect: Expect::Json(body) };
        (serde_json::to_vec(&event).expect("a JSON value serializes"), case)
    });
    Ok(sent.collect())
}

pub fn spread(scores: &[f64], n: usize, edges: bool) -> Vec<usize> {
    let picked = util::spread(scores.len(), n);
    let edge = |i: &usize| edges && scores[*i] == 0.6 && !picked.contains(i);
    let more: Vec<usize> = (0..scores.len()).filter(edge).collect();
    [picked, more].concat()
}

#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub allow: Option<String>,
    pub body: String,
}

impl Answer {
    /// As `lambda_http` encodes it for every source (headers single or multi-valued, base64).
    pub fn parse(raw: &[u8]) -> Result<Answer> {
        let shown = || String::from_utf8_lossy(raw).into_owned();
        let v: Value = serde_json::from_slice(raw).context(format!("not JSON: {}", shown()))?;
        if let Some(error) = v["errorType"].as_str() {
            bail!("function error {error}: {}", v["errorMessage"].as_str().unwrap_or_default());
        }
        let status = v["statusCode"].as_u64();
        let status = status.with_context(|| format!("not a Lambda HTTP answer: {}", shown()))?;
        let find = |map: &Value, name: &str| -> Option<Value> {
            let (_, v) = map.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(name))?;
            Some(v.clone())
        };
        let header = |name| {
            let multi = || find(&v["multiValueHeaders"], name).map(|m| m[0].clone());
            find(&v["headers"], name).or_else(multi)?.as_str().map(String::from)
        };
        let (content_type, allow, body) =
            (header("content-type"), header("allow"), String::from_utf8(body(&v)?)?);
        Ok(Answer { status: status as u16, content_type, allow, body })
    }

    pub fn mismatch(&self, case: &Case) -> Option<String> {
        let body: Option<Value> = serde_json::from_str(&self.body).ok();
        let error = body.as_ref().and_then(|b| b.get("error")?.as_str()).filter(|e| !e.is_empty());
        let body_ok = match &case.expect {
            Expect::Json(want) => body.as_ref() == Some(want),
            Expect::Error => error.is_some(),
            Expect::ErrorAt(field) => error.is_some_and(|e| e.starts_with(&format!("{field}: "))),
            Expect::Ready => false, // only ever compared once made exact
        };
        let ok = self.status == case.status
            && self.content_type.as_deref() == Some("application/json")
            && body_ok
            && (case.status != 405 || self.allow.as_deref() == Some("POST"));
        let Answer { status, content_type, allow, body } = self;
        let (event, want) = (&case.event, format!("{} {:?}", case.status, case.expect));
        (!ok).then(|| {
            format!("{event}: got {status} {content_type:?} allow {allow:?} {body}, want {want}")
        })
    }
}

pub fn failure(answer: &Result<(Answer, f64), String>, case: &Case) -> Option<String> {
    answer.as_ref().map_or_else(|e| Some(format!("{}: {e}", case.event)), |(a, _)| a.mismatch(case))
}
