//! Warm-up before `/ready` says 200: a helper thread reads every page of the embedded index
//! (a no-op when `--residency prefault|hugepages` already did it before the bind), then the loop
//! thread runs a few hundred varied queries, a slice at a time between events, so the search's
//! scratch, the branch predictors and the caches of the thread that serves are warm. Requests
//! that arrive meanwhile are answered normally; only `/ready` waits.

use function::index::IndexError;
use function::{Readiness, Request, Scorer};
use http_server::{Background, ReadyFlag, Waker};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;
use tracing::{error, info};

/// Queries run per slice, between two polls of the event loop (a search takes microseconds,
/// docs/results/2026-12-01-search.md, so a slice keeps the loop responsive).
const SLICE: usize = 16;

pub struct Warmup<'a> {
    scorer: Scorer<'a>,
    ready: ReadyFlag,
    queries: usize,
    started: Instant,
    state: State,
}

enum State {
    /// The helper thread sends its result, then wakes the loop.
    Prefaulting(Receiver<Result<(), IndexError>>),
    Querying {
        done: usize,
        prefault_ms: u64,
    },
    Finished,
}

impl<'a> Warmup<'a> {
    /// Starts the page reads on a helper thread, which wakes the loop when it is done.
    pub fn start(scorer: Scorer<'a>, ready: ReadyFlag, queries: usize, waker: Arc<Waker>) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(function::index::prefault());
            let _ = waker.wake();
        });
        Warmup {
            scorer,
            ready,
            queries,
            started: Instant::now(),
            state: State::Prefaulting(rx),
        }
    }
}

impl Background for Warmup<'_> {
    fn wants_cpu(&self) -> bool {
        matches!(self.state, State::Querying { .. })
    }

    fn step(&mut self) {
        match &mut self.state {
            State::Prefaulting(rx) => match rx.try_recv() {
                Ok(Ok(())) => {
                    self.state = State::Querying {
                        done: 0,
                        prefault_ms: self.started.elapsed().as_millis() as u64,
                    }
                }
                Err(TryRecvError::Empty) => {}
                // The build script verified the same bytes: a damaged binary.
                Ok(Err(e)) => {
                    error!(error = %e, "embedded index failed its check; staying not ready");
                    self.state = State::Finished;
                }
                Err(TryRecvError::Disconnected) => {
                    error!("prefault thread ended without a result; staying not ready");
                    self.state = State::Finished;
                }
            },
            State::Querying { done, prefault_ms } => {
                let end = (*done + SLICE).min(self.queries);
                for i in *done..end {
                    let body = warmup_body(i);
                    let r = self.scorer.handle(
                        &Request::new("POST", "/fraud-score", body.as_bytes()),
                        Readiness::Ready,
                    );
                    if r.status != 200 {
                        error!(status = r.status, body = %r.body, "warm-up query failed; staying not ready");
                        self.state = State::Finished;
                        return;
                    }
                }
                *done = end;
                if end == self.queries {
                    info!(
                        prefault_ms = *prefault_ms,
                        total_ms = self.started.elapsed().as_millis() as u64,
                        queries = self.queries,
                        "warm-up done; ready"
                    );
                    self.ready.set(true);
                    self.state = State::Finished;
                }
            }
            State::Finished => {}
        }
    }
}

/// A deterministic spread of valid requests (amounts, hours, distances, with and without a last
/// transaction) so warm-up visits many lists of the index, not one.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_bodies_are_valid_requests() {
        for i in 0..200 {
            let body = warmup_body(i);
            function::payload::parse(body.as_bytes())
                .unwrap_or_else(|e| panic!("body {i}: {e}\n{body}"));
        }
    }
}
