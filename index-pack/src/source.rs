//! Reading the contest's `references.json(.gz)`: streamed, hashed, validated record by record.
//!
//! The file is one JSON array of `{"vector": [14 numbers], "label": "fraud" | "legit"}`. It is
//! parsed element by element (never held whole in memory) while a SHA-256 runs over the
//! decompressed bytes, so the digest can be compared with the contest's published value.

use crate::format::{hex, DIMS};
use crate::layout::{to_fixed, References};
use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// SHA-256 of the contest's decompressed `references.json`.
pub const CONTEST_REFERENCES_SHA256: &str =
    "24a1fd588e2598ab62de9ac7ac73408e571589e00da4243d7afc9d0f01878f77";

/// What to require of the source digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The contest's references (the default).
    Contest,
    /// A given hex digest.
    Sha256(String),
    /// Any data (the digest is still recorded in the index).
    Any,
}

/// Reading failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: SHA-256 of the decompressed JSON is {found}, expected {expected}; pass --accept-any-references (or the right --references-sha256) to index other data")]
    Checksum {
        path: String,
        found: String,
        expected: String,
    },
    #[error("{path}: the file holds no references")]
    Empty { path: String },
}

/// Reads and validates a references file (gzip-compressed when it ends in `.gz`).
/// `progress` is called with the number of compressed bytes consumed so far.
pub fn read_references(
    path: &Path,
    expect: &Expect,
    progress: &dyn Fn(u64),
) -> Result<References, SourceError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| SourceError::Io {
        path: name.clone(),
        source,
    })?;
    let counted = Counting {
        inner: file,
        read: 0,
        progress,
    };
    let raw: Box<dyn Read + '_> = if name.ends_with(".gz") {
        Box::new(flate2::read::GzDecoder::new(BufReader::with_capacity(
            1 << 20,
            counted,
        )))
    } else {
        Box::new(counted)
    };
    let mut hashed = Hashing {
        inner: raw,
        hasher: Sha256::new(),
    };
    let mut refs = References::default();
    {
        let mut de =
            serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, &mut hashed));
        de.deserialize_seq_into(&mut refs)
            .map_err(|e| SourceError::Parse {
                path: name.clone(),
                message: e.to_string(),
            })?;
        de.end().map_err(|e| SourceError::Parse {
            path: name.clone(),
            message: e.to_string(),
        })?;
    }
    // Hash whatever follows the array (trailing whitespace) too: the digest covers the file.
    std::io::copy(&mut hashed, &mut std::io::sink()).map_err(|source| SourceError::Io {
        path: name.clone(),
        source,
    })?;
    refs.source_sha256 = hashed.hasher.finalize().into();
    if refs.vectors.is_empty() {
        return Err(SourceError::Empty { path: name });
    }
    let found = hex(&refs.source_sha256);
    let expected = match expect {
        Expect::Contest => Some(CONTEST_REFERENCES_SHA256.to_string()),
        Expect::Sha256(s) => Some(s.to_ascii_lowercase()),
        Expect::Any => None,
    };
    if let Some(expected) = expected {
        if found != expected {
            return Err(SourceError::Checksum {
                path: name,
                found,
                expected,
            });
        }
    }
    Ok(refs)
}

trait SeqInto {
    fn deserialize_seq_into(&mut self, refs: &mut References) -> serde_json::Result<()>;
}

impl<'de, R: serde_json::de::Read<'de>> SeqInto for serde_json::Deserializer<R> {
    fn deserialize_seq_into(&mut self, refs: &mut References) -> serde_json::Result<()> {
        serde::Deserializer::deserialize_seq(self, RefsVisitor(refs))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    vector: [f64; DIMS],
    label: Label,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Label {
    Fraud,
    Legit,
}

struct RefsVisitor<'a>(&'a mut References);

impl<'de> Visitor<'de> for RefsVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of {\"vector\": [14 numbers], \"label\": \"fraud\"|\"legit\"}")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let refs = self.0;
        loop {
            let n = refs.vectors.len();
            let record = match seq.next_element_seed(RecordSeed) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => return Err(A::Error::custom(format!("record {n}: {e}"))),
            };
            let fixed = to_fixed(&record.vector)
                .map_err(|e| A::Error::custom(format!("record {n}: {e}")))?;
            refs.vectors.push(fixed);
            refs.fraud.push(matches!(record.label, Label::Fraud));
        }
    }
}

struct RecordSeed;

impl<'de> DeserializeSeed<'de> for RecordSeed {
    type Value = Record;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Record, D::Error> {
        Record::deserialize(d)
    }
}

struct Counting<'a, R> {
    inner: R,
    read: u64,
    progress: &'a dyn Fn(u64),
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        (self.progress)(self.read);
        Ok(n)
    }
}

struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
