//! Circuit-breaker detection (paper §6): faults are injected on an index; in later traces that index and
//! its whole subtree vanish although the caller still ran (a breaker opened); then, in traces without
//! faults, the index comes back (the breaker closed again).
//!
//! Indexes are stable under control-flow changes, so a vanished index cannot be confused with a different
//! call that took its place.
//!
//! A later trace counts as *comparable* when the caller had the chance to make the call: it contains the
//! index's parent (for a top-level index, every trace is comparable), and nothing in it was perturbed on
//! purpose: it was not run under a fault plan (`dei.fault.plan` on a server span) and carries no injected
//! fault. Otherwise a fault search, whose executions each run under a different plan, would report a
//! breaker wherever one plan's fault kept the program from reaching another plan's index. Traces are
//! ordered by their first span start.

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
            // a trace run under a fault plan, or with any injected fault, lost calls by design: the
            // search changing its plan between executions is not a breaker opening
            let perturbed = t.planned_faults > 0 || t.occurrences.iter().any(|o| o.fault.is_some());
            let comparable = !perturbed && (top_level || t.contains_index(&parent));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fixtures::TraceBuilder;
    use crate::counters::Counters;
    use crate::state::StateConfig;
    use std::sync::Arc;
    use std::time::Instant;

    /// Trace `n`: frontend → users (`Some(faulted)`, or not called), frontend → catalog; every span carries a
    /// plan of `planned` faults.
    fn trace(a: &mut CollectorState, n: u8, users: Option<bool>, planned: u32) -> Option<Index> {
        let mut b = TraceBuilder::new(n, u64::from(n) * 1_000_000_000);
        let root = b.root("frontend");
        let r = Index::root();
        let called = users.map(|faulted| {
            let fault = faulted.then_some("c");
            b.rpc((&r, root), "frontend", "users", "users.Users/Get", "u", 1, 1, 5, fault)
                .index
        });
        b.rpc(
            (&r, root),
            "frontend",
            "catalog",
            "catalog.Catalog/List",
            "c",
            1,
            6,
            20,
            None,
        );
        for s in &mut b.spans {
            s.dei.planned_faults = planned;
        }
        a.ingest(b.spans, Instant::now());
        called
    }

    fn state() -> CollectorState {
        CollectorState::new(StateConfig::default(), Arc::new(Counters::default()))
    }

    #[test]
    fn an_absence_under_another_fault_plan_is_no_breaker() {
        // a search: the fault-free run, then a plan that fails users, then a plan that fails something else
        // and keeps the program from calling users, then the fault-free program again
        let mut a = state();
        trace(&mut a, 1, Some(false), 0);
        trace(&mut a, 2, Some(true), 1);
        trace(&mut a, 3, None, 1);
        trace(&mut a, 4, Some(false), 0);
        assert_eq!(detect(&a, &Params::default()), vec![]);

        // the same absence in a trace run without any plan is a breaker, open until the call comes back
        let mut a = state();
        trace(&mut a, 1, Some(false), 0);
        let users = trace(&mut a, 2, Some(true), 1).expect("users was called");
        trace(&mut a, 3, None, 0);
        let episodes = detect(&a, &Params::default());
        assert_eq!(episodes.len(), 1, "{episodes:?}");
        assert_eq!(episodes[0].node.index, users.encode());
        assert_eq!(episodes[0].state, crate::views::EpisodeState::Open);
        assert_eq!(episodes[0].absent_traces, 1);
    }
}
