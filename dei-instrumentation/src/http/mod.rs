//! HTTP integration: axum server middleware (feature `axum`) and reqwest client middleware (feature
//! `reqwest`).
//!
//! Signatures: `METHOD /route/{template}` on the server (axum's `MatchedPath`; a request that matched no route
//! is `METHOD <unmatched>`: see `server`), `METHOD host/path` (no port) on the client, or `METHOD name/path`
//! when the caller names the target (`TargetService`; see `client` for why two services on one host need
//! names). Payload: `query` + `?` + body, at most [`payload_digest_cap`](crate::DeiConfig::payload_digest_cap)
//! bytes of the body; the body always passes on untouched.

#[cfg(feature = "reqwest")]
pub mod client;
#[cfg(feature = "axum")]
pub mod server;

#[cfg(feature = "reqwest")]
pub use client::TargetService;
