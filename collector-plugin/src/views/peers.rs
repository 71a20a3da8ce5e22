//! A query node's shards (`GET /api/v1/peers`, and `peers` in `GET /api/v1/stats`).

use serde::{Deserialize, Serialize};

/// Which shards the merged view holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeersView {
    /// True when a shard did not answer the last pull: the view lacks its share.
    pub partial: bool,
    /// When the view was merged, Unix ns.
    pub merged_unix_nano: u64,
    /// Seconds the last pull took: every shard's snapshot fetched and parsed (at once).
    pub pull_seconds: f64,
    /// Seconds the last merge took: the snapshots absorbed into a fresh state.
    pub merge_seconds: f64,
    /// Each shard, in the order given.
    pub peers: Vec<PeerStatus>,
}

/// One shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Its API's base URL.
    pub url: String,
    /// True when it answered the last pull.
    pub answered: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// Its last answer, Unix ns.
    pub last_answer_unix_nano: Option<u64>,
    /// Traces it retained at its last answer.
    pub traces: usize,
    /// Prefix-tree nodes it held at its last answer (with its root).
    pub tree_nodes: usize,
    /// Spans it had received at its last answer.
    pub spans_received: u64,
    /// Trace lookups it answered with more than `--max-snapshot-bytes` or with what is not the trace's view
    /// (each answered 502), as of the last pull.
    #[serde(default)]
    pub bad_trace_answers: u64,
}
