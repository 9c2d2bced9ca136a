//! `serve`: the fraud handler over HTTP/1.1 (keep-alive), on a Unix socket or a TCP address.
//!
//! This module only moves bytes between a socket and [`function::Scorer::handle`]; it decides
//! nothing about a request except the transport-level answers listed here (the whole matrix of
//! hostile input, with tests, is docs/HOSTILE.md):
//!
//! | situation                                              | answer |
//! |--------------------------------------------------------|--------|
//! | `GET`/`HEAD /ready` before warm-up finished            | 503 `{"ready":false}` |
//! | body longer than `--max-body-bytes`                    | 413 `{"error":"body too large"}`, then close |
//! | body not complete within `--body-timeout-ms`           | 408 `{"error":"body not received in time"}`, then close |
//! | body cannot be read (bad chunked framing, ...)         | connection closed (hyper ends it) |
//! | request head not complete within `--header-timeout-ms` | connection closed (also ends idle keep-alive) |
//! | malformed request line or headers                      | 400 (hyper), then close |
//! | head over 16 KiB or over 100 headers                   | connection closed (hyper 1.12 sends no 431) |
//! | `--max-connections` already open                       | 503 `{"error":"too many connections"}`, then close |
//! | answers not read by the client for `--body-timeout-ms` | connection closed |
//! | everything else                                        | whatever the handler says |
//!
//! ## Shape (why one thread)
//! One process = one single-threaded event loop (tokio current-thread runtime + hyper 1). The
//! contest gives each API well under half a CPU (CFS quota), so a second thread would only add
//! scheduling and cross-thread wake-ups; the search also keeps its scratch in a `thread_local`,
//! so all queries run on this one thread. The only other thread is a short-lived blocking-pool
//! thread that pre-faults the embedded index during warm-up.
//!
//! ## Lifecycle
//! 1. bind the socket (a stale Unix socket file is removed first; the new one is made
//!    world-writable so a balancer running as another user can connect);
//! 2. warm-up in the background: read every page of the index, then run a few hundred varied
//!    queries on the loop thread; until then `/ready` answers 503, so a balancer health check
//!    keeps the instance out of rotation (requests that still arrive are answered correctly);
//! 3. serve; on SIGTERM or SIGINT stop accepting, let in-flight requests finish (idle
//!    keep-alive connections are closed at once), remove the socket file, exit 0. Connections
//!    still busy after `--drain-ms` are dropped.
//!
//! ## Index residency (`--residency`, default `lazy`)
//! The index is read in place (zero-copy); warm-up reads every page before `/ready` says 200.
//! `--residency hugepages` instead copies it, before the bind, into anonymous memory backed by
//! 2 MiB transparent huge pages (the binary's file pages are released as the copy goes, so the
//! container is charged ~99 MB, not twice 92 MB). With caches and TLB evicted before each query
//! (`EVICT_KB=8192 taskset -c 1 target/release/examples/search_stats 8 <residency>`, 2 x 54,100
//! queries) huge pages cut the search's p50 / p90 / p99 from 18.4 / 54-145 / 215-298 us to
//! 13.7-14.2 / 28-29 / 64-77 us. In the contest stack it did not help: 2026-11-30, full
//! replica runs alternated on one machine, stack p99 1.59 and 1.41 ms with huge pages against
//! 1.38 and 1.27 ms in place, the same API CPU per request (103-108 us), 7 MB more memory each.
//! So the default stays zero-copy; `docker/experiments/residency-hugepages.yml` repeats it.
//!
//! ## Bounded resources
//! Every connection is bounded in time (head, body and stalled writes each have a deadline; an
//! idle keep-alive connection is closed after the head timeout) and in memory (16 KiB of read
//! buffer, `--max-body-bytes` of body), and there are at most `--max-connections` of them, so a
//! flood of idle or slow clients costs a bounded amount of memory (11 KiB per idle connection,
//! measured) and is shed with a fast 503 instead of queueing.
//!
//! Instance loss is the balancer's business (health checks and retries in
//! `docker/haproxy/haproxy.cfg`); this side only has to answer 503 on `/ready` while not warm
//! and to exit cleanly on SIGTERM.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use function::Scorer;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "embedded-index")]
use std::sync::{atomic::AtomicUsize, Arc};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
#[cfg(feature = "embedded-index")]
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};
#[cfg(feature = "embedded-index")]
use tokio::net::{TcpListener, UnixListener};
use tracing::debug;
#[cfg(feature = "embedded-index")]
use tracing::{info, warn};

/// Command-line and environment settings of `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen: `unix:/path/to.sock` (or any path starting with `/`), or `HOST:PORT`.
    #[arg(long, env = "FRAUD_LISTEN", default_value = "127.0.0.1:9999")]
    pub listen: String,
    /// Largest request body accepted; longer bodies get 413.
    #[arg(long, env = "FRAUD_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Time a client has to send the complete request head (slow or silent clients); also how
    /// long an idle keep-alive connection stays open.
    #[arg(long, env = "FRAUD_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Time a client has to send the complete body once the head is in (408 after that); also
    /// how long a write may stall because the client does not read its answers.
    #[arg(long, env = "FRAUD_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,
    /// Connections served at once; more are answered 503 and closed at once.
    #[arg(long, env = "FRAUD_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway.
    #[arg(long, env = "FRAUD_DRAIN_MS", default_value_t = 5_000)]
    pub drain_ms: u64,
    /// Queries run on the loop thread during warm-up, after the index pages are read.
    #[arg(long, env = "FRAUD_WARMUP_QUERIES", default_value_t = 512)]
    pub warmup_queries: usize,
    /// How the embedded index is made resident: `lazy` (zero-copy; warm-up reads every page
    /// before ready), `prefault` (zero-copy, every page read and checked before the bind) or
    /// `hugepages` (a copy in 2 MiB pages; see "Index residency" in the module docs).
    #[cfg(feature = "embedded-index")]
    #[arg(long, env = "FRAUD_INDEX_RESIDENCY", default_value = "lazy")]
    pub residency: function::index::Residency,
}

/// Transport limits (see the table at the top of this module).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Deadline for a complete request head, counted from when the connection waits for one.
    pub header_timeout: Duration,
    /// Deadline for a complete body after its head, and for a stalled write.
    pub body_timeout: Duration,
    /// Connections served at once (enforced by the accept loop, not by [`serve_connection`]).
    pub max_connections: usize,
    /// How long in-flight requests may take after SIGTERM.
    pub drain: Duration,
}

impl Default for Limits {
    /// The defaults of `local-runner serve`.
    fn default() -> Limits {
        Limits {
            max_body_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 1024,
            drain: Duration::from_secs(5),
        }
    }
}

impl From<&ServeArgs> for Limits {
    fn from(a: &ServeArgs) -> Limits {
        Limits {
            max_body_bytes: a.max_body_bytes,
            header_timeout: Duration::from_millis(a.header_timeout_ms),
            body_timeout: Duration::from_millis(a.body_timeout_ms),
            max_connections: a.max_connections.max(1),
            drain: Duration::from_millis(a.drain_ms),
        }
    }
}

/// Read buffer of a connection, which also bounds the request head (431 beyond). Contest
/// requests have heads of a few hundred bytes; hyper's default (~400 KiB) would let each of
/// `max_connections` slow clients pin that much memory.
const MAX_BUF_BYTES: usize = 16 * 1024;

/// Where to listen, parsed from `--listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::str::FromStr for Endpoint {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Endpoint> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                bail!("--listen unix: needs a path, e.g. unix:/sock/api1.sock");
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if s.starts_with('/') {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        // Numeric addresses only: the static glibc binary should not go through NSS.
        s.parse::<SocketAddr>().map(Endpoint::Tcp).with_context(|| {
            format!("--listen {s:?}: expected unix:/path or IP:PORT (e.g. 0.0.0.0:8080)")
        })
    }
}

/// True once warm-up is done and until shutdown starts.
static READY: AtomicBool = AtomicBool::new(false);

/// Entry point of `local-runner serve`: builds the one-thread runtime and runs until SIGTERM.
#[cfg(feature = "embedded-index")]
pub fn run(args: ServeArgs) -> Result<()> {
    let endpoint: Endpoint = args.listen.parse()?;
    let t = Instant::now();
    function::index::load(args.residency).context("cannot open the embedded index")?;
    info!(
        residency = ?args.residency,
        ms = t.elapsed().as_millis() as u64,
        anon_huge_mb = function::index::anon_huge_bytes().map(|b| b >> 20),
        "index resident"
    );
    let scorer = function::embedded_scorer().context("cannot open the embedded index")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // One blocking thread is enough: it only pre-faults the index.
        .max_blocking_threads(1)
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(serve(
        endpoint,
        scorer,
        Limits::from(&args),
        args.warmup_queries,
    ))
}

#[cfg(feature = "embedded-index")]
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

#[cfg(feature = "embedded-index")]
impl Listener {
    fn bind(endpoint: &Endpoint) -> Result<Listener> {
        match endpoint {
            Endpoint::Tcp(addr) => {
                let l = std::net::TcpListener::bind(addr)
                    .with_context(|| format!("cannot listen on {addr}"))?;
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(TcpListener::from_std(l)?))
            }
            Endpoint::Unix(path) => {
                match std::fs::remove_file(path) {
                    Ok(()) => info!(path = %path.display(), "removed a stale socket file"),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("cannot remove stale socket {}", path.display())
                        })
                    }
                }
                let l = UnixListener::bind(path)
                    .with_context(|| format!("cannot listen on {}", path.display()))?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
                    .with_context(|| format!("cannot chmod {}", path.display()))?;
                Ok(Listener::Unix(l, path.clone()))
            }
        }
    }
}

#[cfg(feature = "embedded-index")]
async fn serve(
    endpoint: Endpoint,
    scorer: Scorer<'static>,
    limits: Limits,
    warmup_queries: usize,
) -> Result<()> {
    let listener = Listener::bind(&endpoint)?;
    info!(?endpoint, ?limits, "listening; warming up");
    let warm = tokio::spawn(warm_up(scorer, warmup_queries));
    // Shutdown broadcast: connections watch the receiver; once every connection task has dropped
    // its clone, `closed()` resolves, which is how the drain below knows they are all done.
    let (shutdown, watch) = tokio::sync::watch::channel(());

    let signal = shutdown_signal();
    tokio::pin!(signal);
    let result = match &listener {
        Listener::Tcp(l) => {
            accept_loop(
                || async {
                    let (s, _) = l.accept().await?;
                    s.set_nodelay(true)?;
                    Ok(s)
                },
                scorer,
                limits,
                &watch,
                signal.as_mut(),
            )
            .await
        }
        Listener::Unix(l, _) => {
            accept_loop(
                || async { Ok(l.accept().await?.0) },
                scorer,
                limits,
                &watch,
                signal.as_mut(),
            )
            .await
        }
    };
    READY.store(false, Ordering::SeqCst);
    warm.abort();
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
    drop(listener);
    drop(watch);
    let t = Instant::now();
    // Tell every connection to finish its current request and close (idle ones close at once).
    let _ = shutdown.send(());
    tokio::select! {
        () = shutdown.closed() => info!(elapsed_ms = t.elapsed().as_millis() as u64, "drained; exiting"),
        () = tokio::time::sleep(limits.drain) => warn!(drain_ms = limits.drain.as_millis() as u64, "connections still busy after the drain time; exiting anyway"),
    }
    result
}

/// Accepts connections until `signal` fires; each connection is one task on this thread.
#[cfg(feature = "embedded-index")]
async fn accept_loop<S, F, Fut>(
    mut accept: F,
    scorer: Scorer<'static>,
    limits: Limits,
    watch: &tokio::sync::watch::Receiver<()>,
    mut signal: std::pin::Pin<&mut impl Future<Output = &'static str>>,
) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<S>>,
{
    let open = Arc::new(AtomicUsize::new(0));
    let mut shed_logged: Option<Instant> = None;
    loop {
        let stream = tokio::select! {
            biased;
            name = &mut signal => {
                info!(signal = name, "shutting down: no new connections");
                return Ok(());
            }
            accepted = accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Some(slot) = Slot::take(&open, limits.max_connections) else {
            // At most one line a second, however fast connections are shed.
            if shed_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                warn!(
                    max_connections = limits.max_connections,
                    "connection limit reached: answering 503 and closing new connections"
                );
                shed_logged = Some(Instant::now());
            }
            tokio::spawn(shed(stream));
            continue;
        };
        let mut watch = watch.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = watch.changed().await;
            };
            if let Err(e) = serve_connection_until(stream, scorer, limits, stop).await {
                debug!(error = %e, "connection ended with an error");
            }
            // `watch` and `slot` are dropped only here, after the connection is finished.
            drop(slot);
        });
    }
}

/// Serves one HTTP/1.1 connection (keep-alive, pipelining) on any byte stream until the client
/// closes it or a limit ends it. This is exactly what the server does for each accepted socket.
pub async fn serve_connection<IO>(
    io: IO,
    scorer: Scorer<'static>,
    limits: Limits,
) -> Result<(), hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_connection_until(io, scorer, limits, std::future::pending()).await
}

/// [`serve_connection`], and once `stop` resolves: finish the request in flight, then close.
pub async fn serve_connection_until<IO>(
    io: IO,
    scorer: Scorer<'static>,
    limits: Limits,
    stop: impl Future<Output = ()>,
) -> Result<(), hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| answer(req, scorer, limits));
    let conn = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        // hyper starts this clock whenever it waits for a head, so it also closes idle
        // keep-alive connections and clients that connect and never send.
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUF_BYTES)
        // Answers to pipelined requests go out in one write.
        .pipeline_flush(true)
        .serve_connection(
            TokioIo::new(WriteDeadline::new(io, limits.body_timeout)),
            service,
        );
    tokio::pin!(conn);
    tokio::pin!(stop);
    tokio::select! {
        r = conn.as_mut() => return r,
        () = &mut stop => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}

/// One request: read the body (bounded), hand it to the scorer, wrap the answer.
async fn answer(
    req: Request<Incoming>,
    scorer: Scorer<'static>,
    limits: Limits,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if parts.uri.path() == "/ready" && !READY.load(Ordering::Relaxed) {
        return Ok(reply(
            503,
            function::handler::JSON,
            None,
            Bytes::from_static(br#"{"ready":false}"#),
        ));
    }
    // A declared length over the limit is refused before any of the body is waited for.
    if body.size_hint().lower() > limits.max_body_bytes as u64 {
        return Ok(closing(reply(
            413,
            function::handler::JSON,
            None,
            Bytes::from_static(br#"{"error":"body too large"}"#),
        )));
    }
    // A body normally arrives with its head, so the collect is ready at its first poll: try
    // that first, and make a timer only for a body that is still on its way.
    let mut collect = std::pin::pin!(Limited::new(body, limits.max_body_bytes).collect());
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let collected = match first {
        Poll::Ready(done) => Ok(done),
        Poll::Pending => tokio::time::timeout(limits.body_timeout, collect).await,
    };
    let body = match collected {
        Ok(Ok(collected)) => collected.to_bytes(),
        // The rest of the body is not read: the connection must close after this answer.
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return Ok(closing(reply(
                413,
                function::handler::JSON,
                None,
                Bytes::from_static(br#"{"error":"body too large"}"#),
            )));
        }
        Err(_elapsed) => {
            return Ok(closing(reply(
                408,
                function::handler::JSON,
                None,
                Bytes::from_static(br#"{"error":"body not received in time"}"#),
            )));
        }
        Ok(Err(e)) => {
            debug!(error = %e, "cannot read body");
            return Ok(closing(reply(
                400,
                function::handler::JSON,
                None,
                Bytes::from_static(br#"{"error":"cannot read body"}"#),
            )));
        }
    };
    let r = scorer.handle(parts.method.as_str(), path, &body);
    let body = match r.body {
        std::borrow::Cow::Borrowed(s) => Bytes::from_static(s.as_bytes()),
        std::borrow::Cow::Owned(s) => Bytes::from(s),
    };
    Ok(reply(r.status, r.content_type, r.allow, body))
}

/// Marks an answer as the last one on its connection.
fn closing(mut resp: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

#[cfg(feature = "embedded-index")]
/// One open connection, counted while it lives.
struct Slot(Arc<AtomicUsize>);

#[cfg(feature = "embedded-index")]
impl Slot {
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        // One thread accepts, so load-then-add cannot race with another taker.
        if open.load(Ordering::Relaxed) >= max {
            return None;
        }
        open.fetch_add(1, Ordering::Relaxed);
        Some(Slot(open.clone()))
    }
}

#[cfg(feature = "embedded-index")]
impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(feature = "embedded-index")]
/// The answer to a connection over the cap: a fixed 503, written without reading the request.
const SHED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 32\r\nconnection: close\r\n\r\n{\"error\":\"too many connections\"}";

#[cfg(feature = "embedded-index")]
/// Answers 503 and closes. The request is read and discarded for a moment after the answer so
/// that the close is a FIN, not a reset that could destroy the 503 before the client reads it.
async fn shed<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let quick = Duration::from_millis(100);
    let _ = tokio::time::timeout(quick, async {
        stream.write_all(SHED).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// A stream whose writes fail once one has stayed blocked for `limit`: a client that sends
/// requests but never reads the answers would otherwise hold its connection forever (hyper has
/// no write timeout). Reads pass through; their deadlines are hyper's and `answer`'s.
struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    // Armed when a write first returns Pending, disarmed when one makes progress; boxed once per
    // connection and only if a write ever blocks.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, limit: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            limit,
            timer: None,
            armed: false,
        }
    }

    /// Called when a write is pending: arms the deadline, or says it has passed.
    fn stalled(&mut self, cx: &mut TaskContext<'_>) -> Poll<std::io::Error> {
        let deadline = tokio::time::Instant::now() + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            timer.as_mut().reset(deadline);
            self.armed = true;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "client does not read its answers",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn track<T>(
        &mut self,
        cx: &mut TaskContext<'_>,
        r: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Pending => self.stalled(cx).map(Err),
            done => {
                self.armed = false;
                done
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.track(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.track(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.track(cx, r)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.track(cx, r)
    }
}

fn reply(
    status: u16,
    content_type: &'static str,
    allow: Option<&'static str>,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(allow) = allow {
        h.insert(ALLOW, HeaderValue::from_static(allow));
    }
    resp
}

#[cfg(feature = "embedded-index")]
/// Reads every index page (blocking thread), then runs varied queries on the loop thread so the
/// search scratch, branch predictors and caches of *this* thread are warm. Then `/ready` says 200.
async fn warm_up(scorer: Scorer<'static>, queries: usize) {
    let t = Instant::now();
    // A no-op when `--residency prefault|hugepages` already did it before the bind.
    match tokio::task::spawn_blocking(function::index::prefault).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            // The build script verified the same bytes; a failure here means a damaged binary.
            tracing::error!(error = %e, "embedded index failed its check; staying not ready");
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "prefault task failed; staying not ready");
            return;
        }
    }
    let prefault_ms = t.elapsed().as_millis() as u64;
    let mut frauds = [0u32; 6];
    for i in 0..queries {
        let body = warmup_body(i);
        let r = scorer.handle("POST", "/fraud-score", body.as_bytes());
        if r.status != 200 {
            tracing::error!(status = r.status, body = %r.body, "warm-up query failed; staying not ready");
            return;
        }
        if let Some(k) = function::decision::BODIES.iter().position(|b| *b == r.body) {
            frauds[k] += 1;
        }
        if i % 64 == 63 {
            tokio::task::yield_now().await; // keep health checks answered meanwhile
        }
    }
    READY.store(true, Ordering::SeqCst);
    info!(
        prefault_ms,
        total_ms = t.elapsed().as_millis() as u64,
        queries,
        ?frauds,
        "warm-up done; ready"
    );
}

/// A deterministic spread of valid requests (amounts, hours, distances, with and without a last
/// transaction) so warm-up visits many lists of the index, not one.
#[cfg(feature = "embedded-index")]
fn warmup_body(i: usize) -> String {
    let mccs = [
        "5411", "5812", "5912", "5944", "7801", "7802", "7995", "4511", "5311", "5999", "1234",
    ];
    let f = |m: usize| ((i.wrapping_mul(2654435761) >> (m * 3)) % 1000) as f64 / 1000.0;
    let last = if i.is_multiple_of(5) {
        "null".to_string()
    } else {
        format!(
            r#"{{"timestamp":"2026-03-{:02}T{:02}:10:00Z","km_from_current":{:.4}}}"#,
            1 + i % 10,
            i % 24,
            f(5) * 1500.0
        )
    };
    format!(
        r#"{{"id":"warm-{i}","transaction":{{"amount":{:.2},"installments":{},"requested_at":"2026-03-{:02}T{:02}:{:02}:00Z"}},"customer":{{"avg_amount":{:.2},"tx_count_24h":{},"known_merchants":["MERC-001","MERC-{:03}"]}},"merchant":{{"id":"MERC-{:03}","mcc":"{}","avg_amount":{:.2}}},"terminal":{{"is_online":{},"card_present":{},"km_from_home":{:.4}}},"last_transaction":{last}}}"#,
        f(0) * 10_000.0,
        1 + i % 12,
        11 + i % 10,
        (i * 7) % 24,
        i % 60,
        1.0 + f(1) * 2_000.0,
        i % 21,
        i % 20,
        (i * 3) % 25,
        mccs[i % mccs.len()],
        f(2) * 10_000.0,
        i.is_multiple_of(3),
        i.is_multiple_of(2),
        f(3) * 1_200.0,
    )
}

/// Resolves on SIGTERM or SIGINT with the signal's name.
#[cfg(feature = "embedded-index")]
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot install signal handlers; only a kill will stop this server");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            "unix:/sock/a.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/sock/a.sock".into())
        );
        assert_eq!(
            "/tmp/x.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/tmp/x.sock".into())
        );
        assert_eq!(
            "0.0.0.0:8080".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("0.0.0.0:8080".parse().unwrap())
        );
        assert!("unix:".parse::<Endpoint>().is_err());
        assert!("localhost:80".parse::<Endpoint>().is_err());
    }

    #[cfg(feature = "embedded-index")]
    #[test]
    fn warmup_bodies_are_valid_requests() {
        for i in 0..200 {
            let body = warmup_body(i);
            function::payload::parse(body.as_bytes())
                .unwrap_or_else(|e| panic!("body {i}: {e}\n{body}"));
        }
    }
}
