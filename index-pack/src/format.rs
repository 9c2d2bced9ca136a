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
//! once where reading the whole artifact is acceptable (the build script, `index-pack inspect`, a server's
//! `--prefault` start) rather than on every cold start.
//!
//! # Layout (partitions, inverted lists, a scalar codec: the FAISS split)
//! - **Partitions**: the references split by *key* (the three binary dimensions is_online,
//!   card_present, unknown_merchant) and by label. Every row of a partition shares the key, so
//!   those dimensions are not stored per row: their contribution to a distance is one constant
//!   per partition; and every row shares the label, so the vote-aware search can set a whole
//!   partition aside while the running vote cannot change (`function::search`).
//! - **Inverted lists**: the rows of one partition in one k-means cell (the packer's coarse
//!   quantizer); the cells where a partition has at most `block_rows` rows make one list (named
//!   by the first of them). Inside a list, k-d splits cut *blocks* of at most `block_rows` rows.
//! - **Tree**: each partition is one tree of fan-out [`FANOUT`]: its upper nodes group the
//!   partition's lists by their rows' means, its lower nodes group each list's blocks by k-d
//!   splits, and the leaves are the blocks. A node stores its children's exact bounding boxes
//!   transposed in one [`BoundsGroup`], so one kernel call bounds all 8. The boxes give exact
//!   lower bounds on the distance of every vector below, which is what makes the search exact:
//!   it walks the trees best first by those bounds and never reads a centroid.
//! - **Scalar codec**: `codes`, the remaining [`ROW_DIMS`] of each row in [`GROUP_ROWS`]-row
//!   groups, either exact i16 (value x 10000) or IEEE half floats.
//! - **What the search does not read**: `centroids`, the cells the packer trained over all
//!   references, and `lists`, where each list lies in the slots. They record how the rows were
//!   grouped, for `index-pack inspect` and the layout's tests; `open` holds `lists` consistent
//!   with the partitions and the centroids.
//!
//! Rows live in *slots*, in the order of a depth-first walk of each tree, so what one subtree
//! holds is contiguous. Each list starts on a group boundary; every block but the last of a list
//! holds a multiple of [`GROUP_ROWS`] rows, so padding slots occur only at the end of a list and
//! carry the id [`PAD_ID`]. A block's `n_slots` counts its real rows only, so a reader can tell
//! padding from its slot number without loading the id. A node's child nodes have consecutive
//! indices, so the nodes one query expands tend to share pages.
//!
//! # Invariants a reader may rely on (checked by [`open`] or [`verify_deep`])
//! - Every stored value v satisfies -10000 <= v <= 10000; dimensions other than 5 and 6 are >= 0;
//!   padding lanes are 0 (`verify_deep`). With queries in the same domain, every squared distance
//!   in fixed point is <= 2.0e9, so it fits an `i32` (see `MAX_DISTANCE`).
//! - `ids[slot] = position << 1 | is_fraud` for a real row, [`PAD_ID`] for padding, where a
//!   position is the reference's index in the whole set (`Header::first_position` plus its
//!   index in this part), each position of the part's range exactly once, all below 2^31; the
//!   label bit equals the partition's (`verify_deep`).
//! - A delta's footer holds its base's CRC32, equal to its header's (`open`); a base and its
//!   deltas compose only as [`check_composition`] says.
//! - Partitions are ordered by (key, label) and tile the slots; each tree reaches each of its
//!   nodes and blocks once, and its blocks lie in its partition's slots (`open`); every box
//!   contains what lies below it, every real row lies in a block and no block holds padding
//!   (`verify_deep`, which the build script runs).
//! - Offsets inside the archive are 64-bit (rkyv's `pointer_width_64`), so an artifact may be
//!   larger than 2 GiB (some 70M references and more).

use rkyv::{Archive, Deserialize, Serialize};

/// Magic bytes at the start of the footer.
pub const MAGIC: [u8; 8] = *b"FRDIDX\r\n";
/// Version of the layout below. Bump it on any change to the archived types (4: 64-bit offsets;
/// 5: global positions and the part of a set an index is, with the base's CRC32 in a delta's
/// footer; 6: a part's end position, a delta's hidden positions and relabelled rows, a
/// compacted base's folded parts).
pub const FORMAT_VERSION: u32 = 6;
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
/// Positions a reference set can hold: an id keeps a reference's position in 31 bits (its
/// label in the last), and positions are the whole set's, shards and deltas included.
pub const MAX_POSITIONS: u64 = 1 << 31;

/// Whether `count` references from position `first` fit the ids ([`MAX_POSITIONS`]); the error
/// says what to do.
pub fn check_positions(first: u64, count: u64) -> Result<(), FormatError> {
    if first + count <= MAX_POSITIONS {
        return Ok(());
    }
    Err(FormatError::Composition(format!(
        "{count} references from position {first} pass the {MAX_POSITIONS} positions an index \
         holds (ids keep a position in 31 bits, and positions are the whole set's, across \
         shards and deltas): a set this large needs another id layout"
    )))
}

/// Largest fixed-point squared distance between two vectors of the valid domain.
pub const MAX_DISTANCE: i64 = 12 * 10_000 * 10_000 + 2 * 20_000 * 20_000;
const _: () = assert!(MAX_DISTANCE < i32::MAX as i64, "distances are i32");

/// Smallest fixed-point value of each dimension: -1 (the sentinel) for dims 5 and 6, else 0.
pub const DIM_MIN: [i16; DIMS] = [0, 0, 0, 0, 0, -10_000, -10_000, 0, 0, 0, 0, 0, 0, 0];
/// Largest fixed-point value of each dimension (1).
pub const DIM_MAX: [i16; DIMS] = [10_000; DIMS];

/// The domain of each stored row lane, `LANE_MIN[l]..=LANE_MAX[l]`: its dimension's, and 0 for
/// the padding lane.
pub const LANE_MIN: [i16; LANES] = lane_table(&DIM_MIN);
pub const LANE_MAX: [i16; LANES] = lane_table(&DIM_MAX);

const fn lane_table(by_dim: &[i16; DIMS]) -> [i16; LANES] {
    let mut out = [0; LANES];
    let mut l = 0;
    while l < ROW_DIMS.len() {
        out[l] = by_dim[ROW_DIMS[l]];
        l += 1;
    }
    out
}

/// A query clamped into the domain every reference lies in. The vectorizer already gives such
/// queries; the search clamps anyway, so that no query can push a distance past
/// [`MAX_DISTANCE`].
pub fn clamp_query(q: &[i16; DIMS]) -> [i16; DIMS] {
    std::array::from_fn(|d| q[d].clamp(DIM_MIN[d], DIM_MAX[d]))
}
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
    /// How much each dimension's spread counted when the k-d splits chose their lanes.
    pub split_weights: [u32; DIMS],
    /// Name and version of the packer, for humans.
    pub packer: String,
    /// The positions of the whole reference set (its references in file order) this part
    /// covers: `first_position..end_position`. A reference's id holds its global position, so
    /// that ties break as the labeller's would over the whole set. Every position of the range
    /// is a row, but in a compacted base, where the removed ones are gaps; a delta's
    /// relabelled rows keep their earlier positions, below the range ([`Part::Delta`]).
    pub first_position: u32,
    pub end_position: u32,
    /// What part of a reference set this index holds.
    pub part: Part,
    /// A compacted base (`index-pack compact`): the deltas folded into it, in order (empty
    /// otherwise), so that the files it was made of can still be named and checked.
    pub folded: Vec<Folded>,
}

/// One delta folded into a compacted base: the digests of the files it was packed from.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct Folded {
    /// Its new references' file (zeros: none).
    pub source_sha256: [u8; 32],
    /// Its edits' file (zeros: none).
    pub edits_sha256: [u8; 32],
}

/// What part of a reference set an index holds.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum Part {
    /// A whole set, or the base of one that deltas extend: positions from 0.
    Whole,
    /// An edit of the set `base` and the deltas before this one describe (`index-pack delta`),
    /// searched with them, never alone: new references at the positions that follow theirs
    /// (`first_position..end_position`), and `hides`, the positions whose row in an earlier
    /// part no longer counts, sorted: removed ones, and relabelled ones, whose row with the new
    /// label (and the same vector and position) is in this delta, so that every partition
    /// still holds one label. `edits_sha256` names the edits file (zeros: new references only).
    /// It is delta `number` (from 0) of its base, packed after the part whose archive's CRC32
    /// is `previous_crc32` (the base's for delta 0): a chain is one sequence, checked link by
    /// link at load, and an edits-only delta (which adds no position) has its place in it.
    /// A shard's deltas only edit: a shard's range of positions is fixed by the split.
    Delta {
        base: BaseRef,
        number: u32,
        previous_crc32: u32,
        hides: Vec<u32>,
        edits_sha256: [u8; 32],
    },
    /// Shard `number` of `count` (from 0) of a set of `total` references whose source SHA-256 is
    /// `set_sha256` (`index-pack split`): a contiguous range of its positions, answered by a
    /// function of its own and merged by the front.
    Shard {
        number: u32,
        count: u32,
        total: u32,
        set_sha256: [u8; 32],
    },
}

/// The identity of the base a delta extends: what it was built from and its archive's CRC32.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct BaseRef {
    pub source_sha256: [u8; 32],
    pub n_refs: u32,
    pub crc32: u32,
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

/// A reference to a child of a tree node (or to a partition's or list's root): a node index,
/// or a block index with [`BLOCK_BIT`] set. [`NO_CHILD`] marks an unused child slot.
pub type ChildRef = u32;
/// Set in a [`ChildRef`] that names a block (a leaf).
pub const BLOCK_BIT: u32 = 1 << 31;
/// An unused child slot of a node (its box in the node's group is meaningless).
pub const NO_CHILD: ChildRef = u32::MAX;
/// Children per tree node: one kernel call bounds all of them.
pub const FANOUT: usize = GROUP_ROWS;

/// The references of one key and one label: the unit the vote-aware search parks or scans.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The binary dimensions shared by every row (bit i = dimension `KEY_DIMS[i]`).
    pub key: u32,
    /// Every row of the partition has this label.
    pub fraud: bool,
    /// Root of its tree.
    pub root: ChildRef,
    /// Its rows are the slots `first_slot..end_slot` (padding included).
    pub first_slot: u32,
    pub end_slot: u32,
    /// Bounding box of all its rows.
    pub bounds: Bounds,
}

/// One inverted list: the rows of one partition in one k-means cell, a subtree of the
/// partition's tree.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct List {
    /// k-means cell the list belongs to.
    pub cell: u32,
    pub partition: u32,
    /// Root of its subtree.
    pub root: ChildRef,
    /// Its rows are the slots `first_slot..end_slot` (a group boundary each; padding included).
    pub first_slot: u32,
    pub end_slot: u32,
}

/// A leaf of the tree: a run of rows inside a list.
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
    /// Ordered by (key, label); their slot ranges follow each other in that order.
    pub partitions: Vec<Partition>,
    /// The inverted lists in slot order (each partition's lists in the order of its tree).
    pub lists: Vec<List>,
    /// Children of each tree node ([`FANOUT`] slots, used ones first).
    pub node_children: Vec<[ChildRef; FANOUT]>,
    /// The bounding boxes of each node's children, transposed so that one kernel call bounds
    /// all of them (same index as `node_children`; lanes of unused children are meaningless).
    pub node_bounds: Vec<BoundsGroup>,
    /// The leaves, in slot order.
    pub blocks: Vec<Block>,
    /// Per slot: position << 1 | is_fraud (the position in the whole set), or [`PAD_ID`].
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
    #[error("the indexes do not compose: {0}")]
    Composition(String),
}

/// The fixed-size trailer of an artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    pub format_version: u32,
    pub archive_len: u64,
    pub crc32: u32,
    /// A delta's base's CRC32 (0 for any other part), readable without opening the archive.
    pub base_crc32: u32,
}

impl Footer {
    /// Encodes the footer (little endian).
    pub fn to_bytes(self) -> [u8; FOOTER_LEN] {
        let mut out = [0u8; FOOTER_LEN];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc32.to_le_bytes());
        out[16..24].copy_from_slice(&self.archive_len.to_le_bytes());
        out[24..28].copy_from_slice(&self.base_crc32.to_le_bytes());
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
            base_crc32: word(24..28),
        })
    }
}

/// Serializes an index into artifact bytes (archive + footer). Deterministic: the same index
/// gives the same bytes.
pub fn to_artifact(index: &Index) -> Vec<u8> {
    let mut out = Vec::new();
    write_artifact(index, &mut out).expect("writing to memory cannot fail");
    out
}

/// A writer that hands every byte it writes to `seen` (a checksum or a digest) and counts them.
pub struct Observed<W, F> {
    pub inner: W,
    pub seen: F,
    pub len: u64,
}

impl<W, F: FnMut(&[u8])> Observed<W, F> {
    pub fn new(inner: W, seen: F) -> Self {
        Observed {
            inner,
            seen,
            len: 0,
        }
    }
}

impl<W: std::io::Write, F: FnMut(&[u8])> std::io::Write for Observed<W, F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        (self.seen)(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes an index's artifact (its archive, then the footer) to `out` as it is serialized, so
/// the archive is never held in memory beside the index (at 100M references that would be 3 GB
/// more at the packer's peak).
pub fn write_artifact(index: &Index, out: impl std::io::Write) -> std::io::Result<Footer> {
    let mut crc = crc32fast::Hasher::new();
    let summing = Observed::new(out, |b: &[u8]| crc.update(b));
    let writer = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(
        index,
        rkyv::ser::writer::IoWriter::new(summing),
    )
    .map_err(std::io::Error::other)?;
    let Observed {
        inner: mut out,
        len: archive_len,
        ..
    } = writer.into_inner();
    let footer = Footer {
        format_version: FORMAT_VERSION,
        archive_len,
        crc32: crc.finalize(),
        base_crc32: match &index.header.part {
            Part::Delta { base, .. } => base.crc32,
            _ => 0,
        },
    };
    out.write_all(&footer.to_bytes())?;
    out.flush()?;
    Ok(footer)
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
    let base_crc32 = match &index.header.part {
        ArchivedPart::Delta { base, .. } => base.crc32.to_native(),
        _ => 0,
    };
    if footer.base_crc32 != base_crc32 {
        return Err(FormatError::Inconsistent(
            "the footer's base CRC32 differs from the header's part".into(),
        ));
    }
    Ok(index)
}

/// Which index a binary serves, as its init log line, its `/ready`, its metrics and
/// `index-pack inspect` name it: what it was built from (the references' SHA-256 and count),
/// which part of a set it is, its format, codec and archive checksum, and the packer that
/// built it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// SHA-256 of the decompressed references file, hex.
    pub references_sha256: String,
    /// Its rows (a delta's relabelled ones included); for a shard with edits, its live
    /// references ([`Identity::edited`]).
    pub references: u32,
    /// The positions of the whole set it covers: `first_position..end_position`.
    pub first_position: u32,
    pub end_position: u32,
    pub part: SetPart,
    pub format_version: u32,
    /// `i16` or `fp16`.
    pub codec: String,
    /// CRC32 of the archive (the footer's), hex.
    pub crc32: String,
    pub packer: String,
    /// A shard served with edit deltas: their CRC32s (hex), in order ([`Identity::edited`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edited_by: Vec<String>,
}

/// What part of a reference set an index is ([`Part`], as its identity carries it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SetPart {
    Whole,
    /// Delta `number` (from 0) of the base whose archive has this CRC32 (hex), hiding `hides`
    /// earlier rows (removed or relabelled) as the edits file whose SHA-256 is `edits_sha256`
    /// says.
    Delta {
        base_crc32: String,
        number: u32,
        hides: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edits_sha256: Option<String>,
    },
    /// Shard `number` of `count` (from 0) of a set of `total` references whose source SHA-256
    /// is `set_sha256` (hex).
    Shard {
        number: u32,
        count: u32,
        total: u32,
        set_sha256: String,
    },
}

impl std::fmt::Display for SetPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetPart::Whole => f.write_str("whole"),
            SetPart::Delta {
                base_crc32, number, ..
            } => write!(f, "delta {number} of {base_crc32}"),
            SetPart::Shard { number, count, .. } => write!(f, "shard {number} of {count}"),
        }
    }
}

impl Identity {
    pub fn of(opened: &Opened<'_>) -> Identity {
        let h = &opened.index.header;
        Identity {
            references_sha256: hex(&h.source_sha256),
            references: h.n_refs.to_native(),
            first_position: h.first_position.to_native(),
            end_position: h.end_position.to_native(),
            part: match &h.part {
                ArchivedPart::Whole => SetPart::Whole,
                ArchivedPart::Delta {
                    base,
                    number,
                    hides,
                    edits_sha256,
                    ..
                } => SetPart::Delta {
                    base_crc32: format!("{:08x}", base.crc32.to_native()),
                    number: number.to_native(),
                    hides: hides.len() as u32,
                    edits_sha256: (*edits_sha256 != [0; 32]).then(|| hex(edits_sha256)),
                },
                ArchivedPart::Shard {
                    number,
                    count,
                    total,
                    set_sha256,
                } => SetPart::Shard {
                    number: number.to_native(),
                    count: count.to_native(),
                    total: total.to_native(),
                    set_sha256: hex(set_sha256),
                },
            },
            format_version: opened.footer.format_version,
            codec: h.codec.native().name().to_string(),
            crc32: format!("{:08x}", opened.footer.crc32),
            packer: h.packer.to_string(),
            edited_by: Vec::new(),
        }
    }

    /// A shard's identity once `deltas` edit it, leaving `live` references: a front proves
    /// and checks the shard with its edits, so a shard that changes them is refused until the
    /// front is given them.
    pub fn edited(self, deltas: &[Identity], live: u32) -> Identity {
        Identity {
            references: live,
            edited_by: deltas.iter().map(|d| d.crc32.clone()).collect(),
            ..self
        }
    }

    /// The positions it covers: `first_position..end_position`.
    pub fn positions(&self) -> std::ops::Range<u64> {
        u64::from(self.first_position)..u64::from(self.end_position)
    }
}

/// How a binary serves an index: as a whole set (the scorer, `local-runner`, the `http` role of
/// the Lambda) or as one shard of a set (the Lambda's `shard` role, behind a front).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    WholeSet,
    Shard,
}

/// An opened artifact: its index and its footer.
#[derive(Clone, Copy)]
pub struct Opened<'a> {
    pub index: &'a ArchivedIndex,
    pub footer: Footer,
}

impl Opened<'_> {
    /// The identity a delta of this base records ([`Part::Delta`]).
    pub fn base_ref(&self) -> BaseRef {
        let h = &self.index.header;
        BaseRef {
            source_sha256: h.source_sha256,
            n_refs: h.n_refs.to_native(),
            crc32: self.footer.crc32,
        }
    }

    /// The position that follows this index's references: where a delta after it starts.
    pub fn end_position(&self) -> u32 {
        self.index.header.end_position.to_native()
    }

    /// The CRC32 of the base a delta extends (0 for another part).
    pub fn base_ref_crc32(&self) -> u32 {
        match &self.index.header.part {
            ArchivedPart::Delta { base, .. } => base.crc32.to_native(),
            _ => 0,
        }
    }

    /// Where it sits in a chain: a base first, then its deltas by number (deltas found as
    /// files, in any order, are sorted by this; [`check_composition`] checks the result).
    pub fn chain_order(&self) -> (u32, u32) {
        match &self.index.header.part {
            ArchivedPart::Delta { number, .. } => (1, number.to_native()),
            _ => (0, 0),
        }
    }
}

/// [`open`], with the footer.
pub fn open_with_footer(artifact: &[u8]) -> Result<Opened<'_>, FormatError> {
    Ok(Opened {
        index: open(artifact)?,
        footer: Footer::read(artifact)?,
    })
}

/// Checks that `parts`, a base then its deltas in order (each opened with its footer), form
/// the one reference set `serving` needs: a whole set or a shard, whose deltas each extend
/// this base (its source SHA-256, reference count and CRC32), follow the part they were
/// packed after, and start at the position where the parts before it end, all with one codec
/// (a shard's deltas add no reference). A shard served as a whole set would
/// vote over a fraction of the references, and a whole set served as a shard would be merged
/// with its neighbours' references twice: both are refused with a sentence.
pub fn check_composition(
    parts: &[(&ArchivedIndex, Footer)],
    serving: Serving,
) -> Result<(), FormatError> {
    let bad = |m: String| Err(FormatError::Composition(m));
    let Some(((base, base_footer), deltas)) = parts.split_first() else {
        return bad("no index".into());
    };
    let h = &base.header;
    match (&h.part, serving) {
        (ArchivedPart::Whole, Serving::WholeSet) | (ArchivedPart::Shard { .. }, Serving::Shard) => {
        }
        (ArchivedPart::Shard { number, count, .. }, Serving::WholeSet) => {
            return bad(format!(
                "this index is shard {number} of {count} of a set (index-pack split): it holds \
                 a fraction of the references and answers only in a shard's role, behind a \
                 front that merges every shard (FRAUD_LAMBDA_ROLE=shard); serve the whole \
                 set's index here"
            ))
        }
        (ArchivedPart::Whole, Serving::Shard) => {
            return bad(
                "this index is a whole set, not a shard (index-pack split): a front would \
                 merge its references with the other shards' and count some twice; build the \
                 shard role with a shard's index"
                    .into(),
            )
        }
        (ArchivedPart::Delta { .. }, _) => {
            return bad("the first index is a delta: a delta is searched with its base".into())
        }
    }
    let mut next = h.end_position.to_native() as u64;
    for (i, (delta, _)) in deltas.iter().enumerate() {
        let d = &delta.header;
        let ArchivedPart::Delta {
            base: of,
            number,
            previous_crc32,
            ..
        } = &d.part
        else {
            return bad(format!("index {} after the base is not a delta", i + 1));
        };
        if of.source_sha256 != h.source_sha256
            || of.n_refs != h.n_refs
            || of.crc32.to_native() != base_footer.crc32
        {
            return bad(format!(
                "delta {} extends another base (references {}, {} of them, CRC32 {:08x}), not \
                 this one (references {}, {}, CRC32 {:08x}): pack it with index-pack delta \
                 --base on this base",
                i + 1,
                hex(&of.source_sha256),
                of.n_refs,
                of.crc32.to_native(),
                hex(&h.source_sha256),
                h.n_refs,
                base_footer.crc32
            ));
        }
        if d.first_position.to_native() as u64 != next {
            return bad(format!(
                "delta {} starts at position {}, but the indexes before it end at {next}: give \
                 the deltas in the order they were packed",
                i + 1,
                d.first_position
            ));
        }
        let previous = parts[i].1.crc32;
        if number.to_native() as usize != i || previous_crc32.to_native() != previous {
            return bad(format!(
                "delta {} was packed as delta {} after the part with CRC32 {:08x}, but here it \
                 follows the part with CRC32 {previous:08x}: give the deltas in the order they \
                 were packed, each after the one it was packed after",
                i + 1,
                number.to_native() + 1,
                previous_crc32.to_native()
            ));
        }
        if matches!(h.part, ArchivedPart::Shard { .. }) && d.end_position != d.first_position {
            return bad(format!(
                "delta {} adds references to a shard: a shard's positions are fixed by the \
                 split; a shard's deltas only remove and relabel",
                i + 1
            ));
        }
        if d.codec != h.codec {
            return bad(format!("delta {} has another codec than the base", i + 1));
        }
        next = d.end_position.to_native() as u64;
    }
    Ok(())
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

/// Cross-checks the archived tables, so the search can index them without checks failing at
/// query time: partitions tile the slots in (key, label) order, every child reference is in
/// range, and the partitions' trees are trees (every node and block reached exactly once, each
/// block inside its partition's slots). O(nodes + blocks); it does not touch the rows or the
/// boxes (see [`verify_deep`]).
fn check_layout(index: &ArchivedIndex) -> Result<(), FormatError> {
    let bad = |m: String| Err(FormatError::Inconsistent(m));
    let h = &index.header;
    if h.format_version.to_native() != FORMAT_VERSION {
        return bad(format!(
            "header version {} differs from the footer's",
            h.format_version
        ));
    }
    let slots = index.ids.len();
    if !slots.is_multiple_of(GROUP_ROWS) {
        return bad("slot count is not a multiple of the group size".into());
    }
    if check_positions(
        h.first_position.to_native().into(),
        h.n_refs.to_native().into(),
    )
    .is_err()
    {
        return bad(format!("positions past {MAX_POSITIONS}"));
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
    let parts = &index.partitions;
    // No partition only in a delta that removes and adds nothing.
    if (parts.is_empty() && (h.n_refs != 0 || !matches!(h.part, ArchivedPart::Delta { .. })))
        || parts.len() > 2 * KEYS
    {
        return bad(format!("{} partitions", parts.len()));
    }
    let mut next_slot = 0usize;
    for (i, p) in parts.iter().enumerate() {
        let order = |p: &ArchivedPartition| (p.key.to_native(), p.fraud);
        let (first, end) = (
            p.first_slot.to_native() as usize,
            p.end_slot.to_native() as usize,
        );
        if p.key.to_native() as usize >= KEYS
            || (i > 0 && order(&parts[i - 1]) >= order(p))
            || first != next_slot
            || end <= first
            || !end.is_multiple_of(GROUP_ROWS)
        {
            return bad(format!(
                "partition {i} is out of order or does not continue the slots"
            ));
        }
        next_slot = end;
    }
    if next_slot != slots {
        return bad("partitions do not cover all slots".into());
    }
    let n_nodes = index.node_children.len();
    if index.node_bounds.len() != n_nodes {
        return bad("node children and node bounds differ in length".into());
    }
    let mut prev_end = 0usize;
    for (i, b) in index.blocks.iter().enumerate() {
        let (first, n) = (
            b.first_slot.to_native() as usize,
            b.n_slots.to_native() as usize,
        );
        if first % GROUP_ROWS != 0
            || n == 0
            || first < prev_end
            || first + n.next_multiple_of(GROUP_ROWS) > slots
        {
            return bad(format!(
                "block {i} covers slots outside the index or out of order"
            ));
        }
        prev_end = first + n;
    }
    // Walk every partition's tree: each node and block exactly once, blocks in their partition.
    let mut seen_nodes = vec![false; n_nodes];
    let mut seen_blocks = vec![false; index.blocks.len()];
    let mut stack = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let range = p.first_slot.to_native() as usize..p.end_slot.to_native() as usize;
        stack.push(p.root.to_native());
        while let Some(c) = stack.pop() {
            if c == NO_CHILD {
                return bad(format!("partition {i} has an empty root"));
            }
            if c & BLOCK_BIT != 0 {
                let b = (c & !BLOCK_BIT) as usize;
                let Some(block) = index.blocks.get(b) else {
                    return bad(format!("partition {i} names block {b}, past the end"));
                };
                if std::mem::replace(&mut seen_blocks[b], true) {
                    return bad(format!("block {b} is reached twice"));
                }
                let first = block.first_slot.to_native() as usize;
                if !range.contains(&first) || first + block.n_slots.to_native() as usize > range.end
                {
                    return bad(format!("block {b} lies outside partition {i}"));
                }
                continue;
            }
            let n = c as usize;
            if n >= n_nodes {
                return bad(format!("partition {i} names node {n}, past the end"));
            }
            if std::mem::replace(&mut seen_nodes[n], true) {
                return bad(format!("node {n} is reached twice"));
            }
            let children = &index.node_children[n];
            let used = children
                .iter()
                .take_while(|c| c.to_native() != NO_CHILD)
                .count();
            if used == 0 || children[used..].iter().any(|c| c.to_native() != NO_CHILD) {
                return bad(format!("node {n} has no child or a gap between children"));
            }
            stack.extend(children[..used].iter().map(|c| c.to_native()));
        }
    }
    if seen_nodes.contains(&false) || seen_blocks.contains(&false) {
        return bad("some nodes or blocks belong to no partition".into());
    }
    for (i, l) in index.lists.iter().enumerate() {
        let (first, end) = (
            l.first_slot.to_native() as usize,
            l.end_slot.to_native() as usize,
        );
        let Some(p) = parts.get(l.partition.to_native() as usize) else {
            return bad(format!("list {i} names a partition past the end"));
        };
        if first % GROUP_ROWS != 0
            || end <= first
            || first < p.first_slot.to_native() as usize
            || end > p.end_slot.to_native() as usize
            || l.cell.to_native() as usize >= index.centroids.len()
        {
            return bad(format!("list {i} lies outside its partition or cell table"));
        }
    }
    Ok(())
}

/// The checks that read the whole artifact, so that the search may rely on what the packer
/// promises without checking it per query (a test per invariant, `tests/artifact.rs`):
/// - the CRC32 of the archive, and the row count;
/// - every value the kernels read lies in its lane's domain (dims 5 and 6 in [-10000, 10000],
///   the other row lanes in [0, 10000], the padding lane and the lanes past it 0), in rows and
///   in boxes, so that no distance can overflow an `i32` (`MAX_DISTANCE`); an fp16 value is a
///   number (not NaN or infinite) in the same domain;
/// - every real row lies inside a block and no block holds a padding slot (the scan masks the
///   padding of a block's last group by slot number, without loading ids); padding rows are 0;
/// - every row's label is its partition's;
/// - the boxes the search prunes with: each node's child boxes inside the box its parent holds
///   for it and, for the exact codec, every row inside its block's box. A box that missed a row
///   would make the search skip it.
pub fn verify_deep(artifact: &[u8]) -> Result<Verified<'_>, FormatError> {
    verify_checksum(artifact)?;
    let index = open(artifact)?;
    let bad = |m: String| Err(FormatError::Inconsistent(m));
    check_values(index)?;
    check_blocks_cover_rows(index)?;
    let real = index.ids.iter().filter(|&&id| id != PAD_ID).count();
    if real != index.header.n_refs.to_native() as usize {
        return bad(format!(
            "{real} real rows, header says {}",
            index.header.n_refs
        ));
    }
    // Every position once: those of the range (all of them but in a compacted base, whose
    // removed positions are gaps), and a delta's relabelled rows at positions it hides.
    let h = &index.header;
    let (first, end) = (
        h.first_position.to_native() as usize,
        h.end_position.to_native() as usize,
    );
    let hides: &[rkyv::rend::u32_le] = match &h.part {
        ArchivedPart::Delta { hides, .. } => hides,
        _ => &[],
    };
    let mut seen = vec![false; end - first];
    let (mut in_range, mut relabelled) = (0usize, std::collections::BTreeSet::new());
    for id in index.ids.iter().map(|id| id.to_native()) {
        if id == PAD_ID {
            continue;
        }
        let p = (id >> 1) as usize;
        let at = p.wrapping_sub(first);
        if at < seen.len() && !std::mem::replace(&mut seen[at], true) {
            in_range += 1;
        } else if p >= first
            || !relabelled.insert(p)
            || hides
                .binary_search_by_key(&(p as u32), |h| h.to_native())
                .is_err()
        {
            return bad(format!(
                "the position {p} is outside {first}..{end}, held twice, or relabelled without \
                 being hidden"
            ));
        }
    }
    let dense = h.folded.is_empty();
    if dense && in_range != end - first {
        return bad(format!(
            "{in_range} of the positions {first}..{end} are rows: a packed part holds them all"
        ));
    }
    for (i, p) in index.partitions.iter().enumerate() {
        let range = p.first_slot.to_native() as usize..p.end_slot.to_native() as usize;
        if index.ids[range]
            .iter()
            .any(|id| id.to_native() != PAD_ID && (id.to_native() & 1 == 1) != p.fraud)
        {
            return bad(format!("partition {i} holds a row of the other label"));
        }
        let root = p.root.to_native();
        if !inside(&box_of(index, root), &native_bounds(&p.bounds)) {
            return bad(format!("partition {i}'s box misses part of its tree"));
        }
    }
    for n in 0..index.node_children.len() {
        for (c, child) in index.node_children[n].iter().enumerate() {
            let child = child.to_native();
            if child != NO_CHILD
                && !inside(&box_of(index, child), &group_box(&index.node_bounds[n], c))
            {
                return bad(format!("node {n}: the box of child {c} misses part of it"));
            }
        }
    }
    Ok(Verified(index))
}

/// An index whose every row and box was read and held to the format's invariants
/// ([`verify_deep`]): every value in its lane's domain, so no distance over it can pass
/// [`MAX_DISTANCE`]. The search takes its fastest kernels only over such an index.
#[derive(Clone, Copy)]
pub struct Verified<'a>(&'a ArchivedIndex);

impl std::fmt::Debug for Verified<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verified({} references)", self.0.header.n_refs)
    }
}

impl<'a> Verified<'a> {
    pub fn index(self) -> &'a ArchivedIndex {
        self.0
    }

    /// The index a build script verified ([`verify_deep`] on the very artifact) and compiled
    /// into the binary as read-only data (`function`'s `bytes` and `linker` forms): those
    /// bytes cannot change after the check. Any other index is verified in the process.
    pub fn by_the_build(index: &'a ArchivedIndex) -> Verified<'a> {
        Verified(index)
    }
}

/// The fixed-point values a lane may hold: dims 5 and 6 (lanes 5 and 6) carry the -1 sentinel,
/// the other row lanes are in [0, 1], the padding lane and the lanes past it are 0.
fn lane_domain(lane: usize) -> std::ops::RangeInclusive<i16> {
    match lane {
        l if l < LANES => LANE_MIN[l]..=LANE_MAX[l],
        _ => 0..=0,
    }
}

/// Every value of the rows and of the boxes in its lane's domain (fp16: a number in it).
fn check_values(index: &ArchivedIndex) -> Result<(), FormatError> {
    let bad = |what: &str, at: usize, lane: usize, v: String| {
        Err(FormatError::Inconsistent(format!(
            "{what} {at} holds {v} in lane {lane}, outside {:?}",
            lane_domain(lane)
        )))
    };
    // A box: its 16 lanes (past LANES they must be 0).
    let check_box =
        |what: &str, at: usize, lo: &[rkyv::rend::i16_le; 16], hi: &[rkyv::rend::i16_le; 16]| {
            for l in 0..16 {
                for v in [lo[l].to_native(), hi[l].to_native()] {
                    if !lane_domain(l).contains(&v) {
                        return bad(what, at, l, v.to_string());
                    }
                }
            }
            Ok(())
        };
    for (i, p) in index.partitions.iter().enumerate() {
        check_box("partition box", i, &p.bounds.lo, &p.bounds.hi)?;
    }
    // Pair-interleaved groups (node boxes, i16 rows): `pairs[p][2 * r + j]` is lane `2p + j`.
    let pairs_ok = |pairs: &[[rkyv::rend::i16_le; 16]; PAIRS]| {
        (0..PAIRS)
            .flat_map(|p| (0..16).map(move |i| (p, i)))
            .find_map(|(p, i)| {
                let (lane, v) = (2 * p + i % 2, pairs[p][i].to_native());
                (!lane_domain(lane).contains(&v)).then_some((lane, v))
            })
    };
    for (n, g) in index.node_bounds.iter().enumerate() {
        if let Some((lane, v)) = pairs_ok(&g.lo).or_else(|| pairs_ok(&g.hi)) {
            return bad("node", n, lane, v.to_string());
        }
    }
    match &index.codes {
        ArchivedCodes::I16(groups) => {
            for (g, group) in groups.iter().enumerate() {
                if let Some((lane, v)) = pairs_ok(&group.pairs) {
                    return bad("row group", g, lane, v.to_string());
                }
            }
        }
        ArchivedCodes::F16(groups) => {
            for (g, group) in groups.iter().enumerate() {
                for (lane, rows) in group.lanes.iter().enumerate() {
                    for x in rows.iter() {
                        let v = half::f16::from_bits(x.to_native()).to_f64();
                        let domain = lane_domain(lane);
                        let fixed = v * SCALE;
                        if !(f64::from(*domain.start())..=f64::from(*domain.end())).contains(&fixed)
                        {
                            return bad("row group", g, lane, format!("the fp16 value {v}"));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Blocks (ordered and disjoint, `check_layout`) hold every real row and no padding slot; the
/// padding slots between them hold zero rows.
fn check_blocks_cover_rows(index: &ArchivedIndex) -> Result<(), FormatError> {
    let bad = |m: String| Err(FormatError::Inconsistent(m));
    let zero_row = |slot: usize| {
        let (g, r) = (slot / GROUP_ROWS, slot % GROUP_ROWS);
        match &index.codes {
            ArchivedCodes::I16(groups) => {
                (0..LANES).all(|l| groups[g].pairs[l / 2][2 * r + l % 2].to_native() == 0)
            }
            ArchivedCodes::F16(groups) => {
                (0..LANES).all(|l| groups[g].lanes[l][r].to_native() == 0)
            }
        }
    };
    let mut slot = 0;
    let padding_until = |slot: &mut usize, end: usize| {
        while *slot < end {
            if index.ids[*slot].to_native() != PAD_ID {
                return bad(format!("slot {slot} holds a real row outside every block"));
            }
            if !zero_row(*slot) {
                return bad(format!("padding slot {slot} holds a row that is not 0"));
            }
            *slot += 1;
        }
        Ok(())
    };
    for (b, block) in index.blocks.iter().enumerate() {
        let first = block.first_slot.to_native() as usize;
        let end = first + block.n_slots.to_native() as usize;
        padding_until(&mut slot, first)?;
        if let Some(s) = (first..end).find(|&s| index.ids[s].to_native() == PAD_ID) {
            return bad(format!("block {b} holds the padding slot {s}"));
        }
        slot = end;
    }
    padding_until(&mut slot, index.ids.len())
}

/// Lanes `lo..=hi` of a box as native integers.
type Lanes = ([i16; LANES], [i16; LANES]);

fn native_bounds(b: &ArchivedBounds) -> Lanes {
    (
        std::array::from_fn(|l| b.lo[l].to_native()),
        std::array::from_fn(|l| b.hi[l].to_native()),
    )
}

/// The box a node group holds for its child `c`.
fn group_box(g: &ArchivedBoundsGroup, c: usize) -> Lanes {
    (
        std::array::from_fn(|l| g.lo[l / 2][2 * c + l % 2].to_native()),
        std::array::from_fn(|l| g.hi[l / 2][2 * c + l % 2].to_native()),
    )
}

/// The smallest box around what a child holds: its rows (exact codec), or its own children's
/// boxes. For the lossy codec a block's box is not recomputed (its rows are approximations).
fn box_of(index: &ArchivedIndex, child: ChildRef) -> Lanes {
    let mut out = ([i16::MAX; LANES], [i16::MIN; LANES]);
    let mut grow = |b: Lanes| {
        for l in 0..LANES {
            out.0[l] = out.0[l].min(b.0[l]);
            out.1[l] = out.1[l].max(b.1[l]);
        }
    };
    if child & BLOCK_BIT == 0 {
        let n = child as usize;
        for (c, g) in index.node_children[n].iter().enumerate() {
            if g.to_native() != NO_CHILD {
                grow(group_box(&index.node_bounds[n], c));
            }
        }
        return out;
    }
    let block = &index.blocks[(child & !BLOCK_BIT) as usize];
    let ArchivedCodes::I16(groups) = &index.codes else {
        return out;
    };
    let first = block.first_slot.to_native() as usize;
    for slot in first..first + block.n_slots.to_native() as usize {
        let (g, r) = (slot / GROUP_ROWS, slot % GROUP_ROWS);
        let row: [i16; LANES] =
            std::array::from_fn(|l| groups[g].pairs[l / 2][2 * r + l % 2].to_native());
        grow((row, row));
    }
    out
}

/// Whether box `a` lies inside box `b` (an empty `a` lies inside anything).
fn inside(a: &Lanes, b: &Lanes) -> bool {
    (0..LANES).all(|l| a.0[l] > a.1[l] || (b.0[l] <= a.0[l] && a.1[l] <= b.1[l]))
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
