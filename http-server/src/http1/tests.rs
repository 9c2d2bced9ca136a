//! The protocol of one connection, driven byte by byte and tick by tick (no sockets).

use super::*;
use proptest::prelude::*;
use std::borrow::Cow;
use std::time::Duration;

fn limits() -> Limits {
    Limits {
        max_body_bytes: 1024,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

/// Echoes what it was given: `METHOD TARGET [content type] body`.
fn echo(req: &Request<'_>) -> Response {
    let ct = req
        .content_type
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .unwrap_or_default();
    Response {
        status: 200,
        content_type: function::handler::JSON,
        allow: None,
        field: None,
        body: Cow::Owned(format!(
            "{} {} [{ct}] {}",
            req.method,
            req.target,
            String::from_utf8_lossy(req.body)
        )),
        outcome: function::Outcome::Ready,
    }
}

/// A connection fed `pieces` one after the other at time `t0`, resumed whenever it pauses (as the
/// event loop does); returns everything it wrote and its last answer to `receive`.
fn feed(pieces: &[&[u8]]) -> (String, Next, Conn) {
    feed_with(&limits(), pieces)
}

fn feed_with(limits: &Limits, pieces: &[&[u8]]) -> (String, Next, Conn) {
    let t0 = Instant::now();
    let mut c = Conn::new(t0);
    let mut bufs = Buffers::default();
    let mut out = Vec::new();
    let mut next = Next::Read;
    for p in pieces {
        next = c.receive(p, t0, limits, &mut echo, &mut bufs);
        out.extend_from_slice(&bufs.out);
        bufs.out.clear();
        while next == Next::Pause {
            next = c.resume(t0, limits, &mut echo, &mut bufs);
            out.extend_from_slice(&bufs.out);
            bufs.out.clear();
        }
    }
    (String::from_utf8(out).unwrap(), next, c)
}

fn post(target: &str, body: &str) -> String {
    format!("POST {target} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

/// The answer `echo` gives, framed as the server writes it.
fn answer(body: &str, connection: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{connection}\r\n{body}",
        body.len()
    )
}

#[test]
fn one_request_one_answer_and_nothing_kept() {
    let (out, next, c) = feed(&[post("/fraud-score", "{}").as_bytes()]);
    assert_eq!(out, answer("POST /fraud-score [application/json] {}", ""));
    assert_eq!(next, Next::Read);
    assert!(c.is_idle());
    assert_eq!(
        c.pending.capacity(),
        0,
        "an idle connection holds no buffer"
    );
}

#[test]
fn split_anywhere_gives_the_same_answers() {
    let two = format!("{}{}", post("/a", "xyz"), post("/b?q=1", ""));
    let whole = feed(&[two.as_bytes()]).0;
    assert_eq!(
        whole,
        format!(
            "{}{}",
            answer("POST /a [application/json] xyz", ""),
            answer("POST /b?q=1 [application/json] ", "")
        )
    );
    for cut in 0..two.len() {
        let (a, b) = two.as_bytes().split_at(cut);
        assert_eq!(feed(&[a, b]).0, whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = two.as_bytes().chunks(1).collect();
    assert_eq!(feed(&bytes).0, whole);
}

#[test]
fn pipelined_answers_come_before_the_refusal_of_a_malformed_head() {
    let input = format!(
        "{}{}GET /x HTTP/1.x7\r\n\r\n{}",
        post("/1", "a"),
        post("/2", "b"),
        post("/3", "c")
    );
    let (out, next, _) = feed(&[input.as_bytes()]);
    let (first, rest) = out.split_at(out.find("HTTP/1.1 400").expect("a 400"));
    assert_eq!(
        first,
        format!(
            "{}{}",
            answer("POST /1 [application/json] a", ""),
            answer("POST /2 [application/json] b", "")
        )
    );
    assert!(rest.contains("connection: close"), "{rest}");
    assert!(
        rest.contains(r#""error":"bad request: malformed HTTP version"#),
        "{rest}"
    );
    assert!(
        !rest.contains("/3"),
        "nothing after the refused head is read: {rest}"
    );
    assert_eq!(next, Next::Close);
}

#[test]
fn malformed_heads_get_400() {
    for raw in [
        &b"GET /ready\r\n\r\n"[..],
        b"HELLO\r\n\r\n",
        b"POST /fraud-score HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n",
        b"POST /fra\x00ud-score HTTP/1.1\r\nHost: t\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n",
    ] {
        let (out, next, _) = feed(&[raw]);
        assert!(
            out.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{raw:?}: {out}"
        );
        assert!(out.contains("connection: close"), "{raw:?}");
        let body = &out[out.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(
            v["error"].as_str().unwrap().starts_with("bad request: "),
            "{body}"
        );
        assert_eq!(next, Next::Close);
    }
    // Two equal lengths are one length.
    let (out, _, _) =
        feed(&[b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"]);
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
}

#[test]
fn content_length_is_any_number_of_digits() {
    // RFC 9110: `1*DIGIT`, no length limit; leading zeros do not change the value.
    let zeros = "0".repeat(38);
    let raw = format!("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {zeros}\r\n\r\n");
    let (out, next, _) = feed(&[raw.as_bytes()]);
    assert_eq!(out, answer("POST /x [] ", ""));
    assert_ne!(next, Next::Close);
    let raw = format!("POST /y HTTP/1.1\r\nHost: t\r\nContent-Length: {zeros}2\r\n\r\n{{}}");
    let (out, next, _) = feed(&[raw.as_bytes()]);
    assert_eq!(out, answer("POST /y [] {}", ""));
    assert_ne!(next, Next::Close);
    assert_eq!(
        super::content_length(b"18446744073709551615"),
        Some(u64::MAX)
    );
    assert_eq!(super::content_length(b"18446744073709551616"), None);
    assert_eq!(
        super::content_length(b"00018446744073709551615"),
        Some(u64::MAX)
    );
    assert_eq!(super::content_length(b""), None);
    assert_eq!(super::content_length(b"1 2"), None);
}

#[test]
fn oversized_heads_get_431() {
    let long = format!(
        "GET /x HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES)
    );
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let many = format!("GET /x HTTP/1.1\r\nHost: t\r\n{many}\r\n");
    // Unfinished, but already over the limit.
    let endless = format!(
        "GET /x HTTP/1.1\r\nHost: t\r\nX-Pad: {}",
        "a".repeat(MAX_HEAD_BYTES)
    );
    for raw in [long, many, endless] {
        let (out, next, _) = feed(&[raw.as_bytes()]);
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
        assert!(
            out.ends_with(r#"{"error":"request head too large"}"#),
            "{out}"
        );
        assert_eq!(next, Next::Close);
    }
    // Just under the limit is fine.
    let fits = format!(
        "GET /x HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES - 40)
    );
    assert!(feed(&[fits.as_bytes()]).0.starts_with("HTTP/1.1 200 "));
}

#[test]
fn bodies_over_the_limit_get_413_at_once() {
    // Declared: refused before any of it arrives.
    let (out, next, _) = feed(&[b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\n\r\n"]);
    assert!(
        out.starts_with("HTTP/1.1 413 Content Too Large\r\n"),
        "{out}"
    );
    assert!(out.ends_with(r#"{"error":"body too large"}"#));
    assert_eq!(next, Next::Close);
    // At the limit: served.
    let at = "x".repeat(1024);
    assert!(feed(&[post("/x", &at).as_bytes()])
        .0
        .starts_with("HTTP/1.1 200 "));
    // Chunked: refused as soon as a chunk size goes over.
    let (out, _, _) = feed(&[
        b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n",
        &[b'a'; 0x200],
        b"\r\n201\r\n",
    ]);
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
}

#[test]
fn chunked_bodies_are_decoded() {
    let raw = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n1\r\nd\r\n0\r\nX-Trailer: 1\r\n\r\n";
    let want = answer("POST /c [] abcd", "");
    assert_eq!(feed(&[raw]).0, want);
    for cut in 0..raw.len() {
        let (a, b) = raw.split_at(cut);
        assert_eq!(feed(&[a, b]).0, want, "cut at {cut}");
    }
    // Chunked wins over a length, and the connection closes after the answer.
    let (out, next, _) = feed(&[b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"]);
    assert_eq!(out, answer("POST /c [] hi", "connection: close\r\n"));
    assert_eq!(next, Next::Close);
    // Broken framing: 400.
    for raw in [
        &b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
    ] {
        let (out, next, _) = feed(&[raw]);
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
        assert_eq!(next, Next::Close);
    }
}

#[test]
fn versions_keep_alive_head_and_continue() {
    // HTTP/1.0: answered in 1.0, closed unless keep-alive was asked for.
    let (out, next, _) = feed(&[b"POST /x HTTP/1.0\r\nContent-Length: 1\r\n\r\na"]);
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");
    assert!(out.contains("connection: close"));
    assert_eq!(next, Next::Close);
    let (out, next, _) = feed(&[b"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"]);
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n") && out.contains("connection: keep-alive"));
    assert_eq!(next, Next::Read);
    // HTTP/1.1 Connection: close.
    let (out, next, _) = feed(&[b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: Close\r\n\r\n"]);
    assert!(out.contains("connection: close"));
    assert_eq!(next, Next::Close);
    // HEAD: the head of the answer, its length, no body.
    let (out, _, _) =
        feed(&[b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\nGET /y HTTP/1.1\r\nHost: t\r\n\r\n"]);
    let head_len = "HEAD /x [] ".len();
    assert!(out.starts_with(&format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {head_len}\r\n\r\nHTTP/1.1 200 OK"
    )), "{out}");
    // Expect: 100-continue: 100 while the body is missing, then the answer.
    let (out, _, _) = feed(&[
        b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        b"{",
        b"}",
    ]);
    assert_eq!(
        out,
        format!(
            "HTTP/1.1 100 Continue\r\n\r\n{}",
            answer("POST /x [] {}", "")
        )
    );
    // No 100 when the body came with the head.
    let (out, _, _) = feed(&[
        b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
    ]);
    assert_eq!(out, answer("POST /x [] {}", ""));
}

#[test]
fn absolute_targets_route_by_path() {
    for (target, path) in [
        ("http://example.com/fraud-score?x=1", "/fraud-score?x=1"),
        ("HTTP://example.com/fraud-score", "/fraud-score"),
        ("https://h:8080/a/b", "/a/b"),
        ("http://example.com", "/"),
        ("http://example.com?x=/a", "/"),
        ("*", "*"),
        ("/plain", "/plain"),
    ] {
        assert_eq!(origin_form(target), path, "{target}");
    }
}

#[test]
fn deadlines() {
    let l = limits();
    let t0 = Instant::now();
    let later = |c: &mut Conn, after: Duration| {
        let mut bufs = Buffers::default();
        let next = c.tick(t0 + after, &l, &mut bufs);
        (String::from_utf8(bufs.out).unwrap(), next)
    };
    let mut bufs = Buffers::default();
    // Idle: closed silently at the head deadline, not before.
    let mut c = Conn::new(t0);
    assert_eq!(
        later(&mut c, l.header_timeout / 2),
        (String::new(), Next::Read)
    );
    assert_eq!(
        later(&mut c, l.header_timeout),
        (String::new(), Next::Close)
    );
    // Part of a head: 408.
    let mut c = Conn::new(t0);
    c.receive(
        b"POST /x HTTP/1.1\r\nHost: t\r\nHo",
        t0,
        &l,
        &mut echo,
        &mut bufs,
    );
    let (out, next) = later(&mut c, l.header_timeout);
    assert!(
        out.starts_with("HTTP/1.1 408 ")
            && out.ends_with(r#"{"error":"request head not received in time"}"#),
        "{out}"
    );
    assert_eq!(next, Next::Close);
    // Head in, body short: 408 at the body deadline counted from the head.
    let mut c = Conn::new(t0);
    let head_at = t0 + Duration::from_secs(8);
    c.receive(
        b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\n{",
        head_at,
        &l,
        &mut echo,
        &mut bufs,
    );
    assert_eq!(
        later(&mut c, Duration::from_secs(12)),
        (String::new(), Next::Read)
    );
    let (out, next) = later(&mut c, Duration::from_secs(18));
    assert!(
        out.starts_with("HTTP/1.1 408 ")
            && out.ends_with(r#"{"error":"body not received in time"}"#),
        "{out}"
    );
    assert_eq!(next, Next::Close);
    // After an answer the head deadline starts again.
    let mut c = Conn::new(t0);
    let t1 = t0 + Duration::from_secs(9);
    c.receive(post("/x", "").as_bytes(), t1, &l, &mut echo, &mut bufs);
    assert_eq!(later(&mut c, Duration::from_secs(15)).1, Next::Read);
    assert_eq!(later(&mut c, Duration::from_secs(19)).1, Next::Close);
}

#[test]
fn finish_closes_idle_at_once_and_busy_after_the_answer() {
    let t0 = Instant::now();
    let mut bufs = Buffers::default();
    let mut c = Conn::new(t0);
    assert_eq!(c.finish(), Next::Close);
    let mut c = Conn::new(t0);
    c.receive(
        b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{",
        t0,
        &limits(),
        &mut echo,
        &mut bufs,
    );
    assert_eq!(c.finish(), Next::Read);
    let next = c.receive(b"}", t0, &limits(), &mut echo, &mut bufs);
    assert_eq!(next, Next::Close);
    let out = String::from_utf8(bufs.out).unwrap();
    assert_eq!(out, answer("POST /x [] {}", "connection: close\r\n"));
}

#[test]
fn chunk_framing_cannot_grow_the_buffer_without_bound() {
    // 1-byte chunks with long extensions: the body stays under the limit, the framing would
    // grow the buffer without bound.
    let chunk = format!("1;{}\r\na\r\n", "x".repeat(100));
    let mut pieces: Vec<Vec<u8>> =
        vec![b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()];
    pieces.extend((0..500).map(|_| chunk.clone().into_bytes()));
    let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    let (out, next, c) = feed(&refs);
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
    assert_eq!(next, Next::Close);
    assert!(c.pending.len() <= MAX_HEAD_BYTES + 2 * limits().max_body_bytes + chunk.len());
}

#[test]
fn pipelined_requests_are_answered_a_budget_at_a_time() {
    let l = Limits {
        max_requests_per_turn: 16,
        ..limits()
    };
    let input = "GET /g HTTP/1.1\r\nHost: t\r\n\r\n".repeat(40);
    let t0 = Instant::now();
    let mut c = Conn::new(t0);
    let mut bufs = Buffers::default();
    let mut calls = vec![c.receive(input.as_bytes(), t0, &l, &mut echo, &mut bufs)];
    let mut answers = vec![bufs.out.len()];
    while *calls.last().unwrap() == Next::Pause {
        // While paused nothing is due from the client: no deadline applies.
        assert_eq!(
            c.tick(t0 + Duration::from_secs(60), &l, &mut bufs),
            Next::Pause
        );
        bufs.out.clear();
        calls.push(c.resume(t0, &l, &mut echo, &mut bufs));
        answers.push(bufs.out.len());
    }
    assert_eq!(calls, [Next::Pause, Next::Pause, Next::Read]);
    let one = answer("GET /g [] ", "").len();
    assert_eq!(answers, [16 * one, 16 * one, 8 * one]);
    assert!(c.is_idle() && c.held_bytes() == 0);

    // The unsent-answers cap stops a call too, at the first answer that reaches it.
    let l = Limits {
        max_unsent_bytes: 3 * one,
        ..limits()
    };
    let (out, next, _) = feed_with(&l, &[input.as_bytes()]);
    assert_eq!((out.len(), next), (40 * one, Next::Read));
    let mut c = Conn::new(t0);
    bufs.out.clear();
    assert_eq!(
        c.receive(input.as_bytes(), t0, &l, &mut echo, &mut bufs),
        Next::Pause
    );
    assert_eq!(bufs.out.len(), 3 * one);
    assert!(c.held_bytes() >= input.len() - 3 * "GET /g HTTP/1.1\r\nHost: t\r\n\r\n".len());
}

/// Bytes the parsers look at while `pieces` are fed.
fn scanned_feeding(pieces: &[&[u8]]) -> (usize, String) {
    SCANNED.with(|s| s.set(0));
    let (out, _, _) = feed(pieces);
    (SCANNED.with(|s| s.get()), out)
}

#[test]
fn a_request_in_pieces_is_read_in_linear_time() {
    // A 15 KB head, one byte at a time (slowloris): parsed when a line ends, not per byte.
    let head = format!(
        "GET /x HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(15_000)
    );
    let bytes: Vec<&[u8]> = head.as_bytes().chunks(1).collect();
    let (scanned, out) = scanned_feeding(&bytes);
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert!(
        scanned <= 4 * head.len(),
        "{scanned} bytes parsed for a {}-byte head",
        head.len()
    );

    // A chunked body of 1-byte chunks with long extensions, one byte at a time.
    let chunk = format!("1;{}\r\na\r\n", "x".repeat(50));
    let raw = format!(
        "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{}0\r\n\r\n",
        chunk.repeat(200)
    );
    let bytes: Vec<&[u8]> = raw.as_bytes().chunks(1).collect();
    let (scanned, out) = scanned_feeding(&bytes);
    assert_eq!(out, answer(&format!("POST /c [] {}", "a".repeat(200)), ""));
    assert!(
        scanned <= 4 * raw.len(),
        "{scanned} bytes parsed for a {}-byte request",
        raw.len()
    );

    // A length-framed body one byte at a time: the head is parsed twice, the body not at all.
    let raw = post("/p", &"b".repeat(5_000));
    let bytes: Vec<&[u8]> = raw.as_bytes().chunks(1).collect();
    let (scanned, _) = scanned_feeding(&bytes);
    assert!(scanned <= 8 * 100, "{scanned} bytes parsed for a 5 KB body");
}

#[test]
fn garbage_is_refused_at_its_first_bytes() {
    // A TLS hello has no line end: it is refused at once, not at the head deadline.
    let (out, next, _) = feed(&[b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"]);
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
    assert_eq!(next, Next::Close);
}

proptest! {
    /// Any sequence of valid requests, cut into any pieces, gets exactly its answers in order.
    #[test]
    fn pipelines_in_any_pieces(
        reqs in prop::collection::vec((0usize..3, "[a-z]{0,20}"), 1..6),
        cuts in prop::collection::vec(0usize..400, 0..8),
    ) {
        let mut input = String::new();
        let mut want = String::new();
        for (kind, body) in &reqs {
            match kind {
                0 => {
                    input += &post("/p", body);
                    want += &answer(&format!("POST /p [application/json] {body}"), "");
                }
                1 => {
                    let chunk = if body.is_empty() { String::new() } else { format!("{:x}\r\n{body}\r\n", body.len()) };
                    input += &format!("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}0\r\n\r\n");
                    want += &answer(&format!("POST /c [] {body}"), "");
                }
                _ => {
                    input += "GET /g HTTP/1.1\r\nHost: t\r\n\r\n";
                    want += &answer("GET /g [] ", "");
                }
            }
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut at = 0;
        for c in cuts {
            pieces.push(&input.as_bytes()[at..c]);
            at = c;
        }
        pieces.push(&input.as_bytes()[at..]);
        let (out, next, c) = feed(&pieces);
        prop_assert_eq!(out, want);
        prop_assert_eq!(next, Next::Read);
        prop_assert!(c.is_idle());
    }
}

/// What a request gets in the conformance table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Answered by the app with 200 (the echo), in this HTTP minor version, the connection kept
    /// (`true`) or closed after the answer.
    Served { version: u8, kept: bool },
    /// Refused with this status, `connection: close`, and nothing after it read.
    Refused(u16),
}

/// Request smuggling and framing, case by case, as RFC 9110 and RFC 9112 say they must be
/// answered (the section in each case's name). Each request is followed on the same connection
/// by a plain request for `/next`: a served request with a kept connection must let it through
/// (its framing ended where the client's did), a refused or closing one must not read it.
#[test]
fn conformance() {
    use Expect::{Refused, Served};
    const KEPT: Expect = Served {
        version: 1,
        kept: true,
    };
    const CLOSED: Expect = Served {
        version: 1,
        kept: false,
    };
    let cases: &[(&str, &str, Expect)] = &[
        // RFC 9112 6.1-6.3: transfer codings and the body's length.
        ("6.3 chunked", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", KEPT),
        ("6.3 chunked, any case, spaces", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n0\r\n\r\n", KEPT),
        ("5.6.1 empty list elements", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: , chunked,\r\n\r\n0\r\n\r\n", KEPT),
        ("6.3 chunked wins over a length, then close", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", CLOSED),
        ("6.3 a length after chunked, then close", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", CLOSED),
        ("6.1 gzip, chunked: not implemented", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", Refused(501)),
        ("6.1 codings over two lines", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Refused(501)),
        ("6.1 a coding with a parameter", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip;q=1, chunked\r\n\r\n0\r\n\r\n", Refused(501)),
        ("7 chunked takes no parameter", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked;x=1\r\n\r\n0\r\n\r\n", Refused(501)),
        ("6.1 an unknown coding", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: x-custom, chunked\r\n\r\n0\r\n\r\n", Refused(501)),
        ("6.3 chunked not last", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", Refused(400)),
        ("6.3 no chunked at all", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nab", Refused(400)),
        ("6.1 chunked twice", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", Refused(400)),
        ("6.1 chunked on two lines", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Refused(400)),
        ("6.1 an empty transfer-encoding", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \r\nContent-Length: 2\r\n\r\nab", Refused(400)),
        ("6.1 a coding that is not a token", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \"chunked\"\r\n\r\n0\r\n\r\n", Refused(400)),
        ("6.1 transfer-encoding in HTTP/1.0", "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Refused(400)),
        ("7.1 a chunk extension", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=\"v\"\r\nab\r\n0\r\n\r\n", KEPT),
        ("7.1.2 a trailer section", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n", KEPT),
        ("7.1 chunk data longer than its size", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", Refused(400)),
        ("7.1 a chunk size that is not hex", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nab\r\n0\r\n\r\n", Refused(400)),
        ("7.1 a chunk size past u64", "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nab\r\n0\r\n\r\n", Refused(400)),
        // RFC 9110 8.6, RFC 9112 6.3: Content-Length.
        ("8.6 a length", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab", KEPT),
        ("8.6 leading zeros", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 0002\r\n\r\nab", KEPT),
        ("8.6 the same length twice", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", KEPT),
        ("6.3 two different lengths", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", Refused(400)),
        ("8.6 a length list", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 2, 2\r\n\r\nab", Refused(400)),
        ("8.6 a signed length", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\nab", Refused(400)),
        ("8.6 a negative length", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", Refused(400)),
        ("8.6 a hex length", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 0x2\r\n\r\nab", Refused(400)),
        ("6.3 a length past u64", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 18446744073709551616\r\n\r\n", Refused(400)),
        ("6.3 no length: no body", "GET /a HTTP/1.1\r\nHost: t\r\n\r\n", KEPT),
        // RFC 9112 5: field lines.
        ("5.1 space before the colon", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length : 2\r\n\r\nab", Refused(400)),
        ("5.1 space before a header name", "POST /a HTTP/1.1\r\nHost: t\r\n Content-Length: 2\r\n\r\nab", Refused(400)),
        ("5.2 obsolete line folding", "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n 2\r\n\r\nab", Refused(400)),
        ("5.5 a control character in a value the server does not read", "GET /a HTTP/1.1\r\nHost: t\r\nX-Note: a\x01b\r\n\r\n", Refused(400)),
        ("5.5 NUL in a value", "GET /a HTTP/1.1\r\nHost: t\r\nX-Note: a\0b\r\n\r\n", Refused(400)),
        ("5.5 obs-text in a value", "GET /a HTTP/1.1\r\nHost: t\r\nX-Note: caf\u{e9}\r\n\r\n", KEPT),
        ("2.2 bare LF line ends", "GET /a HTTP/1.1\nHost: t\n\n", KEPT),
        ("2.2 a bare CR", "GET /a HTTP/1.1\rHost: t\r\n\r\n", Refused(400)),
        // RFC 9112 3: the request line and Host.
        ("3 two spaces", "GET  /a HTTP/1.1\r\nHost: t\r\n\r\n", Refused(400)),
        ("3 a space in the target", "GET /a b HTTP/1.1\r\nHost: t\r\n\r\n", Refused(400)),
        ("3.2.2 absolute form", "GET http://t/a HTTP/1.1\r\nHost: t\r\n\r\n", KEPT),
        ("3.2 no Host in HTTP/1.1", "GET /a HTTP/1.1\r\n\r\n", Refused(400)),
        ("3.2 two Host lines", "GET /a HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", Refused(400)),
        ("3.2 an invalid Host", "GET /a HTTP/1.1\r\nHost: t u\r\n\r\n", Refused(400)),
        ("3.2 an empty Host", "GET /a HTTP/1.1\r\nHost:\r\n\r\n", KEPT),
        ("3.2 a Host with a port and an IP literal", "GET /a HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", KEPT),
        ("3.2 no Host in HTTP/1.0", "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", Served { version: 0, kept: true }),
        // RFC 9110 2.5, RFC 9112 2.3: versions.
        ("2.5 HTTP/1.0 closes", "GET /a HTTP/1.0\r\n\r\n", Served { version: 0, kept: false }),
        ("2.5 HTTP/1.2 is handled as 1.1", "GET /a HTTP/1.2\r\nHost: t\r\n\r\n", KEPT),
        ("2.5 HTTP/1.9 with a body", "POST /a HTTP/1.9\r\nHost: t\r\nContent-Length: 2\r\n\r\nab", KEPT),
        ("2.5 HTTP/2.0 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Refused(505)),
        ("2.5 HTTP/3.0", "GET /a HTTP/3.0\r\nHost: t\r\n\r\n", Refused(505)),
        ("2.3 HTTP/1.10 is not a version", "GET /a HTTP/1.10\r\nHost: t\r\n\r\n", Refused(400)),
        ("2.3 HTTP/0.9", "GET /a\r\n\r\n", Refused(400)),
        ("2.3 a lower-case name", "GET /a http/1.1\r\nHost: t\r\n\r\n", Refused(400)),
        // RFC 9110 10.1.1: Expect.
        ("10.1.1 Expect: 100-continue with the body there", "POST /a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab", KEPT),
        // RFC 9112 9.6: Connection.
        ("9.6 Connection: close", "GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", CLOSED),
        ("9.6 close among other options", "GET /a HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, CLOSE\r\n\r\n", CLOSED),
    ];
    let next = "GET /next HTTP/1.1\r\nHost: t\r\n\r\n";
    for &(name, raw, expect) in cases {
        let input = format!("{raw}{next}");
        // Whole, and one byte at a time: the framing must not depend on how bytes arrive.
        for pieces in [vec![input.as_bytes()], input.as_bytes().chunks(1).collect()] {
            let (out, last, _) = feed(&pieces);
            // A 100 Continue comes first when the body was not there with the head.
            let out = out
                .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
                .unwrap_or(&out);
            let status_line = out.lines().next().unwrap_or_default().to_string();
            let to_next = out.contains("GET /next");
            match expect {
                Served { version, kept } => {
                    assert!(
                        status_line.starts_with(&format!("HTTP/1.{version} 200 OK")),
                        "{name}: {out}"
                    );
                    assert_eq!(
                        to_next,
                        kept,
                        "{name}: the next request {}: {out}",
                        if kept { "was not read" } else { "was read" }
                    );
                    if !kept {
                        assert_eq!(last, Next::Close, "{name}");
                    }
                }
                Refused(status) => {
                    assert!(
                        status_line.starts_with(&format!("HTTP/1.1 {status} ")),
                        "{name}: {out}"
                    );
                    assert!(out.contains("connection: close"), "{name}: {out}");
                    assert!(!to_next, "{name}: read past a refused request: {out}");
                    assert_eq!(last, Next::Close, "{name}");
                    let body = &out[out.find("\r\n\r\n").unwrap() + 4..];
                    let v: serde_json::Value = serde_json::from_str(body).unwrap();
                    assert!(
                        v["error"].as_str().is_some_and(|e| !e.is_empty()),
                        "{name}: {body}"
                    );
                }
            }
        }
    }
}

/// Promises every `/fraud-score` answer ([`Answer::Later`]) and answers the rest at once.
struct Promising {
    promised: Vec<(Ticket, String)>,
}

impl App for Promising {
    fn answer(&mut self, req: &Request<'_>, ticket: Ticket) -> Answer {
        if req.target == "/fraud-score" {
            self.promised.push((ticket, echo(req).body.into_owned()));
            return Answer::Later;
        }
        Answer::Now(echo(req))
    }
}

fn body_response(body: String) -> Response {
    Response {
        body: Cow::Owned(body),
        ..echo(&Request::new("GET", "/", b""))
    }
}

/// A promised answer holds the connection: the requests pipelined after it wait (answers go
/// out in order), no deadline of the client's runs meanwhile, and once it completes the rest
/// is answered; a completion without a promise (a reset connection) writes nothing.
#[test]
fn a_promised_answer_keeps_the_order_and_stops_the_client_s_clock() {
    let t0 = Instant::now();
    let (l, mut bufs) = (limits(), Buffers::default());
    let mut app = Promising { promised: vec![] };
    let mut c = Conn::new(t0);
    let pipelined = post("/fraud-score", "{\"a\":1}") + &get("/ready") + &get("/other");
    assert_eq!(
        c.receive(pipelined.as_bytes(), t0, &l, &mut app, &mut bufs),
        Next::Await
    );
    assert!(bufs.out.is_empty() && !c.is_idle());
    assert_eq!(app.promised.len(), 1);
    // Long past every deadline: nothing happens to a connection waiting for its server.
    let late = t0 + Duration::from_secs(60);
    assert_eq!(c.tick(late, &l, &mut bufs), Next::Await);
    let (_, body) = app.promised.pop().unwrap();
    let next = c.complete(&body_response(body.clone()), late, &l, &mut app, &mut bufs);
    assert_eq!(next, Next::Read);
    let out = String::from_utf8(std::mem::take(&mut bufs.out)).unwrap();
    let want = answer(&body, "") + &answer("GET /ready [] ", "") + &answer("GET /other [] ", "");
    assert_eq!(out, want);
    assert!(c.is_idle());
    // Nothing promised: a late completion is dropped.
    let next = c.complete(&body_response("x".into()), late, &l, &mut app, &mut bufs);
    assert_eq!((next, bufs.out.len()), (Next::Read, 0));
    // Asked to finish while waiting: the promised answer is the last, and says close.
    let mut c = Conn::new(t0);
    c.receive(
        post("/fraud-score", "{}").as_bytes(),
        t0,
        &l,
        &mut app,
        &mut bufs,
    );
    assert_eq!(c.finish(), Next::Await);
    let (_, body) = app.promised.pop().unwrap();
    let next = c.complete(&body_response(body.clone()), t0, &l, &mut app, &mut bufs);
    assert_eq!(next, Next::Close);
    let out = String::from_utf8(std::mem::take(&mut bufs.out)).unwrap();
    assert_eq!(out, answer(&body, "connection: close\r\n"));
}

fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n")
}
