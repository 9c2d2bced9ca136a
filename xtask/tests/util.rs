//! The shared helpers (`xtask::util`) through the library's API.

use anyhow::bail;
use std::path::PathBuf;
use std::time::Duration;
use xtask::util::*;

/// A scratch path of this test process under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()))
}

#[test]
fn statistics_dates_and_spreads() {
    assert!(Quantiles::of(vec![]).p50.is_nan());
    let q = Quantiles::of((1..=200).map(f64::from).rev().collect());
    assert_eq!((q.n, q.p50, q.p99, q.max), (200, 101.0, 199.0, 200.0));
    let (s, d) = (stamp(), date());
    assert_eq!((s.len(), &s[8..9], &s[15..], d.len()), (16, "T", "Z", 10));
    assert!(s.starts_with(&d.replace('-', "")));
    assert_eq!((spread(10, 3), spread(2, 5)), (vec![0, 3, 6], vec![0, 1]));
    assert_eq!(list([1, 2], |n| format!("#{n}")), "#1, #2");
    assert_eq!(problems_suffix(&[]), "");
    assert_eq!(problems_suffix(&["a".into(), "b".into()]), "; problems: a; b");
    let status = "Name:\tx\nVmHWM:\t   93824 kB\nRssAnon:\t     412 kB\n";
    assert_eq!([status_kb(status, "VmHWM"), status_kb(status, "RssFile")], [Some(93824), None]);
}

#[test]
fn polling_and_background_threads() {
    let mut n = 0;
    let v = poll("x", Duration::from_secs(60), Duration::ZERO, || {
        n += 1;
        Ok(if n == 3 { Ok(n) } else { Err(format!("try {n}")) })
    });
    assert_eq!(v.unwrap(), 3);
    let e = poll::<()>("svc", Duration::ZERO, Duration::ZERO, || Ok(Err("503".into())));
    assert!(e.unwrap_err().to_string().contains("svc: not within 0ns (last: 503)"));
    assert!(poll::<()>("x", Duration::MAX, Duration::ZERO, || bail!("gone")).is_err());
    let counter = Background::every(Duration::from_millis(1), 0, |n| *n += 1);
    std::thread::sleep(Duration::from_millis(30));
    assert!(counter.stop() > 2);
}

#[test]
fn answers_are_judged() {
    let e: Entry = serde_json::from_str(
        r#"{"request":{"id":"x"},"expected_approved":false,"expected_fraud_score":0.6}"#,
    )
    .unwrap();
    assert!(e.judge(200, r#"{"approved":false,"fraud_score":0.6}"#).is_ok());
    let wrong = e.judge(200, r#"{"approved":true,"fraud_score":0.0}"#).unwrap_err();
    assert!(wrong.starts_with("wrong answer") && wrong.ends_with(r#"for {"id":"x"}"#), "{wrong}");
    assert!(e.judge(200, "{").is_err());
    assert_eq!(e.judge(503, "busy").unwrap_err(), "HTTP 503: busy");
}

#[test]
fn the_newest_artifact_of_function() {
    let dir = scratch("util");
    for f in ["function-a/out", "function-b/out", "other-c/out"] {
        std::fs::create_dir_all(dir.join(f)).unwrap();
    }
    assert_eq!(newest_index_artifact(&dir), None);
    std::fs::write(dir.join("function-b/out/fraud-index.idx"), "x").unwrap();
    std::fs::write(dir.join("other-c/out/fraud-index.idx"), "x").unwrap();
    assert!(newest_index_artifact(&dir).unwrap().ends_with("function-b/out/fraud-index.idx"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_root_file_system_is_sorted_with_its_parents() {
    let path = scratch("rootfs.tar");
    let mut fs = ScratchImage::default();
    fs.text("usr/local/etc/x.cfg", "a").dir("tmp", 0o1777).link("usr/lib64", "../lib64");
    fs.file("bin/me", &root().join("Cargo.toml"), 0o755).write(&path).unwrap();
    let mut archive = tar::Archive::new(std::fs::File::open(&path).unwrap());
    let entry = |e: tar::Entry<_>| {
        (e.path().unwrap().display().to_string(), e.header().mode().unwrap(), e.size())
    };
    let entries: Vec<(String, u32, u64)> =
        archive.entries().unwrap().map(|e| entry(e.unwrap())).collect();
    let names: Vec<&str> = entries.iter().map(|(n, ..)| n.trim_end_matches('/')).collect();
    assert_eq!(
        names.join(" "),
        "bin bin/me tmp usr usr/lib64 usr/local usr/local/etc usr/local/etc/x.cfg"
    );
    let size = root().join("Cargo.toml").metadata().unwrap().len();
    let got = (entries[1].1, entries[1].2, entries[2].1, entries[7].2);
    assert_eq!(got, (0o755, size, 0o1777, 1));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn logs_json_and_the_test_binary() {
    let log = scratch("log.txt");
    run(&to_log(duct::cmd!("sh", "-c", "echo out; echo err >&2"), &log)).unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "out\nerr\n");
    std::fs::remove_file(log).unwrap();
    assert_eq!(last_json::<serde_json::Value>("progress\n{\"a\": 7}", "x").unwrap()["a"], 7);
    assert!(last_json::<u32>("", "x").is_err() && last_json::<u32>("{}", "x").is_err());
    // This test binary is dynamically linked (the workspace build is not static); a program
    // linked with -static passes.
    let me = std::env::current_exe().unwrap();
    let why = check_static_x86_64(&me).unwrap_err().to_string();
    assert!(why.contains("dynamically linked"), "{why}");
    let (source, program) = (scratch("static.c"), scratch("static"));
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    run(&duct::cmd!("cc", "-static", "-o", &program, "-x", "c", &source)).unwrap();
    check_static_x86_64(&program).unwrap();
    std::fs::remove_file(source).unwrap();
    std::fs::remove_file(program).unwrap();
    assert!(check_static_x86_64(&root().join("Cargo.toml")).is_err());
    assert_eq!(test_entries().unwrap().len(), 54_100);
}

/// The lint of the workspace build: clippy's lints fail a real build, and a clean one builds.
#[test]
fn the_lint_wrapper_fails_a_build_on_a_lint() {
    let dir = scratch("lint");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest =
        "[package]\nname = \"linted\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n";
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    let build = |main: &str| {
        std::fs::write(dir.join("src/main.rs"), main).unwrap();
        let e = linted(duct::cmd!("cargo", "build", "--quiet").dir(&dir));
        e.env("CARGO_TARGET_DIR", dir.join("target")).stderr_capture().unchecked().run().unwrap()
    };
    let lint = build("fn main() { let v = vec![1]; println!(\"{}\", v.len() == 0); }");
    let said = String::from_utf8_lossy(&lint.stderr);
    assert!(!lint.status.success() && said.contains("clippy::len_zero"), "{said}");
    assert!(build("fn main() { println!(\"{}\", std::env::args().count()); }").status.success());
    std::fs::remove_dir_all(dir).unwrap();
}
