//! The contest stack's checks, probes, k6 files, compose projects, load runs and gates through
//! the library's API.

use clap::ValueEnum;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;
use xtask::stack::attack::{self, attacker_problems, benign_problems, haproxy_maxconn};
use xtask::stack::attack::{slowhttptest_run, Attack, Attacker, Benign, Run, Target};
use xtask::stack::cgroup;
use xtask::stack::chaos::{self, analyse, attribute, Args, KillReport};
use xtask::stack::check::{fixed_non_root, haproxy_cfg, memory_mb, pinned, reference, rules};
use xtask::stack::compose::Compose;
use xtask::stack::k6::{failures, Failure, Summary, Trend, Window};
use xtask::stack::load::{run_figures, Container, LoadRun};
use xtask::stack::overload::{self, measure, parse_wrk, recovery, Loaded, Measured, Recovery};
use xtask::stack::probe::{self, ok, parse_stat, ready_unix, Probe, Sample, StatRow, READY};
use xtask::stack::submission::{info, pin, repository, Registry, INFO};
use xtask::util::{root, Quantiles};

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

/// A steady run's summary of `requests` requests, `fp` wrong, with these windows.
fn summary(requests: u64, fp: u64, windows: &[(u32, u64, u64, f64)]) -> Summary {
    let window = |&(w, n, errors, p99): &_| Window { w, n, errors, p50: 0.4, p99 };
    let (windows, latency_ms) =
        (windows.iter().map(window).collect(), Some(Trend { med: 0.5, p99: 2.5 }));
    Summary { requests, fp, latency_ms, t0_ms: 1_000_000, windows, ..Summary::default() }
}

#[test]
fn memory_units_users_and_the_balancer() {
    let mb = ["150M", "1g", "52428800", "x"].map(memory_mb);
    assert_eq!(mb, [Some(150.0), Some(1024.0), Some(50.0), None]);
    assert_eq!(["65534:65534", "0:0", "nobody"].map(fixed_non_root), [true, false, false]);
    let tcp = "defaults\n    mode tcp\nbackend b\n    balance roundrobin\n";
    assert!(haproxy_cfg(tcp).is_empty());
    let http = "    mode http\n    balance roundrobin\n    http-request return status 200\n";
    assert_eq!(haproxy_cfg(http).len(), 2);
}

// Four rows of HAProxy 2.6's `show stat` (columns after check_status cut).
const STAT: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,\n\
fraud,FRONTEND,,,3,120,2000,5210,1,2,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,\n\
apis,api1,0,0,1,60,,2605,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,40,0,,1,3,1,,2605,,2,0,,60,L7OK,\n\
apis,api2,0,0,0,0,,12,1,2,,0,,3,0,0,1,DOWN 1/2,1,1,0,1,1,2,2,,1,3,2,,12,,2,0,,9,L4CON,\n\
apis,BACKEND,0,0,1,60,,2617,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,40,0,,1,3,1,,2605,,2,0,,60,,\n";

#[test]
fn parses_show_stat_into_states() {
    let s = Sample { stat: parse_stat(STAT).unwrap(), ..Sample::default() };
    let row = |r: &StatRow| (r.svname.clone(), r.qcur, r.scur, r.stot, r.status.clone());
    assert_eq!(row(&s.stat[0]), ("FRONTEND".into(), None, Some(3), Some(5210), "OPEN".into()));
    assert_eq!(
        s.servers().map(row).collect::<Vec<_>>(),
        [
            ("api1".into(), Some(0), Some(1), Some(2605), "UP".into()),
            ("api2".into(), Some(0), Some(0), Some(12), "DOWN 1/2".into()),
        ]
    );
    assert_eq!(s.server("api2").unwrap().stot, Some(12));
    let state = |status: &str| {
        let row = StatRow { status: status.into(), ..s.stat[0].clone() };
        (row.up(), row.out())
    };
    let states = ["UP", "UP 1/3", "OPEN", "MAINT", "DOWN 1/2"].map(state);
    let (up, other, out) = ((true, false), (false, false), (false, true));
    assert_eq!(states, [up, other, other, out, out]);
    assert!(parse_stat("no header").is_err());
}

#[test]
fn reads_the_status_line() {
    // The answer waits in a socket pair whose other end is closed for writing after it.
    let status = |answer: &[u8]| {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(answer).unwrap();
        theirs.shutdown(std::net::Shutdown::Write).unwrap();
        probe::exchange(Ok(ours), READY)
    };
    let cases: [(&[u8], Probe, bool); 4] = [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", Ok(200), true),
        (b"HTTP/1.1 503 Service Unavailable\r\n", Ok(503), false),
        (b"HTTP/1.1 204 No Content\r\n\r\n", Ok(204), true),
        (b"", Err("empty".into()), false),
    ];
    for (answer, want, ready) in cases {
        let got = status(answer);
        assert_eq!((ok(&got), got), (ready, want));
    }
    let p = ready_unix(Path::new("/nonexistent/x.sock"), Duration::from_millis(10));
    assert_eq!(p, Err("NotFound".into()));
}

#[test]
fn parses_oom_control_and_cpu_stat() {
    let (oom, cpu) = ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "nr_throttled 36\n");
    let got = [(oom, "oom_kill"), (cpu, "nr_throttled"), (cpu, "throttled_time")];
    assert_eq!(got.map(|(s, k)| cgroup::keyed(s, k).unwrap()), [2, 36, 0]);
    assert!(cgroup::keyed("oom_kill x\n", "oom_kill").is_err() && cgroup::number("x").is_err());
}

/// api1's samples from `time HAProxy-status sessions own-ready` rows (`DOWN_1/2` for `DOWN 1/2`).
fn samples(rows: &str) -> Vec<Sample> {
    let sample = |row: &str| {
        let [t, status, stot, ready] = row.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("{row}")
        };
        let csv = format!("# pxname,svname,stot,status\napis,api1,{stot},{status}\n");
        let stat = parse_stat(&csv.replace('_', " ")).unwrap();
        let ready = [("api1".to_string(), ready.parse().map_err(|_| "empty".into()))].into();
        Sample { t: t.parse().unwrap(), stat, ready, ..Sample::default() }
    };
    rows.split(';').map(sample).collect()
}

#[test]
fn a_kill_and_its_return() {
    // (samples, DOWN, own /ready 200, UP, in rotation after /ready, sessions while out)
    let cases = [
        ("900 UP 50 200; 1000 UP 50 200; 1100 DOWN 50 refused; 1500 DOWN 50 503; 1700 DOWN 50 200; 1900 DOWN_1/2 50 200; 2100 UP 50 200; 2200 UP 51 200", Some(100), Some(700), Some(1100), Some(500), Some(0)),
        // Back without ever being marked DOWN: its sessions growing are the only sign.
        ("1000 UP 10 refused; 1500 UP 12 200; 1600 UP 12 200; 1700 UP 13 200", None, Some(500), None, Some(200), None),
        ("1000 DOWN 5 refused; 1100 DOWN 5 200", Some(0), Some(100), None, None, None),
    ];
    for (rows, down, ready, up, rotation, leak) in cases {
        let r = analyse("api1", 1000, &samples(rows), &[]);
        let got = (r.down_ms, r.ready_ms, r.up_ms, r.rotation_after_ready(), r.sessions_while_out);
        assert_eq!(got, (down, ready, up, rotation, leak), "{rows}");
    }
}

#[test]
fn the_gate_judges_each_kill_and_reports_its_figures() {
    let rows =
        "1000 UP 50 200; 1100 DOWN 50 refused; 1700 DOWN 50 200; 2100 UP 50 200; 2200 UP 51 200";
    let f = Failure { start_ms: 1005, took_ms: 2, status: 0, error: "1000 EOF".into() };
    let r = KillReport {
        restarts: 1,
        ..analyse("api1", 1000, &samples(rows), std::slice::from_ref(&f))
    };
    let summaries = [summary(18_000, 0, &[])];
    assert!(chaos::judge(600, std::slice::from_ref(&r), &[], &summaries).is_empty());
    let want = "1 kills, each in its own 20 s at 600 req/s (18000 requests in all): failed per kill 1 (max 15, none started over 100 ms after the kill), unexplained 0; \
         marked DOWN 100 ms after the kill; own /ready 200 700 ms after the kill; in rotation 500 ms after /ready 200 (max 3000); \
         FP 0 FN 0, p99 up to 2.50 ms";
    assert_eq!(chaos::figures(600, std::slice::from_ref(&r), 0, &summaries, &[]), want);
    // The victim's half of 600 req/s over 50 ms: 15; at the final's peak, 28.
    assert_eq!((chaos::max_failed(600), chaos::max_failed(1130)), (15, 28));
    let late = (120, 2, "1000 EOF".to_string());
    let (failures, failed) = ([r.failures.clone(), vec![late]].concat(), 16);
    let bad = KillReport { restarts: 0, failed, failures, rotation_ms: Some(9000), ..r };
    let problems = chaos::judge(600, &[bad], &[f], &[summary(10, 2, &[])]);
    let want = [
        "api1: 16 requests failed (max 15 at 600 req/s)",
        "api1: 1 requests failed that started over 100 ms after the kill",
        "api1: the engine did not restart it",
        "api1: back in rotation 8300 ms after its /ready 200 (max 3000)",
        "1 requests failed before any kill",
        "FP 2 FN 0",
    ];
    assert_eq!(problems, want);
    let cli = <Args as clap::Args>::augment_args(clap::Command::new("x"));
    let matches = cli.try_get_matches_from(["x", "--rate", "600"]).unwrap();
    assert!(<Args as clap::FromArgMatches>::from_arg_matches(&matches).is_ok());
}

#[test]
fn failures_go_to_the_kill_before_them() {
    let f = |t| Failure { start_ms: t, took_ms: 1, status: 0, error: "EOF".into() };
    let (after, before) = attribute(1000, vec![f(500), f(950), f(1020), f(5010)]);
    assert_eq!((before.len(), after.len()), (1, 3));
}

#[test]
fn the_overload_is_measured_and_judged() {
    // k6 at 900 req/s, slow for the two seconds of the overload (10-12 s) and one after it.
    let windows: Vec<_> =
        (0..35).map(|s| (s, 900, 0, if (10..13).contains(&s) { 40.0 } else { 1.0 })).collect();
    let wrk = parse_wrk("Running 10s test\nWRKJSON {\"requests\":3600,\"duration_us\":2000000,\"status200\":3500,\"non200\":100,\"connect\":0,\"read\":1,\"write\":0,\"timeout\":2,\"p99_us\":4000}\n").unwrap();
    assert_eq!((wrk.rates(), wrk.errors()), ((1800.0, 1750.0), 103));
    assert!(parse_wrk("nothing").is_err());
    let (k6_status, summary) = (ExitStatus::from_raw(0), summary(31_500, 0, &windows));
    let (span, k6_cpu_s, wrk_cpu_s) = ((1_010_000, 1_012_000), 20.0, 3.0);
    let l = Loaded { summary, wrk, span, k6_cpu_s, wrk_cpu_s, k6_status };
    let m = measure(&l);
    let rates = (m.over_start_s, m.over_end_s, m.offered_rps, m.served_rps);
    assert_eq!(rates, (10.0, 12.0, 2700.0, 2650.0));
    assert_eq!((m.p99_during_max_ms, m.recovery.first_ok_window), (40.0, Some(13)));
    assert!(overload::judge(&m, &[], l.k6_status).is_empty());
    let f = overload::figures(&m, &l, &[], 0, &[]);
    assert!(f.starts_with("offered 2700 req/s for 2.0 s (k6 900 + wrk 1800), served 2650 req/s; errors k6 0 wrk 103, FP 0 FN 0;"), "{f}");
    let back = "p99 per second before 1.00 ms (median), during up to 40.0 ms; back under 5.0 ms 1.0 s after the end (max 2 s), later seconds up to 1.00 ms";
    assert!(f.contains(back), "{f}");
    let never = Recovery { first_ok_window: None, after_end_s: None, worst_later_p99_ms: None };
    let late = Measured { recovery: never, ..m };
    let never = ["p99 never back under 5.0 ms after the overload"];
    assert_eq!(overload::judge(&late, &[], l.k6_status), never);
}

#[test]
fn recovery_is_judged_against_the_seconds_before_on_a_busy_machine() {
    // A busy machine: 12-14 ms p99 before the overload (10 s to 12 s), 40 ms during it, 20 ms after.
    let p99 = |s: u32| match s {
        10..=12 => 40.0,
        0..=9 => 12.0 + f64::from(s % 3),
        _ => 20.0,
    };
    let windows: Vec<_> = (0..35).map(|s| (s, 900, 0, p99(s))).collect();
    let wrk = parse_wrk("WRKJSON {\"requests\":3600,\"duration_us\":2000000,\"status200\":3600,\"non200\":0,\"connect\":0,\"read\":0,\"write\":0,\"timeout\":0,\"p99_us\":4000}\n").unwrap();
    let (k6_status, busy) = (ExitStatus::from_raw(0), summary(31_500, 0, &windows));
    let l = Loaded {
        summary: busy,
        wrk,
        span: (1_010_000, 1_012_000),
        k6_cpu_s: 1.0,
        wrk_cpu_s: 1.0,
        k6_status,
    };
    let m = measure(&l);
    // The median of 12, 13, 14 ms repeated is 13 ms: recovered is back under 26 ms.
    assert_eq!(
        (m.baseline_p99_ms, overload::recovery_threshold(m.baseline_p99_ms)),
        (Some(13.0), 26.0)
    );
    assert_eq!(m.recovery.first_ok_window, Some(13));
    assert!(overload::judge(&m, &[], k6_status).is_empty());
    // A stack that stays slower than twice what it was still fails.
    let slow: Vec<_> = (0..35).map(|s| (s, 900, 0, if s < 10 { 12.0 } else { 30.0 })).collect();
    let l = Loaded { summary: summary(31_500, 0, &slow), ..l };
    let m = measure(&l);
    assert_eq!(
        overload::judge(&m, &[], k6_status),
        ["p99 never back under 24.0 ms after the overload"]
    );
    // A quiet machine keeps the absolute bound.
    assert_eq!(overload::recovery_threshold(Some(1.2)), 5.0);
    assert_eq!(overload::recovery_threshold(None), 5.0);
}

#[test]
fn recovery_is_the_first_good_second_after_the_end() {
    let window = |&(w, p99, errors): &_| Window { w, n: 900, errors, p50: 0.4, p99 };
    let ws = |v: &[(u32, f64, u64)]| v.iter().map(window).collect::<Vec<_>>();
    let p99s: Vec<_> =
        (19..).zip([40.0, 30.0, 3.0, 1.0, 2.5, 9.0]).map(|(s, p)| (s, p, 0)).collect();
    let r = recovery(&ws(&p99s), 19.6, 24, 5.0);
    assert_eq!((r.first_ok_window, r.worst_later_p99_ms), (Some(21), Some(2.5)));
    assert!((r.after_end_s.unwrap() - 1.4).abs() < 1e-9);
    let errors_first = recovery(&ws(&[(20, 1.0, 3), (21, 1.0, 0)]), 19.6, 30, 5.0);
    assert_eq!(errors_first.first_ok_window, Some(21));
    assert_eq!(recovery(&ws(&[(20, 8.0, 0)]), 19.6, 30, 5.0).after_end_s, None);
}

#[test]
fn attacks_are_aimed_at_the_cap_on_loopback() {
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let args = Attack::Slowloris.slowhttptest(at(9999), 1000, 10).unwrap();
    assert_eq!(args, "-H -i 3 -x 24 -u http://127.0.0.1:9999/ready -c 1000 -r 500 -l 10 -p 3");
    let read = Attack::SlowRead.slowhttptest(at(8080), 1024, 5).unwrap();
    assert!(read.starts_with("-X -k 8 ") && read.contains("-c 1024 -r 512 -l 5"), "{read}");
    let body = Attack::SlowBody.slowhttptest(at(1), 2, 3).unwrap();
    assert!(body.contains("-B ") && body.contains("127.0.0.1:1/fraud-score"), "{body}");
    assert!(Attack::Flood.slowhttptest(at(1), 2, 3).is_none());
    let names: Vec<String> = Attack::value_variants().iter().map(|a| a.name()).collect();
    assert_eq!(names, ["slowloris", "slow-body", "slow-read", "flood"]);
}

#[test]
fn an_attacker_that_fails_or_holds_too_few_connections_is_a_problem() {
    let csv = "Seconds,Closed,Pending,Connected,Service Available\n0,0,10,0,1\n1,0,300,500,1\n2,20,0,1004,0\n";
    let (ok, log) = (ExitStatus::from_raw(0), Path::new("x.log"));
    let a = slowhttptest_run(ok, Some(csv), log);
    assert_eq!(
        (a.connections, a.service_available, a.failure.as_deref()),
        (1004, Some(false), None)
    );
    assert!(attacker_problems(&a, 1024).is_empty());
    let few = attacker_problems(&a, 1100);
    assert_eq!(
        few,
        ["the attacker held 1004 connections at once, under 1078 (98 % of the cap 1100)"]
    );
    let failed =
        attacker_problems(&slowhttptest_run(ExitStatus::from_raw(1 << 8), Some(csv), log), 1024);
    assert_eq!(failed, ["slowhttptest exit status: 1 (log: x.log)"]);
    let silent = attacker_problems(&slowhttptest_run(ok, None, log), 512);
    assert_eq!(silent[0], "slowhttptest wrote no statistics (log: x.log)");
    assert!(silent[1].starts_with("the attacker held 0 connections at once, under 502"));
    let held = |connections| Attacker { connections, ..Attacker::default() };
    assert!(attacker_problems(&held(512), 512).is_empty());
    assert_eq!(attacker_problems(&held(501), 512).len(), 1);
    // With the benign client's own judgement, named after the target and the attack.
    let q = |p99| Quantiles { p99, ..Quantiles::default() };
    let benign =
        |failures, p99| Benign { requests: 800, failures, latency_ms: q(p99), ..Benign::default() };
    let run = |target, cap, connections, benign| {
        let attacker = held(connections);
        Run { target, attack: Attack::Flood, cap, attacker, benign, ..Run::default() }
            .judged()
            .problems
    };
    assert!(run(Target::Serve, 1024, 1023, benign(0, 19.0)).is_empty());
    assert!(run(Target::Stack, 512, 512, benign(0, 90.0)).is_empty());
    assert_eq!(
        run(Target::Serve, 1024, 1024, benign(2, 21.0)),
        [
            "serve flood: the benign client had 2 failed requests (first: ?)",
            "serve flood: the benign client's p99 21.00 ms (at most 20 ms)"
        ]
    );
    let few =
        "stack flood: the attacker held 400 connections at once, under 502 (98 % of the cap 512)";
    assert_eq!(run(Target::Stack, 512, 400, benign(0, 0.4)), [few]);
    assert_eq!(benign_problems(&Benign::default(), 100.0).len(), 1);
}

#[test]
fn an_answer_is_read_whole_from_its_parts() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = s.read(&mut [0; 256]);
        for part in ["HTTP/1.1 503 Busy\r\nContent-Len", "gth: 7\r\n\r\n{\"a", "\":1}"] {
            s.write_all(part.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let mut s = TcpStream::connect(addr).unwrap();
    assert_eq!(attack::exchange(&mut s, b"GET / HTTP/1.1\r\n\r\n"), Ok((503, r#"{"a":1}"#.into())));
    // The server has gone: closed, or reset for the request it never read.
    assert!(attack::exchange(&mut s, b"GET / HTTP/1.1\r\n\r\n").is_err());
}

#[test]
fn the_stack_cap_is_haproxys_frontend_maxconn() {
    assert!(haproxy_maxconn(&root().join("docker/haproxy/haproxy.cfg")).unwrap() >= 250);
}

#[test]
fn the_compose_info_and_names_of_a_submission() {
    let src = "# header\n# more\nservices:\n  api1:\n    image: ${FRAUD_API_IMAGE:-fraud-api:latest}\n  haproxy:\n    image: haproxy:2.6\n";
    let pins =
        [("${FRAUD_API_IMAGE:-fraud-api:latest}", "r/a@sha256:1"), ("haproxy:2.6", "h@sha256:2")];
    let text = pin(src, &pins, "abc").unwrap();
    assert!(text.starts_with("# Rinha de Backend 2026 submission") && text.contains("commit abc;"));
    let body = "services:\n  api1:\n    image: r/a@sha256:1\n  haproxy:\n    image: h@sha256:2\n";
    assert!(text.ends_with(body), "{text}");
    let e = pin(src, &pins[..1], "abc").unwrap_err().to_string();
    assert!(e.contains("no pin for image haproxy:2.6"));
    let template = std::fs::read_to_string(root().join(INFO)).unwrap();
    let set = |s: &[&str]| info(&template, &s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let v = set(&["participants=[\"Ana\"]", "open_to_work=true"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&v).unwrap();
    assert!(v["participants"][0] == "Ana" && v["open_to_work"] == true, "{v}");
    assert!(["open_to_work=\"yes\"", "extra=1", "x"].iter().all(|s| set(&[s]).is_err()));
    let names =
        ["127.0.0.1:5000/fraud-api:test", "docker.io/me/api", "me/api:v1", "localhost:5000/a"];
    let want = ["127.0.0.1:5000/fraud-api", "docker.io/me/api", "me/api", "localhost:5000/a"];
    assert_eq!(names.map(repository), want);
    assert!(Registry::start("docker.io/me/api:1").is_err());
}
