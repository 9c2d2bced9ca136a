//! The contest stack's checks, k6 files, compose projects and load runs through the library's API.

use std::path::{Path, PathBuf};
use xtask::stack::check::{pinned, reference, rules};
use xtask::stack::compose::Compose;
use xtask::stack::k6::{failures, Summary, Trend};
use xtask::stack::load::{run_figures, Container, LoadRun};

const GOOD: &str = r#"
networks: {stack: {driver: bridge}}
services:
  api1: &api
    image: fraud-api:latest
    platform: linux/amd64
    user: 65534:65534
    read_only: true
    cap_drop: [ALL]
    security_opt: [no-new-privileges:true]
    deploy: {resources: {limits: {cpus: 0.3, memory: 150M}}}
  api2: *api
  haproxy:
    image: haproxy:2.6
    platform: linux/amd64
    user: "99:99"
    read_only: true
    cap_drop: [ALL]
    security_opt: [no-new-privileges:true]
    ports: [{published: 9999, target: 9999}]
    deploy: {resources: {limits: {cpus: 0.4, memory: 50M}}}
"#;

#[test]
fn the_contest_layout_passes_and_each_breach_is_named() {
    let r = rules(GOOD).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert!((r.cpus - 1.0).abs() < 1e-9 && (r.memory_mb - 350.0).abs() < 1e-9);
    let limits = "deploy: {resources: {limits: {cpus: 0.1, memory: 10M}}}";
    // (a change of GOOD, or a whole file, and what the check must say of it)
    let cases = [
        (GOOD.replace("memory: 50M", "memory: 60M"), "memory sum 360 MB > 350"),
        (GOOD.replace(r#"user: "99:99""#, r#"user: "0""#), r#"haproxy: user "0" is not a fixed non-root"#),
        (GOOD.replace("ports:", "cap_add: [NET_ADMIN]\n    ports:"), "haproxy: cap_drop is not [ALL] (or cap_add is set)"),
        (GOOD.replace("published: 9999", "published: 8080"), "haproxy: publishes port 8080"),
        (GOOD.replace("    read_only: true\n", ""), "api1: read_only is not true"),
        (GOOD.replace("    cap_drop: [ALL]\n", ""), "api2: cap_drop is not [ALL]"),
        (GOOD.replace("security_opt: [no-new-privileges:true]", "security_opt: []"), "lacks no-new-privileges:true"),
        (
            "services:\n  api1: {image: x, network_mode: host}\nnetworks: {n: {driver: overlay}}\n".into(),
            "api1: no deploy.resources.limits cpus + memory; no haproxy balancer; fewer than two APIs; network n is not bridge",
        ),
        // What the contest's final rejected, and a service that names no pullable image.
        (
            format!("services:\n  api1: {{build: ., sysctls: {{a: 1}}, security_opt: [seccomp=unconfined], {limits}}}\n"),
            "api1: build: is set (the contest takes images only); api1: sysctls are set (the contest rejects them); \
             api1: security_opt seccomp=unconfined (the contest rejects it); api1: platform \"\" is not linux/amd64; \
             api1: image \"\" is not a pullable name (name:tag or name@sha256:<64 hex>)",
        ),
    ];
    for (yaml, want) in cases {
        let all = rules(&yaml).unwrap().problems.join("; ");
        assert!(all.contains(want), "{want}: {all}");
    }
}

#[test]
fn image_references_and_a_pinned_submission() {
    let d = "0123456789abcdef".repeat(4);
    let refs = [
        ("fraud-api:latest", Some(false)),
        ("127.0.0.1:5000/fraud-api:test", Some(false)),
        (&format!("127.0.0.1:5000/fraud-api@sha256:{d}") as &str, Some(true)),
        (&format!("haproxy:2.6@sha256:{d}"), Some(true)),
        ("docker.io/me/fraud-api", None),
        ("Fraud-API:1", None),
        ("haproxy:", None),
        (&format!("haproxy@sha256:{}", &d[1..]), None),
        ("", None),
    ];
    for (r, want) in refs {
        assert_eq!(reference(r), want, "{r}");
    }
    let yaml = format!(
        "services:\n  api1: {{image: \"x@sha256:{d}\"}}\n  haproxy: {{image: haproxy:2.6}}\n"
    );
    let arch = |i: &str| i.starts_with('x').then(|| "linux/amd64".to_string());
    let want = [
        "haproxy: image \"haproxy:2.6\" is not pinned by digest (name@sha256:...)",
        "haproxy: image haproxy:2.6 is not here (docker image inspect)",
    ];
    assert_eq!(pinned(&yaml, arch).unwrap(), want);
    let arm = pinned(&yaml, |_| Some("linux/arm64".into())).unwrap();
    let want = format!("x@sha256:{d} is linux/arm64, not linux/amd64");
    assert!(arm[0].ends_with(&want), "{arm:?}");
}

#[test]
fn reads_failures_and_both_summaries() {
    let log = "time=\"2026-11-30T01:20:11Z\" level=info msg=\"FAIL 1764465611123 12 0 1000 EOF\" source=console\n\
               some other line\n\
               time=\"x\" level=info msg=\"FAIL 1764465611200 2001 0 1050 request timeout\" source=console\n";
    let f: Vec<_> = failures(log).into_iter().map(|f| (f.start_ms, f.took_ms, f.error)).collect();
    let want = [(1764465611123, 12, "1000 EOF"), (1764465611200, 2001, "1050 request timeout")];
    assert_eq!(f, want.map(|(s, t, e)| (s, t, e.to_string())));
    let parse = |json: &str| serde_json::from_str::<Summary>(json).unwrap();
    let s = parse(
        r#"{"mode":"smoke","requests":3001,"tp":300,"tn":2701,"fp":0,"fn":1,"errors":0,
        "latency_ms":{"avg":0.5,"med":0.4,"p99":0.9},"final_score":6000,"t0_ms":1,
        "windows":[{"w":0,"n":200,"errors":0,"p50":0.4,"p99":0.9,"max":1.2}],"state":{}}"#,
    );
    assert_eq!((s.fn_, s.windows[0].n, s.latency().p99, s.final_score), (1, 200, 0.9, 6000.0));
    let r = parse(
        r#"{"mode":"steady","t0_ms":5,"requests":0,"fp":0,"fn":0,"errors":0,"latency_ms":null,
        "phases":{"steady":{"latency_ms":null}},"windows":[]}"#,
    );
    assert_eq!((r.latency().p99, r.t0_ms), (0.0, 5));
}

#[test]
fn our_projects_and_a_submission() {
    let (o, sub) = ([PathBuf::from("o.yml")], Path::new("/x/sub"));
    let cases = [
        (Compose::stack(&o), "fraudstack", "docker-compose.yml", 2),
        (Compose::submission(sub), "fraudsubmission", "/x/sub/docker-compose.yml", 1),
    ];
    for (c, project, first, n) in cases {
        assert_eq!((c.project.as_str(), c.files.len(), c.external.is_none()), (project, n, true));
        assert!(c.files[0].ends_with(first) && c.files.iter().all(|f| f.is_absolute()));
        assert_eq!(c.services().unwrap().join(" "), "haproxy api1 api2");
    }
    assert!(Compose::submission(sub).pinned && !Compose::stack(&[]).pinned);
}

#[test]
fn a_run_passes_clean_and_names_a_container_in_trouble() {
    // A stack run of 1,000 requests in which haproxy used 80 ms of CPU and api1 40 ms.
    let latency_ms = Some(Trend { med: 0.4, p99: 0.9 });
    let summary = Summary { requests: 1000, latency_ms, final_score: 6000.0, ..Summary::default() };
    let mut containers = ["haproxy", "api1"].map(|service| Container {
        service: service.into(),
        running: true,
        ..Container::default()
    });
    for (c, ms) in containers.iter_mut().zip([80, 40]) {
        (c.after.memory_limit, c.after.cpu_ns) = (1, ms * 1_000_000);
    }
    let mut r = LoadRun { summary, containers: containers.into(), ..LoadRun::default() };
    let want = "requests 1000, errors 0, FP 0, FN 0, p50 0.400 ms, p99 0.900 ms, score 6000.0, haproxy 0/0 MB, api1 0/0 MB";
    assert_eq!((run_figures(&r).as_str(), r.passed()), (want, true));
    r.summary.fp = 1;
    assert!(!r.passed());
    (r.summary.fp, r.summary.requests) = (0, 0);
    assert!(!r.passed());
    r.summary.requests = 1000;
    r.problems.push("api1: OOM kill".into());
    assert!(run_figures(&r).ends_with(", problems: api1: OOM kill") && !r.passed());
    let c = &mut r.containers[1];
    assert_eq!((c.trouble(), c.cpu_s()), (None, 0.04));
    (c.restarts, c.after.memory_peak, c.after.memory_limit) = (1, 150 << 20, 150 << 20);
    let why = "api1: restarted 1 times, memory at its limit (150.0 of 150 MB, failcnt 0)";
    assert_eq!(c.trouble().as_deref(), Some(why));
    (c.running, c.after.oom_kill, c.after.memory_limit) = (false, 1, 1 << 30);
    assert_eq!(c.trouble().as_deref(), Some("api1: not running, restarted 1 times, OOM kill"));
    assert_eq!(r.cpu_us_per_request("api1"), Some(40.0));
}
