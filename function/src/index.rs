//! The index the binaries carry: the artifact built by `build.rs` (through index-pack) from
//! `resources/references.json.gz`, embedded with 32-byte alignment and opened in place.
//!
//! Three forms, chosen by `build.rs` (`FRAUD_INDEX_EMBED`, by default by size:
//! `index_pack::embed` holds the rule and the limits):
//! - `bytes` (up to 256 MiB: the contest's 3M references are 92 MB): `include_bytes_aligned!`,
//!   the bytes a constant of this crate;
//! - `linker` (up to 1,920 MiB): the assembler includes the file (`.incbin`) in a section of
//!   its own, `.lrodata.fraud_index`. rustc holds an `include_bytes` constant in memory many
//!   times over while it compiles (a 300 MB one took 5.4 GB, docs/SCALING.md); the assembler
//!   reads the file once. The static runtime's 32-bit offsets must still span the binary, so
//!   the whole binary stays within 2 GiB;
//! - `file` (beyond): the artifact ships beside the binary ([`embed::FILE_NAME`]) and is mapped
//!   read-only at first use, the same lazy, zero-copy pages as the other forms; the binary keeps
//!   the artifact's length and footer (format version, archive length, CRC32) and refuses any
//!   other file. The file is looked up in `FRAUD_INDEX_FILE` if set, else beside the
//!   executable, else where this build left it (a build machine's own runs).
//!
//! In the first two forms the bytes are in the binary's read-only data, mapped, not copied.
//!
//! How the index is made resident is a [`Residency`] choice made once per process:
//! - `Lazy` (default): zero-copy. Opening validates footer, rkyv archive and table layout
//!   without reading rows; pages fault in as queries touch them. Fastest start.
//! - `Prefault`: reads every byte first (and checks the CRC32), so no request pays a page fault.
//! - `HugePages`: copies the artifact into anonymous memory backed by 2 MiB transparent huge
//!   pages (Linux; elsewhere it falls back to `Prefault`). The search jumps between subtrees
//!   spread over the whole artifact, so with 4 KiB pages its page walks are a large part of its
//!   cost when the caches are cold (perf: its prefetches stall on them). With
//!   other memory walked before each query (`search_stats` with `EVICT_KB`, as between two
//!   requests of a served API) huge pages cut the search's p99 several-fold
//!   (docs/results/2026-11-30-stack-earlier-batches.md, on the index format of that day); in
//!   the contest stack they cut the API's CPU per request by 7 %
//!   (docs/results/2026-11-30-api-cpu-levers.md; `local-runner/src/serve/mod.rs`, "Index
//!   residency"), so the stack's compose file asks for them. They cost a copy at start and
//!   anonymous memory the size of the artifact, so they are not the binary's default.
//!
//! The build script verified the CRC before embedding; `Prefault` and `HugePages` check it again
//! on the bytes actually served.

#[cfg(fraud_index_file)]
use index_pack::embed;
use index_pack::format::{self, ArchivedIndex, FormatError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Why the index could not be opened.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The file form only: the artifact beside the binary is missing or is not this build's.
    #[error("{0}")]
    File(String),
}

#[cfg(not(any(fraud_index_linker, fraud_index_file)))]
fn artifact_bytes() -> Result<&'static [u8], IndexError> {
    static ARTIFACT: &[u8] =
        include_bytes_aligned::include_bytes_aligned!(32, env!("FRAUD_INDEX_ARTIFACT"));
    Ok(ARTIFACT)
}

#[cfg(fraud_index_linker)]
fn artifact_bytes() -> Result<&'static [u8], IndexError> {
    Ok(linked::ARTIFACT)
}

#[cfg(fraud_index_file)]
fn artifact_bytes() -> Result<&'static [u8], IndexError> {
    static MAPPED: OnceLock<Result<&'static [u8], IndexError>> = OnceLock::new();
    MAPPED.get_or_init(mapped::map).clone()
}

/// The file the artifact's pages come from, for [`release_file_pages`]: this executable, or in
/// the file form the index file.
#[cfg(all(target_os = "linux", not(fraud_index_file)))]
fn source_file() -> Option<std::fs::File> {
    std::fs::File::open("/proc/self/exe").ok()
}

#[cfg(all(target_os = "linux", fraud_index_file))]
fn source_file() -> Option<std::fs::File> {
    std::fs::File::open(mapped::PATH.get()?).ok()
}

#[cfg(fraud_index_file)]
mod mapped {
    use super::{embed, IndexError};
    use std::path::PathBuf;
    use std::sync::OnceLock;

    /// The file [`map`] mapped.
    pub static PATH: OnceLock<PathBuf> = OnceLock::new();

    /// The length and footer of the artifact this binary was built with.
    const LEN: u64 = match u64::from_str_radix(env!("FRAUD_INDEX_ARTIFACT_LEN"), 10) {
        Ok(n) => n,
        Err(_) => panic!("FRAUD_INDEX_ARTIFACT_LEN is not a number"),
    };
    static FOOTER: &[u8] = include_bytes!(env!("FRAUD_INDEX_FOOTER"));

    /// `FRAUD_INDEX_FILE` if set; else the first that exists of the file beside the
    /// executable and this build's own copy.
    fn path() -> Result<PathBuf, IndexError> {
        if let Some(p) = std::env::var_os("FRAUD_INDEX_FILE") {
            return Ok(PathBuf::from(p));
        }
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join(embed::FILE_NAME)));
        let built = PathBuf::from(env!("FRAUD_INDEX_ARTIFACT"));
        let found = beside.into_iter().chain([built]).find(|p| p.is_file());
        found.ok_or_else(|| {
            IndexError::File(format!(
                "this binary maps its index from a file ({LEN} bytes; built with \
                     FRAUD_INDEX_EMBED=file) and finds none: ship {} beside it or name it \
                     with FRAUD_INDEX_FILE",
                embed::FILE_NAME
            ))
        })
    }

    /// Maps the artifact read-only for the process's lifetime, after checking that it is the
    /// one this binary was built with (length and footer; `Prefault` checks its CRC32 too).
    pub fn map() -> Result<&'static [u8], IndexError> {
        let path = path()?;
        let fail = |what: String| IndexError::File(format!("{}: {what}", path.display()));
        let file = std::fs::File::open(&path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
        if len != LEN {
            return Err(fail(format!(
                "{len} bytes, but this binary was built with an index of {LEN}: ship the \
                 artifact it was built with"
            )));
        }
        // SAFETY: the map is read-only and lives for the process (leaked below). The file must
        // not be truncated or rewritten while mapped (as an executable's own pages); the
        // deployment ships it read-only beside the binary.
        let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }
            .map_err(|e| fail(e.to_string()))?;
        let bytes: &'static [u8] = Box::leak(Box::new(map));
        if &bytes[bytes.len() - FOOTER.len()..] != FOOTER {
            return Err(fail(
                "its footer (format version, archive length, CRC32) is not that of the index \
                 this binary was built with: ship the artifact it was built with"
                    .into(),
            ));
        }
        let _ = PATH.set(path);
        Ok(bytes)
    }
}

#[cfg(fraud_index_linker)]
mod linked {
    // The artifact's bytes, read by the assembler into a large-data section of their own, page
    // aligned. Where the linker puts it (rust-lld: before `.text`) matters only through the
    // binary's total size, which `index_pack::embed::LINKER_MAX` bounds.
    std::arch::global_asm!(
        concat!(
            ".pushsection .lrodata.fraud_index,\"a\",@progbits\n",
            ".balign 4096\n",
            ".globl fraud_index_artifact\n",
            "fraud_index_artifact:\n",
            ".incbin \"",
            env!("FRAUD_INDEX_ARTIFACT"),
            "\"\n",
            ".popsection\n"
        ),
        options(raw)
    );

    extern "C" {
        // Declared with its real length, so that a reference to it is in bounds.
        static fraud_index_artifact: [u8; LEN];
    }

    /// The artifact's length, from the build script.
    const LEN: usize = match usize::from_str_radix(env!("FRAUD_INDEX_ARTIFACT_LEN"), 10) {
        Ok(n) => n,
        Err(_) => panic!("FRAUD_INDEX_ARTIFACT_LEN is not a number"),
    };

    // SAFETY: `fraud_index_artifact` labels LEN bytes the assembler copied from the artifact
    // into a read-only, allocated section of this binary: valid, never written, for the whole
    // process.
    pub static ARTIFACT: &[u8] = unsafe { &fraud_index_artifact };
}

/// How the embedded index is made resident (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Residency {
    #[default]
    Lazy,
    Prefault,
    HugePages,
}

impl std::str::FromStr for Residency {
    type Err = String;
    fn from_str(s: &str) -> Result<Residency, String> {
        match s {
            "lazy" => Ok(Residency::Lazy),
            "prefault" => Ok(Residency::Prefault),
            "hugepages" => Ok(Residency::HugePages),
            _ => Err(format!(
                "residency must be lazy, prefault or hugepages, not {s:?}"
            )),
        }
    }
}

/// The embedded artifact bytes.
pub fn artifact() -> Result<&'static [u8], IndexError> {
    artifact_bytes()
}

static INDEX: OnceLock<Result<&'static ArchivedIndex, IndexError>> = OnceLock::new();

/// The embedded index, opened lazily (zero-copy) unless [`load`] chose otherwise first.
pub fn open() -> Result<&'static ArchivedIndex, IndexError> {
    load(Residency::Lazy)
}

/// Opens the embedded index once, with the given residency; later calls return the same index
/// whatever mode they ask for.
pub fn load(mode: Residency) -> Result<&'static ArchivedIndex, IndexError> {
    INDEX
        .get_or_init(|| {
            let artifact = artifact_bytes()?;
            let bytes = match mode {
                Residency::Lazy => artifact,
                Residency::Prefault => {
                    format::verify_deep(artifact)?;
                    RESIDENT.store(true, Ordering::Release);
                    artifact
                }
                Residency::HugePages => {
                    let copy = huge_copy(artifact);
                    format::verify_deep(copy)?;
                    RESIDENT.store(true, Ordering::Release);
                    copy
                }
            };
            Ok(format::open(bytes)?)
        })
        .clone()
}

/// Set once the bytes the index is served from have been read in full and checked.
static RESIDENT: AtomicBool = AtomicBool::new(false);

/// Reads every page of the embedded artifact and checks its CRC32 and row count; nothing to do
/// if that was already done (by [`load`] with `Prefault` or `HugePages`, or an earlier call). In
/// particular this does not fault back the file pages a `HugePages` copy released.
pub fn prefault() -> Result<(), IndexError> {
    if RESIDENT.load(Ordering::Acquire) {
        return Ok(());
    }
    format::verify_deep(artifact_bytes()?)?;
    RESIDENT.store(true, Ordering::Release);
    Ok(())
}

/// A copy of `bytes` in memory advised to use transparent huge pages, leaked for the process
/// lifetime. Falls back to the original bytes (zero-copy) if the mapping fails.
///
/// The copy goes in chunks, and each chunk of the source (part of this executable's file
/// mapping) is released right after it was copied (see [`release_file_pages`]): otherwise the
/// page cache of the source and the copy would both count against a container's memory limit
/// (twice the artifact against the API's 150 MB).
#[cfg(target_os = "linux")]
fn huge_copy(bytes: &'static [u8]) -> &'static [u8] {
    const HUGE: usize = 2 << 20;
    const CHUNK: usize = 4 * HUGE;
    let len = bytes.len().next_multiple_of(HUGE);
    // SAFETY: a fresh private anonymous mapping of `len` bytes, checked for failure. It is
    // page aligned (so 32-byte aligned as `format::open` needs), written only here, chunk by
    // chunk, before any shared reference to it exists, and never unmapped, so the returned
    // slice lives forever.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return bytes;
        }
        // Advice only: without THP the copy still works with 4 KiB pages.
        libc::madvise(p, len, libc::MADV_HUGEPAGE);
        let dst = p.cast::<u8>();
        let source = source_file();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        for at in (0..bytes.len()).step_by(CHUNK) {
            let chunk = &bytes[at..(at + CHUNK).min(bytes.len())];
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), dst.add(at), chunk.len());
            if let Some(source) = &source {
                release_file_pages(chunk, source, &maps);
            }
        }
        std::slice::from_raw_parts(dst, bytes.len())
    }
}

/// Best effort: drops this process's pages of `src`, a part of a read-only file mapping of
/// `source` (the executable, or the index file in the file form), and asks the kernel to evict them from the page cache (pages another process still
/// maps stay). Reading `src` again later is still correct: the mapping is private, read-only
/// and never written, so a dropped page faults back in with the same bytes from the file.
#[cfg(target_os = "linux")]
fn release_file_pages(src: &[u8], source: &std::fs::File, maps: &str) {
    use std::os::fd::AsRawFd;
    const PAGE: usize = 4096;
    let (lo, hi) = (src.as_ptr() as usize, src.as_ptr() as usize + src.len());
    let (lo, hi) = (lo.next_multiple_of(PAGE), hi & !(PAGE - 1));
    if hi <= lo {
        return;
    }
    // "start-end perms offset dev inode path": the mapping holding `lo` gives its file offset.
    let Some((start, end, offset)) = maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (range, _perms, offset) = (f.next()?, f.next()?, f.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        let offset = usize::from_str_radix(offset, 16).ok()?;
        (a <= lo && lo < b).then_some((a, b, offset))
    }) else {
        return;
    };
    let hi = hi.min(end);
    // SAFETY: [lo, hi) lies inside one private, read-only file mapping of `source` (the
    // artifact, never written): MADV_DONTNEED only drops the page-table entries, and
    // the next read of those addresses faults the same file bytes back in. No reference into
    // this range is invalidated. posix_fadvise only reads its arguments.
    unsafe {
        libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED);
        libc::posix_fadvise(
            source.as_raw_fd(),
            (lo - start + offset) as libc::off_t,
            (hi - lo) as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn huge_copy(bytes: &'static [u8]) -> &'static [u8] {
    bytes
}

/// Share of the process's anonymous memory backed by transparent huge pages, in bytes, from
/// `/proc/self/smaps_rollup` (`AnonHugePages`); `None` where that file does not exist.
pub fn anon_huge_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_copy_holds_the_artifact_and_the_source_stays_readable() {
        let source = artifact().unwrap();
        let copy = huge_copy(source);
        assert_eq!(copy.len(), source.len());
        assert_eq!(
            copy.as_ptr() as usize % 32,
            0,
            "format::open needs 32-byte alignment"
        );
        assert!(copy == source, "the copy differs from the embedded bytes");
        // The source pages were released during the copy: reading them again faults the same
        // bytes back in from the file, and both still open as the same valid index.
        format::verify_deep(source).unwrap();
        format::verify_deep(copy).unwrap();
        assert_eq!(
            format::open(copy).unwrap().lists.len(),
            format::open(source).unwrap().lists.len()
        );
    }

    #[test]
    fn residency_names_parse() {
        assert_eq!("lazy".parse(), Ok(Residency::Lazy));
        assert_eq!("prefault".parse(), Ok(Residency::Prefault));
        assert_eq!("hugepages".parse(), Ok(Residency::HugePages));
        assert!("huge"
            .parse::<Residency>()
            .unwrap_err()
            .contains("lazy, prefault or hugepages"));
    }
}
