//! Circuit-breaker detection (paper §6): faults are injected on an index; in later traces that index and
//! its whole subtree vanish although the caller still ran (a breaker opened); then, in traces without
//! faults, the index comes back (the breaker closed again).
//!
//! Indexes are stable under control-flow changes, so a vanished index cannot be confused with a different
//! call that took its place.
//!
//! A later trace counts as *comparable* when the caller had the chance to make the call: it contains the
//! index's parent (for a top-level index, every trace is comparable). Traces are ordered by their first span
//! start.

use super::trace_hex;
use crate::state::CollectorState;
pub use crate::views::Episode;
use dei_propagator::Index;
use std::collections::BTreeSet;

/// Parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Fewest consecutive comparable traces without the index for an episode.
    pub min_absent: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params { min_absent: 1 }
    }
}

/// Finds breaker episodes in the retained traces.
pub fn detect(a: &CollectorState, params: &Params) -> Vec<Episode> {
    let traces = a.traces.ordered();
    let mut faulted: BTreeSet<Index> = BTreeSet::new();
    for t in &traces {
        for o in &t.occurrences {
            if o.fault.is_some() {
                faulted.insert(o.index.clone());
            }
        }
    }
    let mut out = Vec::new();
    for index in faulted {
        let parent = index.parent().unwrap_or_default();
        let top_level = parent.is_root();
        let subtree_size = a
            .tree
            .get(&index)
            .map_or(0, |(id, _)| a.tree.subtree(id, usize::MAX).len());
        // state machine over traces
        let mut fault_traces = 0usize;
        let mut faults = BTreeSet::new();
        let mut last_fault: Option<[u8; 16]> = None;
        let mut absent: Vec<[u8; 16]> = Vec::new();
        let close = |out: &mut Vec<Episode>,
                     fault_traces: usize,
                     faults: &BTreeSet<String>,
                     last_fault: [u8; 16],
                     absent: &[[u8; 16]],
                     reclosed: Option<[u8; 16]>| {
            if absent.len() >= params.min_absent.max(1) {
                out.push(Episode {
                    node: crate::analysis::named(a, &index),
                    fault_traces,
                    faults: faults.clone(),
                    last_fault_trace: trace_hex(&last_fault),
                    absent_traces: absent.len(),
                    first_absent_trace: trace_hex(&absent[0]),
                    reclosed_trace: reclosed.map(|t| trace_hex(&t)),
                    state: if reclosed.is_some() {
                        crate::views::EpisodeState::Reclosed
                    } else {
                        crate::views::EpisodeState::Open
                    },
                    subtree_size,
                });
            }
        };
        for t in &traces {
            let fault_here: Vec<&str> = t
                .occurrences
                .iter()
                .filter(|o| o.index == index)
                .filter_map(|o| o.fault.as_deref())
                .collect();
            if !fault_here.is_empty() {
                if let Some(lf) = last_fault.filter(|_| !absent.is_empty()) {
                    close(&mut out, fault_traces, &faults, lf, &absent, Some(t.trace_id));
                    fault_traces = 0;
                    faults.clear();
                }
                absent.clear();
                fault_traces += 1;
                faults.extend(fault_here.into_iter().map(String::from));
                last_fault = Some(t.trace_id);
                continue;
            }
            let Some(lf) = last_fault else { continue };
            let comparable = top_level || t.contains_index(&parent);
            if !comparable {
                continue;
            }
            let present = t.indexes().any(|i| i.starts_with(&index));
            if present {
                close(&mut out, fault_traces, &faults, lf, &absent, Some(t.trace_id));
                last_fault = None;
                fault_traces = 0;
                faults.clear();
                absent.clear();
            } else {
                absent.push(t.trace_id);
            }
        }
        if let Some(lf) = last_fault {
            close(&mut out, fault_traces, &faults, lf, &absent, None);
        }
    }
    out
}
