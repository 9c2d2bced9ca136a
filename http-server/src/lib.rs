//! # http-server: HTTP/1.1 for the scorer and the front, one event loop per process
//!
//! The contest API (`local-runner serve`, over the embedded index) and the front over shards
//! (`fan-out`'s `front serve`) are served by this crate: HTTP/1.1 (keep-alive, pipelining) on
//! a Unix socket or a TCP address, one single-threaded event loop per process. It only moves
//! bytes between sockets and an [`App`]; every status and body it sends is built by
//! `function::handler` (so the Lambda and the containers cannot drift apart). What it decides
//! is when a request cannot be served at all (the whole matrix of hostile input, with tests,
//! is docs/HOSTILE.md):
//!
//! | situation                                                  | answer |
//! |------------------------------------------------------------|--------|
//! | `GET`/`HEAD /ready` before warm-up finished or while draining | 503 `{"ready":false}` |
//! | `GET /metrics`                                             | 404 here: served on the metrics listener only ([`Server::serve_metrics`]) |
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
//! **Answers now or later.** An [`App`] answers a request at once ([`Answer::Now`]: the
//! scorer, whose search takes microseconds) or promises an answer ([`Answer::Later`]: the front,
//! whose shards answer over the network). A promised answer comes back through
//! [`Completions`] from any thread, which wakes the loop; meanwhile the loop serves every other
//! connection, `/ready` and new connections. The connection's later pipelined requests wait
//! for it (answers go out in order), and none of the client's deadlines runs while it waits.
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
//! for one connection, without I/O), [`answer`] (the apps: the scorer, the no-work backend, the
//! readiness flag), [`server`] (the event loop: connection cap, deadlines, drain, promised
//! answers, the metrics listener) and [`latency`] (the request-duration histogram the metrics
//! listener publishes beside the decisions).

pub mod answer;
pub mod config;
pub mod http1;
pub mod latency;
pub mod listener;
pub mod server;

pub use answer::{NoWork, ReadyFlag, Scoring};
pub use config::{Endpoint, Limits};
pub use http1::{Answer, App, Ticket};
pub use mio::Waker;
pub use server::{Background, Completions, Server};
