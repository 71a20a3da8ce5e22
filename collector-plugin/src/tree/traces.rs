//! Per-trace records: which RPC occurrences one trace made, under which index, with which payload.
//!
//! Bounded by the number of traces (oldest evicted first), by age, and by occurrences per trace.
//!
//! Compact, because a collector at saturation holds the most traces its limit allows: a record is boxed (the
//! map's slots stay small), its occurrences grow by half rather than double, rare parts (a stream's
//! messages, a fault) are boxed, and a trace of a few calls finds an occurrence by a linear scan; the hash
//! maps for `(rpc, index)` and for distinct indexes are built only past [`LINEAR_LOOKUP_MAX`] occurrences.

use crate::span_record::{SpanId, SpanRecord, TraceId};
use crate::stale_order;
pub use crate::views::{MessageOf, Occurrence, StreamMessage};
use crate::views::{TraceStatus, TraceSummary};
use dei_propagator::Index;
use dei_propagator::semconv::StreamRewriter;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One trace's record.
#[derive(Debug, Clone)]
pub struct TraceRecord {
    /// The trace id.
    pub trace_id: TraceId,
    /// Earliest span start seen, Unix ns.
    pub start_ns: u64,
    /// The most faults a request of this trace was planned with (`dei.fault.plan` on its server spans): a
    /// trace run under a fault plan is perturbed on purpose, so the absence of a call in it proves nothing
    /// about a circuit breaker.
    pub planned_faults: u32,
    /// Spans and stream messages of this trace not recorded because it already held
    /// [`TraceStoreConfig::max_occurrences`] occurrences (one per span or message that would have made or
    /// completed an occurrence): its RPCs are incomplete by that much.
    pub occurrences_dropped: u64,
    /// Spans of this trace whose DEI data was skipped for a malformed `dei.*` attribute or event: RPCs (or
    /// faults) that are missing from its occurrences.
    pub spans_dei_skipped: u64,
    /// Occurrences in arrival order.
    pub occurrences: Vec<Occurrence>,
    /// Hash lookups, once the trace has more than [`LINEAR_LOOKUP_MAX`] occurrences.
    lookup: Option<Box<Lookup>>,
    /// Stream mappings preliminary → final received so far.
    pub mappings: StreamRewriter,
    /// Spans under preliminary indexes waiting for their mapping.
    pub pending: Vec<SpanRecord>,
    /// Stream messages whose final index is itself under a preliminary index still unmapped (a stream opened
    /// while serving another stream's message), with the stream's client span.
    pub pending_messages: Vec<(SpanRecord, crate::span_record::StreamMapping)>,
    created: Instant,
    seq: u64,
    /// The store's clock at this record's last change ([`TraceStore::clock`]).
    changed: u64,
}

/// Up to this many occurrences, a trace finds one by a linear scan (no hash maps to keep per trace).
pub const LINEAR_LOOKUP_MAX: usize = 16;

/// A large trace's hash lookups.
#[derive(Debug, Clone, Default)]
struct Lookup {
    by_rpc: HashMap<(SpanId, Index), usize>,
    /// Occurrences per distinct index.
    indexes: HashMap<Index, usize>,
}

impl Lookup {
    fn of(occurrences: &[Occurrence]) -> Self {
        let mut lookup = Lookup::default();
        for (i, o) in occurrences.iter().enumerate() {
            lookup.by_rpc.insert((o.rpc, o.index.clone()), i);
            *lookup.indexes.entry(o.index.clone()).or_insert(0) += 1;
        }
        lookup
    }
}

impl TraceRecord {
    /// The occurrence for `(rpc, index)`, and whether it was created now.
    pub fn occurrence(&mut self, rpc: SpanId, index: &Index, max: usize) -> Option<(usize, bool)> {
        if let Some(i) = self.position(rpc, index) {
            return Some((i, false));
        }
        if self.occurrences.len() >= max {
            return None;
        }
        if self.occurrences.len() == self.occurrences.capacity() {
            // grow by half: a trace's last growth wastes a third at most, not a half
            self.occurrences.reserve_exact((self.occurrences.len() / 2).max(2));
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
            messages: Box::default(),
            stream: None,
        });
        let i = self.occurrences.len() - 1;
        match self.lookup.as_mut() {
            Some(lookup) => {
                lookup.by_rpc.insert((rpc, index.clone()), i);
                *lookup.indexes.entry(index.clone()).or_insert(0) += 1;
            }
            None if self.occurrences.len() > LINEAR_LOOKUP_MAX => {
                self.lookup = Some(Box::new(Lookup::of(&self.occurrences)));
            }
            None => {}
        }
        Some((i, true))
    }

    /// The position of the occurrence for `(rpc, index)`, if any.
    pub fn position(&self, rpc: SpanId, index: &Index) -> Option<usize> {
        match &self.lookup {
            Some(lookup) => lookup.by_rpc.get(&(rpc, index.clone())).copied(),
            None => self.occurrences.iter().position(|o| o.rpc == rpc && o.index == *index),
        }
    }

    /// How many occurrences have this index.
    pub fn occurrences_at(&self, index: &Index) -> usize {
        match &self.lookup {
            Some(lookup) => lookup.indexes.get(index).copied().unwrap_or(0),
            None => self.occurrences.iter().filter(|o| o.index == *index).count(),
        }
    }

    /// True when an occurrence has this index.
    pub fn contains_index(&self, index: &Index) -> bool {
        self.occurrences_at(index) > 0
    }

    /// The indexes the trace touched, in arrival order, an index as often as it has occurrences.
    pub fn indexes(&self) -> impl Iterator<Item = &Index> + '_ {
        self.occurrences.iter().map(|o| &o.index)
    }

    /// Re-keys occurrences after an index rewrite.
    pub fn rewrite(&mut self, from: &Index, to: &Index) {
        for o in &mut self.occurrences {
            if let Some(n) = o.index.rewrite_prefix(from, to) {
                o.index = n;
            }
        }
        if self.lookup.is_some() {
            self.lookup = Some(Box::new(Lookup::of(&self.occurrences)));
        }
    }
}

/// Most services listed in a [`TraceSummary`].
pub const MAX_SUMMARY_SERVICES: usize = 32;

impl TraceRecord {
    /// The trace as the list shows it: times, root RPC, services, status and faults.
    pub fn summary(&self) -> TraceSummary {
        let mut end = 0u64;
        let mut start = self.start_ns;
        let mut services: std::collections::BTreeSet<&Arc<str>> = std::collections::BTreeSet::new();
        for o in &self.occurrences {
            for (s, e) in [o.client_time, o.server_time].into_iter().flatten() {
                if s != 0 && (start == 0 || s < start) {
                    start = s;
                }
                end = end.max(e);
            }
            for s in [&o.client_service, &o.server_service].into_iter().flatten() {
                if services.len() < MAX_SUMMARY_SERVICES || services.contains(s) {
                    services.insert(s);
                }
            }
        }
        let root = self
            .occurrences
            .iter()
            .filter(|o| o.index.parent().is_none_or(|p| !self.contains_index(&p)))
            .min_by_key(|o| (o.start_ns(), o.index.depth()));
        let errors = self.occurrences.iter().filter(|o| o.error || o.fault.is_some()).count();
        TraceSummary {
            faults: self.occurrences.iter().filter(|o| o.fault.is_some()).count(),
            rpcs: self.occurrences.len(),
            start_unix_nano: self.start_ns,
            trace_id: hex::encode(self.trace_id),
            duration_nano: end.saturating_sub(start),
            root_operation: root.and_then(|o| o.signature.clone()),
            root_service: root.and_then(|o| o.client_service.clone().or_else(|| o.server_service.clone())),
            services: services.into_iter().cloned().collect(),
            errors,
            status: if errors > 0 {
                TraceStatus::Error
            } else {
                TraceStatus::Ok
            },
            occurrences_dropped: self.occurrences_dropped,
            spans_dei_skipped: self.spans_dei_skipped,
        }
    }
}

/// Most RPC occurrences kept per trace, by default (`serve --max-trace-rpcs`, `query --max-trace-rpcs`).
pub const DEFAULT_MAX_OCCURRENCES: usize = 10_000;

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
            max_occurrences: DEFAULT_MAX_OCCURRENCES,
            max_pending: 1_000,
        }
    }
}

/// The retained traces.
#[derive(Debug)]
pub struct TraceStore {
    /// Limits.
    pub config: TraceStoreConfig,
    traces: HashMap<TraceId, Box<TraceRecord>>,
    order: VecDeque<(u64, TraceId)>,
    seq: u64,
    /// A logical clock that advances whenever a record is handed out for writing or removed.
    clock: u64,
    /// The ids of removed traces with the clock of their removal, newest last; bounded, see `removed_floor`.
    removed: VecDeque<(u64, TraceId)>,
    /// Removals at or before this clock were dropped from `removed`.
    removed_floor: u64,
    /// The occurrences of the traces evicted lately, a moving average in sixteenths: a new trace's
    /// occurrences are allocated at that size once, instead of growing through several sizes (blocks of
    /// many sizes, freed at different times, fragment the heap).
    typical16: usize,
}

impl TraceStore {
    /// An empty store.
    pub fn new(config: TraceStoreConfig) -> Self {
        TraceStore {
            config,
            traces: HashMap::new(),
            order: VecDeque::new(),
            seq: 0,
            clock: 0,
            removed: VecDeque::new(),
            removed_floor: 0,
            typical16: 0,
        }
    }

    /// The store's logical clock: a record's last change is stamped with it.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// The records changed (created or handed out for writing) after clock `since`.
    pub fn changed_since(&self, since: u64) -> impl Iterator<Item = &TraceRecord> + '_ {
        self.traces.values().map(|t| &**t).filter(move |t| t.changed > since)
    }

    /// The ids of the traces removed after clock `since`, or `None` when that is older than the removals
    /// this store remembers.
    pub fn removed_since(&self, since: u64) -> Option<Vec<TraceId>> {
        if since < self.removed_floor {
            return None;
        }
        let start = self.removed.partition_point(|(at, _)| *at <= since);
        Some(self.removed.iter().skip(start).map(|(_, t)| *t).collect())
    }

    /// Removes one trace.
    pub fn remove(&mut self, trace_id: &TraceId) -> Option<TraceRecord> {
        let t = self.traces.remove(trace_id)?;
        self.note_removed(*trace_id);
        self.compact_order();
        Some(*t)
    }

    fn note_removed(&mut self, trace_id: TraceId) {
        self.clock += 1;
        self.removed.push_back((self.clock, trace_id));
        if self.removed.len() > self.config.max_traces.max(1024)
            && let Some((at, _)) = self.removed.pop_front()
        {
            self.removed_floor = at;
        }
    }

    /// The record of a trace, created if missing.
    pub fn entry(&mut self, trace_id: TraceId, now: Instant) -> &mut TraceRecord {
        let seq = &mut self.seq;
        let order = &mut self.order;
        let capacity = self.typical16.div_ceil(16).min(self.config.max_occurrences);
        self.clock += 1;
        let clock = self.clock;
        let record = self.traces.entry(trace_id).or_insert_with(|| {
            *seq += 1;
            order.push_back((*seq, trace_id));
            Box::new(TraceRecord {
                trace_id,
                start_ns: 0,
                planned_faults: 0,
                occurrences_dropped: 0,
                spans_dei_skipped: 0,
                occurrences: Vec::with_capacity(capacity),
                lookup: None,
                mappings: StreamRewriter::new(),
                pending: Vec::new(),
                pending_messages: Vec::new(),
                created: now,
                seq: *seq,
                changed: clock,
            })
        });
        record.changed = clock;
        record
    }

    /// Drops the eviction order's entries of removed traces (a query node removes and re-absorbs every trace a
    /// shard changed, on each pull), once they outnumber the retained traces ([`stale_order::compact`]):
    /// otherwise they would stay until eviction reached them, up to `max_age` later. Called where they are made,
    /// in [`remove`](Self::remove), not on the per-span path.
    fn compact_order(&mut self) {
        let traces = &self.traces;
        stale_order::compact(&mut self.order, traces.len(), |(seq, id)| {
            traces.get(id).is_some_and(|t| t.seq == *seq)
        });
    }

    /// A trace's record.
    pub fn get(&self, trace_id: &TraceId) -> Option<&TraceRecord> {
        self.traces.get(trace_id).map(|t| &**t)
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
        let mut v: Vec<&TraceRecord> = self.traces.values().map(|t| &**t).collect();
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
                self.note_removed(id);
                // weight 1/8 for the newest; bounded, so one huge trace does not set every next size
                let n16 = t.occurrences.len().min(LINEAR_LOOKUP_MAX * 4) * 16;
                self.typical16 = (self.typical16 * 7 + n16) / 8;
                out.push(*t);
            }
        }
        out
    }

    /// Removes and returns every trace (end of an offline run).
    pub fn drain(&mut self) -> Vec<TraceRecord> {
        self.order.clear();
        let ids: Vec<TraceId> = self.traces.keys().copied().collect();
        for id in ids {
            self.note_removed(id);
        }
        self.traces.drain().map(|(_, t)| *t).collect()
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
        self.clock += 1;
        let clock = self.clock;
        self.traces.get_mut(trace_id).map(|t| {
            t.changed = clock;
            &mut **t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TraceRecord {
        let mut store = TraceStore::new(TraceStoreConfig::default());
        store.entry([1; 16], Instant::now()).clone()
    }

    fn index(n: u8) -> Index {
        Index::from_elements(vec![dei_propagator::Element::new(
            dei_propagator::ElementDigest([n; 8]),
            1,
        )])
    }

    #[test]
    fn an_occurrence_stays_compact() {
        // a store at its default limit holds 20,000 traces of a few occurrences each (issue #17's memory goal)
        assert!(size_of::<Occurrence>() <= 248, "{} bytes", size_of::<Occurrence>());
    }

    #[test]
    fn lookups_agree_before_and_after_the_hash_maps_are_built() {
        let mut t = record();
        let n = LINEAR_LOOKUP_MAX as u8 * 2;
        for i in 0..n {
            let rpc = [i, 0, 0, 0, 0, 0, 0, 1];
            assert_eq!(t.occurrence(rpc, &index(i % 5), 100), Some((i as usize, true)));
            // every occurrence so far is found again, by scan below the threshold and by map above it
            for j in 0..=i {
                let rpc = [j, 0, 0, 0, 0, 0, 0, 1];
                assert_eq!(t.position(rpc, &index(j % 5)), Some(j as usize));
                assert_eq!(t.occurrence(rpc, &index(j % 5), 100), Some((j as usize, false)));
            }
            let at_zero = (0..=i).filter(|j| j % 5 == 0).count();
            assert_eq!(t.occurrences_at(&index(0)), at_zero);
        }
        assert!(t.lookup.is_some());
        assert!(!t.contains_index(&index(9)));
        assert_eq!(t.occurrence([0; 8], &index(9), n as usize), None, "at the limit");
        t.rewrite(&index(1), &index(9));
        assert!(t.contains_index(&index(9)) && !t.contains_index(&index(1)));
        assert_eq!(t.position([1, 0, 0, 0, 0, 0, 0, 1], &index(9)), Some(1));
    }

    #[test]
    fn a_new_trace_is_sized_like_the_traces_evicted_lately() {
        let mut store = TraceStore::new(TraceStoreConfig {
            max_traces: 4,
            ..Default::default()
        });
        let now = Instant::now();
        for t in 0..64u8 {
            let trace = store.entry([t + 1; 16], now);
            assert!(
                t < 40 || trace.occurrences.capacity() == 6,
                "trace {t}: {}",
                trace.occurrences.capacity()
            );
            for i in 0..6u8 {
                trace.occurrence([i + 1, 0, 0, 0, 0, 0, 0, 1], &index(i), 100);
            }
            store.evict(now);
        }
    }

    #[test]
    fn traces_removed_and_recreated_leave_the_eviction_order_bounded() {
        let mut store = TraceStore::new(TraceStoreConfig::default());
        let now = Instant::now();
        for round in 0..20 * stale_order::SLACK {
            // what a query node does with a trace a shard changed: remove it, absorb it again
            let id = [(round % 8) as u8 + 1; 16];
            store.remove(&id);
            store.entry(id, now);
        }
        assert_eq!(store.len(), 8);
        assert!(
            store.order.len() <= 2 * 8 + stale_order::SLACK + 1,
            "{} entries",
            store.order.len()
        );
        // the live entries survived the compactions: the age limit still evicts every trace
        let evicted = store.evict(now + TraceStoreConfig::default().max_age);
        assert_eq!((evicted.len(), store.len()), (8, 0));
    }

    #[test]
    fn occurrences_grow_by_half() {
        let mut t = record();
        for i in 0..6u8 {
            t.occurrence([i, 0, 0, 0, 0, 0, 0, 1], &index(i), 100);
        }
        assert_eq!(t.occurrences.capacity(), 6);
    }
}
