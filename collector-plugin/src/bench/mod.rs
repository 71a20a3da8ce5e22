//! Benchmark tools: a saturating OTLP [`loadgen`], a counting [`sink`], and [`compare`], which runs
//! dei-collector and rotel between the two under the same load in one run.

pub mod compare;
pub mod loadgen;
pub mod sink;

/// The pass-through gRPC codec the tools send and receive raw export requests with.
pub use crate::otlp::codec::RawCodec;
