//! `cargo xtask`: the command line of the harness (the library, `src/lib.rs`).

fn main() -> anyhow::Result<()> {
    xtask::main()
}
