//! What the `http` target checks about the bytes the server writes back: a sequence of
//! well-formed HTTP/1.1 responses with allowed statuses and JSON bodies, and, for a first
//! request simple enough to read without hyper, the same answer the handler gives.

use function::decision::BODIES;

/// Statuses the server may send: the handler's (200, 400, 404, 405), the transport's (413, 503
/// before warm-up), and hyper's own answers to requests it cannot read (100 for
/// `Expect: 100-continue`, 400, 408, 414, 431, 501, 505).
pub const ALLOWED: [u16; 12] = [100, 200, 400, 404, 405, 408, 413, 414, 431, 501, 503, 505];

/// One parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub allow: Option<String>,
    /// None for a response without a body on the wire (to HEAD, 100, or content-length 0).
    pub body: Option<Vec<u8>>,
}

/// Splits the server's output into responses; panics (a fuzz failure) on anything that is not
/// a well-formed HTTP/1.x response with an allowed status and a consistent body.
pub fn parse_replies(mut out: &[u8]) -> Vec<Reply> {
    let mut replies = vec![];
    while !out.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(out) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => panic!("truncated response head: {:?}", lossy(out)),
            Err(e) => panic!("malformed response ({e}): {:?}", lossy(out)),
        };
        // hyper answers an HTTP/1.0 request in HTTP/1.0.
        assert!(matches!(resp.version, Some(0 | 1)), "{:?}", lossy(out));
        let status = resp.code.unwrap();
        assert!(
            ALLOWED.contains(&status),
            "status {status}: {:?}",
            lossy(out)
        );
        let header = |name: &str| {
            let mut values = resp
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8(h.value.to_vec()).expect("ASCII header"));
            let first = values.next();
            assert!(values.next().is_none(), "two {name} headers");
            first
        };
        assert!(header("transfer-encoding").is_none(), "chunked response");
        let len: usize = match header("content-length") {
            Some(v) => v.parse().expect("numeric content-length"),
            None => {
                assert!(
                    status == 100 || status == 408,
                    "status {status} without content-length"
                );
                0
            }
        };
        let content_type = header("content-type");
        let allow = header("allow");
        out = &out[head..];
        // A HEAD response announces the length of the body it does not send: what follows
        // is then the next response or the end of the stream (a JSON body never starts "HTTP/").
        let body = if len == 0 || status == 100 || out.is_empty() || out.starts_with(b"HTTP/") {
            None
        } else {
            assert!(out.len() >= len, "body shorter than content-length {len}");
            let (b, rest) = out.split_at(len);
            out = rest;
            Some(b.to_vec())
        };
        if let Some(b) = &body {
            check_body(status, content_type.as_deref(), b);
        }
        if status == 405 {
            assert!(allow.is_some(), "405 without Allow");
        }
        replies.push(Reply {
            status,
            content_type,
            allow,
            body,
        });
    }
    replies
}

fn check_body(status: u16, content_type: Option<&str>, body: &[u8]) {
    assert_eq!(content_type, Some("application/json"), "status {status}");
    let text = std::str::from_utf8(body).expect("UTF-8 body");
    match status {
        200 => assert!(
            BODIES.contains(&text) || text == r#"{"ready":true}"#,
            "200 body {text}"
        ),
        503 => assert_eq!(text, r#"{"ready":false}"#),
        _ => {
            let v: serde_json::Value = serde_json::from_str(text).expect("JSON error body");
            assert!(
                v.get("error")
                    .and_then(|e| e.as_str())
                    .is_some_and(|e| !e.is_empty()),
                "{status} body {text}"
            );
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned()
}

/// A request read without hyper, when it is plain enough that hyper must read it the same way:
/// origin-form target of RFC 3986 characters only (hyper's URI parser refuses some other
/// printable ones, such as a backtick, and then closes without an answer: docs/FUZZING.md), only
/// token characters in the method, one all-digit Content-Length, no Transfer-Encoding or Expect. Returns (method, target, body, bytes it took).
pub fn simple_request(input: &[u8]) -> Option<(String, String, Vec<u8>, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let method = req.method?;
    let path = req.path?;
    if !path.starts_with('/')
        || !path
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&c))
        || !method.bytes().all(|c| c.is_ascii_uppercase())
        || !matches!(
            method,
            "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "PATCH" | "OPTIONS"
        )
    {
        return None;
    }
    let mut len = None;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "content-length" => {
                if len.is_some() || h.value.is_empty() || !h.value.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                len = Some(std::str::from_utf8(h.value).ok()?.parse::<usize>().ok()?);
            }
            "transfer-encoding" | "expect" | "connection" | "upgrade" => return None,
            _ => {}
        }
        if !h
            .value
            .iter()
            .all(|&c| c == b'\t' || (0x20..0x7f).contains(&c))
        {
            return None;
        }
    }
    let len = len.unwrap_or(0);
    let body = input.get(head..head + len)?.to_vec();
    Some((method.to_string(), path.to_string(), body, head + len))
}
