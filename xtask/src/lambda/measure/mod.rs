//! The Lambda instruments, which CI does not run: starts from cold storage ([`cold`]) and `sam
//! local invoke` in Docker ([`sam_local`]). They use the gate's build, emulator and checks.

pub mod cold;
pub mod sam_local;
