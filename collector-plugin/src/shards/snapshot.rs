//! A shard's state as a query node pulls it, and merging such states.

use crate::counters::CountersSnapshot;
use crate::graph::{ConnectionType, EdgeKey, EdgeStats};
use crate::state::CollectorState;
use crate::tree::NodeStats;
use crate::views::Occurrence;
use dei_propagator::{Index, StackDigest};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// The version of [`Snapshot`]'s format; a query node refuses others.
pub const SNAPSHOT_VERSION: u32 = 2;

/// Where a pull stands in one shard's history: the shard process (`epoch`, new at every start) and its
/// logical clocks when the snapshot was taken. Given back as `GET /api/v1/snapshot?epoch=…&tree=…&traces=…&stacks=…`,
/// it makes the shard answer with what changed since then instead of everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The shard process's random epoch.
    pub epoch: u64,
    /// The prefix tree's clock.
    pub tree: u64,
    /// The trace store's clock.
    pub traces: u64,
    /// Readable stacks known.
    pub stacks: usize,
}

/// Everything a shard knows, in a form that merges (`GET /api/v1/snapshot`): prefix-tree nodes with their
/// statistics, graph edges with their histograms, the retained traces, the stack dictionary and the counters.
/// An exchange format between dei-collectors, versioned by [`SNAPSHOT_VERSION`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`SNAPSHOT_VERSION`].
    pub version: u32,
    /// Where the next pull continues from.
    pub cursor: Cursor,
    /// `true`: everything the shard knows. `false`: what changed since the cursor the pull gave (nodes and
    /// traces changed since then, whole; the removed ones in `removed_nodes` and `removed_traces`; stacks
    /// added since), with the graph, services and counters whole.
    pub full: bool,
    /// The shard's counters.
    pub counters: CountersSnapshot,
    /// Every prefix-tree node (the root too) with its statistics.
    pub nodes: Vec<NodeSnapshot>,
    /// Every graph edge with its counts and histograms.
    pub edges: Vec<EdgeSnapshot>,
    /// Spans seen per service.
    pub services: Vec<(Arc<str>, u64)>,
    /// Virtual nodes and how they are connected.
    pub virtual_nodes: Vec<(Arc<str>, ConnectionType)>,
    /// Which services served each `rpc.service` (server spans), with span counts: what merges a virtual node
    /// into the service that serves it.
    pub serving: Vec<Serving>,
    /// The virtual nodes named by a client span's `rpc.service` (the ones that merge).
    pub rpc_service_nodes: Vec<Arc<str>>,
    /// Spans waiting in the shard's pairing store for their other half.
    pub graph_waiting_spans: usize,
    /// The retained traces.
    pub traces: Vec<TraceSnapshot>,
    /// Readable call stacks by digest.
    pub stacks: Vec<(StackDigest, Vec<String>)>,
    /// Prefix-tree nodes removed since the pull's cursor (empty in a whole snapshot).
    pub removed_nodes: Vec<Index>,
    /// Traces removed since the pull's cursor, hex ids (empty in a whole snapshot).
    pub removed_traces: Vec<String>,
}

/// The services seen serving one `rpc.service`, with their server spans.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Serving {
    /// The `rpc.service`.
    pub rpc_service: Arc<str>,
    /// The services whose server spans carried it, with span counts.
    pub services: Vec<(Arc<str>, u64)>,
}

/// One prefix-tree node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Its index.
    pub index: Index,
    /// What the shard knows about the RPCs at it.
    pub stats: NodeStats,
}

/// One graph edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeSnapshot {
    /// The calling service.
    pub client: Arc<str>,
    /// The called service or virtual node.
    pub server: Arc<str>,
    /// How the two are connected.
    pub connection_type: ConnectionType,
    /// Its counts and histograms.
    pub stats: EdgeStats,
}

/// One retained trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceSnapshot {
    /// The trace id.
    #[serde(with = "crate::views::hex")]
    pub trace_id: [u8; 16],
    /// Earliest span start, Unix ns.
    pub start_ns: u64,
    /// Faults of the plan the trace ran under.
    pub planned_faults: u32,
    /// Its RPC occurrences, in arrival order.
    pub occurrences: Vec<Occurrence>,
    /// Spans and stream messages the shard did not record past its cap of occurrences per trace.
    #[serde(default)]
    pub occurrences_dropped: u64,
    /// Spans whose DEI data the shard skipped for a malformed `dei.*` attribute.
    #[serde(default)]
    pub spans_dei_skipped: u64,
}

impl CollectorState {
    /// Everything this state knows, for a query node to merge.
    pub fn snapshot(&self, counters: CountersSnapshot) -> Snapshot {
        self.snapshot_since(counters, None)
    }

    /// What changed since `since` (a cursor of an earlier snapshot of this state), or everything when
    /// `since` is `None`, of another epoch, or older than the removals this state remembers.
    pub fn snapshot_since(&self, counters: CountersSnapshot, since: Option<Cursor>) -> Snapshot {
        let cursor = Cursor {
            epoch: self.epoch(),
            tree: self.tree.clock(),
            traces: self.traces.clock(),
            stacks: self.stacks.len(),
        };
        let delta = since.filter(|c| c.epoch == cursor.epoch).and_then(|c| {
            Some((
                c,
                self.tree.removed_since(c.tree)?,
                self.traces.removed_since(c.traces)?,
            ))
        });
        let node = |n: &crate::tree::Node| NodeSnapshot {
            index: n.index.clone(),
            stats: n.stats.clone(),
        };
        let trace = |t: &crate::tree::traces::TraceRecord| TraceSnapshot {
            trace_id: t.trace_id,
            start_ns: t.start_ns,
            planned_faults: t.planned_faults,
            occurrences: t.occurrences.clone(),
            occurrences_dropped: t.occurrences_dropped,
            spans_dei_skipped: t.spans_dei_skipped,
        };
        let mut snapshot = Snapshot {
            version: SNAPSHOT_VERSION,
            cursor,
            full: delta.is_none(),
            counters,
            edges: self
                .graph
                .edges()
                .into_iter()
                .map(|(k, e)| EdgeSnapshot {
                    client: k.client.clone(),
                    server: k.server.clone(),
                    connection_type: k.connection_type,
                    stats: e.clone(),
                })
                .collect(),
            services: self.graph.services().iter().map(|(s, n)| (s.clone(), *n)).collect(),
            virtual_nodes: self
                .graph
                .virtual_nodes()
                .iter()
                .map(|(s, t)| (s.clone(), *t))
                .collect(),
            serving: self
                .graph
                .serving()
                .map(|(name, services)| Serving {
                    rpc_service: name.clone(),
                    services: services.iter().map(|(s, n)| (s.clone(), *n)).collect(),
                })
                .collect(),
            rpc_service_nodes: self.graph.rpc_service_nodes().iter().cloned().collect(),
            graph_waiting_spans: self.graph.waiting(),
            ..Snapshot::default()
        };
        match delta {
            None => {
                snapshot.nodes = self.tree.ids().filter_map(|id| self.tree.node(id)).map(node).collect();
                snapshot.traces = self.traces.ordered().into_iter().map(trace).collect();
                snapshot.stacks = self.stacks.entries().map(|(d, f)| (*d, f.to_vec())).collect();
            }
            Some((since, removed_nodes, removed_traces)) => {
                snapshot.nodes = self.tree.changed_since(since.tree).map(node).collect();
                let mut traces: Vec<_> = self.traces.changed_since(since.traces).collect();
                traces.sort_by_key(|t| t.trace_id);
                snapshot.traces = traces.into_iter().map(trace).collect();
                snapshot.stacks = self
                    .stacks
                    .added_since(since.stacks)
                    .map(|(d, f)| (*d, f.to_vec()))
                    .collect();
                snapshot.removed_nodes = removed_nodes;
                snapshot.removed_traces = removed_traces.iter().map(::hex::encode).collect();
            }
        }
        snapshot
    }

    /// Adds a shard's snapshot to this state: node statistics and edge counts add up, histograms merge
    /// bucket by bucket, traces join the retained ones (an occurrence already here is kept), stacks join
    /// the dictionary.
    pub fn absorb(&mut self, snapshot: Snapshot, now: Instant) {
        for n in &snapshot.nodes {
            let id = self.tree.get_or_insert(&n.index);
            if let Some(stats) = self.tree.stats_mut(id) {
                stats.merge(&n.stats);
                stats.preliminary |= n.stats.preliminary;
            }
        }
        self.absorb_graph(&snapshot);
        for t in &snapshot.traces {
            self.absorb_trace(t, now);
        }
        let counters = self.counters().clone();
        for (digest, frames) in snapshot.stacks {
            self.stacks.insert(digest, &frames, &counters);
        }
    }

    /// Adds a snapshot's graph edges, services and virtual nodes.
    pub(crate) fn absorb_graph(&mut self, snapshot: &Snapshot) {
        for e in &snapshot.edges {
            let key = EdgeKey {
                client: e.client.clone(),
                server: e.server.clone(),
                connection_type: e.connection_type,
            };
            self.graph.absorb_edge(key, &e.stats);
        }
        for (service, spans) in &snapshot.services {
            self.graph.absorb_service(service.clone(), *spans);
        }
        for (node, connection_type) in &snapshot.virtual_nodes {
            self.graph.absorb_virtual_node(node.clone(), *connection_type);
        }
        let counters = self.counters().clone();
        for serving in &snapshot.serving {
            for (service, spans) in &serving.services {
                self.graph
                    .learn_serving(&serving.rpc_service, service, *spans, &counters);
            }
        }
        for name in &snapshot.rpc_service_nodes {
            self.graph.add_rpc_service_node(name.clone());
        }
    }

    /// Adds one trace (an occurrence already here is kept unless the new one replaces it). What the shard
    /// dropped or skipped of it adds up, and so do the spans of an occurrence this state has no room for (its
    /// cap of occurrences per trace, `query --max-trace-rpcs`): counted as a shard with that cap counts the
    /// spans past it, one per client or server span that made the occurrence (at least one), so that
    /// `occurrences_dropped` means the same on a shard and on a query node.
    pub(crate) fn absorb_trace(&mut self, t: &TraceSnapshot, now: Instant) {
        let max = self.traces.config.max_occurrences;
        let record = self.traces.entry(t.trace_id, now);
        if t.start_ns != 0 && (record.start_ns == 0 || t.start_ns < record.start_ns) {
            record.start_ns = t.start_ns;
        }
        record.planned_faults = record.planned_faults.max(t.planned_faults);
        record.occurrences_dropped = record.occurrences_dropped.saturating_add(t.occurrences_dropped);
        record.spans_dei_skipped = record.spans_dei_skipped.saturating_add(t.spans_dei_skipped);
        for o in &t.occurrences {
            match record.occurrence(o.rpc, &o.index.clone(), max) {
                Some((i, true)) => record.occurrences[i] = o.clone(),
                Some((_, false)) => {}
                None => {
                    let spans = u64::from(o.client_time.is_some()) + u64::from(o.server_time.is_some());
                    record.occurrences_dropped = record.occurrences_dropped.saturating_add(spans.max(1));
                }
            }
        }
    }
}
