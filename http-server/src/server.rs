//! The event loop: one thread, one mio poller, every connection of the process.
//!
//! Per request the loop makes three system calls: `epoll_wait`, one `read` (a short read means
//! the socket is drained: any later byte raises a new edge), one `write` of the answers that
//! read completed. Buffers are the loop's, lent to each connection in turn ([`Buffers`] and the
//! read buffer), so an idle connection holds none and the request path allocates nothing.
//!
//! **Slices.** A connection is served a slice at a time: one read of at most [`READ_BYTES`] and
//! at most `max_requests_per_turn` answers (see [`http1::Next::Pause`]). An event is served at
//! once, one slice; a connection with more to do than a slice (unread input, pipelined requests
//! left) joins the queue of busy connections, and each turn of the loop serves at most
//! [`BUSY_PER_TURN`] of them before it polls again (without sleeping while any is left). So a
//! client that pipelines thousands of requests, or a thousand of them, gets slices in turn, and
//! a request that arrives meanwhile waits for at most one poll's events and one batch of busy
//! slices, not for every busy connection. Accepting takes at most [`ACCEPTS_PER_TURN`]
//! connections per turn too.
//!
//! **Bounds** (each a flag, docs/HOSTILE.md):
//! - answers wait to be written up to `max_unsent_bytes` per connection: beyond that its
//!   pipelined requests are not read until the client takes its answers, and they must all be
//!   taken within `send_timeout` of when they started to wait, whatever trickles out meanwhile;
//! - the bytes all connections hold (unfinished requests, input not read yet, decoded bodies,
//!   unsent answers) stay within `memory_budget`: when a connection makes the total grow past
//!   it, the connections that hold the most are turned away with 503 (closed at once if they
//!   have answers unsent) until it fits again, whichever connection grew; a new connection
//!   holds nothing and is always let in;
//! - `max_connections` at once: at the cap a new connection takes the place of the one that has
//!   delivered nothing for longest (no answer taken by its client for [`EVICT_AFTER`]); when
//!   every connection delivered recently, the new one gets a fixed 503;
//! - the protocol's deadlines ([`http1::Conn::tick`]) for heads and bodies.
//!
//! Deadlines are checked on a tick of an eighth of the shortest timeout (10-250 ms), not per
//! connection, so they are coarse by that much and cost nothing per request.
//!
//! An `accept` that fails (out of descriptors, typically) is retried after a back-off that
//! doubles from [`ACCEPT_BACKOFF`].0 to .1, not at the next arrival: the listener is
//! edge-triggered and connections already queued would otherwise wait for a new one. A
//! connection accepted but not set up (its socket options) is dropped alone: the listener goes
//! on at once. The process's descriptors are sized at start ([`fit_descriptors`]) so that the
//! connection cap and the lingering sheds fit.
//!
//! A connection that ends after an answer is closed gently: the write side is shut down, then
//! whatever the client still sends is read and dropped until it closes or [`LINGER`] passes, so
//! the kernel does not reset the connection (which could destroy the answer) because of unread
//! bytes.

use super::answer::ReadyFlag;
use super::config::Limits;
use super::http1::{self, Answer, App, Buffers, Next, Ticket};
use super::latency::Latency;
use super::listener::{Listener, Stream};
use anyhow::{Context, Result};
use function::metrics::Counters;
use function::{Request, Response};
use mio::event::Event;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

const LISTENER: Token = Token(usize::MAX - 1);
const SIGNAL: Token = Token(usize::MAX - 2);
const WAKER: Token = Token(usize::MAX - 3);
const METRICS_LISTENER: Token = Token(usize::MAX - 4);

/// The metrics route, on the metrics listener only.
pub const METRICS_PATH: &str = "/metrics";

/// Prometheus's text format, version 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Where promised answers ([`Answer::Later`]) come back from other threads: each wakes the
/// event loop, which writes it to its connection (or drops it if that connection ended).
#[derive(Clone)]
pub struct Completions {
    done: Arc<Mutex<Vec<(Ticket, Response)>>>,
    waker: Arc<Waker>,
}

impl Completions {
    /// Hands the answer of the request `ticket` names to the event loop.
    pub fn complete(&self, ticket: Ticket, answer: Response) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ticket, answer));
        let _ = self.waker.wake();
    }
}

/// How long a closing connection keeps reading (and dropping) what the client still sends.
pub const LINGER: Duration = Duration::from_millis(100);

/// Connections answered 503 and still lingering, at most (`Limits::max_shedding` is lowered to
/// what the descriptors allow); beyond, shed ones are closed at once (a flood must not grow
/// this set).
pub const MAX_SHEDDING: usize = 1024;

/// Descriptors the process keeps for itself besides its connections: the standard streams,
/// the listener, the poller, the waker, the signal pipe, the index file, the log (about 12),
/// with room.
pub const RESERVED_DESCRIPTORS: usize = 32;

/// One read takes at most this much: a contest request (~500 bytes) and its pipelined
/// followers, or a quarter of the largest body; it is also what a paused connection may keep.
pub const READ_BYTES: usize = 16 * 1024;

/// New connections taken per turn of the loop (the rest wait in the kernel's queue).
pub const ACCEPTS_PER_TURN: usize = 64;

/// Busy connections served a slice per turn of the loop, between two polls (a slice of tiny
/// pipelined requests takes ~20 us: a batch keeps a fresh request's wait around a millisecond).
pub const BUSY_PER_TURN: usize = 64;

/// First and longest wait before `accept` is tried again after it failed.
pub const ACCEPT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(1));

/// At the connection cap, a connection that has delivered no answer for this long may lose its
/// place to a new one.
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// Fits the limits to the open-files limits `(soft, hard)`: the connection cap must fit the
/// hard limit (with [`RESERVED_DESCRIPTORS`]), or the server refuses to start with the numbers;
/// the lingering sheds take what is left, up to [`MAX_SHEDDING`] (none at all still serves: a
/// shed is then closed at once). Returns the soft limit to set, when it must be raised.
pub fn fit_descriptors(limits: &mut Limits, soft: u64, hard: u64) -> Result<Option<u64>> {
    let wanted = (limits.max_connections + RESERVED_DESCRIPTORS) as u64;
    anyhow::ensure!(
        hard >= wanted,
        "--max-connections {} needs {wanted} open files ({} connections and {} for the process), \
         but the hard limit on open files is {hard}: raise it (`ulimit -n`, compose `ulimits: \
         nofile`) or lower --max-connections to at most {}",
        limits.max_connections,
        limits.max_connections,
        RESERVED_DESCRIPTORS,
        hard.saturating_sub(RESERVED_DESCRIPTORS as u64)
    );
    limits.max_shedding = limits.max_shedding.min((hard - wanted) as usize);
    let needed = wanted + limits.max_shedding as u64;
    Ok((soft < needed).then_some(needed))
}

/// Fits `limits` to this process's open-files limits ([`fit_descriptors`]), raising the soft
/// limit as far as they need.
pub fn fit_open_files(mut limits: Limits) -> Result<Limits> {
    let (soft, hard) = super::listener::open_files_limit()?;
    if let Some(raised) = fit_descriptors(&mut limits, soft, hard)? {
        super::listener::set_open_files_limit(raised, hard)?;
        info!(from = soft, to = raised, "raised the open-files limit");
    }
    Ok(limits)
}

/// Work the loop runs between events while it asks for it (the warm-up's queries).
pub trait Background {
    /// True while there is work to do now (the loop then polls without waiting).
    fn wants_cpu(&self) -> bool;
    /// Does a slice of the work; also called when the loop's [`Waker`] is woken.
    fn step(&mut self);
}

/// No background work.
impl Background for () {
    fn wants_cpu(&self) -> bool {
        false
    }
    fn step(&mut self) {}
}

/// What a connection was accepted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The app's requests (the public listener).
    App,
    /// `GET /metrics` only (the metrics listener).
    Metrics,
}

/// One accepted connection.
struct Connection {
    stream: Stream,
    role: Role,
    /// Tells this connection from a later one under the same key ([`Ticket`]).
    generation: u64,
    /// An answer was promised and has not come yet: nothing is read or resumed.
    awaiting: bool,
    http: http1::Conn,
    /// Answers the client has not taken yet; nothing more is read until they are written.
    backlog: Vec<u8>,
    /// Since when answers have waited in `backlog` (progress does not reset it).
    backlog_since: Option<Instant>,
    /// When the connection last delivered: accepted, or every answer taken by the kernel.
    delivered_at: Instant,
    /// Closing: write side shut, reading and dropping until this instant.
    linger_until: Option<Instant>,
    /// The answers end the connection once written.
    close_after_flush: bool,
    /// The client closed its side (EOF read).
    peer_closed: bool,
    /// epoll reported the client's FIN (or an error): read on to the EOF, since no later edge
    /// will say so again.
    fin_seen: bool,
    /// The socket may hold input not read yet (its readable edge was not drained).
    readable: bool,
    /// The protocol stopped at its budget with input left (`Next::Pause`).
    paused: bool,
    /// In the turn queue.
    queued: bool,
    /// Counted against `max_connections` (not the 503s of the cap).
    counted: bool,
    /// WRITABLE interest is registered (only while a backlog waits).
    writable: bool,
    /// Bytes this connection holds, as counted in `Server::held`.
    held: usize,
}

impl Connection {
    /// Whether it has work for another turn (and nothing makes it wait for the client).
    fn wants_turn(&self) -> bool {
        self.backlog.is_empty()
            && !self.awaiting
            && (self.paused || self.readable)
            && (self.linger_until.is_some() || !self.close_after_flush)
    }
}

/// The server: a listener, its connections, and what answers them.
pub struct Server<A: App> {
    poll: Poll,
    listener: Option<Listener>,
    /// Where `GET /metrics` is served ([`Server::serve_metrics`]), apart from the app's.
    metrics_listener: Option<Listener>,
    /// Connections may wait on the metrics listener.
    accept_metrics: bool,
    /// Promised answers handed back by other threads ([`Completions`]).
    completed: Arc<Mutex<Vec<(Ticket, Response)>>>,
    /// The generation the next connection gets.
    generation: u64,
    conns: Slab<Connection>,
    /// Busy connections (more to do than a slice), in the order they are served.
    turns: VecDeque<usize>,
    app: A,
    ready: ReadyFlag,
    limits: Limits,
    read_buf: Box<[u8]>,
    bufs: Buffers,
    /// Connections counted against the cap.
    counted: usize,
    /// Shed connections still lingering.
    shedding: usize,
    /// Bytes held by all connections (see `Limits::memory_budget`).
    held: usize,
    /// The listener may have connections waiting (the last turn stopped at its budget).
    accept_more: bool,
    /// After a failed accept: when to try again, and the next back-off.
    accept_retry_at: Option<Instant>,
    accept_backoff: Duration,
    /// Rate-limited warnings: connections shed, accept failures, connections not set up.
    shed_log: RateLog,
    accept_log: RateLog,
    setup_log: RateLog,
    /// Sets up an accepted connection's socket (its options); replaced by tests.
    setup: fn(&Stream) -> io::Result<()>,
    signals: Option<mio::net::UnixStream>,
    /// Kept here as long as the loop runs: a waker dropped by the thread that used it would
    /// close its eventfd and take a wake-up not yet polled with it.
    waker: Option<Arc<Waker>>,
    /// Set once SIGTERM/SIGINT arrived: exit when every connection is done, or at this instant.
    drain_until: Option<Instant>,
    tick: Duration,
}

/// Counts occurrences and says when to log them: at most once a second.
#[derive(Default)]
struct RateLog {
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl RateLog {
    /// Counts one; returns the count to log now, if a line is due.
    fn count(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .logged_at
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// Why a connection is turned away with a 503.
#[derive(Clone, Copy, Debug)]
enum Shed {
    /// The connection cap, and no connection to evict.
    Cap,
    /// The memory budget.
    Memory,
}

impl Shed {
    fn response(self) -> Response {
        match self {
            Shed::Cap => Response::too_many_connections(),
            Shed::Memory => Response::server_busy(),
        }
    }
}

impl<A: App> Server<A> {
    /// A server whose app promises answers ([`Answer::Later`]): `app` is made with the
    /// [`Completions`] it hands them back through.
    pub fn new_with(
        listener: Listener,
        ready: ReadyFlag,
        limits: Limits,
        app: impl FnOnce(Completions) -> A,
    ) -> Result<Self> {
        let poll = Poll::new().context("cannot create the poller")?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).context("cannot create a waker")?);
        let completed = Arc::default();
        let completions = Completions {
            done: Arc::clone(&completed),
            waker: waker.clone(),
        };
        let mut server = Server::with_poll(poll, listener, app(completions), ready, limits)?;
        (server.completed, server.waker) = (completed, Some(waker));
        Ok(server)
    }

    /// A server of `app` on `listener`; nothing is counted until [`Server::serve_metrics`].
    pub fn new(listener: Listener, app: A, ready: ReadyFlag, limits: Limits) -> Result<Self> {
        let poll = Poll::new().context("cannot create the poller")?;
        Server::with_poll(poll, listener, app, ready, limits)
    }

    fn with_poll(
        poll: Poll,
        mut listener: Listener,
        app: A,
        ready: ReadyFlag,
        limits: Limits,
    ) -> Result<Self> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .context("cannot register the listener")?;
        let shortest = limits
            .header_timeout
            .min(limits.body_timeout)
            .min(limits.send_timeout);
        Ok(Server {
            poll,
            listener: Some(listener),
            metrics_listener: None,
            accept_metrics: false,
            completed: Arc::default(),
            generation: 0,
            conns: Slab::new(),
            turns: VecDeque::new(),
            app,
            ready,
            limits,
            read_buf: vec![0; READ_BYTES].into_boxed_slice(),
            bufs: Buffers {
                uncounted: true,
                ..Buffers::default()
            },
            counted: 0,
            shedding: 0,
            held: 0,
            accept_more: false,
            accept_retry_at: None,
            accept_backoff: ACCEPT_BACKOFF.0,
            shed_log: RateLog::default(),
            accept_log: RateLog::default(),
            setup_log: RateLog::default(),
            setup: Stream::set_up,
            signals: None,
            waker: None,
            drain_until: None,
            tick: (shortest / 8).clamp(Duration::from_millis(10), Duration::from_millis(250)),
        })
    }

    /// Serves `GET /metrics` on `listener` (Prometheus text: every answer counted, by decision
    /// and refusal, and the request-duration histogram, [`crate::latency`]), with the same
    /// limits as the app's listener. Without it nothing is counted, and the app's listener
    /// never serves the route.
    pub fn serve_metrics(&mut self, mut listener: Listener) -> Result<()> {
        self.poll
            .registry()
            .register(&mut listener, METRICS_LISTENER, Interest::READABLE)
            .context("cannot register the metrics listener")?;
        self.metrics_listener = Some(listener);
        self.bufs.uncounted = false;
        Ok(())
    }

    /// A handle another thread can use to make the loop call [`Background::step`].
    pub fn waker(&mut self) -> io::Result<Arc<Waker>> {
        if let Some(w) = &self.waker {
            return Ok(w.clone());
        }
        let w = Arc::new(Waker::new(self.poll.registry(), WAKER)?);
        self.waker = Some(w.clone());
        Ok(w)
    }

    /// Starts a graceful shutdown on SIGTERM or SIGINT (see [`Server::run`]).
    pub fn stop_on_signals(&mut self) -> Result<()> {
        let (rx, tx) = std::os::unix::net::UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        let tx2 = tx.try_clone()?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGTERM, tx)?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGINT, tx2)?;
        let mut rx = mio::net::UnixStream::from_std(rx);
        self.poll
            .registry()
            .register(&mut rx, SIGNAL, Interest::READABLE)?;
        self.signals = Some(rx);
        Ok(())
    }

    /// Serves until a signal asked to stop and the drain is over: then the listener is closed
    /// (a Unix socket's file removed), `/ready` says 503, idle connections are closed at once and
    /// busy ones after their current answer, and the loop returns once none is left or after the
    /// drain time.
    pub fn run(&mut self, background: &mut impl Background) -> Result<()> {
        let mut events = Events::with_capacity(256);
        let mut next_tick = Instant::now() + self.tick;
        // Polls without waiting until this instant (the spin window after the last event).
        let mut spin_until = Instant::now();
        loop {
            let now = Instant::now();
            if let Some(until) = self.drain_until {
                if self.conns.is_empty() {
                    return Ok(());
                }
                if now >= until {
                    warn!(
                        connections = self.conns.len(),
                        "connections still busy after the drain time; exiting anyway"
                    );
                    return Ok(());
                }
            }
            let busy = background.wants_cpu()
                || now < spin_until
                || !self.turns.is_empty()
                || (self.accept_more && self.accept_retry_at.is_none());
            let timeout = if busy {
                Duration::ZERO
            } else {
                let wake = self.accept_retry_at.map_or(next_tick, |t| t.min(next_tick));
                wake.saturating_duration_since(now)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e).context("poll failed");
            }
            let now = Instant::now();
            if !events.is_empty() && !self.limits.spin.is_zero() {
                spin_until = now + self.limits.spin;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_more = true,
                    METRICS_LISTENER => self.accept_metrics = true,
                    SIGNAL => self.start_drain(now),
                    WAKER => {
                        self.take_completions(now);
                        background.step();
                    }
                    Token(key) => self.on_event(key, ev, now),
                }
            }
            self.turn(now);
            if self.accept_more && self.accept_retry_at.is_none_or(|t| now >= t) {
                self.accept(now, Role::App);
            }
            if self.accept_metrics {
                self.accept(now, Role::Metrics);
            }
            if background.wants_cpu() {
                background.step();
            }
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + self.tick;
            }
        }
    }

    /// Notes what the event says and serves the connection a slice at once, unless it is busy
    /// (queued: it gets its slice in turn).
    fn on_event(&mut self, key: usize, ev: &Event, now: Instant) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
        c.fin_seen |= ev.is_read_closed() || ev.is_error();
        // A writable edge needs no flag: a connection with a backlog tries to write each slice.
        if !c.queued {
            self.slice(key, now);
        }
    }

    /// Serves at most [`BUSY_PER_TURN`] busy connections a slice each.
    fn turn(&mut self, now: Instant) {
        for _ in 0..self.turns.len().min(BUSY_PER_TURN) {
            let Some(key) = self.turns.pop_front() else {
                break;
            };
            let Some(c) = self.conns.get_mut(key) else {
                continue;
            };
            if !std::mem::replace(&mut c.queued, false) {
                continue; // a stale entry of a key that was reused
            }
            self.slice(key, now);
        }
    }

    /// One slice, then the connection joins the busy queue if it has more to do.
    fn slice(&mut self, key: usize, now: Instant) {
        self.serve(key, now);
        if let Some(c) = self.conns.get_mut(key) {
            if c.wants_turn() {
                queue(&mut self.turns, key, c);
            }
        }
    }

    /// One slice of work for a connection: write what waits, then go on with its requests, or
    /// read once.
    fn serve(&mut self, key: usize, now: Instant) {
        if self.conns[key].linger_until.is_some() {
            return self.drop_input(key);
        }
        if !self.conns[key].backlog.is_empty()
            && (!self.flush(key, now) || !self.conns[key].backlog.is_empty())
        {
            return; // gone, or the client still has not taken its answers
        }
        let c = &mut self.conns[key];
        if c.close_after_flush || c.awaiting {
            return;
        }
        self.bufs.ticket = Ticket {
            key,
            generation: c.generation,
        };
        // The metrics listener's connections get a snapshot of the counts, taken only for them.
        let mut metrics = (c.role == Role::Metrics).then(|| MetricsApp {
            counters: self.bufs.counters.clone(),
            latency: self.bufs.latency.clone(),
            index: self.app.index(),
        });
        let (limits, bufs) = (&self.limits, &mut self.bufs);
        let mut next = if c.paused {
            match &mut metrics {
                Some(m) => c.http.resume(now, limits, m, bufs),
                None => c.http.resume(now, limits, &mut self.app, bufs),
            }
        } else if c.readable {
            let n = match c.stream.read(&mut self.read_buf) {
                Ok(0) => return self.peer_closed(key),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.readable = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
                Err(e) => {
                    debug!(error = %e, "read failed");
                    return self.remove(key);
                }
            };
            // Drained: with edge-triggered readiness, any byte that arrives after this read
            // raises a new event, so another read would only say WouldBlock. After a FIN no
            // edge comes again: read on to the EOF.
            c.readable = n == self.read_buf.len() || c.fin_seen;
            let input = &self.read_buf[..n];
            match &mut metrics {
                Some(m) => c.http.receive(input, now, limits, m, bufs),
                None => c.http.receive(input, now, limits, &mut self.app, bufs),
            }
        } else {
            return;
        };
        self.after_protocol(key, &mut next, now);
    }

    /// What the protocol said of a connection: paused, awaiting, or done once the client closed.
    fn after_protocol(&mut self, key: usize, next: &mut Next, now: Instant) {
        let c = &mut self.conns[key];
        c.paused = *next == Next::Pause;
        c.awaiting = *next == Next::Await;
        if c.peer_closed && *next == Next::Read {
            // Every request the client sent before closing its side is answered.
            *next = Next::Close;
        }
        if self.send(key, *next, now) {
            self.account(key, now);
        }
    }

    /// Writes the promised answers handed back since the last wake-up, each to its connection
    /// if it is still the one that asked, then serves on.
    fn take_completions(&mut self, now: Instant) {
        let done = std::mem::take(&mut *self.completed.lock().unwrap_or_else(|e| e.into_inner()));
        for (ticket, answer) in done {
            let Some(c) = self.conns.get_mut(ticket.key) else {
                continue;
            };
            if c.generation != ticket.generation || !c.awaiting {
                continue; // that connection ended, or was turned away meanwhile
            }
            self.bufs.ticket = ticket;
            let mut next =
                c.http
                    .complete(&answer, now, &self.limits, &mut self.app, &mut self.bufs);
            self.after_protocol(ticket.key, &mut next, now);
            if let Some(c) = self.conns.get_mut(ticket.key) {
                if c.wants_turn() {
                    queue(&mut self.turns, ticket.key, c);
                }
            }
        }
    }

    /// A closing connection: read and drop what the client still sends (one read per turn).
    fn drop_input(&mut self, key: usize) {
        let c = &mut self.conns[key];
        match c.stream.read(&mut self.read_buf) {
            Ok(0) => self.remove(key),
            Ok(n) => c.readable = n == self.read_buf.len() || c.fin_seen,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => self.remove(key),
        }
    }

    /// Updates what the connection holds in the memory budget; if it grew past the budget,
    /// frees room ([`Server::fit_budget`]).
    fn account(&mut self, key: usize, now: Instant) {
        let c = &mut self.conns[key];
        let held = c.http.held_bytes() + c.backlog.capacity();
        let grew = held > c.held;
        self.held = self.held + held - c.held;
        c.held = held;
        if grew {
            self.fit_budget(now);
        }
    }

    /// While the connections hold more than the budget, turns away the one that holds the most
    /// (of equals, the one that delivered nothing for longest): whoever made the total grow,
    /// the largest holders pay, so connections that keep the total near the budget cannot make
    /// a newcomer's small request the one refused. Each turned-away connection is closed or no
    /// longer counted, so the loop ends.
    fn fit_budget(&mut self, now: Instant) {
        while self.held > self.limits.memory_budget {
            let largest = self
                .conns
                .iter()
                .filter(|(_, c)| c.counted && c.held > 0)
                .max_by_key(|(_, c)| (c.held, std::cmp::Reverse(c.delivered_at)))
                .map(|(k, _)| k);
            let Some(victim) = largest else {
                return;
            };
            self.shed_log_line(now, Shed::Memory);
            self.turn_away(victim, now, Shed::Memory);
        }
    }

    /// Takes new connections of `role`'s listener (at most [`ACCEPTS_PER_TURN`]).
    fn accept(&mut self, now: Instant, role: Role) {
        for _ in 0..ACCEPTS_PER_TURN {
            let listener = match role {
                Role::App => &self.listener,
                Role::Metrics => &self.metrics_listener,
            };
            let Some(listener) = listener else {
                self.accept_more &= role != Role::App;
                self.accept_metrics = false;
                return;
            };
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if role == Role::Metrics {
                        self.accept_metrics = false;
                        return;
                    }
                    (self.accept_more, self.accept_retry_at) = (false, None);
                    self.accept_backoff = ACCEPT_BACKOFF.0;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, typically: the queued connections stay in the kernel
                    // until a retry after the back-off (the edge-triggered listener would not
                    // say again that they are there). The metrics listener tries again at the
                    // next tick.
                    if role == Role::Metrics {
                        self.accept_metrics = false;
                        return;
                    }
                    if let Some(failures) = self.accept_log.count(now) {
                        warn!(error = %e, failures, retry_ms = self.accept_backoff.as_millis() as u64, "accept failed");
                    }
                    self.accept_retry_at = Some(now + self.accept_backoff);
                    self.accept_backoff = (self.accept_backoff * 2).min(ACCEPT_BACKOFF.1);
                    return;
                }
            };
            (self.accept_retry_at, self.accept_backoff) = (None, ACCEPT_BACKOFF.0);
            if let Err(e) = (self.setup)(&stream) {
                // This connection only: the listener and the others are fine.
                if let Some(failures) = self.setup_log.count(now) {
                    warn!(error = %e, failures, "cannot set up an accepted connection; dropped");
                }
                continue;
            }
            if self.counted >= self.limits.max_connections && !self.evict(now) {
                self.shed(stream, now, Shed::Cap);
            } else if self.add(stream, now, true, role).is_some() {
                self.counted += 1;
            }
        }
        // The budget of this turn is spent; the rest waits for the next turn.
        match role {
            Role::App => self.accept_more = true,
            Role::Metrics => self.accept_metrics = true,
        }
    }

    /// At the cap: turns away the counted connection that has delivered nothing for longest, if
    /// that is over [`EVICT_AFTER`]. Returns whether a place was freed.
    fn evict(&mut self, now: Instant) -> bool {
        let victim = self
            .conns
            .iter()
            .filter(|(_, c)| c.counted && c.linger_until.is_none())
            .filter(|(_, c)| now.duration_since(c.delivered_at) >= EVICT_AFTER)
            .min_by_key(|(_, c)| c.delivered_at)
            .map(|(k, _)| k);
        let Some(key) = victim else {
            return false;
        };
        debug!("connection cap: evicting the connection that delivered nothing for longest");
        self.turn_away(key, now, Shed::Cap);
        true
    }

    /// Ends a counted connection to free what it holds: a 503 (`why`) and a gentle close when it
    /// has nothing else to say, else at once. An idle keep-alive connection is just closed.
    fn turn_away(&mut self, key: usize, now: Instant, why: Shed) {
        let c = &mut self.conns[key];
        let idle = c.http.is_idle() && c.backlog.is_empty();
        if !c.backlog.is_empty()
            || c.close_after_flush
            || (idle && matches!(why, Shed::Cap))
            || self.shedding >= self.limits.max_shedding
        {
            return self.remove(key);
        }
        // From here on it is one of the sheds: no longer counted against the cap.
        if std::mem::replace(&mut c.counted, false) {
            self.counted -= 1;
            self.shedding += 1;
        }
        c.http = http1::Conn::new(now);
        (c.paused, c.awaiting) = (false, false);
        self.bufs.answer_final(&why.response());
        if self.send(key, Next::Close, now) {
            self.account(key, now);
        }
    }

    fn shed_log_line(&mut self, now: Instant, why: Shed) {
        if let Some(shed) = self.shed_log.count(now) {
            warn!(
                shed,
                ?why,
                max_connections = self.limits.max_connections,
                held_kib = self.held >> 10,
                budget_kib = self.limits.memory_budget >> 10,
                "turning connections away with 503"
            );
        }
    }

    /// Registers a connection; a registration failure drops it.
    fn add(
        &mut self,
        mut stream: Stream,
        now: Instant,
        counted: bool,
        role: Role,
    ) -> Option<usize> {
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(key), Interest::READABLE)
        {
            warn!(error = %e, "cannot register a connection");
            return None;
        }
        self.generation += 1;
        entry.insert(Connection {
            stream,
            role,
            generation: self.generation,
            awaiting: false,
            http: http1::Conn::new(now),
            backlog: Vec::new(),
            backlog_since: None,
            delivered_at: now,
            linger_until: None,
            close_after_flush: false,
            peer_closed: false,
            fin_seen: false,
            readable: false,
            paused: false,
            queued: false,
            counted,
            writable: false,
            held: 0,
        });
        Some(key)
    }

    /// A fixed 503 and close, without reading the request.
    fn shed(&mut self, mut stream: Stream, now: Instant, why: Shed) {
        self.shed_log_line(now, why);
        let (mut out, response) = (Vec::new(), why.response());
        http1::write_final(&mut out, &response);
        self.bufs.count(&response);
        // A fresh socket's send buffer takes ~150 bytes at once.
        let _ = stream.write(&out);
        stream.shutdown_write();
        if self.shedding >= self.limits.max_shedding {
            return; // dropped: closed without lingering
        }
        if let Some(key) = self.add(stream, now, false, Role::App) {
            self.conns[key].linger_until = Some(now + LINGER);
            self.shedding += 1;
        }
    }

    /// Writes the answers in `self.bufs.out`; then, on [`Next::Close`], closes once they are out.
    /// Returns false if the connection is gone.
    fn send(&mut self, key: usize, next: Next, now: Instant) -> bool {
        let c = &mut self.conns[key];
        let mut gone = false;
        let wrote = !self.bufs.out.is_empty();
        if wrote {
            let out = &self.bufs.out;
            if c.backlog.is_empty() {
                match write_some(&mut c.stream, out) {
                    Ok(n) if n == out.len() => c.delivered_at = now,
                    Ok(n) => {
                        c.backlog.extend_from_slice(&out[n..]);
                        c.backlog_since = Some(now);
                    }
                    Err(e) => {
                        debug!(error = %e, "write failed");
                        gone = true;
                    }
                }
            } else {
                c.backlog.extend_from_slice(out);
            }
        }
        self.bufs.out.clear();
        if gone {
            self.remove(key);
            return false;
        }
        if next == Next::Close {
            let c = &mut self.conns[key];
            if !wrote && c.backlog.is_empty() {
                // Nothing to say (an idle connection timed out): just close.
                self.remove(key);
                return false;
            }
            c.close_after_flush = true;
        }
        self.after_write(key, now)
    }

    /// Once the backlog is out: linger if closing; otherwise make sure WRITABLE interest
    /// matches whether a backlog waits. Returns false if the connection is gone.
    fn after_write(&mut self, key: usize, now: Instant) -> bool {
        let c = &mut self.conns[key];
        if c.backlog.is_empty() && c.close_after_flush && c.linger_until.is_none() {
            if c.peer_closed {
                self.remove(key);
                return false;
            }
            c.stream.shutdown_write();
            c.linger_until = Some(now + LINGER);
            // Reading on drops what the client still sends.
            c.readable = true;
            queue(&mut self.turns, key, c);
        }
        let want = !c.backlog.is_empty();
        if want != c.writable {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if let Err(e) = self
                .poll
                .registry()
                .reregister(&mut c.stream, Token(key), interest)
            {
                debug!(error = %e, "reregister failed");
                self.remove(key);
                return false;
            }
            c.writable = want;
        }
        true
    }

    /// Writes what the backlog holds. Returns false if the connection is gone.
    fn flush(&mut self, key: usize, now: Instant) -> bool {
        let c = &mut self.conns[key];
        match write_some(&mut c.stream, &c.backlog) {
            Ok(n) if n > 0 => {
                c.backlog.drain(..n);
                if c.backlog.is_empty() {
                    // Released: a slow reader should not keep a large buffer.
                    c.backlog = Vec::new();
                    c.backlog_since = None;
                    c.delivered_at = now;
                }
            }
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "write failed");
                self.remove(key);
                return false;
            }
        }
        self.account(key, now);
        self.conns.contains(key) && self.after_write(key, now)
    }

    /// The client closed its side: every complete request it sent was answered as it arrived
    /// (or will be, if paused); finish writing those answers, then close.
    fn peer_closed(&mut self, key: usize) {
        let c = &mut self.conns[key];
        c.readable = false;
        if c.linger_until.is_some() || (c.backlog.is_empty() && !c.paused) {
            return self.remove(key);
        }
        c.peer_closed = true;
        if !c.paused {
            c.close_after_flush = true;
        }
    }

    fn remove(&mut self, key: usize) {
        if self.conns.contains(key) {
            let mut c = self.conns.remove(key);
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.held -= c.held;
            if c.counted {
                self.counted -= 1;
            } else {
                self.shedding -= 1;
            }
        }
    }

    /// Deadlines: lingering closes, answers not taken in time, the protocol's head and body
    /// timeouts.
    fn on_tick(&mut self, now: Instant) {
        self.accept_metrics |= self.metrics_listener.is_some();
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            let c = &mut self.conns[key];
            if c.linger_until.is_some_and(|t| now >= t) {
                self.remove(key);
                continue;
            }
            if c.backlog_since
                .is_some_and(|t| now.duration_since(t) >= self.limits.send_timeout)
            {
                debug!("client does not take its answers; closing");
                self.remove(key);
                continue;
            }
            if c.linger_until.is_some() || c.close_after_flush || !c.backlog.is_empty() {
                continue;
            }
            let next = c.http.tick(now, &self.limits, &mut self.bufs);
            if self.send(key, next, now) {
                self.account(key, now);
            }
        }
    }

    fn start_drain(&mut self, now: Instant) {
        if let Some(rx) = &mut self.signals {
            let mut sink = [0u8; 64];
            while matches!(rx.read(&mut sink), Ok(n) if n > 0) {}
        }
        if self.drain_until.is_some() {
            return;
        }
        info!("signal received: draining");
        self.drain_until = Some(now + self.limits.drain);
        self.ready.set(false);
        for l in [self.listener.take(), self.metrics_listener.take()]
            .into_iter()
            .flatten()
        {
            l.close(self.poll.registry());
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            let c = &mut self.conns[key];
            if c.linger_until.is_some() || c.close_after_flush {
                continue;
            }
            // A paused connection keeps its turns; its last answer will say close.
            let next = c.http.finish();
            self.send(key, next, now);
        }
    }
}

/// What the metrics listener's connections are answered by: `GET /metrics` with a snapshot of
/// the counts, 404 for anything else.
struct MetricsApp<'a> {
    counters: Counters,
    latency: Latency,
    index: Cow<'a, [index_pack::format::Identity]>,
}

impl App for MetricsApp<'_> {
    fn answer(&mut self, req: &Request<'_>, _ticket: Ticket) -> Answer {
        let path = req.target.split_once('?').map_or(req.target, |(p, _)| p);
        if !matches!((req.method, path), ("GET" | "HEAD", METRICS_PATH)) {
            return Answer::Now(Response::not_found());
        }
        let mut text = self.counters.prometheus(&self.index);
        let label = function::metrics::index_label(&self.index);
        self.latency.prometheus(&label, &mut text);
        Answer::Now(Response {
            content_type: PROMETHEUS_TEXT,
            body: Cow::Owned(text),
            ..Response::metrics()
        })
    }
}

/// Puts a connection in the turn queue unless it is there already.
fn queue(turns: &mut VecDeque<usize>, key: usize, c: &mut Connection) {
    if !c.queued {
        c.queued = true;
        turns.push_back(key);
    }
}

/// Writes as much of `buf` as the socket takes now.
fn write_some(stream: &mut Stream, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match stream.write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Endpoint, NoWork};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The first [`FAILING`] accepted connections cannot be set up.
    static SET_UP: AtomicUsize = AtomicUsize::new(0);
    const FAILING: usize = 8;

    fn failing_set_up(s: &Stream) -> io::Result<()> {
        if SET_UP.fetch_add(1, Ordering::SeqCst) < FAILING {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        s.set_up()
    }

    /// A connection that cannot be set up is dropped alone: the next one is served at once,
    /// not after the back-off of a failing `accept` (up to 1 s after eight failures).
    #[test]
    fn a_connection_that_cannot_be_set_up_is_dropped_alone() {
        use std::io::{BufRead, BufReader};
        let path = std::env::temp_dir().join(format!("setup-{}.sock", std::process::id()));
        let endpoint = Endpoint::Unix(path.clone());
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let ready = ReadyFlag::default();
            ready.set(true);
            let listener = Listener::bind(&endpoint).unwrap();
            let mut server = Server::new(listener, NoWork, ready, Limits::default()).unwrap();
            server.setup = failing_set_up;
            bound_tx.send(()).unwrap();
            server.run(&mut ()).unwrap();
        });
        bound_rx.recv().unwrap();
        for _ in 0..FAILING {
            let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // Dropped by the server: end of file, or a reset.
            let mut buf = [0u8; 16];
            assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
        }
        let t = Instant::now();
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /ready HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        let waited = t.elapsed();
        let _ = std::fs::remove_file(&path);
        assert_eq!(line, "HTTP/1.1 200 OK\r\n");
        assert!(
            waited < Duration::from_millis(200),
            "answered after {waited:?}"
        );
    }

    /// Answers `/fraud-score` from another thread after [`SLOW`]; everything else at once.
    struct Slow(Completions);

    const SLOW: Duration = Duration::from_millis(300);

    impl App for Slow {
        fn answer(&mut self, req: &Request<'_>, ticket: Ticket) -> Answer {
            if req.target != "/fraud-score" {
                return Answer::Now(Response::constant());
            }
            let done = self.0.clone();
            std::thread::spawn(move || {
                std::thread::sleep(SLOW);
                done.complete(ticket, Response::constant());
            });
            Answer::Later
        }
    }

    /// While promised answers wait, the loop serves everyone else: ten slow requests sent at
    /// once are answered together, a little after one wait, and `/ready` and new connections
    /// meanwhile at once.
    #[test]
    fn promised_answers_wait_in_parallel_and_block_nothing() {
        use std::io::{BufRead, BufReader};
        let path = std::env::temp_dir().join(format!("slow-{}.sock", std::process::id()));
        let endpoint = Endpoint::Unix(path.clone());
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let ready = ReadyFlag::default();
            ready.set(true);
            let listener = Listener::bind(&endpoint).unwrap();
            let mut server = Server::new_with(listener, ready, Limits::default(), Slow).unwrap();
            bound_tx.send(()).unwrap();
            server.run(&mut ()).unwrap();
        });
        bound_rx.recv().unwrap();
        let ask = |target: &str| {
            let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let head = format!("POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
            s.write_all(head.as_bytes()).unwrap();
            s
        };
        let status = |s: std::os::unix::net::UnixStream| {
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).unwrap();
            line
        };
        let t = Instant::now();
        let slow: Vec<_> = (0..10).map(|_| ask("/fraud-score")).collect();
        std::thread::sleep(Duration::from_millis(50));
        let r = Instant::now();
        assert_eq!(status(ask("/ready")), "HTTP/1.1 200 OK\r\n");
        let ready_took = r.elapsed();
        for s in slow {
            assert_eq!(status(s), "HTTP/1.1 200 OK\r\n");
        }
        let all_took = t.elapsed();
        let _ = std::fs::remove_file(&path);
        assert!(
            ready_took < Duration::from_millis(10),
            "/ready took {ready_took:?}"
        );
        assert!(all_took < SLOW * 2, "ten slow answers took {all_took:?}");
    }

    #[test]
    fn the_descriptors_fit_the_connection_cap_or_the_server_does_not_start() {
        let limits = |max_connections| Limits {
            max_connections,
            ..Limits::default()
        };
        // Room for everything: the soft limit is raised to what the cap and sheds need.
        let mut l = limits(1024);
        assert_eq!(
            fit_descriptors(&mut l, 1024, 20_000).unwrap(),
            Some(1024 + 32 + 1024)
        );
        assert_eq!((l.max_connections, l.max_shedding), (1024, MAX_SHEDDING));
        assert_eq!(
            fit_descriptors(&mut limits(1024), 4096, 20_000).unwrap(),
            None
        );
        // A low hard limit takes its shortfall out of the lingering sheds, never the cap.
        let mut l = limits(1024);
        assert_eq!(fit_descriptors(&mut l, 1024, 1500).unwrap(), Some(1500));
        assert_eq!(
            (l.max_connections, l.max_shedding),
            (1024, 1500 - 1024 - 32)
        );
        let mut l = limits(1024);
        assert_eq!(fit_descriptors(&mut l, 1056, 1056).unwrap(), None);
        assert_eq!(l.max_shedding, 0);
        // Too low for the cap itself: a clear error with the numbers.
        let e = fit_descriptors(&mut limits(1024), 256, 1000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--max-connections 1024 needs 1056 open files"),
            "{e}"
        );
        assert!(e.contains("the hard limit on open files is 1000"), "{e}");
        assert!(e.contains("lower --max-connections to at most 968"), "{e}");
    }
}
