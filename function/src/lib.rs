//! # function: the fraud-scoring request path
//!
//! One transaction in, one decision out, in five stages that each live in one module and only
//! hand data forward:
//!
//! ```text
//! body bytes --payload--> Payload --vector--> [i16; 14] --search--> 5 neighbours
//!            --decision--> one of 6 bodies --handler--> (status, content type, body)
//! ```
//!
//! - [`payload`]: serde parsing, borrowing strings; errors name the field.
//! - [`vector`]: the contest's 14 dimensions, computed exactly like its labeller.
//! - [`search`]: exact 5-NN over the IVF index from `index-pack` (SIMD kernels, scalar fallback).
//! - [`decision`]: the vote and the six precomputed response bodies.
//! - [`handler`]: routes a [`Request`] and builds every answer a transport can give; the Lambda binary (`bootstrap`) and the
//!   `local-runner` HTTP server are thin adapters around [`handler::Scorer::handle`].
//! - [`metrics`]: counts what the handler answered, published by the transports (Prometheus
//!   text, CloudWatch Embedded Metric Format).
//! - [`shard`]: the invocation a front sends a shard (a query vector) and its answer (the
//!   shard's 5 nearest references), and the exact merge of the shards' answers.
//!
//! With feature `embedded-index`, [`index`] carries the index built from the contest references
//! (and finds the deltas that extend it).

// Lane loops read several arrays in lockstep; indexing says that more plainly than zips.
#![allow(clippy::needless_range_loop)]

pub mod decision;
pub mod handler;
mod hint;
#[cfg(feature = "embedded-index")]
pub mod index;
#[cfg(feature = "lambda-runtime")]
pub mod lambda;
pub mod metrics;
pub mod payload;
pub mod search;
pub mod shard;
pub mod vector;

pub use decision::Decision;
pub use handler::{Outcome, Readiness, Reason, Request, Response, Scorer};
pub use search::{SearchParams, Searcher};

/// The scorer over the embedded index (opened on first use) and the deltas that extend it
/// ([`index::deltas`]), naming them in `/ready`: a whole set's index only (a shard's is
/// refused with a sentence, `format::check_composition`).
#[cfg(feature = "embedded-index")]
pub fn embedded_scorer() -> Result<Scorer<'static>, index::IndexError> {
    let deltas = index::deltas()?;
    let searcher = embedded_searcher()?.with_deltas(
        index::footer()?,
        deltas,
        index_pack::format::Serving::WholeSet,
    )?;
    let delta_ids: Vec<_> = deltas
        .iter()
        .map(index_pack::format::Identity::of)
        .collect();
    Ok(Scorer::new(searcher).with_identity(&index::identity()?, &delta_ids))
}

/// A searcher of the embedded index, with the plain kernels where its values were checked (by
/// the build, or in this process: [`index::built_verified`]), the clamped ones until then.
#[cfg(feature = "embedded-index")]
pub fn embedded_searcher() -> Result<Searcher<'static>, index::IndexError> {
    let s = Searcher::new(index::open()?, SearchParams::default());
    Ok(match index::built_verified()? {
        Some(v) => s.trusting(v),
        None => s.trusting_once(index::checked()),
    })
}

/// The searcher of a shard over the embedded index and its edit deltas ([`index::deltas`]): a
/// shard's index only (a whole set's is refused with a sentence, and so is a delta that adds
/// references to a shard: `format::check_composition`).
#[cfg(feature = "embedded-index")]
pub fn embedded_shard() -> Result<Searcher<'static>, index::IndexError> {
    Ok(
        Searcher::new(index::open()?, SearchParams::default()).with_deltas(
            index::footer()?,
            index::deltas()?,
            index_pack::format::Serving::Shard,
        )?,
    )
}
