//! The front as a server: [`FrontApp`] answers on the `http-server` event loop (the container
//! front, `front serve`), [`LambdaFront`] answers Lambda's events (the `front` function). Both
//! route with `function::handler::Router`, the handler's own routes and bodies, and search
//! through the [`Fanout`]; neither blocks while the shards answer.
//!
//! On the event loop a transaction's search is a task on a tokio runtime of its own thread
//! ([`FrontApp::answer`] returns `Answer::Later`); the task hands the answer back through the
//! server's `Completions`, which wakes the loop. So the loop answers `/ready`, the metrics and
//! new connections while shards answer, and as many requests are in flight as connections.
//!
//! `/ready` says 200 once the shards are proven to tile one set (`Fanout::prove`, tried at
//! start and again every [`PROVE_EVERY`] until it holds), naming them; until then 503, and every
//! transaction is answered 503 too.

use crate::Fanout;
use function::handler::{Routed, Router, Unavailable};
use function::{Readiness, Request, Response};
use http_server::{Answer, App, Completions, Ticket};
use index_pack::format::Identity;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often an unproven front tries the proof again.
pub const PROVE_EVERY: Duration = Duration::from_secs(1);

/// The front on the event loop.
pub struct FrontApp {
    fanout: Arc<Fanout>,
    runtime: tokio::runtime::Handle,
    completions: Completions,
    /// Routes before the proof (no identity in `/ready`), then with the shards named.
    router: Router,
    proven: bool,
    failures: Arc<FailureLog>,
}

impl FrontApp {
    /// The app over `fanout`, its tasks on `runtime`, answers back through `completions`; the
    /// proof is tried at once and until it holds, in the background.
    pub fn start(
        fanout: Arc<Fanout>,
        runtime: tokio::runtime::Handle,
        completions: Completions,
    ) -> FrontApp {
        let prover = fanout.clone();
        runtime.spawn(async move {
            loop {
                match prover.prove().await {
                    Ok(t) => {
                        let names: Vec<String> = t.shards.iter().map(|s| s.crc32.clone()).collect();
                        tracing::info!(shards = %names.join(","), "the shards tile one set: ready");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the shards are not proven to tile one set yet")
                    }
                }
                tokio::time::sleep(PROVE_EVERY).await;
            }
        });
        FrontApp {
            fanout,
            runtime,
            completions,
            router: Router::default(),
            proven: false,
            failures: Arc::new(FailureLog::default()),
        }
    }

    /// Names the shards in `/ready` once the proof holds.
    fn readiness(&mut self) -> Readiness {
        if !self.proven {
            if let Some(t) = self.fanout.tiling() {
                self.router = Router::default().with_identity(&t.shards, &[]);
                self.proven = true;
            }
        }
        if self.proven {
            Readiness::Ready
        } else {
            Readiness::WarmingUp
        }
    }
}

impl App for FrontApp {
    fn answer(&mut self, req: &Request<'_>, ticket: Ticket) -> Answer {
        let readiness = self.readiness();
        let q = match self.router.route(req, readiness) {
            Routed::Answer(r) => return Answer::Now(r),
            Routed::Search(q) => q,
        };
        if !self.proven {
            return Answer::Now(Response::shards_not_ready());
        }
        let (fanout, completions, failures) = (
            self.fanout.clone(),
            self.completions.clone(),
            self.failures.clone(),
        );
        self.runtime.spawn(async move {
            let frauds = fanout.frauds(&q).await;
            if let Err(u) = &frauds {
                failures.note(u);
            }
            completions.complete(ticket, Response::searched(frauds));
        });
        Answer::Later
    }

    fn index(&self) -> Cow<'_, [Identity]> {
        match self.fanout.tiling() {
            Some(t) => Cow::Owned(t.shards.clone()),
            None => Cow::Borrowed(&[]),
        }
    }
}

/// Failed fan-outs, logged at most once a second with the count of those left out: a shard
/// that is down must not flood the log at the request rate.
#[derive(Default)]
pub struct FailureLog {
    /// Seconds since the first note, at the last line written (+1; 0: none yet).
    logged_at: AtomicU64,
    unlogged: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl FailureLog {
    pub fn note(&self, u: &Unavailable) {
        let epoch = *self.epoch.get_or_init(Instant::now);
        let now = epoch.elapsed().as_secs() + 1;
        let left_out = self.unlogged.fetch_add(1, Ordering::Relaxed);
        let last = self.logged_at.load(Ordering::Relaxed);
        if last == now
            || self
                .logged_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.unlogged.fetch_sub(left_out + 1, Ordering::Relaxed);
        tracing::warn!(
            shard = %u.shard,
            what = %u.what,
            detail = %u.detail,
            timed_out = u.timed_out,
            left_out,
            "a shard failed: the request is answered 502 or 504"
        );
    }
}

/// The front as a Lambda function: each event routed, each transaction fanned out and awaited
/// (one invocation at a time per execution environment).
pub struct LambdaFront {
    pub fanout: Arc<Fanout>,
    /// Routes naming the shards, made once the proof holds.
    pub proven: std::sync::OnceLock<Router>,
    pub failures: FailureLog,
}

impl function::lambda::Handler for LambdaFront {
    fn handle<'a>(
        &'a self,
        req: Request<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send + 'a>> {
        Box::pin(async move {
            // An environment whose start could not prove the shards tries again per request.
            let router = match self.fanout.prove().await {
                Ok(t) => Some(
                    *self
                        .proven
                        .get_or_init(|| Router::default().with_identity(&t.shards, &[])),
                ),
                Err(_) => None,
            };
            let proven = router.is_some();
            let readiness = if proven {
                Readiness::Ready
            } else {
                Readiness::WarmingUp
            };
            let router = router.unwrap_or_default();
            match router.route(&req, readiness) {
                Routed::Answer(r) => r,
                Routed::Search(_) if !proven => Response::shards_not_ready(),
                Routed::Search(q) => {
                    let frauds = self.fanout.frauds(&q).await;
                    if let Err(u) = &frauds {
                        self.failures.note(u);
                    }
                    Response::searched(frauds)
                }
            }
        })
    }
}
