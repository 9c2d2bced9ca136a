//! The HTTP request path of the servers (`http-server`): arbitrary bytes from a client, through the
//! server's own protocol code (`http_server::http1::Conn`, the code the event loop runs
//! for every connection) and the handler, fed in pieces of 1, 7, 61 or 4096 bytes.
//!
//! Checks:
//! - every byte written back is a well-formed HTTP/1.x response with an allowed status, a
//!   Content-Length and a JSON body (`fraud_fuzz::http::parse_replies`);
//! - every complete request gets its answer: the plain requests at the start of the input
//!   (`fraud_fuzz::http::simple_request`) get exactly the handler's answers, in order, whatever
//!   follows them (a malformed head after them included);
//! - the connection always ends: once the deadlines have passed, it says [`Next::Close`] (no
//!   state in which it would wait forever), and it never asks to read after closing;
//! - a call that pauses at its budget (pipelined requests) goes on when resumed, so the answers
//!   are the same as without a budget.
#![no_main]

use fraud_fuzz::http::{parse_replies, simple_request};
use fraud_fuzz::scorer;
use function::Request;
use libfuzzer_sys::fuzz_target;
use http_server::http1::{Buffers, Conn, Next};
use http_server::{Limits, ReadyFlag, Scoring};
use std::time::{Duration, Instant};

/// Small enough that fuzz inputs reach the 413 path.
const MAX_BODY: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_body_bytes: MAX_BODY,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    // Warm or warming, depending on the input, so both answers of /ready are reached.
    let ready = ReadyFlag::default();
    ready.set(data.len() % 3 == 0);
    let readiness = ready.readiness();
    let mut app = Scoring {
        scorer: scorer(),
        ready,
        index: Vec::new(),
    };
    let t0 = Instant::now();
    let mut conn = Conn::new(t0);
    let mut bufs = Buffers::default();
    let mut closed = false;
    let chunk = [1, 7, 61, 4096][data.len() % 4];
    for piece in data.chunks(chunk) {
        let mut next = conn.receive(piece, t0, &limits, &mut app, &mut bufs);
        // Paused at the call's budget (pipelined requests): go on as the event loop does.
        while next == Next::Pause {
            next = conn.resume(t0, &limits, &mut app, &mut bufs);
        }
        if closed {
            assert_eq!(next, Next::Close, "a closed connection asked for more input");
        }
        closed = next == Next::Close;
    }
    // Every deadline passed: the connection must end, answering what it can.
    let next = conn.tick(t0 + Duration::from_secs(11), &limits, &mut bufs);
    assert_eq!(next, Next::Close, "connection still open after every deadline");
    let out = bufs.out;
    if std::env::var_os("HTTP_FUZZ_DEBUG").is_some() {
        eprintln!("OUT {:?}", String::from_utf8_lossy(&out));
    }
    let replies: Vec<_> = parse_replies(&out)
        .into_iter()
        .filter(|r| r.status != 100)
        .collect();

    // The plain requests at the start of the input, answered in order, exactly as the handler
    // answers them (413 for a body over the limit).
    let mut at = 0;
    let mut i = 0;
    while let Some(req) = simple_request(&data[at..]) {
        let want = if req.body.len() > MAX_BODY {
            function::Response::body_too_large()
        } else {
            scorer().handle(
                &Request {
                    method: &req.method,
                    target: &req.target,
                    content_type: req.content_type.as_deref(),
                    body: &req.body,
                },
                readiness,
            )
        };
        let Some(got) = replies.get(i) else {
            panic!("no answer to complete request {i}: {} {}", req.method, req.target);
        };
        assert_eq!(got.status, want.status, "request {i}: {} {}", req.method, req.target);
        if req.method != "HEAD" {
            assert_eq!(
                got.body.as_deref().unwrap_or_default(),
                want.body.as_bytes(),
                "request {i}: {} {}",
                req.method,
                req.target
            );
        }
        if want.status == 413 {
            break; // the connection ends there
        }
        at += req.len;
        i += 1;
    }
});
