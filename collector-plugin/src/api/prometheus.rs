//! Prometheus text exposition: the servicegraph connector's metric names plus the collector's counters.

use crate::counters::CountersSnapshot;
use crate::forward::QueueDepth;
use crate::graph::histogram::{DEFAULT_BUCKETS, Histogram};
use crate::state::CollectorState;
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn hist(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut cum = 0u64;
    for (i, b) in DEFAULT_BUCKETS.iter().enumerate() {
        cum += h.counts[i];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Default of [`render`]'s `max_histogram_edges` (`--metrics-max-histogram-edges`).
pub const DEFAULT_MAX_HISTOGRAM_EDGES: usize = 500;

/// Renders the graph metrics, tree gauges and counters. The edges are the merged ones
/// ([`crate::graph::ServiceGraph::merged_edges`], as `/api/v1/graph` shows them): a call that failed before
/// reaching a service counts on the edge to that service (`connection_type=""`), not to a virtual node named
/// by its `rpc.service`, once that service was seen serving it. Every edge gets its request and failure counters;
/// the latency histograms (34 series per edge) go only to the `max_histogram_edges` edges with the most
/// requests, so that a scrape stays bounded, and the gauge `dei_metrics_histogram_edges_omitted` says how
/// many edges were left out.
pub fn render(
    a: &CollectorState,
    counters: &CountersSnapshot,
    queue: QueueDepth,
    max_histogram_edges: usize,
    waiting: usize,
) -> String {
    let mut out = String::new();
    let merged = a.graph.merged_edges();
    let edges: Vec<(&crate::graph::EdgeKey, &crate::graph::EdgeStats)> =
        merged.iter().map(|m| (&m.key, &m.stats)).collect();
    let with_histograms: std::collections::HashSet<usize> = {
        let mut by_requests: Vec<usize> = (0..edges.len()).collect();
        by_requests.sort_by(|&x, &y| edges[y].1.requests.cmp(&edges[x].1.requests).then(x.cmp(&y)));
        by_requests.truncate(max_histogram_edges);
        by_requests.into_iter().collect()
    };
    let omitted = (edges.len() - with_histograms.len()) as u64;
    let labels: Vec<String> = edges
        .iter()
        .map(|(k, _)| {
            format!(
                "client=\"{}\",server=\"{}\",connection_type=\"{}\"",
                esc(&k.client),
                esc(&k.server),
                k.connection_type.label()
            )
        })
        .collect();
    out.push_str("# HELP traces_service_graph_request_total Total count of requests between two nodes\n");
    out.push_str("# TYPE traces_service_graph_request_total counter\n");
    for ((_, e), l) in edges.iter().zip(&labels) {
        let _ = writeln!(out, "traces_service_graph_request_total{{{l}}} {}", e.requests);
    }
    out.push_str("# HELP traces_service_graph_request_failed_total Total count of failed requests between two nodes\n");
    out.push_str("# TYPE traces_service_graph_request_failed_total counter\n");
    for ((_, e), l) in edges.iter().zip(&labels) {
        let _ = writeln!(out, "traces_service_graph_request_failed_total{{{l}}} {}", e.failed);
    }
    out.push_str("# HELP traces_service_graph_request_server_seconds Time for a request between two nodes as seen from the server\n");
    out.push_str("# TYPE traces_service_graph_request_server_seconds histogram\n");
    let kept = || {
        edges
            .iter()
            .zip(&labels)
            .enumerate()
            .filter(|(i, _)| with_histograms.contains(i))
            .map(|(_, x)| x)
    };
    for ((_, e), l) in kept() {
        hist(
            &mut out,
            "traces_service_graph_request_server_seconds",
            l,
            &e.server_seconds,
        );
    }
    out.push_str("# HELP traces_service_graph_request_client_seconds Time for a request between two nodes as seen from the client\n");
    out.push_str("# TYPE traces_service_graph_request_client_seconds histogram\n");
    for ((_, e), l) in kept() {
        hist(
            &mut out,
            "traces_service_graph_request_client_seconds",
            l,
            &e.client_seconds,
        );
    }
    out.push_str("# HELP traces_service_graph_unpaired_spans_total Spans that expired without their peer\n");
    out.push_str("# TYPE traces_service_graph_unpaired_spans_total counter\n");
    let _ = writeln!(
        out,
        "traces_service_graph_unpaired_spans_total {}",
        counters.graph_unpaired_expired
    );
    out.push_str("# HELP traces_service_graph_dropped_spans_total Spans evicted from the full pairing store\n");
    out.push_str("# TYPE traces_service_graph_dropped_spans_total counter\n");
    let _ = writeln!(
        out,
        "traces_service_graph_dropped_spans_total {}",
        counters.graph_store_evicted
    );
    for (name, value, help) in counters.entries() {
        let _ = writeln!(out, "# HELP dei_collector_{name}_total {help}");
        let _ = writeln!(out, "# TYPE dei_collector_{name}_total counter");
        let _ = writeln!(out, "dei_collector_{name}_total {value}");
    }
    let gauges = [
        (
            "dei_tree_nodes",
            "prefix tree nodes (root included)",
            a.tree.len() as u64,
        ),
        (
            "dei_traces_retained",
            "traces retained for per-trace analyses",
            a.traces.len() as u64,
        ),
        (
            "dei_graph_edges",
            "service graph edges (virtual nodes merged)",
            edges.len() as u64,
        ),
        (
            "dei_graph_waiting_spans",
            "spans waiting for their peer",
            waiting as u64,
        ),
        (
            "dei_forward_queue_spans",
            "spans in the forwarding queue, counting the batches workers are sending",
            queue.spans as u64,
        ),
        (
            "dei_forward_queue_bytes",
            "request bytes in the forwarding queue, counting the batches workers are sending",
            queue.bytes as u64,
        ),
        (
            "dei_metrics_histogram_edges_omitted",
            "edges whose latency histograms this scrape left out (--metrics-max-histogram-edges)",
            omitted,
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
    out
}
