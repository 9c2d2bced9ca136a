//! The fraud scorer's harness (`cargo xtask`): each command logs on stderr and ends with a verdict
//! line, also as JSON under `<target>/xtask/`. [`util`] imports nothing of the rest.

pub mod ci;
pub mod fuzz;
pub mod lambda;
pub mod scale;
pub mod stack;
pub mod util;
pub mod verify;
