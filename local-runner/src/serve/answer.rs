//! The per-request answer: which [`App`] a server runs, and the readiness it answers `/ready`
//! with. Every status and body comes from `function::handler`; this module only picks.

use super::http1::App;
use function::metrics::Counters;
use function::{Readiness, Request, Response, Scorer};
use index_pack::format::Identity;
use std::borrow::Cow;
use std::cell::Cell;
use std::rc::Rc;

/// Whether the instance is warm, shared between the warm-up and the answers (one thread).
#[derive(Clone, Debug, Default)]
pub struct ReadyFlag(Rc<Cell<bool>>);

impl ReadyFlag {
    pub fn set(&self, ready: bool) {
        self.0.set(ready);
    }

    pub fn readiness(&self) -> Readiness {
        if self.0.get() {
            Readiness::Ready
        } else {
            Readiness::WarmingUp
        }
    }
}

/// The scorer, answering `/ready` from a [`ReadyFlag`], and `GET /metrics` with what the server
/// counted, in Prometheus's text format (when `metrics` names the index served; `None`: no
/// metrics route, the handler's 404).
pub struct Scoring<'a> {
    pub scorer: Scorer<'a>,
    pub ready: ReadyFlag,
    pub metrics: Option<Vec<Identity>>,
}

/// The metrics route (`local-runner serve` only; the Lambda publishes EMF lines instead).
pub const METRICS_PATH: &str = "/metrics";

/// Prometheus's text format, version 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

impl App for Scoring<'_> {
    fn answer(&mut self, req: &Request<'_>, counted: &Counters) -> Response {
        let path = req.target.split_once('?').map_or(req.target, |(p, _)| p);
        if let (Some(index), "GET" | "HEAD", METRICS_PATH) = (&self.metrics, req.method, path) {
            return Response {
                content_type: PROMETHEUS_TEXT,
                body: Cow::Owned(counted.prometheus(index)),
                ..Response::metrics()
            };
        }
        self.scorer.handle(req, self.ready.readiness())
    }
}

/// A backend that does no work: the same 200 to every request, from the same event loop and
/// HTTP layer as the scorer but without reading the body or searching. It measures what the
/// stack costs around the scorer (`serve --no-work`); never for the contest.
pub struct NoWork;

impl App for NoWork {
    fn answer(&mut self, _req: &Request<'_>, _counted: &Counters) -> Response {
        Response::constant()
    }
}
