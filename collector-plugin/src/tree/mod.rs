//! The DEI prefix tree: a trie of index elements across all traces.
//!
//! The index of a nested call has its caller's index as prefix (paper §6), so the RPCs of every trace merge
//! into one tree of every distinct RPC the system makes. Each node aggregates what its spans said (see
//! [`NodeStats`]). The tree is bounded: past `max_nodes`, the least recently touched leaves are evicted.
//!
//! Per-trace data (which indexes one trace touched, in which order, with which payload) lives in
//! [`traces::TraceStore`]; it feeds the trace view, diffs and the analyses.

pub(crate) mod interner;
pub mod stacks;
pub mod traces;

use crate::counters::Counters;
use crate::graph::histogram::Histogram;
use dei_propagator::{Element, Index};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// A node's position in the arena.
pub type NodeId = usize;

/// Most distinct services or faults remembered per node (beyond that they are counted under `"other"`).
const MAX_LABELS: usize = 16;

/// What a node knows about the RPCs at its index.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStats {
    /// The readable signature (`dei.signature`), or the span name when there was none.
    pub signature: Option<Arc<str>>,
    /// The instantiation the index was computed under.
    pub instantiation: Option<Arc<str>>,
    /// Services seen on the calling side, with counts.
    pub client_services: BTreeMap<Arc<str>, u64>,
    /// Services (or virtual peers) seen on the called side, with counts.
    pub server_services: BTreeMap<Arc<str>, u64>,
    /// Uninstrumented peers named by client spans (`peer.service`, `server.address`, ...), with counts.
    pub peers: BTreeMap<Arc<str>, u64>,
    /// RPC occurrences (a client span and its server span count once).
    pub seen: u64,
    /// Distinct traces.
    pub traces: u64,
    /// Occurrences with an ERROR status on either side.
    pub errors: u64,
    /// Injected faults (`dei.fault`), by fault.
    pub faults: BTreeMap<String, u64>,
    /// Spans that flagged this index ambiguous (`dei.ambiguous`).
    pub ambiguous_flagged: u64,
    /// Occurrences that shared this index with another occurrence in the same trace.
    pub collisions: u64,
    /// Client-side latency.
    pub client_latency: Histogram,
    /// Server-side latency.
    pub server_latency: Histogram,
    /// Earliest span start, Unix ns.
    pub first_seen_ns: u64,
    /// Latest span start, Unix ns.
    pub last_seen_ns: u64,
    /// The payload digest (`dei.payload.digest`) of the first span that carried one.
    pub payload_digest: Option<dei_propagator::PayloadDigest>,
    /// The readable call stack of the first span that carried one.
    pub stack: Option<Vec<String>>,
    /// The stack digest of the first span that carried one (its frames may come on another span:
    /// [`stacks::StackFrames`]).
    pub stack_digest: Option<dei_propagator::StackDigest>,
    /// The last element is preliminary (a stream before rewriting, or whose mapping never came).
    pub preliminary: bool,
}

impl NodeStats {
    /// Adds `o`'s counts and histograms to these (labels and first-seen values keep the first).
    pub(crate) fn merge(&mut self, o: &NodeStats) {
        if self.signature.is_none() {
            self.signature.clone_from(&o.signature);
        }
        if self.instantiation.is_none() {
            self.instantiation.clone_from(&o.instantiation);
        }
        for (k, v) in &o.client_services {
            bump(&mut self.client_services, k.clone(), *v);
        }
        for (k, v) in &o.server_services {
            bump(&mut self.server_services, k.clone(), *v);
        }
        for (k, v) in &o.peers {
            bump(&mut self.peers, k.clone(), *v);
        }
        self.seen += o.seen;
        self.traces += o.traces;
        self.errors += o.errors;
        for (k, v) in &o.faults {
            *self.faults.entry(k.clone()).or_insert(0) += v;
        }
        self.ambiguous_flagged += o.ambiguous_flagged;
        self.collisions += o.collisions;
        self.client_latency.merge(&o.client_latency);
        self.server_latency.merge(&o.server_latency);
        self.observe_time(o.first_seen_ns);
        self.observe_time(o.last_seen_ns);
        if self.stack.is_none() {
            self.stack.clone_from(&o.stack);
        }
        if self.stack_digest.is_none() {
            self.stack_digest = o.stack_digest;
        }
        if self.payload_digest.is_none() {
            self.payload_digest = o.payload_digest;
        }
    }

    /// Widens first/last seen to include `t` (0 is ignored).
    pub fn observe_time(&mut self, t: u64) {
        if t == 0 {
            return;
        }
        if self.first_seen_ns == 0 || t < self.first_seen_ns {
            self.first_seen_ns = t;
        }
        if t > self.last_seen_ns {
            self.last_seen_ns = t;
        }
    }
}

/// Adds `n` to a bounded label map.
pub fn bump(map: &mut BTreeMap<Arc<str>, u64>, key: Arc<str>, n: u64) {
    if map.len() >= MAX_LABELS && !map.contains_key(&key) {
        *map.entry(Arc::from("other")).or_insert(0) += n;
    } else {
        *map.entry(key).or_insert(0) += n;
    }
}

/// One node of the trie.
#[derive(Debug, Clone)]
pub struct Node {
    /// The full index of this node.
    pub index: Index,
    /// The parent node (`None` for the root).
    pub parent: Option<NodeId>,
    /// Children by element.
    pub children: HashMap<Element, NodeId>,
    /// Aggregates.
    pub stats: NodeStats,
    touched: u64,
}

impl Node {
    /// The tree's clock at this node's last change or touch ([`PrefixTree::clock`]).
    pub fn changed(&self) -> u64 {
        self.touched
    }
}

/// The prefix tree.
#[derive(Debug)]
pub struct PrefixTree {
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    by_index: HashMap<Index, NodeId>,
    max_nodes: usize,
    clock: u64,
    /// The indexes of removed nodes with the clock of their removal, newest last, for a query node that pulls
    /// what changed since a clock ([`PrefixTree::removed_since`]); bounded, see `removed_floor`.
    removed: VecDeque<(u64, Index)>,
    /// Removals at or before this clock were dropped from `removed`.
    removed_floor: u64,
}

/// The root's id.
pub const ROOT: NodeId = 0;

impl PrefixTree {
    /// An empty tree (just the root `1`) holding at most `max_nodes` nodes.
    pub fn new(max_nodes: usize) -> Self {
        let root = Node {
            index: Index::root(),
            parent: None,
            children: HashMap::new(),
            stats: NodeStats::default(),
            touched: 0,
        };
        let mut by_index = HashMap::new();
        by_index.insert(Index::root(), ROOT);
        PrefixTree {
            nodes: vec![Some(root)],
            free: Vec::new(),
            by_index,
            max_nodes: max_nodes.max(2),
            clock: 0,
            removed: VecDeque::new(),
            removed_floor: 0,
        }
    }

    /// The tree's logical clock: it advances on every change, and a node's [`Node::changed`] is the clock of
    /// its last one.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// The nodes changed (created, touched or their statistics written) after clock `since`.
    pub fn changed_since(&self, since: u64) -> impl Iterator<Item = &Node> + '_ {
        self.nodes.iter().flatten().filter(move |n| n.touched > since)
    }

    /// The indexes of the nodes removed after clock `since`, or `None` when that is older than the removals
    /// this tree remembers (then only a whole copy is exact).
    pub fn removed_since(&self, since: u64) -> Option<Vec<Index>> {
        if since < self.removed_floor {
            return None;
        }
        let start = self.removed.partition_point(|(at, _)| *at <= since);
        Some(self.removed.iter().skip(start).map(|(_, i)| i.clone()).collect())
    }

    /// Removes the node at `index` and its subtree (nothing for the root or a missing index).
    pub fn remove(&mut self, index: &Index) {
        if let Some(&id) = self.by_index.get(index).filter(|id| **id != ROOT) {
            self.remove_subtree(id);
        }
    }

    /// Nodes, the root included.
    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    /// True when only the root exists.
    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }

    /// The node at `index`.
    pub fn get(&self, index: &Index) -> Option<(NodeId, &Node)> {
        let id = *self.by_index.get(index)?;
        Some((id, self.node(id)?))
    }

    /// The node with this id.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id)?.as_ref()
    }

    /// The node at `index`, created with its missing ancestors, marked as touched now.
    pub fn get_or_insert(&mut self, index: &Index) -> NodeId {
        self.clock += 1;
        let clock = self.clock;
        if let Some(&id) = self.by_index.get(index) {
            self.touch_path(id, clock);
            return id;
        }
        let mut id = ROOT;
        for depth in 1..=index.depth() {
            let element = index.elements()[depth - 1];
            let existing = self.nodes[id].as_ref().and_then(|n| n.children.get(&element).copied());
            id = match existing {
                Some(child) => child,
                None => {
                    let child_index = Index::from_elements(index.elements()[..depth].to_vec());
                    let node = Node {
                        index: child_index.clone(),
                        parent: Some(id),
                        children: HashMap::new(),
                        stats: NodeStats {
                            preliminary: element.preliminary,
                            ..Default::default()
                        },
                        touched: clock,
                    };
                    let child = match self.free.pop() {
                        Some(slot) => {
                            self.nodes[slot] = Some(node);
                            slot
                        }
                        None => {
                            self.nodes.push(Some(node));
                            self.nodes.len() - 1
                        }
                    };
                    if let Some(p) = self.nodes[id].as_mut() {
                        p.children.insert(element, child);
                    }
                    self.by_index.insert(child_index, child);
                    child
                }
            };
        }
        self.touch_path(id, clock);
        id
    }

    fn touch_path(&mut self, mut id: NodeId, clock: u64) {
        loop {
            let Some(n) = self.nodes[id].as_mut() else {
                return;
            };
            n.touched = clock;
            match n.parent {
                Some(p) => id = p,
                None => return,
            }
        }
    }

    /// Mutable stats of a node (which counts as a change of it).
    pub fn stats_mut(&mut self, id: NodeId) -> Option<&mut NodeStats> {
        self.clock += 1;
        let clock = self.clock;
        self.nodes.get_mut(id)?.as_mut().map(|n| {
            n.touched = clock;
            &mut n.stats
        })
    }

    /// Evicts least recently touched leaves until the tree is within its limit (with 10% headroom so that
    /// eviction runs in batches). Returns how many nodes were evicted.
    pub fn enforce_limit(&mut self, counters: &Counters) -> usize {
        if self.len() <= self.max_nodes {
            return 0;
        }
        let target = self.max_nodes - self.max_nodes / 10;
        let mut evicted = 0;
        while self.len() > target {
            let mut leaves: Vec<(u64, NodeId)> = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(id, n)| {
                    n.as_ref()
                        .filter(|n| n.children.is_empty() && id != ROOT)
                        .map(|n| (n.touched, id))
                })
                .collect();
            if leaves.is_empty() {
                break;
            }
            leaves.sort_unstable();
            let excess = self.len() - target;
            for &(_, id) in leaves.iter().take(excess) {
                self.remove_leaf(id);
                evicted += 1;
            }
        }
        Counters::add(&counters.tree_nodes_evicted, evicted as u64);
        evicted
    }

    fn remove_leaf(&mut self, id: NodeId) {
        let Some(node) = self.nodes[id].take() else {
            return;
        };
        self.by_index.remove(&node.index);
        self.clock += 1;
        self.removed.push_back((self.clock, node.index.clone()));
        if self.removed.len() > self.max_nodes.max(1024)
            && let Some((at, _)) = self.removed.pop_front()
        {
            self.removed_floor = at;
        }
        if let (Some(p), Some(e)) = (node.parent, node.index.last())
            && let Some(parent) = self.nodes[p].as_mut()
        {
            parent.children.remove(e);
        }
        self.free.push(id);
    }

    /// Moves the subtree at `from` under `to` (created if missing), merging statistics node by node, and
    /// removes `from`. Used to rewrite a preliminary stream index to its final one.
    pub fn move_subtree(&mut self, from: &Index, to: &Index) {
        if from == to || from.is_root() {
            return;
        }
        let Some(&src) = self.by_index.get(from) else {
            return;
        };
        // Collect the subtree's (relative path, stats) first, then detach it.
        let mut stack = vec![src];
        let mut moved: Vec<(Index, NodeStats)> = Vec::new();
        while let Some(id) = stack.pop() {
            let Some(n) = self.nodes[id].as_ref() else {
                continue;
            };
            stack.extend(n.children.values().copied());
            if let Some(new_index) = n.index.rewrite_prefix(from, to) {
                moved.push((new_index, n.stats.clone()));
            }
        }
        self.remove_subtree(src);
        moved.sort_by_key(|(i, _)| i.depth());
        for (index, mut stats) in moved {
            stats.preliminary = index.last().is_some_and(|e| e.preliminary);
            let id = self.get_or_insert(&index);
            if let Some(s) = self.stats_mut(id) {
                s.merge(&stats);
            }
        }
    }

    fn remove_subtree(&mut self, id: NodeId) {
        let mut stack = vec![id];
        let mut order = Vec::new();
        while let Some(i) = stack.pop() {
            if let Some(n) = self.nodes[i].as_ref() {
                stack.extend(n.children.values().copied());
                order.push(i);
            }
        }
        for i in order.into_iter().rev() {
            self.remove_leaf(i);
        }
    }

    /// The ids of a node's children, sorted by index.
    pub fn children(&self, id: NodeId) -> Vec<NodeId> {
        let Some(n) = self.node(id) else {
            return Vec::new();
        };
        let mut c: Vec<NodeId> = n.children.values().copied().collect();
        c.sort_by(|a, b| self.node(*a).map(|n| &n.index).cmp(&self.node(*b).map(|n| &n.index)));
        c
    }

    /// Every node id in the subtree at `id` (itself included), depth first, at most `limit`.
    pub fn subtree(&self, id: NodeId, limit: usize) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack = vec![id];
        while let Some(i) = stack.pop() {
            if out.len() >= limit {
                break;
            }
            if self.node(i).is_none() {
                continue;
            }
            out.push(i);
            let mut c = self.children(i);
            c.reverse();
            stack.extend(c);
        }
        out
    }

    /// Every live node id.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().enumerate().filter_map(|(i, n)| n.as_ref().map(|_| i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dei_propagator::ElementDigest;

    fn idx(path: &[(u8, u32)]) -> Index {
        Index::from_elements(
            path.iter()
                .map(|(d, c)| Element::new(ElementDigest([*d; 8]), *c))
                .collect(),
        )
    }

    #[test]
    fn prefixes_share_nodes() {
        let mut t = PrefixTree::new(100);
        let a = t.get_or_insert(&idx(&[(1, 1), (2, 1)]));
        let b = t.get_or_insert(&idx(&[(1, 1), (3, 1)]));
        let c = t.get_or_insert(&idx(&[(1, 1), (2, 1)]));
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_eq!(t.len(), 4); // root, [1], [1,2], [1,3]
        let (p, _) = t.get(&idx(&[(1, 1)])).unwrap();
        assert_eq!(t.children(p).len(), 2);
        assert_eq!(t.subtree(p, 100).len(), 3);
        assert_eq!(t.subtree(ROOT, 2).len(), 2);
    }

    #[test]
    fn eviction_removes_oldest_leaves_and_keeps_structure() {
        let c = Counters::default();
        let mut t = PrefixTree::new(10);
        for i in 0..20u8 {
            t.get_or_insert(&idx(&[(1, 1), (i + 10, 1)]));
            t.enforce_limit(&c);
        }
        assert!(t.len() <= 10, "{}", t.len());
        // the newest survive, the first ones are gone, the shared parent stays
        assert!(t.get(&idx(&[(1, 1), (29, 1)])).is_some());
        assert!(t.get(&idx(&[(1, 1), (10, 1)])).is_none());
        assert!(t.get(&idx(&[(1, 1)])).is_some());
        assert_eq!(c.snapshot().tree_nodes_evicted as usize, 22 - t.len());
    }

    #[test]
    fn move_subtree_merges_stats() {
        let mut t = PrefixTree::new(100);
        let pre = Index::from_elements(vec![
            Element::new(ElementDigest([1; 8]), 1),
            Element::new(ElementDigest([2; 8]), 2).preliminary(),
        ]);
        let fin = idx(&[(1, 1), (9, 1)]);
        let child = pre.child(Element::new(ElementDigest([3; 8]), 1));
        let id = t.get_or_insert(&child);
        t.stats_mut(id).unwrap().seen = 2;
        let f = t.get_or_insert(&fin.child(Element::new(ElementDigest([3; 8]), 1)));
        t.stats_mut(f).unwrap().seen = 1;
        t.move_subtree(&pre, &fin);
        assert!(t.get(&pre).is_none());
        assert!(t.get(&child).is_none());
        let (_, n) = t.get(&fin.child(Element::new(ElementDigest([3; 8]), 1))).unwrap();
        assert_eq!(n.stats.seen, 3);
    }
}
