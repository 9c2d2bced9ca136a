//! Verdicts: every command ends with one line `<command>: PASS|FAIL <figures>` (figures last, so
//! a CI log can be grepped for them) and writes the same result as JSON to
//! `target/xtask/<command>.json` (spaces in the command name become dashes).

use crate::cmd::root;
use anyhow::{bail, Context, Result};
use serde::Serialize;

/// Prints the verdict line, writes `target/xtask/<name>.json` with `detail` in it, and returns an
/// error when the verdict is a failure (so `?` makes the process exit non-zero).
pub fn verdict(name: &str, passed: bool, figures: &str, detail: &impl Serialize) -> Result<()> {
    #[derive(Serialize)]
    struct Record<'a, T> {
        command: &'a str,
        passed: bool,
        figures: &'a str,
        detail: &'a T,
    }
    let dir = root().join("target/xtask");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{}.json", name.replace(' ', "-")));
    let record = Record {
        command: name,
        passed,
        figures,
        detail,
    };
    std::fs::write(&path, serde_json::to_string_pretty(&record)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("{name}: {} {figures}", if passed { "PASS" } else { "FAIL" });
    if !passed {
        bail!("{name} failed (details in {})", path.display());
    }
    Ok(())
}
