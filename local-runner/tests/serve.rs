//! End-to-end test of `local-runner serve`: the real binary on a Unix socket and on TCP, spoken to
//! with raw HTTP/1.1 over keep-alive, then stopped with SIGTERM (must exit 0 and remove its
//! socket).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEGIT: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;
const FRAUD: &str = r#"{"id":"tx-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#;

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(listen: &str) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_local-runner"))
        .args(["serve", "--listen", listen, "--warmup-queries", "16"])
        .env("FRAUD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn local-runner serve");
    Server { child }
}

/// One response: status and body (Content-Length framing, as the server sends).
fn read_response(r: &mut impl BufRead) -> (u16, String, Vec<String>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
        .parse()
        .unwrap();
    let mut len = 0usize;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        headers.push(h.to_string());
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap(), headers)
}

fn request(method: &str, path: &str, body: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

fn connect_unix(path: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot connect to {}: {e}", path.display()),
        }
    }
}

fn wait_ready(s: &mut UnixStream) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut r = BufReader::new(s.try_clone().unwrap());
    loop {
        s.write_all(request("GET", "/ready", "").as_bytes())
            .unwrap();
        let (status, _, _) = read_response(&mut r);
        if status == 200 {
            return;
        }
        assert_eq!(status, 503, "/ready before warm-up must be 503");
        assert!(Instant::now() < deadline, "not ready after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigterm_and_wait(server: &mut Server) -> std::process::ExitStatus {
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = server.child.try_wait().unwrap() {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "server did not exit within 10 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("local-runner-{}-{name}.sock", std::process::id()))
}

#[test]
fn unix_socket_keep_alive_routes_and_clean_sigterm() {
    let path = socket_path("main");
    let mut server = start(&format!("unix:{}", path.display()));
    let mut s = connect_unix(&path);
    wait_ready(&mut s);
    let mut r = BufReader::new(s.try_clone().unwrap());

    // Several requests on one keep-alive connection.
    for _ in 0..3 {
        s.write_all(request("POST", "/fraud-score", LEGIT).as_bytes())
            .unwrap();
        assert_eq!(
            read_response(&mut r).1,
            r#"{"approved":true,"fraud_score":0.0}"#
        );
        s.write_all(request("POST", "/fraud-score", FRAUD).as_bytes())
            .unwrap();
        assert_eq!(
            read_response(&mut r).1,
            r#"{"approved":false,"fraud_score":1.0}"#
        );
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
    assert!(read_response(&mut r).1.contains("\"approved\":false"));
    assert!(read_response(&mut r).1.contains("\"approved\":true"));
    // The handler's own answers pass through unchanged.
    s.write_all(request("GET", "/fraud-score", "").as_bytes())
        .unwrap();
    let (status, _, headers) = read_response(&mut r);
    assert_eq!(status, 405);
    assert!(
        headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("allow: POST")),
        "{headers:?}"
    );
    s.write_all(request("POST", "/fraud-score", "{").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).0, 400);
    s.write_all(request("GET", "/nope", "").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).0, 404);
    // A body over the limit is refused before the handler sees it.
    let big = "x".repeat(70 * 1024);
    s.write_all(request("POST", "/fraud-score", &big).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).0, 413);

    drop(r);
    drop(s);
    let status = sigterm_and_wait(&mut server);
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(!path.exists(), "socket file left behind");
}

#[test]
fn tcp_listener_answers() {
    // Find a free port, then let the server bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = start(&format!("127.0.0.1:{port}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let mut r = BufReader::new(s.try_clone().unwrap());
            s.write_all(request("GET", "/ready", "").as_bytes())
                .unwrap();
            if read_response(&mut r).0 == 200 {
                s.write_all(request("POST", "/fraud-score", FRAUD).as_bytes())
                    .unwrap();
                assert_eq!(
                    read_response(&mut r).1,
                    r#"{"approved":false,"fraud_score":1.0}"#
                );
                break;
            }
        }
        assert!(Instant::now() < deadline, "TCP server not ready after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sigterm_and_wait(&mut server).success());
}
