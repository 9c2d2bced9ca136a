//! The index the binaries carry: the artifact built by `build.rs` (through index-pack) from
//! `resources/references.json.gz`, embedded with 32-byte alignment and opened in place.
//!
//! Three forms, chosen by `build.rs` (`FRAUD_INDEX_EMBED`, by default by size in the shipped
//! build and `linker` in the workspace's own builds: `index_pack::embed` holds the rule and the
//! limits):
//! - `bytes` (up to 256 MiB: the contest's 3M references are 92 MB): `include_bytes_aligned!`,
//!   the bytes a constant of this crate;
//! - `linker` (up to 1,920 MiB): the assembler includes the file (`.incbin`) in a section of
//!   its own, `.lrodata.fraud_index`. rustc holds an `include_bytes` constant in memory many
//!   times over while it compiles (a 300 MB one took 5.4 GB, docs/SCALING.md); the assembler
//!   reads the file once, between two labels whose distance the binary checks at start against
//!   the length it was built for. The static runtime's 32-bit offsets must still span the
//!   binary, so the whole binary stays within 2 GiB;
//! - `file` (beyond): the artifact ships beside the binary ([`embed::FILE_NAME`]) and is mapped
//!   read-only at first use, the same lazy, zero-copy pages as the other forms ([`file`]). The
//!   file is looked up in `FRAUD_INDEX_FILE` if set, else beside the executable, else where
//!   this build left it (a build machine's own runs).
//!
//! What the binary checks before it serves, by form and residency:
//! - every form, every residency: the footer (magic, format version, archive length), the
//!   rkyv archive's validation (bounds and alignment of every table) and the tables' layout
//!   (`index_pack::format::open`): no row or box is read;
//! - the file form also: the file's length and its footer's bytes (which hold the CRC32 the
//!   archive had) equal those of the artifact the binary was built with;
//! - `Prefault` and `HugePages` also read everything: the CRC32 and every value and box
//!   (`index_pack::format::verify_deep`).
//!
//! So `Lazy` serves rows that nothing read before the first query (that is what makes its
//! start fast). What guarantees their bytes: the build script runs `verify_deep` on the
//! artifact it embeds (or ships beside the binary), the Lambda package and the file form's
//! checks of `cargo xtask scale` run it again on the very file they ship, and every write of
//! an artifact is a new file renamed into place, so a mapped file never changes. What would
//! happen anyway on other bytes: the search clamps every lane (`search/kernels.rs`), so no
//! bytes that pass `open` make it overflow, panic or read out of bounds (the `index_open` fuzz
//! target); they only give wrong answers. A file truncated while mapped raises SIGBUS on the
//! next read of a lost page: [`file`] reports it in one line before the process dies.
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

#[cfg(fraud_index_file)]
fn artifact_bytes() -> Result<&'static [u8], IndexError> {
    static MAPPED: OnceLock<Result<&'static [u8], IndexError>> = OnceLock::new();
    MAPPED.get_or_init(built_file::map).clone()
}

/// The file the artifact's pages come from, for [`release_file_pages`]: this executable, or in
/// the file form the index file.
#[cfg(all(target_os = "linux", not(fraud_index_file)))]
fn source_file() -> Option<std::fs::File> {
    std::fs::File::open("/proc/self/exe").ok()
}

#[cfg(all(target_os = "linux", fraud_index_file))]
fn source_file() -> Option<std::fs::File> {
    std::fs::File::open(file::mapped_path()?).ok()
}

/// The artifact this binary was built with, in the file form: where to find it and what it
/// must be.
#[cfg(fraud_index_file)]
mod built_file {
    use super::{file, IndexError};
    use index_pack::embed;
    use std::path::PathBuf;

    /// The length and footer of the artifact this binary was built with.
    const EXPECTED: file::Expected = file::Expected {
        len: match u64::from_str_radix(env!("FRAUD_INDEX_ARTIFACT_LEN"), 10) {
            Ok(n) => n,
            Err(_) => panic!("FRAUD_INDEX_ARTIFACT_LEN is not a number"),
        },
        footer: include_bytes!(env!("FRAUD_INDEX_FOOTER")),
    };

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
                "this binary maps its index from a file ({} bytes; built with \
                 FRAUD_INDEX_EMBED=file) and finds none: ship {} beside it or name it with \
                 FRAUD_INDEX_FILE",
                EXPECTED.len,
                embed::FILE_NAME
            ))
        })
    }

    pub fn map() -> Result<&'static [u8], IndexError> {
        file::map(&path()?, &EXPECTED)
    }
}

/// The file form's mapping: an artifact file mapped read-only for the life of the process,
/// after checking that it is the expected one, with a SIGBUS report for a file truncated while
/// mapped.
pub mod file {
    use super::IndexError;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;

    /// What the mapped file must be: the built artifact's length and last bytes (its footer:
    /// format version, archive length, CRC32).
    #[derive(Clone, Copy, Debug)]
    pub struct Expected {
        pub len: u64,
        pub footer: &'static [u8],
    }

    /// The file [`map`] mapped.
    static PATH: OnceLock<PathBuf> = OnceLock::new();

    /// The path of the mapped index file, once mapped.
    pub fn mapped_path() -> Option<&'static Path> {
        PATH.get().map(PathBuf::as_path)
    }

    /// Maps `path` read-only for the process's lifetime, after checking its length and footer
    /// against `expected`.
    pub fn map(path: &Path, expected: &Expected) -> Result<&'static [u8], IndexError> {
        let fail = |what: String| IndexError::File(format!("{}: {what}", path.display()));
        let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
        if len != expected.len {
            return Err(fail(format!(
                "{len} bytes, but this binary was built with an index of {}: ship the \
                 artifact it was built with",
                expected.len
            )));
        }
        // SAFETY: a read-only private map, leaked for the life of the process. Its bytes are
        // read as plain `u8`; a file rewritten in place would change them under the map (the
        // project only replaces artifacts by renaming a new file over them, which leaves this
        // inode as it is), and one truncated makes a read of a lost page raise SIGBUS, which
        // `on_sigbus` reports before the process dies. No other process state depends on them.
        let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }
            .map_err(|e| fail(e.to_string()))?;
        let bytes: &'static [u8] = Box::leak(Box::new(map));
        if bytes.len() < expected.footer.len()
            || &bytes[bytes.len() - expected.footer.len()..] != expected.footer
        {
            return Err(fail(
                "its footer (format version, archive length, CRC32) is not that of the index \
                 this binary was built with: ship the artifact it was built with"
                    .into(),
            ));
        }
        report_truncation(path, bytes);
        let _ = PATH.set(path.to_path_buf());
        Ok(bytes)
    }

    static RANGE: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    static MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    /// Installs [`on_sigbus`] for the mapped range (one mapping per process).
    fn report_truncation(path: &Path, bytes: &'static [u8]) {
        let message = format!(
            "fraud index: {} was truncated while mapped (a read of the index faulted with \
             SIGBUS): the process stops. Replace an index file only by renaming a new file \
             over it.\n",
            path.display()
        );
        if MESSAGE.set(message.into_bytes()).is_err() {
            return;
        }
        let start = bytes.as_ptr() as usize;
        RANGE[0].store(start, Ordering::Release);
        RANGE[1].store(start + bytes.len(), Ordering::Release);
        // SAFETY: sigaction with a handler of the SA_SIGINFO signature; `old` is written by
        // the call and kept for the handler to restore.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut old) == 0 {
                let _ = PREVIOUS.set(old);
            }
        }
    }

    /// A SIGBUS inside the mapped index: the file lost pages (truncated). Writes the message,
    /// then puts back the previous action (Rust's own, or the default) and returns: the read
    /// faults again and that action ends the process. Only async-signal-safe calls.
    extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; MESSAGE and
        // PREVIOUS were set before the handler was installed and are never changed.
        unsafe {
            let addr = (*info).si_addr() as usize;
            let inside = (RANGE[0].load(Ordering::Acquire)..RANGE[1].load(Ordering::Acquire))
                .contains(&addr);
            if let (true, Some(m)) = (inside, MESSAGE.get()) {
                libc::write(2, m.as_ptr().cast(), m.len());
            }
            match PREVIOUS.get() {
                Some(previous) => libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut()),
                None => {
                    libc::signal(libc::SIGBUS, libc::SIG_DFL);
                    0
                }
            };
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A file truncated while mapped: the next read of a lost page ends the process with
        /// SIGBUS and one line that names the file. Run in a child process (this same test,
        /// with `FRAUD_SIGBUS_CHILD` set).
        #[test]
        fn a_file_truncated_while_mapped_is_reported() {
            use std::os::unix::process::ExitStatusExt;
            let path =
                std::env::temp_dir().join(format!("fraud-sigbus-{}.idx", std::process::id()));
            if let Some(p) = std::env::var_os("FRAUD_SIGBUS_CHILD") {
                let p = PathBuf::from(p);
                let bytes = std::fs::read(&p).unwrap();
                let footer: &'static [u8] = bytes[bytes.len() - 32..].to_vec().leak();
                let expected = Expected {
                    len: bytes.len() as u64,
                    footer,
                };
                let mapped = map(&p, &expected).unwrap();
                std::fs::File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
                std::hint::black_box(mapped[100_000]);
                unreachable!("the read above faults");
            }
            std::fs::write(&path, vec![7u8; 200_000]).unwrap();
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .args([
                    "--exact",
                    "index::file::tests::a_file_truncated_while_mapped_is_reported",
                ])
                .env("FRAUD_SIGBUS_CHILD", &path)
                .output()
                .unwrap();
            let _ = std::fs::remove_file(&path);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{stderr}");
            assert!(stderr.contains("was truncated while mapped"), "{stderr}");
            assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        }

        #[test]
        fn a_file_of_another_length_or_footer_is_refused() {
            let path = std::env::temp_dir().join(format!("fraud-other-{}.idx", std::process::id()));
            std::fs::write(&path, vec![1u8; 4096]).unwrap();
            let footer: &'static [u8] = &[1; 32];
            let long = map(&path, &Expected { len: 4097, footer }).unwrap_err();
            assert!(
                long.to_string()
                    .contains("4096 bytes, but this binary was built with an index of 4097"),
                "{long}"
            );
            let other = map(
                &path,
                &Expected {
                    len: 4096,
                    footer: &[2; 32],
                },
            )
            .unwrap_err();
            assert!(other.to_string().contains("its footer"), "{other}");
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(fraud_index_linker)]
fn artifact_bytes() -> Result<&'static [u8], IndexError> {
    linked::artifact()
}

/// The linked artifact's bytes between its two labels, once their distance is the declared
/// length (the check an assembler cannot make: LLVM's does not evaluate a distance across an
/// `.incbin` in `.if`).
#[cfg_attr(not(fraud_index_linker), allow(dead_code))]
fn linked_bytes(start: *const u8, end: *const u8, declared: usize) -> Result<usize, IndexError> {
    let length = (end as usize).wrapping_sub(start as usize);
    if length != declared {
        return Err(IndexError::File(format!(
            "the index linked into this binary is {length} bytes, but the binary was built for \
             {declared}: rebuild it"
        )));
    }
    Ok(length)
}

#[cfg(fraud_index_linker)]
mod linked {
    use super::{linked_bytes, IndexError};

    // The artifact's bytes, read by the assembler into a large-data section of its own, page
    // aligned, between two labels. Where the linker puts the section (rust-lld: before `.text`)
    // does not matter to the reference below, only the binary's total size does, which
    // `index_pack::embed::LINKER_MAX` bounds (docs/results/2026-12-06-index-forms.md).
    std::arch::global_asm!(
        concat!(
            ".pushsection .lrodata.fraud_index,\"a\",@progbits\n",
            ".balign 4096\n",
            ".globl fraud_index_artifact\n",
            "fraud_index_artifact:\n",
            ".incbin \"",
            env!("FRAUD_INDEX_ARTIFACT"),
            "\"\n",
            ".globl fraud_index_artifact_end\n",
            "fraud_index_artifact_end:\n",
            ".popsection\n"
        ),
        options(raw)
    );

    extern "C" {
        // Zero-sized: only their addresses are used, until the distance between them is checked.
        static fraud_index_artifact: [u8; 0];
        static fraud_index_artifact_end: [u8; 0];
    }

    /// The artifact's length, from the build script.
    const LEN: usize = match usize::from_str_radix(env!("FRAUD_INDEX_ARTIFACT_LEN"), 10) {
        Ok(n) => n,
        Err(_) => panic!("FRAUD_INDEX_ARTIFACT_LEN is not a number"),
    };

    pub fn artifact() -> Result<&'static [u8], IndexError> {
        let start = std::ptr::addr_of!(fraud_index_artifact).cast::<u8>();
        let end = std::ptr::addr_of!(fraud_index_artifact_end).cast::<u8>();
        let len = linked_bytes(start, end, LEN)?;
        // SAFETY: the `len` bytes from `start` are those the assembler copied from the artifact
        // into a read-only, allocated section of this binary (their length checked just above):
        // valid, never written, for the whole process.
        Ok(unsafe { std::slice::from_raw_parts(start, len) })
    }
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

/// The embedded artifact's footer (its last bytes: one page read).
pub fn footer() -> Result<format::Footer, IndexError> {
    Ok(format::Footer::read(artifact_bytes()?)?)
}

/// Which index this binary serves ([`format::Identity`]): from the header and the footer, no
/// row read.
pub fn identity() -> Result<format::Identity, IndexError> {
    Ok(format::Identity::of(&format::Opened {
        index: open()?,
        footer: footer()?,
    }))
}

/// The deltas searched with the embedded index: every `*.idx` file named by `FRAUD_DELTAS`
/// (files or directories, `:`-separated), else in the directory `deltas` beside the executable
/// when there is one; none otherwise. Each is read whole and checked in full (CRC32, values,
/// boxes: deltas are small), and they are put in the order they were packed; whether they
/// extend this base as one chain is the searcher's check (`Searcher::with_deltas`). Read once
/// per process.
pub fn deltas() -> Result<&'static [format::Opened<'static>], IndexError> {
    static DELTAS: OnceLock<Result<&'static [format::Opened<'static>], IndexError>> =
        OnceLock::new();
    DELTAS.get_or_init(load_deltas).clone()
}

fn load_deltas() -> Result<&'static [format::Opened<'static>], IndexError> {
    let fail = |p: &std::path::Path, e: String| IndexError::File(format!("{}: {e}", p.display()));
    let beside = || {
        let dir = std::env::current_exe().ok()?.parent()?.join("deltas");
        dir.is_dir().then(|| dir.into_os_string())
    };
    let list = std::env::var_os("FRAUD_DELTAS")
        .or_else(beside)
        .unwrap_or_default();
    let files = index_pack::chain::files(&list)
        .map_err(|e| IndexError::File(format!("the deltas {}: {e}", list.to_string_lossy())))?;
    let mut opened = Vec::new();
    for path in files {
        let mut bytes = format::aligned_copy(&[]);
        let mut file = std::fs::File::open(&path).map_err(|e| fail(&path, e.to_string()))?;
        std::io::copy(&mut file, &mut bytes).map_err(|e| fail(&path, e.to_string()))?;
        let bytes: &'static [u8] = Box::leak(Box::new(bytes));
        format::verify_deep(bytes).map_err(|e| fail(&path, e.to_string()))?;
        opened.push(format::open_with_footer(bytes)?);
    }
    opened.sort_by_key(format::Opened::chain_order);
    Ok(Box::leak(opened.into_boxed_slice()))
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

/// The embedded index with the proof its values were checked, where the build gives it: the
/// `bytes` and `linker` forms are the very artifact the build script verified
/// (`format::verify_deep`), compiled into this binary's read-only data. The `file` form maps a
/// file that only its length and footer tie to that artifact: `None` until it is read and
/// checked here ([`checked`]).
pub fn built_verified() -> Result<Option<format::Verified<'static>>, IndexError> {
    #[cfg(not(fraud_index_file))]
    return Ok(Some(format::Verified::by_the_build(open()?)));
    #[cfg(fraud_index_file)]
    Ok(None)
}

/// Set once the served bytes were read in full and checked in this process (a `Prefault` or
/// `HugePages` load, or [`prefault`], which a server's warm-up runs).
pub fn checked() -> &'static AtomicBool {
    &RESIDENT
}

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

    /// The linker form's length check: the bytes between the two labels must be the length the
    /// binary declares.
    #[test]
    fn the_linked_artifact_must_have_the_declared_length() {
        let bytes = [0u8; 16];
        let (start, end) = (bytes.as_ptr(), bytes.as_ptr().wrapping_add(16));
        assert_eq!(linked_bytes(start, end, 16), Ok(16));
        let e = linked_bytes(start, end, 17).unwrap_err().to_string();
        assert!(
            e.contains("16 bytes, but the binary was built for 17"),
            "{e}"
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
