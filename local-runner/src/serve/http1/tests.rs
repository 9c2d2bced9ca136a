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
        "{}{}GET /x HTTP/3.7\r\n\r\n{}",
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
        rest.contains(r#""error":"bad request: unsupported HTTP version"#),
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
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"GET /ready\r\n\r\n",
        b"HELLO\r\n\r\n",
        b"POST /fraud-score HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"POST /fra\x00ud-score HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
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
        feed(&[b"POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"]);
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
}

#[test]
fn content_length_is_any_number_of_digits() {
    // RFC 9110: `1*DIGIT`, no length limit; leading zeros do not change the value.
    let zeros = "0".repeat(38);
    let raw = format!("POST /x HTTP/1.1\r\nContent-Length: {zeros}\r\n\r\n");
    let (out, next, _) = feed(&[raw.as_bytes()]);
    assert_eq!(out, answer("POST /x [] ", ""));
    assert_ne!(next, Next::Close);
    let raw = format!("POST /y HTTP/1.1\r\nContent-Length: {zeros}2\r\n\r\n{{}}");
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
        "GET /x HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES)
    );
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let many = format!("GET /x HTTP/1.1\r\n{many}\r\n");
    // Unfinished, but already over the limit.
    let endless = format!("GET /x HTTP/1.1\r\nX-Pad: {}", "a".repeat(MAX_HEAD_BYTES));
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
        "GET /x HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES - 40)
    );
    assert!(feed(&[fits.as_bytes()]).0.starts_with("HTTP/1.1 200 "));
}

#[test]
fn bodies_over_the_limit_get_413_at_once() {
    // Declared: refused before any of it arrives.
    let (out, next, _) = feed(&[b"POST /x HTTP/1.1\r\nContent-Length: 1025\r\n\r\n"]);
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
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n",
        &[b'a'; 0x200],
        b"\r\n201\r\n",
    ]);
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
}

#[test]
fn chunked_bodies_are_decoded() {
    let raw = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n1\r\nd\r\n0\r\nX-Trailer: 1\r\n\r\n";
    let want = answer("POST /c [] abcd", "");
    assert_eq!(feed(&[raw]).0, want);
    for cut in 0..raw.len() {
        let (a, b) = raw.split_at(cut);
        assert_eq!(feed(&[a, b]).0, want, "cut at {cut}");
    }
    // Chunked wins over a length, and the connection closes after the answer.
    let (out, next, _) = feed(&[b"POST /c HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"]);
    assert_eq!(out, answer("POST /c [] hi", "connection: close\r\n"));
    assert_eq!(next, Next::Close);
    // Broken framing: 400.
    for raw in [
        &b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
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
    let (out, next, _) = feed(&[b"GET /x HTTP/1.1\r\nConnection: Close\r\n\r\n"]);
    assert!(out.contains("connection: close"));
    assert_eq!(next, Next::Close);
    // HEAD: the head of the answer, its length, no body.
    let (out, _, _) = feed(&[b"HEAD /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n"]);
    let head_len = "HEAD /x [] ".len();
    assert!(out.starts_with(&format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {head_len}\r\n\r\nHTTP/1.1 200 OK"
    )), "{out}");
    // Expect: 100-continue: 100 while the body is missing, then the answer.
    let (out, _, _) = feed(&[
        b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
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
    let (out, _, _) =
        feed(&[b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"]);
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
    c.receive(b"POST /x HTTP/1.1\r\nHo", t0, &l, &mut echo, &mut bufs);
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
        b"POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\n{",
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
        b"POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{",
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
        vec![b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()];
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
    let input = "GET /g HTTP/1.1\r\n\r\n".repeat(40);
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
    assert!(c.held_bytes() >= input.len() - 3 * "GET /g HTTP/1.1\r\n\r\n".len());
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
    let head = format!("GET /x HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(15_000));
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
        "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{}0\r\n\r\n",
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
                    input += &format!("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}0\r\n\r\n");
                    want += &answer(&format!("POST /c [] {body}"), "");
                }
                _ => {
                    input += "GET /g HTTP/1.1\r\n\r\n";
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
