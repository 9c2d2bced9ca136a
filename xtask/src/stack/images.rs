//! `cargo xtask stack images`: the two images docker-compose.yml names, built without any
//! registry:
//! - `fraud-api:latest`: FROM scratch with the static local-runner (index embedded) for the
//!   contest CPU (`-C target-cpu=haswell`), run as uid 65534;
//! - `haproxy:2.6`: a stand-in for the public image from Debian's haproxy package (the binary and
//!   every library `ldd` lists, at the same paths).
//!
//! The root file systems are written as tar archives directly (numeric owners, mtime 0, sorted),
//! `ADD`ed by docker/api/Dockerfile and docker/haproxy/Dockerfile. Cargo and docker only redo
//! what changed.

use crate::cmd::{cmd, output, root, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

const TRIPLE: &str = "x86_64-unknown-linux-gnu";

#[derive(clap::Args, Clone)]
pub struct Build {
    /// Cargo target dir of the static build (target/image by default, so target/ is not
    /// invalidated; CI may pass target/ to reuse the host build of faiss and the index packer).
    #[arg(long, env = "STACK_TARGET_DIR")]
    pub target_dir: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Image {
    Api,
    Haproxy,
}

/// Builds the images (both unless `--only`); returns their tags.
pub fn build(args: &Build, only: Option<Image>) -> Result<Vec<&'static str>> {
    let mut built = Vec::new();
    if only != Some(Image::Api) {
        haproxy()?;
        built.push("haproxy:2.6");
    }
    if only != Some(Image::Haproxy) {
        api(args
            .target_dir
            .clone()
            .unwrap_or_else(|| root().join("target/image")))?;
        built.push("fraud-api:latest");
    }
    Ok(built)
}

/// A root file system being written: entries are added in sorted order by the caller.
struct Rootfs(tar::Builder<std::fs::File>);

impl Rootfs {
    fn new(path: &Path) -> Result<Rootfs> {
        std::fs::create_dir_all(path.parent().unwrap())?;
        Ok(Rootfs(tar::Builder::new(std::fs::File::create(path)?)))
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(size);
        h
    }

    fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        self.0.append_data(&mut h, path, std::io::empty())?;
        Ok(())
    }

    fn text(&mut self, path: &str, body: &str) -> Result<()> {
        let mut h = Self::header(tar::EntryType::Regular, 0o644, body.len() as u64);
        self.0.append_data(&mut h, path, body.as_bytes())?;
        Ok(())
    }

    /// A host file (symlinks resolved) at `path` in the image.
    fn file(&mut self, path: &str, from: &Path, mode: u32) -> Result<()> {
        let f =
            std::fs::File::open(from).with_context(|| format!("cannot open {}", from.display()))?;
        let mut h = Self::header(tar::EntryType::Regular, mode, f.metadata()?.len());
        self.0.append_data(&mut h, path, f)?;
        Ok(())
    }

    fn finish(self) -> Result<()> {
        self.0.into_inner()?.sync_all()?;
        Ok(())
    }
}

fn docker_build(context: &Path, dockerfile: &str, tag: &str) -> Result<()> {
    std::fs::copy(root().join(dockerfile), context.join("Dockerfile"))?;
    run(cmd("docker", ["build", "-q", "-t", tag]).arg(context))
}

fn api(target_dir: PathBuf) -> Result<()> {
    crate::log!(
        "building the static local-runner in {} (the first build compiles faiss and packs the index: minutes)",
        target_dir.display()
    );
    // --target keeps RUSTFLAGS off build scripts and host tools (faiss, the index packer).
    run(cmd(
        "cargo",
        [
            "build",
            "--release",
            "-p",
            "local-runner",
            "--target",
            TRIPLE,
        ],
    )
    .arg("--target-dir")
    .arg(&target_dir)
    .env(
        "RUSTFLAGS",
        "-C target-cpu=haswell -C target-feature=+crt-static",
    ))?;
    let bin = target_dir.join(TRIPLE).join("release/local-runner");
    // ldd says "statically linked" or "not a dynamic executable"; a dynamic one lists "=>".
    let ldd = cmd("ldd", [&bin]).output()?;
    if String::from_utf8_lossy(&ldd.stdout).contains("=>") {
        bail!(
            "{} is dynamically linked; expected a static binary",
            bin.display()
        );
    }
    let ctx = root().join("target/stack-images/api");
    let mut fs = Rootfs::new(&ctx.join("rootfs.tar"))?;
    fs.dir("etc", 0o755)?;
    fs.text("etc/group", "root:x:0:\nnogroup:x:65534:\n")?;
    fs.text(
        "etc/passwd",
        "root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n",
    )?;
    fs.file("local-runner", &bin, 0o755)?;
    // The socket directory: a named volume mounted here copies this mode on first use.
    fs.dir("sock", 0o1777)?;
    fs.finish()?;
    docker_build(&ctx, "docker/api/Dockerfile", "fraud-api:latest")?;
    let mb = bin.metadata()?.len() as f64 / 1048576.0;
    crate::log!("fraud-api:latest built ({mb:.0} MB binary)");
    Ok(())
}

/// The libraries a dynamic binary loads, as `ldd` lists them (absolute paths).
fn libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let text = output(&mut cmd("ldd", [bin]))?;
    Ok(text
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect())
}

fn haproxy() -> Result<()> {
    let hap = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("Debian's haproxy is needed for the haproxy:2.6 stand-in; run scripts/setup.sh")?;
    let version = output(&mut cmd(hap.to_str().unwrap(), ["-v"]))?;
    let first = version.lines().next().unwrap_or("").to_string();
    if !first.starts_with("HAProxy version 2.6.") {
        bail!("{first}: docker-compose.yml names haproxy:2.6 (change both together)");
    }
    let ctx = root().join("target/stack-images/haproxy");
    let mut fs = Rootfs::new(&ctx.join("rootfs.tar"))?;
    // Parent directories first, each once, in sorted order with the files.
    let mut files: Vec<(String, PathBuf, u32)> = libraries(&hap)?
        .into_iter()
        .map(|l| {
            (
                l.to_string_lossy().trim_start_matches('/').to_string(),
                l,
                0o755,
            )
        })
        .collect();
    files.push(("usr/local/sbin/haproxy".into(), hap.clone(), 0o755));
    let cfg = root().join("docker/haproxy/haproxy.cfg");
    files.push(("usr/local/etc/haproxy/haproxy.cfg".into(), cfg, 0o644));
    files.sort();
    let mut dirs: Vec<String> = vec![
        "etc".into(),
        "sock".into(),
        "tmp".into(),
        "var/lib/haproxy".into(),
    ];
    for (p, _, _) in &files {
        let mut d = Path::new(p).parent();
        while let Some(x) = d.filter(|x| !x.as_os_str().is_empty()) {
            dirs.push(x.to_string_lossy().into_owned());
            d = x.parent();
        }
    }
    dirs.push("var".into());
    dirs.sort();
    dirs.dedup();
    for d in &dirs {
        // /tmp and /sock as in the API image (1777), so the shared volume gets the same mode
        // whichever container mounts it first.
        let mode = if d == "tmp" || d == "sock" {
            0o1777
        } else {
            0o755
        };
        fs.dir(d, mode)?;
    }
    fs.text("etc/group", "root:x:0:\nhaproxy:x:99:\n")?;
    fs.text(
        "etc/passwd",
        "root:x:0:0:root:/root:/nonexistent\nhaproxy:x:99:99:haproxy:/var/lib/haproxy:/nonexistent\n",
    )?;
    for (p, from, mode) in &files {
        fs.file(p, from, *mode)?;
    }
    fs.finish()?;
    docker_build(&ctx, "docker/haproxy/Dockerfile", "haproxy:2.6")?;
    crate::log!("haproxy:2.6 stand-in built from {first}");
    Ok(())
}
