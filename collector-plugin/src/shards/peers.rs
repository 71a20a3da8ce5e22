//! The query node: pulls every shard's [`Snapshot`], merges them, and serves the union with the usual API.

use super::snapshot::{SNAPSHOT_VERSION, Snapshot};
use crate::collector::{Collector, IngestConfig};
use crate::counters::{Counters, CountersSnapshot};
use crate::limits::{ConnectionLimits, LimitedListener};
use crate::server::StartError;
use crate::state::{CollectorState, StateConfig};
pub use crate::views::{PeerStatus, PeersView};
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
    /// number).
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
}

/// A query node's trace lookups (`GET /api/v1/traces/{id}`), answered by the shard that holds the trace, so
/// that a trace is as fresh as its shard's view of it, not as the last pull: the shard that held it at the
/// last pull is asked first, then every shard at once.
#[derive(Debug)]
pub(crate) struct TraceLookup {
    urls: Vec<String>,
    client: reqwest::Client,
    owners: std::sync::Mutex<std::collections::HashMap<[u8; 16], usize>>,
}

/// What a shard answered to a trace lookup.
pub(crate) enum Found {
    /// The trace view's JSON, as the shard sent it.
    Trace(bytes::Bytes),
    /// No shard that answered holds it; the others did not answer (their URLs and errors).
    Missing(Vec<String>),
}

impl TraceLookup {
    /// Finds the trace on its shard.
    pub(crate) async fn trace(&self, id: [u8; 16]) -> Found {
        let owner = self.owners.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied();
        if let Some(i) = owner
            && let Ok(Some(body)) = self.ask(i, &id).await
        {
            return Found::Trace(body);
        }
        let asks = (0..self.urls.len()).map(|i| self.ask(i, &id));
        let mut errors = Vec::new();
        for (i, answer) in futures::future::join_all(asks).await.into_iter().enumerate() {
            match answer {
                Ok(Some(body)) => {
                    self.owners.lock().unwrap_or_else(|p| p.into_inner()).insert(id, i);
                    return Found::Trace(body);
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("{}: {e}", self.urls[i])),
            }
        }
        Found::Missing(errors)
    }

    /// Shard `i`'s view of the trace: `None` when it does not hold it.
    async fn ask(&self, i: usize, id: &[u8; 16]) -> Result<Option<bytes::Bytes>, String> {
        let url = format!(
            "{}/api/v1/traces/{}",
            self.urls[i].trim_end_matches('/'),
            ::hex::encode(id)
        );
        let response = self.client.get(&url).send().await.map_err(|e| chain(&e))?;
        match response.status() {
            s if s.is_success() => response.bytes().await.map(Some).map_err(|e| chain(&e)),
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            s => Err(format!("HTTP {s}")),
        }
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
        });
        Ok(PeerSet {
            config,
            client,
            last_answer,
            lookup,
        })
    }

    /// The trace lookups over these shards.
    pub(crate) fn lookup(&self) -> Arc<TraceLookup> {
        self.lookup.clone()
    }

    /// Pulls every shard at once, merges what answered into a fresh state, and puts it in `collector`
    /// (with the shards' counters summed). Returns what answered.
    pub async fn refresh(&mut self, collector: &Collector) -> PeersView {
        use futures::StreamExt as _;
        let started = Instant::now();
        let mut state = CollectorState::new(self.config.state.clone(), collector.counters().clone());
        let mut counters = CountersSnapshot::default();
        let mut waiting = 0;
        let mut owners = std::collections::HashMap::new();
        let mut errors: Vec<Option<String>> = vec![None; self.config.peers.len()];
        let mut merging = Duration::ZERO;
        // a few shards at once, each snapshot merged as it arrives and dropped: memory holds
        // PULLS_AT_ONCE snapshots, not one per shard
        let (client, max) = (self.client.clone(), self.config.max_snapshot_bytes);
        let urls: Vec<(usize, String)> = self.config.peers.iter().cloned().enumerate().collect();
        let mut pulls = futures::stream::iter(urls)
            .map(move |(i, url)| {
                let client = client.clone();
                async move { (i, pull(client, url, max).await) }
            })
            .buffer_unordered(PULLS_AT_ONCE);
        let mut answered: Vec<Option<(u64, usize, usize, u64)>> = vec![None; self.config.peers.len()];
        while let Some((i, answer)) = pulls.next().await {
            match answer {
                Ok(snapshot) => {
                    let at = Instant::now();
                    owners.extend(snapshot.traces.iter().map(|t| (t.trace_id, i)));
                    answered[i] = Some((
                        unix_nanos(),
                        snapshot.traces.len(),
                        snapshot.nodes.len(),
                        snapshot.counters.spans_received,
                    ));
                    counters.add(&snapshot.counters);
                    waiting += snapshot.graph_waiting_spans;
                    cpu_bound(|| state.absorb(snapshot, at));
                    merging += at.elapsed();
                }
                Err(e) => {
                    tracing::warn!(peer = %self.config.peers[i], error = %e, "a shard did not answer: the merged view is partial");
                    errors[i] = Some(e);
                }
            }
        }
        drop(pulls);
        let mut peers = Vec::with_capacity(errors.len());
        for (((url, error), last), now) in self
            .config
            .peers
            .iter()
            .zip(errors)
            .zip(&mut self.last_answer)
            .zip(answered)
        {
            if now.is_some() {
                *last = now;
            }
            let (at, traces, tree_nodes, spans_received) =
                last.map_or((None, 0, 0, 0), |(at, t, n, s)| (Some(at), t, n, s));
            peers.push(PeerStatus {
                url: url.clone(),
                answered: error.is_none(),
                error,
                last_answer_unix_nano: at,
                traces,
                tree_nodes,
                spans_received,
            });
        }
        let view = PeersView {
            partial: peers.iter().any(|p| !p.answered),
            merged_unix_nano: unix_nanos(),
            pull_seconds: started.elapsed().saturating_sub(merging).as_secs_f64(),
            merge_seconds: merging.as_secs_f64(),
            peers,
        };
        *self.lookup.owners.lock().unwrap_or_else(|p| p.into_inner()) = owners;
        collector.replace_merged(state, &counters, waiting, view.clone());
        view
    }
}

/// Fetches and parses one shard's snapshot, at most `max_bytes` long.
async fn pull(client: reqwest::Client, url: String, max_bytes: usize) -> Result<Snapshot, String> {
    let endpoint = format!("{}/api/v1/snapshot", url.trim_end_matches('/'));
    let mut response = client.get(&endpoint).send().await.map_err(|e| chain(&e))?;
    if !response.status().is_success() {
        return Err(format!("{endpoint}: HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| chain(&e))? {
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
