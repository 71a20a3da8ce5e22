//! JSON views of the tree: nodes, subtrees, one trace's tree and diffs.

use crate::analysis::{NamedIndex, trace_hex};
use crate::analyzer::Analyzer;
use crate::graph::histogram::Histogram;
use crate::tree::stacks::StackFrames;
use crate::tree::traces::{Occurrence, TraceRecord};
use crate::tree::{Node, NodeId};
use dei_propagator::Index;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Latency summary of a histogram.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Observations.
    pub count: u64,
    /// Mean, seconds.
    pub mean_s: f64,
    /// Upper bound of the median's bucket, seconds.
    pub p50_s: f64,
    /// Upper bound of the 99th percentile's bucket, seconds.
    pub p99_s: f64,
    /// Largest, seconds.
    pub max_s: f64,
}

impl From<&Histogram> for Latency {
    fn from(h: &Histogram) -> Self {
        Latency {
            count: h.count,
            mean_s: h.mean(),
            p50_s: h.quantile_upper_bound(0.5),
            p99_s: h.quantile_upper_bound(0.99),
            max_s: h.max,
        }
    }
}

/// One node as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    /// The index (wire form).
    pub index: String,
    /// The last element (`digest count [~]`), `null` for the root.
    pub element: Option<String>,
    /// Depth (elements).
    pub depth: usize,
    /// Readable signature.
    pub signature: Option<Arc<str>>,
    /// Instantiation.
    pub instantiation: Option<Arc<str>>,
    /// Calling services.
    pub client_services: BTreeMap<Arc<str>, u64>,
    /// Called services.
    pub server_services: BTreeMap<Arc<str>, u64>,
    /// Uninstrumented peers named by the client spans.
    pub peers: BTreeMap<Arc<str>, u64>,
    /// RPC occurrences.
    pub seen: u64,
    /// Distinct traces.
    pub traces: u64,
    /// Occurrences with errors.
    pub errors: u64,
    /// Injected faults by kind.
    pub faults: BTreeMap<String, u64>,
    /// `dei.ambiguous` flags.
    pub ambiguous_flagged: u64,
    /// Index collisions within a trace.
    pub collisions: u64,
    /// Client-side latency.
    pub client_latency: Latency,
    /// Server-side latency.
    pub server_latency: Latency,
    /// First seen, Unix ns.
    pub first_seen_unix_nano: u64,
    /// Last seen, Unix ns.
    pub last_seen_unix_nano: u64,
    /// Preliminary (unresolved stream) node.
    pub preliminary: bool,
    /// Number of children.
    pub children: usize,
    /// Readable stack, innermost first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<String>>,
}

impl NodeView {
    /// The view of a node.
    pub fn of(n: &Node, stacks: &StackFrames) -> NodeView {
        let s = &n.stats;
        NodeView {
            index: n.index.encode(),
            element: n.index.last().map(|e| e.to_string()),
            depth: n.index.depth(),
            signature: s.signature.clone(),
            instantiation: s.instantiation.clone(),
            client_services: s.client_services.clone(),
            server_services: s.server_services.clone(),
            peers: s.peers.clone(),
            seen: s.seen,
            traces: s.traces,
            errors: s.errors,
            faults: s.faults.clone(),
            ambiguous_flagged: s.ambiguous_flagged,
            collisions: s.collisions,
            client_latency: (&s.client_latency).into(),
            server_latency: (&s.server_latency).into(),
            first_seen_unix_nano: s.first_seen_ns,
            last_seen_unix_nano: s.last_seen_ns,
            preliminary: s.preliminary,
            children: n.children.len(),
            stack: s.stack.clone().or_else(|| {
                s.stack_digest
                    .and_then(|d| stacks.get(&d))
                    .map(|frames| frames.to_vec())
            }),
        }
    }
}

/// A node with its children, recursively.
#[derive(Debug, Clone, Serialize)]
pub struct SubtreeView {
    /// The node.
    #[serde(flatten)]
    pub node: NodeView,
    /// Its children (empty past the depth limit).
    pub subtree: Vec<SubtreeView>,
}

/// The subtree at `id`, at most `max_depth` levels below and `budget` nodes in total.
pub fn subtree(a: &Analyzer, id: NodeId, max_depth: usize, budget: &mut usize) -> Option<SubtreeView> {
    let n = a.tree.node(id)?;
    *budget = budget.checked_sub(1)?;
    let mut children = Vec::new();
    if max_depth > 0 {
        for c in a.tree.children(id) {
            match subtree(a, c, max_depth - 1, budget) {
                Some(v) => children.push(v),
                None => break,
            }
        }
    }
    Some(SubtreeView {
        node: NodeView::of(n, &a.stacks),
        subtree: children,
    })
}

/// One RPC of one trace, with its nested RPCs.
#[derive(Debug, Clone, Serialize)]
pub struct TraceNode {
    /// The occurrence.
    #[serde(flatten)]
    pub occurrence: Occurrence,
    /// RPCs whose index extends this one.
    pub children: Vec<TraceNode>,
}

/// The tree of one trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceView {
    /// Trace id, hex.
    pub trace_id: String,
    /// Earliest span start, Unix ns.
    pub start_unix_nano: u64,
    /// RPCs.
    pub rpcs: usize,
    /// Top-level RPCs (whose parent index is not in the trace), with their nested RPCs.
    pub tree: Vec<TraceNode>,
    /// Spans still waiting for a stream mapping.
    pub pending_preliminary: usize,
}

/// The tree of one retained trace.
pub fn trace_view(t: &TraceRecord) -> TraceView {
    let mut order: Vec<usize> = (0..t.occurrences.len()).collect();
    order.sort_by_key(|&i| (t.occurrences[i].index.depth(), t.occurrences[i].start_ns(), i));
    let known: BTreeSet<&Index> = t.occurrences.iter().map(|o| &o.index).collect();
    fn build(t: &TraceRecord, me: usize, order: &[usize], depth_guard: usize) -> TraceNode {
        let idx = &t.occurrences[me].index;
        let mut children = Vec::new();
        if depth_guard > 0 {
            for &j in order {
                let o = &t.occurrences[j];
                if o.index.depth() == idx.depth() + 1 && o.index.starts_with(idx) {
                    children.push(build(t, j, order, depth_guard - 1));
                }
            }
        }
        TraceNode {
            occurrence: t.occurrences[me].clone(),
            children,
        }
    }
    let tops: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| t.occurrences[i].index.parent().is_none_or(|p| !known.contains(&p)))
        .collect();
    TraceView {
        trace_id: trace_hex(&t.trace_id),
        start_unix_nano: t.start_ns,
        rpcs: t.occurrences.len(),
        tree: tops.into_iter().map(|i| build(t, i, &order, 128)).collect(),
        pending_preliminary: t.pending.len() + t.pending_messages.len(),
    }
}

/// Which traces one side of a diff covers.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Traces whose first span started in `[from, to)`, Unix ns.
    Window {
        /// Start, inclusive.
        from: u64,
        /// End, exclusive.
        to: u64,
    },
    /// These trace ids.
    Traces(Vec<[u8; 16]>),
}

/// One side of a diff.
#[derive(Debug, Clone, Serialize)]
pub struct DiffSide {
    /// Retained traces selected.
    pub traces: usize,
    /// Distinct indexes in them.
    pub indexes: usize,
}

/// Which indexes appeared and which disappeared between two selections of traces.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    /// Side A (before).
    pub a: DiffSide,
    /// Side B (after).
    pub b: DiffSide,
    /// Indexes in both.
    pub common: usize,
    /// In B, not in A (up to the limit).
    pub appeared: Vec<NamedIndex>,
    /// In A, not in B (up to the limit).
    pub disappeared: Vec<NamedIndex>,
    /// Appeared, in total.
    pub appeared_total: usize,
    /// Disappeared, in total.
    pub disappeared_total: usize,
}

fn select(a: &Analyzer, s: &Selection) -> (usize, BTreeSet<Index>) {
    let mut n = 0;
    let mut set = BTreeSet::new();
    let mut take = |t: &TraceRecord| {
        n += 1;
        set.extend(t.indexes().cloned());
    };
    match s {
        Selection::Window { from, to } => {
            for t in a.traces.ordered() {
                if t.start_ns >= *from && t.start_ns < *to {
                    take(t);
                }
            }
        }
        Selection::Traces(ids) => {
            for id in ids {
                if let Some(t) = a.traces.get(id) {
                    take(t);
                }
            }
        }
    }
    (n, set)
}

/// The diff between two selections of retained traces.
pub fn diff(a: &Analyzer, sa: &Selection, sb: &Selection, limit: usize) -> Diff {
    let (na, ia) = select(a, sa);
    let (nb, ib) = select(a, sb);
    let appeared: Vec<&Index> = ib.difference(&ia).collect();
    let disappeared: Vec<&Index> = ia.difference(&ib).collect();
    Diff {
        a: DiffSide {
            traces: na,
            indexes: ia.len(),
        },
        b: DiffSide {
            traces: nb,
            indexes: ib.len(),
        },
        common: ia.intersection(&ib).count(),
        appeared_total: appeared.len(),
        disappeared_total: disappeared.len(),
        appeared: appeared.iter().take(limit).map(|i| NamedIndex::of(a, i)).collect(),
        disappeared: disappeared.iter().take(limit).map(|i| NamedIndex::of(a, i)).collect(),
    }
}
