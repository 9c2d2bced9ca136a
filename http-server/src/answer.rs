//! The apps behind the contest API's server: the scorer and the no-work backend, and the
//! readiness the scorer answers `/ready` with. Every status and body comes from
//! `function::handler`; this module only picks.

use super::http1::{Answer, App, Ticket};
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

/// The scorer, answering `/ready` from a [`ReadyFlag`]; `index` names what it serves in the
/// metrics (the base first, then the deltas).
pub struct Scoring<'a> {
    pub scorer: Scorer<'a>,
    pub ready: ReadyFlag,
    pub index: Vec<Identity>,
}

impl App for Scoring<'_> {
    fn answer(&mut self, req: &Request<'_>, _ticket: Ticket) -> Answer {
        Answer::Now(self.scorer.handle(req, self.ready.readiness()))
    }

    fn index(&self) -> Cow<'_, [Identity]> {
        Cow::Borrowed(&self.index)
    }
}

/// A backend that does no work: the same 200 to every request, from the same event loop and
/// HTTP layer as the scorer but without reading the body or searching. It measures what the
/// stack costs around the scorer (`serve --no-work`); never for the contest.
pub struct NoWork;

impl App for NoWork {
    fn answer(&mut self, _req: &Request<'_>, _ticket: Ticket) -> Answer {
        Answer::Now(Response::constant())
    }
}
