//! The harness's shared helpers; every command uses this module and it uses none of them.

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Progress for the human, on stderr.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => { eprintln!("[{}] {}", env!("CARGO_PKG_NAME"), format_args!($($arg)*)) };
}
pub use crate::log;

/// A command run in the workspace root.
#[macro_export]
macro_rules! cmd {
    ($($arg:expr),+ $(,)?) => { duct::cmd!($($arg),+).dir($crate::util::root()) };
}
pub use crate::cmd;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is in the workspace").to_path_buf()
}

/// A relative CARGO_TARGET_DIR is relative to where cargo started: absolute before any command.
pub fn absolute_target_dir() -> Result<()> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        std::env::set_var("CARGO_TARGET_DIR", std::path::absolute(dir)?);
    }
    Ok(())
}

/// Cargo's target directory as cargo resolves it (`CARGO_TARGET_DIR`, its config, `target/`).
pub fn target_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let json = cmd!("cargo", "metadata", "--format-version=1", "--no-deps").stderr_null();
        let meta = json.read().ok().and_then(|j| serde_json::from_str::<Value>(&j).ok());
        let dir = meta.and_then(|m| Some(PathBuf::from(m["target_directory"].as_str()?)));
        dir.unwrap_or_else(|| root().join("target"))
    })
}

/// `<target>/xtask/<sub>`, created: where the commands keep their results and logs.
pub fn xtask_dir(sub: &str) -> Result<PathBuf> {
    let d = target_dir().join("xtask").join(sub);
    fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}

/// `program` in the workspace root with `words` (split at spaces), then each flag and its path.
pub fn command(program: &Path, words: &str, paths: &[(&str, &Path)]) -> duct::Expression {
    let paths = paths.iter().flat_map(|(flag, p)| [flag.into(), p.into()]);
    duct::cmd(program, words.split(' ').map(OsString::from).chain(paths)).dir(root())
}

/// A text file, or an error naming it.
pub fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

pub fn run(e: &duct::Expression) -> Result<()> {
    e.run().map(drop).with_context(|| format!("running {e:?}"))
}

pub fn read(e: &duct::Expression) -> Result<String> {
    e.read().with_context(|| format!("running {e:?}"))
}

/// `e` with stdout and stderr both written to `log` (duct redirects from the outside in).
pub fn to_log(e: duct::Expression, log: &Path) -> duct::Expression {
    e.stderr_to_stdout().stdout_path(log)
}

/// A Python venv of the tools: `$<var>`, else `~/.cache/<name>` (scripts/setup.sh's places).
pub fn venv(var: &str, name: &str) -> PathBuf {
    let home = || Path::new(&std::env::var_os("HOME").unwrap_or("/root".into())).join(".cache");
    std::env::var_os(var).map_or_else(|| home().join(name), PathBuf::from)
}

pub fn require(program: &str, why: &str) -> Result<()> {
    let found = duct::cmd!(program, "--version").stdout_null().stderr_null().unchecked().run();
    ensure!(found.is_ok(), "{program} is needed {why}; run scripts/setup.sh (it installs it)");
    Ok(())
}

pub fn now_ms() -> u64 {
    jiff::Timestamp::now().as_millisecond() as u64
}

/// UTC now as `YYYYMMDDTHHMMSSZ` (file names of results).
pub fn stamp() -> String {
    jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// UTC today as `YYYY-MM-DD` (dated records).
pub fn date() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%d").to_string()
}

pub fn loadavg() -> String {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// p50 and p99 are the values at rank `p * n`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Quantiles {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    pub fn of(mut v: Vec<f64>) -> Quantiles {
        v.sort_by(f64::total_cmp);
        let at = |p: f64| v.get(((p * v.len() as f64) as usize).min(v.len().saturating_sub(1)));
        let q = |p| at(p).copied().unwrap_or(f64::NAN);
        let (n, max) = (v.len(), v.last().copied().unwrap_or(f64::NAN));
        Quantiles { n, p50: q(0.5), p99: q(0.99), max }
    }
}

pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

pub fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

pub fn sha256_file(path: &Path) -> Result<String> {
    Ok(sha256(&fs::read(path).with_context(|| format!("cannot read {}", path.display()))?))
}

/// A field of a `/proc/<pid>/status` text in KiB (`VmHWM`, `RssAnon`, ...).
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    let value = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    value.split_whitespace().next()?.parse().ok()
}

/// Asks `probe` every `every` until `Ok(Ok(v))` or `Err`; `Ok(Err(last))` fails only after `limit`.
pub fn poll<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<Result<T, String>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        match probe()? {
            Ok(v) => return Ok(v),
            Err(l) if start.elapsed() >= limit => bail!("{what}: not within {limit:?} (last: {l})"),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// A thread calling `f` on its state every `every` until [`Background::stop`] gives it back.
pub struct Background<S> {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<S>,
}

impl<S: Send + 'static> Background<S> {
    pub fn every(every: Duration, mut s: S, mut f: impl FnMut(&mut S) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let asked = stop.clone();
        let thread = std::thread::spawn(move || {
            while !asked.load(Ordering::Relaxed) {
                let t = Instant::now();
                f(&mut s);
                std::thread::sleep(every.saturating_sub(t.elapsed()));
            }
            s
        });
        Background { stop, thread }
    }

    pub fn stop(self) -> S {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("a background thread panicked")
    }
}

/// A free port on the loopback address.
pub fn free_port() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The harness's HTTP client (loopback, no TLS, keep-alive; every status is an answer).
pub fn http_agent(timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder().timeout_global(Some(timeout));
    config.http_status_as_error(false).build().into()
}

/// Polls `GET url` every 100 ms until it answers 200; fails after `limit` with the last answer.
pub fn wait_200(what: &str, url: &str, limit: Duration) -> Result<()> {
    let agent = http_agent(Duration::from_secs(2));
    poll(what, limit, Duration::from_millis(100), || match agent.get(url).call() {
        Ok(r) if r.status() == 200 => Ok(Ok(())),
        answer => Ok(Err(answer.map_or_else(|e| e.to_string(), |r| r.status().to_string()))),
    })
}

/// One request of a keep-alive HTTP/1.1 connection: its head's lines (the request line first)
/// and its body (by `content-length`); `None` once the client closed it.
pub type Request = (Vec<String>, Vec<u8>);

/// A stand-in HTTP server on loopback for the tests of clients (the AWS SDK's): every
/// connection on a thread of its own, each request answered by `answer` with a status line's
/// tail and a body (`None`: the connection is dropped without an answer).
pub fn stand_in<F>(answer: F) -> Result<SocketAddr>
where
    F: Fn(&Request) -> Option<(String, Vec<u8>)> + Send + Sync + 'static,
{
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let (addr, answer) = (listener.local_addr()?, std::sync::Arc::new(answer));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || -> Option<()> {
                let (mut reader, mut writer) = (BufReader::new(stream.try_clone().ok()?), stream);
                loop {
                    let lines = reader.by_ref().lines().map_while(Result::ok);
                    let head: Vec<String> = lines.take_while(|l| !l.is_empty()).collect();
                    let length =
                        head.iter().filter_map(|l| l.split_once(':')).find_map(|(k, v)| {
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        });
                    let mut body = vec![0; length.unwrap_or(0)];
                    reader.read_exact(&mut body).ok().filter(|_| !head.is_empty())?;
                    let (status, out) = answer(&(head, body))?;
                    let head = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", out.len());
                    writer.write_all(&[head.as_bytes(), &out].concat()).ok()?;
                }
            });
        }
    });
    Ok(addr)
}

/// The value of header `name` in a request's head.
pub fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    let mut all = head.iter().filter_map(|l| l.split_once(':'));
    all.find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim())
}

/// A child process, killed when dropped.
pub struct Killed(pub duct::Handle);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

/// `local-runner serve` on a free loopback port, answering `GET /ready`; killed when dropped.
pub struct Served {
    pub addr: SocketAddr,
    pub server: Killed,
}

impl Served {
    /// Starts `local_runner serve` with its defaults, its output in `log`, and waits for it.
    pub fn start(local_runner: &Path, log: &Path) -> Result<Served> {
        let addr = free_port()?;
        let e = duct::cmd!(local_runner, "serve", "--listen", addr.to_string());
        let s = Served { addr, server: Killed(to_log(e, log).start()?) };
        wait_200("local-runner serve ready", &s.url("/ready"), Duration::from_secs(60))?;
        Ok(s)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

pub fn signal(pid: u32, signal: nix::sys::signal::Signal) -> Result<()> {
    Ok(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)?)
}

/// `docker info` answers with a server version.
pub fn docker_usable() -> Result<()> {
    let e = duct::cmd!("docker", "info", "--format", "{{.ServerVersion}}").stdout_capture();
    let out = e.stderr_capture().unchecked().run().context("cannot start docker")?;
    let why = String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").trim().to_owned();
    let ok = out.status.success() && !out.stdout.trim_ascii().is_empty();
    ensure!(ok, "`docker info` fails: no usable Docker engine ({why})");
    Ok(())
}

/// The one target triple of the static builds (the contest's and Lambda's x86-64 Linux).
pub const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The cargo profile of every build of the harness (Cargo.toml's `[profile.ci]`, which says why).
pub const PROFILE: &str = "ci";

/// RUSTFLAGS of the shipped binaries: the contest CPU (Haswell; Lambda's x86_64 too), static glibc
/// (provided.al2023's is older, the image is `FROM scratch`), release's whole-program codegen.
pub const SHIPPED_RUSTFLAGS: &str = "-C target-cpu=haswell -C target-feature=+crt-static \
    -C lto=fat -C embed-bitcode=yes -C codegen-units=1 -C strip=symbols";

/// clippy's lints (`-D warnings`) on the workspace crates of a real build: no `cargo clippy` run.
/// Without the `CARGO_MANIFEST_DIR` that `cargo xtask` runs under: ring's build script reruns
/// when it changes, and a cargo run by hand would then rebuild the TLS stack.
pub fn linted(e: duct::Expression) -> duct::Expression {
    e.env_remove("CARGO_MANIFEST_DIR")
        .env("RUSTC_WORKSPACE_WRAPPER", "clippy-driver")
        .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
}

/// `cargo <command> --profile ci --workspace --all-features <extra>`, linted: every build resolves
/// the features alike, so each unit is compiled once and reused by every later command.
pub fn cargo_workspace(command: &str, extra: &[&str]) -> duct::Expression {
    let args = [&[command, "--profile", PROFILE, "--workspace", "--all-features"], extra].concat();
    linted(duct::cmd("cargo", args).dir(root()))
}

/// `cargo_workspace("build", bins)` around another index artifact than the workspace's, compiled
/// incrementally: the crates that carry the index are compiled again for each artifact, and
/// incrementally only the code that holds the bytes is (the bootstrap around each of 3 shards:
/// 14.1 s, then 7.1 s each). Not the workspace build's setting: its search ran 6 % slower
/// incrementally (`search_stats`, hot, p99 4.03 against 3.78 us).
pub fn build_around(index: &Path, bins: &[&str]) -> duct::Expression {
    cargo_workspace("build", bins)
        .env("FRAUD_INDEX_ARTIFACT_IN", index)
        .env("CARGO_INCREMENTAL", "1")
}

/// Every target of the workspace (tests, benches, examples): what CI builds once.
pub fn build_workspace() -> Result<()> {
    run(&cargo_workspace("build", &["--all-targets"]))
}

/// A binary of the workspace build, built if it is not yet (`<target>/ci/<name>`).
pub fn built(name: &str) -> Result<PathBuf> {
    run(&cargo_workspace("build", &["--bin", name]))?;
    Ok(target_dir().join(PROFILE).join(name))
}

/// The shipped binaries, from one build (`SHIPPED_RUSTFLAGS`), with the index they embed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Shipped {
    pub local_runner: PathBuf,
    pub bootstrap: PathBuf,
    /// The index artifact the build embedded (the workspace build's, when there is one).
    pub index: Option<PathBuf>,
}

impl Shipped {
    /// The shipped build's binaries (none built) and their index: `FRAUD_INDEX_ARTIFACT_IN`, else
    /// the workspace build's copied to a fixed path with its mtime (an unchanged build input).
    pub fn last() -> Result<Shipped> {
        let dir = target_dir().join(TRIPLE).join(PROFILE);
        let (local_runner, bootstrap) = (dir.join("local-runner"), dir.join("bootstrap"));
        let given = std::env::var_os("FRAUD_INDEX_ARTIFACT_IN").map(PathBuf::from);
        let packed = newest_index_artifact(&target_dir().join(PROFILE).join("build"));
        let copy = target_dir().join("ci-index.idx");
        if let Some(packed) = packed.as_ref().filter(|_| given.is_none()) {
            let modified = fs::metadata(packed)?.modified()?;
            if fs::metadata(&copy).and_then(|m| m.modified()).ok() != Some(modified) {
                copy_atomically(packed, &copy, Some(modified))?;
            }
        }
        Ok(Shipped { local_runner, bootstrap, index: given.or(packed.map(|_| copy)) })
    }
}

/// Builds the shipped binaries (cargo does nothing when they are current), embedding the index of
/// [`Shipped::last`] as it is (checked in full by the build script) rather than packing 3M again.
pub fn build_shipped() -> Result<Shipped> {
    let bins =
        ["-p", "local-runner", "--bin", "local-runner", "-p", "function", "--bin", "bootstrap"];
    let mut e = static_build(&["--features", "function/lambda"], &bins);
    let shipped = Shipped::last()?;
    if let Some(index) = &shipped.index {
        log!("embedding {} in the shipped binaries", index.display());
        e = e.env("FRAUD_INDEX_ARTIFACT_IN", index);
    }
    run(&e)?;
    for bin in [&shipped.local_runner, &shipped.bootstrap] {
        check_static_x86_64(bin).context("the static flags did not apply")?;
    }
    Ok(shipped)
}

/// One more static Lambda binary (the hook, the front) in a cargo run of its own: `features`
/// resolved for it alone, so the front does not link the scorer's index.
pub fn build_static_bin(package: &str, bin: &str, features: Option<&str>) -> Result<PathBuf> {
    let flags = features.map_or(vec![], |f| vec!["--features", f]);
    run(&static_build(&flags, &["-p", package, "--bin", bin]))?;
    let built = target_dir().join(TRIPLE).join(PROFILE).join(bin);
    check_static_x86_64(&built).context("the static flags did not apply")?;
    Ok(built)
}

fn static_build(features: &[&str], bins: &[&str]) -> duct::Expression {
    let args = ["build", "--profile", PROFILE, "--target", TRIPLE];
    linted(duct::cmd("cargo", [&args[..], features, bins].concat()).dir(root()))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", SHIPPED_RUSTFLAGS)
        // The index's form by size (or as `FRAUD_INDEX_EMBED` names it), not the workspace's
        // default (.cargo/config.toml).
        .env("FRAUD_INDEX_EMBED_DEFAULT", "")
}

/// Copies `from` beside `to`, optionally dated `modified`, and renames it over `to`: a binary may
/// map `to` (the file form), and a rename leaves its bytes as they were where a copy would not.
pub fn copy_atomically(from: &Path, to: &Path, modified: Option<SystemTime>) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp.{}", to.display(), std::process::id()));
    fs::copy(from, &tmp).context(format!("cannot copy {} to {}", from.display(), tmp.display()))?;
    modified.map(|t| fs::File::options().write(true).open(&tmp)?.set_modified(t)).transpose()?;
    fs::rename(&tmp, to).context(format!("cannot rename {} to {}", tmp.display(), to.display()))
}

/// Ships a copy of `artifact` into `dir` as the file form maps it, checked in full (`verify_deep`)
/// and against `artifact`'s length and footer (what the binary compares at start).
pub fn ship_index(artifact: &Path, dir: &Path) -> Result<PathBuf> {
    use index_pack::format::{self, FOOTER_LEN};
    use std::io::{Read, Seek, SeekFrom};
    let to = dir.join(index_pack::embed::FILE_NAME);
    copy_atomically(artifact, &to, None)?;
    let mut bytes = format::aligned_copy(&[]);
    std::io::copy(&mut fs::File::open(&to)?, &mut bytes)?;
    format::verify_deep(&bytes).context(format!("{} is not a valid index", to.display()))?;
    let (mut built, mut footer) = (fs::File::open(artifact)?, [0u8; FOOTER_LEN]);
    built.seek(SeekFrom::End(-(FOOTER_LEN as i64)))?;
    built.read_exact(&mut footer)?;
    let same = built.metadata()?.len() == bytes.len() as u64 && bytes.ends_with(&footer);
    let (s, b) = (to.display(), artifact.display());
    ensure!(same, "{s} is not the artifact the binary was built with ({b})");
    Ok(to)
}

/// The newest index `function`'s build script packed below `build`.
pub fn newest_index_artifact(build: &Path) -> Option<PathBuf> {
    let dirs = fs::read_dir(build).ok()?.filter_map(|e| e.ok());
    let dirs = dirs.filter(|e| e.file_name().to_string_lossy().starts_with("function-"));
    let found = dirs.map(|e| e.path().join("out/fraud-index.idx"));
    let dated = found.filter_map(|p| Some((p.metadata().and_then(|m| m.modified()).ok()?, p)));
    dated.max_by_key(|(t, _)| *t).map(|(_, p)| p)
}

pub fn check_static_x86_64(path: &Path) -> Result<()> {
    use object::elf::{EM_X86_64, PT_INTERP};
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let data = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let elf = ElfFile64::<object::Endianness>::parse(&*data)
        .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let (machine, endian) = (elf.elf_header().e_machine(elf.endian()), elf.endian());
    ensure!(machine == EM_X86_64, "{} is not x86-64 (e_machine {machine})", path.display());
    let interp = elf.elf_program_headers().iter().any(|ph| ph.p_type(endian) == PT_INTERP);
    ensure!(!interp, "{} is dynamically linked (it has a program interpreter)", path.display());
    Ok(())
}

enum Node {
    Dir(u32),
    Text(String),
    File(PathBuf, u32),
    Link(String),
}

/// The root file system of a `FROM scratch` image as one tar: owner 0, mtime 0, sorted entries (an
/// unchanged image is a docker cache hit), every parent directory present (mode 755 unless given).
#[derive(Default)]
pub struct ScratchImage(BTreeMap<String, Node>);

impl ScratchImage {
    fn add(&mut self, path: &str, node: Node) -> &mut Self {
        for a in Path::new(path).ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()) {
            self.0.entry(a.to_string_lossy().into()).or_insert(Node::Dir(0o755));
        }
        self.0.insert(path.into(), node);
        self
    }
    pub fn dir(&mut self, path: &str, mode: u32) -> &mut Self {
        self.add(path, Node::Dir(mode))
    }
    pub fn text(&mut self, path: &str, body: &str) -> &mut Self {
        self.add(path, Node::Text(body.into()))
    }
    pub fn file(&mut self, path: &str, from: &Path, mode: u32) -> &mut Self {
        self.add(path, Node::File(from.into(), mode))
    }
    pub fn link(&mut self, path: &str, target: &str) -> &mut Self {
        self.add(path, Node::Link(target.into()))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        fs::create_dir_all(path.parent().context("no parent")?)?;
        let mut tar = tar::Builder::new(fs::File::create(path)?);
        for (name, node) in &self.0 {
            use tar::EntryType::{Directory, Regular, Symlink};
            let mut h = tar::Header::new_gnu();
            // Host files are streamed into the tar: the API binary alone holds the 92 MB index.
            let (kind, mode, size, data): (_, _, u64, Box<dyn std::io::Read>) = match node {
                Node::Dir(m) => (Directory, *m, 0, Box::new(std::io::empty())),
                Node::Text(t) => (Regular, 0o644, t.len() as u64, Box::new(t.as_bytes())),
                Node::File(f, m) => {
                    let file = fs::File::open(f).with_context(|| format!("no {}", f.display()))?;
                    (Regular, *m, file.metadata()?.len(), Box::new(file))
                }
                Node::Link(target) => {
                    h.set_link_name(target)?;
                    (Symlink, 0o777, 0, Box::new(std::io::empty()))
                }
            };
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            // Owner and mtime 0 (the header starts zeroed, but a zeroed field is not an octal 0).
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            tar.append_data(&mut h, name, data)?;
        }
        Ok(tar.into_inner()?.sync_all()?)
    }

    /// The image `tag`: this as `<context>/rootfs.tar`, built with `dockerfile`.
    pub fn docker_build(&self, context: &Path, dockerfile: &Path, tag: &str) -> Result<()> {
        self.write(&context.join("rootfs.tar"))?;
        fs::copy(dockerfile, context.join("Dockerfile"))
            .with_context(|| format!("cannot copy {}", dockerfile.display()))?;
        run(&duct::cmd!("docker", "build", "-q", "-t", tag, context).stdout_null())
    }
}

pub const TEST_SET: &str = "tests/data/test-data.json.gz";

#[derive(Deserialize)]
pub struct Entry {
    pub request: Box<serde_json::value::RawValue>,
    pub expected_approved: bool,
    pub expected_fraud_score: f64,
}

impl Entry {
    /// Sends the request to `local-runner serve` at `base`; a wrong answer says what came instead.
    pub fn score(&self, agent: &ureq::Agent, base: &str) -> Result<(), String> {
        let post = agent.post(format!("{base}/fraud-score")).content_type("application/json");
        let mut r = post.send(self.request.get()).map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| format!("reading the answer: {e}"))?;
        self.judge(r.status().as_u16(), &body)
    }

    pub fn judge(&self, status: u16, body: &str) -> Result<(), String> {
        (status == 200).then_some(()).ok_or_else(|| format!("HTTP {status}: {body}"))?;
        let a: Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
        let right = a["approved"] == self.expected_approved
            && a["fraud_score"] == self.expected_fraud_score;
        right.then_some(()).ok_or_else(|| format!("wrong answer {body} for {}", self.request.get()))
    }
}

/// Scores `entries` at `base` (`Entry::score`): how many were answered wrong, and the first.
pub fn score_all(entries: &[Entry], base: &str) -> (usize, Option<String>) {
    let agent = http_agent(Duration::from_secs(5));
    let mut wrong = entries.iter().filter_map(|e| e.score(&agent, base).err());
    let first = wrong.next();
    (first.iter().count() + wrong.count(), first)
}

/// The public test set's entries.
pub fn test_entries() -> Result<Vec<Entry>> {
    entries_of(&root().join(TEST_SET))
}

/// The entries of a test file in the contest's JSON layout, gzipped.
pub fn entries_of(path: &Path) -> Result<Vec<Entry>> {
    #[derive(Deserialize)]
    struct TestFile {
        entries: Vec<Entry>,
    }
    let file = fs::File::open(path).with_context(|| format!("no {}", path.display()))?;
    let text = std::io::read_to_string(flate2::read::GzDecoder::new(file))?;
    Ok(serde_json::from_str::<TestFile>(&text)?.entries)
}

pub fn spread(len: usize, n: usize) -> Vec<usize> {
    (0..len).step_by((len / n.max(1)).max(1)).take(n).collect()
}

pub fn last_json<T: for<'de> Deserialize<'de>>(stdout: &str, what: &str) -> Result<T> {
    let line = stdout.lines().last().with_context(|| format!("{what} printed nothing"))?;
    serde_json::from_str(line).with_context(|| format!("{what}: unexpected last line {line:?}"))
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Ends a command: prints `<name>: PASS|FAIL <figures>` (a CI log is grepped for it), writes it
/// with `detail` to `<target>/xtask/<name>.json` and fails on a failure (a non-zero exit).
pub fn verdict(name: &str, passed: bool, figures: &str, detail: &impl Serialize) -> Result<()> {
    let path = xtask_dir("")?.join(format!("{}.json", name.replace(' ', "-")));
    let record = serde_json::json!({"command": name, "passed": passed, "figures": figures, "detail": detail});
    write_json(&path, &record)?;
    println!("{name}: {} {figures}", if passed { "PASS" } else { "FAIL" });
    ensure!(passed, "{name} failed (details in {})", path.display());
    Ok(())
}

/// The messages of the checks that failed (`true`: a problem), in order.
pub fn failed(checks: impl IntoIterator<Item = (bool, String)>) -> Vec<String> {
    checks.into_iter().filter_map(|(bad, what)| bad.then_some(what)).collect()
}

/// `; problems: a; b`, or nothing.
pub fn problems_suffix(problems: &[String]) -> String {
    let joined = (!problems.is_empty()).then(|| format!("; problems: {}", problems.join("; ")));
    joined.unwrap_or_default()
}

pub fn list<T>(it: impl IntoIterator<Item = T>, f: impl FnMut(T) -> String) -> String {
    it.into_iter().map(f).collect::<Vec<_>>().join(", ")
}
