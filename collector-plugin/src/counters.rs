//! Process-wide counters: what was received, rejected, dropped and evicted.
//!
//! Every rejection of bad input and every bounded-memory decision increments one of these, so that nothing is
//! lost silently. They are exported as Prometheus counters by the API layer (`/metrics`) and as JSON by the
//! API (`GET /api/v1/stats`).

use serde::{Deserialize, Serialize};
#[cfg(feature = "server")]
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($(#[$doc:meta] $name:ident),* $(,)?) => {
        /// Monotonic counters shared by every part of the collector.
        #[cfg(feature = "server")]
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[$doc] pub $name: AtomicU64,)*
        }

        /// A point-in-time copy of [`Counters`].
        #[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
        pub struct CountersSnapshot {
            $(#[$doc] pub $name: u64,)*
        }

        #[cfg(feature = "server")]
        impl Counters {
            /// Copies every counter.
            pub fn snapshot(&self) -> CountersSnapshot {
                CountersSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }

            /// Sets every counter to `s`'s value (a query node shows its shards' sums).
            pub(crate) fn store(&self, s: &CountersSnapshot) {
                $(self.$name.store(s.$name, Ordering::Relaxed);)*
            }
        }

        #[cfg(feature = "server")]
        impl CountersSnapshot {
            /// `(name, value, help)` for every counter, in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, u64, &'static str)> {
                vec![$((stringify!($name), self.$name, counter_help(stringify!($name))),)*]
            }

            /// Adds `other`'s counts to these.
            pub fn add(&mut self, other: &CountersSnapshot) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

counters! {
    /// Export requests accepted (gRPC and HTTP).
    requests_accepted,
    /// Spans in accepted export requests.
    spans_received,
    /// Requests rejected because the body was not valid protobuf.
    rejected_bad_protobuf,
    /// Requests rejected because the body was not valid OTLP/JSON.
    rejected_bad_json,
    /// Requests rejected for an unsupported content type or content encoding.
    rejected_content_type,
    /// Requests rejected because the (decompressed) body exceeded the size limit, or its decoded view would.
    rejected_too_large,
    /// Requests rejected because a span had a malformed trace or span id.
    rejected_bad_ids,
    /// Requests rejected in strict mode because of wrongly typed `dei.*` attributes.
    rejected_bad_attributes,
    /// Requests rejected for a compression encoding other than gzip (`Content-Encoding`, `grpc-encoding`).
    rejected_unsupported_encoding,
    /// Requests rejected because their gzip data was corrupt.
    rejected_bad_gzip,
    /// gRPC requests rejected for broken framing (compressed flag without `grpc-encoding`, truncated frame).
    rejected_bad_framing,
    /// Requests whose body never arrived in full: the client disconnected or stalled past the read timeout.
    rejected_incomplete_body,
    /// Requests refused (retryable: HTTP 503, gRPC `UNAVAILABLE`) because the forwarding queue was full.
    rejected_queue_full,
    /// Requests refused (retryable: HTTP 503, gRPC `UNAVAILABLE`): the cap on buffered request bytes was hit.
    rejected_overloaded,
    /// Spans in refused (retryable) requests: the client was told to send them again.
    spans_refused,
    /// Individual `dei.*` attributes ignored because of a wrong type or a malformed value.
    attributes_rejected,
    /// Spans whose DEI data was skipped (lenient mode) for a malformed `dei.*` attribute (still forwarded).
    spans_dei_skipped,
    /// Connections closed because the limit of concurrent connections was reached.
    connections_refused,
    /// Connections closed because they sent nothing for the read timeout while the server was reading.
    connections_timed_out,
    /// API requests refused (403) because their `Host` named neither an IP, `localhost` nor an allowed host.
    api_host_refused,
    /// Batches put on the forwarding queue.
    forward_batches_queued,
    /// Spans delivered downstream.
    forward_spans_sent,
    /// Batches delivered downstream.
    forward_batches_sent,
    /// Export requests delivered downstream (each carries one or more batches, combined).
    forward_requests_sent,
    /// Failed downstream attempts that were retried.
    forward_retries,
    /// Combined export requests the downstream rejected, then sent again batch by batch.
    forward_requests_split,
    /// Spans dropped because the downstream rejected them (a refused request's, or a partial success's).
    forward_spans_dropped_rejected,
    /// Spans still queued when shutdown's drain deadline passed.
    forward_spans_dropped_shutdown,
    /// Client or server spans that expired unpaired from the service graph's store.
    graph_unpaired_expired,
    /// Spans evicted from the full pairing store before their peer arrived.
    graph_store_evicted,
    /// Edges evicted (least recently updated) to stay under the edge limit.
    graph_edges_evicted,
    /// `rpc.service` names forgotten (least recently served) to stay under the edge limit: no longer merged.
    graph_rpc_services_evicted,
    /// Prefix-tree nodes evicted (oldest leaves) to stay under the node limit.
    tree_nodes_evicted,
    /// Distinct call stacks whose readable frames were not kept: the stack dictionary was full.
    stacks_over_limit,
    /// Traces evicted from the per-trace store (by count or by age).
    traces_evicted,
    /// Spans not added to a trace because it had reached its occurrence limit.
    trace_occurrences_dropped,
    /// Preliminary (stream) indexes rewritten to their final form.
    preliminary_rewritten,
    /// Spans under preliminary indexes whose mapping never arrived (recorded under the preliminary index).
    preliminary_unresolved,
    /// Preliminary→final mappings ignored because they were malformed.
    preliminary_mappings_rejected,
    /// `dei.stream.message` events ignored past the per-span limit.
    preliminary_messages_dropped,
    /// Offline input lines or documents that could not be parsed.
    offline_bad_documents,
}

#[cfg(feature = "server")]
fn counter_help(name: &str) -> &'static str {
    match name {
        "requests_accepted" => "OTLP export requests accepted",
        "spans_received" => "spans in accepted export requests",
        "attributes_rejected" => "Attributes of the dei.* contract ignored for a wrong type or malformed value",
        "spans_dei_skipped" => "spans whose DEI data was skipped for a malformed dei.* attribute",
        "spans_refused" => "spans in requests refused as retryable (queue or buffer full)",
        "connections_refused" => "connections closed at the concurrent-connection limit",
        "connections_timed_out" => "connections closed after the read timeout",
        n if n.starts_with("rejected_") => "OTLP export requests rejected, by reason",
        n if n.starts_with("forward_") => "forwarding to the downstream OTLP endpoint",
        n if n.starts_with("graph_") => "service-graph pairing store and edges",
        n if n.starts_with("tree_") || n.starts_with("trace") => "DEI prefix tree and per-trace store",
        "stacks_over_limit" => "call stacks whose frames were not kept: the stack dictionary was full",
        n if n.starts_with("preliminary_") => "stream index rewriting (preliminary to final)",
        _ => "dei-collector counter",
    }
}

#[cfg(feature = "server")]
impl Counters {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Logs at most one message per interval for a class of event (bad input must not flood the log).
#[cfg(feature = "server")]
#[derive(Debug)]
pub struct RateLimitedLog {
    interval: std::time::Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
    suppressed: AtomicU64,
}

#[cfg(feature = "server")]
impl RateLimitedLog {
    /// A limiter that lets one message through per `interval`.
    pub fn new(interval: std::time::Duration) -> Self {
        RateLimitedLog {
            interval,
            last: std::sync::Mutex::new(None),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Logs `msg` at WARN unless a message was logged less than one interval ago.
    pub fn warn(&self, msg: &str) {
        let now = std::time::Instant::now();
        let mut last = match self.last.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if last.is_none_or(|t| now.duration_since(t) >= self.interval) {
            *last = Some(now);
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(suppressed, "{msg}");
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
