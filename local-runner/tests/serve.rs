//! End-to-end test of `local-runner serve`: the real binary on a Unix socket and on TCP, spoken to
//! with raw HTTP/1.1 over keep-alive, then stopped with SIGTERM (must exit 0 and remove its
//! socket).

mod common;

use common::*;
use std::io::{BufReader, Write};

#[test]
fn unix_socket_keep_alive_routes_and_clean_sigterm() {
    let path = socket_path("main");
    let mut server = start(&format!("unix:{}", path.display()), &[]);
    let mut s = connect_unix(&path);
    wait_ready(&s);
    let mut r = BufReader::new(s.try_clone().unwrap());

    // Several requests on one keep-alive connection.
    for _ in 0..3 {
        s.write_all(request("POST", "/fraud-score", LEGIT).as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut r).body, LEGIT_ANSWER);
        s.write_all(request("POST", "/fraud-score", FRAUD).as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut r).body, FRAUD_ANSWER);
    }
    // Pipelined: two requests in one write, two answers in order.
    s.write_all(
        format!(
            "{}{}",
            request("POST", "/fraud-score", FRAUD),
            request("POST", "/fraud-score", LEGIT)
        )
        .as_bytes(),
    )
    .unwrap();
    assert!(read_response(&mut r).body.contains("\"approved\":false"));
    assert!(read_response(&mut r).body.contains("\"approved\":true"));
    // The handler's own answers pass through unchanged.
    s.write_all(request("GET", "/fraud-score", "").as_bytes())
        .unwrap();
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("POST"), "{resp:?}");
    s.write_all(request("POST", "/fraud-score", "{").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).status, 400);
    s.write_all(request("GET", "/nope", "").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).status, 404);
    // A body over the limit is refused before the handler sees it.
    let big = "x".repeat(70 * 1024);
    s.write_all(request("POST", "/fraud-score", &big).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).status, 413);

    drop(r);
    drop(s);
    let status = sigterm_and_wait(&mut server);
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(!path.exists(), "socket file left behind");
}

#[test]
fn tcp_listener_answers() {
    let (mut server, port) = start_tcp_ready(&[]);
    let mut s = connect_tcp(port);
    let mut r = BufReader::new(s.try_clone().unwrap());
    s.write_all(request("POST", "/fraud-score", FRAUD).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).body, FRAUD_ANSWER);
    assert!(sigterm_and_wait(&mut server).success());
}

#[test]
fn spinning_loop_answers_and_stops() {
    // The busy-poll window after each event changes when the loop sleeps, never what it does.
    let mut server = start_ready("spin", &["--spin-us", "500"]);
    let mut s = server.connect();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..20 {
        s.write_all(request("POST", "/fraud-score", LEGIT).as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut r).body, LEGIT_ANSWER);
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    drop(r);
    drop(s);
    assert!(sigterm_and_wait(&mut server).success());
}

/// The counters at `GET /metrics` on the metrics socket, read by a Prometheus text parser.
fn scrape(metrics: &std::path::Path) -> Vec<prometheus_parse::Sample> {
    let mut s = std::os::unix::net::UnixStream::connect(metrics).unwrap();
    s.write_all(request("GET", "/metrics", "").as_bytes())
        .unwrap();
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(
        resp.header("content-type"),
        Some("text/plain; version=0.0.4")
    );
    let lines = resp.body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines)
        .expect("Prometheus text")
        .samples
}

fn counter(samples: &[prometheus_parse::Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .collect();
    matching.iter().sum()
}

/// `GET /metrics`, on the metrics listener only, counts every answer the server gave, the
/// handler's and the transport's refusals, and times them in a histogram, under names a
/// Prometheus text parser reads, with the index served as labels; the public listener never
/// serves the route, and without `--metrics-listen` nothing does.
#[test]
fn metrics_count_what_was_answered() {
    let metrics = socket_path("metrics-port");
    let listen = format!("unix:{}", metrics.display());
    let server = start_ready("metrics", &["--metrics-listen", &listen]);
    assert_eq!(
        server.one(request("GET", "/metrics", "").as_bytes()).status,
        404,
        "the public listener serves no metrics"
    );
    let before = scrape(&metrics);
    let mut s = server.connect();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for (body, n) in [(LEGIT, 3), (FRAUD, 2)] {
        for _ in 0..n {
            s.write_all(request("POST", "/fraud-score", body).as_bytes())
                .unwrap();
            read_response(&mut r);
        }
    }
    for (method, path, body) in [("POST", "/fraud-score", "{"), ("GET", "/nope", "")] {
        s.write_all(request(method, path, body).as_bytes()).unwrap();
        read_response(&mut r);
    }
    // A transport refusal: a body over the limit (413, then close).
    let big = "x".repeat(70 * 1024);
    assert_eq!(
        server
            .one(request("POST", "/fraud-score", &big).as_bytes())
            .status,
        413
    );
    let after = scrape(&metrics);
    let grew = |name: &str, labels: &[(&str, &str)]| {
        counter(&after, name, labels) - counter(&before, name, labels)
    };
    let approved = [("approved", "true"), ("fraud_score", "0.0")];
    let denied = [("approved", "false"), ("fraud_score", "1.0")];
    assert_eq!(grew("fraud_decisions_total", &approved), 3.0);
    assert_eq!(grew("fraud_decisions_total", &denied), 2.0);
    assert_eq!(grew("fraud_decisions_total", &[]), 5.0);
    assert_eq!(
        grew("fraud_requests_rejected_total", &[("reason", "bad_body")]),
        1.0
    );
    assert_eq!(
        grew("fraud_requests_rejected_total", &[("reason", "not_found")]),
        1.0
    );
    assert_eq!(
        grew(
            "fraud_requests_rejected_total",
            &[("reason", "body_too_large")]
        ),
        1.0
    );
    // The histogram counts the same answers, by route and outcome.
    let duration = "fraud_request_duration_seconds";
    let scored = [("route", "/fraud-score"), ("outcome", "decided")];
    assert_eq!(grew(duration, &scored), 5.0);
    assert_eq!(grew(duration, &[("outcome", "refused")]), 3.0);
    let info = after
        .iter()
        .find(|s| s.metric == "fraud_index_info")
        .unwrap();
    assert_eq!(info.labels.get("references"), Some("3000000"));
    assert_eq!(info.labels.get("format_version"), Some("6"));
    assert!(after
        .iter()
        .filter(|s| s.metric.ends_with("_total"))
        .all(|s| s.labels.get("index") == info.labels.get("crc32")));
    for s in &after {
        let name = &s.metric;
        assert!(
            name == "fraud_index_info"
                || name.starts_with(duration)
                || (name.ends_with("_total")
                    && (name.contains("request") || name.contains("decision"))),
            "{name}"
        );
    }
    let off = start_ready("metrics-off", &[]);
    assert_eq!(
        off.one(request("GET", "/metrics", "").as_bytes()).status,
        404
    );
}
