//! The repeated-call anti-pattern (paper §6): the same signature and payload issued more than once while
//! serving one request, e.g. `getCurrentUser` called by every layer instead of once.
//!
//! Two scopes are reported:
//! - `same_parent`: more than one call with equal signature and payload digest under one parent index (one
//!   caller scope) in one trace;
//! - `across_layers`: equal signature and payload under two or more distinct parents of one trace.
//!
//! Calls without a `dei.payload.digest` are not considered: without the payload, equal signatures say
//! nothing about redundant work.

use super::trace_hex;
use crate::state::CollectorState;
use crate::views::RepeatScope;
pub use crate::views::RepeatedCall as Finding;
use dei_propagator::{Index, PayloadDigest};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

type Key = (RepeatScope, Arc<str>, PayloadDigest, Option<Index>);

/// Finds repeated calls in the retained traces, most widespread first.
pub fn detect(a: &CollectorState) -> Vec<Finding> {
    let mut agg: BTreeMap<Key, Finding> = BTreeMap::new();
    for t in a.traces.ordered() {
        let mut same_parent: HashMap<(Arc<str>, PayloadDigest, Index), Vec<usize>> = HashMap::new();
        let mut by_call: HashMap<(Arc<str>, PayloadDigest), BTreeSet<Index>> = HashMap::new();
        for (i, o) in t.occurrences.iter().enumerate() {
            let (Some(sig), Some(p)) = (o.signature.clone(), o.payload) else {
                continue;
            };
            // the root's calls and the root itself share the root as their scope
            let parent = o.index.parent().unwrap_or_else(Index::root);
            same_parent.entry((sig.clone(), p, parent.clone())).or_default().push(i);
            by_call.entry((sig, p)).or_default().insert(parent);
        }
        let mut add = |key: Key, calls: u64, callers: Vec<Arc<str>>| {
            let f = agg.entry(key.clone()).or_insert_with(|| Finding {
                scope: key.0,
                signature: key.1.clone(),
                payload_digest: key.2.to_hex(),
                parent: key.3.as_ref().map(|p| crate::analysis::named(a, p)),
                callers: BTreeSet::new(),
                traces: 0,
                max_calls_in_one_trace: 0,
                total_calls: 0,
                example_trace: trace_hex(&t.trace_id),
            });
            f.traces += 1;
            f.total_calls += calls;
            f.max_calls_in_one_trace = f.max_calls_in_one_trace.max(calls);
            f.callers.extend(callers);
        };
        for ((sig, p, parent), occ) in same_parent {
            if occ.len() > 1 {
                let callers = occ
                    .iter()
                    .filter_map(|&i| t.occurrences[i].client_service.clone())
                    .collect();
                add(
                    (RepeatScope::SameParent, sig, p, Some(parent)),
                    occ.len() as u64,
                    callers,
                );
            }
        }
        for ((sig, p), parents) in by_call {
            if parents.len() > 1 {
                let callers = t
                    .occurrences
                    .iter()
                    .filter(|o| o.signature.as_ref() == Some(&sig) && o.payload == Some(p))
                    .filter_map(|o| o.client_service.clone())
                    .collect::<Vec<_>>();
                let calls = t
                    .occurrences
                    .iter()
                    .filter(|o| o.signature.as_ref() == Some(&sig) && o.payload == Some(p))
                    .count() as u64;
                add((RepeatScope::AcrossLayers, sig, p, None), calls, callers);
            }
        }
    }
    let mut out: Vec<Finding> = agg.into_values().collect();
    out.sort_by(|a, b| b.traces.cmp(&a.traces).then(b.total_calls.cmp(&a.total_calls)));
    out
}
