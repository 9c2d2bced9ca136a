//! The event loop: one thread, one mio poller, every connection of the process.
//!
//! Per request the loop makes three system calls: `epoll_wait`, one `read` (a short read means
//! the socket is drained: any later byte raises a new edge), one `write` of all the answers that
//! read completed. Buffers are the loop's, lent to each connection in turn ([`Buffers`] and the
//! read buffer), so an idle connection holds none and the request path allocates nothing.
//!
//! Connections are bounded in number (`max_connections`: beyond it a fixed 503 is written and
//! the connection closed) and in time: the protocol's deadlines ([`http1::Conn::tick`]), and a
//! write that makes no progress for `body_timeout` (a client that never reads its answers) ends
//! the connection. While answers wait to be written nothing more is read from that connection,
//! so a client cannot make the server buffer without bound. Deadlines are checked on a tick of
//! an eighth of the shortest timeout (10-250 ms), not per connection, so they are coarse by that
//! much and cost nothing per request.
//!
//! A connection that ends after an answer is closed gently: the write side is shut down, then
//! whatever the client still sends is read and dropped until it closes or [`LINGER`] passes, so
//! the kernel does not reset the connection (which could destroy the answer) because of unread
//! bytes.

use super::answer::ReadyFlag;
use super::config::Limits;
use super::http1::{self, App, Buffers, Next};
use super::listener::{Listener, Stream};
use anyhow::{Context, Result};
use mio::event::Event;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

const LISTENER: Token = Token(usize::MAX - 1);
const SIGNAL: Token = Token(usize::MAX - 2);
const WAKER: Token = Token(usize::MAX - 3);

/// How long a closing connection keeps reading (and dropping) what the client still sends.
pub const LINGER: Duration = Duration::from_millis(100);

/// Connections answered 503 by the cap and still lingering; beyond this, shed ones are closed
/// at once (a flood must not grow this set).
const MAX_SHEDDING: usize = 1024;

/// One read takes at most this much; a request and its pipelined followers usually fit.
const READ_BYTES: usize = 64 * 1024;

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

/// One accepted connection.
struct Connection {
    stream: Stream,
    http: http1::Conn,
    /// Answers the client has not taken yet; nothing more is read until they are written.
    backlog: Vec<u8>,
    /// Since when a write has made no progress.
    stalled_since: Option<Instant>,
    /// Closing: write side shut, reading and dropping until this instant.
    linger_until: Option<Instant>,
    /// The answers end the connection once written.
    close_after_flush: bool,
    /// The client closed its side (EOF read).
    peer_closed: bool,
    /// epoll reported the client's FIN (or an error): read on to the EOF, since no later edge
    /// will say so again.
    fin_seen: bool,
    /// Counted against `max_connections` (not the 503s of the cap).
    counted: bool,
    /// WRITABLE interest is registered (only while a backlog waits).
    writable: bool,
}

/// The server: a listener, its connections, and what answers them.
pub struct Server<A: App> {
    poll: Poll,
    listener: Option<Listener>,
    conns: Slab<Connection>,
    app: A,
    ready: ReadyFlag,
    limits: Limits,
    read_buf: Box<[u8]>,
    bufs: Buffers,
    /// Connections counted against the cap.
    counted: usize,
    /// Shed connections still lingering.
    shedding: usize,
    /// Connections shed since the last log line about it (logged at most once a second).
    shed_unlogged: u64,
    shed_logged_at: Option<Instant>,
    signals: Option<mio::net::UnixStream>,
    /// Kept here as long as the loop runs: a waker dropped by the thread that used it would
    /// close its eventfd and take a wake-up not yet polled with it.
    waker: Option<Arc<Waker>>,
    /// Set once SIGTERM/SIGINT arrived: exit when every connection is done, or at this instant.
    drain_until: Option<Instant>,
    tick: Duration,
}

impl<A: App> Server<A> {
    pub fn new(mut listener: Listener, app: A, ready: ReadyFlag, limits: Limits) -> Result<Self> {
        let poll = Poll::new().context("cannot create the poller")?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .context("cannot register the listener")?;
        let shortest = limits.header_timeout.min(limits.body_timeout);
        Ok(Server {
            poll,
            listener: Some(listener),
            conns: Slab::new(),
            app,
            ready,
            limits,
            read_buf: vec![0; READ_BYTES].into_boxed_slice(),
            bufs: Buffers::default(),
            counted: 0,
            shedding: 0,
            shed_unlogged: 0,
            shed_logged_at: None,
            signals: None,
            waker: None,
            drain_until: None,
            tick: (shortest / 8).clamp(Duration::from_millis(10), Duration::from_millis(250)),
        })
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
            let timeout = if background.wants_cpu() || now < spin_until {
                Duration::ZERO
            } else {
                next_tick.saturating_duration_since(now)
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
                    LISTENER => self.accept(now),
                    SIGNAL => self.start_drain(now),
                    WAKER => background.step(),
                    Token(key) => self.on_event(key, ev, now),
                }
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

    fn accept(&mut self, now: Instant) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, typically: the next connection retries.
                    warn!(error = %e, "accept failed");
                    return;
                }
            };
            if self.counted >= self.limits.max_connections {
                self.shed(stream, now);
                continue;
            }
            if self.add(stream, now, true).is_some() {
                self.counted += 1;
            }
        }
    }

    /// Registers a connection; a registration failure drops it.
    fn add(&mut self, mut stream: Stream, now: Instant, counted: bool) -> Option<usize> {
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
        entry.insert(Connection {
            stream,
            http: http1::Conn::new(now),
            backlog: Vec::new(),
            stalled_since: None,
            linger_until: None,
            close_after_flush: false,
            peer_closed: false,
            fin_seen: false,
            counted,
            writable: false,
        });
        Some(key)
    }

    /// Over the cap: a fixed 503 and close, without reading the request.
    fn shed(&mut self, mut stream: Stream, now: Instant) {
        self.shed_unlogged += 1;
        if self
            .shed_logged_at
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            warn!(
                shed = self.shed_unlogged,
                max_connections = self.limits.max_connections,
                "connection cap reached: answering 503"
            );
            self.shed_unlogged = 0;
            self.shed_logged_at = Some(now);
        }
        let mut out = Vec::new();
        http1::write_final(&mut out, &function::Response::too_many_connections());
        // A fresh socket's send buffer takes ~150 bytes at once.
        let _ = stream.write(&out);
        stream.shutdown_write();
        if self.shedding >= MAX_SHEDDING {
            return; // dropped: closed without lingering
        }
        if let Some(key) = self.add(stream, now, false) {
            self.conns[key].linger_until = Some(now + LINGER);
            self.shedding += 1;
        }
    }

    fn on_event(&mut self, key: usize, ev: &Event, now: Instant) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let mut read = ev.is_readable() || ev.is_read_closed() || ev.is_error();
        c.fin_seen |= ev.is_read_closed() || ev.is_error();
        if ev.is_writable() && !c.backlog.is_empty() {
            if !self.flush(key, now) {
                return;
            }
            // Input that arrived while answers waited was not read (its edge is spent).
            read |= self.conns.get(key).is_some_and(|c| c.backlog.is_empty());
        }
        if read {
            self.read(key, now);
        }
    }

    /// Reads what the client sent and answers it; stops while answers wait to be written.
    fn read(&mut self, key: usize, now: Instant) {
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            // While answers wait, or the last one is not out yet, nothing more is read; once the
            // connection lingers, everything is read and dropped.
            if c.linger_until.is_none() && (!c.backlog.is_empty() || c.close_after_flush) {
                return;
            }
            let n = match c.stream.read(&mut self.read_buf) {
                Ok(0) => return self.peer_closed(key),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(error = %e, "read failed");
                    return self.remove(key);
                }
            };
            if c.linger_until.is_some() {
                continue; // closing: drop what the client still sends
            }
            let fin_seen = c.fin_seen;
            let next = c.http.receive(
                &self.read_buf[..n],
                now,
                &self.limits,
                &mut self.app,
                &mut self.bufs,
            );
            if !self.send(key, next, now) || next == Next::Close {
                return;
            }
            if n < self.read_buf.len() && !fin_seen {
                // Drained: with edge-triggered readiness, any byte that arrives after this
                // read raises a new event, so a second read would only say WouldBlock.
                return;
            }
        }
    }

    /// Writes the answers in `self.bufs.out`; then, on [`Next::Close`], closes once they are out.
    /// Returns false if the connection is gone.
    fn send(&mut self, key: usize, next: Next, now: Instant) -> bool {
        let c = &mut self.conns[key];
        let mut gone = false;
        if !self.bufs.out.is_empty() {
            let out = &self.bufs.out;
            if c.backlog.is_empty() {
                match write_some(&mut c.stream, out) {
                    Ok(n) if n == out.len() => {}
                    Ok(n) => {
                        c.backlog.extend_from_slice(&out[n..]);
                        c.stalled_since = Some(now);
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
        let wrote = !self.bufs.out.is_empty();
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

    /// The socket has room again: write the backlog; if it is all out, read what waited.
    /// Returns false if the connection is gone.
    fn flush(&mut self, key: usize, now: Instant) -> bool {
        let c = &mut self.conns[key];
        match write_some(&mut c.stream, &c.backlog) {
            Ok(n) if n > 0 => {
                c.backlog.drain(..n);
                c.stalled_since = Some(now);
                if c.backlog.is_empty() {
                    // Released: a slow reader should not keep a large buffer.
                    c.backlog = Vec::new();
                    c.stalled_since = None;
                }
            }
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "write failed");
                self.remove(key);
                return false;
            }
        }
        self.after_write(key, now)
    }

    /// The client closed its side: every complete request it sent was answered as it arrived;
    /// finish writing those answers, then close.
    fn peer_closed(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if c.linger_until.is_some() || c.backlog.is_empty() {
            return self.remove(key);
        }
        c.peer_closed = true;
        c.close_after_flush = true;
    }

    fn remove(&mut self, key: usize) {
        if self.conns.contains(key) {
            let mut c = self.conns.remove(key);
            let _ = self.poll.registry().deregister(&mut c.stream);
            if c.counted {
                self.counted -= 1;
            } else {
                self.shedding -= 1;
            }
        }
    }

    /// Deadlines: lingering closes, stalled writes, the protocol's head and body timeouts.
    fn on_tick(&mut self, now: Instant) {
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            let c = &mut self.conns[key];
            if c.linger_until.is_some_and(|t| now >= t) {
                self.remove(key);
                continue;
            }
            if c.stalled_since
                .is_some_and(|t| now.duration_since(t) >= self.limits.body_timeout)
            {
                debug!("client does not read its answers; closing");
                self.remove(key);
                continue;
            }
            if c.linger_until.is_some() || c.close_after_flush || !c.backlog.is_empty() {
                continue;
            }
            let next = c.http.tick(now, &self.limits, &mut self.bufs);
            self.send(key, next, now);
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
        if let Some(l) = self.listener.take() {
            l.close(self.poll.registry());
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            let c = &mut self.conns[key];
            if c.linger_until.is_some() || c.close_after_flush {
                continue;
            }
            let next = c.http.finish();
            self.send(key, next, now);
        }
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
