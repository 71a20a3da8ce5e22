//! The collector's counters and the sizes of its state (`GET /api/v1/stats`).

pub use crate::counters::CountersSnapshot;
use serde::{Deserialize, Serialize};

/// A snapshot of the counters and the sizes of the state (fields in the order the API has always sent them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Every counter.
    pub counters: CountersSnapshot,
    /// Request bytes in the forwarding queue.
    pub forward_queue_bytes: usize,
    /// Spans in the forwarding queue.
    pub forward_queue_spans: usize,
    /// Service-graph edges, as `/api/v1/graph` shows them (virtual nodes merged).
    pub graph_edges: usize,
    /// Spans waiting for their other half in the service graph's pairing store.
    pub graph_waiting_spans: usize,
    /// Traces retained.
    pub traces_retained: usize,
    /// Prefix-tree nodes (with the root).
    pub tree_nodes: usize,
    /// On a query node (`dei-collector query`): which shards the merged view holds. Absent on a shard or a
    /// single dei-collector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<crate::views::PeersView>,
}
