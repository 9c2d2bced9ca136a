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
