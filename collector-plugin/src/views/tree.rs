//! Prefix-tree nodes, subtrees and diffs as the API sends them (`/api/v1/tree…`, `/api/v1/diff`).

use dei_propagator::{PayloadDigest, StackDigest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Latency summary of a histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Observations.
    pub count: u64,
    /// Mean, seconds.
    pub mean_s: f64,
    /// Upper bound of the median's bucket, seconds.
    pub p50_s: f64,
    /// Upper bound of the 99th percentile's bucket, seconds.
    pub p99_s: f64,
    /// Largest, seconds.
    pub max_s: f64,
}

/// One node of the prefix tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// The index (wire form).
    pub index: String,
    /// The last element (`digest count [~]`), `null` for the root.
    pub element: Option<String>,
    /// Depth (elements).
    pub depth: usize,
    /// Readable signature.
    pub signature: Option<Arc<str>>,
    /// Instantiation.
    pub instantiation: Option<Arc<str>>,
    /// Calling services.
    pub client_services: BTreeMap<Arc<str>, u64>,
    /// Called services.
    pub server_services: BTreeMap<Arc<str>, u64>,
    /// Uninstrumented peers named by the client spans.
    pub peers: BTreeMap<Arc<str>, u64>,
    /// RPC occurrences.
    pub seen: u64,
    /// Distinct traces.
    pub traces: u64,
    /// Occurrences with errors.
    pub errors: u64,
    /// Injected faults by kind.
    pub faults: BTreeMap<String, u64>,
    /// `dei.ambiguous` flags.
    pub ambiguous_flagged: u64,
    /// Index collisions within a trace.
    pub collisions: u64,
    /// Client-side latency.
    pub client_latency: Latency,
    /// Server-side latency.
    pub server_latency: Latency,
    /// First seen, Unix ns.
    pub first_seen_unix_nano: u64,
    /// Last seen, Unix ns.
    pub last_seen_unix_nano: u64,
    /// Preliminary (unresolved stream) node.
    pub preliminary: bool,
    /// Number of children.
    pub children: usize,
    /// Readable stack, innermost first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<String>>,
    /// The payload digest (`dei.payload.digest`, hex) of the first span at this node: the payload part of
    /// the element's invocation signature (under an instantiation without the payload, RPCs with other
    /// payloads share the node).
    #[serde(default)]
    pub payload_digest: Option<PayloadDigest>,
    /// The stack digest (`dei.stack.digest`, hex) of the first span at this node.
    #[serde(default)]
    pub stack_digest: Option<StackDigest>,
    /// The innermost readable frame of the stack: the first with a source location outside the standard
    /// library and cargo's registry (`{async_block#0} (examples/corpus/src/cinema.rs:201:102)`), or else the
    /// first frame; `null` without a recorded stack.
    #[serde(default)]
    pub top_frame: Option<String>,
}

/// A node with its children, recursively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtreeView {
    /// The node.
    #[serde(flatten)]
    pub node: NodeView,
    /// Its children (empty past the depth limit).
    pub subtree: Vec<SubtreeView>,
}

/// An index with its readable signature, for findings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct NamedIndex {
    /// The wire form.
    pub index: String,
    /// The readable signature, when known.
    pub signature: Option<Arc<str>>,
}

/// One side of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffSide {
    /// Retained traces selected.
    pub traces: usize,
    /// Distinct indexes in them.
    pub indexes: usize,
}

/// Which indexes appeared and which disappeared between two selections of traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// Side A (before).
    pub a: DiffSide,
    /// Side B (after).
    pub b: DiffSide,
    /// Indexes in both.
    pub common: usize,
    /// In B, not in A (up to the limit).
    pub appeared: Vec<NamedIndex>,
    /// In A, not in B (up to the limit).
    pub disappeared: Vec<NamedIndex>,
    /// Appeared, in total.
    pub appeared_total: usize,
    /// Disappeared, in total.
    pub disappeared_total: usize,
}
