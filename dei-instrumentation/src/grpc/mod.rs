//! tonic integration (feature `tonic`; the items named without links exist only with it): a client layer, a
//! server layer, and stream helpers. The method declarations ([`methods`]) are part of every build: the
//! configuration takes them.
//!
//! - `client::DeiClientLayer` over a `Channel`: signature from the path, payload digest of the encoded request
//!   message, filtered call stack, next index from the scope in the current `Context`, `dei` + `traceparent` +
//!   `baggage` injected through the global propagator, fault plan checked before sending.
//! - `server::DeiServerLayer` for `Server::builder().layer(..)`: extracts, opens the scope, runs the handler in
//!   it.
//! - `stream`: preliminary and final indexes of streams (paper §4.2).
//! - [`methods`]: which methods stream, and why the layer has to be told.
//! - `signatures`: one signature (and digest) per method path, cached.

#[cfg(feature = "tonic")]
pub mod client;
#[cfg(feature = "tonic")]
pub(crate) mod frame;
pub mod methods;
#[cfg(feature = "tonic")]
pub mod server;
#[cfg_attr(not(feature = "tonic"), allow(dead_code))]
pub(crate) mod signatures;
#[cfg(feature = "tonic")]
pub mod stream;
