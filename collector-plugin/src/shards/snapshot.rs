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
pub const SNAPSHOT_VERSION: u32 = 1;

/// Everything a shard knows, in a form that merges (`GET /api/v1/snapshot`): prefix-tree nodes with their
/// statistics, graph edges with their histograms, the retained traces, the stack dictionary and the counters.
/// An exchange format between dei-collectors, versioned by [`SNAPSHOT_VERSION`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`SNAPSHOT_VERSION`].
    pub version: u32,
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
}

impl CollectorState {
    /// Everything this state knows, for a query node to merge.
    pub fn snapshot(&self, counters: CountersSnapshot) -> Snapshot {
        let nodes = self
            .tree
            .ids()
            .filter_map(|id| self.tree.node(id))
            .map(|n| NodeSnapshot {
                index: n.index.clone(),
                stats: n.stats.clone(),
            })
            .collect();
        let edges = self
            .graph
            .edges()
            .into_iter()
            .map(|(k, e)| EdgeSnapshot {
                client: k.client.clone(),
                server: k.server.clone(),
                connection_type: k.connection_type,
                stats: e.clone(),
            })
            .collect();
        let traces = self
            .traces
            .ordered()
            .into_iter()
            .map(|t| TraceSnapshot {
                trace_id: t.trace_id,
                start_ns: t.start_ns,
                planned_faults: t.planned_faults,
                occurrences: t.occurrences.clone(),
            })
            .collect();
        Snapshot {
            version: SNAPSHOT_VERSION,
            counters,
            nodes,
            edges,
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
            traces,
            stacks: self.stacks.entries().map(|(d, f)| (*d, f.to_vec())).collect(),
        }
    }

    /// Adds a shard's snapshot to this state: node statistics and edge counts add up, histograms merge
    /// bucket by bucket, traces join the retained ones (an occurrence already here is kept), stacks join
    /// the dictionary.
    pub fn absorb(&mut self, snapshot: Snapshot, now: Instant) {
        for n in snapshot.nodes {
            let id = self.tree.get_or_insert(&n.index);
            if let Some(stats) = self.tree.stats_mut(id) {
                stats.merge(&n.stats);
                stats.preliminary |= n.stats.preliminary;
            }
        }
        for e in snapshot.edges {
            let key = EdgeKey {
                client: e.client,
                server: e.server,
                connection_type: e.connection_type,
            };
            self.graph.absorb_edge(key, &e.stats);
        }
        for (service, spans) in snapshot.services {
            self.graph.absorb_service(service, spans);
        }
        for (node, connection_type) in snapshot.virtual_nodes {
            self.graph.absorb_virtual_node(node, connection_type);
        }
        let counters = self.counters().clone();
        for serving in snapshot.serving {
            for (service, spans) in serving.services {
                self.graph
                    .learn_serving(&serving.rpc_service, &service, spans, &counters);
            }
        }
        for name in snapshot.rpc_service_nodes {
            self.graph.add_rpc_service_node(name);
        }
        let max = self.traces.config.max_occurrences;
        for t in snapshot.traces {
            let record = self.traces.entry(t.trace_id, now);
            if t.start_ns != 0 && (record.start_ns == 0 || t.start_ns < record.start_ns) {
                record.start_ns = t.start_ns;
            }
            record.planned_faults = record.planned_faults.max(t.planned_faults);
            for o in t.occurrences {
                if let Some((i, true)) = record.occurrence(o.rpc, &o.index.clone(), max) {
                    record.occurrences[i] = o;
                }
            }
        }
        for (digest, frames) in snapshot.stacks {
            self.stacks.insert(digest, &frames, &counters);
        }
    }
}
