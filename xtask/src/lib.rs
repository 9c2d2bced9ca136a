//! The fraud scorer's harness (`cargo xtask`, alias in `.cargo/config.toml`): every command logs
//! on stderr and ends with one verdict line (`<command>: PASS|FAIL <figures>`), also kept as JSON
//! under `<target>/xtask/`. [`util`] imports nothing of the harness; each command module only
//! `util` and its children. The instruments CI never runs are the `measure` crate, on this API.

pub mod ci;
pub mod fuzz;
pub mod lambda;
pub mod scale;
pub mod stack;
pub mod util;
pub mod verify;
