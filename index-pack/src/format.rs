//! The index artifact: what it holds, how it is laid out, and how it is opened.
//!
//! An artifact is one `rkyv` archive of [`Index`] followed by a fixed 32-byte [`Footer`]:
//!
//! ```text
//! [ rkyv archive of Index (archive_len bytes) ][ footer: magic, format version, archive_len, crc32 ]
//! ```
//!
//! The footer is read first (like tantivy's), so a truncated file, a file of another kind or of
//! another format version is rejected with a sentence before any archive byte is interpreted.
//! [`open`] then validates the archive with `rkyv::access` (bounds and alignment of every
//! vector; cheap, it does not read the payload) and checks the header against the layout. The
//! CRC32 of the archive is verified by [`verify_checksum`], which reads every byte; callers run it
//! once where reading 90 MB is acceptable (the build script, `index-pack inspect`, a server's
//! `--prefault` start) rather than on every cold start.
//!
//! # Layout (an IVF index, split the FAISS way)
//! - **Coarse quantizer**: `centroids`, the k-means cells the packer trained.
//! - **Inverted lists**: one list per (cell, key) pair, where the *key* packs the three binary
//!   dimensions (is_online, card_present, unknown_merchant). Every vector of a list shares the key,
//!   so those dimensions are not stored per row: their contribution to a distance is one constant
//!   per list. Lists hold *blocks* of at most `block_rows` rows cut by k-d splits, each with an
//!   exact bounding box; lists also carry a bounding box. The boxes give exact lower bounds on the
//!   distance of every vector inside, which is what makes the search exact.
//! - **Scalar codec**: `codes`, the remaining [`ROW_DIMS`] of each row in [`GROUP_ROWS`]-row
//!   groups, either exact i16 (value x 10000) or IEEE half floats.
//!
//! Rows live in *slots*. Each list starts on a group boundary; every block but the last of a list
//! holds a multiple of [`GROUP_ROWS`] rows, so padding slots occur only at the end of a list and
//! carry the id [`PAD_ID`]. A block's `n_slots` counts its real rows only, so a reader can tell
//! padding from its slot number without loading the id.
//!
//! Lists are ordered by key (then cell): `key_lists` gives each key's range, so the search can
//! process the query's own key first and skip key groups whose key distance alone is too far.
//!
//! # Invariants a reader may rely on (checked by [`open`] or guaranteed by the packer)
//! - Every stored value v satisfies -10000 <= v <= 10000; dimensions other than 5 and 6 are >= 0.
//!   With queries in the same domain, every squared distance in fixed point is <= 2.0e9, so it
//!   fits an `i32` (see `MAX_DISTANCE`).
//! - `ids[slot] = original_index << 1 | is_fraud` for a real row, [`PAD_ID`] for padding.
//! - Version 2 (this one) ordered lists by key, made `n_slots` exclude padding and stored block
//!   boxes 8 to a group; version 1 ordered lists by cell and stored one box per block.
//! - The per-8 list tables (`list_centroids`, `list_bounds`, `list_keys`) are padded to a
//!   multiple of 8 lists; lanes past `lists.len()` are meaningless.

use rkyv::{Archive, Deserialize, Serialize};

/// Magic bytes at the start of the footer.
pub const MAGIC: [u8; 8] = *b"FRDIDX\r\n";
/// Version of the layout below. Bump it on any change to the archived types.
pub const FORMAT_VERSION: u32 = 2;
/// Size of the footer that ends every artifact.
pub const FOOTER_LEN: usize = 32;
/// Alignment the archive needs in memory (the SIMD groups are 32-byte aligned).
pub const ARCHIVE_ALIGN: usize = 32;

/// Dimensions of a transaction vector.
pub const DIMS: usize = 14;
/// Fixed-point scale: a component v is stored as round(v * SCALE).
pub const SCALE: f64 = 10_000.0;
/// The binary dimensions folded into a list's key (bit i of the key = dimension KEY_DIMS[i]).
pub const KEY_DIMS: [usize; 3] = [9, 10, 11];
/// The dimensions stored per row, in lane order.
pub const ROW_DIMS: [usize; 11] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13];
/// Row dimensions padded to whole pairs: lane 11 is always 0.
pub const LANES: usize = 12;
/// Lane pairs per row (the i16 kernel multiplies and adds one pair at a time).
pub const PAIRS: usize = LANES / 2;
/// Rows per SIMD group.
pub const GROUP_ROWS: usize = 8;
/// Id of a padding slot.
pub const PAD_ID: u32 = u32::MAX;
/// Largest fixed-point squared distance between two vectors of the valid domain.
pub const MAX_DISTANCE: i64 = 12 * 10_000 * 10_000 + 2 * 20_000 * 20_000;
/// Consecutive blocks of a list covered by one super-block box.
pub const SUPER_BLOCKS: usize = 8;
/// Number of possible list keys.
pub const KEYS: usize = 1 << KEY_DIMS.len();

/// Which scalar codec stores the row values.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug, PartialEq, Eq, Clone, Copy))]
pub enum CodecKind {
    /// value x 10000 as i16: exact for data with at most 4 decimals.
    I16,
    /// IEEE 754 half precision (the original design's IVF-SQfp16), lossy.
    F16,
}

impl CodecKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CodecKind::I16 => "i16",
            CodecKind::F16 => "fp16",
        }
    }
}

impl ArchivedCodecKind {
    /// The codec as a native value.
    pub fn native(&self) -> CodecKind {
        match self {
            ArchivedCodecKind::I16 => CodecKind::I16,
            ArchivedCodecKind::F16 => CodecKind::F16,
        }
    }
}

/// What the artifact is and where it came from.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Header {
    /// Repeats the footer's version inside the checked archive.
    pub format_version: u32,
    pub codec: CodecKind,
    /// Number of reference vectors (real rows).
    pub n_refs: u32,
    /// How many of them are labelled fraud.
    pub n_fraud: u32,
    /// SHA-256 of the decompressed references JSON the index was built from.
    pub source_sha256: [u8; 32],
    /// k-means cells requested.
    pub cells: u32,
    pub kmeans_iters: u32,
    pub kmeans_seed: u32,
    /// Maximum rows per block.
    pub block_rows: u32,
    /// Name and version of the packer, for humans.
    pub packer: String,
}

/// An axis-aligned box over the row lanes (lanes past the row dims are 0 in both bounds).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(attr(repr(C, align(32))))]
#[repr(C, align(32))]
pub struct Bounds {
    pub lo: [i16; 16],
    pub hi: [i16; 16],
}

/// Bounds of 8 lists, pair-interleaved like [`I16Group`] so 8 lower bounds come from one pass.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(attr(repr(C, align(32))))]
#[repr(C, align(32))]
pub struct BoundsGroup {
    pub lo: [[i16; 16]; PAIRS],
    pub hi: [[i16; 16]; PAIRS],
}

/// 8 rows of i16 values: `pairs[p][2 * r + j]` is lane `2 * p + j` of row `r`.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(attr(repr(C, align(32))))]
#[repr(C, align(32))]
pub struct I16Group {
    pub pairs: [[i16; 16]; PAIRS],
}

/// 8 rows of half floats (raw bits): `lanes[l][r]` is lane `l` of row `r`.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(attr(repr(C, align(32))))]
#[repr(C, align(32))]
pub struct F16Group {
    pub lanes: [[u16; GROUP_ROWS]; LANES],
}

/// Row values under one of the codecs.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Codes {
    I16(Vec<I16Group>),
    F16(Vec<F16Group>),
}

/// One inverted list.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct List {
    /// k-means cell the list belongs to.
    pub cell: u32,
    /// First block (index into `blocks`) and number of blocks.
    pub first_block: u32,
    pub n_blocks: u32,
    /// First super-block box (index into `super_bounds`); the list has
    /// `n_blocks.div_ceil(SUPER_BLOCKS)` of them.
    pub first_super: u32,
}

/// A run of rows inside a list.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// First slot; a multiple of [`GROUP_ROWS`].
    pub first_slot: u32,
    /// Real rows (the last block of a list may be followed by padding up to a whole group).
    pub n_slots: u32,
}

/// The whole index.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Index {
    pub header: Header,
    /// Coarse quantizer: `cells` k-means centroids, unscaled.
    pub centroids: Vec<[f32; DIMS]>,
    pub lists: Vec<List>,
    /// Key of each list (u32 so the search can permute a per-key table with one instruction).
    pub list_keys: Vec<u32>,
    /// Lists are ordered by key: `key_lists[k]..key_lists[k + 1]` are the lists of key `k`
    /// ([`KEYS`] + 1 entries).
    pub key_lists: Vec<u32>,
    /// Each list's centroid rounded to the fixed-point grid, row lanes only, 8 lists per group.
    pub list_centroids: Vec<I16Group>,
    /// Each list's bounding box, 8 lists per group.
    pub list_bounds: Vec<BoundsGroup>,
    pub blocks: Vec<Block>,
    /// The bounding boxes of the blocks of each super-block, transposed 8 to a group so that
    /// one kernel call bounds all of them (same index as `super_bounds`; lanes past the
    /// super-block's blocks are zero and meaningless).
    pub block_bounds: Vec<BoundsGroup>,
    /// Bounding box of each run of [`SUPER_BLOCKS`] consecutive blocks of a list (the last run
    /// of a list may be shorter). Blocks follow k-d order, so a run is a compact region and its
    /// box lets the search skip 8 block boxes with one test.
    pub super_bounds: Vec<Bounds>,
    /// Per slot: original_index << 1 | is_fraud, or [`PAD_ID`].
    pub ids: Vec<u32>,
    pub codes: Codes,
}

/// Why an artifact could not be opened. Each message says what is wrong and what to do.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("index artifact is {0} bytes, too short to hold a footer: the file is truncated or not an index; rebuild it with index-pack")]
    TooShort(usize),
    #[error("index artifact has no footer magic: it is not a fraud index or it was truncated; rebuild it with index-pack")]
    BadMagic,
    #[error("index artifact has format version {found}, this program reads version {expected}: rebuild the index with this version of index-pack")]
    Version { found: u32, expected: u32 },
    #[error("index artifact footer says the archive is {declared} bytes but {actual} precede the footer: the file is truncated or corrupted; rebuild it")]
    Length { declared: u64, actual: usize },
    #[error("index archive is not {ARCHIVE_ALIGN}-byte aligned in memory (address % {ARCHIVE_ALIGN} = {0}): embed or load it with 32-byte alignment")]
    Misaligned(usize),
    #[error("index archive failed validation ({0}): the file is corrupted; rebuild it")]
    Invalid(String),
    #[error("index archive checksum mismatch (stored {stored:08x}, computed {computed:08x}): the file is corrupted; rebuild it")]
    Checksum { stored: u32, computed: u32 },
    #[error("index is inconsistent: {0}; rebuild it with index-pack")]
    Inconsistent(String),
}

/// The fixed-size trailer of an artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    pub format_version: u32,
    pub archive_len: u64,
    pub crc32: u32,
}

impl Footer {
    /// Encodes the footer (little endian).
    pub fn to_bytes(self) -> [u8; FOOTER_LEN] {
        let mut out = [0u8; FOOTER_LEN];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc32.to_le_bytes());
        out[16..24].copy_from_slice(&self.archive_len.to_le_bytes());
        out
    }

    /// Reads the footer at the end of `artifact` and checks magic, version and length.
    pub fn read(artifact: &[u8]) -> Result<Footer, FormatError> {
        if artifact.len() < FOOTER_LEN {
            return Err(FormatError::TooShort(artifact.len()));
        }
        let f = &artifact[artifact.len() - FOOTER_LEN..];
        if f[0..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let word =
            |r: std::ops::Range<usize>| -> u32 { u32::from_le_bytes(f[r].try_into().unwrap()) };
        let format_version = word(8..12);
        if format_version != FORMAT_VERSION {
            return Err(FormatError::Version {
                found: format_version,
                expected: FORMAT_VERSION,
            });
        }
        let crc32 = word(12..16);
        let archive_len = u64::from_le_bytes(f[16..24].try_into().unwrap());
        let actual = artifact.len() - FOOTER_LEN;
        if archive_len != actual as u64 {
            return Err(FormatError::Length {
                declared: archive_len,
                actual,
            });
        }
        Ok(Footer {
            format_version,
            archive_len,
            crc32,
        })
    }
}

/// Serializes an index into artifact bytes (archive + footer). Deterministic: the same index
/// gives the same bytes.
pub fn to_artifact(index: &Index) -> Vec<u8> {
    let archive =
        rkyv::to_bytes::<rkyv::rancor::Error>(index).expect("serializing an index cannot fail");
    let footer = Footer {
        format_version: FORMAT_VERSION,
        archive_len: archive.len() as u64,
        crc32: crc32fast::hash(&archive),
    };
    let mut out = Vec::with_capacity(archive.len() + FOOTER_LEN);
    out.extend_from_slice(&archive);
    out.extend_from_slice(&footer.to_bytes());
    out
}

/// Opens an artifact in place: footer, archive validation and layout consistency. Does not
/// read the row payload (see [`verify_checksum`]).
pub fn open(artifact: &[u8]) -> Result<&ArchivedIndex, FormatError> {
    let footer = Footer::read(artifact)?;
    let archive = &artifact[..footer.archive_len as usize];
    let misalign = archive.as_ptr() as usize % ARCHIVE_ALIGN;
    if misalign != 0 {
        return Err(FormatError::Misaligned(misalign));
    }
    let index = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(archive)
        .map_err(|e| FormatError::Invalid(e.to_string()))?;
    check_layout(index)?;
    Ok(index)
}

/// Reads every byte of the archive and compares its CRC32 with the footer's.
pub fn verify_checksum(artifact: &[u8]) -> Result<(), FormatError> {
    let footer = Footer::read(artifact)?;
    let computed = crc32fast::hash(&artifact[..footer.archive_len as usize]);
    if computed != footer.crc32 {
        return Err(FormatError::Checksum {
            stored: footer.crc32,
            computed,
        });
    }
    Ok(())
}

/// Cross-checks the sizes of the archived tables, so the search can index them without checks
/// failing at query time. O(lists + blocks); it does not touch the rows.
fn check_layout(index: &ArchivedIndex) -> Result<(), FormatError> {
    let bad = |m: String| Err(FormatError::Inconsistent(m));
    let h = &index.header;
    if h.format_version.to_native() != FORMAT_VERSION {
        return bad(format!(
            "header version {} differs from the footer's",
            h.format_version
        ));
    }
    let n_lists = index.lists.len();
    let groups_of_lists = n_lists.div_ceil(GROUP_ROWS);
    if index.list_keys.len() != groups_of_lists * GROUP_ROWS
        || index.list_centroids.len() != groups_of_lists
        || index.list_bounds.len() != groups_of_lists
    {
        return bad(format!("per-list tables do not match {n_lists} lists"));
    }
    if index
        .list_keys
        .iter()
        .any(|k| k.to_native() as usize >= KEYS)
    {
        return bad("a list key is out of range".into());
    }
    let kl = &index.key_lists;
    if kl.len() != KEYS + 1
        || kl[0] != 0
        || kl[KEYS].to_native() as usize != n_lists
        || kl.windows(2).any(|w| w[0] > w[1])
        || (0..KEYS).any(|k| {
            (kl[k].to_native() as usize..kl[k + 1].to_native() as usize)
                .any(|l| index.list_keys[l].to_native() as usize != k)
        })
    {
        return bad("lists are not grouped by key as key_lists says".into());
    }
    if index.super_bounds.len() != index.block_bounds.len() {
        return bad("super-blocks and block bound groups differ in length".into());
    }
    let slots = index.ids.len();
    if !slots.is_multiple_of(GROUP_ROWS) {
        return bad("slot count is not a multiple of the group size".into());
    }
    let groups = match &index.codes {
        ArchivedCodes::I16(g) => (g.len(), CodecKind::I16),
        ArchivedCodes::F16(g) => (g.len(), CodecKind::F16),
    };
    if groups.1 != h.codec.native() {
        return bad("the header's codec differs from the stored codes".into());
    }
    if groups.0 * GROUP_ROWS != slots {
        return bad(format!("{} code groups for {slots} slots", groups.0));
    }
    let (mut next_block, mut next_super) = (0usize, 0usize);
    for (i, list) in index.lists.iter().enumerate() {
        let (first, n) = (
            list.first_block.to_native() as usize,
            list.n_blocks.to_native() as usize,
        );
        if first != next_block || n == 0 || list.first_super.to_native() as usize != next_super {
            return bad(format!("list {i} does not continue the block sequence"));
        }
        next_block = first + n;
        next_super += n.div_ceil(SUPER_BLOCKS);
    }
    if next_block != index.blocks.len() || next_super != index.super_bounds.len() {
        return bad("lists do not cover all blocks".into());
    }
    for (i, b) in index.blocks.iter().enumerate() {
        let (first, n) = (
            b.first_slot.to_native() as usize,
            b.n_slots.to_native() as usize,
        );
        if first % GROUP_ROWS != 0 || n == 0 || first + n.next_multiple_of(GROUP_ROWS) > slots {
            return bad(format!("block {i} covers slots outside the index"));
        }
    }
    Ok(())
}

/// The checks that read the whole artifact: the CRC32 of the archive, then the row count.
pub fn verify_deep(artifact: &[u8]) -> Result<(), FormatError> {
    verify_checksum(artifact)?;
    let index = open(artifact)?;
    let real = index.ids.iter().filter(|&&id| id != PAD_ID).count();
    if real != index.header.n_refs.to_native() as usize {
        return Err(FormatError::Inconsistent(format!(
            "{real} real rows, header says {}",
            index.header.n_refs
        )));
    }
    Ok(())
}

/// Hex form of a digest, for messages.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies artifact bytes into a buffer with the alignment [`open`] needs (for artifacts read
/// from files; the embedded one is aligned at compile time).
pub fn aligned_copy(bytes: &[u8]) -> rkyv::util::AlignedVec<ARCHIVE_ALIGN> {
    let mut v = rkyv::util::AlignedVec::<ARCHIVE_ALIGN>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}
