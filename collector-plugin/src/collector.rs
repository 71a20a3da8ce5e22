//! The running collector: accepts export requests from the receivers, forwards them, and feeds the
//! [`CollectorState`].

use crate::counters::{Counters, RateLimitedLog};
use crate::forward::{Batch, Forwarder};
use crate::otlp::{self, Rejection};
use crate::span_record::{self, AttributeIssue, SpanRecord};
use crate::state::{CollectorState, StateConfig};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceResponse};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How the collector treats input.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Largest request body, compressed or not, in bytes.
    pub max_body_bytes: usize,
    /// Most request-body bytes (OTLP/HTTP and gRPC, decompressed bodies included) buffered across all
    /// connections at once; a request that would pass it is refused with the retryable 503 / `UNAVAILABLE`
    /// (`--max-buffered-bytes`).
    pub max_buffered_bytes: usize,
    /// How long an OTLP/HTTP request body may take to arrive in full (`--body-timeout-secs`); a slower or
    /// stalled one is answered 408 and counted as incomplete.
    pub body_timeout: Duration,
    /// Reject a whole request (400 / `INVALID_ARGUMENT`) when a `dei.*` attribute has the wrong type
    /// (`--strict-attributes`); when false (the default), skip that span's DEI data, forward everything
    /// unchanged, count it and report it in `partial_success.error_message`.
    pub strict_attributes: bool,
    /// Analyze spans (the prefix tree, the graph); off makes the collector a plain forwarder.
    pub analyze: bool,
    /// A JSON report of an exhaustive fault search (dei-sfit), or a directory of them, served at
    /// `/api/v1/search` and `/api/v1/search/reports` for the web view.
    pub search_report: Option<std::path::PathBuf>,
    /// The base URL of Jaeger's UI (`--jaeger-ui`, checked when the command line is read): the web view
    /// links trace ids to Jaeger's trace page and tree nodes to a Jaeger search for their `dei.index` tag.
    pub jaeger_ui: Option<String>,
    /// Host names (with or without a port) the API and web view answer to besides IP literals and
    /// `localhost` (`--api-allowed-host`): a request naming another host is refused with 403, so that a page
    /// on a foreign domain rebound to this address (DNS rebinding) cannot read the graph.
    pub api_allowed_hosts: Vec<String>,
    /// Most edges whose latency histograms `/metrics` shows (the busiest); the others get only their
    /// request counters (`--metrics-max-histogram-edges`).
    pub metrics_max_histogram_edges: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_body_bytes: 8 * 1024 * 1024,
            max_buffered_bytes: 128 * 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            strict_attributes: false,
            analyze: true,
            search_report: None,
            jaeger_ui: None,
            api_allowed_hosts: Vec::new(),
            metrics_max_histogram_edges: crate::api::prometheus::DEFAULT_MAX_HISTOGRAM_EDGES,
        }
    }
}

/// A decoded request: its span count and what analysis reads of it (the body is forwarded as is).
struct Read {
    spans: usize,
    records: Vec<SpanRecord>,
    skipped: usize,
    issues: Vec<AttributeIssue>,
}

/// What an accepted request produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Spans in the request.
    pub spans: usize,
    /// Ignored attributes, as readable warnings (first few).
    pub warnings: Vec<String>,
    /// Ignored attributes in total.
    pub ignored_attributes: usize,
    /// Spans whose DEI data was skipped because of an ignored attribute.
    pub spans_dei_skipped: usize,
}

impl Accepted {
    /// The OTLP response: every span was accepted (`rejected_spans` 0); a partial success carries the
    /// warnings about ignored attributes, when there are any.
    pub fn response(&self) -> ExportTraceServiceResponse {
        ExportTraceServiceResponse {
            partial_success: (self.ignored_attributes > 0).then(|| ExportTracePartialSuccess {
                rejected_spans: 0,
                error_message: format!(
                    "{} dei attribute(s) ignored, the DEI data of {} span(s) skipped (the spans were \
                     accepted and forwarded unchanged): {}",
                    self.ignored_attributes,
                    self.spans_dei_skipped,
                    self.warnings.join("; ")
                ),
            }),
        }
    }
}

/// Most spans accepted but not yet analyzed (in the [`Collector`]'s inbox) before a receiver waits for the
/// analysis to catch up: the bound on the memory that analysis lag may hold.
pub const ANALYSIS_INBOX_SPANS: usize = 20_000;

/// Most emptied record buffers kept for reuse ([`Collector`]'s `spare_records`), and the largest kept: a
/// request's records are a few hundred bytes a span, so each buffer is a large block that would otherwise be
/// allocated on a receiver's thread and freed on the analysis's, once per request.
const SPARE_RECORD_BUFFERS: usize = 16;
const SPARE_RECORD_BUFFER_MAX_SPANS: usize = 2_048;

/// Accepted spans waiting for the analysis.
#[derive(Debug, Default)]
struct Inbox {
    batches: Vec<(Vec<SpanRecord>, Instant)>,
    spans: usize,
}

/// The collector core shared by the receivers and the API.
///
/// A receiver never waits for another request's analysis: it puts the records of the spans it accepted
/// in an inbox, and whichever task holds the analysis state (another receiver, or a query) applies every
/// batch in the inbox before it lets go. So the analysis runs in large batches on one thread at a time,
/// while the other threads keep decoding and acknowledging; a query sees every span accepted before it
/// started. The inbox holds at most `ANALYSIS_INBOX_SPANS`; past that a receiver waits its turn.
#[derive(Debug)]
pub struct Collector {
    config: IngestConfig,
    counters: Arc<Counters>,
    state: Mutex<CollectorState>,
    inbox: Mutex<Inbox>,
    /// Emptied record buffers, reused by the next requests.
    spare_records: Mutex<Vec<Vec<SpanRecord>>>,
    forwarder: Option<Forwarder>,
    log: RateLimitedLog,
    receivers_stopped: std::sync::atomic::AtomicBool,
    buffered: tokio::sync::Semaphore,
    /// On a query node: the shards' waiting spans and which shards the merged state holds.
    merged: Mutex<Option<(usize, crate::views::PeersView)>>,
    /// On a query node: trace lookups, answered by the shard that holds the trace.
    trace_lookup: std::sync::OnceLock<Arc<crate::shards::peers::TraceLookup>>,
}

impl Collector {
    /// A collector with its state and, optionally, a forwarder.
    pub fn new(
        config: IngestConfig,
        state: StateConfig,
        forwarder: Option<Forwarder>,
        counters: Arc<Counters>,
    ) -> Self {
        Collector {
            state: Mutex::new(CollectorState::new(state, counters.clone())),
            inbox: Mutex::default(),
            spare_records: Mutex::default(),
            counters,
            forwarder,
            log: RateLimitedLog::new(Duration::from_secs(5)),
            receivers_stopped: Default::default(),
            merged: Mutex::default(),
            trace_lookup: std::sync::OnceLock::new(),
            buffered: tokio::sync::Semaphore::new(config.max_buffered_bytes.min(tokio::sync::Semaphore::MAX_PERMITS)),
            config,
        }
    }

    /// The ingest settings.
    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The counters and the sizes of the state, after applying every span accepted so far (what
    /// `GET /api/v1/stats` sends).
    pub fn stats(&self) -> crate::views::Stats {
        let queued = self.queue_depth();
        let state = self.state();
        let counters = self.counters.snapshot();
        let mut stats = crate::api::stats(&state, &counters, queued);
        if let Some((waiting, peers)) = self.peers() {
            stats.graph_waiting_spans = waiting;
            stats.peers = Some(peers);
        }
        stats
    }

    /// The service graph, after applying every span accepted so far (what `GET /api/v1/graph` sends).
    pub fn graph(&self) -> crate::views::GraphView {
        crate::api::render::graph_view(&self.state())
    }

    /// On a query node ([`crate::shards`]), after it merged the shards into its state: the counters become
    /// their sums, and it records which shards answered.
    pub(crate) fn set_merged(
        &self,
        counters: &crate::counters::CountersSnapshot,
        waiting: usize,
        peers: crate::views::PeersView,
    ) {
        self.counters.store(counters);
        *self.merged.lock().unwrap_or_else(|p| p.into_inner()) = Some((waiting, peers));
    }

    /// On a query node: answers trace lookups from the shards.
    pub(crate) fn set_trace_lookup(&self, lookup: Arc<crate::shards::peers::TraceLookup>) {
        let _ = self.trace_lookup.set(lookup);
    }

    /// On a query node: the trace lookups over its shards.
    pub(crate) fn trace_lookup(&self) -> Option<&Arc<crate::shards::peers::TraceLookup>> {
        self.trace_lookup.get()
    }

    /// On a query node: which shards the merged state holds, and the spans waiting in their pairing stores.
    pub fn peers(&self) -> Option<(usize, crate::views::PeersView)> {
        self.merged.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Locks the analysis state (for queries), after applying every span accepted so far.
    pub(crate) fn state(&self) -> MutexGuard<'_, CollectorState> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.drain_inbox(&mut state);
        state
    }

    fn lock_inbox(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies the inbox's batches to `state` (whose lock the caller holds), until the inbox is empty.
    fn drain_inbox(&self, state: &mut CollectorState) {
        loop {
            let batches = {
                let mut inbox = self.lock_inbox();
                inbox.spans = 0;
                std::mem::take(&mut inbox.batches)
            };
            if batches.is_empty() {
                return;
            }
            let mut last = None;
            for (mut records, at) in batches {
                state.ingest_drain(&mut records, at);
                self.give_back(records);
                last = Some(at);
            }
            if let Some(at) = last {
                state.housekeeping(at);
            }
        }
    }

    /// An empty buffer for a request's records: one given back earlier, or a new one.
    fn records_buffer(&self) -> Vec<SpanRecord> {
        self.spare_records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Keeps an emptied record buffer for reuse, unless enough are kept or it is unusually large.
    fn give_back(&self, mut records: Vec<SpanRecord>) {
        if records.capacity() > SPARE_RECORD_BUFFER_MAX_SPANS {
            return;
        }
        records.clear();
        let mut spare = self.spare_records.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_RECORD_BUFFERS {
            spare.push(records);
        }
    }

    /// Hands accepted records to the analysis: applies them now if the analysis state is free, else leaves
    /// them to its holder (who drains the inbox before letting go), waiting only when the inbox is full.
    fn submit(&self, records: Vec<SpanRecord>) {
        let mut full = {
            let mut inbox = self.lock_inbox();
            inbox.spans += records.len();
            inbox.batches.push((records, Instant::now()));
            inbox.spans > ANALYSIS_INBOX_SPANS
        };
        loop {
            let guard = if full {
                Some(self.state.lock().unwrap_or_else(|p| p.into_inner()))
            } else {
                match self.state.try_lock() {
                    Ok(g) => Some(g),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                }
            };
            let Some(mut state) = guard else { return };
            self.drain_inbox(&mut state);
            drop(state);
            // a batch pushed while we held the lock, whose submitter found it taken, is ours to apply
            if self.lock_inbox().batches.is_empty() {
                return;
            }
            full = false;
        }
    }

    /// Spans in the forwarding queue, counting the batches the workers hold.
    pub fn queued_spans(&self) -> usize {
        self.forwarder.as_ref().map_or(0, |f| f.queued_spans())
    }

    /// Spans and bytes in the forwarding queue, counting the batches the workers hold.
    pub fn queue_depth(&self) -> crate::forward::QueueDepth {
        self.forwarder.as_ref().map(|f| f.depth()).unwrap_or_default()
    }

    /// Marks that a receiver stopped serving (`/readyz` then answers 503).
    pub fn receiver_stopped(&self) {
        self.receivers_stopped.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether every receiver is still serving.
    pub fn receivers_serving(&self) -> bool {
        !self.receivers_stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reserves `n` more bytes of the cap on buffered request bytes, or `None` when the cap is reached.
    pub fn reserve_buffer(&self, n: usize) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let n = u32::try_from(n).ok()?;
        self.buffered.try_acquire_many(n).ok()
    }

    /// Reserves `n` bytes of the same cap without a guard (`false` when the cap is reached); give them back
    /// with [`Collector::release_buffer`].
    pub fn reserve_buffer_unguarded(&self, n: usize) -> bool {
        match self.reserve_buffer(n) {
            Some(p) => {
                p.forget();
                true
            }
            None => false,
        }
    }

    /// Gives back bytes reserved with [`Collector::reserve_buffer_unguarded`].
    pub fn release_buffer(&self, n: usize) {
        self.buffered.add_permits(n);
    }

    /// Request bytes buffered right now across all connections.
    pub fn buffered_bytes(&self) -> usize {
        self.config
            .max_buffered_bytes
            .min(tokio::sync::Semaphore::MAX_PERMITS)
            .saturating_sub(self.buffered.available_permits())
    }

    /// The forwarder, if forwarding.
    pub fn forwarder(&self) -> Option<&Forwarder> {
        self.forwarder.as_ref()
    }

    /// Counts and logs a rejection, and hands it back.
    pub fn reject(&self, r: Rejection) -> Rejection {
        Counters::add(r.counter(&self.counters), 1);
        if r.retryable() {
            self.log
                .warn(&format!("refused OTLP export request (the client may retry): {r}"));
        } else {
            self.log.warn(&format!("rejected OTLP export request: {r}"));
        }
        r
    }

    /// Accepts a protobuf body (already decompressed); it is forwarded byte for byte.
    pub async fn accept_protobuf(&self, body: Bytes) -> Result<Accepted, Rejection> {
        if body.len() > self.config.max_body_bytes {
            return Err(self.reject(Rejection::TooLarge {
                limit: self.config.max_body_bytes,
            }));
        }
        let read = self.read(&body)?;
        self.accept(read, body).await
    }

    /// Accepts an OTLP/JSON body (already decompressed). Forwarded, it goes downstream re-encoded as protobuf:
    /// the full request is decoded for that encoding (once its lite view, which is bounded, was decoded), and
    /// analysis reads the encoding's lite view. Without a
    /// forwarder, the body is decoded straight into the lite view.
    pub async fn accept_json(&self, body: &[u8]) -> Result<Accepted, Rejection> {
        if body.len() > self.config.max_body_bytes {
            return Err(self.reject(Rejection::TooLarge {
                limit: self.config.max_body_bytes,
            }));
        }
        if self.forwarder.is_some() {
            // The lite view first: it is bounded by the body's size, which the generated types are not.
            otlp::decode_json_lite(body, &bumpalo::Bump::new()).map_err(|r| self.reject(r))?;
            let full = otlp::decode_json(body).map_err(|r| self.reject(r))?;
            let encoded = otlp::encode_protobuf(&full);
            drop(full);
            let read = self.read(&encoded)?;
            return self.accept(read, encoded).await;
        }
        let read = {
            let arena = bumpalo::Bump::new();
            let req = otlp::decode_json_lite(body, &arena).map_err(|r| self.reject(r))?;
            self.read_lite(&req)?
        };
        // nothing is forwarded
        self.accept(read, Bytes::new()).await
    }

    /// Decodes a protobuf body (borrowing from it), checks its ids and extracts what analysis reads.
    fn read(&self, body: &[u8]) -> Result<Read, Rejection> {
        let req = otlp::decode_lite(body).map_err(|r| self.reject(r))?;
        self.read_lite(&req)
    }

    /// Checks a decoded request's ids and extracts what analysis reads.
    fn read_lite(&self, req: &otlp::lite::Request<'_>) -> Result<Read, Rejection> {
        let spans = otlp::validate_lite_ids(req).map_err(|r| self.reject(r))?;
        let mut issues: Vec<AttributeIssue> = Vec::new();
        let (records, skipped) = if self.config.analyze || self.config.strict_attributes {
            let mut records = self.records_buffer();
            let skipped = span_record::extract_lite_into(req, &mut issues, &mut records);
            (records, skipped)
        } else {
            (Vec::new(), 0)
        };
        Ok(Read {
            spans,
            records,
            skipped,
            issues,
        })
    }

    /// `body` is the protobuf encoding that was `read`, forwarded as is (empty, and unused, without a
    /// forwarder). The batch is queued for forwarding
    /// first; only a batch the queue took is counted and analyzed, so that a refused one (which the client
    /// sends again) is analyzed once.
    async fn accept(&self, read: Read, body: Bytes) -> Result<Accepted, Rejection> {
        let Read {
            spans,
            records,
            skipped,
            issues,
        } = read;
        if self.config.strict_attributes && !issues.is_empty() {
            return Err(self.reject(Rejection::BadAttributes(issues[0].to_string())));
        }
        if let Some(f) = self.forwarder.as_ref()
            && let Err(full) = f.enqueue(Batch { body, spans }).await
        {
            Counters::add(&self.counters.spans_refused, spans as u64);
            return Err(self.reject(Rejection::QueueFull(full.to_string())));
        }
        if !issues.is_empty() {
            Counters::add(&self.counters.attributes_rejected, issues.len() as u64);
            Counters::add(&self.counters.spans_dei_skipped, skipped as u64);
            self.log.warn(&format!(
                "ignored {} dei attribute(s) and skipped the DEI data of {skipped} span(s) (forwarded \
                 unchanged), first: {}",
                issues.len(),
                issues[0]
            ));
        }
        Counters::add(&self.counters.requests_accepted, 1);
        Counters::add(&self.counters.spans_received, spans as u64);
        if self.config.analyze {
            self.submit(records);
        }
        Ok(Accepted {
            spans,
            ignored_attributes: issues.len(),
            spans_dei_skipped: skipped,
            warnings: issues.iter().take(3).map(|i| i.to_string()).collect(),
        })
    }

    /// Periodic upkeep: expires unpaired spans and old traces.
    pub fn housekeeping(&self) {
        self.state().housekeeping(Instant::now());
    }

    /// Drains the forwarding queue (until its deadline).
    pub async fn shutdown(&self) {
        if let Some(f) = &self.forwarder {
            f.shutdown().await;
        }
    }
}
