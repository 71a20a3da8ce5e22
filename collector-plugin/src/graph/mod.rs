//! The service graph: edges between services from client/server span pairs, as the OpenTelemetry
//! Collector's servicegraph connector builds them.
//!
//! A client (or producer) span waits in a [`PairingStore`] under `(trace id, span id)`; a server (or
//! consumer) span waits under `(trace id, parent span id)`. When both halves are there the edge
//! `client service → server service` records one request, a failure if either half has status ERROR, and
//! both latencies. Halves that stay unpaired past the TTL expire: a client half that names its peer
//! (`peer.service`, `server.address`, `rpc.service`, `db.system`) becomes an edge to a *virtual node*; a
//! server span without a parent becomes an edge from the virtual node `user`. A database call (a client span
//! with `db.system`) makes no server span, so its edge to the database is recorded at once, as the
//! Collector's connector does, instead of holding the half until the TTL.
//!
//! Edges derived from the DEI prefix relation (the caller's index is a prefix of the callee's) are computed
//! from the prefix tree by `api::render::index_edges`.

pub mod histogram;

use crate::counters::Counters;
use crate::span_record::{Kind, PeerSource, SpanId, SpanRecord, TraceId};
use histogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Limits of the service graph.
#[derive(Debug, Clone)]
pub struct GraphConfig {
    /// How long a half waits for its peer.
    pub store_ttl: Duration,
    /// Most halves waiting at once; the oldest is expired early when full.
    pub max_store_items: usize,
    /// Most edges; the least recently updated edge is evicted when full.
    pub max_edges: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig {
            store_ttl: Duration::from_secs(2),
            max_store_items: 100_000,
            max_edges: 10_000,
        }
    }
}

/// The `connection_type` label of the servicegraph connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionType {
    /// Both ends instrumented (label value `""`).
    Direct,
    /// One end is a virtual node.
    VirtualNode,
    /// Producer/consumer pair.
    MessagingSystem,
    /// The virtual node is a database (`db.system`).
    Database,
}

impl From<ConnectionType> for crate::views::EdgeType {
    fn from(c: ConnectionType) -> Self {
        match c {
            ConnectionType::Direct => crate::views::EdgeType::Direct,
            ConnectionType::VirtualNode => crate::views::EdgeType::VirtualNode,
            ConnectionType::MessagingSystem => crate::views::EdgeType::MessagingSystem,
            ConnectionType::Database => crate::views::EdgeType::Database,
        }
    }
}

impl ConnectionType {
    /// The label value.
    pub fn label(self) -> &'static str {
        crate::views::EdgeType::from(self).label()
    }
}

/// An edge's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EdgeKey {
    /// The calling service.
    pub client: Arc<str>,
    /// The called service (or virtual node).
    pub server: Arc<str>,
    /// How the two are connected.
    pub connection_type: ConnectionType,
}

/// What an edge has recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EdgeStats {
    /// Requests.
    pub requests: u64,
    /// Failed requests.
    pub failed: u64,
    /// Client-side latency.
    pub client_seconds: Histogram,
    /// Server-side latency.
    pub server_seconds: Histogram,
    /// Last update, as a sequence number for eviction.
    #[serde(skip)]
    pub last_update: u64,
}

#[derive(Debug, Clone)]
struct ClientHalf {
    service: Arc<str>,
    seconds: f64,
    failed: bool,
    peer: Option<(String, PeerSource)>,
    messaging: bool,
}

#[derive(Debug, Clone)]
struct ServerHalf {
    service: Arc<str>,
    seconds: f64,
    failed: bool,
}

#[derive(Debug, Clone)]
enum Half {
    Client(ClientHalf),
    Server(ServerHalf),
}

/// Halves waiting for their peer, expiring after a TTL, bounded in number.
#[derive(Debug, Default)]
pub struct PairingStore {
    waiting: HashMap<(TraceId, SpanId), (Half, u64)>,
    order: VecDeque<(Instant, (TraceId, SpanId), u64)>,
    seq: u64,
}

impl PairingStore {
    /// Halves waiting now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
}

/// The service graph.
#[derive(Debug)]
pub struct ServiceGraph {
    config: GraphConfig,
    store: PairingStore,
    edges: HashMap<EdgeKey, EdgeStats>,
    virtual_nodes: HashMap<Arc<str>, ConnectionType>,
    services: HashMap<Arc<str>, u64>,
    seq: u64,
}

impl ServiceGraph {
    /// An empty graph.
    pub fn new(config: GraphConfig) -> Self {
        ServiceGraph {
            config,
            store: PairingStore::default(),
            edges: HashMap::new(),
            virtual_nodes: HashMap::new(),
            services: HashMap::new(),
            seq: 0,
        }
    }

    /// Adds one span.
    pub fn observe(&mut self, span: &SpanRecord, now: Instant, counters: &Counters) {
        *self.services.entry(span.service.clone()).or_insert(0) += 1;
        match span.kind {
            k if k.is_caller() => {
                let half = ClientHalf {
                    service: span.service.clone(),
                    seconds: span.duration_seconds(),
                    failed: span.error,
                    peer: span.peer.clone(),
                    messaging: k == Kind::Producer,
                };
                match (&half.peer, span.database) {
                    // a database makes no server span: record the edge now instead of holding the half
                    (Some((peer, _)), true) => {
                        let key = EdgeKey {
                            client: half.service.clone(),
                            server: Arc::from(peer.as_str()),
                            connection_type: ConnectionType::Database,
                        };
                        self.virtual_nodes.insert(key.server.clone(), ConnectionType::Database);
                        self.record(key, Some(half.seconds), None, half.failed, counters);
                    }
                    _ => self.offer((span.trace_id, span.span_id), Half::Client(half), now, counters),
                }
            }
            k if k.is_callee() => {
                let half = ServerHalf {
                    service: span.service.clone(),
                    seconds: span.duration_seconds(),
                    failed: span.error,
                };
                match span.parent_span_id {
                    Some(parent) => self.offer((span.trace_id, parent), Half::Server(half), now, counters),
                    None => {
                        // A root server span: the caller is not instrumented.
                        let key = EdgeKey {
                            client: Arc::from("user"),
                            server: half.service.clone(),
                            connection_type: ConnectionType::VirtualNode,
                        };
                        self.virtual_nodes
                            .insert(key.client.clone(), ConnectionType::VirtualNode);
                        self.record(key, None, Some(half.seconds), half.failed, counters);
                    }
                }
            }
            _ => {}
        }
        self.expire(now, counters);
    }

    fn offer(&mut self, key: (TraceId, SpanId), half: Half, now: Instant, counters: &Counters) {
        match self.store.waiting.remove(&key) {
            Some((Half::Client(c), _)) if matches!(half, Half::Server(_)) => {
                let Half::Server(s) = half else { return };
                self.pair(c, s, counters);
            }
            Some((Half::Server(s), _)) if matches!(half, Half::Client(_)) => {
                let Half::Client(c) = half else { return };
                self.pair(c, s, counters);
            }
            Some(previous) => {
                // Same side twice under one key (duplicate export): keep the newer half.
                let _ = previous;
                self.insert_waiting(key, half, now, counters);
            }
            None => self.insert_waiting(key, half, now, counters),
        }
    }

    fn insert_waiting(&mut self, key: (TraceId, SpanId), half: Half, now: Instant, counters: &Counters) {
        while self.store.waiting.len() >= self.config.max_store_items.max(1) {
            let Some((_, old, seq)) = self.store.order.pop_front() else {
                break;
            };
            if let Some((h, s)) = self.store.waiting.remove(&old) {
                if s == seq {
                    Counters::add(&counters.graph_store_evicted, 1);
                    self.expired(h, counters);
                } else {
                    self.store.waiting.insert(old, (h, s));
                }
            }
        }
        self.store.seq += 1;
        let seq = self.store.seq;
        self.store.waiting.insert(key, (half, seq));
        self.store.order.push_back((now, key, seq));
    }

    fn pair(&mut self, c: ClientHalf, s: ServerHalf, counters: &Counters) {
        let connection_type = if c.messaging {
            ConnectionType::MessagingSystem
        } else {
            ConnectionType::Direct
        };
        let key = EdgeKey {
            client: c.service,
            server: s.service,
            connection_type,
        };
        self.record(key, Some(c.seconds), Some(s.seconds), c.failed || s.failed, counters);
    }

    /// Expires halves older than the TTL.
    pub fn expire(&mut self, now: Instant, counters: &Counters) {
        while let Some((t, _, _)) = self.store.order.front() {
            if now.duration_since(*t) < self.config.store_ttl {
                break;
            }
            let Some((_, key, seq)) = self.store.order.pop_front() else {
                break;
            };
            if let Some((h, s)) = self.store.waiting.remove(&key) {
                if s == seq {
                    self.expired(h, counters);
                } else {
                    self.store.waiting.insert(key, (h, s));
                }
            }
        }
    }

    /// Expires every waiting half now (end of an offline run).
    pub fn flush(&mut self, counters: &Counters) {
        let waiting: Vec<_> = self.store.waiting.drain().collect();
        self.store.order.clear();
        for (_, (h, _)) in waiting {
            self.expired(h, counters);
        }
    }

    fn expired(&mut self, half: Half, counters: &Counters) {
        match half {
            Half::Client(c) => match c.peer {
                Some((peer, source)) => {
                    let connection_type = if source == PeerSource::DbSystem {
                        ConnectionType::Database
                    } else {
                        ConnectionType::VirtualNode
                    };
                    let server: Arc<str> = Arc::from(peer.as_str());
                    self.virtual_nodes.insert(server.clone(), connection_type);
                    let key = EdgeKey {
                        client: c.service,
                        server,
                        connection_type,
                    };
                    self.record(key, Some(c.seconds), None, c.failed, counters);
                }
                None => Counters::add(&counters.graph_unpaired_expired, 1),
            },
            Half::Server(_) => Counters::add(&counters.graph_unpaired_expired, 1),
        }
    }

    fn record(&mut self, key: EdgeKey, client: Option<f64>, server: Option<f64>, failed: bool, counters: &Counters) {
        self.seq += 1;
        if !self.edges.contains_key(&key)
            && self.edges.len() >= self.config.max_edges.max(1)
            && let Some(oldest) = self
                .edges
                .iter()
                .min_by_key(|(_, e)| e.last_update)
                .map(|(k, _)| k.clone())
        {
            self.edges.remove(&oldest);
            Counters::add(&counters.graph_edges_evicted, 1);
        }
        let e = self.edges.entry(key).or_default();
        e.requests += 1;
        e.failed += failed as u64;
        if let Some(c) = client {
            e.client_seconds.observe(c);
        }
        if let Some(s) = server {
            e.server_seconds.observe(s);
        }
        e.last_update = self.seq;
    }

    /// The edges, sorted by key.
    pub fn edges(&self) -> Vec<(&EdgeKey, &EdgeStats)> {
        let mut v: Vec<_> = self.edges.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// Services seen on spans (instrumented), with span counts.
    pub fn services(&self) -> &HashMap<Arc<str>, u64> {
        &self.services
    }

    /// Virtual (uninstrumented) nodes and how they are connected.
    pub fn virtual_nodes(&self) -> &HashMap<Arc<str>, ConnectionType> {
        &self.virtual_nodes
    }

    /// Adds another graph's edge (a shard's, [`crate::shards`]): counts add, histograms merge bucket by bucket.
    pub(crate) fn absorb_edge(&mut self, key: EdgeKey, stats: &EdgeStats) {
        self.seq += 1;
        let e = self.edges.entry(key).or_default();
        e.requests += stats.requests;
        e.failed += stats.failed;
        e.client_seconds.merge(&stats.client_seconds);
        e.server_seconds.merge(&stats.server_seconds);
        e.last_update = self.seq;
    }

    /// Adds another graph's span count of a service.
    pub(crate) fn absorb_service(&mut self, service: Arc<str>, spans: u64) {
        *self.services.entry(service).or_insert(0) += spans;
    }

    /// Adds another graph's virtual node.
    pub(crate) fn absorb_virtual_node(&mut self, node: Arc<str>, connection_type: ConnectionType) {
        self.virtual_nodes.entry(node).or_insert(connection_type);
    }

    /// Halves waiting for their peer.
    pub fn waiting(&self) -> usize {
        self.store.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span_record::DeiAttributes;

    fn span(trace: u8, id: u8, parent: Option<u8>, service: &str, kind: Kind, ms: u64, error: bool) -> SpanRecord {
        SpanRecord {
            trace_id: [trace; 16],
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            service: Arc::from(service),
            name: "x".into(),
            kind,
            start_ns: 1_000_000_000,
            end_ns: 1_000_000_000 + ms * 1_000_000,
            error,
            status: Default::default(),
            peer: None,
            database: false,
            dei: DeiAttributes::default(),
        }
    }

    #[test]
    fn pairs_in_either_order_and_counts_failures() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig::default());
        let now = Instant::now();
        g.observe(&span(1, 1, None, "frontend", Kind::Server, 30, false), now, &c);
        g.observe(&span(1, 2, Some(1), "frontend", Kind::Client, 20, false), now, &c);
        g.observe(&span(1, 3, Some(2), "users", Kind::Server, 10, true), now, &c);
        // server before client
        g.observe(&span(2, 3, Some(2), "users", Kind::Server, 5, false), now, &c);
        g.observe(&span(2, 2, Some(1), "frontend", Kind::Client, 7, false), now, &c);
        let edges = g.edges();
        let fe = edges
            .iter()
            .find(|(k, _)| &*k.client == "frontend" && &*k.server == "users")
            .unwrap();
        assert_eq!(fe.0.connection_type, ConnectionType::Direct);
        assert_eq!((fe.1.requests, fe.1.failed), (2, 1));
        assert_eq!(fe.1.client_seconds.count, 2);
        assert_eq!(fe.1.server_seconds.count, 2);
        let user = edges.iter().find(|(k, _)| &*k.client == "user").unwrap();
        assert_eq!(user.1.requests, 1);
        assert_eq!(g.waiting(), 0);
    }

    #[test]
    fn unpaired_client_with_peer_becomes_virtual_node_after_ttl() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig {
            store_ttl: Duration::from_millis(10),
            ..Default::default()
        });
        let now = Instant::now();
        let mut s = span(1, 2, Some(1), "frontend", Kind::Client, 3, false);
        s.peer = Some(("billing".into(), PeerSource::PeerService));
        g.observe(&s, now, &c);
        g.observe(&span(1, 9, Some(8), "lonely", Kind::Server, 3, false), now, &c);
        assert!(g.edges().is_empty());
        g.expire(now + Duration::from_millis(20), &c);
        let edges = g.edges();
        assert_eq!(edges.len(), 1);
        assert_eq!(&*edges[0].0.server, "billing");
        assert_eq!(edges[0].0.connection_type, ConnectionType::VirtualNode);
        assert_eq!(c.snapshot().graph_unpaired_expired, 1);
    }

    #[test]
    fn a_database_call_is_an_edge_at_once_and_holds_nothing() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig::default());
        let now = Instant::now();
        for (id, peer) in [
            (2, ("postgresql", PeerSource::DbSystem)),
            (3, ("db.internal", PeerSource::ServerAddress)),
        ] {
            let mut s = span(1, id, Some(1), "users", Kind::Client, 3, id == 3);
            s.peer = Some((peer.0.into(), peer.1));
            s.database = true;
            g.observe(&s, now, &c);
        }
        assert_eq!(g.waiting(), 0, "nothing waits for a database's span");
        let mut edges = g.edges();
        edges.sort_by(|a, b| a.0.server.cmp(&b.0.server));
        let got: Vec<_> = edges
            .iter()
            .map(|(k, e)| (&*k.server, k.connection_type, e.requests, e.failed))
            .collect();
        assert_eq!(
            got,
            [
                ("db.internal", ConnectionType::Database, 1, 1),
                ("postgresql", ConnectionType::Database, 1, 0)
            ]
        );
        assert_eq!(c.snapshot().graph_unpaired_expired, 0);
    }

    #[test]
    fn store_and_edges_are_bounded() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig {
            max_store_items: 10,
            max_edges: 3,
            ..Default::default()
        });
        let now = Instant::now();
        for i in 0..50u8 {
            g.observe(&span(i, 2, Some(1), "a", Kind::Client, 1, false), now, &c);
        }
        assert_eq!(g.waiting(), 10);
        assert_eq!(c.snapshot().graph_store_evicted, 40);
        for i in 0..10u8 {
            let mut s = span(100 + i, 2, None, &format!("svc{i}"), Kind::Server, 1, false);
            s.parent_span_id = None;
            g.observe(&s, now, &c);
        }
        assert_eq!(g.edges().len(), 3);
        assert_eq!(c.snapshot().graph_edges_evicted, 7);
    }
}
