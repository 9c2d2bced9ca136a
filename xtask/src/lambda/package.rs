//! The one static build of `bootstrap` (provided.al2023's glibc is older than many hosts) and its
//! zip; the workspace's index is reused from a fixed path (`LAMBDA_PACK_INDEX=1` packs anew).

use crate::util::{self, log, TRIPLE};
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const RUSTFLAGS: &str = "-C target-feature=+crt-static -C strip=symbols";
pub const LIMIT_ZIPPED_DIRECT: u64 = 50 << 20;
pub const LIMIT_UNZIPPED: u64 = 250 << 20;

#[derive(Clone, Debug, Default, Serialize)]
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
        let copied = util::sha256_file(&dest)?;
        ensure!(copied == self.sha256, "{} differs from the tested bootstrap", dest.display());
        log!("copied the tested bootstrap to {}", dest.display());
        Ok(())
    }
}

fn built_dir() -> PathBuf {
    util::target_dir().join(TRIPLE).join("release")
}

pub fn build(skip_build: bool) -> Result<Package> {
    let reuse = util::target_dir().join("lambda-index.idx");
    let packed = || {
        util::newest_index_artifact(&built_dir().join("build")).context("no index artifact packed")
    };
    let given = std::env::var_os("FRAUD_INDEX_ARTIFACT_IN").map(PathBuf::from);
    if skip_build {
        return assemble(given.or(reuse.exists().then_some(reuse)).map_or_else(packed, Ok)?);
    }
    let reused = if given.is_some() { given } else { reusable_index(reuse)? };
    if util::run(&cargo(reused.as_deref())).is_err() {
        ensure!(reused.is_some(), "the bootstrap build failed");
        log!("build failed with the reused index artifact; packing from the references");
        util::run(&cargo(None))?;
    }
    assemble(reused.map_or_else(packed, Ok)?)
}

fn cargo(index: Option<&Path>) -> duct::Expression {
    let args =
        format!("build --release --target {TRIPLE} -p function --features lambda --bin bootstrap");
    let e = duct::cmd("cargo", args.split(' ')).dir(util::root());
    let e = e.env_remove("CARGO_ENCODED_RUSTFLAGS").env("RUSTFLAGS", RUSTFLAGS);
    match index {
        Some(a) => e.env("FRAUD_INDEX_ARTIFACT_IN", a),
        None => e.env_remove("FRAUD_INDEX_ARTIFACT_IN"),
    }
}

fn assemble(index_artifact: PathBuf) -> Result<Package> {
    let built = built_dir().join("bootstrap");
    util::check_static_x86_64(&built).context("the static flags did not apply")?;
    let package_dir = util::target_dir().join("lambda-package");
    let dir = package_dir.join("bootstrap");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let bootstrap = dir.join("bootstrap");
    std::fs::copy(&built, &bootstrap)?;
    // `bootstrap` (mode 755) deflated at zlib's default level, as `sam deploy` packages it.
    let zip = package_dir.join("bootstrap.zip");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&zip)?);
    let deflated = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
    z.start_file("bootstrap", deflated.compression_method(zip::CompressionMethod::Deflated))?;
    z.write_all(&std::fs::read(&bootstrap)?)?;
    z.finish()?;
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len());
    let (sha256, zipped_bytes, unzipped_bytes) =
        (util::sha256_file(&bootstrap)?, len(&zip)?, len(&bootstrap)?);
    Ok(Package { dir, bootstrap, zip, sha256, zipped_bytes, unzipped_bytes, index_artifact })
}

/// The workspace build's index artifact copied to `reuse` (mtime kept), or `None` to pack.
fn reusable_index(reuse: PathBuf) -> Result<Option<PathBuf>> {
    if std::env::var("LAMBDA_PACK_INDEX").is_ok_and(|v| v == "1") {
        return Ok(None);
    }
    let newest = util::newest_index_artifact(&util::target_dir().join("release/build"));
    let Some(artifact) = newest else { return Ok(None) };
    // An artifact older than the packer's sources may be in an older format.
    let packed = std::fs::metadata(&artifact)?.modified()?;
    let sources = [util::root().join("index-pack"), util::root().join("function/build.rs")];
    if sources.iter().map(|p| newest_rs(p)).collect::<Result<Vec<_>>>()?.iter().any(|t| *t > packed)
    {
        log!("not reusing {}: index-pack changed since", artifact.display());
        return Ok(None);
    }
    if std::fs::read(&reuse).ok() != Some(std::fs::read(&artifact)?) {
        std::fs::copy(&artifact, &reuse)?;
        std::fs::File::options().write(true).open(&reuse)?.set_modified(packed)?;
    }
    log!("index artifact reused from {}", artifact.display());
    Ok(Some(reuse))
}

/// Newest modification time of the `.rs` files at or below `path` (`target/` left out).
fn newest_rs(path: &Path) -> Result<SystemTime> {
    let meta = std::fs::metadata(path).with_context(|| format!("no {}", path.display()))?;
    if meta.is_file() {
        let rs = path.extension().is_some_and(|e| e == "rs");
        return Ok(if rs { meta.modified()? } else { SystemTime::UNIX_EPOCH });
    }
    let entries = std::fs::read_dir(path)?.map(|e| Ok(e?.path())).collect::<Result<Vec<_>>>()?;
    let kept = entries.iter().filter(|p| p.file_name().is_some_and(|n| n != "target"));
    kept.map(|p| newest_rs(p)).try_fold(SystemTime::UNIX_EPOCH, |t, n| Ok(t.max(n?)))
}
