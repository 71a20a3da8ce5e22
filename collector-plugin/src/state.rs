//! The analysis state: the service graph, the DEI prefix tree and the retained traces, fed span by span.
//!
//! [`CollectorState::ingest`] is the single entry point for live and offline input. It pairs spans for the
//! service graph, resolves preliminary stream indexes to final ones (paper §4.2) and records each RPC
//! occurrence in its trace and in the tree.

use crate::counters::Counters;
use crate::graph::{GraphConfig, ServiceGraph};
use crate::span_record::{SpanRecord, SpanStatus, StreamMapping, TraceId};
use crate::tree::interner::Interner;
use crate::tree::stacks::StackFrames;
use crate::tree::traces::{MessageOf, StreamMessage, TraceStore, TraceStoreConfig};
use crate::tree::{NodeId, PrefixTree, bump};
use dei_propagator::semconv::StreamRewriter;
use dei_propagator::{Index, StackDigest};
use std::sync::Arc;
use std::time::Instant;

/// Limits of the analysis state.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// Service graph limits.
    pub graph: GraphConfig,
    /// Trace store limits.
    pub traces: TraceStoreConfig,
    /// Most prefix-tree nodes.
    pub max_nodes: usize,
    /// Most distinct call stacks whose readable frames are kept.
    pub max_stacks: usize,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            graph: GraphConfig::default(),
            traces: TraceStoreConfig::default(),
            max_nodes: 100_000,
            max_stacks: crate::tree::stacks::DEFAULT_MAX_STACKS,
        }
    }
}

/// The service graph, the prefix tree and the retained traces.
#[derive(Debug)]
pub struct CollectorState {
    /// The service graph.
    pub graph: ServiceGraph,
    /// The DEI prefix tree.
    pub tree: PrefixTree,
    /// Retained traces.
    pub traces: TraceStore,
    /// Readable call stacks by digest (`dei.stack` comes once per stack, `dei.stack.digest` on every span).
    pub stacks: StackFrames,
    /// The trace store's statuses and stack digests, each distinct one held once.
    statuses: Interner<SpanStatus>,
    stack_digests: Interner<StackDigest>,
    counters: Arc<Counters>,
    /// Random, new with every state: tells a query node that its cursor into this state's history
    /// ([`crate::shards::snapshot::Cursor`]) belongs to an earlier process.
    epoch: u64,
}

/// A random nonzero number, from the standard library's randomly keyed hasher.
fn random_epoch() -> u64 {
    use std::hash::BuildHasher as _;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now()) | 1
}

/// Most distinct statuses, and stack digests, shared through an interner at once.
const INTERNED: usize = 4096;

enum Resolution {
    Ready(Index, bool),
    Pending,
}

#[derive(Default)]
struct Update {
    created: bool,
    first_in_trace: bool,
    collision: bool,
    new_error: bool,
    new_fault: Option<String>,
}

impl CollectorState {
    /// An empty analyzer that reports to `counters`.
    pub fn new(config: StateConfig, counters: Arc<Counters>) -> Self {
        CollectorState {
            graph: ServiceGraph::new(config.graph),
            tree: PrefixTree::new(config.max_nodes),
            traces: TraceStore::new(config.traces),
            stacks: StackFrames::new(config.max_stacks),
            statuses: Interner::new(INTERNED),
            stack_digests: Interner::new(INTERNED),
            counters,
            epoch: random_epoch(),
        }
    }

    /// This state's epoch (random, never 0).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The counters this analyzer reports to.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Adds spans, then enforces the memory limits.
    pub fn ingest(&mut self, spans: Vec<SpanRecord>, now: Instant) {
        self.ingest_only(spans, now);
        self.housekeeping(now);
    }

    /// Ingests spans without the [housekeeping](CollectorState::housekeeping) that [`CollectorState::ingest`] does
    /// after them (for a caller that ingests several batches and then keeps house once).
    pub fn ingest_only(&mut self, mut spans: Vec<SpanRecord>, now: Instant) {
        self.ingest_drain(&mut spans, now);
    }

    /// [`CollectorState::ingest_only`] from a buffer that is left empty (its capacity kept, for the next batch).
    pub fn ingest_drain(&mut self, spans: &mut Vec<SpanRecord>, now: Instant) {
        for span in spans.drain(..) {
            self.ingest_span(span, now);
        }
    }

    /// Expires unpaired halves, evicts old traces (recording their unresolved preliminary spans) and
    /// trims the tree.
    pub fn housekeeping(&mut self, now: Instant) {
        self.graph.expire(now, &self.counters);
        let evicted = self.traces.evict(now);
        Counters::add(&self.counters.traces_evicted, evicted.len() as u64);
        for t in evicted {
            for span in t.pending {
                self.apply_unresolved(&span);
            }
            Counters::add(&self.counters.preliminary_unresolved, t.pending_messages.len() as u64);
        }
        self.tree.enforce_limit(&self.counters);
    }

    /// Ends an offline run: pairs or expires every waiting half and records every unresolved preliminary
    /// span under its preliminary index.
    pub fn finish(&mut self) {
        self.graph.flush(&self.counters);
        for id in self.traces.with_pending() {
            let (pending, pending_messages) = self
                .traces
                .get_mut(&id)
                .map(|t| (std::mem::take(&mut t.pending), std::mem::take(&mut t.pending_messages)))
                .expect("with_pending lists retained traces");
            Counters::add(&self.counters.preliminary_unresolved, pending_messages.len() as u64);
            for span in pending {
                if let Some(index) = span.dei.index.clone() {
                    self.apply(&span, index);
                    Counters::add(&self.counters.preliminary_unresolved, 1);
                }
            }
        }
        self.tree.enforce_limit(&self.counters);
    }

    fn ingest_span(&mut self, span: SpanRecord, now: Instant) {
        self.graph.observe(&span, now, &self.counters);
        if span.dei.skipped {
            // its RPC (if it was one) is missing from the trace: the trace says so
            self.traces.entry(span.trace_id, now).spans_dei_skipped += 1;
        }
        if span.dei.planned_faults > 0 {
            // a planned trace is recorded even before (or without) any indexed call
            let trace = self.traces.entry(span.trace_id, now);
            trace.planned_faults = trace.planned_faults.max(span.dei.planned_faults);
        }
        if span.dei.index.is_none() {
            return;
        }
        if let (Some(digest), Some(frames)) = (span.dei.stack_digest, &span.dei.stack) {
            self.stacks.insert(digest, frames, &self.counters);
        }
        let trace = self.traces.entry(span.trace_id, now);
        if span.start_ns != 0 && (trace.start_ns == 0 || span.start_ns < trace.start_ns) {
            trace.start_ns = span.start_ns;
        }
        Counters::add(
            &self.counters.preliminary_messages_dropped,
            span.dei.stream_messages_dropped,
        );
        if !span.dei.stream_messages.is_empty() {
            for m in &span.dei.stream_messages {
                trace.mappings.insert(m.preliminary.clone(), m.final_index.clone());
            }
            let pending = std::mem::take(&mut trace.pending);
            let pending_messages = std::mem::take(&mut trace.pending_messages);
            for m in span.dei.stream_messages.clone() {
                self.apply_message_resolving(&span, m);
            }
            for (s, m) in pending_messages {
                self.apply_message_resolving(&s, m);
            }
            for p in pending {
                self.ingest_resolving(p);
            }
        }
        self.ingest_resolving(span);
    }

    fn ingest_resolving(&mut self, span: SpanRecord) {
        let Some(index) = span.dei.index.clone() else {
            return;
        };
        let stream_open = span.dei.preliminary;
        let max_pending = self.traces.config.max_pending;
        let Some(trace) = self.traces.get_mut(&span.trace_id) else {
            self.apply_unresolved(&span);
            return;
        };
        match resolve(index, &trace.mappings, stream_open) {
            Resolution::Ready(index, rewritten) => {
                if rewritten {
                    Counters::add(&self.counters.preliminary_rewritten, 1);
                }
                self.apply(&span, index);
            }
            Resolution::Pending => {
                if trace.pending.len() < max_pending {
                    trace.pending.push(span);
                } else {
                    self.apply_unresolved(&span);
                }
            }
        }
    }

    fn apply_unresolved(&mut self, span: &SpanRecord) {
        let Some(index) = span.dei.index.clone() else {
            return;
        };
        Counters::add(&self.counters.preliminary_unresolved, 1);
        let update = Update {
            created: true,
            first_in_trace: true,
            ..Default::default()
        };
        self.update_node(span, &index, update);
    }

    /// A stream message, once its final index resolves (it is under a preliminary prefix itself when the
    /// stream was opened while serving another stream's message).
    fn apply_message_resolving(&mut self, span: &SpanRecord, m: StreamMapping) {
        let max_pending = self.traces.config.max_pending;
        let Some(trace) = self.traces.get_mut(&span.trace_id) else {
            return;
        };
        match resolve(m.final_index.clone(), &trace.mappings, false) {
            Resolution::Ready(final_index, _) => self.apply_message(span, &m, &final_index),
            Resolution::Pending if trace.pending_messages.len() < max_pending => {
                trace.pending_messages.push((span.clone(), m));
            }
            Resolution::Pending => Counters::add(&self.counters.preliminary_unresolved, 1),
        }
    }

    /// A stream message's (resolved) final index, announced by the stream's client span, with the fault
    /// injected on it.
    fn apply_message(&mut self, span: &SpanRecord, m: &StreamMapping, final_index: &Index) {
        let max = self.traces.config.max_occurrences;
        let Some(trace) = self.traces.get_mut(&span.trace_id) else {
            return;
        };
        let Some((oi, created)) = trace.occurrence(span.span_id, final_index, max) else {
            trace.occurrences_dropped += 1;
            Counters::add(&self.counters.trace_occurrences_dropped, 1);
            return;
        };
        let first_in_trace = created && trace.occurrences_at(final_index) == 1;
        let occ = &mut trace.occurrences[oi];
        occ.client_service = Some(span.service.clone());
        occ.caller_span = span.parent_span_id;
        occ.signature = span
            .dei
            .signature
            .clone()
            .or_else(|| Some(Arc::from(span.name.as_str())));
        if occ.client_time.is_none() {
            occ.client_time = Some((span.start_ns, span.end_ns));
        }
        let new_fault = match (&occ.fault, &m.fault) {
            (None, Some(f)) => {
                occ.fault = Some(f.as_str().into());
                occ.error = true;
                Some(f.clone())
            }
            _ => None,
        };
        if occ.stream.is_none() {
            occ.stream = Some(Box::new(MessageOf {
                // the stream's own index, as resolved when its span is applied
                index: span.dei.index.clone().unwrap_or_else(Index::root),
                k: m.k,
                time_unix_nano: m.time_ns,
            }));
        }
        let id = self.tree.get_or_insert(final_index);
        if let Some(s) = self.tree.stats_mut(id) {
            s.seen += created as u64;
            s.traces += first_in_trace as u64;
            if let Some(f) = new_fault {
                s.errors += 1;
                *s.faults.entry(f).or_insert(0) += 1;
            }
            if s.signature.is_none() {
                s.signature.clone_from(&occ.signature);
            }
            if created {
                bump(&mut s.client_services, span.service.clone(), 1);
            }
            s.observe_time(span.start_ns);
        }
    }

    fn apply(&mut self, span: &SpanRecord, index: Index) {
        let max = self.traces.config.max_occurrences;
        let Some(trace) = self.traces.get_mut(&span.trace_id) else {
            self.apply_unresolved(span);
            return;
        };
        let rpc = if span.kind.is_callee() {
            span.parent_span_id.unwrap_or(span.span_id)
        } else {
            span.span_id
        };
        let Some((oi, created)) = trace.occurrence(rpc, &index, max) else {
            trace.occurrences_dropped += 1;
            Counters::add(&self.counters.trace_occurrences_dropped, 1);
            return;
        };
        let first_in_trace = created && trace.occurrences_at(&index) == 1;
        // the stream's messages: listed on the stream's occurrence, each pointing back at it
        let finals: Vec<Index> = if span.kind.is_callee() {
            Vec::new()
        } else {
            let resolved = |m: &StreamMapping| resolved_or_raw(&m.final_index, &trace.mappings);
            span.dei.stream_messages.iter().map(resolved).collect()
        };
        for final_index in &finals {
            if let Some(mi) = trace.position(rpc, final_index)
                && let Some(of) = trace.occurrences[mi].stream.as_mut()
            {
                of.index = index.clone();
            }
        }
        let occ = &mut trace.occurrences[oi];
        let callee = span.kind.is_callee();
        // a stream's own occurrence: its resolved index still ends in the preliminary element (calls made under
        // a message were rewritten to the message's final index)
        occ.preliminary |= span.dei.preliminary && index.opens_stream();
        if callee {
            occ.server_time = Some((span.start_ns, span.end_ns));
            occ.server_service = Some(span.service.clone());
            occ.server_status = Some(self.statuses.intern(span.status.clone()));
        } else {
            occ.client_time = Some((span.start_ns, span.end_ns));
            occ.client_service = Some(span.service.clone());
            occ.caller_span = span.parent_span_id;
            occ.client_status = Some(self.statuses.intern(span.status.clone()));
            if occ.server_service.is_none() {
                occ.server_service = span.peer.as_ref().map(|(p, _)| Arc::from(p.as_str()));
            }
            if !finals.is_empty() {
                occ.messages = span
                    .dei
                    .stream_messages
                    .iter()
                    .zip(finals)
                    .map(|(m, index)| StreamMessage {
                        k: m.k,
                        preliminary_index: m.preliminary.clone(),
                        index,
                        fault: m.fault.clone(),
                        time_unix_nano: m.time_ns,
                    })
                    .collect();
            }
        }
        if occ.signature.is_none() {
            occ.signature = span
                .dei
                .signature
                .clone()
                .or_else(|| Some(Arc::from(span.name.as_str())));
        }
        // the caller's digest is the payload of the invocation signature; the callee's stands in until it comes
        if occ.payload.is_none() || (!callee && span.dei.payload_digest.is_some()) {
            occ.payload = span.dei.payload_digest;
        }
        if occ.stack_digest.is_none() {
            occ.stack_digest = span.dei.stack_digest.map(|d| self.stack_digests.intern(d));
        }
        if occ.payload_preview.is_none() {
            occ.payload_preview.clone_from(&span.dei.payload_preview);
        }
        let new_error = span.error && !occ.error;
        occ.error |= span.error;
        // a fault on one of a stream's messages is on its event (applied to the message), not on the span
        let new_fault = match (&occ.fault, &span.dei.fault) {
            (None, Some(f)) => {
                occ.fault = Some(f.as_str().into());
                Some(f.clone())
            }
            _ => None,
        };
        occ.ambiguous |= span.dei.ambiguous;
        let update = Update {
            created,
            first_in_trace,
            collision: created && !first_in_trace,
            new_error,
            new_fault,
        };
        let node = self.update_node(span, &index, update);
        if created {
            self.share_with_node(span.trace_id, oi, node);
        }
    }

    /// A new occurrence holds its node's index and signature instead of its own copies: a trace store at its
    /// limit then holds each distinct index and signature once, not once per occurrence.
    fn share_with_node(&mut self, trace_id: TraceId, oi: usize, node: NodeId) {
        let (Some(n), Some(t)) = (self.tree.node(node), self.traces.get_mut(&trace_id)) else {
            return;
        };
        let Some(o) = t.occurrences.get_mut(oi) else {
            return;
        };
        if o.index == n.index {
            o.index = n.index.clone();
        }
        if o.signature.is_some() && o.signature == n.stats.signature {
            o.signature.clone_from(&n.stats.signature);
        }
    }

    fn update_node(&mut self, span: &SpanRecord, index: &Index, u: Update) -> NodeId {
        let id = self.tree.get_or_insert(index);
        let Some(s) = self.tree.stats_mut(id) else {
            return id;
        };
        s.seen += u.created as u64;
        s.traces += u.first_in_trace as u64;
        s.collisions += u.collision as u64;
        s.errors += u.new_error as u64;
        if let Some(f) = u.new_fault {
            *s.faults.entry(f).or_insert(0) += 1;
        }
        s.ambiguous_flagged += span.dei.ambiguous as u64;
        if s.signature.is_none() {
            s.signature = span
                .dei
                .signature
                .clone()
                .or_else(|| Some(Arc::from(span.name.as_str())));
        }
        if s.instantiation.is_none() {
            s.instantiation.clone_from(&span.dei.instantiation);
        }
        if s.stack.is_none() {
            s.stack.clone_from(&span.dei.stack);
        }
        if s.stack_digest.is_none() {
            s.stack_digest = span.dei.stack_digest;
        }
        if s.payload_digest.is_none() {
            s.payload_digest = span.dei.payload_digest;
        }
        match span.kind {
            k if k.is_callee() => {
                bump(&mut s.server_services, span.service.clone(), 1);
                s.server_latency.observe(span.duration_seconds());
            }
            _ => {
                bump(&mut s.client_services, span.service.clone(), 1);
                if let Some((peer, _)) = &span.peer {
                    bump(&mut s.peers, Arc::from(peer.as_str()), 1);
                }
                s.client_latency.observe(span.duration_seconds());
            }
        }
        s.observe_time(span.start_ns);
        id
    }

    /// The retained record of one trace.
    pub fn trace(&self, trace_id: &TraceId) -> Option<&crate::tree::traces::TraceRecord> {
        self.traces.get(trace_id)
    }
}

/// Rewrites the preliminary elements of `index` with the trace's mappings (the contract's one rewriter,
/// [`StreamRewriter`], shared with the search), innermost first: a mapping is
/// keyed by the message's index as its callee served it, which is under any outer stream's preliminary prefix
/// too, and its final index may itself be under one (rewritten in a later round). A preliminary last element
/// is left as is on a stream's own span (`stream_open`); any other unmapped preliminary element makes the span
/// wait for its mapping.
fn resolve(index: Index, mappings: &StreamRewriter, stream_open: bool) -> Resolution {
    // the common case, an index without a preliminary element (but a stream's own last one), as it is: no
    // copy
    let depth = index.depth();
    if !index
        .elements()
        .iter()
        .enumerate()
        .any(|(i, e)| e.preliminary && !(stream_open && i + 1 == depth))
    {
        return Resolution::Ready(index, false);
    }
    let r = mappings.rewrite(&index, stream_open);
    if r.complete {
        Resolution::Ready(r.index, r.rewritten)
    } else {
        Resolution::Pending
    }
}

/// `index` resolved with the trace's mappings, or as it is while some of them have not arrived.
fn resolved_or_raw(index: &Index, mappings: &StreamRewriter) -> Index {
    match resolve(index.clone(), mappings, false) {
        Resolution::Ready(resolved, _) => resolved,
        Resolution::Pending => index.clone(),
    }
}
