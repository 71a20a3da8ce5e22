//! Per-trace records: which RPC occurrences one trace made, under which index, with which payload.
//!
//! Bounded by the number of traces (oldest evicted first), by age, and by occurrences per trace.

use crate::span_record::{SpanId, SpanRecord, SpanStatus, TraceId};
use dei_propagator::{Index, PayloadDigest, StackDigest};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One RPC occurrence in a trace: a client span and its server span, or either alone.
#[derive(Debug, Clone, Serialize)]
pub struct Occurrence {
    /// The (final) index.
    #[serde(serialize_with = "crate::serde_index::serialize")]
    pub index: Index,
    /// The RPC's identity in the trace: the client span id, or the server span's parent id.
    #[serde(serialize_with = "crate::serde_index::hex8")]
    pub rpc: SpanId,
    /// The client span's parent (the span that issued the call), when the client span was seen.
    #[serde(serialize_with = "crate::serde_index::hex8_opt")]
    pub caller_span: Option<SpanId>,
    /// `dei.signature` (or the span name).
    pub signature: Option<Arc<str>>,
    /// `dei.payload.digest`.
    #[serde(serialize_with = "crate::serde_index::digest_opt")]
    pub payload: Option<PayloadDigest>,
    /// The start of the request's payload, when the caller recorded it (`dei.payload`, opt-in).
    pub payload_preview: Option<Arc<str>>,
    /// `dei.stack.digest` (of the client span).
    #[serde(serialize_with = "crate::serde_index::stack_digest_opt")]
    pub stack_digest: Option<StackDigest>,
    /// A stream's own occurrence (`dei.preliminary`): its index ends in the preliminary element.
    pub preliminary: bool,
    /// The client span's status, when the client span was seen.
    pub client_status: Option<SpanStatus>,
    /// The server span's status, when the server span was seen.
    pub server_status: Option<SpanStatus>,
    /// Calling service.
    pub client_service: Option<Arc<str>>,
    /// Called service (or virtual peer).
    pub server_service: Option<Arc<str>>,
    /// Client span start/end, Unix ns.
    pub client_time: Option<(u64, u64)>,
    /// Server span start/end, Unix ns.
    pub server_time: Option<(u64, u64)>,
    /// Either side had status ERROR.
    pub error: bool,
    /// The injected fault, if any.
    pub fault: Option<String>,
    /// Flagged ambiguous by instrumentation.
    pub ambiguous: bool,
    /// On a stream's occurrence: the messages its client sent (`dei.stream.message` events), in order.
    pub messages: Vec<StreamMessage>,
    /// On a stream message's occurrence: which stream it was sent on.
    pub stream: Option<MessageOf>,
}

/// One message a stream's client sent (a `dei.stream.message` event, paper §4.2).
#[derive(Debug, Clone, Serialize)]
pub struct StreamMessage {
    /// Its 1-based position k on the stream, when the event said (`dei.message`).
    pub k: Option<u32>,
    /// The preliminary index the callee served it under (`…r|(x+k)~`).
    #[serde(serialize_with = "crate::serde_index::serialize")]
    pub preliminary_index: Index,
    /// Its final index (its own occurrence's index).
    #[serde(serialize_with = "crate::serde_index::serialize")]
    pub index: Index,
    /// The fault injected on it, wire form (the stream ended before it).
    pub fault: Option<String>,
    /// When it was sent, Unix ns.
    pub time_unix_nano: u64,
}

/// The stream a message occurrence was sent on.
#[derive(Debug, Clone, Serialize)]
pub struct MessageOf {
    /// The stream's (preliminary) index.
    #[serde(serialize_with = "crate::serde_index::serialize")]
    pub index: Index,
    /// The message's 1-based position k, when known.
    pub k: Option<u32>,
    /// When it was sent, Unix ns.
    pub time_unix_nano: u64,
}

impl Occurrence {
    /// When the call started (client side preferred), Unix ns.
    pub fn start_ns(&self) -> u64 {
        self.client_time.or(self.server_time).map_or(0, |t| t.0)
    }
    /// When the call ended (client side preferred), Unix ns.
    pub fn end_ns(&self) -> u64 {
        self.client_time.or(self.server_time).map_or(0, |t| t.1)
    }
}

/// One trace's record.
#[derive(Debug, Clone)]
pub struct TraceRecord {
    /// The trace id.
    pub trace_id: TraceId,
    /// Earliest span start seen, Unix ns.
    pub start_ns: u64,
    /// Occurrences in arrival order.
    pub occurrences: Vec<Occurrence>,
    by_rpc: HashMap<(SpanId, Index), usize>,
    /// Distinct indexes touched.
    pub indexes: HashSet<Index>,
    /// Stream mappings preliminary → final received so far.
    pub mappings: HashMap<Index, Index>,
    /// Spans under preliminary indexes waiting for their mapping.
    pub pending: Vec<SpanRecord>,
    /// Stream messages whose final index is itself under a preliminary index still unmapped (a stream opened
    /// while serving another stream's message), with the stream's client span.
    pub pending_messages: Vec<(SpanRecord, crate::span_record::StreamMapping)>,
    created: Instant,
    seq: u64,
}

impl TraceRecord {
    /// The occurrence for `(rpc, index)`, and whether it was created now.
    pub fn occurrence(&mut self, rpc: SpanId, index: &Index, max: usize) -> Option<(usize, bool)> {
        if let Some(&i) = self.by_rpc.get(&(rpc, index.clone())) {
            return Some((i, false));
        }
        if self.occurrences.len() >= max {
            return None;
        }
        self.occurrences.push(Occurrence {
            index: index.clone(),
            rpc,
            caller_span: None,
            signature: None,
            payload: None,
            payload_preview: None,
            stack_digest: None,
            preliminary: false,
            client_status: None,
            server_status: None,
            client_service: None,
            server_service: None,
            client_time: None,
            server_time: None,
            error: false,
            fault: None,
            ambiguous: false,
            messages: Vec::new(),
            stream: None,
        });
        let i = self.occurrences.len() - 1;
        self.by_rpc.insert((rpc, index.clone()), i);
        Some((i, true))
    }

    /// The position of the occurrence for `(rpc, index)`, if any.
    pub fn position(&self, rpc: SpanId, index: &Index) -> Option<usize> {
        self.by_rpc.get(&(rpc, index.clone())).copied()
    }

    /// Re-keys occurrences after an index rewrite.
    pub fn rewrite(&mut self, from: &Index, to: &Index) {
        for o in &mut self.occurrences {
            if let Some(n) = o.index.rewrite_prefix(from, to) {
                o.index = n;
            }
        }
        self.by_rpc = self
            .occurrences
            .iter()
            .enumerate()
            .map(|(i, o)| ((o.rpc, o.index.clone()), i))
            .collect();
        self.indexes = self.occurrences.iter().map(|o| o.index.clone()).collect();
    }
}

/// Limits of the trace store.
#[derive(Debug, Clone)]
pub struct TraceStoreConfig {
    /// Most traces kept.
    pub max_traces: usize,
    /// Traces older than this (since first span) are evicted.
    pub max_age: Duration,
    /// Most occurrences kept per trace.
    pub max_occurrences: usize,
    /// Most pending preliminary spans kept per trace.
    pub max_pending: usize,
}

impl Default for TraceStoreConfig {
    fn default() -> Self {
        TraceStoreConfig {
            max_traces: 20_000,
            max_age: Duration::from_secs(600),
            max_occurrences: 10_000,
            max_pending: 1_000,
        }
    }
}

/// The retained traces.
#[derive(Debug)]
pub struct TraceStore {
    /// Limits.
    pub config: TraceStoreConfig,
    traces: HashMap<TraceId, TraceRecord>,
    order: VecDeque<(u64, TraceId)>,
    seq: u64,
}

impl TraceStore {
    /// An empty store.
    pub fn new(config: TraceStoreConfig) -> Self {
        TraceStore {
            config,
            traces: HashMap::new(),
            order: VecDeque::new(),
            seq: 0,
        }
    }

    /// The record of a trace, created if missing.
    pub fn entry(&mut self, trace_id: TraceId, now: Instant) -> &mut TraceRecord {
        let seq = &mut self.seq;
        let order = &mut self.order;
        self.traces.entry(trace_id).or_insert_with(|| {
            *seq += 1;
            order.push_back((*seq, trace_id));
            TraceRecord {
                trace_id,
                start_ns: 0,
                occurrences: Vec::new(),
                by_rpc: HashMap::new(),
                indexes: HashSet::new(),
                mappings: HashMap::new(),
                pending: Vec::new(),
                pending_messages: Vec::new(),
                created: now,
                seq: *seq,
            }
        })
    }

    /// A trace's record.
    pub fn get(&self, trace_id: &TraceId) -> Option<&TraceRecord> {
        self.traces.get(trace_id)
    }

    /// Retained traces.
    pub fn len(&self) -> usize {
        self.traces.len()
    }

    /// True when no trace is retained.
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }

    /// Every retained trace, oldest first (by first span start, then arrival).
    pub fn ordered(&self) -> Vec<&TraceRecord> {
        let mut v: Vec<&TraceRecord> = self.traces.values().collect();
        v.sort_by_key(|t| (t.start_ns, t.seq));
        v
    }

    /// Removes and returns traces over the count limit or older than the age limit.
    pub fn evict(&mut self, now: Instant) -> Vec<TraceRecord> {
        let mut out = Vec::new();
        while let Some(&(seq, id)) = self.order.front() {
            let Some(t) = self.traces.get(&id) else {
                self.order.pop_front();
                continue;
            };
            if t.seq != seq {
                self.order.pop_front();
                continue;
            }
            let too_many = self.traces.len() > self.config.max_traces;
            let too_old = now.duration_since(t.created) >= self.config.max_age;
            if !too_many && !too_old {
                break;
            }
            self.order.pop_front();
            if let Some(t) = self.traces.remove(&id) {
                out.push(t);
            }
        }
        out
    }

    /// Removes and returns every trace (end of an offline run).
    pub fn drain(&mut self) -> Vec<TraceRecord> {
        self.order.clear();
        self.traces.drain().map(|(_, t)| t).collect()
    }

    /// Traces with pending preliminary spans.
    pub fn with_pending(&mut self) -> Vec<TraceId> {
        self.traces
            .values()
            .filter(|t| !t.pending.is_empty() || !t.pending_messages.is_empty())
            .map(|t| t.trace_id)
            .collect()
    }

    /// Mutable access to one trace.
    pub fn get_mut(&mut self, trace_id: &TraceId) -> Option<&mut TraceRecord> {
        self.traces.get_mut(trace_id)
    }
}
