//! `cargo measure sam-local`: `sam local invoke` and `start-api` on a stand-in base image under
//! a private tag (AWS's public name would shadow the real image for every project).

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xtask::lambda::events::{self, Answer, Case, Expect};
use xtask::lambda::sam::{Tools, FUNCTION};
use xtask::util::{self, log, ScratchImage};

#[derive(clap::Args)]
pub struct Args {
    /// Events to invoke (paths below events/).
    #[arg(default_values = ["apigw-v2/legit.json", "apigw-v2/fraud.json", "function-url/malformed.json", "alb/ready.json"])]
    events: Vec<String>,
    /// The container-image form (template-image.yaml, built on the stand-in base image) instead
    /// of the zip; `start-api` is left out.
    #[arg(long)]
    image: bool,
    /// The references the embedded index was packed from, when not the contest's (e.g.
    /// `cargo measure scale`'s `target/scale/<N>/references.json.gz` with
    /// FRAUD_INDEX_ARTIFACT_IN): each scored event is then held to the labeller's answer over
    /// them (`local-runner explain --oracle`), not to events/expected.tsv's.
    #[arg(long)]
    references: Option<PathBuf>,
    /// A template parameter for the invocations, KEY=VALUE (repeatable), e.g. the memory and
    /// residency docs/LAMBDA.md gives for a large index: `--parameter PrefaultIndex=0
    /// --parameter FunctionMemoryMB=3200`.
    #[arg(long = "parameter", value_parser = parameter)]
    parameters: Vec<String>,
}

fn parameter(s: &str) -> Result<String, String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() && !s.contains(char::is_whitespace) => {
            Ok(s.to_string())
        }
        _ => Err(format!("a parameter is KEY=VALUE without spaces, not {s:?}")),
    }
}

/// The stand-in's tag, and what `sam local invoke|start-api` are told of it (never pulled).
const STAND_IN: &str = "fraud-lambda-base:local";
const BASE: [&str; 3] = ["--skip-pull-image", "--invoke-image", STAND_IN];

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let tools = Tools::ensure()?;
    util::docker_usable().context("sam local invoke needs a usable Docker engine")?;
    stand_in_image()?;
    let sha = if a.image { image_build(&tools)? } else { util::sha256_file(&tools.build()?)? };
    let shipped = util::Shipped::last()?.index.context("no shipped index: build it first")?;
    let index = serde_json::to_value(xtask::lambda::logs::identity(&shipped)?)?;
    let mut cases: Vec<Case> = events::cases()?.into_iter().map(|c| c.naming(&index)).collect();
    if let Some(refs) = &a.references {
        relabel(&mut cases, &a.events, refs)?;
    }
    let log = util::xtask_dir("lambda")?.join("sam-local.log");
    let mut results = Vec::new();
    for event in &a.events {
        let case = (cases.iter().find(|c| &c.event == event))
            .with_context(|| format!("{event} is not in events/expected.tsv"))?;
        let path = events::events_dir().join(event).display().to_string();
        let fixed = ["local", "invoke", FUNCTION, "--template", ".aws-sam/build/template.yaml"];
        // An image function runs its own image; a zip one the stand-in base under its tag.
        let base: &[&str] = if a.image { &BASE[..1] } else { &BASE };
        let overrides = a.parameters.join(" ");
        let params: &[&str] = match overrides.is_empty() {
            true => &[],
            false => &["--parameter-overrides", &overrides],
        };
        let args = [&fixed[..], base, params, &["--event", &path]].concat();
        let out = util::read(&tools.sam(&args).stderr_path(&log));
        let sam_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let (ok, detail) = match out.and_then(|out| Answer::parse(out.trim().as_bytes())) {
            Ok(a) => {
                a.mismatch(case).map_or((true, format!("{} {}", a.status, a.body)), |m| (false, m))
            }
            Err(e) => (false, format!("{e:#}; sam's log: {}", sam_log())),
        };
        log!("{}: {event}: {detail}", if ok { "ok" } else { "FAILED" });
        results.push(Invoked { event: event.clone(), ok, detail });
    }
    let (passed, n) = (results.iter().filter(|r| r.ok).count(), results.len());
    let api = if a.image { Ok("left out (image)".to_string()) } else { start_api(&tools) };
    let api_ok = api.is_ok();
    let api = api.unwrap_or_else(|e| format!("FAILED: {e:#}"));
    let s = t.elapsed().as_secs_f64();
    let figures = format!("{passed}/{n} events answered as expected by sam local invoke (bootstrap sha256 {sha}); sam local start-api: {api}; {s:.0} s");
    let detail = serde_json::json!({"invoked": results, "start_api": api});
    util::verdict("measure sam-local", passed == n && api_ok, &figures, &detail)
}

#[derive(Serialize)]
struct Invoked {
    event: String,
    ok: bool,
    detail: String,
}

/// The image form: the shipped bootstrap packaged with the image's Dockerfile, then `sam build`
/// of a copy of template-image.yaml whose image starts from the stand-in base. Returns the
/// SHA-256 of the bootstrap the image holds.
fn image_build(tools: &Tools) -> Result<String> {
    let pkg = xtask::lambda::package::build(false)?;
    let context = pkg.dir.parent().context("the package directory")?;
    std::fs::copy(util::root().join("docker/lambda-image/Dockerfile"), context.join("Dockerfile"))?;
    let template = std::fs::read_to_string(util::root().join(xtask::lambda::image::TEMPLATE))?;
    let tag = "      DockerTag: fraud-score\n";
    anyhow::ensure!(template.contains(tag), "template-image.yaml has no `{}`", tag.trim());
    let args = format!("{tag}      DockerBuildArgs:\n        BASE: {STAND_IN}\n");
    // The copy lives under .aws-sam/, where the template's relative context would not resolve:
    // it names the package directory itself (the target directory may be elsewhere, too).
    let relative = "      DockerContext: target/lambda-package\n";
    anyhow::ensure!(
        template.contains(relative),
        "template-image.yaml has no `{}`",
        relative.trim()
    );
    let absolute = format!("      DockerContext: {}\n", context.display());
    let local = util::root().join(".aws-sam/template-image-local.yaml");
    std::fs::create_dir_all(local.parent().context("path")?)?;
    std::fs::write(&local, template.replace(tag, &args).replace(relative, &absolute))?;
    let t = Instant::now();
    // The scorer alone: the hook's relative CodeUri and Makefile do not resolve from the copy.
    let local = local.to_str().context("path")?;
    util::run(&tools.sam(&["build", FUNCTION, "--template", local]))?;
    let mb = util::mb(pkg.unzipped_bytes);
    log!(
        "sam build of the image ({mb:.0} MB: the bootstrap and any index beside it) in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    Ok(pkg.sha256)
}

/// The expected answer of each scored event among `events`, recomputed over `references` by
/// the labeller through the shipped `local-runner explain --oracle` (it fails when the index's
/// neighbours differ from the labeller's).
fn relabel(cases: &mut [Case], events: &[String], references: &Path) -> Result<()> {
    let dir = util::target_dir().join(util::TRIPLE).join(util::PROFILE);
    let runner = dir.join("local-runner");
    let scratch = util::xtask_dir("lambda")?.join("relabel-body.json");
    for case in cases.iter_mut().filter(|c| events.contains(&c.event)) {
        let scored = matches!(&case.expect, Expect::Json(v) if v.get("fraud_score").is_some());
        if !scored {
            continue;
        }
        std::fs::write(&scratch, events::request_body(&case.event)?)?;
        let refs = references.display().to_string();
        let e =
            duct::cmd!(&runner, "explain", &scratch, "--json", "--oracle", "--references", refs);
        let out: serde_json::Value = serde_json::from_str(&util::read(&e)?)
            .with_context(|| format!("{}: explain's JSON", case.event))?;
        let body = out["response"].as_str().context("explain's response")?;
        let want: serde_json::Value = serde_json::from_str(body)?;
        log!("{}: the labeller over {} answers {want}", case.event, references.display());
        case.expect = Expect::Json(want);
    }
    Ok(())
}

/// start-api on a copy of the built template with two HttpApi events (the deployed has none).
fn start_api(tools: &Tools) -> Result<String> {
    let build = util::root().join(".aws-sam/build");
    let mut t: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(build.join("template.yaml"))?)?;
    let route = |path: &str, method: &str| serde_json::json!({"Type": "HttpApi", "Properties": {"Path": path, "Method": method}});
    let events = serde_json::json!({"Score": route("/fraud-score", "POST"), "Ready": route("/ready", "GET")});
    t["Resources"][FUNCTION]["Properties"]["Events"] = yaml_serde::to_value(events)?;
    let template = build.join("template-start-api.yaml");
    std::fs::write(&template, yaml_serde::to_string(&t)?)?;
    let port = util::free_port()?.port().to_string();
    let fixed = ["local", "start-api", "--host", "127.0.0.1", "--port", &port, "--template"];
    let args = [&fixed[..], &[template.to_str().context("path")?], &BASE].concat();
    let log = util::xtask_dir("lambda")?.join("start-api.log");
    let sam = util::to_log(tools.sam(&args), &log).unchecked().start()?;
    let (agent, url) =
        (util::http_agent(Duration::from_secs(60)), format!("http://127.0.0.1:{port}"));
    type Answered = Result<ureq::http::Response<ureq::Body>, ureq::Error>;
    let answer = |r: Answered| -> Result<(u16, String)> {
        let mut r = r?;
        Ok((r.status().as_u16(), r.body_mut().read_to_string()?))
    };
    let (what, limit, every) =
        ("sam local start-api: GET /ready", Duration::from_secs(120), Duration::from_millis(500));
    let ready = util::poll(what, limit, every, || {
        Ok(match answer(agent.get(format!("{url}/ready")).call()) {
            Ok((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        })
    });
    let payload = std::fs::read(util::root().join("events/payloads/legit.json"))?;
    let score = agent.post(format!("{url}/fraud-score")).header("content-type", "application/json");
    let scored = ready.as_ref().ok().map(|_| answer(score.send(&payload[..])));
    // SIGINT: sam stops the containers it started. A shell without job control starts its
    // background jobs with SIGINT ignored, and Python keeps that: then SIGKILL after 15 s.
    for pid in sam.pids() {
        let _ = util::signal(pid, nix::sys::signal::SIGINT);
    }
    let what = "sam local start-api: stopping on SIGINT";
    let stopped = util::poll(what, Duration::from_secs(15), Duration::from_millis(200), || {
        Ok(sam.try_wait()?.map(drop).ok_or("still running".to_string()))
    });
    if let Err(e) = stopped {
        log!("{e:#}: killing it");
        let _ = sam.kill();
    }
    let (ready, (status, body)) = (ready?, scored.context("no /ready")??);
    anyhow::ensure!(
        status == 200 && body.contains("\"approved\""),
        "POST /fraud-score answered {status} {body} (log {})",
        log.display()
    );
    Ok(format!("GET /ready 200 {ready}, POST /fraud-score {status} {body} on 127.0.0.1:{port}"))
}

fn stand_in_image() -> Result<()> {
    let image = STAND_IN;
    let inspect = duct::cmd!("docker", "image", "inspect", image).stdout_null().stderr_null();
    if inspect.unchecked().run()?.status.success() {
        log!("base image {image} exists (`docker image rm {image}` to rebuild it)");
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
    );
    fs.text("etc/group", "root:x:0:\nsbx_user1051:x:990:\n");
    fs.text(
        "etc/os-release",
        "NAME=\"Amazon Linux (local stand-in)\"\nVERSION=\"2023\"\nID=\"amzn\"\n",
    );
    let base = util::root().join("docker/lambda-base");
    fs.file("lambda-entrypoint.sh", &base.join("lambda-entrypoint.sh"), 0o755);
    let ctx = util::target_dir().join("lambda-base");
    let _ = std::fs::remove_dir_all(&ctx);
    fs.docker_build(&ctx, &base.join("Dockerfile"), image)?;
    log!("built the stand-in base image {image}");
    Ok(())
}
