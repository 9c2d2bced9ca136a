//! Running other programs: the project root, logged commands that fail with their command line,
//! and checks that a tool is installed (scripts/setup.sh installs them; nothing here calls apt).

use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (the parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// Progress for the human, on stderr, prefixed with the command's name.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!("[xtask] {}", format_args!($($arg)*))
    };
}

/// A command that starts in the project root; `cmd("cargo", ["build"])`.
pub fn cmd<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(program);
    c.args(args).current_dir(root());
    c
}

fn shown(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `c` with inherited stdio; fails unless it exits 0.
pub fn run(c: &mut Command) -> Result<()> {
    let line = shown(c);
    crate::log!("$ {line}");
    let status = c
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed: {status}");
    }
    Ok(())
}

/// Runs `c` and returns its stdout (stderr is inherited); fails unless it exits 0.
pub fn output(c: &mut Command) -> Result<String> {
    let line = shown(c);
    let out: Output = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed: {}", out.status);
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8"))
}

/// Fails with an actionable message unless `program` can be started.
pub fn require(program: &str, why: &str) -> Result<()> {
    let found = Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        bail!("{program} is needed {why}; run scripts/setup.sh (it installs it)");
    }
    Ok(())
}
