//! The HTTP request path of `local-runner serve`: arbitrary bytes from a client, through the
//! server's own connection handler (`local_runner::serve::serve_connection`, hyper plus the
//! limits and the handler) over an in-memory stream.
//!
//! Checks: the connection ends after the client closes (no hang: the runtime's clock is paused
//! and advances only when everything waits, so the server's timeouts fire at once, and a
//! connection still open 120 virtual seconds after the client is done is a failure); every
//! byte the server writes is a well-formed HTTP/1.1 response with an allowed status and a JSON
//! body (`fraud_fuzz::http`); when the first request is plain enough to read without hyper, its
//! answer is exactly what the handler (or the transport: 413, 503 for /ready) gives.
#![no_main]

use fraud_fuzz::http::{parse_replies, simple_request};
use fraud_fuzz::scorer;
use libfuzzer_sys::fuzz_target;
use local_runner::serve::{serve_connection, Limits};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Small enough that fuzz inputs reach the 413 path.
const MAX_BODY: usize = 1024;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_body_bytes: MAX_BODY,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let out = runtime().block_on(async {
        let (client, server) = tokio::io::duplex(4096);
        let (mut rd, mut wr) = tokio::io::split(client);
        // Different write sizes make the server see requests split at different points.
        let chunk = [1, 7, 61, 4096][data.len() % 4];
        let client = async {
            for piece in data.chunks(chunk) {
                if wr.write_all(piece).await.is_err() {
                    break; // the server closed the connection: fine
                }
                tokio::task::yield_now().await;
            }
            // Let the server answer everything it has read before the client closes: with the
            // clock paused, this sleep ends only once every task is waiting.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = wr.shutdown().await;
            let mut out = vec![];
            let _ = rd.read_to_end(&mut out).await;
            out
        };
        // The server runs in this task too, so a panic in it fails this input directly.
        let both = async { tokio::join!(serve_connection(server, scorer(), limits), client) };
        match tokio::time::timeout(Duration::from_secs(120), both).await {
            Ok((_served, out)) => out,
            Err(_) => panic!("connection still open 120 s after the client finished"),
        }
    });
    if std::env::var_os("HTTP_FUZZ_DEBUG").is_some() {
        eprintln!("OUT {:?}", String::from_utf8_lossy(&out));
    }
    let replies = parse_replies(&out);
    if let Some((method, target, body, used)) = simple_request(data) {
        // hyper's URI parser drops a fragment; the handler ignores the query.
        let target = target.split('#').next().unwrap_or_default().to_string();
        let path = target.split_once('?').map_or(target.as_str(), |(p, _)| p);
        let (status, want): (u16, String) = if path == "/ready" {
            (503, r#"{"ready":false}"#.into())
        } else if body.len() > MAX_BODY {
            (413, r#"{"error":"body too large"}"#.into())
        } else {
            let r = scorer().handle(&method, &target, &body);
            (r.status, r.body.into_owned())
        };
        // A plain request alone must be answered. One followed by more bytes may lose its
        // answer: when the next request head is malformed the server closes the connection
        // without writing anything (seen with hyper 1.12 and pipeline_flush; docs/FUZZING.md).
        let first = replies.first();
        if used == data.len() {
            assert!(
                first.is_some(),
                "no answer to a plain request {method} {target}"
            );
        }
        // hyper's own rejections (no body) are for details this reader does not model.
        if let Some(first) = first.filter(|f| f.body.is_some()) {
            assert_eq!(first.status, status, "{method} {target}");
            assert_eq!(
                first.body.as_deref(),
                Some(want.as_bytes()),
                "{method} {target}"
            );
        }
    }
});
