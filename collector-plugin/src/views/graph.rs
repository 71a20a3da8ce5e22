//! The service graph as the API sends it (`GET /api/v1/graph`).

use super::Latency;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A node of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphNode {
    /// Service or virtual node name.
    pub id: Arc<str>,
    /// True for uninstrumented peers and `user`.
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
}

/// What an edge joins: the servicegraph connector's `connection_type`, or `index` for an edge seen only
/// through the prefix relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    /// Both ends instrumented (`""`).
    #[serde(rename = "")]
    Direct,
    /// One end is a virtual node.
    VirtualNode,
    /// Producer/consumer pair.
    MessagingSystem,
    /// The virtual node is a database (`db.system`).
    Database,
    /// Seen only through the prefix relation of indexes.
    Index,
}

impl EdgeType {
    /// The label value (`connection_type` in Prometheus and JSON).
    pub fn label(self) -> &'static str {
        match self {
            EdgeType::Direct => "",
            EdgeType::VirtualNode => "virtual_node",
            EdgeType::MessagingSystem => "messaging_system",
            EdgeType::Database => "database",
            EdgeType::Index => "index",
        }
    }
}

/// An edge of the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphEdge {
    /// Caller.
    pub client: Arc<str>,
    /// Callee.
    pub server: Arc<str>,
    /// servicegraph `connection_type`, or `index` for an edge seen only through the prefix relation.
    pub connection_type: EdgeType,
    /// Requests from span pairs.
    pub requests: u64,
    /// Failed requests from span pairs.
    pub failed: u64,
    /// RPC occurrences under indexes whose caller/callee services are these (prefix relation).
    pub index_requests: u64,
    /// Client latency.
    pub client_latency: Option<Latency>,
    /// Server latency.
    pub server_latency: Option<Latency>,
}

/// The graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphView {
    /// Nodes.
    pub nodes: Vec<GraphNode>,
    /// Edges.
    pub edges: Vec<GraphEdge>,
}
