//! AWS SAM CLI in a Python venv (`LAMBDA_VENV`, default `~/.cache/lambda-venv`), installed from
//! PyPI when missing. It brings `sam` (validate, build, local invoke, with cfn-lint) and AWS's
//! Runtime Interface Emulator `aws-lambda-rie-x86_64`, which runs a bootstrap without Docker.
//! The Debian packages around it (python3-venv; busybox-static for `sam-local`) come from
//! scripts/setup.sh, the one place that installs system packages.

use crate::cmd::{cmd, run};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The version the emulator figures and the template checks were taken with.
const SAM_CLI: &str = "aws-sam-cli==1.170.0";

/// Where the tools are.
pub struct Tools {
    pub sam: PathBuf,
    pub rie: PathBuf,
}

impl Tools {
    /// A `sam` command in the project root, telemetry off (nothing here talks to AWS).
    pub fn sam<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = cmd(self.sam.to_str().expect("venv path is UTF-8"), args);
        c.env("SAM_CLI_TELEMETRY", "0");
        c
    }
}

fn venv() -> PathBuf {
    match std::env::var_os("LAMBDA_VENV") {
        Some(v) => PathBuf::from(v),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/lambda-venv")
        }
    }
}

/// Installs SAM CLI into the venv unless it is there, and finds the emulator inside it.
pub fn ensure() -> Result<Tools> {
    let venv = venv();
    let sam = venv.join("bin/sam");
    if !sam.exists() {
        crate::log!("installing {SAM_CLI} into {}", venv.display());
        let _ = std::fs::remove_dir_all(&venv);
        let venv_str = venv.to_str().context("LAMBDA_VENV is not UTF-8")?;
        run(&mut cmd("python3", ["-m", "venv", venv_str])).context(
            "python3 cannot create a venv: run scripts/setup.sh (it installs python3-venv)",
        )?;
        let pip = venv.join("bin/pip");
        run(&mut cmd(
            pip.to_str().expect("venv path is UTF-8"),
            ["install", "-q", "--disable-pip-version-check", SAM_CLI],
        ))?;
    }
    let rie = find_rie(&venv)?;
    let mode = std::fs::metadata(&rie)?.permissions().mode();
    if mode & 0o111 == 0 {
        std::fs::set_permissions(&rie, std::fs::Permissions::from_mode(mode | 0o755))?;
    }
    Ok(Tools { sam, rie })
}

/// `<venv>/lib/python3.*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64`.
fn find_rie(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    for entry in std::fs::read_dir(&lib).with_context(|| format!("no {}", lib.display()))? {
        let rie = entry?
            .path()
            .join("site-packages/samcli/local/rapid/aws-lambda-rie-x86_64");
        if rie.exists() {
            return Ok(rie);
        }
    }
    bail!(
        "no aws-lambda-rie-x86_64 in the SAM CLI of {} (remove the venv to reinstall)",
        venv.display()
    )
}
