//! `cargo xtask stack submission --image REF`: the contest's `submission` branch, every image by
//! digest; `--test` (CI) pushes to a loopback registry and smokes it with the images pulled back.

use super::compose::{image_inspect, Compose};
use super::{check, images, load, Common};
use crate::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// Where the API image is pushed, `registry/name:tag` (e.g. docker.io/me/fraud-api:v1).
    #[arg(long)]
    image: String,
    /// The submission directory (default `<target>/submission`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// `KEY=JSON` over docker/submission/info.json, e.g. `participants=["Ana"]` (repeatable).
    #[arg(long = "set")]
    sets: Vec<String>,
    /// The end-to-end test on a loopback registry (REF on 127.0.0.1:PORT).
    #[arg(long)]
    test: bool,
    #[command(flatten)]
    common: Common,
}

pub const INFO: &str = "docker/submission/info.json";
const CFG: &str = "docker/haproxy/haproxy.cfg";

pub fn run(a: Args) -> Result<()> {
    util::docker_usable()?;
    a.common.prepare(a.test, false)?;
    let out = a.out.clone().unwrap_or_else(|| util::target_dir().join("submission"));
    let registry = a.test.then(|| Registry::start(&a.image)).transpose()?;
    let api = push(images::API, &a.image)?;
    let (balancer, stand_in) = balancer(&a.image)?;
    let commit = util::read(&util::cmd!("git", "rev-parse", "HEAD")).unwrap_or_default();
    let pins =
        [("${FRAUD_API_IMAGE:-fraud-api:latest}", api.as_str()), (images::HAPROXY, &balancer)];
    let compose = pin(&fs::read_to_string(root().join("docker-compose.yml"))?, &pins, &commit)?;
    let info = info(&fs::read_to_string(root().join(INFO))?, &a.sets)?;
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(out.join("docker/haproxy"))?;
    fs::copy(root().join(CFG), out.join(CFG))?;
    fs::write(out.join("docker-compose.yml"), compose)?;
    fs::write(out.join("info.json"), &info)?;
    fs::write(out.join("README.md"), readme(&commit, &api, &balancer, stand_in.as_deref()))?;
    let c = Compose::submission(&out);
    let mut problems = check::check(&c, false)?.problems;
    let mut figures = format!("{} written: api {api}, balancer {balancer}", out.display());
    if let Some(s) = &stand_in {
        figures += &format!(" (the local haproxy:2.6 is the project's stand-in, pushed as {s})");
    }
    if registry.is_some() {
        for image in [images::API, images::HAPROXY] {
            let id = image_inspect(image, "{{.Id}}").context(format!("no image {image}"))?;
            util::run(&util::cmd!("docker", "image", "rm", "-f", id).stdout_null())?;
        }
        log!("local images removed: the submission pulls {api} and {balancer} from the registry");
        let run = load::load_run("submission", &c, &super::smoke(5), &super::prometheus::Watch::No);
        for (pinned, tag) in [(&api, images::API), (&balancer, images::HAPROXY)] {
            util::run(&util::cmd!("docker", "tag", pinned, tag))?;
        }
        let (run, smoke) = (run?, "pulled by digest from the loopback registry, smoke");
        problems.extend((!run.passed()).then(|| format!("{smoke} failed")));
        figures += &format!("; {smoke}: {}", load::run_figures(&run));
    }
    drop(registry);
    figures += &format!("; check problems {}{}", problems.len(), util::problems_suffix(&problems));
    util::verdict("stack submission", problems.is_empty(), &figures, &problems)
}

/// docker-compose.yml with a header of its origin and every `image:` swapped by `pins`.
pub fn pin(source: &str, pins: &[(&str, &str)], commit: &str) -> Result<String> {
    let mut out = format!("# Rinha de Backend 2026 submission, written by `cargo xtask stack submission` from the\n# project's docker-compose.yml at commit {commit}; every image named by digest (README.md).\n");
    for line in source.lines().skip_while(|l| l.starts_with('#')) {
        let Some((indent, value)) = line.split_once("image: ") else {
            out += &format!("{line}\n");
            continue;
        };
        let to = pins.iter().find(|(from, _)| *from == value.trim()).map(|(_, to)| to);
        let to = to.with_context(|| format!("no pin for image {value}"))?;
        out += &format!("{indent}image: {to}\n");
    }
    Ok(out)
}

/// info.json: the template with `KEY=JSON` values over it, the contest's five fields typed.
pub fn info(template: &str, sets: &[String]) -> Result<String> {
    let mut v: serde_json::Value = serde_json::from_str(template).context(INFO)?;
    for s in sets {
        let (k, json) = s.split_once('=').with_context(|| format!("--set {s}: not KEY=JSON"))?;
        v[k] = serde_json::from_str(json).with_context(|| format!("--set {s}: not JSON"))?;
    }
    let strings = |k: &str| v[k].as_array().is_some_and(|a| a.iter().all(|s| s.is_string()));
    let typed = ["participants", "social", "stack"].iter().all(|k| strings(k))
        && v["source-code-repo"].is_string()
        && v["open_to_work"].is_boolean()
        && v.as_object().is_some_and(|o| o.len() == 5);
    ensure!(typed, "info.json needs exactly participants, social, stack (lists of strings), source-code-repo (string), open_to_work (bool): {v}");
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

/// `registry/name` of `registry/name:tag` (a port's colon is not a tag's).
pub fn repository(reference: &str) -> &str {
    let slash = reference.rfind('/').map_or(0, |i| i + 1);
    reference[slash..].find(':').map_or(reference, |i| &reference[..slash + i])
}

/// `docker tag` + `docker push` of `local` as `reference`; returns `repository@sha256:...`.
fn push(local: &str, reference: &str) -> Result<String> {
    util::run(&util::cmd!("docker", "tag", local, reference))?;
    util::run(&util::cmd!("docker", "push", reference).stdout_null())?;
    digest_of(reference, repository(reference))
        .with_context(|| format!("no digest of {reference} after the push"))
}

/// `repository@sha256:...` of a local image that came from (or went to) `repository`.
fn digest_of(image: &str, repository: &str) -> Option<String> {
    let json = image_inspect(image, "{{json .RepoDigests}}")?;
    let digests: Vec<String> = serde_json::from_str(&json).ok()?;
    digests.into_iter().find(|d| d.split_once('@').is_some_and(|(r, _)| r == repository))
}

/// The official haproxy by digest when it was pulled here; else our stand-in, pushed beside REF.
fn balancer(api: &str) -> Result<(String, Option<String>)> {
    if let Some(official) = digest_of(images::HAPROXY, "haproxy") {
        return Ok((official, None));
    }
    let api = repository(api);
    let to = format!("{}haproxy:2.6", &api[..api.rfind('/').map_or(0, |i| i + 1)]);
    log!("haproxy:2.6 here is the project's stand-in (Debian's HAProxy 2.6, FROM scratch), not the official image: pushing it as {to}");
    Ok((push(images::HAPROXY, &to)?, Some(to)))
}

fn readme(commit: &str, api: &str, balancer: &str, stand_in: Option<&str>) -> String {
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let why = match stand_in {
        None => "the official `haproxy` image, by the digest of the copy pulled on the machine that wrote this".to_string(),
        Some(s) => format!("the local `haproxy:2.6` was the project's stand-in (Debian's HAProxy 2.6 in a FROM scratch image, laid out like the official one), which no public registry serves, so it was pushed as `{s}` and is named by that copy's digest; on a machine with the official image pulled, the command names `haproxy@sha256:...` instead"),
    };
    format!("# Rinha de Backend 2026 submission\n\nWritten on {} by `cargo xtask {command}` at commit `{commit}` of the source repository (info.json names it); no source code here.\n\n- `docker-compose.yml`: the project's, every image named by digest, `platform: linux/amd64`.\n- `docker/haproxy/haproxy.cfg`: the balancer's configuration, mounted by the compose file.\n- `info.json`: the contest's fields.\n\nImages: API `{api}` (the static local-runner built for the contest CPU); balancer `{balancer}`: {why}.\n\nRun: `docker compose up -d` in this directory (Compose v2; the limits apply as written), then `curl localhost:9999/ready`.\n", util::date())
}

/// Debian's Distribution registry on REF's loopback address for one run; stopped when dropped.
pub struct Registry(duct::Handle);

impl Registry {
    pub fn start(reference: &str) -> Result<Registry> {
        let addr = reference.split('/').next().unwrap_or_default();
        let port = addr.strip_prefix("127.0.0.1:").and_then(|p| p.parse::<u16>().ok());
        let why = "--test pushes to a loopback registry";
        let port = port.with_context(|| format!("{why}: {reference} is not 127.0.0.1:PORT/..."))?;
        util::require("docker-registry", "for the submission test (Debian's docker-registry)")?;
        let dir = util::xtask_dir("registry")?;
        let (data, config, log) =
            (dir.join("data"), dir.join("config.yml"), dir.join("registry.log"));
        let _ = fs::remove_dir_all(&data);
        let yml = format!("version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp: {{addr: \"{addr}\"}}\n", data.display());
        fs::write(&config, yml)?;
        let e = util::to_log(duct::cmd!("docker-registry", "serve", config), &log).unchecked();
        let registry = Registry(e.start().context("cannot start docker-registry")?);
        let (addr, ms) =
            (std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_millis);
        util::poll("the loopback registry", ms(20_000), ms(100), || {
            let up = std::net::TcpStream::connect_timeout(&addr, ms(1000)).is_ok();
            Ok(up.then_some(()).ok_or("not listening".into()))
        })?;
        log!("registry listening on {addr} (log {})", log.display());
        Ok(registry)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        log!("registry stopped");
    }
}
