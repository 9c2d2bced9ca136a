//! Helpers shared by the end-to-end tests: start the real `local-runner serve` binary on a Unix
//! socket, speak raw HTTP/1.1 to it, stop it with SIGTERM.
#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const LEGIT: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;
pub const FRAUD: &str = r#"{"id":"tx-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#;
pub const LEGIT_ANSWER: &str = r#"{"approved":true,"fraud_score":0.0}"#;
pub const FRAUD_ANSWER: &str = r#"{"approved":false,"fraud_score":1.0}"#;

/// How long a test waits on a socket before calling the server hung.
pub const PATIENCE: Duration = Duration::from_secs(5);

pub struct Server {
    pub child: Child,
    /// The Unix socket (None for TCP).
    pub path: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A killed server cannot remove its socket file; do it for it.
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Starts `local-runner serve --listen <listen> <extra...>` (16 warm-up queries).
pub fn start(listen: &str, extra: &[&str]) -> Server {
    spawn(command(listen, extra), listen)
}

fn command(listen: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_local-runner"));
    c.args(["serve", "--listen", listen, "--warmup-queries", "16"])
        .args(extra)
        .env("FRAUD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

fn spawn(mut c: Command, listen: &str) -> Server {
    let child = c.spawn().expect("spawn local-runner serve");
    let path = listen.strip_prefix("unix:").map(PathBuf::from);
    Server { child, path }
}

/// [`start_ready`] for a server whose soft and hard limits on open files are both `nofile`.
pub fn start_ready_with_open_files(name: &str, extra: &[&str], nofile: u64) -> Server {
    let path = socket_path(name);
    let listen = format!("unix:{}", path.display());
    let server = spawn(command_with_open_files(&listen, extra, nofile), &listen);
    wait_ready(&connect_unix(&path));
    server
}

/// The `serve` command with both limits on open files at `nofile`.
pub fn command_with_open_files(listen: &str, extra: &[&str], nofile: u64) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = command(listen, extra);
    // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: nofile as libc::rlim_t,
                rlim_max: nofile as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// A fresh socket path for this test process.
pub fn socket_path(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "local-runner-{}-{name}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Starts a server on a fresh Unix socket and waits until `/ready` says 200.
pub fn start_ready(name: &str, extra: &[&str]) -> Server {
    let path = socket_path(name);
    let server = start(&format!("unix:{}", path.display()), extra);
    wait_ready(&connect_unix(&path));
    server
}

impl Server {
    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(self.path.as_ref().expect("a Unix socket server"))
            .expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        s
    }

    /// One request on a new connection; returns the first response.
    pub fn one(&self, raw: &[u8]) -> Resp {
        let mut s = self.connect();
        s.write_all(raw).unwrap();
        read_response(&mut BufReader::new(s))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub version: String,
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `error` string of a JSON error body (panics if the body is not one).
    pub fn error(&self) -> String {
        let v: serde_json::Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body));
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error string: {}", self.body))
            .to_string()
    }
}

/// Reads one response head; `with_body` reads the Content-Length body too (not for HEAD).
pub fn read_response_opt(r: &mut impl BufRead, with_body: bool) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).expect("read status line");
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or_default().to_string();
    let status: u16 = parts
        .next()
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
        .parse()
        .unwrap();
    let mut len = 0usize;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect("read header");
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').expect("header with a colon");
        if k.eq_ignore_ascii_case("content-length") {
            len = v.trim().parse().unwrap();
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    let mut body = vec![0; if with_body { len } else { 0 }];
    r.read_exact(&mut body).expect("read body");
    Resp {
        version,
        status,
        body: String::from_utf8(body).unwrap(),
        headers,
    }
}

pub fn read_response(r: &mut impl BufRead) -> Resp {
    read_response_opt(r, true)
}

/// True when the peer has closed: reads nothing more (EOF) before `PATIENCE`.
pub fn closed_by_server(r: &mut impl Read) -> bool {
    let mut buf = [0u8; 64];
    match r.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!(
            "expected the server to close, got {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) => panic!("expected the server to close, got {e}"),
    }
}

pub fn request(method: &str, path: &str, body: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

pub fn request_bytes(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut v = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    v.extend_from_slice(body);
    v
}

pub fn connect_unix(path: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match UnixStream::connect(path) {
            Ok(s) => {
                s.set_read_timeout(Some(PATIENCE)).unwrap();
                return s;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("cannot connect to {}: {e}", path.display()),
        }
    }
}

/// Starts a server on a free TCP port of 127.0.0.1 and waits until `/ready` says 200 there;
/// returns it with its port.
pub fn start_tcp_ready(extra: &[&str]) -> (Server, u16) {
    // Find a free port, then let the server bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = start(&format!("127.0.0.1:{port}"), extra);
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("TCP server not listening after 60 s: {e}"),
        }
    };
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    wait_ready(&s);
    (server, port)
}

/// A new connection to the TCP server of [`start_tcp_ready`].
pub fn connect_tcp(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.set_write_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Asks `GET /ready` on `s` until it says 200 (503 while warming up).
pub fn wait_ready<S>(s: &S)
where
    for<'a> &'a S: Read + Write,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut r = BufReader::new(s);
    loop {
        let mut w = s;
        w.write_all(request("GET", "/ready", "").as_bytes())
            .unwrap();
        let status = read_response(&mut r).status;
        if status == 200 {
            return;
        }
        assert_eq!(status, 503, "/ready before warm-up must be 503");
        assert!(Instant::now() < deadline, "not ready after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn sigterm_and_wait(server: &mut Server) -> std::process::ExitStatus {
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

/// A field of /proc/<pid>/status in KiB (VmRSS, RssAnon, ...).
pub fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}
