//! The service graph as the API sends it (`GET /api/v1/graph`).

use super::Latency;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A node of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphNode {
    /// Service or virtual node name.
    pub id: Arc<str>,
    /// True for uninstrumented peers and `user`: a callee never seen serving (or served by several services).
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
    /// On a service: the `rpc.service` names its server spans carried. A client span that named one of them
    /// and met no server span (the call failed before reaching it) is counted on the edge to this service.
    #[serde(default)]
    pub serves: Vec<Arc<str>>,
    /// On a virtual node named by an `rpc.service` that several services serve: those services (it stays
    /// virtual, since a failed call cannot say which of them it would have reached); empty otherwise.
    #[serde(default)]
    pub served_by: Vec<Arc<str>>,
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
    /// Of `requests`: client spans that met no server span and named the server by an `rpc.service` it
    /// serves (calls that failed before reaching it), merged from what would be an edge to a virtual node.
    #[serde(default)]
    pub merged_requests: u64,
    /// Of `failed`: the failed ones among `merged_requests`.
    #[serde(default)]
    pub merged_failed: u64,
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
