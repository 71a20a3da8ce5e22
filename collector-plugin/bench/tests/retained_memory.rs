//! What the analysis holds in memory at saturation (issue #17's peak-RSS goal): the load generator's requests
//! go through the collector's real ingest path, as fast as one thread sends them, and a counting allocator
//! measures the heap. Counts of requested bytes, not timings: the figures are the same on every run of the same
//! code (the allocator's size classes come on top of them).

use bytes::Bytes;
use dei_collector::server::{Collector, Counters, IngestConfig, StateConfig};
use dei_collector_bench::loadgen::{SPANS_PER_TRACE, template};
use std::sync::Arc;

/// The system allocator wrapped by `stats_alloc`, which counts the bytes every allocation asks for.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Live heap bytes now, as requested (`stats_alloc` counts a reallocation's growth in `bytes_allocated` and
/// its shrinking in `bytes_deallocated`).
fn live() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn mib(bytes: isize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

const TRACES_PER_REQUEST: usize = 40;

/// Sends requests `first..first + n` of the load generator's, each with its own trace ids, as it does.
async fn send(collector: &Collector, first: u64, n: u64) {
    let (body, offsets) = template(TRACES_PER_REQUEST);
    for id in first..first + n {
        let mut body = body.clone();
        for &o in &offsets {
            body[o..o + 8].copy_from_slice(&id.to_be_bytes());
        }
        let accepted = collector.accept_protobuf(Bytes::from(body)).await.expect("accepted");
        assert_eq!(accepted.spans, TRACES_PER_REQUEST * SPANS_PER_TRACE);
    }
}

/// The heap a collector with these limits holds after `requests` requests, and after twice as many.
async fn held(state: StateConfig, requests: u64) -> (isize, isize) {
    let start = live();
    let collector = Collector::new(IngestConfig::default(), state, None, Arc::new(Counters::default()));
    send(&collector, 1, requests).await;
    let once = live() - start;
    send(&collector, 1 + requests, requests).await;
    let twice = live() - start;
    let stats = collector.stats();
    assert_eq!(stats.graph_waiting_spans, 0, "every client span met its server span");
    assert_eq!(
        stats.counters.spans_received,
        2 * requests * (TRACES_PER_REQUEST * SPANS_PER_TRACE) as u64
    );
    drop(collector);
    (once, twice)
}

#[tokio::test]
async fn the_analysis_holds_what_its_limits_say_and_no_more() {
    let full = StateConfig::default();
    let max_traces = full.traces.max_traces;
    let mut half = StateConfig::default();
    half.traces.max_traces = max_traces / 2;
    // 2 × 2 × max_traces traces: every store fills and then evicts as many traces as it holds
    let requests = (2 * max_traces / TRACES_PER_REQUEST) as u64;
    let (full_once, full_twice) = held(full, requests).await;
    let (_, half_twice) = held(half, requests).await;
    let per_trace = (full_twice - half_twice) as f64 / (max_traces - max_traces / 2) as f64;
    let spans = requests * (TRACES_PER_REQUEST * SPANS_PER_TRACE) as u64;
    eprintln!(
        "{max_traces} retained traces: {:.1} MiB after {spans} spans, {:.1} MiB after {} ({:.0} bytes per \
         retained trace; {} retained traces: {:.1} MiB)",
        mib(full_once),
        mib(full_twice),
        2 * spans,
        per_trace,
        max_traces / 2,
        mib(half_twice)
    );
    // Once the stores are full, more spans must not cost more memory. Before the pairing store's expiry order
    // was compacted, it kept an entry for every span whose peer had already arrived, until the TTL: these
    // runs took 47 → 60 MiB, and a collector at 600,000 spans/s held 600,000 such entries.
    let growth = full_twice - full_once;
    assert!(
        growth < full_once / 20,
        "{:.1} MiB more after another {spans} spans into full stores",
        mib(growth)
    );
    // The load generator's trace (6 RPCs, 12 spans) in the trace store: 6 occurrences, their record and the
    // store's maps. 1,875 bytes when this test was written.
    assert!(per_trace < 2_200.0, "{per_trace:.0} bytes per retained trace");
    // The default limits at saturation: 36.1 MiB when this test was written.
    assert!(full_twice < 40 << 20, "{:.1} MiB", mib(full_twice));
}
