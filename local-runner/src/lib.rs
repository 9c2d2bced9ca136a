//! The fraud scorer outside Lambda, as a library: the contest API's server over the embedded
//! index ([`serve`], on the `http-server` crate) and the test-file replay ([`verify`]). The
//! `local-runner` binary is a thin CLI over these.

#[cfg(feature = "embedded-index")]
pub mod serve;
pub mod verify;
