//! The fraud scorer outside Lambda, as a library: the HTTP server ([`serve`]) and the test-file
//! replay ([`verify`]). The `local-runner` binary is a thin CLI over these.
//!
//! With the default feature `embedded-index`, the binary carries the packed index and
//! `serve::instance::run` serves it. Without it (`default-features = false`) the library still
//! offers the HTTP protocol of one connection without I/O ([`serve::http1::Conn`]) over any
//! [`function::Scorer`], which is how the HTTP request path is fuzzed in process without building
//! the embedded index.

pub mod serve;
pub mod verify;
