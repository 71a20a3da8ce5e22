//! [`CollectorSpans`]: reads each execution's RPCs from `dei-collector`'s HTTP API, for services that run in
//! other processes and export their spans over OTLP.
//!
//! Each execution runs under its own trace: [`begin`](SpanSource::begin) draws a fresh trace id, and
//! [`TestRun::context`](crate::TestRun::context) carries it as a remote parent span context, so every RPC of
//! the execution (the test's client spans and, through propagation, everything they cause) lands in that
//! trace. The source reads `GET /api/v1/traces/{trace_id}` (collector-plugin/API.md) and turns the trace's
//! occurrences into an [`Observation`]. Spans arrive asynchronously, so [`settle`](SpanSource::settle) polls
//! until the trace is complete (every preliminary index resolved, every client span seen) and has not
//! changed for a quiet period, bounded by a timeout; a timeout is not a quiet success but
//! [`Settled::TimedOut`], which the search records on the execution and counts in its report.
//!
//! The trace view carries what the in-memory source reads from the spans themselves, so both give the same
//! observation of an execution:
//! - `index`, `signature`, `payload`, `stack_digest` → the RPC's index and invocation signature (reference
//!   indexes under coarser instantiations);
//! - `fault` (a stream's own; a message's is on the message), `client_status` (gRPC / HTTP status code, OTLP
//!   status) → the injected fault and the outcome, by the same rules as the in-memory source;
//! - `client_time` → start and end;
//! - a stream's `messages` (its `dei.stream.message` events: position, preliminary and final index, fault,
//!   time) → the messages, as RPCs under the stream at their final indexes, targeted by default
//!   ([`MessageTargeting`]); their own occurrences (marked `stream`) are not counted twice;
//! - the parent RPC is the occurrence at the index's parent (the collector nests by index prefix, so this
//!   needs an instantiation with the path component, as `dei` and `filibuster` have); RPCs served under a
//!   message are already rewritten to final form by the collector and marked `rewritten`.

use crate::observation::{Observation, ObservedRpc, Outcome, StreamMapping};
use crate::source::{ExecutionKey, MessageTargeting, Settled, SourceError, SpanSource};
use dei_propagator::semconv::{self, AttributeError, AttributeValue, DeiSpan};
use dei_propagator::{Fault, Index, InvocationSignature, Signature};
use futures::future::BoxFuture;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How [`CollectorSpans::settle`](SpanSource::settle) waits for an execution's spans.
#[derive(Clone, Debug)]
pub struct SettleConfig {
    /// The trace must stay unchanged (and complete) this long.
    pub quiet: Duration,
    /// Time between two reads of the trace.
    pub poll: Duration,
    /// Give up waiting after this long, use what arrived, and record on the execution that it timed out.
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
    messages: MessageTargeting,
    /// Set on one execution's source in a parallel search: its trace, which `begin` keeps.
    execution: Option<ExecutionKey>,
}

impl std::fmt::Debug for CollectorSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorSpans")
            .field("api", &self.api)
            .field("settle", &self.settle)
            .field("messages", &self.messages)
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
            messages: MessageTargeting::default(),
            execution: None,
        }
    }

    /// Whether the search fails single stream messages ([`MessageTargeting::Targeted`], the default) or only
    /// whole streams ([`MessageTargeting::Observed`]).
    pub fn with_message_targeting(mut self, messages: MessageTargeting) -> Self {
        self.messages = messages;
        self
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
    /// Starts a new trace for the execution (a parallel execution's source keeps its key's trace).
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        let ids = RandomIdGenerator::default();
        let cx = match &self.execution {
            Some(key) => key.span_context(),
            None => SpanContext::new(
                ids.new_trace_id(),
                ids.new_span_id(),
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            ),
        };
        *self.trace.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx);
        Box::pin(async { Ok(()) })
    }

    /// A source of its own for the execution, reading the execution's trace (the collector keeps traces
    /// apart: nothing is shared between executions but the HTTP client).
    fn execution(&self, key: &ExecutionKey) -> Option<Arc<dyn SpanSource>> {
        Some(Arc::new(CollectorSpans {
            trace: Arc::new(Mutex::new(Some(key.span_context()))),
            execution: Some(*key),
            ..self.clone()
        }))
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
                .map(|v| observation_from_trace_with(&v, self.messages))
                .unwrap_or_default())
        })
    }

    /// Polls the trace until it is complete (no span waiting for a stream mapping, every RPC's client span
    /// seen) and unchanged for the quiet period. When the timeout passes first, it warns and returns
    /// [`Settled::TimedOut`] saying what was missing: no span of the trace at all (an execution that issued
    /// no RPC, or whose spans never reach the collector), spans waiting for a stream mapping, RPCs whose
    /// client span never arrived, or a trace still changing.
    fn settle(&self) -> BoxFuture<'_, Result<Settled, SourceError>> {
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
                                return Ok(Settled::Complete);
                            }
                        }
                        _ => last = Some((print, now)),
                    }
                }
                if now.duration_since(started) >= self.settle.timeout {
                    let trace = self.trace_id().map(|t| t.to_string()).unwrap_or_default();
                    let what = match &last {
                        None => format!(
                            "no span of trace {trace} reached the collector at {} in {:?} (the execution \
                             issued no RPC, or its services do not export to this collector)",
                            self.api, self.settle.timeout
                        ),
                        Some((p, _)) if !p.complete => format!(
                            "trace {trace} did not settle in {:?}: {} span(s) wait for a stream mapping, \
                             {} of {} RPC(s) have no client span",
                            self.settle.timeout,
                            p.pending,
                            p.nodes - p.client_seen,
                            p.nodes
                        ),
                        Some(_) => format!(
                            "trace {trace} was still changing after {:?} (spans kept arriving)",
                            self.settle.timeout
                        ),
                    };
                    tracing::warn!("dei-sfit: {what}; using what arrived");
                    return Ok(Settled::TimedOut(what));
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
    nodes: usize,
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
            nodes: all.len(),
            pending: v.pending_preliminary,
            client_seen,
            server_seen: all.iter().filter(|n| n.server_time.is_some()).count(),
            complete: v.pending_preliminary == 0 && client_seen == all.len(),
        }
    }
}

/// `GET /api/v1/traces/{trace_id}` (collector-plugin/API.md, "The trace view").
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TraceView {
    /// Occurrences in the trace.
    pub rpcs: usize,
    /// Spans waiting for a stream mapping.
    pub pending_preliminary: usize,
    /// The occurrences, nested by index prefix.
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
    /// `dei.payload.digest`, hex.
    #[serde(default)]
    pub payload: Option<String>,
    /// The start of the request's payload, when the caller recorded it (`dei.payload`, opt-in).
    #[serde(default)]
    pub payload_preview: Option<String>,
    /// `dei.stack.digest` of the client span, hex.
    #[serde(default)]
    pub stack_digest: Option<String>,
    /// A stream's own occurrence.
    #[serde(default)]
    pub preliminary: bool,
    /// Client span start and end, Unix ns.
    #[serde(default)]
    pub client_time: Option<(u64, u64)>,
    /// Server span start and end, Unix ns.
    #[serde(default)]
    pub server_time: Option<(u64, u64)>,
    /// The client span's status.
    #[serde(default)]
    pub client_status: Option<StatusView>,
    /// Either span had status error.
    #[serde(default)]
    pub error: bool,
    /// The injected fault, wire form (on a stream: the stream's own, not one of its messages').
    #[serde(default)]
    pub fault: Option<String>,
    /// On a stream: the messages its client sent.
    #[serde(default)]
    pub messages: Vec<MessageView>,
    /// On a message: the stream it was sent on.
    #[serde(default)]
    pub stream: Option<MessageOfView>,
    /// Occurrences one index level down.
    #[serde(default)]
    pub children: Vec<TraceNode>,
}

/// A span's status in the trace view.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct StatusView {
    /// `unset`, `ok` or `error`.
    pub code: String,
    /// The status message.
    pub message: Option<String>,
    /// `rpc.grpc.status_code`.
    pub grpc_status_code: Option<i64>,
    /// `http.response.status_code`.
    pub http_status_code: Option<i64>,
}

/// One message a stream's client sent.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct MessageView {
    /// Its 1-based position.
    #[serde(default)]
    pub k: Option<u32>,
    /// The preliminary index the callee served it under.
    pub preliminary_index: String,
    /// Its final index.
    pub index: String,
    /// The fault injected on it.
    #[serde(default)]
    pub fault: Option<String>,
    /// When it was sent, Unix ns.
    #[serde(default)]
    pub time_unix_nano: u64,
}

/// The stream a message occurrence was sent on.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessageOfView {
    /// The stream's index.
    pub index: String,
    /// The message's position.
    pub k: Option<u32>,
}

fn flatten<'a>(nodes: &'a [TraceNode], out: &mut Vec<&'a TraceNode>) {
    for n in nodes {
        out.push(n);
        flatten(&n.children, out);
    }
}

/// The caller's view of how an RPC ended, by the same rules as the in-memory source: the injected fault,
/// else the gRPC status code, else an HTTP status of 400 or more, else an error status.
fn outcome_of(n: &TraceNode, fault: Option<Fault>) -> Outcome {
    if let Some(f) = fault {
        return Outcome::of_fault(f);
    }
    let Some(status) = &n.client_status else {
        return match (n.error, n.client_time) {
            (true, _) => Outcome::Err { code: "error".into() },
            (false, Some(_)) => Outcome::ok(),
            (false, None) => Outcome::Unknown,
        };
    };
    if let Some(code) = status.grpc_status_code.filter(|c| *c != 0) {
        return Outcome::Err {
            code: format!("g{code}"),
        };
    }
    if let Some(code) = status.http_status_code.filter(|c| *c >= 400) {
        return Outcome::Err {
            code: format!("h{code}"),
        };
    }
    if status.code == "error" {
        return Outcome::Err {
            code: format!("error: {}", status.message.as_deref().unwrap_or_default()),
        };
    }
    Outcome::ok()
}

/// Builds an execution's observation from a trace view, as [`observation_from_spans`] builds it from the
/// spans themselves: the RPC occurrences (messages excluded) with their invocation components, faults and
/// outcomes, then each stream's messages (from the stream's `messages`) as RPCs under the stream at their
/// final indexes, with their own faults, targeted as `messages` says. The occurrences' DEI values are read by
/// the span contract's parser ([`DeiSpan`]); a malformed one is left out (an occurrence whose index is
/// malformed is skipped), logged and counted in [`Observation::malformed`], and so is a message with a malformed
/// index or fault.
///
/// [`observation_from_spans`]: crate::source::observation_from_spans
pub fn observation_from_trace_with(view: &TraceView, messages_targeting: MessageTargeting) -> Observation {
    let mut nodes = Vec::new();
    flatten(&view.tree, &mut nodes);
    // (stream rpc id, final index) of every message listed on a stream
    let listed: HashSet<(&str, &str)> = nodes
        .iter()
        .flat_map(|n| n.messages.iter().map(move |m| (n.rpc.as_str(), m.index.as_str())))
        .collect();
    let mut malformed = 0;
    // each occurrence's DEI data, read by the span contract's parser from the values the collector sends
    let rpcs: Vec<(&TraceNode, DeiSpan, Index)> = nodes
        .into_iter()
        .filter(|n| n.stream.is_none() && !listed.contains(&(n.rpc.as_str(), n.index.as_str())))
        .filter_map(|n| {
            let mut rejected = Vec::new();
            let dei = contract_values(n, |e| rejected.push(e));
            if !rejected.is_empty() {
                malformed += 1;
                tracing::warn!(rpc = %n.rpc, "dei-sfit: malformed dei values left out: {rejected:?}");
            }
            dei.index.clone().map(|index| (n, dei, index))
        })
        .collect();
    let mut obs = Observation::default();
    // (position of the stream, message) for each decodable message
    let mut messages: Vec<(usize, &MessageView, Index)> = Vec::new();
    for (p, (n, _, _)) in rpcs.iter().enumerate() {
        for m in &n.messages {
            let (Ok(pre), Ok(fin)) = (Index::decode(&m.preliminary_index), Index::decode(&m.index)) else {
                malformed += 1;
                tracing::warn!(rpc = %n.rpc, "dei-sfit: stream message with a malformed index skipped");
                continue;
            };
            obs.streams.push(StreamMapping {
                preliminary: pre,
                final_index: fin.clone(),
            });
            messages.push((p, m, fin));
        }
    }
    let times = |n: &TraceNode| n.client_time.or(n.server_time);
    // every RPC's index and times, the occurrences first, then the messages (as the in-memory source)
    let mut entries: Vec<(&Index, Option<(u64, u64)>)> = rpcs.iter().map(|(n, _, i)| (i, times(n))).collect();
    entries.extend(
        messages
            .iter()
            .map(|(_, m, i)| (i, Some((m.time_unix_nano, m.time_unix_nano)))),
    );
    let mut by_index: HashMap<&Index, Vec<usize>> = HashMap::new();
    for (p, (i, _)) in entries.iter().enumerate() {
        by_index.entry(i).or_default().push(p);
    }
    let message_indexes: Vec<&Index> = messages.iter().map(|(_, _, i)| i).collect();
    for (n, dei, index) in &rpcs {
        let (start, end) = times(n).unwrap_or((0, u64::MAX));
        let parent = index.parent().and_then(|pi| {
            let candidates = by_index.get(&pi)?;
            // with several RPCs under the parent index, the one running when this one started
            candidates
                .iter()
                .copied()
                .find(|&c| entries[c].1.is_some_and(|(s, e)| s <= start && start <= e))
                .or_else(|| candidates.first().copied())
        });
        let fault = dei.fault;
        let invocation = match (dei.payload_digest, dei.stack_digest, dei.signature) {
            (Some(p), Some(s), Some(sig)) => Some(InvocationSignature::new(Signature::from_name(sig), p, s)),
            _ => None,
        };
        obs.rpcs.push(ObservedRpc {
            index: index.clone(),
            signature: n.signature.clone().unwrap_or_default(),
            invocation,
            parent,
            fault,
            outcome: outcome_of(n, fault),
            start,
            end,
            // served under a message: it ran under the message's preliminary index, which the collector
            // rewrote to the final one
            rewritten: message_indexes
                .iter()
                .any(|m| m.depth() < index.depth() && index.starts_with(m)),
            injectable: true,
            reference: None,
            message: None,
            // the collector keeps a preview as short as this crate's, when the caller recorded the payload
            payload_preview: n.payload_preview.as_deref().map(crate::observation::payload_preview),
        });
    }
    for (stream, m, index) in messages {
        let fault = match m.fault.as_deref().map(|f| f.parse::<Fault>()) {
            Some(Err(())) => {
                malformed += 1;
                tracing::warn!("dei-sfit: stream message with a malformed fault {:?}", m.fault);
                None
            }
            Some(Ok(f)) => Some(f),
            None => None,
        };
        obs.rpcs.push(ObservedRpc {
            index,
            signature: rpcs[stream].0.signature.clone().unwrap_or_default(),
            invocation: None,
            parent: Some(stream),
            fault,
            outcome: fault.map_or_else(Outcome::ok, Outcome::of_fault),
            start: m.time_unix_nano,
            end: m.time_unix_nano,
            rewritten: false,
            injectable: messages_targeting == MessageTargeting::Targeted,
            reference: None,
            message: m.k,
            payload_preview: None,
        });
    }
    obs.malformed = malformed;
    obs
}

/// An occurrence's DEI values (index, signature, digests, fault) as the span contract reads them.
fn contract_values(n: &TraceNode, rejected: impl FnMut(AttributeError)) -> DeiSpan<'_> {
    let fields = [
        (semconv::INDEX, Some(n.index.as_str())),
        (semconv::SIGNATURE, n.signature.as_deref()),
        (semconv::PAYLOAD_DIGEST, n.payload.as_deref()),
        (semconv::STACK_DIGEST, n.stack_digest.as_deref()),
        (semconv::FAULT, n.fault.as_deref()),
    ];
    DeiSpan::parse_lenient(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k, AttributeValue::Str(v?)))),
        rejected,
    )
}

/// [`observation_from_trace_with`], stream messages targeted.
pub fn observation_from_trace(view: &TraceView) -> Observation {
    observation_from_trace_with(view, MessageTargeting::default())
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

    fn status(grpc: Option<i64>) -> StatusView {
        StatusView {
            code: if grpc.is_some_and(|c| c != 0) { "error" } else { "unset" }.into(),
            message: None,
            grpc_status_code: grpc,
            http_status_code: None,
        }
    }

    fn node(index: &Index, rpc: &str, time: (u64, u64), children: Vec<TraceNode>) -> TraceNode {
        TraceNode {
            index: index.encode(),
            rpc: rpc.into(),
            signature: Some(format!("sig{}", index.depth())),
            payload: Some("ab".repeat(32)),
            stack_digest: Some("cd".repeat(32)),
            client_time: Some(time),
            server_time: Some(time),
            client_status: Some(status(Some(0))),
            children,
            ..TraceNode::default()
        }
    }

    #[test]
    fn occurrences_become_rpcs_with_parents_faults_and_streams() {
        let a = idx(&[(1, 1)]);
        let b = idx(&[(1, 1), (2, 1)]);
        let pre = a.child(Element::new(ElementDigest([3; 8]), 1).preliminary());
        let hello = idx(&[(1, 1), (4, 1)]);
        let world = idx(&[(1, 1), (7, 1)]);
        let under_hello = idx(&[(1, 1), (4, 1), (5, 1)]);
        let mut fb = node(&b, "bb", (20, 30), vec![]);
        fb.fault = Some("g14".into());
        fb.error = true;
        let mut unknown = node(&idx(&[(1, 1), (6, 1)]), "ee", (50, 60), vec![]);
        unknown.client_time = None;
        unknown.client_status = None;
        let bad = TraceNode {
            index: "not an index".into(),
            ..TraceNode::default()
        };
        // the stream: World was sent first and failed (the stream ended there, with UNAVAILABLE); Hello was
        // sent before it and served, and B's call for it was rewritten under Hello's final index
        let mut stream = node(&pre, "ss", (31, 40), vec![]);
        stream.preliminary = true;
        stream.error = true;
        stream.client_status = Some(status(Some(14)));
        stream.messages = vec![
            MessageView {
                k: Some(1),
                preliminary_index: pre.stream_message(1).encode(),
                index: hello.encode(),
                fault: None,
                time_unix_nano: 32,
            },
            MessageView {
                k: Some(2),
                preliminary_index: pre.stream_message(2).encode(),
                index: world.encode(),
                fault: Some("c".into()),
                time_unix_nano: 34,
            },
        ];
        let mut hello_node = node(&hello, "ss", (31, 40), vec![node(&under_hello, "uu", (33, 35), vec![])]);
        hello_node.stream = Some(MessageOfView {
            index: pre.encode(),
            k: Some(1),
        });
        let mut world_node = node(&world, "ss", (31, 40), vec![]);
        world_node.fault = Some("c".into());
        world_node.stream = Some(MessageOfView {
            index: pre.encode(),
            k: Some(2),
        });
        let view = TraceView {
            rpcs: 8,
            pending_preliminary: 0,
            tree: vec![node(
                &a,
                "aa",
                (10, 100),
                vec![fb, stream, hello_node, world_node, unknown, bad],
            )],
        };
        let obs = observation_from_trace(&view);
        assert_eq!(obs.rpcs.len(), 7, "{:#?}", obs.rpcs);
        assert_eq!(obs.malformed, 1, "the occurrence whose index does not decode");
        let pos = |i: &Index| obs.rpcs.iter().position(|r| &r.index == i).expect("rpc");
        let (pa, pb, ps, ph, pw, pu) = (pos(&a), pos(&b), pos(&pre), pos(&hello), pos(&world), pos(&under_hello));
        assert_eq!(obs.rpcs[pa].parent, None);
        assert!(
            obs.rpcs[pa].invocation.is_some(),
            "payload and stack digests make the invocation"
        );
        assert_eq!(obs.rpcs[pb].parent, Some(pa));
        assert_eq!(obs.rpcs[pb].fault, Some(Fault::UNAVAILABLE));
        assert_eq!(obs.rpcs[pb].outcome, Outcome::Err { code: "g14".into() });
        // the message's fault is the message's; the stream ended with the status it caused
        assert_eq!(obs.rpcs[pw].fault, Some(Fault::Connection));
        assert_eq!(obs.rpcs[ps].fault, None);
        assert_eq!(obs.rpcs[ps].outcome, Outcome::Err { code: "g14".into() });
        assert_eq!(obs.effective().len(), 2);
        assert!(obs.rpcs[ps].targetable() && obs.rpcs[ps].index.is_preliminary());
        for p in [ph, pw] {
            assert_eq!(obs.rpcs[p].parent, Some(ps), "a message hangs under its stream");
            assert!(obs.rpcs[p].targetable(), "messages are targeted by default");
            assert_eq!(obs.rpcs[p].start, obs.rpcs[p].end, "sent at its event's time");
        }
        assert_eq!(obs.rpcs[ph].outcome, Outcome::ok());
        assert_eq!(obs.rpcs[pu].parent, Some(ph));
        assert!(
            obs.rpcs[pu].rewritten && !obs.rpcs[pu].targetable(),
            "served under a message: ran under the preliminary index"
        );
        assert_eq!(obs.streams.len(), 2);
        let e = obs
            .rpcs
            .iter()
            .find(|r| r.index.depth() == 2 && r.start == 50)
            .expect("e");
        assert_eq!(e.outcome, Outcome::Unknown);
        assert!(!Fingerprint::of(&view).complete, "a client span is missing");
        let observed = observation_from_trace_with(&view, MessageTargeting::Observed);
        assert!(observed.rpcs.iter().filter(|r| !r.targetable()).count() == 3);
    }

    #[test]
    fn the_collectors_json_decodes() {
        let a = idx(&[(1, 1)]);
        let json = format!(
            r#"{{"trace_id":"0102030405060708090a0b0c0d0e0f10","start_unix_nano":5,"rpcs":1,"pending_preliminary":0,
            "tree":[{{"index":"{}","rpc":"0102030405060708","caller_span":null,"signature":"GET /x","payload":null,
            "payload_preview":"{{\"user\":\"ann\"}}","stack_digest":null,"preliminary":false,"client_status":{{"code":"error","message":"Service Unavailable",
            "grpc_status_code":null,"http_status_code":503}},"server_status":null,
            "client_service":"t","server_service":"s","client_time":[5,9],"server_time":null,"error":true,
            "fault":null,"ambiguous":false,"messages":[],"stream":null,"children":[]}}]}}"#,
            a.encode()
        );
        let view: TraceView = serde_json::from_str(&json).expect("decodes");
        let obs = observation_from_trace(&view);
        assert_eq!(obs.rpcs.len(), 1);
        assert_eq!(obs.rpcs[0].fault, None);
        assert_eq!(obs.rpcs[0].outcome, Outcome::Err { code: "h503".into() });
        assert_eq!((obs.rpcs[0].start, obs.rpcs[0].end), (5, 9));
        assert_eq!(obs.rpcs[0].payload_preview.as_deref(), Some(r#"{"user":"ann"}"#));
        assert!(Fingerprint::of(&view).complete);
        assert!(serde_json::from_str::<TraceView>(r#"{"tree":[{"rpc":"x"}]}"#).is_err());
    }
}
