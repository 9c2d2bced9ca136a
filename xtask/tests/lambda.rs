//! The Lambda gate's log checks, package and image template through the library's API.

use serde_json::Value as Json;
use std::path::PathBuf;
use xtask::lambda::events::{cases, events_dir, failure, read_event, replay, request_body};
use xtask::lambda::events::{Answer, Case, Expect};
use xtask::lambda::image::{from_zip_template, TEMPLATE};
use xtask::lambda::logs::{check, Init, Log};
use xtask::lambda::package::{parameters_for, Package, LIMIT_UNZIPPED};
use xtask::lambda::sam::{defaults, FUNCTION};
use xtask::util::{self, root};
use yaml_serde::Value;

fn body(event: &str) -> Vec<u8> {
    request_body(event).unwrap()
}

fn answer(status: u16, body: &str) -> Answer {
    let content_type = Some("application/json".into());
    Answer { status, content_type, allow: None, body: body.into() }
}

fn want() -> Init {
    Init { init_us: 0, ..Log::parse(INIT).lines[0].typed().unwrap() }
}

const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","role":"Http","kernels":"avx2","codec":"i16","index_references_sha256":"ab","index_references":3000000,"index_part":"whole","index_format_version":5,"index_crc32":"0000000f","index_packer":"index-pack 0.1.0","artifact_bytes":10,"deltas":0,"delta_references":0,"prefault":false,"init_us":300}}"#;
const FAILED: &str = r#"{"level":"WARN","fields":{"message":"request failed","status":400,"method":"POST","path":"/fraud-score","field":"transaction.amount","not_logged":0},"span":{"requestId":"x"}}"#;
const CLOSED: &str = r#"{"level":"INFO","fields":{"message":"the runtime API went away, exiting","invocations":3,"error":"connection closed"}}"#;

#[test]
fn one_init_line_and_one_line_per_failure_pass() {
    let log = Log::parse(&format!("{INIT}\n{FAILED}\n"));
    let r = check(&log, &[200, 400, 200], &want(), false);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!((r.failure_lines, r.bad_requests, r.init.unwrap().init_us), (1, 1, 300));
    let r = check(&Log::parse(&format!("{INIT}\n{FAILED}\n{CLOSED}\n")), &[400], &want(), false);
    assert!(r.problems.is_empty() && r.closing_line, "{:?}", r.problems);
    // Rate-limited: a line for the first failure, one counting two left out, the last left
    // out for a line that never came.
    let counted = FAILED.replace(r#""not_logged":0"#, r#""not_logged":2"#);
    let text = format!("{INIT}\n{FAILED}\n{counted}\n");
    let r = check(&Log::parse(&text), &[400, 200, 400, 400, 400, 400], &want(), false);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!((r.failure_lines, r.failures_not_logged), (2, 2));
}

#[test]
fn a_line_per_success_a_logged_body_a_missing_line_another_index_or_mode_fail() {
    let extra = r#"{"level":"INFO","fields":{"message":"answered","status":200}}"#;
    let body = FAILED.replace(r#""field""#, r#""body":"{}","field""#);
    let other = Init { index_crc32: "00000010".into(), ..want() };
    let miscounted = FAILED.replace(r#""not_logged":0"#, r#""not_logged":1"#);
    let cases: [(String, &[u16], Init, bool); 10] = [
        (format!("{INIT}\n{FAILED}\n{miscounted}\n"), &[400, 400], want(), false),
        (format!("{INIT}\n{CLOSED}\n{FAILED}\n"), &[400], want(), false),
        (format!("{INIT}\n{CLOSED}\n{CLOSED}\n"), &[200], want(), false),
        (format!("{INIT}\n{}\n", CLOSED.replace("INFO", "ERROR")), &[200], want(), false),
        (format!("{INIT}\n{extra}\n{FAILED}\n"), &[200, 400], want(), false),
        (format!("{INIT}\n{body}\n"), &[400], want(), false),
        (format!("{INIT}\n"), &[400], want(), false),
        (format!("{INIT}\n"), &[200], want(), true),
        (format!("{INIT}\n"), &[200], other, false),
        (format!("{INIT}\nstray\n"), &[200], want(), false),
    ];
    for (text, statuses, want, prefault) in cases {
        let r = check(&Log::parse(&text), statuses, &want, prefault);
        assert!(!r.problems.is_empty(), "{text}");
    }
}

#[test]
fn a_large_package_gets_the_memory_and_residency_of_its_size() {
    let memory = |m, prefault| Some(format!("FunctionMemoryMB={m} PrefaultIndex={prefault}"));
    for (bytes, want) in
        [(96 << 20, None), (912_109_912, memory(1024, 1)), (3_028_013_216, memory(3072, 0))]
    {
        assert_eq!(parameters_for(bytes), want);
    }
}

#[test]
fn a_package_over_the_zip_limit_names_the_image_path() {
    let fits = Package { unzipped_bytes: LIMIT_UNZIPPED, ..Package::default() };
    assert!(fits.fits_a_zip().is_ok());
    let over = Package { unzipped_bytes: LIMIT_UNZIPPED + 1, ..Package::default() };
    let why = over.fits_a_zip().unwrap_err().to_string();
    assert!(why.contains("over Lambda's 250 MiB (262144000 bytes) limit"), "{why}");
    assert!(why.contains("cargo xtask lambda build --image"), "{why}");
    assert!(why.contains("sam build --template template-image.yaml"), "{why}");
}

#[test]
fn the_image_template_is_the_zip_template_with_an_image_function() {
    let zip = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let committed = std::fs::read_to_string(root().join(TEMPLATE)).unwrap();
    let written = from_zip_template(&zip).unwrap();
    assert!(committed == written, "{TEMPLATE} is stale: run `cargo xtask lambda image-template`");
    let t: Value = yaml_serde::from_str(&committed).unwrap();
    let f = &t["Resources"][FUNCTION];
    assert_eq!(f["Properties"]["PackageType"], "Image");
    assert!(f["Properties"].get("CodeUri").is_none() && f["Properties"].get("Runtime").is_none());
    assert_eq!(f["Metadata"]["Dockerfile"], "Dockerfile");
    // Everything else is the zip template's: the other resources (the hook is a zip function
    // in both), the parameters, the outputs.
    let z: Value = yaml_serde::from_str(&zip).unwrap();
    let (mut zr, mut ir) = (z["Resources"].clone(), t["Resources"].clone());
    for r in [&mut zr, &mut ir] {
        r.as_mapping_mut().unwrap().remove(FUNCTION);
    }
    assert_eq!(zr, ir);
    for section in ["Parameters", "Conditions", "Outputs", "Globals"] {
        assert_eq!(z[section], t[section], "{section}");
    }
    let keep = ["CodeUri", "Handler", "Runtime", "PackageType"];
    let props = |v: &Value| -> Value {
        let mut p = v["Resources"][FUNCTION]["Properties"].clone();
        keep.iter().for_each(|k| drop(p.as_mapping_mut().unwrap().remove(*k)));
        p
    };
    assert_eq!(props(&z), props(&t));
}

#[test]
fn the_checked_in_events_are_their_tables_and_carry_their_cases() {
    let cases = cases().unwrap();
    let listed = |d: PathBuf| std::fs::read_dir(d).unwrap().flatten().map(|e| e.path());
    let files = listed(events_dir()).filter(|d| d.is_dir()).flat_map(listed);
    let files = files.map(|f| f.strip_prefix(events_dir()).unwrap().display().to_string());
    let mut files: Vec<String> =
        files.filter(|f| f.ends_with(".json") && !f.starts_with("payloads/")).collect();
    let mut named: Vec<String> = cases.iter().map(|c| c.event.clone()).collect();
    files.sort();
    named.sort();
    assert_eq!((files, cases.len()), (named, 45));
    // Each source's scored events carry the payloads of events/payloads/.
    for (s, n) in ["apigw-v2", "apigw-v1", "function-url", "alb"]
        .iter()
        .flat_map(|s| ["legit", "fraud", "null-last", "malformed"].map(|n| (s, n)))
    {
        let payload = read_event(&format!("payloads/{n}.json")).unwrap();
        assert_eq!(body(&format!("{s}/{n}.json")), payload.trim_ascii_end(), "{s}/{n}");
    }
    // The valid hostile events carry hostile-valid.json's bodies and the labeller's answers.
    let text = std::fs::read(root().join("local-runner/tests/data/hostile-valid.json")).unwrap();
    let valid: Vec<Json> = serde_json::from_slice(&text).unwrap();
    let ok: Vec<&Case> =
        cases.iter().filter(|c| c.event.starts_with("hostile/") && c.status == 200).collect();
    for c in &ok {
        let name = c.event["hostile/".len()..].trim_end_matches(".json").replace('-', "_");
        let name = if name == "query_string" { "base".into() } else { name };
        let v = valid.iter().find(|v| v["name"] == name).unwrap();
        let want = Expect::Json(serde_json::from_str(v["expected"].as_str().unwrap()).unwrap());
        let got = (body(&c.event), &c.expect);
        assert_eq!(got, (v["body"].as_str().unwrap().into(), &want), "{}", c.event);
    }
    assert_eq!(ok.len(), 10);
}

#[test]
fn answers_of_every_encoding_are_read_and_judged() {
    let v2 = br#"{"statusCode":405,"headers":{"content-type":"application/json","allow":"POST"},"body":"{\"error\":\"method not allowed: use POST\"}","isBase64Encoded":false,"cookies":[]}"#;
    let case = |status, expect| Case { event: "x".into(), status, expect };
    assert_eq!(Answer::parse(v2).unwrap().mismatch(&case(405, Expect::Error)), None);
    let v1 = br#"{"statusCode":200,"headers":{},"multiValueHeaders":{"Content-Type":["application/json"]},"body":"eyJyZWFkeSI6dHJ1ZX0=","isBase64Encoded":true}"#;
    assert_eq!(Answer::parse(v1).unwrap(), answer(200, r#"{"ready":true}"#));
    let err = Answer::parse(br#"{"errorType":"Runtime.ExitError","errorMessage":"boom"}"#);
    assert_eq!(err.unwrap_err().to_string(), "function error Runtime.ExitError: boom");
    assert!(Answer::parse(b"{}").unwrap_err().to_string().starts_with("not a Lambda HTTP"));
    let refused = answer(400, r#"{"error":"merchant: missing field `mcc`"}"#);
    assert_eq!(refused.mismatch(&case(400, Expect::ErrorAt("merchant".into()))), None);
    let wrong = refused.mismatch(&case(400, Expect::ErrorAt("terminal".into()))).unwrap();
    let shown = r#"x: got 400 Some("application/json") allow None {"error""#;
    assert!(wrong.starts_with(shown), "{wrong}");
    let c = case(200, Expect::Error);
    assert_eq!(failure(&Err("gone".into()), &c).unwrap(), "x: gone");
}

#[test]
fn replayed_answers() {
    let sent = replay(3, false, |_| 2).unwrap();
    let (event, case): (Json, &Case) = (serde_json::from_slice(&sent[1].0).unwrap(), &sent[1].1);
    let entry = &util::test_entries().unwrap()[54_100 / 3];
    assert_eq!(
        (case.event.as_str(), event["body"].as_str()),
        ("entry 18033", Some(entry.request.get()))
    );
    let mut url: Json =
        serde_json::from_slice(&read_event("function-url/legit.json").unwrap()).unwrap();
    url["body"] = event["body"].clone();
    assert_eq!(event, url);
    let (approved, score) = (entry.expected_approved, entry.expected_fraud_score);
    let right = answer(200, &format!(r#"{{"approved":{approved},"fraud_score":{score:?}}}"#));
    let wrong = answer(200, &format!(r#"{{"approved":{},"fraud_score":{score:?}}}"#, !approved));
    assert!(right.mismatch(case).is_none() && wrong.mismatch(case).is_some());
}

/// The value at a dotted path (a number indexes a sequence), as YAML text.
fn at(t: &Value, path: &str) -> String {
    let v = path.split('.').fold(t, |v, k| k.parse::<usize>().map_or(&v[k], |i| &v[i]));
    yaml_serde::to_string(v).unwrap()
}

#[test]
fn the_template_keeps_its_defaults_role_and_one_bounded_endpoint() {
    let d = defaults().unwrap();
    assert!(d.memory_mb >= 128 && d.timeout_s >= 1 && d.cpus.is_none(), "{d:?}");
    let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let t: Value = yaml_serde::from_str(&text).unwrap();
    let r = t["Resources"].as_mapping().unwrap();
    let of_type = |kind: &str| r.iter().filter(|(_, v)| v["Type"] == kind).count();
    let conditional = |cond: &str| r.iter().filter(|(_, v)| v["Condition"] == cond).count();
    // The scorer's role and the deployment hook's.
    assert_eq!((of_type("AWS::IAM::Role"), of_type("AWS::Lambda::Url")), (2, 1));
    assert_eq!(["WithHttpApi", "WithAlarms", "PublicUrl"].map(conditional), [6, 2, 2]);
    // Everything that makes a second endpoint or invokes the function from elsewhere is
    // behind a condition; the Function URL is the only unconditional endpoint.
    for (_, v) in r.iter() {
        let kind = v["Type"].as_str().unwrap();
        let gated = kind.starts_with("AWS::ApiGateway") || kind == "AWS::Lambda::Permission";
        assert!(!gated || v.get("Condition").is_some(), "{v:?}");
    }
    let (f, role, stage) = (
        "Resources.FraudScoreFunction.Properties",
        "Resources.FraudScoreRole.Properties",
        "Resources.FraudScoreHttpApiStage.Properties.DefaultRouteSettings",
    );
    let statement = format!("{role}.Policies.0.PolicyDocument.Statement");
    // (path, what its YAML text holds): the role may only write its own log streams (no
    // managed policy; !GetAtt FraudScoreLogGroup.Arn), the function uses it (SAM would
    // otherwise make its own) and has no event of its own.
    let holds = [
        (format!("{f}.Role"), "FraudScoreRole.Arn"),
        (format!("{f}.LoggingConfig.LogGroup"), "FraudScoreLogGroup"),
        (format!("{f}.LoggingConfig.LogFormat"), "JSON"),
        // Deployed with its defaults, the function is never public and uncapped at once: a
        // flood of an unauthenticated URL could otherwise take every unreserved execution
        // environment of the account (docs/LAMBDA.md, "What a flood costs"). Its
        // ReservedConcurrency default -1 is AWS::NoValue: no reservation (an account of 10
        // allows none), nothing the account must leave free.
        ("Parameters.FunctionUrlAuthType.Default".into(), "AWS_IAM"),
        ("Parameters.ReservedConcurrency.Default".into(), "-1"),
        (
            "Conditions.HasReservedConcurrency".into(),
            "!Not\n- !Equals\n  - !Ref ReservedConcurrency\n  - -1\n",
        ),
        (
            format!("{f}.ReservedConcurrentExecutions"),
            "!If\n- HasReservedConcurrency\n- !Ref ReservedConcurrency\n- !Ref AWS::NoValue\n",
        ),
        (format!("{f}.Events"), "null"),
        (format!("{f}.FunctionUrlConfig"), "null"),
        (format!("{role}.ManagedPolicyArns"), "null"),
        (format!("{role}.Policies.1"), "null"),
        (format!("{statement}.1"), "null"),
        (format!("{statement}.0.Effect"), "Allow"),
        (format!("{statement}.0.Action"), "- logs:CreateLogStream\n- logs:PutLogEvents\n"),
        (format!("{statement}.0.Resource"), "FraudScoreLogGroup.Arn"),
        (format!("{stage}.ThrottlingBurstLimit"), "HttpApiThrottlingBurstLimit"),
        (format!("{stage}.ThrottlingRateLimit"), "HttpApiThrottlingRateLimit"),
        ("Resources.FraudScoreUrl.Properties.AuthType".into(), "FunctionUrlAuthType"),
        ("Parameters.FunctionUrlAuthType.AllowedValues".into(), "- NONE\n"),
        ("Parameters.EnableHttpApi.Default".into(), "false"),
        ("Parameters.EnableAlarms.Default".into(), "false"),
    ];
    for (path, want) in holds {
        assert!(at(&t, &path).contains(want), "{path}: {}", at(&t, &path));
    }
}

/// A deploy publishes a version; the endpoints call the alias, which CodeDeploy moves only after
/// the PreTraffic hook passed the new version, gradually, rolled back by the alarms; the hook
/// may invoke the scorer's versions and report to CodeDeploy, nothing more; the approval-rate
/// alarm reads the metrics the function writes (its namespace and names).
#[test]
fn the_alias_the_deployment_the_hook_and_the_alarms_are_wired_together() {
    for template in ["template.yaml", TEMPLATE] {
        let text = std::fs::read_to_string(root().join(template)).unwrap();
        let t: Value = yaml_serde::from_str(&text).unwrap();
        let (f, hook) =
            ("Resources.FraudScoreFunction.Properties", "Resources.PreTrafficHook.Properties");
        let hook_role = "Resources.PreTrafficHookRole.Properties.Policies.0.PolicyDocument";
        let rate = "Resources.FraudScoreApprovalRateAlarm.Properties.Metrics";
        let ns = function::metrics::NAMESPACE;
        let holds: Vec<(String, String)> = [
            (format!("{f}.AutoPublishAlias"), "live"),
            (format!("{f}.DeploymentPreference.Type"), "!Ref DeploymentType"),
            (format!("{f}.DeploymentPreference.Alarms.0"), "!Ref FraudScoreErrorsAlarm"),
            (format!("{f}.DeploymentPreference.Alarms.1"), "!Ref FraudScoreApprovalRateAlarm"),
            (format!("{f}.DeploymentPreference.Hooks.PreTraffic"), "!Ref PreTrafficHook"),
            ("Parameters.DeploymentType.Default".into(), "Canary10Percent5Minutes"),
            // Every endpoint and permission is on the alias, never on $LATEST.
            (
                "Resources.FraudScoreUrl.Properties.TargetFunctionArn".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreUrlPublicInvoke.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreUrlPublicInvokeUrl.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreHttpApiIntegration.Properties.IntegrationUri".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreHttpApiInvoke.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            // The hook: a name SAM's CodeDeploy role may invoke, the new version as its target.
            (format!("{hook}.FunctionName"), "CodeDeployHook_"),
            (
                format!("{hook}.Environment.Variables.FRAUD_TARGET"),
                "!Ref FraudScoreFunction.Version",
            ),
            (format!("{hook}.DeploymentPreference"), "null"),
            (format!("{hook_role}.Statement.0.Action"), "lambda:InvokeFunction"),
            (format!("{hook_role}.Statement.0.Resource"), "${FraudScoreFunction.Arn}:*"),
            (
                format!("{hook_role}.Statement.1.Action"),
                "codedeploy:PutLifecycleEventHookExecutionStatus",
            ),
            (format!("{hook_role}.Statement.3"), "null"),
            // The rollback alarms: errors of the alias; the approval rate of the function's
            // own metrics, unconditional (the deployment names them).
            (
                "Resources.FraudScoreErrorsAlarm.Properties.Dimensions.1.Value".into(),
                "${FraudScoreFunction}:live",
            ),
            ("Resources.FraudScoreErrorsAlarm.Condition".into(), "null"),
            ("Resources.FraudScoreApprovalRateAlarm.Condition".into(), "null"),
            (format!("{rate}.0.MetricStat.Metric.Namespace"), ns),
            (format!("{rate}.0.MetricStat.Metric.MetricName"), "Approved"),
            (format!("{rate}.1.MetricStat.Metric.Namespace"), ns),
            (format!("{rate}.1.MetricStat.Metric.MetricName"), "Denied"),
            (format!("{rate}.3.Expression"), "ApprovalRateLowPercent"),
            (format!("{rate}.3.Expression"), "ApprovalRateHighPercent"),
            (format!("{rate}.3.Expression"), "ApprovalRateMinDecisions"),
        ]
        .into_iter()
        .map(|(p, w)| (p, w.to_string()))
        .collect();
        for (path, want) in holds {
            let got = at(&t, &path);
            assert!(got.contains(&want), "{template}: {path}: {got}, want {want}");
        }
    }
}
