//! The fraud scorer's harness (`cargo xtask`): each command logs on stderr and ends with a verdict
//! line, also as JSON under `<target>/xtask/`. [`util`] imports nothing of the rest.

pub mod ci;
pub mod fuzz;
pub mod lambda;
pub mod scale;
pub mod shards;
pub mod stack;
pub mod util;
pub mod verify;

/// What nearly every module uses: errors, serde's derives, paths and times, the shared helpers.
mod prelude {
    pub use crate::util::{self, cmd, log, root};
    pub use anyhow::{bail, ensure, Context, Result};
    pub use serde::{Deserialize, Serialize};
    pub use std::path::{Path, PathBuf};
    pub use std::time::{Duration, Instant};
}
