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
use crate::cmd::root;
use anyhow::{bail, ensure, Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};
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
    /// The content-type header, if any.
    content_type: Option<&'static str>,
    query: Option<(&'static str, &'static str)>,
}

impl Req {
    fn new(method: &'static str, path: &'static str, body: Option<&str>) -> Req {
        Req {
            method,
            path,
            body: body.map(str::to_string),
            base64: false,
            content_type: body.is_some().then_some(JSON_TYPE),
            query: None,
        }
    }
}

const JSON_TYPE: &str = "application/json";
const UA: &str = "k6/1.1.0";
const SOURCE_IP: &str = "203.0.113.10";
const TIME: &str = "11/Mar/2026:20:23:35 +0000";
const EPOCH: u64 = 1_773_260_615_000;

#[derive(Serialize)]
struct LowerHeaders {
    accept: &'static str,
    host: &'static str,
    #[serde(rename = "user-agent")]
    user_agent: &'static str,
    #[serde(rename = "x-forwarded-for", skip_serializing_if = "Option::is_none")]
    forwarded_for: Option<&'static str>,
    #[serde(rename = "x-forwarded-port", skip_serializing_if = "Option::is_none")]
    forwarded_port: Option<&'static str>,
    #[serde(rename = "x-forwarded-proto")]
    forwarded_proto: &'static str,
    #[serde(rename = "content-type", skip_serializing_if = "Option::is_none")]
    content_type: Option<&'static str>,
}

fn lower_headers(host: &'static str, alb: bool, r: &Req) -> LowerHeaders {
    LowerHeaders {
        accept: JSON_TYPE,
        host,
        user_agent: UA,
        forwarded_for: alb.then_some(SOURCE_IP),
        forwarded_port: alb.then_some("443"),
        forwarded_proto: "https",
        content_type: r.content_type,
    }
}

/// Payload format 2.0: API Gateway HTTP API and Function URLs.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct V2 {
    version: &'static str,
    route_key: String,
    raw_path: &'static str,
    raw_query_string: String,
    headers: LowerHeaders,
    request_context: V2Context,
    is_base64_encoded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query_string_parameters: Option<BTreeMap<&'static str, &'static str>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct V2Context {
    account_id: &'static str,
    api_id: &'static str,
    domain_name: String,
    domain_prefix: &'static str,
    http: V2Http,
    request_id: &'static str,
    route_key: String,
    stage: &'static str,
    time: &'static str,
    time_epoch: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct V2Http {
    method: &'static str,
    path: &'static str,
    protocol: &'static str,
    source_ip: &'static str,
    user_agent: &'static str,
}

#[derive(Clone, Copy, PartialEq)]
enum V2Kind {
    HttpApi,
    FunctionUrl,
}

fn v2(kind: V2Kind, r: &Req) -> V2 {
    let (api, host, account, request_id) = match kind {
        V2Kind::HttpApi => (
            "a1b2c3d4e5",
            "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
            "123456789012",
            "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
        ),
        V2Kind::FunctionUrl => (
            "abcdefghijklmnopqrstuvwxyz0123",
            "abcdefghijklmnopqrstuvwxyz0123.lambda-url.us-east-1.on.aws",
            "anonymous",
            "1ac06eee-f687-44ec-9036-dfd49d0be0a3",
        ),
    };
    let route_key = match kind {
        V2Kind::HttpApi => format!("{} {}", r.method, r.path),
        V2Kind::FunctionUrl => "$default".to_string(),
    };
    V2 {
        version: "2.0",
        route_key: route_key.clone(),
        raw_path: r.path,
        raw_query_string: r.query.map_or(String::new(), |(k, v)| format!("{k}={v}")),
        headers: lower_headers(host, false, r),
        request_context: V2Context {
            account_id: account,
            api_id: api,
            domain_name: host.to_string(),
            domain_prefix: api,
            http: V2Http {
                method: r.method,
                path: r.path,
                protocol: "HTTP/1.1",
                source_ip: SOURCE_IP,
                user_agent: UA,
            },
            request_id,
            route_key,
            stage: "$default",
            time: TIME,
            time_epoch: EPOCH,
        },
        is_base64_encoded: r.base64,
        body: r.body.clone(),
        query_string_parameters: r.query.map(|(k, v)| BTreeMap::from([(k, v)])),
    }
}

/// Payload format 1.0: API Gateway REST API (header names as clients send them).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct V1 {
    resource: &'static str,
    path: &'static str,
    http_method: &'static str,
    headers: V1Headers<&'static str>,
    multi_value_headers: V1Headers<[&'static str; 1]>,
    query_string_parameters: Option<()>,
    multi_value_query_string_parameters: Option<()>,
    path_parameters: Option<()>,
    stage_variables: Option<()>,
    request_context: V1Context,
    body: Option<String>,
    is_base64_encoded: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct V1Headers<T> {
    accept: T,
    host: T,
    #[serde(rename = "User-Agent")]
    user_agent: T,
    #[serde(rename = "X-Forwarded-Proto")]
    forwarded_proto: T,
    #[serde(rename = "Content-Type", skip_serializing_if = "Option::is_none")]
    content_type: Option<T>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct V1Context {
    account_id: &'static str,
    api_id: &'static str,
    resource_id: &'static str,
    stage: &'static str,
    request_id: &'static str,
    extended_request_id: &'static str,
    request_time: &'static str,
    request_time_epoch: u64,
    resource_path: &'static str,
    http_method: &'static str,
    path: String,
    protocol: &'static str,
    domain_name: &'static str,
    domain_prefix: &'static str,
    identity: Identity,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Identity {
    source_ip: &'static str,
    user_agent: &'static str,
}

fn v1(r: &Req) -> V1 {
    const HOST: &str = "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com";
    let ct = r.content_type;
    V1 {
        resource: r.path,
        path: r.path,
        http_method: r.method,
        headers: V1Headers {
            accept: JSON_TYPE,
            host: HOST,
            user_agent: UA,
            forwarded_proto: "https",
            content_type: ct,
        },
        multi_value_headers: V1Headers {
            accept: [JSON_TYPE],
            host: [HOST],
            user_agent: [UA],
            forwarded_proto: ["https"],
            content_type: ct.map(|c| [c]),
        },
        query_string_parameters: None,
        multi_value_query_string_parameters: None,
        path_parameters: None,
        stage_variables: None,
        request_context: V1Context {
            account_id: "123456789012",
            api_id: "a1b2c3d4e5",
            resource_id: "x1y2z3",
            stage: "Prod",
            request_id: "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
            extended_request_id: "MLa1bFakeIdA=",
            request_time: TIME,
            request_time_epoch: EPOCH,
            resource_path: r.path,
            http_method: r.method,
            path: format!("/Prod{}", r.path),
            protocol: "HTTP/1.1",
            domain_name: HOST,
            domain_prefix: "a1b2c3d4e5",
            identity: Identity {
                source_ip: SOURCE_IP,
                user_agent: UA,
            },
        },
        body: r.body.clone(),
        is_base64_encoded: r.base64,
    }
}

/// An Application Load Balancer target group event.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Alb {
    request_context: AlbContext,
    http_method: &'static str,
    path: &'static str,
    query_string_parameters: BTreeMap<&'static str, &'static str>,
    headers: LowerHeaders,
    body: String,
    is_base64_encoded: bool,
}

#[derive(Serialize)]
struct AlbContext {
    elb: Elb,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Elb {
    target_group_arn: &'static str,
}

fn alb(r: &Req) -> Alb {
    Alb {
        request_context: AlbContext {
            elb: Elb {
                target_group_arn: "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/fraud-score/0123456789abcdef",
            },
        },
        http_method: r.method,
        path: r.path,
        query_string_parameters: BTreeMap::new(),
        headers: lower_headers("fraud-alb-123456789.us-east-1.elb.amazonaws.com", true, r),
        body: r.body.clone().unwrap_or_default(),
        is_base64_encoded: r.base64,
    }
}

/// The event of `source` for `r`, pretty-printed as checked in.
fn event(source: &str, r: &Req) -> Result<String> {
    let text = match source {
        "apigw-v2" => serde_json::to_string_pretty(&v2(V2Kind::HttpApi, r))?,
        "function-url" => serde_json::to_string_pretty(&v2(V2Kind::FunctionUrl, r))?,
        "apigw-v1" => serde_json::to_string_pretty(&v1(r))?,
        "alb" => serde_json::to_string_pretty(&alb(r))?,
        _ => bail!("unknown event source {source}"),
    };
    Ok(text + "\n")
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
    ensure!(
        body.matches(old).count() == 1,
        "{old:?} is not in the body once"
    );
    Ok(body.replacen(old, new, 1))
}

/// Every file of events/ (path below events/ -> content).
fn generate() -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for (name, body) in [
        ("legit", LEGIT),
        ("fraud", FRAUD),
        ("null-last", NULL_LAST),
        ("malformed", MALFORMED),
    ] {
        files.insert(
            format!("payloads/{name}.json"),
            format!("{body}\n").into_bytes(),
        );
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
    let mut base64_legit = Req::new("POST", "/fraud-score", Some(&b64.encode(LEGIT)));
    base64_legit.base64 = true;
    let mut cases = Vec::new();
    for source in super::events::SOURCES {
        for (name, body, status, answer) in scored {
            let req = Req::new("POST", "/fraud-score", Some(body));
            cases.push((source, name, req, status, answer));
        }
        cases.push((source, "ready", Req::new("GET", "/ready", None), 200, READY));
    }
    cases.push(("apigw-v2", "base64", base64_legit, 200, OK_LEGIT));
    let wrong_method = Req::new("GET", "/fraud-score", None);
    cases.push(("apigw-v2", "wrong-method", wrong_method, 405, "error"));
    let not_found = Req::new("POST", "/score", Some(LEGIT));
    cases.push(("apigw-v2", "not-found", not_found, 404, "error"));
    let mut expected = vec!["event\tstatus\tbody".to_string()];
    for (source, name, req, status, answer) in cases {
        let file = format!("{source}/{name}.json");
        files.insert(file.clone(), event(source, &req)?.into_bytes());
        expected.push(format!("{file}\t{status}\t{answer}"));
    }
    files.insert(
        "expected.tsv".into(),
        (expected.join("\n") + "\n").into_bytes(),
    );

    // The bad-input matrix: each a legit event with something replaced.
    let path = root().join("local-runner/tests/data/hostile-valid.json");
    let valid: Vec<Valid> = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?,
    )?;
    let valid_case = |name: &str| {
        valid
            .iter()
            .find(|c| c.name == name)
            .with_context(|| format!("no case {name} in {}", path.display()))
    };
    let base = &valid_case("base")?.body;
    let legit = |body: Option<String>| Req {
        body,
        content_type: Some(JSON_TYPE),
        ..Req::new("POST", "/fraud-score", None)
    };
    let with = |old: &str, new: &str| -> Result<Req> { Ok(legit(Some(sub(base, old, new)?))) };
    let mut non_utf8 = sub(base, r#""tx-1641912674""#, "\"tx-\u{0}\"")?.into_bytes();
    for b in &mut non_utf8 {
        if *b == 0 {
            *b = 0xff;
        }
    }
    let mut non_utf8 = legit(Some(b64.encode(&non_utf8)));
    non_utf8.base64 = true;
    let mut form = legit(Some(base.clone()));
    form.content_type = Some("application/x-www-form-urlencoded");
    let mut query = legit(Some(base.clone()));
    query.query = Some(("x", "1"));
    let no = (r#""is_online":false"#, r#""is_online":"no""#);
    let mut cases: Vec<(String, &str, Req, u16, String)> = vec![
        (
            "empty-body".into(),
            "apigw-v2",
            legit(None),
            400,
            "error:.".into(),
        ),
        (
            "wrong-type".into(),
            "apigw-v2",
            with(r#""amount":441.59"#, r#""amount":"441.59""#)?,
            400,
            "error:transaction.amount".into(),
        ),
        (
            "missing-field".into(),
            "apigw-v2",
            with(r#""mcc":"5411","#, "")?,
            400,
            "error:merchant".into(),
        ),
        (
            "null-field".into(),
            "apigw-v2",
            with(r#""is_online":false"#, r#""is_online":null"#)?,
            400,
            "error:terminal.is_online".into(),
        ),
        (
            "nan".into(),
            "apigw-v2",
            with(r#""amount":441.59"#, r#""amount":NaN"#)?,
            400,
            "error:transaction.amount".into(),
        ),
        (
            "bad-timestamp".into(),
            "apigw-v2",
            with(r#""2027-07-09T16:31:06Z""#, r#""2027-02-30T16:31:06Z""#)?,
            400,
            "error:transaction.requested_at".into(),
        ),
        (
            "positional-array".into(),
            "apigw-v2",
            with(
                r#"{"is_online":false,"card_present":true,"km_from_home":33.8814492067}"#,
                "[false,true,33.88]",
            )?,
            400,
            "error:terminal".into(),
        ),
        (
            "non-utf8".into(),
            "apigw-v2",
            non_utf8,
            400,
            "error:.".into(),
        ),
        (
            "form-content-type".into(),
            "apigw-v2",
            form,
            415,
            "error".into(),
        ),
        (
            "query-string".into(),
            "apigw-v2",
            query,
            200,
            valid_case("base")?.expected.clone(),
        ),
        (
            "wrong-type-v1".into(),
            "apigw-v1",
            with(no.0, no.1)?,
            400,
            "error:terminal.is_online".into(),
        ),
        (
            "wrong-type-function-url".into(),
            "function-url",
            with(no.0, no.1)?,
            400,
            "error:terminal.is_online".into(),
        ),
        (
            "wrong-type-alb".into(),
            "alb",
            with(no.0, no.1)?,
            400,
            "error:terminal.is_online".into(),
        ),
    ];
    for name in [
        "extra_fields",
        "avg_amount_zero",
        "mcc_unknown",
        "edge_negative_amount",
        "edge_huge_amount",
        "edge_km_current_negative",
        "edge_installments_zero",
        "edge_last_later",
        "edge_last_null",
    ] {
        let c = valid_case(name)?;
        cases.push((
            name.replace('_', "-"),
            "apigw-v2",
            legit(Some(c.body.clone())),
            200,
            c.expected.clone(),
        ));
    }
    let mut hostile = vec!["event\tstatus\tbody".to_string()];
    for (name, source, req, status, answer) in cases {
        files.insert(
            format!("hostile/{name}.json"),
            event(source, &req)?.into_bytes(),
        );
        hostile.push(format!("hostile/{name}.json\t{status}\t{answer}"));
    }
    files.insert(
        "hostile/expected.tsv".into(),
        (hostile.join("\n") + "\n").into_bytes(),
    );
    Ok(files)
}

/// Files whose content differs from what [`generate`] makes (or that are missing).
fn stale(files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    files
        .iter()
        .filter(|(rel, content)| {
            std::fs::read(events_dir().join(rel)).ok().as_ref() != Some(*content)
        })
        .map(|(rel, _)| rel.clone())
        .collect()
}

pub fn run(a: Args) -> Result<()> {
    let files = generate()?;
    let stale = stale(&files);
    if a.check {
        let ok = stale.is_empty();
        let figures = format!("{} files, {} differ {:?}", files.len(), stale.len(), stale);
        return crate::report::verdict("lambda events", ok, &figures, &stale);
    }
    for rel in &stale {
        let path = events_dir().join(rel);
        std::fs::create_dir_all(path.parent().expect("below events/"))?;
        std::fs::write(&path, &files[rel])?;
    }
    let figures = format!(
        "{} files in events/, {} rewritten",
        files.len(),
        stale.len()
    );
    crate::report::verdict("lambda events", true, &figures, &stale)
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
