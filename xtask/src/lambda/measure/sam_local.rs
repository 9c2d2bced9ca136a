//! `cargo xtask lambda sam-local`: `sam build`, then `sam local invoke` of sample events in Docker
//! against a stand-in for the Lambda base image built from this machine's files (busybox-static
//! and the glibc runtime, laid out by docker/lambda-base/Dockerfile; no registry).

use super::super::events::{self, Answer, Case};
use super::super::sam::{Tools, FUNCTION};
use crate::util::{self, log, ScratchImage};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Events to invoke (paths below events/).
    #[arg(default_values_t = [
        "apigw-v2/legit.json".to_string(),
        "apigw-v2/fraud.json".to_string(),
        "function-url/malformed.json".to_string(),
        "alb/ready.json".to_string(),
    ])]
    events: Vec<String>,
    /// Rebuild the stand-in base image even if one exists.
    #[arg(long)]
    rebuild_image: bool,
}

#[derive(Serialize)]
struct Invoked {
    event: String,
    ok: bool,
    detail: String,
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let tools = Tools::ensure()?;
    util::docker_usable().context("sam local invoke needs a usable Docker engine")?;
    stand_in_image(a.rebuild_image)?;
    let sha = util::sha256_file(&tools.build()?)?;
    let (cases, log) = (events::cases()?, util::xtask_dir("lambda")?.join("sam-local.log"));
    let mut results = Vec::new();
    for event in &a.events {
        let case = (cases.iter().find(|c| &c.event == event))
            .with_context(|| format!("{event} is not in events/expected.tsv"))?;
        let path = events::events_dir().join(event).display().to_string();
        let fixed = "--skip-pull-image --template .aws-sam/build/template.yaml --event";
        let args: Vec<&str> =
            ["local", "invoke", FUNCTION].into_iter().chain(fixed.split(' ')).collect();
        let out = util::read(&tools.sam(&[&args[..], &[&path]].concat()).stderr_path(&log));
        let sam_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let out = out.and_then(|out| Answer::parse(out.trim().as_bytes()));
        let detail = judge(case, out.map_err(|e| format!("{e:#}; sam's log: {}", sam_log())));
        let (ok, detail) = (detail.is_ok(), detail.unwrap_or_else(|e| e));
        log!("{}: {event}: {detail}", if ok { "ok" } else { "FAILED" });
        results.push(Invoked { event: event.clone(), ok, detail });
    }
    let (passed, n) = (results.iter().filter(|r| r.ok).count(), results.len());
    let s = t.elapsed().as_secs_f64();
    let figures = format!("{passed}/{n} events answered as expected by sam local invoke (bootstrap sha256 {sha}), {s:.0} s");
    util::verdict("lambda sam-local", passed == n, &figures, &results)
}

/// `status body` of an answer that meets `case`, or why not.
fn judge(case: &Case, answer: Result<Answer, String>) -> Result<String, String> {
    let a = answer?;
    a.mismatch(case).map_or_else(|| Ok(format!("{} {}", a.status, a.body)), Err)
}

/// Builds the stand-in for the Lambda base image unless it exists (`LAMBDA_BASE_IMAGE`, default
/// the public name, so that `sam local invoke --skip-pull-image` finds it).
fn stand_in_image(rebuild: bool) -> Result<()> {
    let image = std::env::var("LAMBDA_BASE_IMAGE")
        .unwrap_or_else(|_| "public.ecr.aws/lambda/provided:al2023-x86_64".into());
    let inspect = duct::cmd!("docker", "image", "inspect", &image).stdout_null().stderr_null();
    if inspect.unchecked().run()?.status.success() && !rebuild {
        log!("base image {image} exists (--rebuild-image to rebuild)");
        return Ok(());
    }
    let setup = "run scripts/setup.sh (it installs busybox-static)";
    let busybox =
        (["/bin/busybox", "/usr/bin/busybox"].into_iter().map(Path::new).find(|p| p.exists()))
            .with_context(|| format!("busybox is missing: {setup}"))?;
    util::check_static_x86_64(busybox)
        .with_context(|| format!("the stand-in needs a static busybox: {setup}"))?;
    let mut fs = ScratchImage::default();
    for d in "usr/bin usr/local/bin var/task var/runtime var/rapid opt dev proc sys".split(' ') {
        fs.dir(d, 0o755);
    }
    fs.dir("tmp", 0o1777).file("bin/busybox", busybox, 0o755).link("usr/lib64", "../lib64");
    for tool in "sh ash mv cp chmod rm ls cat mkdir ln env echo sleep ps kill".split(' ') {
        fs.link(&format!("bin/{tool}"), "busybox");
    }
    // The glibc runtime (AL2023 keeps it in /lib64 = /usr/lib64).
    for lib in "ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1".split(' ') {
        let found = ["/lib/x86_64-linux-gnu", "/lib64"].iter().map(|d| Path::new(d).join(lib)).find(|p| p.exists());
        if let Some(src) = found {
            fs.file(&format!("lib64/{lib}"), &src, 0o755);
        }
    }
    fs.text(
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nsbx_user1051:x:993:990::/home/sbx_user1051:/sbin/nologin\n",
    )
    .text("etc/group", "root:x:0:\nsbx_user1051:x:990:\n")
    .text(
        "etc/os-release",
        "NAME=\"Amazon Linux (local stand-in)\"\nVERSION=\"2023\"\nID=\"amzn\"\n",
    );
    let base = util::root().join("docker/lambda-base");
    fs.file("lambda-entrypoint.sh", &base.join("lambda-entrypoint.sh"), 0o755);
    // The Dockerfile copies a directory `rootfs/`: the archive is unpacked into it.
    let ctx = util::target_dir().join("lambda-base");
    let _ = std::fs::remove_dir_all(&ctx);
    fs.write(&ctx.join("rootfs.tar"))?;
    let mut archive = tar::Archive::new(std::fs::File::open(ctx.join("rootfs.tar"))?);
    archive.set_preserve_permissions(true);
    archive.unpack(ctx.join("rootfs"))?;
    std::fs::remove_file(ctx.join("rootfs.tar"))?;
    util::docker_build(&ctx, &base.join("Dockerfile"), &image)?;
    log!("built the stand-in base image {image}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::Expect;

    #[test]
    fn an_answer_is_judged_against_its_case() {
        let case = Case {
            event: "alb/ready.json".into(),
            status: 200,
            expect: Expect::Json(serde_json::json!({"ready": true})),
        };
        let answer = |status, body: &str| {
            Ok(Answer {
                status,
                content_type: Some("application/json".into()),
                allow: None,
                body: body.into(),
            })
        };
        assert_eq!(
            judge(&case, answer(200, r#"{"ready":true}"#)),
            Ok(r#"200 {"ready":true}"#.into())
        );
        assert!(judge(&case, answer(503, r#"{"ready":false}"#)).unwrap_err().contains("got 503"));
        assert_eq!(judge(&case, Err("no answer".into())), Err("no answer".into()));
    }
}
