//! [`CollectorSpans`]: reads each execution's RPCs from `dei-collector`'s HTTP API, for services that run in
//! other processes and export their spans over OTLP.
//!
//! Each execution runs under its own trace: [`begin`](SpanSource::begin) draws a fresh trace id, and
//! [`TestRun::context`](crate::TestRun::context) carries it as a remote parent span context, so every RPC of
//! the execution (the test's client spans and, through propagation, everything they cause) lands in that
//! trace. The source reads `GET /api/v1/traces/{trace_id}` (collector-plugin/API.md) and turns the trace's
//! occurrences into an [`Observation`]. Spans arrive asynchronously, so [`settle`](SpanSource::settle) polls
//! until the trace is complete and has not changed for a quiet period, bounded by a timeout.
//!
//! What the trace view gives, and how it maps:
//! - `index`, `signature`, `fault` (wire form), `error`, `client_time`/`server_time` → the RPC's index,
//!   signature, injected fault, outcome (`fault`, else `error`, else ok) and times;
//! - the parent RPC is the occurrence at the index's parent (the collector nests by index prefix, so this
//!   needs an instantiation with the path component, as `dei` and `filibuster` have);
//! - stream messages are the occurrences that share the stream client span's `rpc` id; their indexes, and
//!   those of the RPCs served under them, are already rewritten to final form by the collector, so the
//!   search's `streams` stay empty and such RPCs are marked `rewritten`.
//!
//! The view has no stack digest and no status code: [`ObservedRpc::invocation`] stays `None` (no reference
//! indexes) and an error's outcome code is `error`.

use crate::observation::{Observation, ObservedRpc, Outcome};
use crate::source::{SourceError, SpanSource};
use dei_propagator::{Fault, Index};
use futures::future::BoxFuture;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How [`CollectorSpans::settle`](SpanSource::settle) waits for an execution's spans.
#[derive(Clone, Debug)]
pub struct SettleConfig {
    /// The trace must stay unchanged (and complete) this long.
    pub quiet: Duration,
    /// Time between two reads of the trace.
    pub poll: Duration,
    /// Give up waiting after this long and use what arrived.
    pub timeout: Duration,
}

impl Default for SettleConfig {
    fn default() -> Self {
        SettleConfig {
            quiet: Duration::from_millis(200),
            poll: Duration::from_millis(20),
            timeout: Duration::from_secs(10),
        }
    }
}

type FlushHook = Arc<dyn Fn() + Send + Sync>;

/// Reads executions from `dei-collector`'s API (`--api-listen`, e.g. `http://127.0.0.1:4319`).
///
/// ```no_run
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// use dei_sfit::{CollectorSpans, Search, SearchOptions, test_fn};
/// let source = CollectorSpans::new("http://127.0.0.1:4319");
/// let test = test_fn("checkout", |run| async move {
///     // issue the test's requests under this context: it carries the plan and the execution's trace
///     let _cx = run.context();
///     Ok(())
/// });
/// let report = Search::new(SearchOptions::default(), source).run(&test).await.expect("search");
/// println!("{report}");
/// # }
/// ```
#[derive(Clone)]
pub struct CollectorSpans {
    api: String,
    client: reqwest::Client,
    settle: SettleConfig,
    trace: Arc<Mutex<Option<SpanContext>>>,
    flush: Option<FlushHook>,
}

impl std::fmt::Debug for CollectorSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorSpans")
            .field("api", &self.api)
            .field("settle", &self.settle)
            .finish_non_exhaustive()
    }
}

impl CollectorSpans {
    /// A source reading the API at `api` (scheme, host and port: `http://127.0.0.1:4319`).
    pub fn new(api: impl Into<String>) -> Self {
        CollectorSpans {
            api: api.into().trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            settle: SettleConfig::default(),
            trace: Arc::default(),
            flush: None,
        }
    }

    /// Waits for spans as `settle` says.
    pub fn with_settle(mut self, settle: SettleConfig) -> Self {
        self.settle = settle;
        self
    }

    /// Calls `flush` before every read (e.g. `force_flush` of an in-process tracer provider, so that a batch
    /// exporter does not hold the execution's last spans).
    pub fn with_flush(mut self, flush: impl Fn() + Send + Sync + 'static) -> Self {
        self.flush = Some(Arc::new(flush));
        self
    }

    /// The current execution's trace id, once [`begin`](SpanSource::begin) ran.
    pub fn trace_id(&self) -> Option<TraceId> {
        self.current().map(|c| c.trace_id())
    }

    fn current(&self) -> Option<SpanContext> {
        self.trace.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the current execution's trace: `None` while the collector does not know it.
    async fn fetch(&self) -> Result<Option<TraceView>, SourceError> {
        let Some(trace_id) = self.trace_id() else {
            return Ok(None);
        };
        if let Some(flush) = &self.flush {
            flush();
        }
        let url = format!("{}/api/v1/traces/{trace_id}", self.api);
        let response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| SourceError::Backend(format!("GET {url}: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| SourceError::Backend(format!("GET {url}: {e}")))?;
        if !status.is_success() {
            return Err(SourceError::Backend(format!(
                "GET {url}: {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            )));
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| SourceError::Backend(format!("GET {url}: not a trace view: {e}")))
    }
}

impl SpanSource for CollectorSpans {
    /// Starts a new trace for the execution.
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        let ids = RandomIdGenerator::default();
        let cx = SpanContext::new(
            ids.new_trace_id(),
            ids.new_span_id(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        *self.trace.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx);
        Box::pin(async { Ok(()) })
    }

    fn execution_context(&self, cx: Context) -> Context {
        match self.current() {
            Some(span) => cx.with_remote_span_context(span),
            None => cx,
        }
    }

    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>> {
        Box::pin(async move {
            Ok(self
                .fetch()
                .await?
                .map(|v| observation_from_trace(&v))
                .unwrap_or_default())
        })
    }

    /// Polls the trace until it is complete (no span waiting for a stream mapping, every RPC's client span
    /// seen) and unchanged for the quiet period, or the timeout passes (an execution that issued no RPC, or
    /// whose spans never reach the collector, waits for the whole timeout).
    fn settle(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        Box::pin(async move {
            let started = Instant::now();
            let mut last: Option<(Fingerprint, Instant)> = None;
            loop {
                let view = self.fetch().await?;
                let now = Instant::now();
                let print = view.as_ref().map(Fingerprint::of);
                if let Some(print) = print {
                    match &last {
                        Some((p, since)) if *p == print => {
                            if print.complete && now.duration_since(*since) >= self.settle.quiet {
                                return Ok(());
                            }
                        }
                        _ => last = Some((print, now)),
                    }
                }
                if now.duration_since(started) >= self.settle.timeout {
                    tracing::warn!(
                        trace = ?self.trace_id(),
                        "dei-sfit: the execution's trace did not settle in {:?}; using what arrived",
                        self.settle.timeout
                    );
                    return Ok(());
                }
                tokio::time::sleep(self.settle.poll).await;
            }
        })
    }
}

/// What changes while a trace's spans arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    rpcs: usize,
    pending: usize,
    client_seen: usize,
    server_seen: usize,
    complete: bool,
}

impl Fingerprint {
    fn of(v: &TraceView) -> Fingerprint {
        let mut all = Vec::new();
        flatten(&v.tree, &mut all);
        let client_seen = all.iter().filter(|n| n.client_time.is_some()).count();
        Fingerprint {
            rpcs: v.rpcs,
            pending: v.pending_preliminary,
            client_seen,
            server_seen: all.iter().filter(|n| n.server_time.is_some()).count(),
            complete: v.pending_preliminary == 0 && client_seen == all.len(),
        }
    }
}

/// `GET /api/v1/traces/{trace_id}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TraceView {
    /// Occurrences in the trace.
    #[serde(default)]
    pub rpcs: usize,
    /// Spans waiting for a stream mapping.
    #[serde(default)]
    pub pending_preliminary: usize,
    /// The occurrences, nested by index prefix.
    #[serde(default)]
    pub tree: Vec<TraceNode>,
}

/// One occurrence of the trace view, with its children.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TraceNode {
    /// The (final) index, wire form.
    pub index: String,
    /// The RPC's id: the client span id (hex).
    #[serde(default)]
    pub rpc: String,
    /// `dei.signature`.
    #[serde(default)]
    pub signature: Option<String>,
    /// Client span start and end, Unix ns.
    #[serde(default)]
    pub client_time: Option<(u64, u64)>,
    /// Server span start and end, Unix ns.
    #[serde(default)]
    pub server_time: Option<(u64, u64)>,
    /// Either span had status error.
    #[serde(default)]
    pub error: bool,
    /// The injected fault, wire form.
    #[serde(default)]
    pub fault: Option<String>,
    /// Occurrences one index level down.
    #[serde(default)]
    pub children: Vec<TraceNode>,
}

fn flatten<'a>(nodes: &'a [TraceNode], out: &mut Vec<&'a TraceNode>) {
    for n in nodes {
        out.push(n);
        flatten(&n.children, out);
    }
}

/// Builds an execution's observation from a trace view. Occurrences whose index does not decode are skipped.
pub fn observation_from_trace(view: &TraceView) -> Observation {
    let mut nodes = Vec::new();
    flatten(&view.tree, &mut nodes);
    let decoded: Vec<(&TraceNode, Index)> = nodes
        .into_iter()
        .filter_map(|n| Index::decode(&n.index).ok().map(|i| (n, i)))
        .collect();
    let is_stream = |i: &Index| i.elements().last().is_some_and(|e| e.preliminary);
    // stream client span id → position of the stream's own occurrence
    let streams: HashMap<&str, usize> = decoded
        .iter()
        .enumerate()
        .filter(|(_, (n, i))| is_stream(i) && !n.rpc.is_empty())
        .map(|(p, (n, _))| (n.rpc.as_str(), p))
        .collect();
    let stream_of = |p: usize| -> Option<usize> {
        let (n, i) = &decoded[p];
        (!is_stream(i)).then(|| streams.get(n.rpc.as_str()).copied()).flatten()
    };
    let messages: Vec<&Index> = (0..decoded.len())
        .filter(|&p| stream_of(p).is_some())
        .map(|p| &decoded[p].1)
        .collect();
    let mut by_index: HashMap<&Index, Vec<usize>> = HashMap::new();
    for (p, (_, i)) in decoded.iter().enumerate() {
        by_index.entry(i).or_default().push(p);
    }
    let times = |n: &TraceNode| n.client_time.or(n.server_time);
    let mut obs = Observation::default();
    for (p, (n, index)) in decoded.iter().enumerate() {
        let (start, end) = times(n).unwrap_or((0, u64::MAX));
        let message_of = stream_of(p);
        let parent = message_of.or_else(|| {
            let candidates = by_index.get(&index.parent()?)?;
            // with several RPCs under the parent index, the one running when this one started
            candidates
                .iter()
                .copied()
                .find(|&c| times(decoded[c].0).is_some_and(|(s, e)| s <= start && start <= e))
                .or_else(|| candidates.first().copied())
        });
        let fault = n.fault.as_deref().and_then(|f| f.parse::<Fault>().ok());
        let outcome = match (fault, n.error, n.client_time) {
            (Some(f), _, _) => Outcome::of_fault(f),
            (None, true, _) => Outcome::Err { code: "error".into() },
            (None, false, Some(_)) => Outcome::ok(),
            (None, false, None) => Outcome::Unknown,
        };
        obs.rpcs.push(ObservedRpc {
            index: index.clone(),
            signature: n.signature.clone().unwrap_or_default(),
            invocation: None,
            parent,
            fault,
            outcome,
            start,
            end,
            rewritten: messages
                .iter()
                .any(|m| m.depth() < index.depth() && index.starts_with(m)),
            injectable: message_of.is_none(),
            reference: None,
        });
    }
    obs
}

#[cfg(test)]
mod tests {
    use super::*;
    use dei_propagator::{Element, ElementDigest};

    fn idx(elements: &[(u8, u32)]) -> Index {
        Index::from_elements(
            elements
                .iter()
                .map(|&(d, c)| Element::new(ElementDigest([d; 8]), c))
                .collect(),
        )
    }

    fn node(index: &Index, rpc: &str, time: (u64, u64), children: Vec<TraceNode>) -> TraceNode {
        TraceNode {
            index: index.encode(),
            rpc: rpc.into(),
            signature: Some(format!("sig{}", index.depth())),
            client_time: Some(time),
            server_time: Some(time),
            error: false,
            fault: None,
            children,
        }
    }

    #[test]
    fn occurrences_become_rpcs_with_parents_faults_and_streams() {
        let a = idx(&[(1, 1)]);
        let b = idx(&[(1, 1), (2, 1)]);
        let pre = Index::from_elements(
            idx(&[(1, 1), (3, 1)])
                .elements()
                .iter()
                .map(|e| e.preliminary())
                .collect(),
        );
        let msg = idx(&[(1, 1), (4, 1)]);
        let under_msg = idx(&[(1, 1), (4, 1), (5, 1)]);
        let mut fb = node(&b, "bb", (20, 30), vec![]);
        fb.fault = Some("g14".into());
        fb.error = true;
        let mut unknown = node(&idx(&[(1, 1), (6, 1)]), "ee", (50, 60), vec![]);
        unknown.client_time = None;
        let bad = TraceNode {
            index: "not an index".into(),
            ..TraceNode::default()
        };
        let view = TraceView {
            rpcs: 6,
            pending_preliminary: 0,
            tree: vec![node(
                &a,
                "aa",
                (10, 100),
                vec![
                    fb,
                    node(&pre, "ss", (31, 40), vec![]),
                    node(&msg, "ss", (31, 40), vec![node(&under_msg, "uu", (33, 35), vec![])]),
                    unknown,
                    bad,
                ],
            )],
        };
        let obs = observation_from_trace(&view);
        assert_eq!(obs.rpcs.len(), 6, "{:#?}", obs.rpcs);
        let pos = |i: &Index| obs.rpcs.iter().position(|r| &r.index == i).expect("rpc");
        let (pa, pb, ps, pm, pu) = (pos(&a), pos(&b), pos(&pre), pos(&msg), pos(&under_msg));
        assert_eq!(obs.rpcs[pa].parent, None);
        assert_eq!(obs.rpcs[pb].parent, Some(pa));
        assert_eq!(obs.rpcs[pb].fault, Some(Fault::UNAVAILABLE));
        assert_eq!(obs.rpcs[pb].outcome, Outcome::Err { code: "g14".into() });
        assert_eq!(obs.effective().len(), 1);
        assert!(obs.rpcs[ps].injectable && !obs.rpcs[ps].rewritten);
        assert_eq!(obs.rpcs[pm].parent, Some(ps), "a message hangs under its stream");
        assert!(!obs.rpcs[pm].injectable);
        assert_eq!(obs.rpcs[pu].parent, Some(pm));
        assert!(
            obs.rpcs[pu].rewritten,
            "served under a message: ran under the preliminary index"
        );
        assert!(obs.is_descendant(pu, ps));
        let e = obs
            .rpcs
            .iter()
            .find(|r| r.index.depth() == 2 && r.start == 50)
            .expect("e");
        assert_eq!(e.outcome, Outcome::Unknown);
        assert!(!Fingerprint::of(&view).complete, "a client span is missing");
    }

    #[test]
    fn the_collectors_json_decodes() {
        let a = idx(&[(1, 1)]);
        let json = format!(
            r#"{{"trace_id":"0102030405060708090a0b0c0d0e0f10","start_unix_nano":5,"rpcs":1,"pending_preliminary":0,
            "tree":[{{"index":"{}","rpc":"0102030405060708","caller_span":null,"signature":"GET /x","payload":null,
            "client_service":"t","server_service":"s","client_time":[5,9],"server_time":null,"error":true,
            "fault":"h503","ambiguous":false,"children":[]}}]}}"#,
            a.encode()
        );
        let view: TraceView = serde_json::from_str(&json).expect("decodes");
        let obs = observation_from_trace(&view);
        assert_eq!(obs.rpcs.len(), 1);
        assert_eq!(obs.rpcs[0].fault, Some(Fault::Http(503)));
        assert_eq!((obs.rpcs[0].start, obs.rpcs[0].end), (5, 9));
        assert!(Fingerprint::of(&view).complete);
        assert!(serde_json::from_str::<TraceView>(r#"{"tree":[{"rpc":"x"}]}"#).is_err());
    }
}
