//! Reading the contest's `references.json(.gz)`: streamed, hashed, validated record by record.
//!
//! The file is one JSON array of `{"vector": [14 numbers], "label": "fraud" | "legit"}`, each
//! record optionally with an `"id"` (a string) that edits can name it by ([`crate::names`]). It is
//! never held whole in memory: one thread reads, decompresses and hashes it (the SHA-256 of the
//! decompressed bytes, to compare with the contest's published value) and cuts it into chunks
//! of whole records (checking the array's own shape as it goes), while the caller's thread
//! parses the records of each chunk with serde and converts them to fixed point. On two cores
//! the two halves run side by side: at 100M references (15 GB of JSON) about half the time of
//! doing both in turn (docs/SCALING.md, "Packing").

use crate::format::{hex, DIMS};
use crate::layout::{to_fixed, Partitioned, References};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::mpsc;

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

/// Reads and validates a references file (gzip-compressed when it ends in `.gz`), in file
/// order. `progress` is called with the number of compressed bytes consumed so far.
pub fn read_references(
    path: &Path,
    expect: &Expect,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<References, SourceError> {
    let mut refs = References::default();
    refs.source_sha256 = read_each(path, expect, progress, |v, fraud, _| {
        refs.vectors.push(v);
        refs.fraud.push(fraud);
    })?;
    Ok(refs)
}

/// [`read_references`] into the layout's partitions (what the packer lays out).
pub fn read_partitioned(
    path: &Path,
    expect: &Expect,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Partitioned, SourceError> {
    let mut parts = Partitioned::default();
    parts.source_sha256 = read_each(path, expect, progress, |v, fraud, id| {
        if let Some(id) = id {
            parts.ids.push((parts.len, id));
        }
        parts.push(&v, fraud)
    })?;
    Ok(parts)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    vector: [f64; DIMS],
    label: Label,
    /// What the team calls the reference (a transaction's id), for edits to name it by.
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Label {
    Fraud,
    Legit,
}

/// What the reading thread hands the parsing one.
enum Piece {
    /// Whole records separated by white space.
    Chunk(Vec<u8>),
    /// The end of the array, and the digest of everything read.
    Done([u8; 32]),
    Failed(SourceError),
}

/// Bytes of records per chunk.
const CHUNK: usize = 4 << 20;

/// Calls `each` with every record of the file, in order, and returns the file's digest (checked
/// against `expect`).
fn read_each(
    path: &Path,
    expect: &Expect,
    progress: &(dyn Fn(u64) + Sync),
    mut each: impl FnMut([i16; DIMS], bool, Option<String>),
) -> Result<[u8; 32], SourceError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| SourceError::Io {
        path: name.clone(),
        source,
    })?;
    let parse_error = |message: String| SourceError::Parse {
        path: name.clone(),
        message,
    };
    let (pieces, chunks) = mpsc::sync_channel::<Piece>(2);
    let mut n = 0usize;
    let digest = std::thread::scope(|scope| {
        scope.spawn(|| cut(file, &name, progress, pieces));
        for piece in chunks {
            match piece {
                Piece::Chunk(bytes) => {
                    let records = serde_json::Deserializer::from_slice(&bytes).into_iter();
                    for record in records {
                        crate::format::check_positions(0, n as u64 + 1)
                            .map_err(|e| parse_error(e.to_string()))?;
                        let r: Record =
                            record.map_err(|e| parse_error(format!("record {n}: {e}")))?;
                        let v = to_fixed(&r.vector)
                            .map_err(|e| parse_error(format!("record {n}: {e}")))?;
                        each(v, matches!(r.label, Label::Fraud), r.id);
                        n += 1;
                    }
                }
                Piece::Done(digest) => return Ok(digest),
                Piece::Failed(e) => return Err(e),
            }
        }
        Err(parse_error("the reading thread stopped".into()))
    })?;
    if n == 0 {
        return Err(SourceError::Empty { path: name });
    }
    let found = hex(&digest);
    let expected = match expect {
        Expect::Contest => Some(CONTEST_REFERENCES_SHA256.to_string()),
        Expect::Sha256(s) => Some(s.to_ascii_lowercase()),
        Expect::Any => None,
    };
    match expected {
        Some(expected) if found != expected => Err(SourceError::Checksum {
            path: name,
            found,
            expected,
        }),
        _ => Ok(digest),
    }
}

/// Where the top-level array stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Before its `[`.
    Start,
    /// After `[` or a `,`: a record (an object) comes, or (first only) the `]`.
    Record { first: bool },
    /// Inside a record: its nesting depth, and whether in a string (and after a backslash).
    InRecord {
        depth: u32,
        string: bool,
        escape: bool,
    },
    /// After a record: `,` or `]`.
    AfterRecord,
    /// After the `]`: white space only.
    End,
}

/// The reading thread: reads, decompresses and hashes the file, checks the array's shape, and
/// sends its records in chunks with the array's brackets and commas turned into spaces.
fn cut(file: File, name: &str, progress: &(dyn Fn(u64) + Sync), out: mpsc::SyncSender<Piece>) {
    let fail = |message: String| {
        Piece::Failed(SourceError::Parse {
            path: name.to_string(),
            message,
        })
    };
    let counted = Counting {
        inner: file,
        read: 0,
        progress,
    };
    let mut raw: Box<dyn Read + '_> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(
            1 << 20,
            counted,
        )))
    } else {
        Box::new(counted)
    };
    let mut hasher = Sha256::new();
    let (mut shape, mut records) = (Shape::Start, 0usize);
    let mut input = vec![0u8; 1 << 20];
    let mut chunk = Vec::with_capacity(CHUNK + (1 << 20));
    loop {
        let n = match raw.read(&mut input) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                let _ = out.send(Piece::Failed(SourceError::Io {
                    path: name.to_string(),
                    source,
                }));
                return;
            }
        };
        hasher.update(&input[..n]);
        for &b in &input[..n] {
            let (next, keep) = match (shape, b) {
                (
                    Shape::InRecord {
                        depth,
                        string: true,
                        escape: true,
                    },
                    _,
                ) => (
                    Shape::InRecord {
                        depth,
                        string: true,
                        escape: false,
                    },
                    b,
                ),
                (
                    Shape::InRecord {
                        depth,
                        string: true,
                        ..
                    },
                    b'\\',
                ) => (
                    Shape::InRecord {
                        depth,
                        string: true,
                        escape: true,
                    },
                    b,
                ),
                (
                    Shape::InRecord {
                        depth,
                        string: true,
                        ..
                    },
                    b'"',
                ) => (
                    Shape::InRecord {
                        depth,
                        string: false,
                        escape: false,
                    },
                    b,
                ),
                (Shape::InRecord { string: true, .. }, _) => (shape, b),
                (Shape::InRecord { depth, .. }, b'"') => (
                    Shape::InRecord {
                        depth,
                        string: true,
                        escape: false,
                    },
                    b,
                ),
                (Shape::InRecord { depth, .. }, b'{' | b'[') => (
                    Shape::InRecord {
                        depth: depth + 1,
                        string: false,
                        escape: false,
                    },
                    b,
                ),
                (Shape::InRecord { depth: 1, .. }, b'}' | b']') => {
                    records += 1;
                    (Shape::AfterRecord, b)
                }
                (Shape::InRecord { depth, .. }, b'}' | b']') => (
                    Shape::InRecord {
                        depth: depth - 1,
                        string: false,
                        escape: false,
                    },
                    b,
                ),
                (Shape::InRecord { .. }, _) => (shape, b),
                (_, b' ' | b'\t' | b'\r' | b'\n') => (shape, b),
                (Shape::Start, b'[') => (Shape::Record { first: true }, b' '),
                (Shape::Record { .. }, b'{') => (
                    Shape::InRecord {
                        depth: 1,
                        string: false,
                        escape: false,
                    },
                    b,
                ),
                (Shape::Record { first: true }, b']') => (Shape::End, b' '),
                (Shape::AfterRecord, b',') => (Shape::Record { first: false }, b' '),
                (Shape::AfterRecord, b']') => (Shape::End, b' '),
                (Shape::Start, _) => {
                    let _ = out.send(fail("not a JSON array of references".into()));
                    return;
                }
                (Shape::Record { .. }, _) => {
                    let _ = out.send(fail(format!("record {records}: not an object")));
                    return;
                }
                (Shape::AfterRecord | Shape::End, _) => {
                    let _ = out.send(fail(format!("after record {records}: trailing characters")));
                    return;
                }
            };
            shape = next;
            chunk.push(keep);
            if shape == (Shape::Record { first: false }) && chunk.len() >= CHUNK {
                let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK + (1 << 20)));
                if out.send(Piece::Chunk(full)).is_err() {
                    return;
                }
            }
        }
    }
    if shape != Shape::End {
        let _ = out.send(fail(format!(
            "EOF while parsing a list, after record {records}"
        )));
        return;
    }
    if out.send(Piece::Chunk(chunk)).is_ok() {
        let _ = out.send(Piece::Done(hasher.finalize().into()));
    }
}

struct Counting<'a, R> {
    inner: R,
    read: u64,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        (self.progress)(self.read);
        Ok(n)
    }
}
