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
//!
//! With feature `embedded-index`, [`index`] carries the index built from the contest references.

// Lane loops read several arrays in lockstep; indexing says that more plainly than zips.
#![allow(clippy::needless_range_loop)]

pub mod decision;
pub mod handler;
mod hint;
#[cfg(feature = "embedded-index")]
pub mod index;
pub mod payload;
pub mod search;
pub mod vector;

pub use decision::Decision;
pub use handler::{Readiness, Request, Response, Scorer};
pub use search::{SearchParams, Searcher};

/// The scorer over the embedded index, opened on first use.
#[cfg(feature = "embedded-index")]
pub fn embedded_scorer() -> Result<Scorer<'static>, index::IndexError> {
    Ok(Scorer::new(Searcher::new(
        index::open()?,
        SearchParams::default(),
    )))
}
