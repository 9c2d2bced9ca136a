//! Stage 1: the `POST /fraud-score` body as typed data.
//!
//! Strings borrow from the request body where JSON allows it (no escapes), so parsing a typical
//! body allocates only the `known_merchants` vector. Unknown fields are ignored; `id` is
//! optional because the decision does not use it; a missing `last_transaction` means the same as
//! `null`. Any other missing field, wrong type, or number JSON cannot hold (NaN, Infinity, 1e999)
//! is a [`PayloadError`] whose message names the field by its path.

use serde::Deserialize;
use std::borrow::Cow;

/// A fraud-score request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Payload<'a> {
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    pub transaction: Transaction<'a>,
    #[serde(borrow)]
    pub customer: Customer<'a>,
    #[serde(borrow)]
    pub merchant: Merchant<'a>,
    pub terminal: Terminal,
    #[serde(borrow, default)]
    pub last_transaction: Option<LastTransaction<'a>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Transaction<'a> {
    pub amount: f64,
    pub installments: f64,
    #[serde(borrow)]
    pub requested_at: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Customer<'a> {
    pub avg_amount: f64,
    pub tx_count_24h: f64,
    #[serde(borrow)]
    pub known_merchants: Vec<Cow<'a, str>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Merchant<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub mcc: Cow<'a, str>,
    pub avg_amount: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Terminal {
    pub is_online: bool,
    pub card_present: bool,
    pub km_from_home: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LastTransaction<'a> {
    #[serde(borrow)]
    pub timestamp: Cow<'a, str>,
    pub km_from_current: f64,
}

/// Why a body is not a valid request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON, or JSON of the wrong shape; `path` is where it went wrong (`.` for the root).
    #[error("{path}: {message}")]
    Json { path: String, message: String },
    /// Well-formed JSON with a value the scorer cannot use.
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl PayloadError {
    /// The field the error is about (`.` for the whole body).
    pub fn field(&self) -> &str {
        match self {
            PayloadError::Json { path, .. } => path,
            PayloadError::Invalid { field, .. } => field,
        }
    }
}

/// Parses a request body.
pub fn parse(body: &[u8]) -> Result<Payload<'_>, PayloadError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let payload: Payload = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json appends " at line L column C"; keep the position, it helps a client.
        PayloadError::Json {
            path,
            message: inner.to_string(),
        }
    })?;
    de.end().map_err(|e| PayloadError::Json {
        path: ".".into(),
        message: e.to_string(),
    })?;
    Ok(payload)
}
