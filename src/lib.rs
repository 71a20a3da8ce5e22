//! `dei`: distributed execution indexing for OpenTelemetry.
//!
//! This umbrella crate re-exports the workspace's crates under short names:
//! - [`propagator`]: the index model, its wire format, the per-request scope and the OpenTelemetry propagator;
//! - [`instrumentation`]: tower layers for tonic and axum and reqwest middleware;
//! - [`collector`]: the OTLP collector that rebuilds the service graph and the prefix tree;
//! - [`sfit`]: exhaustive fault-space search driven by indexes.

pub use dei_collector as collector;
pub use dei_instrumentation as instrumentation;
pub use dei_propagator as propagator;
pub use dei_sfit as sfit;

/// README.md's snippets, compiled as doc tests; those that cannot stand alone are marked `ignore` and say why.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
