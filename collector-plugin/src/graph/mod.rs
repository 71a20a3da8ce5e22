//! The service graph: edges between services from client/server span pairs, as the OpenTelemetry
//! Collector's servicegraph connector builds them.
//!
//! A client (or producer) span waits in a [`PairingStore`] under `(trace id, span id)`; a server (or
//! consumer) span waits under `(trace id, parent span id)`. When both halves are there the edge
//! `client service → server service` records one request, a failure if either half has status ERROR, and
//! both latencies. Halves that stay unpaired past the TTL expire: a client half that names its peer
//! (`peer.service`, `server.address`, `rpc.service`, `db.system`; a DEI span `rpc.service` before
//! `server.address`) becomes an edge to a *virtual node*; a
//! server span without a parent becomes an edge from the virtual node `user`. A database call (a client span
//! with `db.system`) makes no server span, so its edge to the database is recorded at once, as the
//! Collector's connector does, instead of holding the half until the TTL.
//!
//! **Merging virtual nodes.** A call that fails before it reaches its server (a connection error, a fault
//! injected at the client) leaves a client span whose peer is named by `rpc.service` (`cinema.Bookings`),
//! which would be a virtual node beside the real service (`bookings`). The graph remembers, from the server
//! spans of every trace, which services serve each `rpc.service` (at most [`GraphConfig::max_edges`] names,
//! the least recently seen forgotten first, counted in `graph_rpc_services_evicted`).
//! [`ServiceGraph::merged_edges`] folds an edge to such a virtual node into the edge to the one service that
//! serves its `rpc.service` (connection type `""`): the graph's JSON, its DOT and Mermaid renders and the
//! Prometheus metrics all read the merged edges. An `rpc.service` served by two or more services stays a
//! virtual node (a failed call cannot say which of them it would have reached), and so does one never seen
//! served. The edges are stored under the names the spans gave, so a merge learned later applies to the calls
//! recorded before it.
//!
//! Edges derived from the DEI prefix relation (the caller's index is a prefix of the callee's) are computed
//! from the prefix tree by `api::render::index_edges`.

pub mod histogram;

use crate::counters::Counters;
use crate::span_record::{Kind, PeerSource, SpanId, SpanRecord, TraceId};
use crate::stale_order;
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
///
/// `order` lists insertions oldest first, for expiry. A half that pairs leaves the map at once but its entry
/// in `order` only when found stale, so `order` is compacted ([`stale_order::compact`]) whenever it
/// outgrows twice the map's size by [`stale_order::SLACK`]: otherwise it would hold every half of the last TTL, paired or not
/// (at 600,000 spans/s and a 2 s TTL, 600,000 entries, far past `max_store_items`).
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

    /// Entries in the expiry order, stale ones included.
    #[cfg(test)]
    fn order_len(&self) -> usize {
        self.order.len()
    }

    /// Drops the `order` entries of halves no longer waiting, once they outnumber the waiting ones.
    fn compact(&mut self) {
        let waiting = &self.waiting;
        stale_order::compact(&mut self.order, waiting.len(), |(_, key, seq)| {
            waiting.get(key).is_some_and(|(_, s)| s == seq)
        });
    }
}

/// Which services serve an `rpc.service`, from server spans.
#[derive(Debug, Clone, Default)]
struct Serving {
    /// Serving services, with their server spans (at most [`MAX_SERVERS_PER_RPC_SERVICE`]).
    services: std::collections::BTreeMap<Arc<str>, u64>,
    /// More services than kept served it.
    more: bool,
    last_seen: u64,
}

/// Most serving services remembered per `rpc.service` (two already make it ambiguous).
const MAX_SERVERS_PER_RPC_SERVICE: usize = 8;

/// Where a name of the graph goes once virtual nodes are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A service (instrumented), or a virtual node merged into the service it names.
    Service(Arc<str>),
    /// A virtual node that stays: never seen served, or served by several services (listed).
    Virtual(Vec<Arc<str>>),
}

/// An edge after merging (what [`ServiceGraph::merged_edges`] returns).
#[derive(Debug, Clone)]
pub struct MergedEdge {
    /// Its identity, with merged names.
    pub key: EdgeKey,
    /// Its numbers, the merged edges' included.
    pub stats: EdgeStats,
    /// Requests folded in from edges to virtual nodes named by an `rpc.service` this edge's server serves
    /// (calls that met no server span: they failed before reaching it).
    pub merged_requests: u64,
    /// The failed ones among them.
    pub merged_failed: u64,
}

/// The service graph.
#[derive(Debug)]
pub struct ServiceGraph {
    config: GraphConfig,
    store: PairingStore,
    edges: HashMap<EdgeKey, EdgeStats>,
    virtual_nodes: HashMap<Arc<str>, ConnectionType>,
    services: HashMap<Arc<str>, u64>,
    /// `rpc.service` → the services whose server spans carry it.
    serving: HashMap<Arc<str>, Serving>,
    /// The virtual nodes named by a client span's `rpc.service` (they merge into the service that serves it).
    rpc_service_nodes: std::collections::HashSet<Arc<str>>,
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
            serving: HashMap::new(),
            rpc_service_nodes: std::collections::HashSet::new(),
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
                if let Some((name, PeerSource::RpcService)) = &span.peer {
                    self.learn_serving(name, &span.service, 1, counters);
                }
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
        self.store.compact();
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
                    if source == PeerSource::RpcService && !self.rpc_service_nodes.contains(&server) {
                        self.rpc_service_nodes.insert(server.clone());
                    }
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

    /// Records that `service` served `rpc_service` in `spans` more server spans (a server span's
    /// `rpc.service`, or another graph's knowledge: a query node merging its shards' graphs).
    pub fn learn_serving(&mut self, rpc_service: &str, service: &Arc<str>, spans: u64, counters: &Counters) {
        self.seq += 1;
        let seq = self.seq;
        // the common case, a known name and server: no allocation
        if let Some(entry) = self.serving.get_mut(rpc_service)
            && let Some(n) = entry.services.get_mut(service)
        {
            *n += spans;
            entry.last_seen = seq;
            return;
        }
        if !self.serving.contains_key(rpc_service)
            && self.serving.len() >= self.config.max_edges.max(1)
            && let Some(oldest) = self
                .serving
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        {
            self.serving.remove(&oldest);
            Counters::add(&counters.graph_rpc_services_evicted, 1);
        }
        let entry = match self.serving.get_mut(rpc_service) {
            Some(entry) => entry,
            None => self.serving.entry(Arc::from(rpc_service)).or_default(),
        };
        entry.last_seen = seq;
        if entry.services.len() < MAX_SERVERS_PER_RPC_SERVICE {
            entry.services.insert(service.clone(), spans);
        } else {
            entry.more = true;
        }
    }

    /// Every `rpc.service` learned, with the services that served it and their server spans (a snapshot of
    /// what [`learn_serving`](Self::learn_serving) recorded).
    pub fn serving(&self) -> impl Iterator<Item = (&Arc<str>, &std::collections::BTreeMap<Arc<str>, u64>)> + '_ {
        self.serving.iter().map(|(k, s)| (k, &s.services))
    }

    /// The virtual nodes named by a client span's `rpc.service` (the ones that merge).
    pub fn rpc_service_nodes(&self) -> &std::collections::HashSet<Arc<str>> {
        &self.rpc_service_nodes
    }

    /// Marks a virtual node as named by an `rpc.service` (another graph's, for a query node merging its
    /// shards' graphs).
    pub fn add_rpc_service_node(&mut self, name: Arc<str>) {
        self.rpc_service_nodes.insert(name);
    }

    /// The services seen serving `rpc_service` (their server spans carried it), sorted.
    pub fn served_by(&self, rpc_service: &str) -> Vec<Arc<str>> {
        self.serving
            .get(rpc_service)
            .map(|s| s.services.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The `rpc.service` names a service serves (every one its server spans carried), sorted.
    pub fn serves(&self, service: &str) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .serving
            .iter()
            .filter(|(_, s)| s.services.contains_key(service))
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Where a node name goes once virtual nodes are merged: a virtual node named by an `rpc.service` that
    /// exactly one service serves becomes that service; any other virtual node stays (with the services
    /// that serve its name when there are several); every other name is a service.
    pub fn resolve(&self, name: &Arc<str>) -> Resolved {
        if !self.virtual_nodes.contains_key(name) {
            return Resolved::Service(name.clone());
        }
        if !self.rpc_service_nodes.contains(name) {
            return Resolved::Virtual(Vec::new());
        }
        match self.serving.get(name) {
            Some(s) if s.services.len() == 1 && !s.more => {
                Resolved::Service(s.services.keys().next().cloned().unwrap_or_else(|| name.clone()))
            }
            Some(s) => Resolved::Virtual(s.services.keys().cloned().collect()),
            None => Resolved::Virtual(Vec::new()),
        }
    }

    /// The name a node has once virtual nodes are merged.
    pub fn merged_name(&self, name: &Arc<str>) -> Arc<str> {
        match self.resolve(name) {
            Resolved::Service(s) => s,
            Resolved::Virtual(_) => name.clone(),
        }
    }

    /// How many edges [`merged_edges`](Self::merged_edges) returns, without building them.
    pub fn merged_edge_count(&self) -> usize {
        let keys: std::collections::HashSet<(&Arc<str>, Arc<str>, ConnectionType)> = self
            .edges
            .keys()
            .map(|k| match (k.connection_type, self.resolve(&k.server)) {
                (ConnectionType::VirtualNode, Resolved::Service(s)) if s != k.server => {
                    (&k.client, s, ConnectionType::Direct)
                }
                _ => (&k.client, k.server.clone(), k.connection_type),
            })
            .collect();
        keys.len()
    }

    /// The edges with virtual nodes merged (see the module docs), sorted by key: an edge to a virtual node
    /// that [`resolve`](Self::resolve)s to a service is added to the direct edge between the same caller and
    /// that service (made if there is none), its requests counted in [`MergedEdge::merged_requests`].
    pub fn merged_edges(&self) -> Vec<MergedEdge> {
        let mut out: std::collections::BTreeMap<EdgeKey, MergedEdge> = std::collections::BTreeMap::new();
        for (k, e) in &self.edges {
            let merged = match (k.connection_type, self.resolve(&k.server)) {
                (ConnectionType::VirtualNode, Resolved::Service(s)) if s != k.server => Some(s),
                _ => None,
            };
            let key = match &merged {
                Some(server) => EdgeKey {
                    client: k.client.clone(),
                    server: server.clone(),
                    connection_type: ConnectionType::Direct,
                },
                None => k.clone(),
            };
            let m = out.entry(key.clone()).or_insert_with(|| MergedEdge {
                key,
                stats: EdgeStats::default(),
                merged_requests: 0,
                merged_failed: 0,
            });
            m.stats.requests += e.requests;
            m.stats.failed += e.failed;
            m.stats.client_seconds.merge(&e.client_seconds);
            m.stats.server_seconds.merge(&e.server_seconds);
            m.stats.last_update = m.stats.last_update.max(e.last_update);
            if merged.is_some() {
                m.merged_requests += e.requests;
                m.merged_failed += e.failed;
            }
        }
        out.into_values().collect()
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

    #[test]
    fn halves_that_pair_within_the_ttl_leave_nothing_behind() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig::default());
        let now = Instant::now();
        // one half that never pairs, older than everything after it: it stays first in the expiry order
        g.observe(&span(0, 2, Some(1), "lonely", Kind::Client, 1, false), now, &c);
        let pairs = 20 * stale_order::SLACK;
        for i in 0..pairs {
            let mut client = span(1, 2, Some(1), "frontend", Kind::Client, 2, false);
            client.trace_id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
            let mut server = span(1, 3, Some(2), "users", Kind::Server, 1, false);
            server.trace_id = client.trace_id;
            g.observe(&client, now, &c);
            g.observe(&server, now, &c);
        }
        assert_eq!(g.waiting(), 1);
        let order = g.store.order_len();
        assert!(
            order <= 2 + stale_order::SLACK,
            "{order} expiry entries for 1 waiting half after {pairs} pairs"
        );
        let edges = g.edges();
        let fe = edges.iter().find(|(k, _)| &*k.client == "frontend").expect("the edge");
        assert_eq!(fe.1.requests, pairs as u64);
        // the compactions kept the waiting half's entry: it still expires
        g.expire(now + GraphConfig::default().store_ttl, &c);
        assert_eq!((g.waiting(), g.store.order_len()), (0, 0));
        assert_eq!(c.snapshot().graph_unpaired_expired, 1);
    }

    /// A client span of `from` calling the `rpc.service` `callee`, and (unless it failed before reaching
    /// it) the server span of `server` serving it.
    fn call(g: &mut ServiceGraph, c: &Counters, trace: u8, from: &str, callee: &str, server: Option<&str>) {
        let now = Instant::now();
        let mut client = span(trace, 2, Some(1), from, Kind::Client, 5, server.is_none());
        client.peer = Some((callee.into(), PeerSource::RpcService));
        g.observe(&client, now, c);
        if let Some(server) = server {
            let mut s = span(trace, 3, Some(2), server, Kind::Server, 3, false);
            s.peer = Some((callee.into(), PeerSource::RpcService));
            g.observe(&s, now, c);
        }
        g.flush(c);
    }

    fn merged(g: &ServiceGraph) -> Vec<(String, String, &'static str, u64, u64, u64)> {
        g.merged_edges()
            .iter()
            .map(|m| {
                let k = &m.key;
                (
                    k.client.to_string(),
                    k.server.to_string(),
                    k.connection_type.label(),
                    m.stats.requests,
                    m.stats.failed,
                    m.merged_requests,
                )
            })
            .collect()
    }

    #[test]
    fn a_call_that_failed_before_reaching_its_server_merges_into_the_service_that_serves_it() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig::default());
        // the failed call comes first: stored as an edge to the virtual node `cinema.Bookings`
        call(&mut g, &c, 1, "users", "cinema.Bookings", None);
        assert_eq!(
            merged(&g),
            [("users".into(), "cinema.Bookings".into(), "virtual_node", 1, 1, 0)]
        );
        assert_eq!(g.resolve(&Arc::from("cinema.Bookings")), Resolved::Virtual(Vec::new()));
        // another trace shows `bookings` serving cinema.Bookings: the earlier failure joins users → bookings
        call(&mut g, &c, 2, "users", "cinema.Bookings", Some("bookings"));
        call(&mut g, &c, 3, "users", "cinema.Bookings", None);
        assert_eq!(merged(&g), [("users".into(), "bookings".into(), "", 3, 2, 2)]);
        assert_eq!(g.merged_edge_count(), 1);
        let m = &g.merged_edges()[0];
        assert_eq!(m.merged_failed, 2);
        assert_eq!(m.stats.client_seconds.count, 3, "every client span's latency");
        assert_eq!(m.stats.server_seconds.count, 1, "the one server span's");
        assert_eq!(
            g.resolve(&Arc::from("cinema.Bookings")),
            Resolved::Service(Arc::from("bookings"))
        );
        assert_eq!(g.serves("bookings"), [Arc::from("cinema.Bookings")]);
        // stored as the spans named them: two edges, one to the virtual node
        assert_eq!(g.edges().len(), 2);
        // an edge to a virtual node only: a caller whose every call failed still joins the service
        call(&mut g, &c, 4, "showtimes", "cinema.Bookings", None);
        assert!(merged(&g).contains(&("showtimes".into(), "bookings".into(), "", 1, 1, 1)));
    }

    #[test]
    fn a_name_served_by_two_services_or_by_none_stays_virtual() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig::default());
        call(&mut g, &c, 1, "web", "shop.Cart", Some("cart-v1"));
        call(&mut g, &c, 2, "web", "shop.Cart", Some("cart-v2"));
        call(&mut g, &c, 3, "web", "shop.Cart", None);
        call(&mut g, &c, 4, "web", "shop.Ghost", None);
        assert_eq!(
            g.resolve(&Arc::from("shop.Cart")),
            Resolved::Virtual(vec![Arc::from("cart-v1"), Arc::from("cart-v2")]),
            "which of the two a failed call would have reached is unknown"
        );
        assert_eq!(g.resolve(&Arc::from("shop.Ghost")), Resolved::Virtual(Vec::new()));
        let got = merged(&g);
        assert!(
            got.contains(&("web".into(), "shop.Cart".into(), "virtual_node", 1, 1, 0)),
            "{got:?}"
        );
        assert!(
            got.contains(&("web".into(), "shop.Ghost".into(), "virtual_node", 1, 1, 0)),
            "{got:?}"
        );
        assert!(got.contains(&("web".into(), "cart-v1".into(), "", 1, 0, 0)), "{got:?}");
        // a name given by peer.service is the callee's service name already: never merged by rpc.service
        let mut s = span(5, 2, Some(1), "web", Kind::Client, 1, true);
        s.peer = Some(("shop.Cart".into(), PeerSource::PeerService));
        let mut g2 = ServiceGraph::new(GraphConfig::default());
        call(&mut g2, &c, 1, "web", "shop.Cart", Some("cart-v1"));
        g2.observe(&s, Instant::now(), &c);
        g2.flush(&c);
        assert_eq!(g2.resolve(&Arc::from("shop.Cart")), Resolved::Virtual(Vec::new()));
    }

    #[test]
    fn remembered_rpc_services_are_bounded_and_evictions_counted() {
        let c = Counters::default();
        let mut g = ServiceGraph::new(GraphConfig {
            max_edges: 2,
            ..Default::default()
        });
        for (t, name) in [(1, "a.A"), (2, "b.B"), (3, "c.C")] {
            call(&mut g, &c, t, "web", name, Some("svc"));
        }
        assert_eq!(c.snapshot().graph_rpc_services_evicted, 1);
        assert_eq!(
            g.serves("svc"),
            [Arc::from("b.B"), Arc::from("c.C")],
            "the least recently served is forgotten"
        );
    }

    #[test]
    fn what_one_graph_learned_can_be_given_to_another() {
        let c = Counters::default();
        let mut shard = ServiceGraph::new(GraphConfig::default());
        call(&mut shard, &c, 1, "users", "cinema.Bookings", Some("bookings"));
        call(&mut shard, &c, 2, "users", "cinema.Bookings", None);
        // another graph that saw only the failed call, under a name it did not know to be an rpc.service
        let mut other = ServiceGraph::new(GraphConfig::default());
        let mut s = span(3, 2, Some(1), "users", Kind::Client, 1, true);
        s.peer = Some(("cinema.Bookings".into(), PeerSource::PeerService));
        other.observe(&s, Instant::now(), &c);
        other.flush(&c);
        assert_eq!(
            other.resolve(&Arc::from("cinema.Bookings")),
            Resolved::Virtual(Vec::new())
        );
        for (rpc_service, services) in shard.serving() {
            for (service, spans) in services {
                other.learn_serving(rpc_service, service, *spans, &c);
            }
        }
        for name in shard.rpc_service_nodes() {
            other.add_rpc_service_node(name.clone());
        }
        assert_eq!(
            other.resolve(&Arc::from("cinema.Bookings")),
            Resolved::Service(Arc::from("bookings"))
        );
        assert_eq!(merged(&other), [("users".into(), "bookings".into(), "", 1, 1, 1)]);
    }
}
