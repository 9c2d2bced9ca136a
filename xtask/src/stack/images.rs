//! `cargo xtask stack images`: the static local-runner and a haproxy:2.6 stand-in from Debian's,
//! each `FROM scratch` around a root file system written here (no registry).

use crate::prelude::*;
use crate::util::ScratchImage;

/// The tags docker-compose.yml names.
pub const API: &str = "fraud-api:latest";
pub const HAPROXY: &str = "haproxy:2.6";

/// Builds both images; returns their tags.
pub fn build() -> Result<Vec<&'static str>> {
    haproxy()?;
    api()?;
    Ok(vec![HAPROXY, API])
}

fn api() -> Result<()> {
    log!("building the shipped local-runner (the first build compiles faiss and packs the index: minutes)");
    let bin = util::build_shipped()?.local_runner;
    let passwd = "root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n";
    let mut fs = ScratchImage::default();
    fs.text("etc/group", "root:x:0:\nnogroup:x:65534:\n")
        .text("etc/passwd", passwd)
        .file("local-runner", &bin, 0o755)
        // The socket directory: a named volume mounted here copies this mode on first use.
        .dir("sock", 0o1777);
    let ctx = util::target_dir().join("stack-images/api");
    fs.docker_build(&ctx, &root().join("docker/api/Dockerfile"), API)?;
    log!("fraud-api:latest built ({:.0} MB binary)", util::mb(bin.metadata()?.len()));
    Ok(())
}

fn haproxy() -> Result<()> {
    let hap = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"].map(PathBuf::from);
    let why = "Debian's haproxy is needed for the haproxy:2.6 stand-in; run scripts/setup.sh";
    let hap = hap.into_iter().find(|p| p.exists()).context(why)?;
    let version = util::read(&duct::cmd!(&hap, "-v"))?;
    let first = version.lines().next().unwrap_or("").to_string();
    let why = "docker-compose.yml names haproxy:2.6 (change both together)";
    ensure!(first.starts_with("HAProxy version 2.6."), "{first}: {why}");
    let mut fs = ScratchImage::default();
    // The libraries it loads: the absolute paths `ldd` prints.
    let ldd = util::read(&duct::cmd!("ldd", &hap))?;
    for lib in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
        fs.file(lib.trim_start_matches('/'), Path::new(lib), 0o755);
    }
    // /sock as in the API image, whichever container mounts the volume first.
    fs.file("usr/local/sbin/haproxy", &hap, 0o755)
        .file("usr/local/etc/haproxy/haproxy.cfg", &root().join("docker/haproxy/haproxy.cfg"), 0o644)
        .dir("sock", 0o1777)
        .dir("tmp", 0o1777)
        .dir("var/lib/haproxy", 0o755)
        .text("etc/group", "root:x:0:\nhaproxy:x:99:\n")
        .text("etc/passwd", "root:x:0:0:root:/root:/nonexistent\nhaproxy:x:99:99:haproxy:/var/lib/haproxy:/nonexistent\n");
    let ctx = util::target_dir().join("stack-images/haproxy");
    fs.docker_build(&ctx, &root().join("docker/haproxy/Dockerfile"), HAPROXY)?;
    log!("haproxy:2.6 stand-in built from {first}");
    Ok(())
}
