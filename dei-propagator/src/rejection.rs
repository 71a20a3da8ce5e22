//! Counted, rate-limited reporting of rejected input.
//!
//! Bad input never fails a request: a malformed `dei` header, baggage entry or fault plan is treated as
//! absent. Each rejection is counted per source, and logged at most once per interval per source (with the
//! number suppressed since), so a flood of bad requests does not flood the log.

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
    /// The `dei-faults` fault plan.
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

const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Log slots: one per [`Source`], then one for baggage entries dropped on inject.
const SLOTS: usize = 4;
const BAGGAGE_FULL_SLOT: usize = 3;

static COUNTS: [AtomicU64; SLOTS] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];
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

/// Counts a `dei` or `dei-faults` baggage entry that could not be written because the context's baggage was
/// at its limits (64 entries, 8192 bytes), and logs it at most once per 10 seconds. The header carrier, when
/// configured, still carries the value.
pub fn record_baggage_full(key: &str, value_len: usize) {
    if let Some((total, suppressed)) = count_and_check(BAGGAGE_FULL_SLOT) {
        tracing::warn!(
            key,
            value_len,
            total,
            suppressed,
            "dei: baggage is full, the {key} entry of {value_len} bytes was not written"
        );
    }
}

/// How many `dei`/`dei-faults` baggage entries were dropped on inject because the baggage was full.
pub fn baggage_full_total() -> u64 {
    COUNTS[BAGGAGE_FULL_SLOT].load(Ordering::Relaxed)
}

/// How many values from `source` were rejected in this process so far.
pub fn rejected_total(source: Source) -> u64 {
    COUNTS[source.slot()].load(Ordering::Relaxed)
}

/// Rejections from every source, as `(name, count)` pairs.
pub fn snapshot() -> Vec<(&'static str, u64)> {
    Source::ALL.iter().map(|s| (s.name(), rejected_total(*s))).collect()
}
