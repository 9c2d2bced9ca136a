//! The fraud scorer outside Lambda, as a library: the HTTP server ([`serve`]) and the test-file
//! replay ([`verify`]). The `local-runner` binary is a thin CLI over these.
//!
//! With the default feature `embedded-index`, the binary carries the packed index and
//! [`serve::run`] serves it. Without it (`default-features = false`) the library still offers
//! [`serve::serve_connection`] over any byte stream and any [`function::Scorer`], which is how the
//! HTTP request path is fuzzed in process without building the 94 MB index.

pub mod serve;
pub mod verify;
