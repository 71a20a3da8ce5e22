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
//! The trace view is read with the collector's own view types ([`dei_collector::views`], the types the API
//! serializes, built without the server: `dei-collector = { default-features = false }`), so a field the API
//! renames or drops fails to parse instead of becoming a default. It carries what the in-memory source reads
//! from the spans themselves, so both give the same observation of an execution:
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
//!
//! What the collector could not record of the trace is not passed over either: the spans whose DEI data it
//! skipped for a malformed `dei.*` attribute (`spans_dei_skipped`) count as malformed spans on the execution
//! ([`Observation::malformed`]), as the in-memory source counts the ones it reads; and the spans and stream
//! message events it dropped past its cap of RPCs per trace (`occurrences_dropped`) are counted on the observation
//! ([`Observation::spans_dropped`]), which the search reports as an *incomplete* execution
//! ([`ExecutionRecord::incomplete`](crate::ExecutionRecord::incomplete)): its RPCs and faults are missing.
//! [`settle`](SpanSource::settle) does not wait for the dropped spans (waiting would not bring them back): such
//! a trace settles once nothing else is missing and it is quiet, and is unsettled as well only when something
//! else (a stream mapping, a client span) was still missing at the timeout.

use crate::observation::{Observation, ObservedRpc, Outcome, StreamMapping};
use crate::source::{ExecutionKey, MessageTargeting, Settled, SourceError, SpanSource};
pub use dei_collector::views::TraceView;
use dei_collector::views::{Occurrence, StatusCode, TraceNode};
use dei_propagator::semconv::payload_preview;
use dei_propagator::{Fault, Index, InvocationSignature, Signature};
use futures::future::BoxFuture;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
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
    /// client span never arrived, or a trace still changing. Spans and stream message events the collector
    /// dropped past its cap of RPCs per trace (`occurrences_dropped`) are not waited for (they will never be
    /// recorded): they are on the observation [`collect`](SpanSource::collect) returns
    /// ([`Observation::spans_dropped`]), which the search reports as an incomplete execution. Such a trace
    /// settles as any other, once nothing else is missing and it is quiet; when something else is still
    /// missing at the timeout, it is [`Settled::TimedOut`] too, and the execution both unsettled and
    /// incomplete.
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
                            let quiet = now.duration_since(*since) >= self.settle.quiet;
                            // `complete` does not count the spans the collector dropped past its cap (they
                            // will never be recorded; the observation counts them): a trace with dropped
                            // spans still waits for what else is missing, until the timeout
                            if quiet && print.complete {
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
    /// Spans the collector dropped past its cap of RPCs per trace.
    dropped: u64,
    /// Spans whose DEI data the collector skipped.
    skipped: u64,
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
            dropped: v.occurrences_dropped,
            skipped: v.spans_dei_skipped,
            complete: v.pending_preliminary == 0 && client_seen == all.len(),
        }
    }
}

/// Every occurrence of the tree, parents before their children.
fn flatten<'a>(nodes: &'a [TraceNode], out: &mut Vec<&'a Occurrence>) {
    for n in nodes {
        out.push(&n.occurrence);
        flatten(&n.children, out);
    }
}

/// The caller's view of how an RPC ended, by the same rules as the in-memory source: the injected fault,
/// else the gRPC status code, else an HTTP status of 400 or more, else an error status.
fn outcome_of(n: &Occurrence, fault: Option<Fault>) -> Outcome {
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
    if status.code == StatusCode::Error {
        return Outcome::Err {
            code: format!("error: {}", status.message.as_deref().unwrap_or_default()),
        };
    }
    Outcome::ok()
}

/// A fault in wire form (`dei.fault`) as the view carries it; a malformed one is logged, counted in
/// `malformed` and left out.
fn fault_of(value: Option<&str>, rpc: &[u8; 8], malformed: &mut usize) -> Option<Fault> {
    let value = value?;
    match value.parse::<Fault>() {
        Ok(f) => Some(f),
        Err(()) => {
            *malformed += 1;
            let rpc: String = rpc.iter().map(|b| format!("{b:02x}")).collect();
            tracing::warn!(%rpc, "dei-sfit: malformed fault {value:?} in the collector's trace view left out");
            None
        }
    }
}

/// Builds an execution's observation from a trace view, as [`observation_from_spans`] builds it from the
/// spans themselves: the RPC occurrences (messages excluded) with their invocation components, faults and
/// outcomes, then each stream's messages (from the stream's `messages`) as RPCs under the stream at their
/// final indexes, with their own faults, targeted as `messages` says. A malformed fault is left out, logged
/// and counted in [`Observation::malformed`] (the view's indexes and digests are typed: a malformed one fails
/// to parse with the view), and so is every span whose DEI data the collector skipped as malformed (the
/// view's `spans_dei_skipped`). The spans and stream message events the collector dropped past its cap of RPCs
/// per trace (`occurrences_dropped`) are in [`Observation::spans_dropped`]: their RPCs and faults are missing. Both are
/// logged too.
///
/// [`observation_from_spans`]: crate::source::observation_from_spans
pub fn observation_from_trace_with(view: &TraceView, messages_targeting: MessageTargeting) -> Observation {
    let mut nodes = Vec::new();
    flatten(&view.tree, &mut nodes);
    // (stream rpc id, final index) of every message listed on a stream
    let listed: HashSet<([u8; 8], &Index)> = nodes
        .iter()
        .flat_map(|n| n.messages.iter().map(move |m| (n.rpc, &m.index)))
        .collect();
    let rpcs: Vec<&Occurrence> = nodes
        .into_iter()
        .filter(|n| n.stream.is_none() && !listed.contains(&(n.rpc, &n.index)))
        .collect();
    let mut malformed = 0;
    let mut obs = Observation::default();
    // (position of the stream, message) for each message
    let messages: Vec<(usize, &dei_collector::views::StreamMessage)> = rpcs
        .iter()
        .enumerate()
        .flat_map(|(p, n)| n.messages.iter().map(move |m| (p, m)))
        .collect();
    obs.streams = messages
        .iter()
        .map(|(_, m)| StreamMapping {
            preliminary: m.preliminary_index.clone(),
            final_index: m.index.clone(),
        })
        .collect();
    let times = |n: &Occurrence| n.client_time.or(n.server_time);
    // every RPC's index and times, the occurrences first, then the messages (as the in-memory source)
    let mut entries: Vec<(&Index, Option<(u64, u64)>)> = rpcs.iter().map(|n| (&n.index, times(n))).collect();
    entries.extend(
        messages
            .iter()
            .map(|(_, m)| (&m.index, Some((m.time_unix_nano, m.time_unix_nano)))),
    );
    let mut by_index: HashMap<&Index, Vec<usize>> = HashMap::new();
    for (p, (i, _)) in entries.iter().enumerate() {
        by_index.entry(i).or_default().push(p);
    }
    for n in &rpcs {
        let index = &n.index;
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
        let fault = fault_of(n.fault.as_deref(), &n.rpc, &mut malformed);
        let invocation = match (n.payload, n.stack_digest.as_deref(), n.signature.as_deref()) {
            (Some(p), Some(s), Some(sig)) => Some(InvocationSignature::new(Signature::from_name(sig), p, *s)),
            _ => None,
        };
        obs.rpcs.push(ObservedRpc {
            index: index.clone(),
            signature: n.signature.as_deref().unwrap_or_default().to_string(),
            invocation,
            parent,
            fault,
            outcome: outcome_of(n, fault),
            start,
            end,
            // served under a message: it ran under the message's preliminary index, which the collector
            // rewrote to the final one
            rewritten: messages
                .iter()
                .any(|(_, m)| m.index.depth() < index.depth() && index.starts_with(&m.index)),
            injectable: true,
            reference: None,
            message: None,
            // the collector keeps a preview as short as this crate's, when the caller recorded the payload
            payload_preview: n.payload_preview.as_deref().map(payload_preview),
        });
    }
    for (stream, m) in messages {
        let fault = fault_of(m.fault.as_deref(), &rpcs[stream].rpc, &mut malformed);
        obs.rpcs.push(ObservedRpc {
            index: m.index.clone(),
            signature: rpcs[stream].signature.as_deref().unwrap_or_default().to_string(),
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
    if view.spans_dei_skipped > 0 {
        tracing::warn!(
            trace = %view.trace_id,
            "dei-sfit: the collector skipped the DEI data of {} span(s) of the trace for malformed dei.* \
             attributes: their RPCs or faults are missing",
            view.spans_dei_skipped
        );
    }
    if view.occurrences_dropped > 0 {
        tracing::warn!(
            trace = %view.trace_id,
            "dei-sfit: the collector dropped {} span(s) or stream message event(s) of the trace past its cap of \
             RPCs per trace: their RPCs are missing",
            view.occurrences_dropped
        );
    }
    let skipped = usize::try_from(view.spans_dei_skipped).unwrap_or(usize::MAX);
    obs.malformed = malformed.saturating_add(skipped);
    obs.spans_dropped = view.occurrences_dropped;
    if !obs.rpcs.is_empty() || view.spans_dei_skipped > 0 || view.occurrences_dropped > 0 {
        obs.traces.insert(view.trace_id.clone());
    }
    obs
}

/// [`observation_from_trace_with`], stream messages targeted.
pub fn observation_from_trace(view: &TraceView) -> Observation {
    observation_from_trace_with(view, MessageTargeting::default())
}

#[cfg(test)]
mod tests;
