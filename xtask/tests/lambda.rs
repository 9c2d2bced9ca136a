//! The Lambda gate's log checks, package and image template through the library's API.

use xtask::lambda::image::{from_zip_template, TEMPLATE};
use xtask::lambda::logs::{check, Init, Log};
use xtask::lambda::package::{parameters_for, Package, LIMIT_UNZIPPED};
use xtask::lambda::sam::FUNCTION;
use xtask::util::root;

fn want() -> Init {
    Init { init_us: 0, ..Log::parse(INIT).lines[0].typed().unwrap() }
}

const INIT: &str = r#"{"level":"INFO","fields":{"message":"index ready","kernels":"avx2","codec":"i16","index_source_sha256":"ab","artifact_crc32":"0000000f","artifact_bytes":10,"prefault":false,"init_us":300}}"#;
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
    let other = Init { artifact_crc32: "00000010".into(), ..want() };
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
    let t: yaml_serde::Value = yaml_serde::from_str(&committed).unwrap();
    let f = &t["Resources"][FUNCTION];
    assert_eq!(f["Properties"]["PackageType"], "Image");
    assert!(f["Properties"].get("CodeUri").is_none() && f["Properties"].get("Runtime").is_none());
    assert_eq!(f["Metadata"]["Dockerfile"], "Dockerfile");
}
