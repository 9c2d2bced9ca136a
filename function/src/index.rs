//! The index the binaries carry: the artifact built by `build.rs` (through index-pack) from
//! `resources/references.json.gz`, embedded with 32-byte alignment and opened in place.
//!
//! Opening validates the footer, the rkyv archive and the table layout without reading the
//! rows, so a cold start maps pages lazily (a few ms). [`prefault`] reads every byte instead
//! (CRC32 check included), for servers that prefer to pay that at start rather than on the
//! first requests. The build script already verified the CRC before embedding.

use index_pack::format::{self, ArchivedIndex, FormatError};
use std::sync::OnceLock;

static ARTIFACT: &[u8] =
    include_bytes_aligned::include_bytes_aligned!(32, env!("FRAUD_INDEX_ARTIFACT"));

/// The embedded artifact bytes.
pub fn artifact() -> &'static [u8] {
    ARTIFACT
}

/// The embedded index, opened once.
pub fn open() -> Result<&'static ArchivedIndex, FormatError> {
    static INDEX: OnceLock<Result<&'static ArchivedIndex, FormatError>> = OnceLock::new();
    INDEX.get_or_init(|| format::open(ARTIFACT)).clone()
}

/// Reads every page of the embedded artifact and checks its CRC32 and row count.
pub fn prefault() -> Result<(), FormatError> {
    format::verify_deep(ARTIFACT)
}
