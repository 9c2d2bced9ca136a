//! `serve`: the fraud handler over HTTP/1.1 (keep-alive, pipelining), on a Unix socket or a TCP
//! address, one single-threaded event loop per process.
//!
//! This module only moves bytes between sockets and [`function::Scorer::handle`]; every status
//! and body it sends is built by `function::handler` (so the Lambda and the containers cannot
//! drift apart). What it decides is when a request cannot be served at all (the whole matrix of
//! hostile input, with tests, is docs/HOSTILE.md):
//!
//! | situation                                                  | answer |
//! |------------------------------------------------------------|--------|
//! | `GET`/`HEAD /ready` before warm-up finished or while draining | 503 `{"ready":false}` |
//! | malformed request line, header or framing                  | 400 `{"error":"bad request: …"}`, then close |
//! | head over 16 KiB or over 100 header fields                 | 431 `{"error":"request head too large"}`, then close |
//! | body longer than `--max-body-bytes`                        | 413 `{"error":"body too large"}`, then close |
//! | head started but not complete within `--header-timeout-ms` | 408 `{"error":"request head not received in time"}`, then close |
//! | body not complete within `--body-timeout-ms` after its head | 408 `{"error":"body not received in time"}`, then close |
//! | idle keep-alive connection for `--header-timeout-ms`       | closed |
//! | answers not taken by the client within `--send-timeout-ms` | closed |
//! | `--max-connections` already open, none unproductive        | 503 `{"error":"too many connections"}`, then close |
//! | `--max-connections` open, one delivered nothing for 1 s    | that one gets the 503 (or is closed if idle); the new one is served |
//! | connections hold `--memory-budget-mb`                      | 503 `{"error":"server busy"}` for new ones and for the one that grows, then close |
//! | everything else                                            | whatever the handler says (200, 400, 404, 405, 415) |
//!
//! Every complete request before a refused one on the same connection gets its own answer
//! first, and a client that half-closes after its request still gets the answer.
//!
//! ## Shape (why one thread, why not hyper)
//! The contest gives each API 0.3 CPU (a CFS quota): a second thread would only add scheduling
//! and cross-thread wake-ups, and the search keeps its scratch in a `thread_local`. The loop is
//! mio (edge-triggered epoll) with httparse: per request one `epoll_wait`, one `read`, one
//! `write`, no allocation, no task or timer bookkeeping. Against hyper 1 on a current-thread
//! tokio runtime, side by side in full replica runs, it takes 24 % less of the API's CPU per
//! request (docs/results/2026-11-30-api-cpu-levers.md, which names the hyper server measured);
//! hyper also closes the connection without an answer on a malformed or oversized head, and
//! drops the answers of pipelined requests before one (docs/FUZZING.md, "What fuzzing found").
//!
//! Modules: [`config`] (listen address, limits), [`listener`] (sockets), [`http1`] (the protocol
//! for one connection, without I/O), [`answer`] (the app behind it and the readiness flag),
//! [`server`] (the event loop: connection cap, deadlines, drain), and `instance` (the process:
//! command line, index residency, warm-up; the only part that needs the embedded index).
//!
//! ## Lifecycle
//! 1. open the index (`--residency`), bind the socket (a stale Unix socket file is removed
//!    first; the new one is made world-writable so a balancer running as another user can
//!    connect);
//! 2. warm up: a helper thread reads every page of the index, then the loop thread runs a few
//!    hundred varied queries between events; until then `/ready` answers 503, so a balancer
//!    health check keeps the instance out of rotation (requests that still arrive are answered);
//! 3. serve; on SIGTERM or SIGINT stop accepting (the socket file is removed), `/ready` says
//!    503, idle connections close at once and busy ones after their current answer; exit 0 when
//!    none is left, or after `--drain-ms` anyway.
//!
//! ## Index residency (`--residency`, default `lazy`; the contest stack uses `hugepages`)
//! `lazy` reads the index in place (zero-copy); warm-up reads every page before `/ready` says
//! 200. `hugepages` instead copies it, before the bind, into anonymous memory backed by 2 MiB
//! transparent huge pages (the binary's file pages are released as the copy goes, so the
//! container is charged the artifact once, not twice). Between two requests of a served API the other
//! processes evict its caches and TLB, and with 4 KiB pages a search's page walks are a large
//! part of its cost (perf: its prefetch instructions stall on them). In full replica runs
//! alternated with `lazy`, the API's CPU per request was 84 and 83 us against 86 and 94 us
//! (docs/results/2026-11-30-api-cpu-levers.md), so docker-compose.yml asks for `hugepages`;
//! `lazy` stays the binary's default for the fastest start (Lambda's init, `verify`).
//! `docker/experiments/residency-lazy.yml` repeats the comparison.

pub mod answer;
pub mod config;
pub mod http1;
#[cfg(feature = "embedded-index")]
pub mod instance;
pub mod listener;
pub mod server;

pub use answer::{NoWork, ReadyFlag, Scoring};
pub use config::{Endpoint, Limits};
