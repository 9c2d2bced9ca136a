//! `cargo xtask lambda events`: writes events/ (checked in; rerun after changing a case here).
//!
//! - events/<source>/ for the four sources, the same five cases in each: `legit.json`,
//!   `fraud.json`, `null-last.json` (last_transaction null), `malformed.json`, `ready.json`
//!   (GET /ready); apigw-v2 also has `base64.json`, `wrong-method.json`, `not-found.json`.
//!   Sources: `apigw-v2` (HTTP API, payload 2.0, `$default` stage), `apigw-v1` (REST API,
//!   payload 1.0, stage `Prod`), `function-url` (payload 2.0, lambda-url domain), `alb`.
//! - events/payloads/: the same request bodies alone, for curl against a server.
//! - events/hostile/: the bad-input matrix of docs/HOSTILE.md as Lambda events: a source's legit
//!   event with its body (and for some, query string or base64 flag) replaced. The answers of
//!   the valid ones come from local-runner/tests/data/hostile-valid.json (the independent
//!   labeller's), so the Lambda path is held to the same numbers as the HTTP server.
//! - events/expected.tsv and events/hostile/expected.tsv: the status and body each event must
//!   get (`error` = a JSON error; `error:<field>` = one whose message starts with `<field>: `).
//!
//! Payloads: legit and fraud are the first two entries of the public test set (0/5 and 5/5
//! frauds); null-last is the contest documentation's second worked example (5 frauds).
//! `--check` compares instead of writing (a test does the same).

use super::events::events_dir;
use crate::util::{self, root};
use anyhow::{bail, ensure, Context, Result};
use base64::Engine;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(clap::Args)]
pub struct Args {
    /// Compare with the files in events/ instead of writing them; fail on any difference.
    #[arg(long)]
    check: bool,
}

const LEGIT: &str = r#"{"id":"tx-1641912674","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},"terminal":{"is_online":false,"card_present":true,"km_from_home":33.8814492067},"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}"#;
const FRAUD: &str = r#"{"id":"tx-853640735","transaction":{"amount":5293.06,"installments":8,"requested_at":"2028-09-19T03:34:29Z"},"customer":{"avg_amount":60.14,"tx_count_24h":11,"known_merchants":["MERC-009","MERC-001"]},"merchant":{"id":"MERC-087","mcc":"7995","avg_amount":21.57},"terminal":{"is_online":false,"card_present":false,"km_from_home":265.7823290829},"last_transaction":{"timestamp":"2024-01-04T03:43:32Z","km_from_current":722.9372664641}}"#;
const NULL_LAST: &str = r#"{"id":"tx-doc-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#;
const MALFORMED: &str = r#"{"id":"tx-bad","transaction":{"amount":"lots","installments":1"#;
const OK_LEGIT: &str = r#"{"approved":true,"fraud_score":0.0}"#;
const OK_FRAUD: &str = r#"{"approved":false,"fraud_score":1.0}"#;
const READY: &str = r#"{"ready":true}"#;

/// What an event carries, whatever its source.
#[derive(Clone)]
struct Req {
    method: &'static str,
    path: &'static str,
    /// `None`: no body (and, unless `content_type`, no content-type header).
    body: Option<String>,
    base64: bool,
    content_type: Option<&'static str>,
    query: Option<(&'static str, &'static str)>,
}

impl Req {
    fn new(method: &'static str, path: &'static str, body: Option<&str>) -> Req {
        let content_type = body.is_some().then_some(JSON_TYPE);
        Req {
            method,
            path,
            body: body.map(str::to_string),
            base64: false,
            content_type,
            query: None,
        }
    }
}

const JSON_TYPE: &str = "application/json";
const UA: &str = "k6/1.1.0";
const SOURCE_IP: &str = "203.0.113.10";
const TIME: &str = "11/Mar/2026:20:23:35 +0000";
const EPOCH: u64 = 1_773_260_615_000;

/// JSON whose object keys keep the order they are written in, as AWS documents each event
/// (serde_json's own map sorts them); `Skip` leaves a key out.
enum J {
    V(Value),
    O(Vec<(&'static str, J)>),
    Skip,
}

impl Serialize for J {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::V(v) => v.serialize(s),
            J::O(fields) => {
                let mut m = s.serialize_map(None)?;
                for (k, v) in fields.iter().filter(|(_, v)| !matches!(v, J::Skip)) {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            J::Skip => s.serialize_unit(),
        }
    }
}

impl<T: Into<Value>> From<T> for J {
    fn from(v: T) -> J {
        J::V(v.into())
    }
}

/// `Some(v)` as `v`, `None` left out.
fn opt<T: Into<Value>>(v: Option<T>) -> J {
    v.map_or(J::Skip, |v| J::V(v.into()))
}

macro_rules! obj {
    ($($k:literal: $v:expr),* $(,)?) => { J::O(vec![$(($k, $v.into())),*]) };
}

/// Lower-case headers (payload 2.0 and ALB).
fn lower_headers(host: &'static str, alb: bool, r: &Req) -> J {
    obj! {
        "accept": JSON_TYPE, "host": host, "user-agent": UA,
        "x-forwarded-for": opt(alb.then_some(SOURCE_IP)), "x-forwarded-port": opt(alb.then_some("443")),
        "x-forwarded-proto": "https", "content-type": opt(r.content_type),
    }
}

/// Payload format 2.0: API Gateway HTTP API (`function_url` false) and Function URLs.
fn v2(function_url: bool, r: &Req) -> J {
    let (api, host, account, request_id) = if function_url {
        let api = "abcdefghijklmnopqrstuvwxyz0123";
        (
            api,
            "abcdefghijklmnopqrstuvwxyz0123.lambda-url.us-east-1.on.aws",
            "anonymous",
            "1ac06eee-f687-44ec-9036-dfd49d0be0a3",
        )
    } else {
        let api = "a1b2c3d4e5";
        (
            api,
            "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
            "123456789012",
            "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
        )
    };
    let route_key =
        if function_url { "$default".into() } else { format!("{} {}", r.method, r.path) };
    let http = obj! { "method": r.method, "path": r.path, "protocol": "HTTP/1.1", "sourceIp": SOURCE_IP, "userAgent": UA };
    obj! {
        "version": "2.0",
        "routeKey": route_key.clone(),
        "rawPath": r.path,
        "rawQueryString": r.query.map_or(String::new(), |(k, v)| format!("{k}={v}")),
        "headers": lower_headers(host, false, r),
        "requestContext": obj! {
            "accountId": account, "apiId": api, "domainName": host, "domainPrefix": api, "http": http,
            "requestId": request_id, "routeKey": route_key, "stage": "$default", "time": TIME, "timeEpoch": EPOCH,
        },
        "isBase64Encoded": r.base64,
        "body": opt(r.body.clone()),
        "queryStringParameters": r.query.map_or(J::Skip, |(k, v)| J::O(vec![(k, v.into())])),
    }
}

/// Payload format 1.0: API Gateway REST API (header names as clients send them).
fn v1(r: &Req) -> J {
    const HOST: &str = "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com";
    let headers = |many: bool| {
        let h = |v: &'static str| if many { J::V(Value::from(vec![v])) } else { v.into() };
        let content_type = r.content_type.map_or(J::Skip, h);
        obj! { "Accept": h(JSON_TYPE), "Host": h(HOST), "User-Agent": h(UA), "X-Forwarded-Proto": h("https"), "Content-Type": content_type }
    };
    let identity = obj! { "sourceIp": SOURCE_IP, "userAgent": UA };
    obj! {
        "resource": r.path, "path": r.path, "httpMethod": r.method, "headers": headers(false),
        "multiValueHeaders": headers(true), "queryStringParameters": Value::Null,
        "multiValueQueryStringParameters": Value::Null, "pathParameters": Value::Null, "stageVariables": Value::Null,
        "requestContext": obj! {
            "accountId": "123456789012", "apiId": "a1b2c3d4e5", "resourceId": "x1y2z3", "stage": "Prod",
            "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef", "extendedRequestId": "MLa1bFakeIdA=",
            "requestTime": TIME, "requestTimeEpoch": EPOCH, "resourcePath": r.path, "httpMethod": r.method,
            "path": format!("/Prod{}", r.path), "protocol": "HTTP/1.1", "domainName": HOST,
            "domainPrefix": "a1b2c3d4e5", "identity": identity,
        },
        "body": r.body.clone(), "isBase64Encoded": r.base64,
    }
}

/// An Application Load Balancer target group event.
fn alb(r: &Req) -> J {
    let arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/fraud-score/0123456789abcdef";
    obj! {
        "requestContext": obj! { "elb": obj! { "targetGroupArn": arn } },
        "httpMethod": r.method, "path": r.path, "queryStringParameters": obj! {},
        "headers": lower_headers("fraud-alb-123456789.us-east-1.elb.amazonaws.com", true, r),
        "body": r.body.clone().unwrap_or_default(), "isBase64Encoded": r.base64,
    }
}

/// The event of `source` for `r`, pretty-printed as checked in.
fn event(source: &str, r: &Req) -> Result<String> {
    let json = match source {
        "apigw-v2" => v2(false, r),
        "function-url" => v2(true, r),
        "apigw-v1" => v1(r),
        "alb" => alb(r),
        _ => bail!("unknown event source {source}"),
    };
    Ok(serde_json::to_string_pretty(&json)? + "\n")
}

/// One case of the bad-input matrix (local-runner/tests/data/hostile-valid.json).
#[derive(Deserialize)]
struct Valid {
    name: String,
    body: String,
    expected: String,
}

/// `body` with `old` (which must occur once) replaced by `new`.
fn sub(body: &str, old: &str, new: &str) -> Result<String> {
    ensure!(body.matches(old).count() == 1, "{old:?} is not in the body once");
    Ok(body.replacen(old, new, 1))
}

/// Every file of events/ (path below events/ -> content).
fn generate() -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for (name, body) in
        [("legit", LEGIT), ("fraud", FRAUD), ("null-last", NULL_LAST), ("malformed", MALFORMED)]
    {
        files.insert(format!("payloads/{name}.json"), format!("{body}\n").into_bytes());
    }
    // Each source: the scored bodies, then GET /ready; apigw-v2 also: base64, wrong method,
    // unknown path.
    let scored = [
        ("legit", LEGIT, 200, OK_LEGIT),
        ("fraud", FRAUD, 200, OK_FRAUD),
        ("null-last", NULL_LAST, 200, OK_FRAUD),
        ("malformed", MALFORMED, 400, "error"),
    ];
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut cases = Vec::new();
    for source in super::events::SOURCES {
        for (name, body, status, answer) in scored {
            cases.push((
                source,
                name,
                Req::new("POST", "/fraud-score", Some(body)),
                status,
                answer,
            ));
        }
        cases.push((source, "ready", Req::new("GET", "/ready", None), 200, READY));
    }
    let base64_legit =
        Req { base64: true, ..Req::new("POST", "/fraud-score", Some(&b64.encode(LEGIT))) };
    cases.push(("apigw-v2", "base64", base64_legit, 200, OK_LEGIT));
    cases.push(("apigw-v2", "wrong-method", Req::new("GET", "/fraud-score", None), 405, "error"));
    cases.push(("apigw-v2", "not-found", Req::new("POST", "/score", Some(LEGIT)), 404, "error"));
    let rows = cases.into_iter().map(|(source, name, req, status, answer)| {
        (format!("{source}/{name}"), source, req, status, answer.to_string())
    });
    write_cases(&mut files, "expected.tsv", rows.collect())?;
    write_cases(&mut files, "hostile/expected.tsv", hostile()?)?;
    Ok(files)
}

/// A case: its file below events/ (without `.json`), source, request, status and answer.
type Row = (String, &'static str, Req, u16, String);

/// Each case's event, and the table of their expected answers.
fn write_cases(files: &mut BTreeMap<String, Vec<u8>>, table: &str, rows: Vec<Row>) -> Result<()> {
    let mut expected = vec!["event\tstatus\tbody".to_string()];
    for (file, source, req, status, answer) in rows {
        files.insert(format!("{file}.json"), event(source, &req)?.into_bytes());
        expected.push(format!("{file}.json\t{status}\t{answer}"));
    }
    files.insert(table.into(), (expected.join("\n") + "\n").into_bytes());
    Ok(())
}

/// Bodies the API refuses with a 400 naming a field: case, source, the legit body's `old`
/// replaced by `new`, the field.
#[rustfmt::skip]
const REFUSED: [(&str, &str, &str, &str, &str); 9] = [
    ("wrong-type", "apigw-v2", r#""amount":441.59"#, r#""amount":"441.59""#, "transaction.amount"),
    ("missing-field", "apigw-v2", r#""mcc":"5411","#, "", "merchant"),
    ("null-field", "apigw-v2", r#""is_online":false"#, r#""is_online":null"#, "terminal.is_online"),
    ("nan", "apigw-v2", r#""amount":441.59"#, r#""amount":NaN"#, "transaction.amount"),
    ("bad-timestamp", "apigw-v2", r#""2027-07-09T16:31:06Z""#, r#""2027-02-30T16:31:06Z""#, "transaction.requested_at"),
    ("positional-array", "apigw-v2", r#"{"is_online":false,"card_present":true,"km_from_home":33.8814492067}"#, "[false,true,33.88]", "terminal"),
    ("wrong-type-v1", "apigw-v1", r#""is_online":false"#, r#""is_online":"no""#, "terminal.is_online"),
    ("wrong-type-function-url", "function-url", r#""is_online":false"#, r#""is_online":"no""#, "terminal.is_online"),
    ("wrong-type-alb", "alb", r#""is_online":false"#, r#""is_online":"no""#, "terminal.is_online"),
];

/// Odd but valid bodies of local-runner/tests/data/hostile-valid.json, answered as its labeller
/// answers.
const VALID: [&str; 9] = [
    "extra_fields",
    "avg_amount_zero",
    "mcc_unknown",
    "edge_negative_amount",
    "edge_huge_amount",
    "edge_km_current_negative",
    "edge_installments_zero",
    "edge_last_later",
    "edge_last_null",
];

/// The bad-input matrix: each a legit event with something replaced.
fn hostile() -> Result<Vec<Row>> {
    let path = root().join("local-runner/tests/data/hostile-valid.json");
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let valid: Vec<Valid> = serde_json::from_slice(&text)?;
    let case =
        |name: &str| valid.iter().find(|c| c.name == name).context(format!("no case {name}"));
    let base = case("base")?;
    let legit = |body: String| Req {
        content_type: Some(JSON_TYPE),
        ..Req::new("POST", "/fraud-score", Some(&body))
    };
    let row = |name: &str, source, req, status, answer: &str| {
        (format!("hostile/{name}"), source, req, status, answer.into())
    };
    let refused =
        |(name, source, old, new, field): (&str, &'static str, &str, &str, &str)| -> Result<Row> {
            Ok(row(name, source, legit(sub(&base.body, old, new)?), 400, &format!("error:{field}")))
        };
    let non_utf8 = sub(&base.body, r#""tx-1641912674""#, "\"tx-\u{0}\"")?.into_bytes();
    let non_utf8: Vec<u8> = non_utf8.into_iter().map(|b| if b == 0 { 0xff } else { b }).collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    let non_utf8 = Req { base64: true, ..legit(b64.encode(&non_utf8)) };
    let form =
        Req { content_type: Some("application/x-www-form-urlencoded"), ..legit(base.body.clone()) };
    let query = Req { query: Some(("x", "1")), ..legit(base.body.clone()) };
    let v2 = "apigw-v2";
    let mut rows =
        vec![row("empty-body", v2, Req { body: None, ..legit(String::new()) }, 400, "error:.")];
    rows.extend(REFUSED[..6].iter().map(|&r| refused(r)).collect::<Result<Vec<_>>>()?);
    rows.push(row("non-utf8", v2, non_utf8, 400, "error:."));
    rows.push(row("form-content-type", v2, form, 415, "error"));
    rows.push(row("query-string", v2, query, 200, &base.expected));
    rows.extend(REFUSED[6..].iter().map(|&r| refused(r)).collect::<Result<Vec<_>>>()?);
    for name in VALID {
        let c = case(name)?;
        rows.push(row(&name.replace('_', "-"), v2, legit(c.body.clone()), 200, &c.expected));
    }
    Ok(rows)
}

/// Files whose content differs from what [`generate`] makes (or that are missing).
fn stale(files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let differs = |(rel, content): &(&String, &Vec<u8>)| {
        std::fs::read(events_dir().join(rel)).ok().as_ref() != Some(*content)
    };
    files.iter().filter(differs).map(|(rel, _)| rel.clone()).collect()
}

pub fn run(a: Args) -> Result<()> {
    let files = generate()?;
    let stale = stale(&files);
    if a.check {
        let ok = stale.is_empty();
        let figures = format!("{} files, {} differ {:?}", files.len(), stale.len(), stale);
        return util::verdict("lambda events", ok, &figures, &stale);
    }
    for rel in &stale {
        let path = events_dir().join(rel);
        std::fs::create_dir_all(path.parent().expect("below events/"))?;
        std::fs::write(&path, &files[rel])?;
    }
    let figures = format!("{} files in events/, {} rewritten", files.len(), stale.len());
    util::verdict("lambda events", true, &figures, &stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_events_are_what_the_generator_writes() {
        let files = generate().unwrap();
        assert_eq!(files.len(), 4 + 4 * 5 + 3 + 1 + 22 + 1);
        assert_eq!(stale(&files), Vec::<String>::new());
    }

    #[test]
    fn a_substitution_must_match_once() {
        assert_eq!(sub("a-b", "-", "+").unwrap(), "a+b");
        assert!(sub("a-b-c", "-", "+").is_err());
        assert!(sub("abc", "-", "+").is_err());
    }
}
