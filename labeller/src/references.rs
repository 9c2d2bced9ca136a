//! The contest's `references.json(.gz)`, read the way the contest's labeller reads it: every
//! component is the IEEE double nearest to its decimal text (C `strtod`, Rust's `str::parse`,
//! both correctly rounded), kept in file order with its label.
//!
//! The file is one JSON array of `{"vector": [14 numbers], "label": "fraud" | "legit"}`. This
//! reader is a small hand-written scanner over the decompressed stream (no serde: serde_json's
//! default float parsing is not guaranteed to round correctly), strict about that shape, and it
//! hashes the decompressed bytes so the caller can require the contest's SHA-256.

use crate::DIMS;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// SHA-256 of the contest's decompressed `references.json` (SPEC.md).
pub const CONTEST_SHA256: &str = "24a1fd588e2598ab62de9ac7ac73408e571589e00da4243d7afc9d0f01878f77";

/// The references in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct References {
    /// Components as the labeller holds them (IEEE doubles parsed from the file's text).
    pub rows: Vec<[f64; DIMS]>,
    /// `label == "fraud"`, per row.
    pub fraud: Vec<bool>,
    /// SHA-256 (hex) of the JSON text that was read.
    pub sha256: String,
    /// The ids the file gave its references, as (row, id), rows ascending (none: no ids).
    pub ids: Vec<(u32, String)>,
}

impl References {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// References built in memory (tests): rows and labels as given, no digest.
    pub fn from_rows(rows: Vec<[f64; DIMS]>, fraud: Vec<bool>) -> References {
        assert_eq!(rows.len(), fraud.len(), "one label per row");
        References {
            rows,
            fraud,
            sha256: String::new(),
            ids: Vec::new(),
        }
    }

    /// `more` after these rows (the next file of a set), its ids with it; the first file's
    /// digest is kept (`more` is moved in whole after no rows: no copy of its rows).
    pub fn append(&mut self, more: References) {
        let offset = self.rows.len() as u32;
        if self.rows.is_empty() {
            *self = more;
            return;
        }
        self.rows.extend(more.rows);
        self.fraud.extend(more.fraud);
        self.ids
            .extend(more.ids.into_iter().map(|(i, id)| (i + offset, id)));
    }

    /// Each id's row; an id given to two rows is refused.
    pub fn rows_by_id(&self) -> anyhow::Result<std::collections::HashMap<&str, u32>> {
        let mut out = std::collections::HashMap::with_capacity(self.ids.len());
        for (i, id) in &self.ids {
            if let Some(first) = out.insert(id.as_str(), *i) {
                anyhow::bail!("id {id:?} is given to rows {first} and {i}");
            }
        }
        Ok(out)
    }
}

/// Why a references file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: byte {offset} of the JSON: {message}")]
    Syntax {
        path: String,
        offset: u64,
        message: String,
    },
    #[error("{path}: SHA-256 of the JSON is {found}, the contest's is {expected}")]
    Checksum {
        path: String,
        found: String,
        expected: String,
    },
}

/// Reads a references file (gzip when the name ends in `.gz`). With `require_contest`, the
/// SHA-256 of the JSON text must be the contest's.
pub fn read(path: &Path, require_contest: bool) -> Result<References, ReadError> {
    let name = path.display().to_string();
    let io = |source| ReadError::Io {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let source: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(
            file,
        )))
    } else {
        Box::new(file)
    };
    let refs = parse(source).map_err(|e| match e {
        ScanError::Io(source) => io(source),
        ScanError::Syntax { offset, message } => ReadError::Syntax {
            path: name.clone(),
            offset,
            message,
        },
    })?;
    if require_contest && refs.sha256 != CONTEST_SHA256 {
        return Err(ReadError::Checksum {
            path: name,
            found: refs.sha256,
            expected: CONTEST_SHA256.into(),
        });
    }
    Ok(refs)
}

/// A parse failure inside [`parse`].
#[derive(Debug)]
pub enum ScanError {
    Io(std::io::Error),
    Syntax { offset: u64, message: String },
}

/// Parses the JSON text of a references file from any reader.
pub fn parse(source: impl Read) -> Result<References, ScanError> {
    let mut s = Scanner::new(source);
    let mut refs = References::default();
    s.expect(b'[')?;
    if s.peek()? == Some(b']') {
        s.bump();
    } else {
        loop {
            let (row, fraud, id) = s.record()?;
            if let Some(id) = id {
                refs.ids.push((refs.rows.len() as u32, id));
            }
            refs.rows.push(row);
            refs.fraud.push(fraud);
            match s.next()? {
                Some(b',') => {}
                Some(b']') => break,
                _ => return Err(s.error("expected , or ] after a reference")),
            }
        }
    }
    if s.peek()?.is_some() {
        return Err(s.error("unexpected text after the array"));
    }
    // `peek` returned None: the last buffer was hashed by the refill that found the end.
    refs.sha256 = hex(&s.hasher.finalize());
    Ok(refs)
}

/// Lower-case hex of a digest.
fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A byte scanner over a reader that hashes every byte it reads.
struct Scanner<R> {
    source: R,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Offset of `buf[0]` in the stream.
    base: u64,
    hasher: Sha256,
}

impl<R: Read> Scanner<R> {
    fn new(source: R) -> Self {
        Scanner {
            source,
            buf: vec![0; 1 << 20],
            pos: 0,
            len: 0,
            base: 0,
            hasher: Sha256::new(),
        }
    }

    fn error(&self, message: &str) -> ScanError {
        ScanError::Syntax {
            offset: self.base + self.pos as u64,
            message: message.into(),
        }
    }

    /// Refills the buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, ScanError> {
        // Every byte is hashed exactly once, when its buffer is replaced.
        self.hasher.update(&self.buf[..self.len]);
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        loop {
            match self.source.read(&mut self.buf) {
                Ok(n) => {
                    self.len = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ScanError::Io(e)),
            }
        }
    }

    /// The next byte that is not JSON whitespace, without consuming it.
    #[inline]
    fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            while self.pos < self.len {
                match self.buf[self.pos] {
                    b' ' | b'\n' | b'\r' | b'\t' => self.pos += 1,
                    b => return Ok(Some(b)),
                }
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    #[inline]
    fn bump(&mut self) {
        self.pos += 1;
    }

    /// The next byte that is not whitespace, consumed.
    #[inline]
    fn next(&mut self) -> Result<Option<u8>, ScanError> {
        let b = self.peek()?;
        if b.is_some() {
            self.bump();
        }
        Ok(b)
    }

    fn expect(&mut self, want: u8) -> Result<(), ScanError> {
        match self.next()? {
            Some(b) if b == want => Ok(()),
            _ => Err(self.error(&format!("expected {:?}", want as char))),
        }
    }

    /// The raw bytes of a token made of bytes accepted by `part` (no whitespace skipping
    /// inside), appended to `out`.
    fn token(&mut self, out: &mut Vec<u8>, part: impl Fn(u8) -> bool) -> Result<(), ScanError> {
        loop {
            while self.pos < self.len {
                let b = self.buf[self.pos];
                if !part(b) {
                    return Ok(());
                }
                out.push(b);
                self.pos += 1;
            }
            if !self.fill()? {
                return Ok(());
            }
        }
    }

    /// A JSON string without escapes (the only kind the file has), as bytes.
    fn string(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        self.expect(b'"')?;
        out.clear();
        self.token(out, |b| b != b'"' && b != b'\\' && b >= 0x20)?;
        match self.next_raw()? {
            Some(b'"') => Ok(()),
            _ => Err(self.error("unsupported string (escape, control byte or end of file)")),
        }
    }

    fn next_raw(&mut self) -> Result<Option<u8>, ScanError> {
        if self.pos == self.len && !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    /// A JSON number, parsed to the nearest double.
    fn number(&mut self, scratch: &mut Vec<u8>) -> Result<f64, ScanError> {
        self.peek()?;
        scratch.clear();
        self.token(scratch, |b| {
            b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')
        })?;
        let text = std::str::from_utf8(scratch).expect("ASCII");
        if !crate::json_number(text) {
            return Err(self.error(&format!("{text:?} is not a JSON number")));
        }
        let v: f64 = text.parse().expect("a JSON number parses");
        if !v.is_finite() {
            return Err(self.error(&format!("{text} is out of the range of a double")));
        }
        Ok(v)
    }

    /// One `{"vector": [...], "label": "..."}` (keys in any order, both required), with an
    /// optional `"id"` (a string without escapes).
    fn record(&mut self) -> Result<([f64; DIMS], bool, Option<String>), ScanError> {
        let mut key = Vec::new();
        let mut scratch = Vec::new();
        let (mut row, mut fraud, mut id) = (None, None, None);
        self.expect(b'{')?;
        loop {
            self.string(&mut key)?;
            self.expect(b':')?;
            match key.as_slice() {
                b"vector" if row.is_none() => {
                    let mut v = [0.0; DIMS];
                    self.expect(b'[')?;
                    for (i, x) in v.iter_mut().enumerate() {
                        if i > 0 {
                            self.expect(b',')?;
                        }
                        *x = self.number(&mut scratch)?;
                    }
                    if self.next()? != Some(b']') {
                        return Err(self.error(&format!("a vector must have {DIMS} numbers")));
                    }
                    row = Some(v);
                }
                b"label" if fraud.is_none() => {
                    self.string(&mut scratch)?;
                    fraud = Some(match scratch.as_slice() {
                        b"fraud" => true,
                        b"legit" => false,
                        other => {
                            let other = String::from_utf8_lossy(other).into_owned();
                            return Err(self.error(&format!(
                                "label {other:?} is neither \"fraud\" nor \"legit\""
                            )));
                        }
                    });
                }
                b"id" if id.is_none() => {
                    self.string(&mut scratch)?;
                    let text = String::from_utf8(scratch.clone())
                        .map_err(|_| self.error("an id must be UTF-8"))?;
                    id = Some(text);
                }
                other => {
                    let other = String::from_utf8_lossy(other).into_owned();
                    return Err(self.error(&format!("unexpected or repeated key {other:?}")));
                }
            }
            match self.next()? {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return Err(self.error("expected , or } in a reference")),
            }
        }
        match (row, fraud) {
            (Some(r), Some(f)) => Ok((r, f, id)),
            _ => Err(self.error("a reference needs both \"vector\" and \"label\"")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<References, String> {
        parse(s.as_bytes()).map_err(|e| match e {
            ScanError::Io(e) => e.to_string(),
            ScanError::Syntax { offset, message } => format!("{offset}: {message}"),
        })
    }

    const TWO: &str = r#"[{"vector":[0.01,0.0833,0.05,0.8261,0.1667,-1,-1,0.0432,0.25,0,1,0,0.2,0.0416],"label":"legit"},
        { "label" : "fraud" , "vector" : [ 1, 1e0, 0.5E+0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0.85, 0.0032 ] } ]"#;

    #[test]
    fn reads_rows_labels_and_digest() {
        let r = parse_str(TWO).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.rows[0][1], 0.0833);
        assert_eq!(r.rows[0][5], -1.0);
        assert_eq!(r.rows[1][2], 0.5);
        assert_eq!(r.fraud, vec![false, true]);
        assert_eq!(r.sha256, hex(&Sha256::digest(TWO.as_bytes())));
    }

    #[test]
    fn reads_ids_where_the_file_gives_them() {
        let text = r#"[{"id":"tx-1","vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"legit"},
            {"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"legit"},
            {"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"fraud","id":"tx-3"}]"#;
        let mut r = parse_str(text).unwrap();
        assert_eq!(
            r.ids,
            vec![(0, "tx-1".to_string()), (2, "tx-3".to_string())]
        );
        r.append(parse_str(text).unwrap());
        let rows = r.rows_by_id().unwrap_err().to_string();
        assert!(rows.contains("\"tx-1\" is given to rows 0 and 3"), "{rows}");
    }

    #[test]
    fn digest_spans_buffer_refills() {
        // Many records: the 1 MiB buffer refills mid-token; the digest covers every byte once.
        let one = r#"{"vector":[0.1234,0.0833,0.05,0.8261,0.1667,-1,-1,0.0432,0.25,0,1,0,0.2,0.0416],"label":"fraud"}"#;
        let text = format!("[{}]", vec![one; 30_000].join(",\n"));
        let r = parse_str(&text).unwrap();
        assert_eq!(r.len(), 30_000);
        assert!(r.rows.iter().all(|v| v[0] == 0.1234 && v[13] == 0.0416));
        assert_eq!(r.sha256, hex(&Sha256::digest(text.as_bytes())));
    }

    #[test]
    fn refuses_other_shapes() {
        for (text, why) in [
            (r#"[{"vector":[1,2],"label":"fraud"}]"#, "expected ','"),
            (
                r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"fraud"}]"#,
                "14 numbers",
            ),
            (
                r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"maybe"}]"#,
                "neither",
            ),
            (r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]"#, "both"),
            (
                r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,.5],"label":"legit"}]"#,
                "not a JSON number",
            ),
            (
                r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1e999],"label":"legit"}]"#,
                "range",
            ),
            (
                r#"[{"vector":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"label":"legit","x":1}]"#,
                "unexpected",
            ),
            (r#"[] x"#, "after the array"),
            (r#"["#, "expected '{'"),
        ] {
            let e = parse_str(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert!(parse_str("[]").unwrap().is_empty());
    }
}
