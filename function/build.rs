//! With feature `embedded-index`, builds the index artifact that `src/index.rs` embeds.
//!
//! Inputs (a change to any of them rebuilds the artifact, nothing else does):
//! - `FRAUD_REFERENCES`: the references file, default `resources/references.json.gz`;
//! - `FRAUD_INDEX_CODEC`: `i16` (default, exact) or `fp16`;
//! - `FRAUD_REFERENCES_SHA256`: the digest to require, default the contest's; `any` accepts
//!   any data;
//! - `FRAUD_INDEX_ARTIFACT_IN`: use this prebuilt artifact instead of packing (it is checked);
//! - `FRAUD_INDEX_EMBED`: `bytes` (`include_bytes_aligned!`), `linker` (`.incbin` in a section
//!   of its own) or `file` (the artifact beside the binary, mapped at start); by default by size
//!   (`index_pack::embed` holds the rule and says why);
//! - `FRAUD_INDEX_EMBED_DEFAULT`: the form when none is named (`linker` in the workspace's own
//!   builds, .cargo/config.toml; empty in the shipped build: by size);
//! - the index-pack library itself (cargo rebuilds this script when it changes).

// The packer (and faiss with it) is a build dependency only with `embedded-index`, so crates
// that use `function` without the embedded index (the fuzz targets) do not compile faiss.
#[cfg(not(feature = "embedded-index"))]
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}

#[cfg(feature = "embedded-index")]
fn main() {
    use std::env;
    use std::path::PathBuf;

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(fraud_index_linker)");
    println!("cargo:rustc-check-cfg=cfg(fraud_index_file)");
    for var in [
        "FRAUD_REFERENCES",
        "FRAUD_INDEX_CODEC",
        "FRAUD_REFERENCES_SHA256",
        "FRAUD_INDEX_ARTIFACT_IN",
        "FRAUD_INDEX_EMBED",
        "FRAUD_INDEX_EMBED_DEFAULT",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    // A given artifact is kept under a name of its own, so that it never replaces the one this
    // script packed (`cargo xtask build --shipped` embeds the newest `fraud-index.idx`).
    let prebuilt = env::var_os("FRAUD_INDEX_ARTIFACT_IN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let out = out_dir.join(match prebuilt {
        Some(_) => "fraud-index-given.idx",
        None => "fraud-index.idx",
    });
    if let Some(prebuilt) = prebuilt {
        println!("cargo:rerun-if-changed={}", prebuilt.display());
        let bytes = read_aligned(&prebuilt);
        check(&bytes);
        // A new file renamed into place: the file form maps this file, and a mapped file must
        // never change under its reader.
        index_pack::write_atomically(&out, &bytes).unwrap();
    } else {
        let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
        let refs = env::var_os("FRAUD_REFERENCES")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../resources/references.json.gz"));
        println!("cargo:rerun-if-changed={}", refs.display());
        let expect = match env::var("FRAUD_REFERENCES_SHA256").ok().as_deref() {
            None | Some("") => index_pack::source::Expect::Contest,
            Some("any") => index_pack::source::Expect::Any,
            Some(s) => index_pack::source::Expect::Sha256(s.to_string()),
        };
        let codec = match env::var("FRAUD_INDEX_CODEC").ok().as_deref() {
            None | Some("") | Some("i16") => index_pack::CodecKind::I16,
            Some("fp16") => index_pack::CodecKind::F16,
            Some(other) => panic!("FRAUD_INDEX_CODEC must be i16 or fp16, not {other:?}"),
        };
        // What the artifact was packed from, with this script's own build (which changes with
        // the packer). When only another input changed (the harness builds a binary around
        // another index, then back), the artifact is current: 3M are not packed again (24 s).
        let stamp_path = out.with_extension("idx.inputs");
        let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let stamp = format!(
            "{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            refs.display(),
            modified(&refs),
            env::var("FRAUD_REFERENCES_SHA256").ok(),
            codec,
            env::current_exe().ok(),
            env::current_exe().ok().and_then(|e| modified(&e)),
        );
        let current =
            out.exists() && std::fs::read_to_string(&stamp_path).ok() == Some(stamp.clone());
        if !current {
            let _ = std::fs::remove_file(&stamp_path);
            pack(&refs, &expect, codec, &out);
            std::fs::write(&stamp_path, stamp).unwrap();
        }
    }
    emit(&out_dir, &out);
}

/// Packs `refs` into `out`: beside it, checked, then renamed into place, so that
/// `fraud-index.idx` is only ever a checked artifact.
#[cfg(feature = "embedded-index")]
fn pack(
    refs: &std::path::Path,
    expect: &index_pack::source::Expect,
    codec: index_pack::CodecKind,
    out: &std::path::Path,
) {
    let opts = index_pack::PackOptions {
        codec,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let packed = out.with_extension("idx.packed");
    let written = index_pack::pack_file(refs, expect, &opts, &packed)
        .unwrap_or_else(|e| panic!("packing {} failed: {e:#}", refs.display()));
    check(&read_aligned(&packed));
    std::fs::rename(&packed, out).unwrap();
    println!(
        "cargo:warning=packed {} ({} codec) into {} bytes in {:.1} s, artifact SHA-256 {}",
        refs.display(),
        codec.name(),
        written.bytes,
        started.elapsed().as_secs_f64(),
        written.sha256
    );
}

/// Tells rustc which artifact to embed (`out`) and in which form.
#[cfg(feature = "embedded-index")]
fn emit(out_dir: &std::path::Path, out: &std::path::Path) {
    use std::env;
    println!("cargo:rustc-env=FRAUD_INDEX_ARTIFACT={}", out.display());
    let len = std::fs::metadata(out).unwrap().len();
    println!("cargo:rustc-env=FRAUD_INDEX_ARTIFACT_LEN={len}");
    let requested = env::var("FRAUD_INDEX_EMBED").ok();
    let default = env::var("FRAUD_INDEX_EMBED_DEFAULT").ok();
    let form = index_pack::embed::choose_for_build(len, requested.as_deref(), default.as_deref())
        .unwrap_or_else(|e| panic!("{e}"));
    match form {
        index_pack::embed::Embed::Bytes => {}
        index_pack::embed::Embed::Linker => {
            // The path goes into an assembler string: it must not need quoting.
            let path = out.display().to_string();
            assert!(
                !path.contains(['"', '\\', '\n']),
                "OUT_DIR {path} cannot be named in .incbin"
            );
            println!("cargo:rustc-cfg=fraud_index_linker");
        }
        index_pack::embed::Embed::File => {
            // The binary keeps the artifact's footer (its format version, archive length and
            // CRC32) to recognise the file it maps at start.
            use std::io::{Read, Seek, SeekFrom};
            let mut footer = [0u8; index_pack::format::FOOTER_LEN];
            let mut file = std::fs::File::open(out).unwrap();
            file.seek(SeekFrom::End(-(footer.len() as i64))).unwrap();
            file.read_exact(&mut footer).unwrap();
            let footer_path = out_dir.join("fraud-index-footer.bin");
            index_pack::write_atomically(&footer_path, &footer).unwrap();
            println!(
                "cargo:rustc-env=FRAUD_INDEX_FOOTER={}",
                footer_path.display()
            );
            println!("cargo:rustc-cfg=fraud_index_file");
        }
    }
}

/// Reads a file once, into the alignment the checks need (an artifact can be gigabytes).
#[cfg(feature = "embedded-index")]
fn read_aligned(path: &std::path::Path) -> impl std::ops::Deref<Target = [u8]> {
    let mut bytes = index_pack::format::aligned_copy(&[]);
    let mut file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    std::io::copy(&mut file, &mut bytes)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    bytes
}

/// Full check before embedding (of bytes from [`read_aligned`]): footer, CRC32, archive
/// validation, layout, values.
#[cfg(feature = "embedded-index")]
fn check(bytes: &[u8]) {
    if let Err(e) = index_pack::format::verify_deep(bytes) {
        panic!("the index artifact is not valid: {e}");
    }
}
