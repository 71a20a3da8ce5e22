//! `dei-collector`: an OTLP receiver and forwarder that rebuilds the service graph and the distributed
//! execution index (DEI) prefix tree from spans, and analyzes them (paper §6 "Graph Analysis").
//!
//! The index of a nested call has its caller's index as prefix, so the spans of many traces merge into one
//! tree of every distinct RPC the system makes. This crate receives OTLP over gRPC and HTTP, forwards every
//! batch unchanged to a downstream OTLP endpoint through a bounded queue, and keeps the service graph
//! (client/server span pairs, virtual nodes, servicegraph-connector metrics), the prefix tree of indexes with
//! per-node statistics, the retained traces, and the analyses over them: circuit breakers, repeated and
//! chained calls, ambiguous indexes, projection to coarser instantiations.
//!
//! The library is small:
//! - [`server`]: [`server::start`] with a [`server::ServerConfig`] runs the receivers, the forwarder and the
//!   HTTP API in process, and gives a [`server::Running`] handle;
//! - [`offline`]: the analysis of OTLP/JSON and Jaeger JSON files (`dei-collector analyze`);
//! - [`views`]: the types of the API's JSON, shared with clients.
//!
//! Inside, in layers that depend only downwards: `otlp` decodes and validates bodies, `span_record` extracts what
//! analysis reads, `graph` and `tree` hold the service graph and the prefix tree with the retained traces
//! (`stale_order` compacts the expiry orders both keep), `state` holds the collector's state (`CollectorState`),
//! `analysis` reads it, `api` renders it into the [`views`] and serves them with the web view, `receiver` and
//! `forward` take batches in and send them on, `collector` accepts them. `cli` (the binary's commands) is public
//! only for the binary. The benchmark harness (load generator, counting sink, the comparison with rotel) is a crate
//! of its own, `dei-collector-bench` (`collector-plugin/bench/`, not published), which sees the collector from
//! outside.
//!
//! # Features
//! - `server` (default): everything above. Without it (`default-features = false`) the crate is only
//!   [`views`], the types of the API's JSON, for clients.
//! - `fuzzing` (off): a hidden `fuzzing` module with entry points into the collector's own decoders for the
//!   fuzz targets (`fuzz/`, which turns it on); not a stable API.
//!
//! # Example
//! ```
//! # #[cfg(feature = "server")]
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use dei_collector::server::{self, ServerConfig};
//!
//! // the receivers, the API and the web view on ephemeral loopback ports
//! let running = server::start(ServerConfig::ephemeral()).await.expect("listen on loopback");
//! println!("OTLP/gRPC on {}, API on http://{}/api/v1/", running.grpc_addr, running.api_addr);
//! // what `GET /api/v1/stats` answers, as a `views::Stats`
//! let stats = running.collector.stats();
//! assert_eq!((stats.tree_nodes, stats.counters.spans_received), (1, 0)); // the root alone
//! running.shutdown().await;
//! # }
//! # #[cfg(not(feature = "server"))]
//! # fn main() {}
//! ```

#[cfg(feature = "server")]
pub(crate) mod analysis;
#[cfg(feature = "server")]
pub(crate) mod api;
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod cli;
#[cfg(feature = "server")]
pub(crate) mod collector;
#[cfg(feature = "server")]
pub(crate) mod config_file;
pub(crate) mod counters;
#[cfg(feature = "server")]
pub(crate) mod forward;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "server")]
pub(crate) mod graph;
#[cfg(feature = "server")]
pub(crate) mod limits;
#[cfg(feature = "server")]
pub mod offline;
#[cfg(feature = "server")]
pub(crate) mod otlp;
#[cfg(feature = "server")]
pub(crate) mod receiver;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub(crate) mod shards;
#[cfg(feature = "server")]
pub(crate) mod span_record;
#[cfg(feature = "server")]
pub(crate) mod stale_order;
#[cfg(feature = "server")]
pub(crate) mod state;
#[cfg(feature = "server")]
pub(crate) mod tree;
pub mod views;
