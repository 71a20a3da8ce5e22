//! The chained-call anti-pattern (paper §6): a caller issues two calls in sequence to one service, and the
//! second's input comes from the first's output — e.g. `getCurrentUser` then `getProfileByUser(user)`,
//! because the service lacks an API that does both.
//!
//! # Heuristic
//! Spans carry digests of request payloads, not of responses, so data flow cannot be observed directly. A
//! pair `(A, B)` of calls is reported when, in the retained traces:
//! 1. A and B are issued under the same parent index (one caller scope) to the same callee service, with
//!    different signatures, and B is the next call to that service after A;
//! 2. B starts after A ends in every trace where both occur (strict sequencing: the caller waited for A);
//! 3. it happens in at least `min_traces` traces.
//!
//! The finding's `confidence` is `data_dependent` when, across traces, B's payload is a function of A's
//! payload (equal A inputs always led to equal B inputs) and both vary (at least two distinct values each):
//! that is what "B's input is derived from A's output" looks like when A is deterministic. Otherwise it is
//! `sequential_only`.
//!
//! # Limits
//! - Correlation, not data flow: if the caller computes both inputs from its own request, B's input also
//!   follows A's and the pair is a false positive.
//! - If A's response varies for equal inputs (time, randomness), the dependency is missed (reported as
//!   `sequential_only`).
//! - Traces evicted from the store are not seen; a caller that is not instrumented with payload digests only
//!   gets `sequential_only` findings.

use super::trace_hex;
use crate::state::CollectorState;
pub use crate::views::ChainedCall as Finding;
use dei_propagator::{Index, PayloadDigest};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Parameters of the heuristic.
#[derive(Debug, Clone)]
pub struct Params {
    /// Fewest traces showing the sequence.
    pub min_traces: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { min_traces: 1 }
    }
}

/// (parent scope, callee service, first signature, second signature).
type PairKey = (Index, Arc<str>, Arc<str>, Arc<str>);

#[derive(Default)]
struct Acc {
    traces: u64,
    overlapped: u64,
    caller: Option<Arc<str>>,
    pairs: HashMap<Option<PayloadDigest>, HashSet<Option<PayloadDigest>>>,
    seconds: HashSet<Option<PayloadDigest>>,
    gaps: Vec<f64>,
    example: Option<[u8; 16]>,
}

/// Finds chained calls in the retained traces.
pub fn detect(a: &CollectorState, params: &Params) -> Vec<Finding> {
    let mut acc: BTreeMap<PairKey, Acc> = BTreeMap::new();
    for t in a.traces.ordered() {
        // calls per (parent scope, callee service), in start order
        let mut scopes: HashMap<(Index, Arc<str>), Vec<usize>> = HashMap::new();
        for (i, o) in t.occurrences.iter().enumerate() {
            let (Some(service), Some(_)) = (o.server_service.clone(), o.signature.as_ref()) else {
                continue;
            };
            if o.index.last().is_some_and(|e| e.preliminary) {
                continue;
            }
            scopes
                .entry((o.index.parent().unwrap_or_else(Index::root), service))
                .or_default()
                .push(i);
        }
        let mut seen_here: HashSet<PairKey> = HashSet::new();
        for ((parent, service), mut calls) in scopes {
            if calls.len() < 2 {
                continue;
            }
            calls.sort_by_key(|&i| (t.occurrences[i].start_ns(), i));
            for w in calls.windows(2) {
                let (x, y) = (&t.occurrences[w[0]], &t.occurrences[w[1]]);
                let (Some(sx), Some(sy)) = (x.signature.clone(), y.signature.clone()) else {
                    continue;
                };
                if sx == sy {
                    continue;
                }
                let key = (parent.clone(), service.clone(), sx, sy);
                if !seen_here.insert(key.clone()) {
                    continue;
                }
                let e = acc.entry(key).or_default();
                if y.start_ns() < x.end_ns() {
                    e.overlapped += 1;
                    continue;
                }
                e.traces += 1;
                e.caller = e.caller.clone().or_else(|| x.client_service.clone());
                e.pairs.entry(x.payload).or_default().insert(y.payload);
                e.seconds.insert(y.payload);
                e.gaps.push((y.start_ns() - x.end_ns()) as f64 / 1e6);
                e.example.get_or_insert(t.trace_id);
            }
        }
    }
    let mut out = Vec::new();
    for ((parent, service, first, second), mut e) in acc {
        if e.overlapped > 0 || e.traces < params.min_traces.max(1) {
            continue;
        }
        let functional = e.pairs.values().all(|s| s.len() == 1);
        let has_payloads = !e.pairs.contains_key(&None) && !e.seconds.contains(&None);
        let data_dependent = has_payloads && functional && e.pairs.len() >= 2 && e.seconds.len() >= 2;
        e.gaps.sort_by(|a, b| a.total_cmp(b));
        out.push(Finding {
            parent: crate::analysis::named(a, &parent),
            caller: e.caller,
            service,
            first,
            second,
            traces: e.traces,
            distinct_first_inputs: e.pairs.len(),
            distinct_second_inputs: e.seconds.len(),
            confidence: if data_dependent {
                crate::views::Confidence::DataDependent
            } else {
                crate::views::Confidence::SequentialOnly
            },
            median_gap_ms: e.gaps.get(e.gaps.len() / 2).copied().unwrap_or(0.0),
            example_trace: trace_hex(
                &e.example
                    .expect("a finding counts at least one trace, which set the example"),
            ),
        });
    }
    out.sort_by(|a, b| {
        (b.confidence == crate::views::Confidence::DataDependent)
            .cmp(&(a.confidence == crate::views::Confidence::DataDependent))
            .then(b.traces.cmp(&a.traces))
    });
    out
}
