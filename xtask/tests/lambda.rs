//! The Lambda gate's verdict, log checks, events, emulator, package and templates through the
//! library's API.

use serde_json::{json, Value as Json};
use std::path::PathBuf;
use xtask::lambda::emulator::{descendants, Memory, Session, Settings};
use xtask::lambda::events::{cases, events_dir, failure, read_event, replay, request_body};
use xtask::lambda::events::{parse_table, spread, Answer, Case, Expect};
use xtask::lambda::gate::{judge, Emulated, Gathered, EMULATED_VERSION, FUNCTION_NAME};
use xtask::lambda::hook;
use xtask::lambda::image::{from_zip_template, TEMPLATE};
use xtask::lambda::logs::{check, Init, Line, Log};
use xtask::lambda::package::{parameters_for, Package, LIMIT_UNZIPPED};
use xtask::lambda::preflight::{advice, has_credentials, Limit};
use xtask::lambda::sam::FUNCTION;
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

#[test]
fn log_lines_are_sorted_by_origin() {
    let text = format!("30 Nov 2026 14:52:00,123 [INFO] (rapid) exec './bootstrap' (cwd=/x)\n{INIT}\n\
        START RequestId: 1 Version: $LATEST\nINIT REPORT(durationMs: 3.25)\nEND RequestId: 1\n\
        REPORT RequestId: 1\tInit Duration: 0.31 ms\tDuration: 4.50 ms\tBilled Duration: 5 ms\n{FAILED}\n\
        REPORT RequestId: 2\tDuration: 0.75 ms\tBilled Duration: 1 ms\nsomething else\n{{not json\n");
    let log = Log::parse(&text);
    assert_eq!((log.init_report_ms, &log.durations_ms[..]), (Some(3.25), &[4.5, 0.75][..]));
    let messages: Vec<&str> = log.lines.iter().map(Line::message).collect();
    assert_eq!(messages, ["index ready", "request failed"]);
    assert_eq!(
        (log.other, log.crashed),
        (vec!["something else".into(), "{not json".into()], false)
    );
    assert!(Log::parse("thread 'main' panicked at x").crashed);
}

/// The EMF documents of `approved` decisions at score 0 and `bad` refused bodies, as the
/// function writes them (one line each).
fn emf(approved: u64, bad: u64) -> String {
    let mut counts = function::metrics::Counters::default();
    counts.decisions[0] = approved;
    counts.rejected[function::handler::Reason::BadBody.index()] = bad;
    let index = index_pack::format::Identity {
        references_sha256: "ab".into(),
        references: 3_000_000,
        first_position: 0,
        end_position: 3_000_000,
        part: index_pack::format::SetPart::Whole,
        format_version: 6,
        codec: "i16".into(),
        crc32: "0000000f".into(),
        packer: "index-pack 0.1.0".into(),
        edited_by: Vec::new(),
    };
    let emitter = function::metrics::Emitter { function: FUNCTION_NAME, version: EMULATED_VERSION };
    counts.emf(&emitter, &[index], 1).join("\n") + "\n"
}

fn hook_run(status: &str, wrong: u64) -> hook::Run {
    let first = (wrong > 0).then_some("edge-1: expected 0.6, got 0.8");
    let answer =
        serde_json::json!({"status": status, "cases": 24, "wrong": wrong, "first_wrong": first});
    let reported = hook::Reported {
        deployment_id: "d-XTASK0001".into(),
        lifecycle_event_hook_execution_id: "xtask-pretraffic-1".into(),
        status: status.into(),
    };
    hook::Run { answer, reported: vec![reported] }
}

/// A run of one bad event and two replayed payloads, the second wrong when `mismatch`.
fn gathered(mismatch: bool) -> Gathered {
    let sha = "198e69c5fa0e".repeat(5);
    let (zipped_bytes, unzipped_bytes) = (44 << 20, 92 << 20);
    let package =
        Package { sha256: sha.clone(), zipped_bytes, unzipped_bytes, ..Package::default() };
    let reports =
        ["16.1", "0.9", "0.4", "0.5"].map(|d| format!("REPORT RequestId: x\tDuration: {d} ms\n"));
    // The init line of a prefaulted index, 12.2 ms in.
    let init =
        INIT.replace(r#""prefault":false,"init_us":300"#, r#""prefault":true,"init_us":12200"#);
    let log = format!(
        "{init}\nINIT REPORT(durationMs: 14.2)\n{FAILED}\n{}{}",
        reports.concat(),
        emf(2, 1)
    );
    let case = |event: &str, status, expect| Case { event: event.into(), status, expect };
    let scored = Expect::Json(serde_json::json!({"approved": true, "fraud_score": 0.0}));
    let cases = vec![
        case("first invocation", 200, Expect::Json(serde_json::json!({"ready": true}))),
        case("alb/malformed.json", 400, Expect::Error),
        case("entry 0", 200, scored.clone()),
        case("entry 13", 200, scored),
    ];
    let right = r#"{"approved":true,"fraud_score":0.0}"#;
    let last = if mismatch { r#"{"approved":false,"fraud_score":0.6}"# } else { right };
    let bodies = [(200, r#"{"ready":true}"#), (400, r#"{"error":"x"}"#), (200, right), (200, last)];
    let rtts = [16.7, 1.0, 0.7, 0.8];
    let answers = bodies.iter().zip(rtts).map(|((s, b), r)| Ok((answer(*s, b), r))).collect();
    let session =
        Session { launch_to_first_ms: 20.0, answers, memory: None, log: Log::parse(&log) };
    let expected = Ok(Log::parse(&init).lines[0].typed().unwrap());
    let settings = Settings { memory_mb: 512, timeout_s: 3, prefault: None, ..Settings::default() };
    Gathered {
        validate: Ok("template.yaml is a valid SAM Template".into()),
        package: Ok(package),
        emulated: Some(Ok(Emulated { session, cases, events: 1, expected, settings })),
        hook: Some(Ok(hook_run("Succeeded", 0))),
        edited: Some(Ok((hook_run("Succeeded", 0), hook_run("Failed", 1)))),
        sam_build: Some(Ok((".aws-sam/build/FraudScoreFunction/bootstrap".into(), sha))),
    }
}

#[test]
fn a_clean_run_passes_every_step_and_reports_its_figures() {
    let j = judge(&gathered(false), false, 175.0);
    let failed: Vec<_> = j.steps.iter().filter(|s| !s.ok).collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(j.steps.len(), 13);
    assert_eq!(
        j.figures,
        "13/13 steps; events 1/1; replay 2 payloads, 0 mismatches; logs: 1 init + 1 failure lines for 1 failed requests; \
         cold first invocation 16.7 ms (INIT REPORT 14.20 ms); warm Duration p50 0.50 ms p99 0.90 ms; \
         package 44.0 MB zipped, 92.0 MB unzipped; sam build sha256 = tested (198e69c5fa0e); 175 s"
    );
}

#[test]
fn a_wrong_answer_or_another_binary_fails_its_step() {
    let j = judge(&gathered(true), false, 1.0);
    let replay = j.steps.iter().find(|s| s.name == "replay").unwrap();
    let shown = replay.result.contains("1 mismatches; first: entry 13: got 200");
    assert!(!replay.ok && shown, "{replay:?}");
    let mut g = gathered(false);
    g.sam_build = Some(Ok((PathBuf::from("b"), "0".repeat(64))));
    let j = judge(&g, false, 1.0);
    assert!(!j.steps.last().unwrap().ok);
    assert!(j.figures.contains("sam build sha256 000000000000 != tested 198e69c5fa0e"));
    // The metrics must count every answer: one approval missing fails their step.
    let mut g = gathered(false);
    if let Some(Ok(e)) = &mut g.emulated {
        e.session.log.emf = Log::parse(&emf(1, 1)).emf;
    }
    let metrics = judge(&g, false, 1.0).steps.into_iter().find(|s| s.name == "metrics (EMF)");
    let result = metrics.map(|s| (s.ok, s.result));
    let want = "EMF Approved Function=test_function: Some(1), the cases expect Some(2)";
    assert_eq!(result, Some((false, want.to_string())));
    // A hook that found a wrong answer fails the gate.
    let mut g = gathered(false);
    g.hook = Some(Ok(hook_run("Failed", 5)));
    let step = judge(&g, false, 1.0).steps.into_iter().find(|s| s.name.contains("hook"));
    let step = step.unwrap();
    assert!(!step.ok && step.result.contains("first wrong: edge-1"), "{step:?}");
    // A hook over the edited set that passes the base without the delta has not tested it.
    let mut g = gathered(false);
    g.edited = Some(Ok((hook_run("Succeeded", 0), hook_run("Succeeded", 0))));
    let step = judge(&g, false, 1.0).steps.into_iter().find(|s| s.name.contains("edit delta"));
    assert!(step.is_some_and(|s| !s.ok));
    let mut g = gathered(false);
    g.sam_build = None;
    assert!(judge(&g, true, 1.0).figures.contains("sam build LEFT OUT (--no-sam-build)"));
    assert!(judge(&g, false, 1.0).figures.contains("sam build failed"));
}

#[test]
fn tables_are_read_and_the_replay_takes_the_edges() {
    let t = "event\tstatus\tbody\na.json\t400\terror:x.y\nb.json\t200\t{\"a\":1}\nc.json\t405\terror\nd.json\t200\tready\n";
    let expects: Vec<Expect> = parse_table(t).unwrap().into_iter().map(|c| c.expect).collect();
    assert_eq!(
        expects,
        [
            Expect::ErrorAt("x.y".into()),
            Expect::Json(json!({"a": 1})),
            Expect::Error,
            Expect::Ready
        ]
    );
    assert!(parse_table("event\tstatus\tbody\na.json\t200\t{no\n").is_err());
    assert!(parse_table("event\tstatus\tbody\na.json\t200\n").is_err());
    let scores = [0.0, 0.6, 0.0, 0.0, 0.6, 1.0];
    assert_eq!(
        (spread(&scores, 2, true), spread(&scores, 2, false)),
        (vec![0, 3, 1, 4], vec![0, 3])
    );
}

#[test]
fn memory_from_proc_status_and_descendants_from_proc() {
    let status =
        "Name:\tbootstrap\nVmHWM:\t   93824 kB\nRssAnon:\t     412 kB\nRssFile:\t   93400 kB\n";
    let want = Memory { peak_rss_mb: 91.625, rss_anon_mb: 0.40234375, rss_file_mb: 91.2109375 };
    assert_eq!(Memory::parse(status), Some(want));
    assert_eq!(Memory::parse("Name:\tx\n"), None);
    let child = duct::cmd!("sleep", "5").start().unwrap();
    let found = descendants(std::process::id());
    child.kill().unwrap();
    assert!(found.contains(&child.pids()[0]), "{found:?}");
}

#[test]
fn which_reservations_an_account_allows() {
    let limit = |c, u| Limit { concurrent_executions: c, unreserved_concurrent_executions: u };
    for ((c, u), max) in
        [((10, 10), None), ((100, 100), None), ((101, 101), Some(1)), ((1000, 900), Some(800))]
    {
        assert_eq!(advice(&limit(c, u)).0, max, "{c} {u}");
    }
    let none = advice(&limit(10, 10)).1;
    assert!(none.contains("account limit 10, unreserved 10: ReservedConcurrency -1 only"));
    assert!(advice(&limit(1000, 1000)).1.contains("or 1..=900"));
    let unset = "      Name   Value   Type  Location\n access_key     <not set>   None  None\n";
    let set = " access_key     ****************ABCD shared-credentials-file\n";
    assert_eq!([unset, set, ""].map(has_credentials), [false, true, false]);
}
