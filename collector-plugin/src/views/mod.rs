//! The JSON the HTTP API sends, as `Serialize + Deserialize` types: the server serializes these, and a client
//! (such as dei-sfit's `CollectorSpans`) deserializes the same types, so that a renamed field fails to parse
//! instead of becoming a default.
//!
//! This module compiles without the server: depend on `dei-collector = { default-features = false }` to get
//! only these types and their serde dependencies.

mod analysis;
mod graph;
pub mod hex;
mod peers;
mod stats;
mod trace;
mod tree;

/// The search reports (`GET /api/v1/search/reports`).
mod search;

pub use analysis::{
    AmbiguousIndex, ChainedCall, Collapse, Confidence, Episode, EpisodeState, Projection, RepeatScope, RepeatedCall,
    Report, UnstableName,
};
pub use graph::{EdgeType, GraphEdge, GraphNode, GraphView};
pub use peers::{PeerStatus, PeersView};
pub use stats::{CountersSnapshot, Stats};
pub use trace::{
    MessageOf, NodeTraces, Occurrence, SpanStatus, StatusCode, StreamMessage, TraceList, TraceNode, TraceStatus,
    TraceSummary, TraceView,
};
pub use tree::{Diff, DiffSide, Latency, NamedIndex, NodeView, SubtreeView};

pub use search::{ReportEntry, ReportList, ReportProblem};
