//! Span sources: where the search learns which RPCs an execution issued.
//!
//! - [`InMemorySpans`] reads the OpenTelemetry SDK's in-memory exporter, for services that run in the test's
//!   own process (the corpus under `examples/`).
//! - [`Recorder`] is filled directly by simulated programs ([`crate::model`]).
//!
//! - [`CollectorSpans`](collector::CollectorSpans) reads `dei-collector`'s HTTP API, for services in other
//!   processes that export their spans over OTLP.

use crate::observation::{Observation, ObservedRpc, Outcome, StreamMapping};
use dei_propagator::semconv::{AttributeValue, DeiSpan, StreamMessage, payload_preview};
use dei_propagator::{Fault, Index, InvocationSignature, Signature};
use futures::future::BoxFuture;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    IdGenerator as _, InMemorySpanExporter, RandomIdGenerator, SdkTracerProvider, SpanData, SpanProcessor,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod collector;

/// Span attribute and event names written by `dei-instrumentation`: the span contract's
/// ([`dei_propagator::semconv`], which defines each key's type and meaning), and the OpenTelemetry status
/// attributes the sources read.
pub mod attr {
    pub use dei_propagator::semconv::{
        FAULT, INDEX, MESSAGE, PAYLOAD, PAYLOAD_DIGEST, PRELIMINARY, PRELIMINARY_INDEX, SIGNATURE, STACK_DIGEST,
        STREAM_MESSAGE_EVENT,
    };
    /// The gRPC status code of a client call (OpenTelemetry semantic convention).
    pub const GRPC_STATUS: &str = "rpc.grpc.status_code";
    /// The HTTP status of a client call (OpenTelemetry semantic convention).
    pub const HTTP_STATUS: &str = "http.response.status_code";
}

/// Why a source could not deliver an execution's spans.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The exporter or collector failed.
    #[error("span source failed: {0}")]
    Backend(String),
}

/// Where the search reads each execution's RPCs from.
pub trait SpanSource: Send + Sync {
    /// Forget everything seen so far: an execution is about to start.
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>>;
    /// Everything seen since [`begin`](SpanSource::begin): the RPCs that completed so far and their streams.
    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>>;
    /// Waits until the execution's spans have arrived (called once the functional test returned, before the
    /// final [`collect`](SpanSource::collect)). A wait that gives up returns [`Settled::TimedOut`] saying what
    /// was still missing: the search records it on the execution and counts it in the report, since the
    /// observation may then lack RPCs or injected faults. The default returns [`Settled::Complete`] at once.
    fn settle(&self) -> BoxFuture<'_, Result<Settled, SourceError>> {
        Box::pin(async { Ok(Settled::Complete) })
    }
    /// The context the execution's requests run under, given the one the search built (index scope and
    /// fault plan). A source that finds the execution by its trace adds the trace's parent span context
    /// here. The default returns `cx` unchanged.
    fn execution_context(&self, cx: opentelemetry::Context) -> opentelemetry::Context {
        cx
    }
    /// A source for one of several executions that run at once (a parallel search,
    /// [`SearchOptions::parallelism`](crate::SearchOptions::parallelism)): it sees only the spans of the
    /// execution `key` names, which runs under `key`'s trace ([`execution_context`](SpanSource::execution_context)
    /// of the returned source adds it). Dropping it forgets the execution. `None` (the default): this source
    /// cannot tell concurrent executions apart, and the search runs one execution at a time.
    fn execution(&self, key: &ExecutionKey) -> Option<Arc<dyn SpanSource>> {
        let _ = key;
        None
    }
    /// Why [`execution`](SpanSource::execution) returns `None`, for the report's note.
    fn why_not_parallel(&self) -> String {
        "the span source cannot attribute spans to concurrent executions (SpanSource::execution)".to_string()
    }
    /// How many spans (or RPCs) this source saw end outside every execution's trace so far, a monotonic
    /// count: a parallel search reads it before and after and warns about the difference (such spans are
    /// seen by no execution). `None` (the default): the source cannot count them, and a parallel search's
    /// report says so in its warnings.
    fn unattributed(&self) -> Option<u64> {
        None
    }
}

/// One execution of a parallel search: its number (in the order executions were started) and the trace its
/// requests run under, by which span sources attribute spans to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecutionKey {
    /// The execution's number when it was started.
    pub number: usize,
    /// Its trace.
    pub trace_id: TraceId,
    /// The (remote, never exported) span its requests run under.
    pub span_id: SpanId,
}

impl ExecutionKey {
    /// A key with a fresh random trace for execution `number`.
    pub fn new(number: usize) -> Self {
        let ids = RandomIdGenerator::default();
        ExecutionKey {
            number,
            trace_id: ids.new_trace_id(),
            span_id: ids.new_span_id(),
        }
    }

    /// The remote parent span context the execution's requests run under.
    pub fn span_context(&self) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.span_id,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }

    /// `cx` with the execution's trace as the remote parent.
    pub fn context(&self, cx: opentelemetry::Context) -> opentelemetry::Context {
        cx.with_remote_span_context(self.span_context())
    }
}

/// How a source's [`settle`](SpanSource::settle) step ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Every span the source waits for arrived. Spans that arrived but were not recorded where the source
    /// reads them ([`Observation::spans_dropped`]) are not waited for, since they never will be: they are on
    /// the observation, not here.
    Complete,
    /// The wait gave up: what was still missing. The execution's observation may lack RPCs or faults.
    TimedOut(String),
}

/// A monotonic nanosecond clock shared by every [`Recorder`] in the process.
fn next_tick() -> u64 {
    static CLOCK: AtomicU64 = AtomicU64::new(1);
    CLOCK.fetch_add(1, Ordering::Relaxed)
}

/// A source filled directly by simulated programs: each RPC is recorded when it starts and finished when it
/// ends. Cloning shares it.
///
/// In a parallel search each execution records into its own recorder ([`SpanSource::execution`]), which
/// [`Recorder::for_run`] finds from the execution's [`TestRun`](crate::TestRun) (the simulated programs'
/// [`Caller::root`](crate::model::Caller::root) does).
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<Observation>>,
    executions: Arc<Mutex<HashMap<TraceId, Recorder>>>,
    /// RPCs ever recorded here (not reset by `begin`).
    started: Arc<AtomicU64>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Recorder::default()
    }

    /// The recorder execution `run` records into: its own in a parallel search, this one otherwise.
    pub fn for_run(&self, run: &crate::TestRun) -> Recorder {
        run.execution_key()
            .and_then(|k| {
                self.executions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&k.trace_id)
                    .cloned()
            })
            .unwrap_or_else(|| self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Observation> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an RPC that starts now; returns its position for [`finish`](Recorder::finish).
    pub fn start(&self, index: Index, invocation: InvocationSignature, parent: Option<usize>) -> usize {
        self.started.fetch_add(1, Ordering::Relaxed);
        let mut obs = self.lock();
        obs.rpcs.push(ObservedRpc {
            index,
            signature: invocation.signature.name().to_string(),
            invocation: Some(invocation),
            parent,
            fault: None,
            outcome: Outcome::Unknown,
            start: next_tick(),
            end: u64::MAX,
            rewritten: false,
            injectable: true,
            reference: None,
            message: None,
            payload_preview: None,
        });
        obs.rpcs.len() - 1
    }

    /// Records how the RPC at `position` ended.
    pub fn finish(&self, position: usize, fault: Option<Fault>, outcome: Outcome) {
        let mut obs = self.lock();
        if let Some(rpc) = obs.rpcs.get_mut(position) {
            rpc.fault = fault;
            rpc.outcome = outcome;
            rpc.end = next_tick();
        }
    }

    /// Records the stream message number of the RPC at `position` (a message the callee served k-th).
    pub fn set_message(&self, position: usize, k: u32) {
        if let Some(rpc) = self.lock().rpcs.get_mut(position) {
            rpc.message = Some(k);
        }
    }

    /// Records a stream message's preliminary-to-final mapping.
    pub fn map_stream(&self, preliminary: Index, final_index: Index) {
        self.lock().streams.push(StreamMapping {
            preliminary,
            final_index,
        });
    }
}

impl SpanSource for Recorder {
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        *self.lock() = Observation::default();
        Box::pin(async { Ok(()) })
    }

    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>> {
        let obs = self.lock().clone();
        Box::pin(async move { Ok(obs) })
    }

    /// The RPCs recorded into this recorder itself rather than an execution's own: in a parallel search, RPCs
    /// of a test that records outside [`Recorder::for_run`].
    fn unattributed(&self) -> Option<u64> {
        Some(self.started.load(Ordering::Relaxed))
    }

    /// A recorder of its own for the execution, registered until the returned source is dropped.
    fn execution(&self, key: &ExecutionKey) -> Option<Arc<dyn SpanSource>> {
        let own = Recorder::new();
        self.executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.trace_id, own.clone());
        Some(Arc::new(RecorderExecution {
            registry: self.executions.clone(),
            key: *key,
            own,
        }))
    }
}

/// One execution's recorder in a parallel search; unregistered when dropped.
struct RecorderExecution {
    registry: Arc<Mutex<HashMap<TraceId, Recorder>>>,
    key: ExecutionKey,
    own: Recorder,
}

impl SpanSource for RecorderExecution {
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        self.own.begin()
    }

    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>> {
        self.own.collect()
    }
}

impl Drop for RecorderExecution {
    fn drop(&mut self) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key.trace_id);
    }
}

/// How long [`InMemorySpans`] waits for an execution's open spans to end.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Reads the spans of services running in this process from the SDK's [`InMemorySpanExporter`].
///
/// Use it with a simple (synchronous) span processor so that a span is exported when it ends; then an
/// execution's spans are complete when the functional test returns.
///
/// In a parallel search each execution reads the spans of its own trace ([`SpanSource::execution`]) from a
/// [`SpanRouter`], which must be a span processor of the tracer provider
/// ([`with_router`](InMemorySpans::with_router)). Without a router the search runs one execution at a time
/// and says why in the report's notes: read from the exporter, an execution's spans that are still open
/// cannot be seen, so there is no sound way to know that its spans have all arrived.
#[derive(Clone, Debug)]
pub struct InMemorySpans {
    exporter: InMemorySpanExporter,
    provider: Option<SdkTracerProvider>,
    messages: MessageTargeting,
    router: Option<SpanRouter>,
}

impl InMemorySpans {
    /// A source reading `exporter`.
    pub fn new(exporter: InMemorySpanExporter) -> Self {
        InMemorySpans {
            exporter,
            provider: None,
            messages: MessageTargeting::default(),
            router: None,
        }
    }

    /// Parallel executions read their spans from `router`, which must be a span processor of the tracer
    /// provider the services' spans go to (`SdkTracerProvider::builder().with_span_processor(router.clone())`).
    pub fn with_router(mut self, router: SpanRouter) -> Self {
        self.router = Some(router);
        self
    }

    /// The router parallel executions read from, if any.
    pub fn router(&self) -> Option<&SpanRouter> {
        self.router.as_ref()
    }

    /// Whether the search fails single stream messages by their final indexes ([`MessageTargeting::Targeted`],
    /// the default: `dei-instrumentation` checks the plan per message and records an injected fault as
    /// `dei.fault` on the message's `dei.stream.message` event) or only whole streams
    /// ([`MessageTargeting::Observed`]).
    pub fn with_message_targeting(mut self, messages: MessageTargeting) -> Self {
        self.messages = messages;
        self
    }

    /// Also flush `provider` before reading (needed with a batch processor).
    pub fn with_provider(mut self, provider: SdkTracerProvider) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The exporter.
    pub fn exporter(&self) -> &InMemorySpanExporter {
        &self.exporter
    }
}

/// The spans whose parent is not (yet) among the exported ones (nor `root`, an execution's remote parent):
/// while there are any, a span of the tree is still open.
fn orphans(spans: &[SpanData], root: SpanId) -> usize {
    let ids: std::collections::HashSet<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
    spans
        .iter()
        .filter(|s| s.parent_span_id != SpanId::INVALID && s.parent_span_id != root && !ids.contains(&s.parent_span_id))
        .count()
}

/// How a settle step knows that no span of the execution is still open.
enum Openness {
    /// Only by the spans themselves: a span whose parent is missing (the sequential source).
    Orphans,
    /// By the router's count of the trace's started spans that have not ended.
    Counted(Arc<dyn Fn() -> usize + Send + Sync>),
}

/// Polls `spans` (every millisecond, for at most `SETTLE_LIMIT`) until no span misses its parent, every RPC
/// served under a stream message has its final index, and no span is open as `open` tells.
///
/// With `arrivals` (a router's trace), it checks again only when a span arrives instead of every millisecond.
async fn settle_spans<F>(
    spans: F,
    messages: MessageTargeting,
    root: SpanId,
    arrivals: Option<Arc<tokio::sync::Notify>>,
    open: Openness,
) -> Result<Settled, SourceError>
where
    F: Fn() -> Result<Vec<SpanData>, SourceError>,
{
    let deadline = std::time::Instant::now() + SETTLE_LIMIT;
    loop {
        let spans = spans()?;
        let unresolved = || {
            let mut obs = observation_from_spans_with(&spans, messages);
            obs.finalize();
            obs.unresolved()
        };
        let now = std::time::Instant::now();
        let still_open = match &open {
            Openness::Orphans => 0,
            Openness::Counted(count) => count(),
        };
        if orphans(&spans, root) == 0 && unresolved() == 0 && still_open == 0 {
            return Ok(Settled::Complete);
        }
        if now >= deadline {
            let orphans = orphans(&spans, root);
            let unresolved = unresolved();
            let what = format!(
                "the in-memory spans did not settle in {SETTLE_LIMIT:?}: {orphans} span(s) still wait for \
                 their parent span to end, {unresolved} RPC(s) still have a preliminary (unresolved) index{}",
                match open {
                    Openness::Counted(_) => format!(", {still_open} span(s) of the trace are still open"),
                    Openness::Orphans => String::new(),
                }
            );
            tracing::warn!("dei-sfit: {what}; using what arrived");
            return Ok(Settled::TimedOut(what));
        }
        match &arrivals {
            Some(arrived) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let _ = tokio::time::timeout(left, arrived.notified()).await;
            }
            None => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
        }
    }
}

/// A span processor that hands each span, as it ends, to the parallel execution whose trace it belongs to
/// ([`InMemorySpans::with_router`]). Spans of no running execution are counted and dropped. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct SpanRouter {
    inner: Arc<RouterInner>,
}

#[derive(Debug, Default)]
struct RouterInner {
    traces: Mutex<HashMap<TraceId, RoutedTrace>>,
    ended: AtomicU64,
    unattributed: AtomicU64,
}

/// One registered trace: its spans so far, how many of its spans started and did not end yet, and a
/// notification for each span that starts or ends.
#[derive(Debug, Default)]
struct RoutedTrace {
    spans: Vec<SpanData>,
    open: usize,
    arrived: Arc<tokio::sync::Notify>,
}

impl SpanRouter {
    /// A router with no execution registered.
    pub fn new() -> Self {
        SpanRouter::default()
    }

    fn traces(&self) -> MutexGuard<'_, HashMap<TraceId, RoutedTrace>> {
        self.inner.traces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spans that ended since the router was made (whether an execution took them or not).
    pub fn ended(&self) -> u64 {
        self.inner.ended.load(Ordering::Relaxed)
    }

    /// Spans that ended in no registered trace (outside any parallel execution) and were dropped.
    pub fn unattributed(&self) -> u64 {
        self.inner.unattributed.load(Ordering::Relaxed)
    }

    fn register(&self, trace: TraceId) {
        self.traces().entry(trace).or_default();
    }

    fn unregister(&self, trace: TraceId) {
        self.traces().remove(&trace);
    }

    fn spans_of(&self, trace: TraceId) -> Vec<SpanData> {
        self.traces().get(&trace).map(|t| t.spans.clone()).unwrap_or_default()
    }

    /// Spans of `trace` that started and have not ended.
    fn open(&self, trace: TraceId) -> usize {
        self.traces().get(&trace).map_or(0, |t| t.open)
    }

    /// Notified (one permit kept) whenever a span of `trace` starts or ends.
    fn arrivals(&self, trace: TraceId) -> Option<Arc<tokio::sync::Notify>> {
        self.traces().get(&trace).map(|t| t.arrived.clone())
    }
}

impl SpanProcessor for SpanRouter {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {
        use opentelemetry::trace::Span as _;
        if let Some(trace) = self.traces().get_mut(&span.span_context().trace_id()) {
            trace.open += 1;
            trace.arrived.notify_one();
        }
    }

    fn on_end(&self, span: SpanData) {
        self.inner.ended.fetch_add(1, Ordering::Relaxed);
        match self.traces().get_mut(&span.span_context.trace_id()) {
            Some(trace) => {
                trace.open = trace.open.saturating_sub(1);
                trace.spans.push(span);
                trace.arrived.notify_one();
            }
            None => {
                self.inner.unattributed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// One execution of a parallel search over [`InMemorySpans`]: the spans of its trace.
struct InMemoryExecution {
    source: InMemorySpans,
    router: SpanRouter,
    key: ExecutionKey,
}

impl InMemoryExecution {
    fn spans(&self) -> Vec<SpanData> {
        self.router.spans_of(self.key.trace_id)
    }
}

impl SpanSource for InMemoryExecution {
    /// Clears the exporter as the sequential source does (nothing reads it in a parallel search, and it would
    /// otherwise hold every span of the search).
    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        self.source.exporter.reset();
        Box::pin(async { Ok(()) })
    }

    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>> {
        let spans = self.spans();
        let messages = self.source.messages;
        Box::pin(async move { Ok(observation_from_spans_with(&spans, messages)) })
    }

    /// Waits (for at most `SETTLE_LIMIT`) until the router counts no open span of the trace, no span misses
    /// its parent and every stream message's index is resolved, checking again whenever a span of the trace
    /// starts or ends.
    fn settle(&self) -> BoxFuture<'_, Result<Settled, SourceError>> {
        let arrivals = self.router.arrivals(self.key.trace_id);
        let (router, trace) = (self.router.clone(), self.key.trace_id);
        let open = Openness::Counted(Arc::new(move || router.open(trace)));
        Box::pin(settle_spans(
            || Ok(self.spans()),
            self.source.messages,
            self.key.span_id,
            arrivals,
            open,
        ))
    }

    fn execution_context(&self, cx: opentelemetry::Context) -> opentelemetry::Context {
        self.key.context(cx)
    }
}

impl Drop for InMemoryExecution {
    fn drop(&mut self) {
        self.router.unregister(self.key.trace_id);
    }
}

impl SpanSource for InMemorySpans {
    /// Polls (every millisecond, for at most `SETTLE_LIMIT`) until no exported span misses its parent (a
    /// response body can end, and with it a client span, just after the caller got its answer) and every
    /// RPC served under a stream message has its message's final index (paper §4.2: the next execution is
    /// scheduled only once preliminary indexes are rewritten). At the limit it warns and returns
    /// [`Settled::TimedOut`] with the number of spans still missing their parent and of unresolved indexes.
    fn settle(&self) -> BoxFuture<'_, Result<Settled, SourceError>> {
        let spans = move || {
            if let Some(p) = &self.provider {
                let _ = p.force_flush();
            }
            self.exporter
                .get_finished_spans()
                .map_err(|e| SourceError::Backend(e.to_string()))
        };
        Box::pin(settle_spans(
            spans,
            self.messages,
            SpanId::INVALID,
            None,
            Openness::Orphans,
        ))
    }

    /// The execution's spans: those of its trace, from the router. `None` without a router: read from the
    /// exporter, an execution's open spans cannot be seen (a span whose parent already ended, or a tree
    /// still wholly open, would look complete), so the search runs one execution at a time.
    fn execution(&self, key: &ExecutionKey) -> Option<Arc<dyn SpanSource>> {
        let router = self.router.clone()?;
        router.register(key.trace_id);
        Some(Arc::new(InMemoryExecution {
            source: self.clone(),
            router,
            key: *key,
        }))
    }

    fn why_not_parallel(&self) -> String {
        "InMemorySpans has no SpanRouter (InMemorySpans::with_router, installed as a span processor of the \
         tracer provider): read from the exporter, an execution's still-open spans cannot be seen, so its \
         spans could not be known to have all arrived"
            .to_string()
    }

    /// The router's count of spans that ended in no registered trace; `None` without a router.
    fn unattributed(&self) -> Option<u64> {
        self.router.as_ref().map(SpanRouter::unattributed)
    }

    fn begin(&self) -> BoxFuture<'_, Result<(), SourceError>> {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
        self.exporter.reset();
        Box::pin(async { Ok(()) })
    }

    fn collect(&self) -> BoxFuture<'_, Result<Observation, SourceError>> {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
        let spans = self
            .exporter
            .get_finished_spans()
            .map_err(|e| SourceError::Backend(e.to_string()));
        let messages = self.messages;
        Box::pin(async move { Ok(observation_from_spans_with(&spans?, messages)) })
    }
}

fn attr<'a>(attributes: &'a [KeyValue], key: &'static str) -> Option<&'a Value> {
    let key = Key::from_static_str(key);
    attributes.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
}

/// A span's or event's attributes as the span contract's parser reads them (borrowed, nothing copied).
fn contract_values(attributes: &[KeyValue]) -> impl Iterator<Item = (&str, AttributeValue<'_>)> {
    attributes
        .iter()
        .map(|kv| (kv.key.as_str(), AttributeValue::from(&kv.value)))
}

fn attr_i64(attributes: &[KeyValue], key: &'static str) -> Option<i64> {
    match attr(attributes, key)? {
        Value::I64(i) => Some(*i),
        Value::String(s) => s.as_str().parse().ok(),
        _ => None,
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn outcome_of(span: &SpanData, fault: Option<Fault>) -> Outcome {
    if let Some(f) = fault {
        return Outcome::of_fault(f);
    }
    if let Some(code) = attr_i64(&span.attributes, attr::GRPC_STATUS).filter(|c| *c != 0) {
        return Outcome::Err {
            code: format!("g{code}"),
        };
    }
    if let Some(code) = attr_i64(&span.attributes, attr::HTTP_STATUS).filter(|c| *c >= 400) {
        return Outcome::Err {
            code: format!("h{code}"),
        };
    }
    match &span.status {
        Status::Error { description } => Outcome::Err {
            code: format!("error: {description}"),
        },
        _ => Outcome::ok(),
    }
}

/// Builds an execution's observation from exported spans: every client span with `dei.index` is an RPC; its
/// parent is the nearest ancestor span that is one; `dei.stream.message` events give stream mappings and the
/// messages themselves, as RPCs under the stream at their final indexes, with the fault (`dei.fault` on the
/// event) injected on that message. The attributes are read by the span contract's parser
/// ([`dei_propagator::semconv::DeiSpan`], [`StreamMessage`]).
///
/// A malformed `dei.*` attribute is left out (a client span whose index is malformed is no RPC: it cannot be
/// targeted), and a malformed stream message event is skipped; each such span is logged and counted in
/// [`Observation::malformed`].
///
/// Stream messages are targeted ([`MessageTargeting::Targeted`]); see [`observation_from_spans_with`].
pub fn observation_from_spans(spans: &[SpanData]) -> Observation {
    observation_from_spans_with(spans, MessageTargeting::default())
}

/// Whether the search may plan faults on single stream messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageTargeting {
    /// Messages are targeted by their final indexes (the default): the instrumentation checks the fault plan
    /// per message (`dei-instrumentation` does: a failing fault ends the stream before that message).
    #[default]
    Targeted,
    /// Messages are observed RPCs the search does not fail on their own: only whole streams are failed (for
    /// instrumentation that fails whole streams only, or to keep the fault space small).
    Observed,
}

/// [`observation_from_spans`], with stream messages targeted or not.
pub fn observation_from_spans_with(spans: &[SpanData], messages_targeting: MessageTargeting) -> Observation {
    let by_id: HashMap<SpanId, &SpanData> = spans.iter().map(|s| (s.span_context.span_id(), s)).collect();
    let mut malformed = 0;
    // the client spans with an index, with their DEI data
    let rpc_spans: Vec<(&SpanData, DeiSpan, Index)> = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Client)
        .filter_map(|s| {
            let mut rejected = Vec::new();
            let dei = DeiSpan::parse_lenient(contract_values(&s.attributes), |e| rejected.push(e));
            if !rejected.is_empty() {
                malformed += 1;
                tracing::warn!(span = %s.name, "dei-sfit: malformed dei attributes left out: {rejected:?}");
            }
            dei.index.clone().map(|index| (s, dei, index))
        })
        .collect();
    let position: HashMap<SpanId, usize> = rpc_spans
        .iter()
        .enumerate()
        .map(|(i, (s, _, _))| (s.span_context.span_id(), i))
        .collect();
    let mut obs = Observation {
        traces: rpc_spans
            .iter()
            .map(|(s, _, _)| s.span_context.trace_id().to_string())
            .collect(),
        ..Observation::default()
    };
    let mut messages: Vec<ObservedRpc> = Vec::new();
    for (span, dei, index) in rpc_spans {
        let signature = dei.signature.unwrap_or_default().to_string();
        let invocation = match (dei.payload_digest, dei.stack_digest) {
            (Some(p), Some(s)) => Some(InvocationSignature::new(Signature::from_name(signature.clone()), p, s)),
            _ => None,
        };
        // A message's fault is recorded on its event; the span's own is the stream's.
        let fault = dei.fault;
        // nearest ancestor span that is an RPC; bounded walk in case of a malformed cycle
        let mut parent = None;
        let mut cur = span.parent_span_id;
        for _ in 0..spans.len() {
            if cur == SpanId::INVALID {
                break;
            }
            if let Some(&p) = position.get(&cur) {
                parent = Some(p);
                break;
            }
            match by_id.get(&cur) {
                Some(s) => cur = s.parent_span_id,
                None => break,
            }
        }
        let position_here = obs.rpcs.len();
        for event in &span.events.events {
            if event.name != attr::STREAM_MESSAGE_EVENT {
                continue;
            }
            let message = match StreamMessage::parse(contract_values(&event.attributes)) {
                Ok(message) => message,
                Err(e) => {
                    malformed += 1;
                    tracing::warn!(span = %span.name, "dei-sfit: stream message event skipped: {e}");
                    continue;
                }
            };
            obs.streams.push(StreamMapping {
                preliminary: message.served_under(),
                final_index: message.final_index.clone(),
            });
            // the message itself, as an RPC issued under the stream: the instrumentation checks the plan for
            // its final index and records an injected fault on its event
            messages.push(ObservedRpc {
                index: message.final_index,
                signature: signature.clone(),
                invocation: None,
                parent: Some(position_here),
                fault: message.fault,
                outcome: message.fault.map_or_else(Outcome::ok, Outcome::of_fault),
                start: nanos(event.timestamp),
                end: nanos(event.timestamp),
                rewritten: false,
                injectable: messages_targeting == MessageTargeting::Targeted,
                reference: None,
                message: message.k,
                payload_preview: None,
            });
        }
        obs.rpcs.push(ObservedRpc {
            index,
            signature,
            invocation,
            parent,
            fault,
            outcome: outcome_of(span, fault),
            start: nanos(span.start_time),
            end: nanos(span.end_time),
            rewritten: false,
            injectable: true,
            reference: None,
            message: None,
            payload_preview: dei.payload.map(payload_preview),
        });
    }
    // positions: the RPC spans first, in `rpc_spans` order, then the stream messages
    obs.rpcs.extend(messages);
    obs.malformed = malformed;
    obs
}
