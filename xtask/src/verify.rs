//! `cargo xtask verify` (being ported from scripts/).

use anyhow::{bail, Result};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    bail!("cargo xtask verify: not ported yet")
}
