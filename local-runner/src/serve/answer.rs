//! The per-request answer: which [`App`] a server runs, and the readiness it answers `/ready`
//! with. Every status and body comes from `function::handler`; this module only picks.

use super::http1::App;
use function::{Readiness, Request, Response, Scorer};
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

/// The scorer, answering `/ready` from a [`ReadyFlag`].
pub struct Scoring<'a> {
    pub scorer: Scorer<'a>,
    pub ready: ReadyFlag,
}

impl App for Scoring<'_> {
    fn answer(&mut self, req: &Request<'_>) -> Response {
        self.scorer.handle(req, self.ready.readiness())
    }
}

/// A backend that does no work: the same 200 to every request, from the same event loop and
/// HTTP layer as the scorer but without reading the body or searching. It measures what the
/// stack costs around the scorer (`serve --no-work`); never for the contest.
pub struct NoWork;

impl App for NoWork {
    fn answer(&mut self, _req: &Request<'_>) -> Response {
        Response::constant()
    }
}
