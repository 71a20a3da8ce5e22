//! dei-collector's benchmark harness (not published): a saturating OTLP [`loadgen`], a counting [`sink`], a
//! byte-copying TCP [`relay`], and [`compare`], which runs dei-collector and rotel between the load generator and
//! the sink under the same load in one run. The binary `dei-collector-bench` runs them from the command line
//! (`loadgen`, `sink`, `relay`, `bench`; BENCHMARKS.md).
//!
//! It sees the collector from outside, as any OTLP client does: it sends and receives raw export requests
//! with its own pass-through [`RawCodec`], counts spans with its own [`count_spans`], and starts the collector
//! as a process. From the `dei-collector` library it takes only `server::Downstream` (the endpoint checks a
//! forwarding target gets) and `server::GRPC_EXPORT_PATH`.

pub mod compare;
pub mod loadgen;
pub mod relay;
pub mod sharded;
pub mod shards;
pub mod sink;

mod codec;
mod count;

pub use codec::RawCodec;
pub use count::count_spans;
