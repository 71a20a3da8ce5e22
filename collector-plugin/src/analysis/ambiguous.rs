//! Ambiguous indexes: flagged by instrumentation (`dei.ambiguous`, e.g. concurrent calls with the same
//! signature, stack and payload — paper §7's observationally equivalent case) or observed on two distinct
//! RPC occurrences of one trace.

use super::NamedIndex;
use crate::state::CollectorState;
pub use crate::views::AmbiguousIndex as Finding;

/// Every ambiguous index, most frequent first.
pub fn detect(a: &CollectorState) -> Vec<Finding> {
    let mut out: Vec<Finding> = a
        .tree
        .ids()
        .filter_map(|id| a.tree.node(id))
        .filter(|n| n.stats.ambiguous_flagged > 0 || n.stats.collisions > 0)
        .map(|n| Finding {
            node: NamedIndex {
                index: n.index.encode(),
                signature: n.stats.signature.clone(),
            },
            flagged_by_instrumentation: n.stats.ambiguous_flagged,
            collisions_in_trace: n.stats.collisions,
            seen: n.stats.seen,
            client_services: n.stats.client_services.clone(),
        })
        .collect();
    out.sort_by(|a, b| {
        (b.flagged_by_instrumentation + b.collisions_in_trace)
            .cmp(&(a.flagged_by_instrumentation + a.collisions_in_trace))
            .then_with(|| a.node.cmp(&b.node))
    });
    out
}
