//! What the `http` target checks about the bytes the server writes back: a sequence of
//! well-formed HTTP/1.x responses with allowed statuses and JSON bodies, and, for the requests at
//! the start of the input that are simple enough to read without the server's parser, exactly
//! the answers the handler gives, in order.

use function::decision::BODIES;

/// Statuses the server may send: the handler's (200, 400, 404, 405, 415, 503 on `/ready` while
/// warming up), the transport's (400, 408, 413, 431, 501, 505), and 100 for `Expect:
/// 100-continue`.
pub const ALLOWED: [u16; 12] = [100, 200, 400, 404, 405, 408, 413, 415, 431, 501, 503, 505];

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
                assert_eq!(status, 100, "status {status} without content-length");
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
        503 if text == r#"{"ready":false}"# => {}
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

/// A request read without the server's parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    pub method: String,
    pub target: String,
    pub content_type: Option<Vec<u8>>,
    pub body: Vec<u8>,
    /// Bytes of the input it took.
    pub len: usize,
}

/// The request at the start of `input`, when it is complete and plain enough that the server
/// must read it the same way: HTTP/1.1, origin-form target, a token method, at most one
/// all-digit Content-Length, exactly one Host of letters, digits, dots and dashes, no
/// Transfer-Encoding, Expect, Connection or Upgrade, header values of visible ASCII.
pub fn simple_request(input: &[u8]) -> Option<Simple> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let method = req.method?;
    let path = req.path?;
    if req.version != Some(1)
        || !path.starts_with('/')
        || !method.bytes().all(|c| c.is_ascii_uppercase())
    {
        return None;
    }
    let mut len = None;
    let mut content_type = None;
    let mut hosts = 0;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "content-length" => {
                if len.is_some() || h.value.is_empty() || !h.value.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                len = Some(std::str::from_utf8(h.value).ok()?.parse::<usize>().ok()?);
            }
            "content-type" if content_type.is_none() => content_type = Some(h.value.to_vec()),
            "host" => {
                let plain = |c: &u8| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'-';
                if !h.value.iter().all(plain) {
                    return None;
                }
                hosts += 1;
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
    if hosts != 1 {
        return None;
    }
    let len = len.unwrap_or(0);
    // A declared length near usize::MAX is not a complete request (and must not overflow).
    let body = input.get(head..head.checked_add(len)?)?.to_vec();
    Some(Simple {
        method: method.to_string(),
        target: path.to_string(),
        content_type,
        body,
        len: head + len,
    })
}
