//! The one build of the Lambda binary, used by the emulator tests and (through the Makefile) by
//! `sam build`: `cargo build --release --target x86_64-unknown-linux-gnu -p function --features
//! lambda --bin bootstrap` with static glibc and no symbols, then the package Lambda wants
//! (`bootstrap` alone, zipped) in target/lambda-package/.
//!
//! - Static: provided.al2023 has glibc 2.34, older than many build hosts; a static binary needs
//!   nothing from the image. The flags are pinned here (`RUSTFLAGS` from the environment is
//!   replaced), and the result is checked: an x86-64 ELF with no program interpreter.
//! - With an explicit `--target`, only the target crates get the flags, so build scripts and
//!   their dependencies are shared with the workspace build.
//! - The index: the artifact the workspace release build already packed is reused
//!   (`FRAUD_INDEX_ARTIFACT_IN`; build.rs checks it in full before embedding) instead of packing
//!   3M references again. The copy keeps a fixed path and the source's mtime, so build.rs reruns
//!   only when the content changes. `LAMBDA_PACK_INDEX=1`, an artifact older than the packer's
//!   sources, or a build that fails with the reused artifact pack from the references instead.

use super::target_dir;
use crate::cmd::{cmd, root, run};
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const TARGET: &str = "x86_64-unknown-linux-gnu";
pub const RUSTFLAGS: &str = "-C target-feature=+crt-static -C strip=symbols";
const CARGO_ARGS: [&str; 10] = [
    "build",
    "--release",
    "--target",
    TARGET,
    "-p",
    "function",
    "--features",
    "lambda",
    "--bin",
    "bootstrap",
];
/// Lambda's limits on a zip package: direct upload (zipped) and unzipped size.
pub const LIMIT_ZIPPED_DIRECT: u64 = 50 << 20;
pub const LIMIT_UNZIPPED: u64 = 250 << 20;

/// The tested package.
#[derive(Clone, Debug, Serialize)]
pub struct Package {
    /// The directory the emulator runs (holds `bootstrap` only).
    pub dir: PathBuf,
    pub bootstrap: PathBuf,
    pub zip: PathBuf,
    pub sha256: String,
    pub zipped_bytes: u64,
    pub unzipped_bytes: u64,
    /// The index artifact embedded in the binary.
    pub index_artifact: PathBuf,
}

impl Package {
    /// Copies the tested binary to `dir/bootstrap` (for `sam build`) and checks the copy.
    pub fn copy_to(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let dest = dir.join("bootstrap");
        std::fs::copy(&self.bootstrap, &dest)
            .with_context(|| format!("cannot copy the bootstrap to {}", dest.display()))?;
        ensure!(
            sha256_file(&dest)? == self.sha256,
            "{} differs from the tested bootstrap after the copy",
            dest.display()
        );
        crate::log!("copied the tested bootstrap to {}", dest.display());
        Ok(())
    }
}

/// Megabytes (MiB) for messages.
pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn package_dir() -> PathBuf {
    target_dir().join("lambda-package")
}

/// Builds the bootstrap and its package.
pub fn build() -> Result<Package> {
    let reused = reusable_index()?;
    let mut cargo = cargo_command(reused.as_deref());
    if run(&mut cargo).is_err() {
        if reused.is_none() {
            bail!("the bootstrap build failed");
        }
        crate::log!("build failed with the reused index artifact; packing from the references");
        run(&mut cargo_command(None))?;
    }
    let artifact = match reused {
        Some(a) => a,
        None => newest_artifact(&target_dir().join(TARGET).join("release/build"))?
            .context("the build packed no index artifact")?,
    };
    assemble(artifact)
}

/// The package of the last build, as it is (`--skip-build`).
pub fn existing() -> Result<Package> {
    let reused = target_dir().join("lambda-index.idx");
    let artifact = if let Ok(given) = std::env::var("FRAUD_INDEX_ARTIFACT_IN") {
        PathBuf::from(given)
    } else if reused.exists() {
        reused
    } else {
        newest_artifact(&target_dir().join(TARGET).join("release/build"))?
            .context("no index artifact: build first")?
    };
    assemble(artifact)
}

fn cargo_command(index: Option<&Path>) -> std::process::Command {
    let mut c = cmd("cargo", CARGO_ARGS);
    c.env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", RUSTFLAGS);
    match index {
        Some(a) => c.env("FRAUD_INDEX_ARTIFACT_IN", a),
        None => c.env_remove("FRAUD_INDEX_ARTIFACT_IN"),
    };
    c
}

/// Checks the binary and lays out the package: `lambda-package/bootstrap/bootstrap` (what the
/// emulator runs) and `lambda-package/bootstrap.zip`.
fn assemble(index_artifact: PathBuf) -> Result<Package> {
    let built = target_dir().join(TARGET).join("release/bootstrap");
    check_static_x86_64(&built)?;
    let dir = package_dir().join("bootstrap");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let bootstrap = dir.join("bootstrap");
    std::fs::copy(&built, &bootstrap)?;
    let zip = package_dir().join("bootstrap.zip");
    write_zip(&bootstrap, &zip)?;
    Ok(Package {
        sha256: sha256_file(&bootstrap)?,
        zipped_bytes: std::fs::metadata(&zip)?.len(),
        unzipped_bytes: std::fs::metadata(&bootstrap)?.len(),
        dir,
        bootstrap,
        zip,
        index_artifact,
    })
}

/// The index artifact to embed, copied to target/lambda-index.idx, or `None` to pack.
fn reusable_index() -> Result<Option<PathBuf>> {
    if let Ok(given) = std::env::var("FRAUD_INDEX_ARTIFACT_IN") {
        return Ok(Some(PathBuf::from(given)));
    }
    if std::env::var("LAMBDA_PACK_INDEX").is_ok_and(|v| v == "1") {
        return Ok(None);
    }
    let Some(artifact) = newest_artifact(&target_dir().join("release/build"))? else {
        return Ok(None);
    };
    // An artifact older than the packer's sources may be in an older format.
    let packed = std::fs::metadata(&artifact)?.modified()?;
    let sources =
        newest_rs(&root().join("index-pack"))?.max(newest_rs(&root().join("function/build.rs"))?);
    if sources > packed {
        crate::log!(
            "not reusing {}: index-pack changed since",
            artifact.display()
        );
        return Ok(None);
    }
    let reuse = target_dir().join("lambda-index.idx");
    if std::fs::read(&reuse).ok() != Some(std::fs::read(&artifact)?) {
        std::fs::copy(&artifact, &reuse)?;
        std::fs::File::options()
            .write(true)
            .open(&reuse)?
            .set_modified(packed)?;
    }
    crate::log!("index artifact reused from {}", artifact.display());
    Ok(Some(reuse))
}

/// The newest `function-*/out/fraud-index.idx` below a `build/` directory.
fn newest_artifact(build: &Path) -> Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(build) else {
        return Ok(None);
    };
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for e in entries {
        let e = e?;
        if !e.file_name().to_string_lossy().starts_with("function-") {
            continue;
        }
        let idx = e.path().join("out/fraud-index.idx");
        if let Ok(m) = std::fs::metadata(&idx) {
            let t = m.modified()?;
            if best.as_ref().is_none_or(|(b, _)| t > *b) {
                best = Some((t, idx));
            }
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Newest modification time of the `.rs` files at or below `path`.
fn newest_rs(path: &Path) -> Result<SystemTime> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        return Ok(if path.extension().is_some_and(|e| e == "rs") {
            meta.modified()?
        } else {
            SystemTime::UNIX_EPOCH
        });
    }
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(path)? {
        let p = e?.path();
        if p.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        newest = newest.max(newest_rs(&p)?);
    }
    Ok(newest)
}

/// Fails unless `path` is an x86-64 ELF executable without a program interpreter (static).
pub fn check_static_x86_64(path: &Path) -> Result<()> {
    use object::elf::{EM_X86_64, PT_INTERP};
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let elf = ElfFile64::<object::Endianness>::parse(&*data)
        .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let (header, endian) = (elf.elf_header(), elf.endian());
    ensure!(
        header.e_machine(endian) == EM_X86_64,
        "{} is not an x86-64 binary (e_machine {})",
        path.display(),
        header.e_machine(endian)
    );
    let interp = elf
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == PT_INTERP);
    ensure!(
        !interp,
        "{} is dynamically linked (it has a program interpreter): the static flags did not apply",
        path.display()
    );
    Ok(())
}

/// Zips one executable as `bootstrap` (mode 755) with deflate at zlib's default level, as
/// `sam deploy` packages it.
fn write_zip(exe: &Path, zip_path: &Path) -> Result<()> {
    use zip::write::SimpleFileOptions;
    let mut z = zip::ZipWriter::new(std::fs::File::create(zip_path)?);
    let options = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o755);
    z.start_file("bootstrap", options)?;
    z.write_all(&std::fs::read(exe)?)?;
    z.finish()?;
    Ok(())
}

/// Lower-case hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
