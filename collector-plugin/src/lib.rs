//! `dei-collector`: an OTLP receiver and forwarder that rebuilds the service graph and the distributed
//! execution index (DEI) prefix tree from spans, and analyzes them (paper §6 "Graph Analysis").
//!
//! The index of a nested call has its caller's index as prefix, so the spans of many traces merge into one
//! tree of every distinct RPC the system makes. This crate receives OTLP over gRPC and HTTP, forwards every
//! batch unchanged to a downstream OTLP endpoint through a bounded queue, and keeps:
//! - the [service graph](graph) (client/server span pairs, virtual nodes, servicegraph-connector metrics),
//! - the [prefix tree](tree) of indexes with per-node statistics and the retained [traces](tree::traces),
//! - the [analyses](analysis): circuit breakers, repeated and chained calls, ambiguous indexes, projection
//!   to coarser instantiations.
//!
//! Layout: [`otlp`] decodes and validates bodies, [`span_record`] extracts what analysis reads,
//! [`state`] holds the collector's state (graph, tree, traces), [`analysis`] reads it, [`receiver`] and
//! [`api`] serve it (the API layer renders the state into the [`views`]), [`forward`] sends batches on,
//! [`offline`] reads OTLP/JSON files, [`bench`](mod@bench) has the load generator and the counting sink.
//!
//! # Features
//! - `server` (default): everything above. Without it (`default-features = false`) the crate is only
//!   [`views`], the types of the API's JSON, for clients.
//!
//! # Example
//! ```
//! # #[cfg(feature = "server")] {
//! use dei_collector::state::{CollectorState, StateConfig};
//! use dei_collector::counters::Counters;
//! use dei_collector::{otlp, span_record};
//! use std::sync::Arc;
//!
//! let json = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"frontend"}}]},
//!   "scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",
//!   "name":"GET /","kind":3,"startTimeUnixNano":"1","endTimeUnixNano":"2",
//!   "attributes":[{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}}]}]}]}]}"#;
//! let req = otlp::decode_json(json).unwrap();
//! let mut issues = Vec::new();
//! let spans = span_record::extract(&req, &mut issues).unwrap();
//! let mut analyzer = CollectorState::new(StateConfig::default(), Arc::new(Counters::default()));
//! analyzer.ingest(spans, std::time::Instant::now());
//! assert_eq!(analyzer.tree.len(), 2); // the root `1` and one RPC
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "server")]
pub mod analysis;
#[cfg(feature = "server")]
pub mod api;
#[cfg(feature = "server")]
pub mod bench;
#[cfg(feature = "server")]
pub mod collector;
#[cfg(feature = "server")]
pub mod config_file;
pub mod counters;
#[cfg(feature = "server")]
pub mod forward;
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "server")]
pub mod graph;
#[cfg(feature = "server")]
pub mod limits;
#[cfg(feature = "server")]
pub mod offline;
#[cfg(feature = "server")]
pub mod otlp;
#[cfg(feature = "server")]
pub mod receiver;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod span_record;
#[cfg(feature = "server")]
pub mod state;
#[cfg(feature = "server")]
pub mod tree;
pub mod views;
