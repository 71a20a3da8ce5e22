//! Counted, rate-limited reporting of rejected input and of what the layers declined to do.
//!
//! Bad input never fails a request: a malformed `dei` header, baggage entry or fault plan is treated as
//! absent. Each rejection is counted per [`Source`], and logged at most once per interval per source (with the
//! number suppressed since), so a flood of bad requests does not flood the log.
//!
//! The same goes for each [`Event`]: a value that was well formed but not acted on, by policy (a fault plan
//! from a caller that this service does not trust) or by a limit (a full baggage, the depth limit, the latency
//! cap). Nothing is dropped without a count.
//!
//! The counters are process-wide: [`rejected_total`], [`event_total`], and [`snapshot`] for all of them.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where a rejected value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The `dei` header or metadata entry.
    Header,
    /// The `dei` baggage entry.
    Baggage,
    /// The `dei-faults` fault plan (header or baggage entry).
    FaultPlan,
}

impl Source {
    const ALL: [Source; 3] = [Source::Header, Source::Baggage, Source::FaultPlan];

    fn slot(self) -> usize {
        self as usize
    }

    /// A short stable name.
    pub fn name(self) -> &'static str {
        match self {
            Source::Header => "header",
            Source::Baggage => "baggage",
            Source::FaultPlan => "fault_plan",
        }
    }
}

/// A well-formed value that was not acted on, or not as asked; each is counted like a rejection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A `dei` or `dei-faults` baggage entry left out on inject because the baggage was at its limits (64
    /// entries, 8192 bytes); the header carrier, when configured, still carries the value.
    BaggageFull,
    /// A fault plan that came with a request was dropped: the service does not take plans from its callers
    /// (`Faults::Refuse` in `dei-instrumentation`). The request is served; the plan is neither applied nor
    /// relayed.
    FaultPlanDropped,
    /// A plan entry named a call of a service that does not apply plans (`Faults::Refuse` or
    /// `Faults::Relay`): the call was sent as usual.
    FaultNotApplied,
    /// A latency fault longer than the service's cap was shortened to the cap. Also counted, once per call
    /// injected, when the propagator sends a fault plan (built by hand: [`FaultPlan::new`](crate::FaultPlan::new))
    /// with a latency the wire does not carry: longer than 999,999 ms, written as `l999999`, or with a part finer
    /// than a millisecond, which is dropped ([`MAX_LATENCY_MS`](crate::fault::MAX_LATENCY_MS)); and once per text
    /// of such a plan written as a record of it ([`FaultPlan::encode`](crate::FaultPlan::encode): a span's
    /// `dei.fault.plan`, a search report's plan; its `Display`, which log lines use, counts nothing).
    LatencyClamped,
    /// An index could not be extended because it was at the depth limit (64 elements): the call carries its
    /// scope's index unchanged, and no fault applies to it. Also counted when the propagator is given an index
    /// beyond its limits to inject (64 elements and 1473 bytes by default; built by hand through the public
    /// API): it writes the index's first elements within them (see [`crate::DeiPropagator`]).
    DepthLimited,
    /// A server layer in `Incoming::Restart` mode (a trust boundary) dropped a request's `dei` or `dei-faults`
    /// values and served it as a root.
    DroppedAtEdge,
    /// A stream message's count would pass the largest count (4294967295): only a stream index whose count is
    /// near it (a crafted incoming one) gets there. The message is served under the largest count, as every
    /// later message of the stream is, so their calls can share indexes
    /// ([`Index::stream_message`](crate::Index::stream_message)).
    StreamCountOverflow,
    /// A fault plan the propagator was given to inject (built by hand: [`FaultPlan::new`](crate::FaultPlan::new)
    /// checks nothing) is one that every receiver with its limits rejects whole: more than 64 entries, more than
    /// 4096 bytes, an entry's index deeper than 64 elements, an invalid fault, an index named twice
    /// ([`FaultPlan::check_with`](crate::FaultPlan::check_with)). It is not sent, on that call or any: no callee
    /// carries out any of its faults (a part of it would test other faults than asked). The call's index is
    /// sent as usual. The plan is not taken out of the context, which has no wire: the entries naming the
    /// sending process's own calls are still carried out where its layers apply plans (`dei-instrumentation`'s
    /// `Faults::Accept`), if their faults are valid ones, and those alone: this count is the sign that no other
    /// part of the plan was.
    FaultPlanNotSent,
    /// A request scope issued the 4294967296th index (or a later one) for one invocation signature: a count has
    /// no value past 4294967295, so the call carries count 4294967295, the index of the 4294967295th call, as
    /// every later one does. Each such index is flagged ambiguous
    /// ([`IssuedIndex::is_ambiguous`](crate::IssuedIndex::is_ambiguous)), since calls share it.
    CountSaturated,
    /// The propagator was given an index to inject with an element whose count is 0 (built by hand:
    /// [`Element::new`](crate::Element::new) and [`RequestScope::enter`](crate::RequestScope::enter) check nothing;
    /// a scope counts from 1): every receiver rejects such an index whole and serves the call as a new root, so
    /// the propagator writes the index's elements before that one, as it cuts an index beyond its limits
    /// ([`Event::DepthLimited`]). The callee serves the call under that prefix, which names an outer call.
    ZeroCount,
}

impl Event {
    const ALL: [Event; 10] = [
        Event::BaggageFull,
        Event::FaultPlanDropped,
        Event::FaultNotApplied,
        Event::LatencyClamped,
        Event::DepthLimited,
        Event::DroppedAtEdge,
        Event::StreamCountOverflow,
        Event::FaultPlanNotSent,
        Event::CountSaturated,
        Event::ZeroCount,
    ];

    fn slot(self) -> usize {
        Source::ALL.len() + self as usize
    }

    /// A short stable name.
    pub fn name(self) -> &'static str {
        match self {
            Event::BaggageFull => "baggage_full",
            Event::FaultPlanDropped => "fault_plan_dropped",
            Event::FaultNotApplied => "fault_not_applied",
            Event::LatencyClamped => "latency_clamped",
            Event::DepthLimited => "depth_limited",
            Event::DroppedAtEdge => "dropped_at_edge",
            Event::StreamCountOverflow => "stream_count_overflow",
            Event::FaultPlanNotSent => "fault_plan_not_sent",
            Event::CountSaturated => "count_saturated",
            Event::ZeroCount => "zero_count",
        }
    }
}

const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Counter and log slots: one per [`Source`], then one per [`Event`].
const SLOTS: usize = Source::ALL.len() + Event::ALL.len();

static COUNTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static LAST_LOG: Mutex<[Option<(Instant, u64)>; SLOTS]> = Mutex::new([None; SLOTS]);

/// Counts one event in `slot`; returns `Some((total, suppressed))` when it is due to be logged.
fn count_and_check(slot: usize) -> Option<(u64, u64)> {
    let total = COUNTS[slot].fetch_add(1, Ordering::Relaxed) + 1;
    let mut last = LAST_LOG.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    let entry = &mut last[slot];
    let due = entry.is_none_or(|(at, _)| now.duration_since(at) >= LOG_INTERVAL);
    if !due {
        return None;
    }
    let suppressed = entry.map_or(0, |(_, logged_total)| total.saturating_sub(logged_total + 1));
    *entry = Some((now, total));
    Some((total, suppressed))
}

/// Counts a rejection and logs it unless one from the same source was logged within the last 10 seconds.
pub fn record(source: Source, error: &dyn fmt::Display) {
    if let Some((total, suppressed)) = count_and_check(source.slot()) {
        tracing::warn!(
            source = source.name(),
            total,
            suppressed,
            "dei: rejected malformed {} value, treated as absent: {error}",
            source.name()
        );
    }
}

/// Counts an [`Event`] and logs it unless one of the same kind was logged within the last 10 seconds (a
/// warning, except [`Event::DroppedAtEdge`]: dropping at a trust boundary is what the operator asked for, so
/// it is logged at debug level).
pub fn record_event(event: Event, detail: &dyn fmt::Display) {
    if let Some((total, suppressed)) = count_and_check(event.slot()) {
        if event == Event::DroppedAtEdge {
            tracing::debug!(event = event.name(), total, suppressed, "dei: {detail}");
        } else {
            tracing::warn!(event = event.name(), total, suppressed, "dei: {detail}");
        }
    }
}

/// Counts a `dei` or `dei-faults` baggage entry that could not be written because the context's baggage was
/// at its limits (64 entries, 8192 bytes), and logs it at most once per 10 seconds ([`Event::BaggageFull`]).
pub fn record_baggage_full(key: &str, value_len: usize) {
    record_event(
        Event::BaggageFull,
        &format_args!("baggage is full, the {key} entry of {value_len} bytes was not written"),
    );
}

/// How many `dei`/`dei-faults` baggage entries were dropped on inject because the baggage was full.
pub fn baggage_full_total() -> u64 {
    event_total(Event::BaggageFull)
}

/// How many values from `source` were rejected in this process so far.
pub fn rejected_total(source: Source) -> u64 {
    COUNTS[source.slot()].load(Ordering::Relaxed)
}

/// How many times `event` happened in this process so far.
pub fn event_total(event: Event) -> u64 {
    COUNTS[event.slot()].load(Ordering::Relaxed)
}

/// Every counter, rejections by source then events, as `(name, count)` pairs.
pub fn snapshot() -> Vec<(&'static str, u64)> {
    (Source::ALL.iter().map(|s| (s.name(), rejected_total(*s))))
        .chain(Event::ALL.iter().map(|e| (e.name(), event_total(*e))))
        .collect()
}
