//! The query node: pulls every shard's [`Snapshot`], merges them, and serves the union with the usual API.
//!
//! It keeps a copy of each shard (a [`Mirror`]) and, after the first pull, asks each for what changed since
//! the last one (`GET /api/v1/snapshot` with the last [`Cursor`]). Only the prefix-tree nodes and traces that
//! changed on some shard are merged again, from every shard's copy of them; the graph, small, is merged
//! whole. A shard that does not answer is dropped from the view until it answers again, with a whole
//! snapshot.

use super::snapshot::{Cursor, SNAPSHOT_VERSION, Snapshot, TraceSnapshot};
use crate::collector::{Collector, IngestConfig};
use crate::counters::{Counters, CountersSnapshot};
use crate::graph::ServiceGraph;
use crate::limits::{ConnectionLimits, LimitedListener};
use crate::server::StartError;
use crate::state::{CollectorState, StateConfig};
use crate::tree::NodeStats;
pub use crate::views::{PeerStatus, PeersView};
use dei_propagator::{Index, StackDigest};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Shards pulled at once: each snapshot is merged as it arrives and dropped, so that a query node holds this
/// many snapshots at a time, not one per shard.
const PULLS_AT_ONCE: usize = 8;

/// Runs CPU-heavy work (parsing a snapshot, merging it) without stalling the runtime's other tasks: on a
/// multi-thread runtime the worker hands its other tasks over first.
fn cpu_bound<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Largest snapshot read from one shard, by default.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// A query node's settings.
#[derive(Debug, Clone)]
pub struct QueryConfig {
    /// The shards' API base URLs (`http://host:port`).
    pub peers: Vec<String>,
    /// The API's listen address.
    pub api_listen: SocketAddr,
    /// How often the shards are pulled.
    pub interval: Duration,
    /// How long one shard may take to answer.
    pub timeout: Duration,
    /// Largest snapshot read from one shard; a larger one is that shard's error.
    pub max_snapshot_bytes: usize,
    /// Limits of the merged state: they must hold the union (by default, the shards' limits times their
    /// number, but for the cap of RPC occurrences per trace, one shard's: routed by trace id, a trace is whole
    /// on one shard). A merged trace past `state.traces.max_occurrences` keeps the first occurrences and
    /// counts the spans of the others on its `occurrences_dropped`, as a shard does.
    pub state: StateConfig,
    /// Connection limits of the API listener.
    pub limits: ConnectionLimits,
}

impl QueryConfig {
    /// A query node over `peers` on `api_listen`, pulling every second, with the default limits of one shard
    /// times the number of shards.
    pub fn new(peers: Vec<String>, api_listen: SocketAddr) -> Self {
        let n = peers.len().max(1);
        let mut state = StateConfig::default();
        state.max_nodes = state.max_nodes.saturating_mul(n);
        state.traces.max_traces = state.traces.max_traces.saturating_mul(n);
        state.graph.max_edges = state.graph.max_edges.saturating_mul(n);
        state.max_stacks = state.max_stacks.saturating_mul(n);
        QueryConfig {
            peers,
            api_listen,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            state,
            limits: ConnectionLimits::default(),
        }
    }
}

/// The shards and how to reach them.
#[derive(Debug)]
pub struct PeerSet {
    config: QueryConfig,
    client: reqwest::Client,
    last_answer: Vec<Option<(u64, usize, usize, u64)>>,
    lookup: Arc<TraceLookup>,
    /// Each shard's copy; `None` until it answers, and again after it failed to.
    mirrors: Vec<Option<Mirror>>,
}

/// What a query node holds of one shard: its nodes and traces as of the last pull, and the rest of its last
/// snapshot (graph, services, counters).
#[derive(Debug, Default)]
struct Mirror {
    nodes: HashMap<Index, NodeStats>,
    traces: HashMap<[u8; 16], TraceSnapshot>,
    /// The last snapshot without its nodes, traces and stacks.
    rest: Snapshot,
}

/// The keys that changed on some shard since the last pull: merged again from every shard's copy.
#[derive(Debug, Default)]
struct Changes {
    nodes: HashSet<Index>,
    traces: HashSet<[u8; 16]>,
    stacks: Vec<(StackDigest, Vec<String>)>,
}

impl Mirror {
    /// Applies a shard's snapshot (whole, or what changed since this copy's cursor) to this copy, noting
    /// the keys it touched.
    fn apply(&mut self, mut snapshot: Snapshot, changes: &mut Changes) -> Result<(), String> {
        let removed_traces = std::mem::take(&mut snapshot.removed_traces)
            .iter()
            .map(|h| {
                ::hex::decode(h)
                    .ok()
                    .and_then(|b| <[u8; 16]>::try_from(b).ok())
                    .ok_or_else(|| format!("a removed trace id that is not 16 hex bytes: {h:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if snapshot.full {
            changes.nodes.extend(self.nodes.drain().map(|(k, _)| k));
            changes.traces.extend(self.traces.drain().map(|(k, _)| k));
        }
        for index in std::mem::take(&mut snapshot.removed_nodes) {
            self.nodes.remove(&index);
            changes.nodes.insert(index);
        }
        for id in removed_traces {
            self.traces.remove(&id);
            changes.traces.insert(id);
        }
        for n in std::mem::take(&mut snapshot.nodes) {
            changes.nodes.insert(n.index.clone());
            self.nodes.insert(n.index, n.stats);
        }
        for t in std::mem::take(&mut snapshot.traces) {
            changes.traces.insert(t.trace_id);
            self.traces.insert(t.trace_id, t);
        }
        changes.stacks.append(&mut snapshot.stacks);
        self.rest = snapshot;
        Ok(())
    }
}

/// Merges again, into `state`, every key in `changes` from the copies that hold it (in shard order, so that
/// first-seen labels do not depend on which shard answered first), and the graph from every copy.
fn merge_changes(
    state: &mut CollectorState,
    mirrors: &[Option<Mirror>],
    changes: Changes,
    graph: &crate::graph::GraphConfig,
) {
    let now = Instant::now();
    let mut nodes: Vec<Index> = changes.nodes.into_iter().collect();
    nodes.sort_by_key(Index::depth);
    for index in nodes {
        let mut held = mirrors.iter().flatten().filter_map(|m| m.nodes.get(&index)).peekable();
        if held.peek().is_none() {
            state.tree.remove(&index);
            continue;
        }
        let mut sum = NodeStats {
            preliminary: index.last().is_some_and(|e| e.preliminary),
            ..NodeStats::default()
        };
        for stats in held {
            sum.merge(stats);
            sum.preliminary |= stats.preliminary;
        }
        let id = state.tree.get_or_insert(&index);
        if let Some(stats) = state.tree.stats_mut(id) {
            *stats = sum;
        }
    }
    for id in changes.traces {
        state.traces.remove(&id);
        for t in mirrors.iter().flatten().filter_map(|m| m.traces.get(&id)) {
            state.absorb_trace(t, now);
        }
    }
    let counters = state.counters().clone();
    for (digest, frames) in changes.stacks {
        state.stacks.insert(digest, &frames, &counters);
    }
    state.graph = ServiceGraph::new(graph.clone());
    for m in mirrors.iter().flatten() {
        state.absorb_graph(&m.rest);
    }
}

/// A query node's trace lookups (`GET /api/v1/traces/{id}`), answered by the shard that holds the trace, so
/// that a trace is as fresh as its shard's view of it, not as the last pull: the shard that held it at the
/// last pull is asked first, then every shard at once.
#[derive(Debug)]
pub(crate) struct TraceLookup {
    urls: Vec<String>,
    client: reqwest::Client,
    owners: std::sync::Mutex<std::collections::HashMap<[u8; 16], usize>>,
    /// Largest answer read from a shard (`--max-snapshot-bytes`).
    max_bytes: usize,
    /// Per shard: answers that were too large or not the trace's view.
    bad_answers: Vec<std::sync::atomic::AtomicU64>,
    bad_answer_log: crate::counters::RateLimitedLog,
}

/// What a shard answered to a trace lookup.
pub(crate) enum Found {
    /// The trace view's JSON, as the shard sent it (checked to be the trace's view).
    Trace(bytes::Bytes),
    /// No shard that answered holds it; the others did not answer (their URLs and errors).
    Missing(Vec<String>),
    /// No shard gave the trace, and these answered with what is not its view, or too much (their URLs and
    /// why).
    BadAnswer(Vec<String>),
}

/// Why a shard gave no trace view.
enum AskError {
    /// It could not be reached, timed out, or answered an error status.
    Unreachable(String),
    /// It answered success with a body over the limit or not the trace's view.
    BadAnswer(String),
}

impl TraceLookup {
    /// Finds the trace on its shard.
    pub(crate) async fn trace(&self, id: [u8; 16]) -> Found {
        let owner = self.owners.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied();
        let mut answers = Vec::with_capacity(self.urls.len());
        if let Some(i) = owner {
            match self.ask(i, &id).await {
                Ok(Some(body)) => return Found::Trace(body),
                answer => answers.push((i, answer)),
            }
        }
        let asks = (0..self.urls.len())
            .filter(|i| Some(*i) != owner)
            .map(|i| async move { (i, self.ask(i, &id).await) });
        answers.extend(futures::future::join_all(asks).await);
        let (mut unreachable, mut bad) = (Vec::new(), Vec::new());
        for (i, answer) in answers {
            match answer {
                Ok(Some(body)) => {
                    self.owners.lock().unwrap_or_else(|p| p.into_inner()).insert(id, i);
                    return Found::Trace(body);
                }
                Ok(None) => {}
                Err(AskError::Unreachable(e)) => unreachable.push(format!("{}: {e}", self.urls[i])),
                Err(AskError::BadAnswer(e)) => bad.push(format!("{}: {e}", self.urls[i])),
            }
        }
        if bad.is_empty() {
            Found::Missing(unreachable)
        } else {
            bad.extend(unreachable);
            Found::BadAnswer(bad)
        }
    }

    /// Trace lookups shard `i` answered with too much or with what is not the trace's view.
    pub(crate) fn bad_answers(&self, i: usize) -> u64 {
        self.bad_answers
            .get(i)
            .map_or(0, |n| n.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Shard `i`'s view of the trace: `None` when it does not hold it. The answer is read up to
    /// `max_bytes` and must be the trace's view; otherwise it is counted, logged and an error.
    async fn ask(&self, i: usize, id: &[u8; 16]) -> Result<Option<bytes::Bytes>, AskError> {
        let trace_id = ::hex::encode(id);
        let url = format!("{}/api/v1/traces/{trace_id}", self.urls[i].trim_end_matches('/'));
        let unreachable = |e: &reqwest::Error| AskError::Unreachable(chain(e));
        let mut response = self.client.get(&url).send().await.map_err(|e| unreachable(&e))?;
        match response.status() {
            s if s.is_success() => {}
            reqwest::StatusCode::NOT_FOUND => return Ok(None),
            s => return Err(AskError::Unreachable(format!("HTTP {s}"))),
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(&e))? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(self.bad_answer(i, format!("the answer is larger than {} bytes", self.max_bytes)));
            }
            body.extend_from_slice(&chunk);
        }
        match cpu_bound(|| serde_json::from_slice::<crate::views::TraceView>(&body)) {
            Ok(view) if view.trace_id == trace_id => Ok(Some(body.into())),
            Ok(view) => Err(self.bad_answer(i, format!("the answer is the view of trace {:?}", view.trace_id))),
            Err(e) => Err(self.bad_answer(i, format!("the answer is not a trace view: {e}"))),
        }
    }

    /// Counts and logs shard `i`'s bad answer.
    fn bad_answer(&self, i: usize, why: String) -> AskError {
        if let Some(n) = self.bad_answers.get(i) {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.bad_answer_log.warn(&format!(
            "a shard answered a trace lookup with what is not a trace view: {}: {why}",
            self.urls[i]
        ));
        AskError::BadAnswer(why)
    }
}

/// An error with its causes (`error sending request …: connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl PeerSet {
    /// The shards of `config`.
    pub fn new(config: QueryConfig) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| format!("an HTTP client: {e}"))?;
        let last_answer = vec![None; config.peers.len()];
        let lookup = Arc::new(TraceLookup {
            urls: config.peers.clone(),
            client: client.clone(),
            owners: Default::default(),
            max_bytes: config.max_snapshot_bytes,
            bad_answers: config.peers.iter().map(|_| Default::default()).collect(),
            bad_answer_log: crate::counters::RateLimitedLog::new(Duration::from_secs(5)),
        });
        let mirrors = (0..config.peers.len()).map(|_| None).collect();
        Ok(PeerSet {
            config,
            client,
            last_answer,
            lookup,
            mirrors,
        })
    }

    /// The trace lookups over these shards.
    pub(crate) fn lookup(&self) -> Arc<TraceLookup> {
        self.lookup.clone()
    }

    /// Pulls every shard (a few at once): what changed since the last pull from a shard that answered it,
    /// everything from the others. Merges what changed into `collector`'s state, sums the shards' counters,
    /// and returns what answered.
    pub async fn refresh(&mut self, collector: &Collector) -> PeersView {
        use futures::StreamExt as _;
        let started = Instant::now();
        let mut errors: Vec<Option<String>> = vec![None; self.config.peers.len()];
        let mut merging = Duration::ZERO;
        let mut changes = Changes::default();
        let (client, max) = (self.client.clone(), self.config.max_snapshot_bytes);
        let urls: Vec<(usize, String, Option<Cursor>)> = self
            .config
            .peers
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, url)| (i, url, self.mirrors[i].as_ref().map(|m| m.rest.cursor)))
            .collect();
        let mut pulls = futures::stream::iter(urls)
            .map(move |(i, url, cursor)| {
                let client = client.clone();
                async move { (i, pull(client, url, cursor, max).await) }
            })
            .buffer_unordered(PULLS_AT_ONCE);
        let mut answered: Vec<Option<u64>> = vec![None; self.config.peers.len()];
        while let Some((i, answer)) = pulls.next().await {
            let at = Instant::now();
            let applied = answer.and_then(|snapshot| {
                if !snapshot.full && self.mirrors[i].is_none() {
                    return Err("answered with changes to a pull that asked for everything".to_string());
                }
                cpu_bound(|| {
                    self.mirrors[i]
                        .get_or_insert_with(Mirror::default)
                        .apply(snapshot, &mut changes)
                })
            });
            match applied {
                Ok(()) => answered[i] = Some(unix_nanos()),
                Err(e) => {
                    tracing::warn!(peer = %self.config.peers[i], error = %e, "a shard did not answer: the merged view is partial");
                    if let Some(m) = self.mirrors[i].take() {
                        changes.nodes.extend(m.nodes.into_keys());
                        changes.traces.extend(m.traces.into_keys());
                    }
                    errors[i] = Some(e);
                }
            }
            merging += at.elapsed();
        }
        drop(pulls);
        let at = Instant::now();
        let mut counters = CountersSnapshot::default();
        let mut waiting = 0;
        for m in self.mirrors.iter().flatten() {
            counters.add(&m.rest.counters);
            waiting += m.rest.graph_waiting_spans;
        }
        {
            let mut owners = self.lookup.owners.lock().unwrap_or_else(|p| p.into_inner());
            for id in &changes.traces {
                match self
                    .mirrors
                    .iter()
                    .position(|m| m.as_ref().is_some_and(|m| m.traces.contains_key(id)))
                {
                    Some(i) => owners.insert(*id, i),
                    None => owners.remove(id),
                };
            }
        }
        {
            let mut state = collector.state();
            cpu_bound(|| merge_changes(&mut state, &self.mirrors, changes, &self.config.state.graph));
        }
        merging += at.elapsed();
        let mut peers = Vec::with_capacity(errors.len());
        for (i, (url, error)) in self.config.peers.iter().zip(errors).enumerate() {
            if let (Some(now), Some(m)) = (answered[i], self.mirrors[i].as_ref()) {
                self.last_answer[i] = Some((now, m.traces.len(), m.nodes.len(), m.rest.counters.spans_received));
            }
            let (at, traces, tree_nodes, spans_received) =
                self.last_answer[i].map_or((None, 0, 0, 0), |(at, t, n, s)| (Some(at), t, n, s));
            peers.push(PeerStatus {
                url: url.clone(),
                answered: error.is_none(),
                error,
                last_answer_unix_nano: at,
                traces,
                tree_nodes,
                spans_received,
                bad_trace_answers: self.lookup.bad_answers(i),
            });
        }
        let view = PeersView {
            partial: peers.iter().any(|p| !p.answered),
            merged_unix_nano: unix_nanos(),
            pull_seconds: started.elapsed().saturating_sub(merging).as_secs_f64(),
            merge_seconds: merging.as_secs_f64(),
            peers,
        };
        collector.set_merged(&counters, waiting, view.clone());
        view
    }
}

/// Fetches and parses one shard's snapshot (what changed since `since`, or everything), at most `max_bytes`
/// long.
async fn pull(
    client: reqwest::Client,
    url: String,
    since: Option<Cursor>,
    max_bytes: usize,
) -> Result<Snapshot, String> {
    let mut endpoint = format!("{}/api/v1/snapshot", url.trim_end_matches('/'));
    if let Some(c) = since {
        endpoint.push_str(&format!(
            "?epoch={}&tree={}&traces={}&stacks={}",
            c.epoch, c.tree, c.traces, c.stacks
        ));
    }
    // every error names the endpoint, once (reqwest names the URL in a request's error, not in its body's)
    let failed = |e: reqwest::Error| format!("{endpoint}: {}", chain(&e.without_url()));
    let request = client.get(&endpoint);
    let mut response = request.send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(format!("{endpoint}: HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("{endpoint}: the snapshot is larger than {} bytes", max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    let snapshot: Snapshot =
        cpu_bound(|| serde_json::from_slice(&body)).map_err(|e| format!("{endpoint}: not a snapshot: {e}"))?;
    if snapshot.version != SNAPSHOT_VERSION {
        return Err(format!(
            "{endpoint}: snapshot format {} (this dei-collector reads {SNAPSHOT_VERSION})",
            snapshot.version
        ));
    }
    Ok(snapshot)
}

/// A running query node.
#[derive(Debug)]
pub struct QueryNode {
    /// Bound API address.
    pub api_addr: SocketAddr,
    /// The collector core that holds the merged state.
    pub collector: Arc<Collector>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Pulls the shards once (so that the first query sees them), then serves the API over the merged view and
/// pulls again every interval (`dei-collector query`).
///
/// # Example
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// use dei_collector::server::{self, QueryConfig, ServerConfig};
///
/// // two shards (in production: dei-collectors behind the Collector's loadbalancing exporter)
/// let a = server::start(ServerConfig::ephemeral()).await.expect("a shard");
/// let b = server::start(ServerConfig::ephemeral()).await.expect("a shard");
/// let peers = vec![format!("http://{}", a.api_addr), format!("http://{}", b.api_addr)];
/// let query = server::start_query(QueryConfig::new(peers, "127.0.0.1:0".parse().unwrap()))
///     .await
///     .expect("a query node");
/// // the same API over the union, and which shards answered
/// let stats = query.collector.stats();
/// assert_eq!(stats.peers.map(|p| (p.partial, p.peers.len())), Some((false, 2)));
/// query.shutdown().await;
/// # a.shutdown().await;
/// # b.shutdown().await;
/// # }
/// ```
pub async fn start(config: QueryConfig) -> Result<QueryNode, StartError> {
    let counters = Arc::new(Counters::default());
    let collector = Arc::new(Collector::new(
        IngestConfig::default(),
        config.state.clone(),
        None,
        counters.clone(),
    ));
    let mut peers = PeerSet::new(config.clone()).map_err(StartError::Peers)?;
    collector.set_trace_lookup(peers.lookup());
    peers.refresh(&collector).await;
    let listener = tokio::net::TcpListener::bind(config.api_listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.api_listen,
            source,
        })?;
    let api_addr = listener.local_addr().unwrap_or(config.api_listen);
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    let app = crate::api::router(collector.clone());
    let mut rx = stopped.clone();
    let listener = LimitedListener::new(listener, config.limits, counters);
    tasks.push(tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "API stopped");
        }
    }));
    let c = collector.clone();
    let mut rx = stopped;
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let stop = tokio::select! {
                _ = tick.tick() => false,
                _ = rx.changed() => true,
            };
            if stop || *rx.borrow() {
                return;
            }
            peers.refresh(&c).await;
        }
    }));
    Ok(QueryNode {
        api_addr,
        collector,
        stop,
        tasks,
    })
}

impl QueryNode {
    /// Stops pulling and serving.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span_record::{DeiAttributes, Kind, SpanRecord};
    use crate::tree::traces::TraceStoreConfig;
    use dei_propagator::{Element, ElementDigest};
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// A small xorshift generator: the same sequence in every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn span(
        trace: u64,
        id: u8,
        parent: Option<u8>,
        service: &str,
        kind: Kind,
        index: &Index,
        error: bool,
    ) -> SpanRecord {
        let mut trace_id = [0u8; 16];
        trace_id[8..].copy_from_slice(&trace.to_be_bytes());
        SpanRecord {
            trace_id,
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            service: Arc::from(service),
            name: format!("rpc-{id}"),
            kind,
            start_ns: 1_000_000_000 + trace * 1_000,
            end_ns: 1_000_000_000 + trace * 1_000 + u64::from(id) * 10_000,
            error,
            status: Default::default(),
            peer: None,
            database: false,
            dei: DeiAttributes {
                index: Some(index.clone()),
                signature: Some(Arc::from(format!("svc/M{}", index.last().map_or(0, |e| e.digest.0[0])))),
                ..Default::default()
            },
        }
    }

    /// One trace: a call into `api` and a few calls from `api` to `db`, drawn from a small set of
    /// signatures so that traces share nodes, with enough variety to go past the tree's limit.
    fn trace(rng: &mut Rng, trace: u64) -> Vec<SpanRecord> {
        let element = |d: u8, count: u32| Element::new(ElementDigest([d; 8]), count);
        let top = Index::from_elements(vec![element(1 + rng.below(3) as u8, 1)]);
        let mut spans = vec![
            span(trace, 1, None, "front", Kind::Client, &top, false),
            span(trace, 2, Some(1), "api", Kind::Server, &top, false),
        ];
        let mut counts = BTreeMap::new();
        for j in 0..1 + rng.below(4) as u8 {
            let d = 10 + rng.below(30) as u8;
            let count = counts.entry(d).and_modify(|c| *c += 1).or_insert(1u32);
            let index = top.child(element(d, *count));
            let error = rng.below(5) == 0;
            spans.push(span(trace, 10 + 2 * j, Some(2), "api", Kind::Client, &index, error));
            spans.push(span(
                trace,
                11 + 2 * j,
                Some(10 + 2 * j),
                "db",
                Kind::Server,
                &index,
                error,
            ));
        }
        spans
    }

    /// What a state shows, in a form that does not depend on arena ids or arrival order.
    fn view(state: &CollectorState) -> Value {
        let s = state.snapshot(CountersSnapshot::default());
        let by = |items: Vec<(String, Value)>| items.into_iter().collect::<BTreeMap<_, _>>();
        let sorted = |v: Value| {
            let mut items: Vec<String> = v.as_array().into_iter().flatten().map(|x| x.to_string()).collect();
            items.sort();
            items
        };
        json!({
            "nodes": by(s.nodes.iter().map(|n| (n.index.encode(), serde_json::to_value(&n.stats).unwrap())).collect()),
            "traces": by(s.traces.iter().map(|t| (::hex::encode(t.trace_id), serde_json::to_value(t).unwrap())).collect()),
            "edges": sorted(serde_json::to_value(&s.edges).unwrap()),
            "services": sorted(serde_json::to_value(&s.services).unwrap()),
            "virtual_nodes": sorted(serde_json::to_value(&s.virtual_nodes).unwrap()),
            "serving": sorted(serde_json::to_value(&s.serving).unwrap()),
            "stacks": sorted(serde_json::to_value(&s.stacks).unwrap()),
        })
    }

    /// Where two JSON values first differ.
    fn difference(a: &Value, b: &Value, at: &str) -> String {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys()) {
                    let (u, v) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                    if u != v {
                        return difference(u, v, &format!("{at}/{k}"));
                    }
                }
                String::new()
            }
            _ => format!("{at}: {a} != {b}"),
        }
    }

    /// A query node whose cap of RPCs per trace is below a trace's RPCs keeps the first ones and counts what
    /// it leaves out on the merged trace as a shard with that cap counts it: the spans past the cap (client
    /// and server), not one per occurrence.
    #[test]
    fn a_trace_cut_at_the_query_nodes_cap_counts_the_spans_it_leaves_out() {
        let with_cap = |max_occurrences| StateConfig {
            traces: TraceStoreConfig {
                max_occurrences,
                ..TraceStoreConfig::default()
            },
            ..StateConfig::default()
        };
        let state = |cap| CollectorState::new(with_cap(cap), Arc::new(Counters::default()));
        // ten RPCs of trace 7, each a client span and its server span
        let spans: Vec<SpanRecord> = (0..10u8)
            .flat_map(|k| {
                let index = Index::from_elements(vec![Element::new(ElementDigest([k + 1; 8]), 1)]);
                let client = 10 + 2 * k;
                [
                    span(7, client, None, "front", Kind::Client, &index, false),
                    span(7, client + 1, Some(client), "api", Kind::Server, &index, false),
                ]
            })
            .collect();
        let now = Instant::now();
        let (mut roomy, mut capped, mut merged) = (state(100), state(4), state(4));
        roomy.ingest(spans.clone(), now);
        capped.ingest(spans, now);
        merged.absorb(roomy.snapshot(CountersSnapshot::default()), now);
        let trace = |s: &CollectorState| {
            s.snapshot(CountersSnapshot::default())
                .traces
                .iter()
                .map(|t| (t.occurrences.len(), t.occurrences_dropped))
                .collect::<Vec<_>>()
        };
        assert_eq!(trace(&roomy), [(10, 0)]);
        assert_eq!(
            trace(&capped),
            [(4, 12)],
            "a shard with a cap of 4 drops both spans of 6 RPCs"
        );
        assert_eq!(
            trace(&merged),
            trace(&capped),
            "a query node with a cap of 4 counts the same"
        );
    }

    /// Shards that ingest, evict (a tree of at most 60 nodes, 30 traces), restart and stop answering; a
    /// query node that pulls what changed after its first pull. After every pull its view is the one it
    /// would have built from whole snapshots of the shards that answered; and a query node over it, pulling
    /// its changes in turn, has the same view.
    #[test]
    fn pulling_what_changed_gives_the_view_of_pulling_everything() {
        let config = StateConfig {
            max_nodes: 60,
            traces: TraceStoreConfig {
                max_traces: 30,
                ..TraceStoreConfig::default()
            },
            ..StateConfig::default()
        };
        let shard = || CollectorState::new(config.clone(), Arc::new(Counters::default()));
        let mut shards = [shard(), shard(), shard()];
        let query_config = StateConfig::default();
        let mut merged = CollectorState::new(query_config.clone(), Arc::new(Counters::default()));
        let mut mirrors: Vec<Option<Mirror>> = (0..shards.len()).map(|_| None).collect();
        let mut top = CollectorState::new(query_config.clone(), Arc::new(Counters::default()));
        let mut top_mirror: Vec<Option<Mirror>> = vec![None];
        let mut top_deltas = 0;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut deltas = 0;
        for round in 0..60u64 {
            for t in 0..1 + rng.below(6) {
                let i = rng.below(shards.len() as u64) as usize;
                let spans = trace(&mut rng, round * 100 + t);
                shards[i].ingest(spans, Instant::now());
            }
            if round == 30 {
                shards[1] = shard(); // a restart: a new epoch
            }
            let down = (40..45).contains(&round).then_some(2);
            let mut changes = Changes::default();
            for (i, s) in shards.iter().enumerate() {
                if Some(i) == down {
                    if let Some(m) = mirrors[i].take() {
                        changes.nodes.extend(m.nodes.into_keys());
                        changes.traces.extend(m.traces.into_keys());
                    }
                    continue;
                }
                let since = mirrors[i].as_ref().map(|m| m.rest.cursor);
                let snapshot = s.snapshot_since(CountersSnapshot::default(), since);
                deltas += usize::from(!snapshot.full);
                // through the wire format
                let snapshot: Snapshot = serde_json::from_slice(&serde_json::to_vec(&snapshot).unwrap()).unwrap();
                mirrors[i]
                    .get_or_insert_with(Mirror::default)
                    .apply(snapshot, &mut changes)
                    .unwrap();
            }
            merge_changes(&mut merged, &mirrors, changes, &query_config.graph);

            // a query node over this one pulls its changes in turn: query nodes stack
            let mut top_changes = Changes::default();
            let since = top_mirror[0].as_ref().map(|m| m.rest.cursor);
            let snapshot = merged.snapshot_since(CountersSnapshot::default(), since);
            top_deltas += usize::from(!snapshot.full);
            top_mirror[0]
                .get_or_insert_with(Mirror::default)
                .apply(snapshot, &mut top_changes)
                .unwrap();
            merge_changes(&mut top, &top_mirror, top_changes, &query_config.graph);
            let (got, want) = (view(&top), view(&merged));
            assert!(
                got == want,
                "round {round}, a query node over the query node: {}",
                difference(&got, &want, "")
            );

            let mut whole = CollectorState::new(query_config.clone(), Arc::new(Counters::default()));
            for (_, s) in shards.iter().enumerate().filter(|(i, _)| Some(*i) != down) {
                whole.absorb(s.snapshot(CountersSnapshot::default()), Instant::now());
            }
            let (got, want) = (view(&merged), view(&whole));
            assert!(got == want, "round {round}: {}", difference(&got, &want, ""));
        }
        let evicted = shards
            .iter()
            .map(|s| s.counters().snapshot())
            .fold((0, 0), |(n, t), c| (n + c.tree_nodes_evicted, t + c.traces_evicted));
        assert!(
            evicted.0 > 0 && evicted.1 > 0,
            "the shards evicted nodes and traces: {evicted:?}"
        );
        assert!(deltas > 100, "most pulls were of changes: {deltas}");
        assert_eq!(
            top_deltas, 59,
            "after its first pull, the query node above pulled only changes"
        );
    }
}
