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

static COUNTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
static LAST_LOG: Mutex<[Option<(Instant, u64)>; 3]> = Mutex::new([None; 3]);

/// Counts a rejection and logs it unless one from the same source was logged within the last 10 seconds.
pub fn record(source: Source, error: &dyn fmt::Display) {
    let total = COUNTS[source.slot()].fetch_add(1, Ordering::Relaxed) + 1;
    let mut last = LAST_LOG.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    let slot = &mut last[source.slot()];
    let due = slot.is_none_or(|(at, _)| now.duration_since(at) >= LOG_INTERVAL);
    if due {
        let suppressed = slot.map_or(0, |(_, logged_total)| total - logged_total - 1);
        *slot = Some((now, total));
        tracing::warn!(
            source = source.name(),
            total,
            suppressed,
            "dei: rejected malformed {} value, treated as absent: {error}",
            source.name()
        );
    }
}

/// How many values from `source` were rejected in this process so far.
pub fn rejected_total(source: Source) -> u64 {
    COUNTS[source.slot()].load(Ordering::Relaxed)
}

/// Rejections from every source, as `(name, count)` pairs.
pub fn snapshot() -> Vec<(&'static str, u64)> {
    Source::ALL.iter().map(|s| (s.name(), rejected_total(*s))).collect()
}
