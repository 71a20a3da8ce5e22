//! Builds the views of the tree from the state: nodes, subtrees, one trace's tree and diffs.

use crate::analysis::trace_hex;
use crate::state::CollectorState;
use crate::tree::stacks::StackFrames;
use crate::tree::traces::TraceRecord;
use crate::tree::{Node, NodeId};
use crate::views::{Diff, DiffSide, NodeView, SubtreeView, TraceNode, TraceView};
use dei_propagator::Index;
use std::collections::{BTreeSet, HashMap};

/// The innermost readable frame: the first with a source location (`(path:line…)`) that is not in the
/// standard library or a dependency from cargo's registry, or else the first frame.
pub fn top_frame(frames: &[String]) -> Option<String> {
    let readable = |f: &&String| {
        let location = f.rsplit_once('(').map_or("", |(_, l)| l);
        let has_line = location
            .split(':')
            .nth(1)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        has_line
            && ![
                "/rustc/",
                "/.cargo/registry/",
                "/.cargo/git/",
                "library/std/",
                "library/core/",
            ]
            .iter()
            .any(|p| location.contains(p))
    };
    frames.iter().find(readable).or(frames.first()).cloned()
}

/// The view of a node.
pub fn node_view(n: &Node, stacks: &StackFrames) -> NodeView {
    let s = &n.stats;
    let stack = s.stack.clone().or_else(|| {
        s.stack_digest
            .and_then(|d| stacks.get(&d))
            .map(|frames| frames.to_vec())
    });
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
        top_frame: stack.as_deref().and_then(top_frame),
        stack,
        payload_digest: s.payload_digest,
        stack_digest: s.stack_digest,
    }
}

/// The subtree at `id`, at most `max_depth` levels below and `budget` nodes in total.
pub fn subtree(a: &CollectorState, id: NodeId, max_depth: usize, budget: &mut usize) -> Option<SubtreeView> {
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
        node: node_view(n, &a.stacks),
        subtree: children,
    })
}

/// The tree of one retained trace: each occurrence appears once, under the occurrence of its parent index.
/// When several occurrences share an index (a collision), the occurrences under that index are listed
/// under the first of them (by start); the others have no children. Linear in the occurrences (plus the
/// sort).
pub fn trace_view(t: &TraceRecord) -> TraceView {
    let mut order: Vec<usize> = (0..t.occurrences.len()).collect();
    order.sort_by_key(|&i| (t.occurrences[i].index.depth(), t.occurrences[i].start_ns(), i));
    // the first occurrence (in `order`) of each index: where that index's children go
    let mut first: HashMap<&Index, usize> = HashMap::with_capacity(order.len());
    for &i in &order {
        first.entry(&t.occurrences[i].index).or_insert(i);
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); t.occurrences.len()];
    let mut tops = Vec::new();
    for &i in &order {
        let parent = t.occurrences[i].index.parent().and_then(|p| first.get(&p).copied());
        match parent {
            Some(p) => children[p].push(i),
            None => tops.push(i),
        }
    }
    fn build(t: &TraceRecord, me: usize, children: &[Vec<usize>]) -> TraceNode {
        TraceNode {
            occurrence: t.occurrences[me].clone(),
            children: children[me].iter().map(|&c| build(t, c, children)).collect(),
        }
    }
    TraceView {
        trace_id: trace_hex(&t.trace_id),
        start_unix_nano: t.start_ns,
        rpcs: t.occurrences.len(),
        // an index is at most 64 elements deep, so is the recursion
        tree: tops.into_iter().map(|i| build(t, i, &children)).collect(),
        pending_preliminary: t.pending.len() + t.pending_messages.len(),
        occurrences_dropped: t.occurrences_dropped,
        spans_dei_skipped: t.spans_dei_skipped,
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

fn select(a: &CollectorState, s: &Selection) -> (usize, BTreeSet<Index>) {
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
pub fn diff(a: &CollectorState, sa: &Selection, sb: &Selection, limit: usize) -> Diff {
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
        appeared: appeared
            .iter()
            .take(limit)
            .map(|i| crate::analysis::named(a, i))
            .collect(),
        disappeared: disappeared
            .iter()
            .take(limit)
            .map(|i| crate::analysis::named(a, i))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::top_frame;

    #[test]
    fn the_top_frame_is_the_innermost_with_a_source_location_in_the_program() {
        let frames = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let f = frames(&[
            "tokio::runtime::task::poll (/root/.cargo/registry/src/index/tokio-1.0/src/runtime/task.rs:12:5)",
            "core::future::poll (/rustc/abc/library/core/src/future.rs:1:1)",
            "{async_block#0} (examples/corpus/src/cinema.rs:201:102)",
            "main (examples/demo.rs:20:1)",
        ]);
        assert_eq!(
            top_frame(&f).as_deref(),
            Some("{async_block#0} (examples/corpus/src/cinema.rs:201:102)")
        );
        let f = frames(&["0x7f00aa", "<unknown>"]);
        assert_eq!(
            top_frame(&f).as_deref(),
            Some("0x7f00aa"),
            "no frame has a location: the innermost"
        );
        assert_eq!(top_frame(&[]), None);
    }
}
