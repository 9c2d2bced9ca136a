//! `cargo xtask scale`: the path to reference sets other than the contest's, kept working (the
//! CI-sized check of docs/SCALING.md). A synthetic set of a few hundred thousand references
//! drawn the way the contest's generator draws its own is packed, embedded in `local-runner` (by
//! the linker, the form of indexes over 256 MiB) and held exact against the labeller's brute
//! force over the same set (vectors, the 5 neighbours and the vote of generated and adversarial
//! queries); then shipped beside `local-runner` (the file form, beyond 1,920 MiB), which must
//! refuse another artifact, and served: labelled payloads sent over HTTP get the labeller's
//! answers.
//!
//! It rebuilds the workspace's `local-runner` around the synthetic index (CI runs it last); the
//! next build without `FRAUD_INDEX_ARTIFACT_IN` embeds the contest's again.

use crate::util::{self, cmd, log};
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// References in the synthetic set.
    #[arg(long, default_value_t = 300_000)]
    references: usize,
    /// Labelled payloads served over HTTP.
    #[arg(long, default_value_t = 2_000)]
    served: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Serialize, Default)]
struct Report {
    references: usize,
    artifact_bytes: u64,
    pack_s: f64,
    build_s: f64,
    neighbours: serde_json::Value,
    file_build_s: f64,
    /// What the file form said when handed a file of another length, then the artifact with
    /// another footer (it must refuse both).
    file_form_refusals: Vec<String>,
    served: usize,
    served_wrong: usize,
    first_wrong: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let dir = util::xtask_dir("scale")?;
    let (refs, index, tests) =
        (dir.join("references.json.gz"), dir.join("index.idx"), dir.join("tests.json.gz"));
    let (labeller, index_pack) = (util::built("labeller")?, util::built("index-pack")?);
    let (n, seed) = (a.references.to_string(), a.seed.to_string());
    log!("scale: {n} synthetic references (seed {seed}), packed");
    util::run(&cmd!(
        &labeller,
        "generate-references",
        "--count",
        &n,
        "--seed",
        &seed,
        "--out",
        &refs
    ))?;
    let t_pack = Instant::now();
    let e = cmd!(
        &index_pack,
        "build",
        "--references",
        &refs,
        "--output",
        &index,
        "--accept-any-references"
    );
    let packed: serde_json::Value = util::last_json(&util::read(&e)?, "index-pack build")?;
    let mut r = Report {
        references: a.references,
        pack_s: t_pack.elapsed().as_secs_f64(),
        ..Report::default()
    };
    r.artifact_bytes = packed["bytes"].as_u64().unwrap_or(0);
    log!("scale: {} payloads labelled by brute force over the synthetic set", a.served);
    let count = a.served.to_string();
    let label = cmd!(
        &labeller,
        "generate-csv",
        "--count",
        &count,
        "--seed",
        &seed,
        "--references",
        &refs,
        "--any-references",
        "--out",
        &tests
    );
    util::run(&label)?;
    log!("scale: local-runner with the synthetic index embedded");
    let t_build = Instant::now();
    // Embedded the way large indexes are (`.incbin` in a section of its own), so that CI
    // exercises that form too; the contest's index takes `include_bytes_aligned!`.
    let build = util::cargo_workspace("build", &["--bin", "local-runner"])
        .env("FRAUD_INDEX_ARTIFACT_IN", &index)
        .env("FRAUD_INDEX_EMBED", "linker");
    util::run(&build)?;
    r.build_s = t_build.elapsed().as_secs_f64();
    let local_runner = util::target_dir().join(util::PROFILE).join("local-runner");
    let verify = cmd!(
        &local_runner,
        "verify",
        util::TEST_SET,
        "--neighbours",
        "--references",
        &refs,
        "--sample",
        "0",
        "--generated",
        "2000",
        "--adversarial",
        "500",
        "--seed",
        &seed
    );
    r.neighbours = util::last_json(&util::read(&verify)?, "local-runner verify --neighbours")?;
    let beside = ship_beside(&index, &refs, &mut r)?;
    serve(&beside, &util::entries_of(&tests)?, &mut r)?;
    let nb = &r.neighbours;
    let differences: u64 = ["vector_differences", "neighbour_differences", "decision_differences"]
        .iter()
        .map(|k| nb[k].as_u64().unwrap_or(u64::MAX))
        .sum();
    let compared = nb["compared"].as_u64().unwrap_or(0);
    let refused = matches!(&r.file_form_refusals[..], [length, footer]
        if length.contains("built with an index of") && footer.contains("its footer"));
    let passed = differences == 0
        && compared >= 2_500
        && refused
        && r.served == a.served
        && r.served_wrong == 0;
    let figures = format!(
        "{} references, {} bytes packed in {:.1} s, embedded in {:.0} s; {compared} queries against the labeller, {differences} differences; beside the binary (built in {:.0} s) {}; {}/{} served answers right; {:.0} s",
        r.references, r.artifact_bytes, r.pack_s, r.build_s, r.file_build_s,
        if refused { "other files refused" } else { "OTHER FILES NOT REFUSED" },
        r.served - r.served_wrong, r.served, t.elapsed().as_secs_f64()
    );
    util::verdict("scale", passed, &figures, &r)
}

/// Builds `local-runner` in the file form and ships it with `index` beside it in a directory of
/// its own (as a Lambda image does); checks that it refuses another file (`other`) and the same
/// artifact with its footer changed. Returns the shipped binary.
fn ship_beside(
    index: &std::path::Path,
    other: &std::path::Path,
    r: &mut Report,
) -> Result<std::path::PathBuf> {
    log!("scale: the same index shipped beside local-runner (FRAUD_INDEX_EMBED=file)");
    let t = Instant::now();
    let build = util::cargo_workspace("build", &["--bin", "local-runner"])
        .env("FRAUD_INDEX_ARTIFACT_IN", index)
        .env("FRAUD_INDEX_EMBED", "file");
    util::run(&build)?;
    r.file_build_s = t.elapsed().as_secs_f64();
    let dir = util::xtask_dir("scale")?.join("beside");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let binary = dir.join("local-runner");
    std::fs::copy(util::target_dir().join(util::PROFILE).join("local-runner"), &binary)?;
    let shipped = dir.join(index_pack::embed::FILE_NAME);
    util::copy_atomically(index, &shipped, None)?;
    util::verify_shipped_index(&shipped, index)?;
    // The same length with the first byte of the footer's CRC32 changed: only the footer tells.
    let mut altered = std::fs::read(index)?;
    let at = altered.len() - index_pack::format::FOOTER_LEN + 12;
    altered[at] ^= 1;
    let altered_path = dir.join("altered.idx");
    std::fs::write(&altered_path, altered)?;
    for other in [other, altered_path.as_path()] {
        let out = cmd!(&binary, "selftest")
            .env("FRAUD_INDEX_FILE", other)
            .stderr_to_stdout()
            .stdout_capture()
            .unchecked()
            .run()?;
        let said = match out.status.success() {
            true => "answered".to_string(),
            false => String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").into(),
        };
        log!("scale: handed {}, it says: {said}", other.display());
        r.file_form_refusals.push(said);
    }
    Ok(binary)
}

/// Serves the embedded index on a loopback port and sends every entry over one keep-alive
/// connection, comparing each answer with the labeller's.
fn serve(local_runner: &std::path::Path, entries: &[util::Entry], r: &mut Report) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let log_path = util::xtask_dir("scale")?.join("serve.log");
    let server =
        util::to_log(cmd!(local_runner, "serve", "--listen", &listen), &log_path).start()?;
    let served = (|| -> Result<()> {
        let mut s =
            util::poll("serve ready", Duration::from_secs(60), Duration::from_millis(100), || {
                Ok(std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string()))
            })?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        // One write per request: a head and a body in two writes wait out the delayed ACK
        // (40 ms a request).
        s.set_nodelay(true)?;
        for e in entries {
            let body = e.request.get();
            let head = format!("POST /fraud-score HTTP/1.1\r\nHost: scale\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
            s.write_all([head.as_bytes(), body.as_bytes()].concat().as_slice())?;
            let answer = read_answer(&mut s)?;
            let v: serde_json::Value =
                serde_json::from_str(&answer).context("an answer that is not JSON")?;
            r.served += 1;
            if v["approved"].as_bool() != Some(e.expected_approved)
                || v["fraud_score"].as_f64() != Some(e.expected_fraud_score)
            {
                r.served_wrong += 1;
                r.first_wrong.get_or_insert(format!("{answer} for {body}"));
            }
        }
        Ok(())
    })();
    let _ = server.kill();
    served
}

/// The body of one HTTP/1.1 answer with a Content-Length.
fn read_answer(s: &mut std::net::TcpStream) -> Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        ensure!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        let Some(end) = text.find("\r\n\r\n") else { continue };
        let len: usize = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse().ok())
            .context("an answer without a content-length")?;
        if buf.len() >= end + 4 + len {
            ensure!(text.starts_with("HTTP/1.1 200 "), "{}", text.lines().next().unwrap_or(""));
            return Ok(text[end + 4..end + 4 + len].to_string());
        }
    }
}
