//! How a release binary carries its index: the three forms and the rule that picks one by size.
//!
//! Defined here, once, because two programs apply it: `function`'s build script (which form to
//! compile) and the harness (what a package must ship beside the binary).
//!
//! - [`Embed::Bytes`]: an `include_bytes_aligned!` constant. rustc holds the constant several
//!   times over while it compiles (5.4 GB of build memory for a 300 MB artifact,
//!   docs/SCALING.md), so it is the default only up to [`BYTES_DEFAULT_MAX`].
//! - [`Embed::Linker`]: the assembler includes the file in a section of its own between two
//!   labels, whose distance the binary checks at start against the length it was built for.
//!   rust-lld places that section before `.text`, and the static C runtime addresses symbols
//!   across it (`_end`,
//!   `__ehdr_start`) with 32-bit offsets, so the whole binary must stay within 2 GiB: a 1,990
//!   MiB section links, 2,600 MiB and 3,024 MB ones fail with "relocation R_X86_64_PC32 out of
//!   range", in any section or code model (docs/results/2026-12-06-index-forms.md). Up to
//!   [`LINKER_MAX`].
//! - [`Embed::File`]: the artifact ships beside the binary as [`FILE_NAME`] and is mapped the
//!   same way at start (lazily, zero-copy); the binary holds its length and footer and refuses
//!   any other file. No size limit of its own.

/// Up to this many bytes the index is an `include_bytes_aligned!` constant by default.
pub const BYTES_DEFAULT_MAX: u64 = 256 << 20;

/// The largest artifact the linker form takes: 2 GiB less room for the binary's own code and
/// data (a few MB today), so that every 32-bit offset of the static runtime still reaches.
pub const LINKER_MAX: u64 = 1920 << 20;

/// The artifact's name beside the binary in the file form.
pub const FILE_NAME: &str = "fraud-index.idx";

/// How the binary carries its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embed {
    Bytes,
    Linker,
    File,
}

impl Embed {
    /// The form for an artifact of `len` bytes: the one `requested` names (`FRAUD_INDEX_EMBED`:
    /// `bytes`, `linker` or `file`), or by size when it is empty or absent.
    pub fn choose(len: u64, requested: Option<&str>) -> Result<Embed, String> {
        let form = match requested.unwrap_or("") {
            "" if len <= BYTES_DEFAULT_MAX => Embed::Bytes,
            "" if len <= LINKER_MAX => Embed::Linker,
            "" => Embed::File,
            "bytes" => Embed::Bytes,
            "linker" => Embed::Linker,
            "file" => Embed::File,
            other => {
                return Err(format!(
                    "FRAUD_INDEX_EMBED must be bytes, linker or file, not {other:?}"
                ))
            }
        };
        if form == Embed::Linker && len > LINKER_MAX {
            return Err(format!(
                "the index artifact is {len} bytes, over the {LINKER_MAX} the linker form can \
                 link (the binary must stay within 2 GiB): use FRAUD_INDEX_EMBED=file, or leave \
                 it unset to choose by size"
            ));
        }
        Ok(form)
    }
}

/// The form `function`'s build script embeds: the one `FRAUD_INDEX_EMBED` names (`requested`);
/// when it names none, `FRAUD_INDEX_EMBED_DEFAULT` (`default`: `linker`, or empty for by size)
/// while the artifact fits that form, else by size. .cargo/config.toml makes `linker` the
/// default of the workspace's own builds: rustc compiled `function` with the contest's 92 MB
/// artifact as a constant in 32.6 s, with the assembler including it in 4.5 s, and the
/// workspace build compiles two crates that hold it (`function` and its tests). The shipped
/// build empties the default (`xtask::util::static_build`), so the release binaries take the
/// form by size.
pub fn choose_for_build(
    len: u64,
    requested: Option<&str>,
    default: Option<&str>,
) -> Result<Embed, String> {
    match (requested.unwrap_or(""), default.unwrap_or("")) {
        ("", "linker") if len <= LINKER_MAX => Ok(Embed::Linker),
        ("", "linker" | "") => Embed::choose(len, None),
        ("", other) => Err(format!(
            "FRAUD_INDEX_EMBED_DEFAULT must be linker or empty, not {other:?}"
        )),
        (named, _) => Embed::choose(len, Some(named)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_default_gives_way_to_a_named_form_and_to_size() {
        let choose = |len, req, def| choose_for_build(len, req, def).unwrap();
        assert_eq!(choose(92_000_000, None, Some("linker")), Embed::Linker);
        assert_eq!(choose(92_000_000, Some(""), Some("")), Embed::Bytes);
        assert_eq!(choose(92_000_000, None, None), Embed::Bytes);
        assert_eq!(
            choose(92_000_000, Some("bytes"), Some("linker")),
            Embed::Bytes
        );
        assert_eq!(choose(3_024_000_000, None, Some("linker")), Embed::File);
        assert!(choose_for_build(1, None, Some("bytes")).is_err());
    }

    #[test]
    fn the_form_follows_the_size_unless_named() {
        let choose = |len, req| Embed::choose(len, req).unwrap();
        assert_eq!(choose(92_000_000, None), Embed::Bytes);
        assert_eq!(choose(BYTES_DEFAULT_MAX + 1, Some("")), Embed::Linker);
        assert_eq!(choose(908_000_000, None), Embed::Linker);
        assert_eq!(choose(3_024_000_000, None), Embed::File);
        assert_eq!(choose(92_000_000, Some("file")), Embed::File);
        assert_eq!(choose(908_000_000, Some("bytes")), Embed::Bytes);
    }

    #[test]
    fn the_linker_form_refuses_what_cannot_link() {
        let e = Embed::choose(LINKER_MAX + 1, Some("linker")).unwrap_err();
        assert!(e.contains("FRAUD_INDEX_EMBED=file"), "{e}");
        assert!(Embed::choose(1, Some("mmap"))
            .unwrap_err()
            .contains("bytes, linker or file"));
    }
}
