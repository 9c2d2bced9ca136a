//! HTTP/1.1 for one connection, without I/O: bytes in, answers out.
//!
//! [`Conn`] is the protocol state of one connection. The event loop hands it the bytes it read
//! ([`Conn::receive`]) and the passing of time ([`Conn::tick`]); it appends the answers to an
//! output buffer and says what the connection needs next ([`Next`]). It never touches a socket,
//! so the unit tests and the `http` fuzz target drive exactly the code the server runs.
//!
//! Contract:
//! - Requests are answered in the order they arrive, each as soon as it is complete. A request
//!   that cannot be served (a malformed or oversized head, bad framing, a body over the limit, a
//!   deadline) gets its own answer after those of every complete request before it, with
//!   `connection: close`, and the connection ends ([`Next::Close`]); bytes after it are not read.
//! - Work per call is bounded ([`Limits::max_requests_per_turn`] answers, or
//!   [`Limits::max_unsent_bytes`] of them): pipelined requests beyond that stay unread in the
//!   connection and [`Next::Pause`] asks the caller to [`Conn::resume`] later (once the answers
//!   are written, or on the loop's next turn), so one client cannot keep the loop or make the
//!   server buffer answers without bound.
//! - A request that arrives in pieces is scanned once: the head is parsed again only when a new
//!   line of it has arrived (the head has at most [`MAX_HEADERS`] + 1 lines), and a chunked
//!   body is decoded as its pieces arrive, its state kept between calls. The work for a
//!   request is linear in its bytes however they are cut.
//! - Framing is RFC 9112's (section 6): `Content-Length` (any number of digits, refused only
//!   when the value overflows `u64`; two different values are refused) or
//!   `Transfer-Encoding` ending in `chunked` (which wins over a length, and then the connection
//!   closes after the answer). The transfer codings are read across every `Transfer-Encoding`
//!   line as one list: `chunked` only is served; `chunked` not last, or twice, or a
//!   `Transfer-Encoding` in an HTTP/1.0 request, is faulty framing (400); any other coding
//!   before a final `chunked`, or a coding with parameters, is well-formed but not implemented
//!   (501). `Expect: 100-continue` gets a `100 Continue` when the body is not there yet.
//! - Versions (RFC 9110 2.5, RFC 9112 2.3): HTTP/1.0 is answered in HTTP/1.0 and closed unless
//!   it asked for keep-alive; HTTP/1.1 in HTTP/1.1; a higher minor version of HTTP/1 (1.2 to
//!   1.9) is handled as HTTP/1.1; another major version (`HTTP/2.0` prior knowledge,
//!   `HTTP/3.0`) gets 505; a request line without a well-formed version (HTTP/0.9, `HTTP/1.10`)
//!   gets 400. An HTTP/1.1 request needs exactly one `Host` of valid characters (RFC 9112 3.2:
//!   400 otherwise); HEAD gets the head of the answer only.
//! - Strictness: every header line must be well-formed (httparse's rules: a token name, no
//!   space before the colon, no line folding, no control character in a value), whether or not
//!   the server reads that header; such a request gets 400 and the connection closes. A
//!   request is refused rather than guessed at, since a balancer in front may read it
//!   differently (request smuggling); `http1/tests.rs`, `conformance`, holds every case.
//! - Every refusal (400, 413, 431, 501, 505) ends the connection after the answers of the
//!   complete requests before it.
//! - Memory: a connection holds no buffer between requests. Bytes of an incomplete request are
//!   kept until it completes, at most [`MAX_HEAD_BYTES`] of head plus twice the body limit
//!   (chunk framing included); beyond that the request is refused. [`Conn::held_bytes`] says
//!   what it holds, for the server's memory budget.
//! - Every answer's status, body and headers come from [`function::Response`].

use super::config::Limits;
use super::latency::{Latency, Route};
use function::metrics::Counters;
use function::{Request, Response};
use httparse::Status;
use index_pack::format::Identity;
use std::borrow::Cow;
use std::time::Instant;

/// Longest request head (request line and headers); 431 beyond.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most header fields in a request head; 431 beyond.
pub const MAX_HEADERS: usize = 100;

/// What the connection needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// More bytes (or nothing: an idle keep-alive connection).
    Read,
    /// Received bytes are still unread (the call's budget ran out): write what was produced,
    /// then call [`Conn::resume`] before reading more.
    Pause,
    /// Write what was produced, then close. No further input is taken.
    Close,
    /// Write what was produced, then wait for a promised answer ([`Conn::complete`]) before
    /// reading or resuming.
    Await,
}

/// Whoever answers the requests: the scorer, the front over shards, or a constant.
pub trait App {
    /// Answers `req` at once, or promises to: [`Answer::Later`] means the app will hand the
    /// answer to the server's [`crate::Completions`] with `ticket` (from any thread).
    fn answer(&mut self, req: &Request<'_>, ticket: Ticket) -> Answer;

    /// The index the app serves, as the metrics name it (none by default).
    fn index(&self) -> Cow<'_, [Identity]> {
        Cow::Borrowed(&[])
    }
}

/// What an [`App`] gives for a request.
#[derive(Debug)]
pub enum Answer {
    Now(Response),
    /// The answer comes later, through [`crate::Completions::complete`] with the request's
    /// [`Ticket`]. Meanwhile the connection reads nothing more and no deadline of its client
    /// runs; its later pipelined requests wait for it.
    Later,
}

impl<F: FnMut(&Request<'_>) -> Response> App for F {
    fn answer(&mut self, req: &Request<'_>, _ticket: Ticket) -> Answer {
        Answer::Now(self(req))
    }
}

/// Names the connection a promised answer belongs to: its key in the server and the
/// generation of that key (a key is reused once its connection ends; an answer for an ended
/// connection is dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ticket {
    pub key: usize,
    pub generation: u64,
}

/// The output buffer the event loop lends to every connection in turn (so idle connections hold
/// none), and the count and duration of every answer written into it.
#[derive(Default)]
pub struct Buffers {
    /// Answers produced by the last call, in order, ready to be written.
    pub out: Vec<u8>,
    /// Every answer written ([`Response::outcome`]), the app's and the transport's refusals,
    /// unless `uncounted`: one array increment each.
    pub counters: Counters,
    /// How long each answer took (the same answers as `counters`).
    pub latency: Latency,
    pub uncounted: bool,
    /// The ticket of the connection being served (set by the server before each call).
    pub ticket: Ticket,
}

impl Buffers {
    /// Counts an answer written elsewhere.
    pub fn count(&mut self, r: &Response) {
        if !self.uncounted {
            self.counters.record(r.outcome);
        }
    }

    /// Appends one answer to `out` (see [`write_response`]), counts it and times it from
    /// `started` (a transport's refusal, `None`, takes no time of the server's).
    fn answer(&mut self, framing: Framing, r: &Response, route: Route, started: Option<Instant>) {
        if !self.uncounted {
            self.counters.record(r.outcome);
            let took = started.map_or(std::time::Duration::ZERO, |t| t.elapsed());
            self.latency.record(route, r.outcome, took);
        }
        write_response(
            &mut self.out,
            framing.version,
            framing.head_only,
            r,
            framing.connection,
        );
    }

    /// Appends `r` as the only answer on a connection that is then closed (the connection cap's
    /// 503, written without reading the request), and counts it.
    pub fn answer_final(&mut self, r: &Response) {
        self.count(r);
        write_final(&mut self.out, r);
    }
}

/// How an answer is framed: the request's version, whether it was HEAD, the connection header.
#[derive(Clone, Copy, Debug)]
struct Framing {
    version: u8,
    head_only: bool,
    connection: Connection,
}

impl Framing {
    /// A refusal: HTTP/1.1, closing.
    const REFUSAL: Framing = Framing {
        version: 1,
        head_only: false,
        connection: Connection::Close,
    };

    fn of(version: u8, head_only: bool, close: bool) -> Framing {
        let connection = match (close, version) {
            (true, _) => Connection::Close,
            (false, 0) => Connection::KeepAlive,
            (false, _) => Connection::Default,
        };
        Framing {
            version,
            head_only,
            connection,
        }
    }
}

/// A request whose answer was promised ([`Answer::Later`]): what its answer needs.
#[derive(Clone, Copy, Debug)]
struct Promised {
    version: u8,
    head_only: bool,
    /// The request asked to close (or is HTTP/1.0 without keep-alive).
    close: bool,
    route: Route,
    started: Instant,
}

/// The protocol state of one connection.
#[derive(Debug)]
pub struct Conn {
    /// Received bytes not consumed yet: the current request from its first byte, then whatever
    /// was pipelined after it. Empty (and unallocated) between requests.
    pending: Vec<u8>,
    /// How far the current request has been read (offsets into `pending`).
    stage: Stage,
    /// The decoded body of a chunked request in progress (unallocated otherwise).
    body: Vec<u8>,
    /// When the connection started waiting for the current request's head.
    waiting_since: Instant,
    /// When the current request's head was complete and its body started to be awaited.
    head_at: Option<Instant>,
    /// `100 Continue` was sent for the current request.
    continued: bool,
    /// The next answer is the last (shutdown asked for it).
    last: bool,
    /// An answer with `connection: close` was produced: nothing more is read.
    closing: bool,
    /// `pending` holds bytes not looked at yet (the last call stopped at its budget).
    paused: bool,
    /// The current request says HTTP/1.2 to 1.9: the offset in it of the minor digit, to be
    /// read as 1 (handled as HTTP/1.1) once the request is in `pending`.
    version_patch: Option<usize>,
    /// A request whose answer the app promised ([`Answer::Later`]); nothing is read meanwhile.
    promised: Option<Promised>,
}

/// Where the current request stands. Offsets are into the bytes of the current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for the end of the head; the first `scanned` bytes hold no line end that has not
    /// been parsed already.
    Head { scanned: usize },
    /// The head (`head_len` bytes) is in; waiting for `len` bytes of body after it.
    Length { head_len: usize, len: usize },
    /// The head is in; its chunked body is being decoded into `Conn::body`.
    Chunked { head_len: usize, chunks: Chunks },
}

/// What one step of reading the current request gave.
enum Step {
    /// The request is answered (or refused); it took this many bytes.
    Done(usize),
    /// More bytes are needed.
    More,
    /// The request says a higher minor version of HTTP/1: read it again as HTTP/1.1, with the
    /// minor digit at this offset patched.
    Patch(usize),
}

impl Conn {
    pub fn new(now: Instant) -> Conn {
        Conn {
            pending: Vec::new(),
            stage: Stage::Head { scanned: 0 },
            body: Vec::new(),
            waiting_since: now,
            head_at: None,
            continued: false,
            last: false,
            closing: false,
            paused: false,
            version_patch: None,
            promised: None,
        }
    }

    /// Takes bytes received from the client; answers the requests they complete, up to the
    /// call's budget. Must not be called while [`Next::Pause`] stands (see [`Conn::resume`]).
    pub fn receive(
        &mut self,
        input: &[u8],
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) -> Next {
        debug_assert!(!self.paused, "receive while paused: resume first");
        debug_assert!(
            self.promised.is_none(),
            "receive while an answer is promised"
        );
        if self.closing {
            return Next::Close;
        }
        if self.pending.is_empty() {
            // The common case: a whole request in one read, parsed in place, nothing copied.
            let used = self.process(input, now, limits, app, bufs);
            if !self.closing && used < input.len() {
                self.pending.extend_from_slice(&input[used..]);
            }
        } else {
            self.pending.extend_from_slice(input);
            self.process_pending(now, limits, app, bufs);
        }
        self.patched_versions(now, limits, app, bufs);
        self.after(limits, bufs)
    }

    /// Goes on with requests that stopped at a higher minor version of HTTP/1 ([`Step::Patch`]):
    /// each is in `pending` from its first byte, its minor digit is read as 1.
    fn patched_versions(
        &mut self,
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) {
        while let Some(at) = self.version_patch.take() {
            if self.closing || self.paused {
                return;
            }
            self.pending[at] = b'1';
            self.process_pending(now, limits, app, bufs);
        }
    }

    /// Goes on with the bytes a call that returned [`Next::Pause`] left unread.
    pub fn resume(
        &mut self,
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) -> Next {
        if self.closing || self.promised.is_some() {
            return self.next();
        }
        self.paused = false;
        self.process_pending(now, limits, app, bufs);
        self.patched_versions(now, limits, app, bufs);
        self.after(limits, bufs)
    }

    /// Writes the answer promised for the current request ([`Answer::Later`]), then goes on
    /// with the requests pipelined after it. Without a promise (the connection was reset since,
    /// or the answer came twice) it does nothing.
    pub fn complete(
        &mut self,
        r: &Response,
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) -> Next {
        let Some(p) = self.promised.take() else {
            return self.next();
        };
        let close = p.close || self.last;
        bufs.answer(
            Framing::of(p.version, p.head_only, close),
            r,
            p.route,
            Some(p.started),
        );
        self.waiting_since = now;
        if close {
            self.closing = true;
            return self.next();
        }
        if !self.pending.is_empty() && !self.paused {
            self.process_pending(now, limits, app, bufs);
            self.patched_versions(now, limits, app, bufs);
        }
        self.after(limits, bufs)
    }

    fn process_pending(
        &mut self,
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) {
        let pending = std::mem::take(&mut self.pending);
        let used = self.process(&pending, now, limits, app, bufs);
        if !self.closing && used < pending.len() {
            let mut pending = pending;
            pending.drain(..used);
            self.pending = pending;
        }
    }

    fn after(&mut self, limits: &Limits, bufs: &mut Buffers) -> Next {
        if !self.closing
            && !self.paused
            && self.promised.is_none()
            && self.pending.len() > MAX_HEAD_BYTES + 2 * limits.max_body_bytes
        {
            // Only chunk framing can get here (a head or a length over its limit is refused as
            // soon as it is seen): a body cut into tiny chunks costs more than it carries.
            self.refuse(Response::body_too_large(), bufs);
        }
        if self.pending.is_empty() && self.pending.capacity() > 0 {
            self.pending = Vec::new();
        }
        self.next()
    }

    /// Applies the deadlines at `now`: a head not complete within the header timeout (408, or a
    /// silent close when nothing of it arrived: an idle keep-alive connection), a body not
    /// complete within the body timeout after its head (408). A paused connection is waiting
    /// for the server, not for its client: no deadline of the client's applies to it.
    pub fn tick(&mut self, now: Instant, limits: &Limits, bufs: &mut Buffers) -> Next {
        if self.closing || self.paused || self.promised.is_some() {
            return self.next();
        }
        match self.head_at {
            Some(t) if now.duration_since(t) >= limits.body_timeout => {
                self.refuse(Response::body_timeout(), bufs)
            }
            None if now.duration_since(self.waiting_since) >= limits.header_timeout => {
                if self.pending.is_empty() {
                    self.closing = true;
                } else {
                    self.refuse(Response::head_timeout(), bufs);
                }
            }
            _ => {}
        }
        self.next()
    }

    /// Asks the connection to end: at once if it is between requests, else after answering the
    /// request in progress (its answer says `connection: close`).
    pub fn finish(&mut self) -> Next {
        self.last = true;
        if self.is_idle() {
            self.closing = true;
        }
        self.next()
    }

    /// True between requests: nothing of a next request has arrived, no answer is promised.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.promised.is_none()
    }

    /// Bytes of memory this connection holds for requests (input kept, decoded body).
    pub fn held_bytes(&self) -> usize {
        self.pending.capacity() + self.body.capacity()
    }

    fn next(&self) -> Next {
        if self.closing {
            Next::Close
        } else if self.promised.is_some() {
            Next::Await
        } else if self.paused {
            Next::Pause
        } else {
            Next::Read
        }
    }

    /// Answers the complete requests at the start of `buf`, within the call's budget; returns
    /// the bytes they took.
    fn process(
        &mut self,
        buf: &[u8],
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) -> usize {
        let (mut at, mut answered, out_at_start) = (0, 0, bufs.out.len());
        while at < buf.len() && !self.closing && self.promised.is_none() {
            if answered >= limits.max_requests_per_turn.max(1)
                || bufs.out.len() - out_at_start >= limits.max_unsent_bytes
            {
                self.paused = true;
                break;
            }
            match self.one(&buf[at..], now, limits, app, bufs) {
                Step::Done(used) => {
                    at += used;
                    answered += 1;
                    self.stage = Stage::Head { scanned: 0 };
                    self.waiting_since = now;
                    self.head_at = None;
                    self.continued = false;
                    if self.body.capacity() > 0 {
                        self.body = Vec::new();
                    }
                }
                Step::More => break,
                Step::Patch(offset) => {
                    // The caller keeps this request in `pending` and reads it again patched.
                    self.version_patch = Some(offset);
                    break;
                }
            }
        }
        at
    }

    /// Reads the request at the start of `buf` as far as it goes: answers it (or refuses it)
    /// once complete, else records how far it got.
    fn one(
        &mut self,
        buf: &[u8],
        now: Instant,
        limits: &Limits,
        app: &mut impl App,
        bufs: &mut Buffers,
    ) -> Step {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut fields);
        let head_len = match self.stage {
            Stage::Head { scanned } => {
                // Parsed again only when a line has ended since the last parse (or on the
                // first bytes, so that garbage is refused at once).
                if scanned > 0 && !buf[scanned.min(buf.len())..].contains(&b'\n') {
                    return self.head_partial(buf, bufs);
                }
                count_scanned(buf.len());
                match req.parse(buf) {
                    Ok(Status::Complete(n)) if n <= MAX_HEAD_BYTES => n,
                    Ok(Status::Partial) => return self.head_partial(buf, bufs),
                    Ok(_) | Err(httparse::Error::TooManyHeaders) => {
                        return self.refused(Response::head_too_large(), buf, bufs)
                    }
                    Err(httparse::Error::Version) => match other_version(buf) {
                        Version::HigherMinor(offset) => return Step::Patch(offset),
                        Version::OtherMajor => {
                            return self.refused(Response::version_not_supported(), buf, bufs)
                        }
                        Version::Malformed => {
                            let what = "malformed HTTP version (HTTP/1.0 and 1.1 are served)";
                            return self.refused(Response::bad_request(what), buf, bufs);
                        }
                    },
                    Err(e) => return self.refused(Response::bad_request(head_error(e)), buf, bufs),
                }
            }
            Stage::Length { head_len, len } => {
                if buf.len() < head_len + len {
                    return Step::More;
                }
                parse_again(&mut req, buf, head_len);
                head_len
            }
            Stage::Chunked {
                head_len,
                mut chunks,
            } => {
                match chunks.decode(buf, limits.max_body_bytes, &mut self.body) {
                    Chunked::Complete => {}
                    Chunked::Partial => {
                        self.stage = Stage::Chunked { head_len, chunks };
                        return Step::More;
                    }
                    Chunked::TooLarge => {
                        return self.refused(Response::body_too_large(), buf, bufs)
                    }
                    Chunked::Invalid(what) => {
                        return self.refused(Response::bad_request(what), buf, bufs)
                    }
                }
                self.stage = Stage::Chunked { head_len, chunks };
                parse_again(&mut req, buf, head_len);
                head_len
            }
        };
        let head = match Head::read(&req) {
            Ok(head) => head,
            Err(Refusal::Faulty(what)) => {
                return self.refused(Response::bad_request(what), buf, bufs)
            }
            Err(Refusal::NotImplemented(what)) => {
                return self.refused(Response::not_implemented(what), buf, bufs)
            }
        };
        let (body, used): (&[u8], usize) = match self.stage {
            Stage::Head { .. } if head.chunked => {
                let mut chunks = Chunks::new(head_len);
                match chunks.decode(buf, limits.max_body_bytes, &mut self.body) {
                    Chunked::Complete => (&self.body, chunks.at),
                    Chunked::Partial => {
                        self.stage = Stage::Chunked { head_len, chunks };
                        return self.await_body(&head, now, bufs);
                    }
                    Chunked::TooLarge => {
                        return self.refused(Response::body_too_large(), buf, bufs)
                    }
                    Chunked::Invalid(what) => {
                        return self.refused(Response::bad_request(what), buf, bufs)
                    }
                }
            }
            Stage::Head { .. } => {
                let len = head.content_length.unwrap_or(0);
                if len > limits.max_body_bytes as u64 {
                    // Refused before any of it is waited for.
                    return self.refused(Response::body_too_large(), buf, bufs);
                }
                let len = len as usize;
                if buf.len() < head_len + len {
                    self.stage = Stage::Length { head_len, len };
                    return self.await_body(&head, now, bufs);
                }
                (&buf[head_len..head_len + len], head_len + len)
            }
            Stage::Length { len, .. } => (&buf[head_len..head_len + len], head_len + len),
            Stage::Chunked { chunks, .. } => (&self.body, chunks.at),
        };
        let close = head.close || self.last;
        let target = origin_form(req.path.unwrap_or_default());
        let request = Request {
            method: req.method.unwrap_or_default(),
            target,
            content_type: head.content_type,
            body,
        };
        let route = Route::of(target);
        match app.answer(&request, bufs.ticket) {
            Answer::Now(answer) => {
                bufs.answer(
                    Framing::of(head.version, head.is_head, close),
                    &answer,
                    route,
                    Some(now),
                );
                if close {
                    self.closing = true;
                }
            }
            Answer::Later => {
                self.promised = Some(Promised {
                    version: head.version,
                    head_only: head.is_head,
                    close: head.close,
                    route,
                    started: now,
                });
            }
        }
        Step::Done(used)
    }

    /// The head is not complete yet: remember how far it was scanned, or refuse it if it is
    /// already over the limit (every byte of an incomplete head is head).
    fn head_partial(&mut self, buf: &[u8], bufs: &mut Buffers) -> Step {
        if buf.len() > MAX_HEAD_BYTES {
            return self.refused(Response::head_too_large(), buf, bufs);
        }
        self.stage = Stage::Head { scanned: buf.len() };
        Step::More
    }

    /// The head is in, the body is not: start its deadline, and send `100 Continue` if asked.
    fn await_body(&mut self, head: &Head<'_>, now: Instant, bufs: &mut Buffers) -> Step {
        self.head_at.get_or_insert(now);
        if head.expect_continue && head.version == 1 && !self.continued {
            bufs.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            self.continued = true;
        }
        Step::More
    }

    /// Answers with `r` and closes: the request cannot be served.
    fn refuse(&mut self, r: Response, bufs: &mut Buffers) {
        bufs.answer(Framing::REFUSAL, &r, Route::Other, None);
        self.closing = true;
        self.paused = false;
    }

    /// [`Conn::refuse`], taking all of `buf`.
    fn refused(&mut self, r: Response, buf: &[u8], bufs: &mut Buffers) -> Step {
        self.refuse(r, bufs);
        Step::Done(buf.len())
    }
}

// Bytes handed to a parser, counted in tests to show that the work per request is linear.
#[cfg(test)]
thread_local! {
    static SCANNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[inline(always)]
fn count_scanned(_bytes: usize) {
    #[cfg(test)]
    SCANNED.with(|s| s.set(s.get() + _bytes));
}

/// Parses again the head that an earlier call found complete (`head_len` bytes), for the
/// method, target and headers of its answer.
fn parse_again<'b>(req: &mut httparse::Request<'_, 'b>, buf: &'b [u8], head_len: usize) {
    count_scanned(head_len);
    let parsed = req.parse(&buf[..head_len]);
    debug_assert!(matches!(parsed, Ok(Status::Complete(n)) if n == head_len));
}

/// What a request head says about framing and the connection.
struct Head<'a> {
    /// Minor version: 0 or 1.
    version: u8,
    is_head: bool,
    content_length: Option<u64>,
    chunked: bool,
    /// `connection: close` (or HTTP/1.0 without keep-alive, or a length next to chunked).
    close: bool,
    expect_continue: bool,
    content_type: Option<&'a [u8]>,
}

/// Why a head that httparse read cannot be served.
enum Refusal {
    /// Faulty framing or a malformed field: 400.
    Faulty(&'static str),
    /// Well-formed but not implemented (a transfer coding other than chunked): 501.
    NotImplemented(&'static str),
}

impl<'a> Head<'a> {
    fn read(req: &httparse::Request<'_, 'a>) -> Result<Head<'a>, Refusal> {
        use Refusal::{Faulty, NotImplemented};
        let version = req.version.unwrap_or(1);
        let mut head = Head {
            version,
            is_head: req.method == Some("HEAD"),
            content_length: None,
            chunked: false,
            close: false,
            expect_continue: false,
            content_type: None,
        };
        let mut keep_alive = false;
        let (mut hosts, mut codings) = (0, Codings::default());
        for h in req.headers.iter() {
            let name = h.name;
            if name.eq_ignore_ascii_case("content-length") {
                let n =
                    content_length(h.value.trim_ascii()).ok_or(Faulty("invalid content-length"))?;
                if head.content_length.is_some_and(|m| m != n) {
                    return Err(Faulty("conflicting content-length headers"));
                }
                head.content_length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                codings.add(h.value)?;
            } else if name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    head.close |= token.eq_ignore_ascii_case(b"close");
                    keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("expect") {
                head.expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
            } else if name.eq_ignore_ascii_case("content-type") && head.content_type.is_none() {
                head.content_type = Some(h.value);
            } else if name.eq_ignore_ascii_case("host") {
                hosts += 1;
                if !h.value.trim_ascii().iter().all(|&b| HOST_BYTE[b as usize]) {
                    return Err(Faulty("invalid host"));
                }
            }
        }
        if version == 1 && hosts != 1 {
            return Err(Faulty("an HTTP/1.1 request needs exactly one host header"));
        }
        if codings.any {
            // RFC 9112 6.1: a Transfer-Encoding in HTTP/1.0 is faulty framing.
            if version == 0 {
                return Err(Faulty("transfer-encoding in an HTTP/1.0 request"));
            }
            match codings.last {
                Coding::Chunked if codings.chunked == 1 => {}
                Coding::Chunked | Coding::ChunkedWithParameters if codings.chunked > 1 => {
                    return Err(Faulty("chunked more than once"))
                }
                Coding::Chunked | Coding::ChunkedWithParameters => {}
                // RFC 9112 6.3: chunked not last (or none): the body's length is unknown.
                Coding::None | Coding::Other => {
                    return Err(Faulty("transfer-encoding does not end in chunked"))
                }
            }
            if codings.other || codings.last == Coding::ChunkedWithParameters {
                return Err(NotImplemented(
                    "transfer codings other than chunked are not implemented",
                ));
            }
            head.chunked = true;
        }
        // RFC 9112 6.3: with both, chunked frames the body and the connection must close after.
        head.close |= head.chunked && head.content_length.is_some();
        head.close |= version == 0 && !keep_alive;
        Ok(head)
    }
}

/// One element of the transfer-coding list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Coding {
    #[default]
    None,
    Chunked,
    /// `chunked` with parameters, which chunked does not take.
    ChunkedWithParameters,
    Other,
}

/// The transfer codings of every `Transfer-Encoding` line of a request, read as one list.
#[derive(Default)]
struct Codings {
    /// A `Transfer-Encoding` header was present.
    any: bool,
    /// The last non-empty element.
    last: Coding,
    /// Elements named chunked.
    chunked: usize,
    /// Some element is another coding than chunked.
    other: bool,
}

impl Codings {
    /// Adds the elements of one field value: `transfer-coding *( OWS ";" OWS parameter )`, comma
    /// separated, empty elements ignored (RFC 9110 5.6.1).
    fn add(&mut self, value: &[u8]) -> Result<(), Refusal> {
        self.any = true;
        for element in value.split(|&b| b == b',') {
            let element = element.trim_ascii();
            if element.is_empty() {
                continue;
            }
            let mut parts = element.splitn(2, |&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            if name.is_empty() || !name.iter().all(|&b| TCHAR[b as usize]) {
                return Err(Refusal::Faulty("malformed transfer-encoding"));
            }
            let parameters = parts.next().is_some();
            let coding = match (name.eq_ignore_ascii_case(b"chunked"), parameters) {
                (true, false) => Coding::Chunked,
                (true, true) => Coding::ChunkedWithParameters,
                (false, _) => Coding::Other,
            };
            match coding {
                Coding::Other => self.other = true,
                _ => self.chunked += 1,
            }
            self.last = coding;
        }
        Ok(())
    }
}

/// RFC 9110 5.6.2 `tchar`: the bytes of a token.
const TCHAR: [bool; 256] =
    byte_set(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");

/// RFC 3986 `uri-host [":" port]`: unreserved, percent-encoded, sub-delims, and the brackets
/// and colons of an IP literal and a port.
const HOST_BYTE: [bool; 256] =
    byte_set(b"-._~%!$&'()*+,;=:[]0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");

const fn byte_set(bytes: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        set[bytes[i] as usize] = true;
        i += 1;
    }
    set
}

/// What a request line's version is when httparse refused it (it reads only 1.0 and 1.1).
#[derive(Debug, PartialEq, Eq)]
enum Version {
    /// `HTTP/1.2` to `HTTP/1.9`: the offset of the minor digit in the request.
    HigherMinor(usize),
    /// `HTTP/<d>.<d>` of another major version.
    OtherMajor,
    /// No well-formed `HTTP/<digit>.<digit>` where the version goes.
    Malformed,
}

/// The version token of the request line at the start of `buf` (RFC 9112 2.3: `HTTP-name "/"
/// DIGIT "." DIGIT`, after the last space of the line).
fn other_version(buf: &[u8]) -> Version {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(space) = line.iter().rposition(|&b| b == b' ') else {
        return Version::Malformed;
    };
    match &line[space + 1..] {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'2'..=b'9'] => Version::HigherMinor(space + 8),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() && *major != b'1' =>
        {
            Version::OtherMajor
        }
        _ => Version::Malformed,
    }
}

/// Why httparse refused a head, in words (never the client's bytes).
fn head_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::Version => "malformed HTTP version (HTTP/1.0 and 1.1 are served)",
        httparse::Error::Token | httparse::Error::HeaderName => {
            "malformed request line or header name"
        }
        httparse::Error::HeaderValue => "malformed header value",
        httparse::Error::NewLine | httparse::Error::Status => "malformed request head",
        httparse::Error::TooManyHeaders => "too many headers",
    }
}

/// The path of a request target: origin form as it is; absolute form (`http://host/path?q`, as
/// sent to proxies) without scheme and authority; anything else (`*`) as it is (no route).
fn origin_form(target: &str) -> &str {
    if target.starts_with('/') {
        return target;
    }
    let lower = |n: usize| target.get(..n).map(str::to_ascii_lowercase);
    let after = if lower(7).as_deref() == Some("http://") {
        &target[7..]
    } else if lower(8).as_deref() == Some("https://") {
        &target[8..]
    } else {
        return target;
    };
    match after.find(['/', '?']) {
        Some(i) if after.as_bytes()[i] == b'/' => &after[i..],
        // `http://host?q` or `http://host`: the path is `/`.
        _ => "/",
    }
}

/// How a chunked body stands after a call to [`Chunks::decode`].
#[derive(Debug, PartialEq, Eq)]
enum Chunked {
    /// Decoded into the body; [`Chunks::at`] is the end of the framing.
    Complete,
    Partial,
    TooLarge,
    Invalid(&'static str),
}

/// How far a chunked body has been decoded (RFC 9112 7.1: chunk extensions and trailer fields
/// are read and ignored), so that each call goes on where the last stopped. Offsets are into
/// the bytes of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunks {
    /// The first byte not decoded yet.
    at: usize,
    /// Bytes from `at` already looked at without finding the end of the current line.
    scanned: usize,
    phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A chunk-size line.
    Size,
    /// This many data bytes of the current chunk are still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines, up to an empty one.
    Trailer,
}

impl Chunks {
    /// The framing starts at `at` (right after the head).
    fn new(at: usize) -> Chunks {
        Chunks {
            at,
            scanned: 0,
            phase: Phase::Size,
        }
    }

    /// Decodes what `buf` holds beyond `at` into `body` (at most `max` bytes in all).
    fn decode(&mut self, buf: &[u8], max: usize, body: &mut Vec<u8>) -> Chunked {
        loop {
            let rest = &buf[self.at..];
            // Whether a line end arrived since the last look (a line is parsed once it ended,
            // or at its first bytes, so that garbage is refused at once).
            let line_ended = self.scanned == 0
                || rest
                    .get(self.scanned - 1..)
                    .is_some_and(|r| r.contains(&b'\n'));
            match self.phase {
                Phase::Size => {
                    if !line_ended {
                        self.scanned = rest.len();
                        return Chunked::Partial;
                    }
                    count_scanned(
                        rest.iter()
                            .position(|&b| b == b'\n')
                            .map_or(rest.len(), |i| i + 1),
                    );
                    let (n, size) = match httparse::parse_chunk_size(rest) {
                        Ok(Status::Complete(c)) => c,
                        Ok(Status::Partial) => {
                            self.scanned = rest.len().max(1);
                            return Chunked::Partial;
                        }
                        Err(_) => return Chunked::Invalid("malformed chunk size"),
                    };
                    (self.at, self.scanned) = (self.at + n, 0);
                    if size == 0 {
                        self.phase = Phase::Trailer;
                    } else if size > (max - body.len()) as u64 {
                        // Refused as soon as the size is announced, before the data arrives.
                        return Chunked::TooLarge;
                    } else {
                        self.phase = Phase::Data(size);
                    }
                }
                Phase::Data(left) => {
                    // `left` is at most the body limit, so it fits a usize.
                    let take = rest.len().min(left as usize);
                    body.extend_from_slice(&rest[..take]);
                    self.at += take;
                    if (take as u64) < left {
                        self.phase = Phase::Data(left - take as u64);
                        return Chunked::Partial;
                    }
                    self.phase = Phase::DataEnd;
                }
                Phase::DataEnd => match rest.get(..2) {
                    Some(b"\r\n") => {
                        self.at += 2;
                        self.phase = Phase::Size;
                    }
                    None if rest.is_empty() || rest == b"\r" => return Chunked::Partial,
                    _ => return Chunked::Invalid("chunk data longer than its size"),
                },
                Phase::Trailer => {
                    // A `\r` at the end of the last look may meet its `\n` now.
                    let from = self.scanned.saturating_sub(1);
                    let Some(eol) = rest[from..].windows(2).position(|w| w == b"\r\n") else {
                        if rest.len() > MAX_HEAD_BYTES {
                            return Chunked::Invalid("trailer section too large");
                        }
                        self.scanned = rest.len().max(1);
                        return Chunked::Partial;
                    };
                    let eol = from + eol;
                    (self.at, self.scanned) = (self.at + eol + 2, 0);
                    if eol == 0 {
                        return Chunked::Complete;
                    }
                }
            }
        }
    }
}

/// The `connection` header an answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connection {
    /// None: HTTP/1.1 keeps the connection by default.
    Default,
    /// `keep-alive`: an HTTP/1.0 client asked for it.
    KeepAlive,
    /// `close`: this answer is the last.
    Close,
}

/// A `Content-Length` value: RFC 9110's `1*DIGIT`, any number of digits (leading zeros
/// included); `None` if it is empty, holds anything but digits, or overflows `u64`.
fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Appends one answer: status line, `content-type`, `content-length`, `allow` on a 405, the
/// `connection` header if needed, then the body (unless the request was HEAD).
fn write_response(
    out: &mut Vec<u8>,
    version: u8,
    head_only: bool,
    r: &Response,
    connection: Connection,
) {
    out.extend_from_slice(if version == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(num.format(r.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(r.status).as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: ");
    out.extend_from_slice(r.content_type.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    out.extend_from_slice(num.format(r.body.len()).as_bytes());
    if let Some(allow) = r.allow {
        out.extend_from_slice(b"\r\nallow: ");
        out.extend_from_slice(allow.as_bytes());
    }
    out.extend_from_slice(match connection {
        Connection::Default => b"\r\n\r\n".as_slice(),
        Connection::KeepAlive => b"\r\nconnection: keep-alive\r\n\r\n",
        Connection::Close => b"\r\nconnection: close\r\n\r\n",
    });
    if !head_only {
        out.extend_from_slice(r.body.as_bytes());
    }
}

/// Appends `r` as the only answer on a connection that is then closed (the connection cap's
/// 503, written without reading the request).
pub fn write_final(out: &mut Vec<u8>, r: &Response) {
    write_response(out, 1, false, r, Connection::Close);
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests;
