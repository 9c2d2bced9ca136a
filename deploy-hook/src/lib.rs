//! # deploy-hook: a new index is checked before it takes traffic
//!
//! Every new reference set is a new function version. A gradual deployment (SAM's
//! `DeploymentPreference`, CodeDeploy) runs this check as its `PreTraffic` hook, before any
//! traffic shifts to the new version: the version is invoked with a labelled sample shipped in
//! the hook's package (`labeller deploy-sample`: both decisions, the vote's edge, ties across
//! 5th place, a malformed body, each with the answer the labeller's brute force gives over the
//! references the index was meant to be built from), and any wrong answer or failed invocation
//! fails the deployment: CodeDeploy then stops it and the alias stays on the old version. An
//! index built from the wrong data, or by a packer with a bug, is caught here, not by clients.
//!
//! [`check`] is the judgement, over any way of invoking the version ([`Invoke`]); the
//! `pretraffic` binary invokes it through the Lambda Invoke API and reports to CodeDeploy.

use labeller::sample::SampleCase;
use serde::Deserialize;

/// Sends one Function URL event to the version under test and returns the raw response
/// payload (or why the invocation failed).
pub trait Invoke {
    fn invoke(&mut self, event: &[u8]) -> Result<Vec<u8>, String>;
}

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub cases: usize,
    /// The first case answered wrongly (or whose invocation failed), named, with what was
    /// expected and what came; `None` when every case was right.
    pub first_wrong: Option<String>,
    pub wrong: usize,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.first_wrong.is_none() && self.cases > 0
    }
}

/// The Function URL event (payload format 2.0) of `POST /fraud-score` with `body`.
pub fn event(body: &str) -> Vec<u8> {
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/fraud-score",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "user-agent": "pretraffic-hook"},
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "pretraffic",
            "domainName": "pretraffic.lambda-url.local",
            "domainPrefix": "pretraffic",
            "http": {
                "method": "POST",
                "path": "/fraud-score",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "pretraffic-hook"
            },
            "requestId": "pretraffic",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1767225600000_u64
        },
        "isBase64Encoded": false,
        "body": body
    })
    .to_string()
    .into_bytes()
}

/// A Function URL response, as the function returns it.
#[derive(Deserialize)]
struct UrlResponse {
    #[serde(rename = "statusCode")]
    status_code: u16,
    #[serde(default)]
    body: String,
    #[serde(default, rename = "isBase64Encoded")]
    is_base64_encoded: bool,
}

/// Checks one case's answer; `Err` says what is wrong.
fn judge(case: &SampleCase, payload: &[u8]) -> Result<(), String> {
    let response: UrlResponse = serde_json::from_slice(payload).map_err(|e| {
        let shown = String::from_utf8_lossy(&payload[..payload.len().min(200)]);
        format!("not an HTTP response ({e}): {shown}")
    })?;
    let body = if response.is_base64_encoded {
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&response.body)
            .map_err(|e| format!("a body that is not base64: {e}"))?;
        String::from_utf8_lossy(&raw).into_owned()
    } else {
        response.body
    };
    let got = serde_json::from_str::<serde_json::Value>(&body).ok();
    let right = response.status_code == case.status
        && match (case.approved, case.fraud_score) {
            (Some(approved), Some(score)) => got.as_ref().is_some_and(|v| {
                v["approved"].as_bool() == Some(approved)
                    && v["fraud_score"].as_f64() == Some(score)
            }),
            _ => got.as_ref().is_some_and(|v| v["error"].is_string()),
        };
    if right {
        return Ok(());
    }
    let want = match (case.approved, case.fraud_score) {
        (Some(a), Some(s)) => format!(r#"{} {{"approved":{a},"fraud_score":{s:.1}}}"#, case.status),
        _ => format!(r#"{} {{"error":...}}"#, case.status),
    };
    Err(format!(
        "expected {want}, got {} {body}",
        response.status_code
    ))
}

/// Longest wait for one case's answer (a warm invocation takes milliseconds, the new version's
/// first one its init).
pub const CASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Kept for the report to CodeDeploy after the last case, out of the hook's own time.
pub const REPORT_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the next case may take when `remaining` of the hook's own time is left and
/// `cases` cases are still to run: an equal share of what is left after [`REPORT_MARGIN`], at
/// most [`CASE_TIMEOUT`]. So the hook always reports before its own timeout (a hook that never
/// reports leaves CodeDeploy waiting an hour).
pub fn case_timeout(remaining: std::time::Duration, cases: usize) -> std::time::Duration {
    let share = remaining.saturating_sub(REPORT_MARGIN) / cases.max(1) as u32;
    share.min(CASE_TIMEOUT)
}

/// Invokes the version once per case, in order, and judges every answer.
pub fn check(sample: &[SampleCase], target: &mut impl Invoke) -> Verdict {
    let mut verdict = Verdict {
        cases: sample.len(),
        first_wrong: None,
        wrong: 0,
    };
    for case in sample {
        let outcome = target
            .invoke(&event(&case.body))
            .map_err(|e| format!("the invocation failed: {e}"))
            .and_then(|payload| judge(case, &payload));
        if let Err(why) = outcome {
            verdict.wrong += 1;
            verdict
                .first_wrong
                .get_or_insert_with(|| format!("{} ({}): {why}", case.name, case.kind));
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, approved: Option<bool>, score: Option<f64>, status: u16) -> SampleCase {
        SampleCase {
            name: name.into(),
            kind: if status == 200 {
                "approved".into()
            } else {
                "bad_request".into()
            },
            body: "{}".into(),
            status,
            approved,
            fraud_score: score,
        }
    }

    /// Answers every event with the responses given, in order.
    struct Replay(Vec<Result<String, String>>);
    impl Invoke for Replay {
        fn invoke(&mut self, event: &[u8]) -> Result<Vec<u8>, String> {
            let v: serde_json::Value = serde_json::from_slice(event).unwrap();
            assert_eq!(v["rawPath"], "/fraud-score");
            assert_eq!(v["requestContext"]["http"]["method"], "POST");
            self.0.remove(0).map(String::into_bytes)
        }
    }

    fn response(status: u16, body: &str) -> Result<String, String> {
        Ok(serde_json::json!({"statusCode": status, "headers": {}, "body": body, "isBase64Encoded": false}).to_string())
    }

    #[test]
    fn right_answers_pass_and_the_first_wrong_one_is_named() {
        let sample = [
            case("approved-1", Some(true), Some(0.0), 200),
            case("denied-1", Some(false), Some(1.0), 200),
            case("bad-request", None, None, 400),
        ];
        let right = || {
            Replay(vec![
                response(200, r#"{"approved":true,"fraud_score":0.0}"#),
                response(200, r#"{"approved":false,"fraud_score":1.0}"#),
                response(400, r#"{"error":"x"}"#),
            ])
        };
        let v = check(&sample, &mut right());
        assert!(v.passed(), "{v:?}");
        let mut wrong = right();
        wrong.0[1] = response(200, r#"{"approved":false,"fraud_score":0.8}"#);
        wrong.0[2] = Err("timed out".into());
        let v = check(&sample, &mut wrong);
        assert!(!v.passed());
        assert_eq!(v.wrong, 2);
        let first = v.first_wrong.unwrap();
        assert!(first.starts_with("denied-1 (approved): expected 200 {\"approved\":false,\"fraud_score\":1.0}, got 200"), "{first}");
        // A refusal that is not an error body, and an answer that is not HTTP, are wrong too.
        let mut odd = right();
        odd.0[2] = response(400, "nope");
        assert!(!check(&sample, &mut odd).passed());
        assert!(
            !check(&[], &mut right()).passed(),
            "an empty sample checks nothing"
        );
    }

    /// 25 cases that each took the function's longest timeout (30 s) would outlast the hook's
    /// 120 s: the share keeps the whole check and the report inside the hook's time.
    #[test]
    fn every_case_waits_a_share_of_the_hook_s_time() {
        use std::time::Duration;
        let hook = Duration::from_secs(120);
        let mut left = hook;
        for cases in (1..=25).rev() {
            let t = case_timeout(left, cases);
            assert!(t <= CASE_TIMEOUT);
            left -= t; // each case takes all of its share
        }
        assert!(left >= REPORT_MARGIN, "{left:?} left to report");
        assert_eq!(case_timeout(Duration::from_secs(3), 4), Duration::ZERO);
        assert_eq!(case_timeout(Duration::from_secs(600), 2), CASE_TIMEOUT);
    }
}
