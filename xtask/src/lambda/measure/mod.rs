//! The Lambda instruments, which CI does not run; they use the gate's build, emulator and checks.

pub mod cold;
pub mod sam_local;
