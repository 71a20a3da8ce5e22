//! Analyses over the prefix tree and the retained traces (paper §6). None of the usual service-graph tools
//! has these, because they need the per-RPC names that indexes give.
//!
//! - [`circuit_breaker`]: after faults on an index, that index and its subtree vanish from later traces, then
//!   come back.
//! - [`repeated_call`]: the same signature and payload issued more than once under one parent (or on several
//!   layers of one request).
//! - [`chained_call`]: two calls in sequence to one service where the second's input appears to come from the
//!   first's output (heuristic; limits documented there).
//! - [`ambiguous`]: indexes flagged ambiguous by instrumentation or seen twice in one trace.
//! - [`projection`]: how many distinct RPCs collapse into one under a coarser instantiation, and where.
//!
//! Per-trace analyses look at the traces the collector still retains (see
//! [`TraceStoreConfig`](crate::tree::traces::TraceStoreConfig)).

pub mod ambiguous;
pub mod chained_call;
pub mod circuit_breaker;
pub mod projection;
pub mod repeated_call;

use crate::state::CollectorState;
pub use crate::views::{NamedIndex, Report};
use dei_propagator::{Index, Instantiation};

/// Runs every analysis; projections under Filibuster's and 3MileBeach's instantiations plus `extra`.
pub fn report(a: &CollectorState, extra: &[Instantiation]) -> Report {
    let mut targets = vec![Instantiation::filibuster(), Instantiation::three_mile_beach()];
    for i in extra {
        if !targets.contains(i) {
            targets.push(i.clone());
        }
    }
    Report {
        traces_analyzed: a.traces.len(),
        circuit_breakers: circuit_breaker::detect(a, &circuit_breaker::Params::default()),
        repeated_calls: repeated_call::detect(a),
        chained_calls: chained_call::detect(a, &chained_call::Params::default()),
        ambiguous: ambiguous::detect(a),
        projections: targets.iter().map(|i| projection::project_tree(a, i, 50)).collect(),
    }
}

/// Names `index` with the signature stored in the tree.
pub fn named(a: &CollectorState, index: &Index) -> NamedIndex {
    NamedIndex {
        index: index.encode(),
        signature: a.tree.get(index).and_then(|(_, n)| n.stats.signature.clone()),
    }
}

/// Hex of a trace id.
pub fn trace_hex(t: &[u8; 16]) -> String {
    hex::encode(t)
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
