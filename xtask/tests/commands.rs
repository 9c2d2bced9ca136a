//! The commands' own logic (CI's steps, verify's and fuzz's verdicts, the command line) through
//! the library's API.

use index_pack::report::{Answers, Neighbours};
use std::path::Path;
use xtask::ci::{command, steps, Outcome};
use xtask::fuzz::{libfuzzer_args, stat, Mode, TargetRun};
use xtask::util;
use xtask::verify::{judge, Gathered, PUBLIC};
use xtask::{ci, fuzz, verify};

#[test]
fn the_command_line_is_consistent() {
    use clap::CommandFactory;
    xtask::Cli::command().debug_assert();
}

#[test]
fn the_steps_and_their_order() {
    let names = |quick| util::list(steps(quick), |s| s.0.to_string());
    assert_eq!(names(false), "fmt, build, test, verify, fuzz, shipped build, lambda, stack smoke, stack chaos, stack overload, stack attack, stack submission, shards faults, scale");
    assert_eq!(names(true), "fmt, build, test, verify");
    let (s, quick) = (steps(false), steps(true));
    assert_eq!(
        [s[1].1, s[2].1, quick[2].1],
        ["xtask build", "workspace test", "workspace test --lib --bins"]
    );
    assert_eq!(quick[3].1, "xtask verify --public");
    let me = Path::new("/no/xtask");
    let shown = |line| format!("{:?}", command(line, me));
    assert!(shown("xtask verify --public").contains(r#"["/no/xtask", "verify", "--public"]"#));
    let workspace = shown("workspace test --lib");
    assert!(
        workspace
            .contains(r#""test", "--profile", "ci", "--workspace", "--all-features", "--lib""#),
        "{workspace}"
    );
    // A cargo step runs the cargo found on PATH (a one-component `Path` would not be).
    let out = command("cargo --version", me).read().unwrap();
    assert!(out.starts_with("cargo "), "{out}");
    let done = [
        Outcome { name: "fmt", passed: true, seconds: 2.6, why: vec![] },
        Outcome { name: "test", passed: false, seconds: 100.2, why: vec!["test: x".into()] },
    ];
    assert_eq!(ci::figures(&done, 103.0), "fmt ok 3 s, test FAILED 100 s; 103 s in all");
}

fn gathered() -> Gathered {
    let answers = Answers {
        total: PUBLIC,
        tp: 24_500,
        tn: 29_600,
        detection_score: 3000.0,
        ..Answers::default()
    };
    let neighbours = Neighbours {
        compared: 4500,
        public: 2000,
        generated: 2000,
        adversarial: 500,
        ties_across_fifth: 37,
        ties_decided_by_f64: 2,
        wall_s: 12.5,
        ..Neighbours::default()
    };
    let final_answers = Answers { total: 72_100, ..answers.clone() };
    Gathered { answers, answers_wall_s: 3.0, final_answers, neighbours, hostile_current: true }
}

#[test]
fn exact_answers_and_no_difference_pass_and_anything_else_fails() {
    let g = gathered();
    assert!(judge(&g));
    assert_eq!(
        verify::figures(&g),
        "answers 54100/54100 exact (FP 0, FN 0, errors 0, detection 3000.00, 3.0 s); \
         final set 72100/72100 exact (FP 0, FN 0); neighbours 4500 compared (2000 public, 2000 generated, 500 adversarial), 0 vector, \
         0 neighbour, 0 decision differences, 37 ties across 5th (2 decided by f64), 12.5 s; \
         hostile cases current"
    );
    let breaks: [fn(&mut Gathered); 5] = [
        |g| g.answers.fp = 1,
        |g| g.final_answers.total = 72_099,
        |g| g.neighbours.neighbour_differences = 1,
        |g| g.neighbours.ties_across_fifth = 0,
        |g| g.hostile_current = false,
    ];
    for f in breaks {
        let mut g = gathered();
        f(&mut g);
        assert!(!judge(&g));
    }
    let stale = Gathered { hostile_current: false, ..gathered() };
    assert!(verify::figures(&stale).ends_with("hostile cases STALE"));
}

#[test]
fn ci_runs_are_timed_and_seeded_long_runs_timed() {
    let ci = libfuzzer_args("http", &Mode::Ci { seconds: 15 }, true, Some("4096\n"));
    let (first, last) = (ci[0].as_str(), ci.last().unwrap().as_str());
    assert_eq!((first, last), ("-max_total_time=15", "-max_len=4096"));
    assert!(["-seed=1", "-use_cmp=0", "-dict=dict/http.dict"]
        .iter()
        .all(|a| ci.contains(&a.to_string())));
    let mode = Mode::Long { seconds: 1800, target: None, cpu: 0 };
    let long = libfuzzer_args("index", &mode, false, None);
    assert_eq!(long[0], "-max_total_time=1800");
    assert!(!long.iter().any(|a| a.starts_with("-seed") || a.starts_with("-dict")));
    assert!(long.contains(&"-artifact_prefix=artifacts/index/".into()));
}

#[test]
fn final_statistics_are_read_and_shown() {
    let log = "#2 INITED\nstat::number_of_executed_units: 20512\nstat::peak_rss_mb: 98\n";
    assert_eq!(
        (stat(log, "number_of_executed_units"), stat(log, "peak_rss_mb")),
        (Some(20512), Some(98))
    );
    assert_eq!(stat("==1==ERROR: AddressSanitizer", "peak_rss_mb"), None);
    let run = |target: &str, executions: Option<u64>| {
        let (target, per_second) = (target.into(), executions.map(|e| e / 30));
        TargetRun { target, executions, per_second, ..TargetRun::default() }
    };
    let shown = fuzz::figures(&[run("http", Some(21_000)), run("index", None)]);
    assert_eq!(shown, "http 21000 execs (700/s), index ? execs (0/s)");
}
