//! `GET /api/v1/traces`: the retained traces, newest first, filtered on the server (service, operation,
//! status, `dei.index` prefix, duration) so that a client gets a bounded list however many are retained.

use crate::state::CollectorState;
use crate::tree::traces::TraceRecord;
use crate::views::{TraceList, TraceStatus, TraceSummary};
use dei_propagator::Index;
use serde::Deserialize;

/// Default of `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// Most traces one response lists.
pub const MAX_LIMIT: usize = 10_000;

/// The query string of `GET /api/v1/traces`.
#[derive(Debug, Default, Deserialize)]
pub struct TraceQuery {
    /// A service on any of the trace's RPCs (caller or callee), exact.
    pub service: Option<String>,
    /// Part of the signature of any of the trace's RPCs (`Bookings/Get` matches `cinema.Bookings/Get`).
    pub operation: Option<String>,
    /// `ok`, `error` (an RPC had an error) or `fault` (a fault was injected).
    pub status: Option<String>,
    /// A `dei.index`: the trace made the RPC at this index or one under it.
    pub index: Option<String>,
    /// Shortest duration, milliseconds.
    pub min_duration_ms: Option<f64>,
    /// Longest duration, milliseconds.
    pub max_duration_ms: Option<f64>,
    /// Most traces listed (default 100, at most 10 000).
    pub limit: Option<usize>,
}

/// What a trace's status must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// No RPC had an error.
    Ok,
    /// Some RPC had an error.
    Error,
    /// Some RPC had an injected fault.
    Fault,
}

/// The filters of a query, checked.
#[derive(Debug, Default)]
pub struct TraceFilter {
    service: Option<String>,
    operation: Option<String>,
    status: Option<StatusFilter>,
    index: Option<Index>,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
}

fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn duration_ns(ms: Option<f64>, name: &str) -> Result<Option<u64>, String> {
    match ms {
        None => Ok(None),
        Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(Some((ms * 1e6).round().min(u64::MAX as f64) as u64)),
        Some(ms) => Err(format!(
            "{name} must be a non-negative number of milliseconds, not {ms}"
        )),
    }
}

impl TraceFilter {
    /// Checks a query's filters: a malformed index, an unknown status or a negative or inverted duration
    /// range is an error (answered 400).
    pub fn from_query(q: &TraceQuery) -> Result<Self, String> {
        let status = match non_empty(&q.status).as_deref() {
            None => None,
            Some("ok") => Some(StatusFilter::Ok),
            Some("error") => Some(StatusFilter::Error),
            Some("fault") => Some(StatusFilter::Fault),
            Some(other) => return Err(format!("unknown status {other:?}: use ok, error or fault")),
        };
        let index = match non_empty(&q.index) {
            None => None,
            Some(s) => Some(Index::decode(&s).map_err(|e| format!("invalid index {s:?}: {e}"))?),
        };
        let min_ns = duration_ns(q.min_duration_ms, "min_duration_ms")?;
        let max_ns = duration_ns(q.max_duration_ms, "max_duration_ms")?;
        if let (Some(lo), Some(hi)) = (min_ns, max_ns)
            && lo > hi
        {
            return Err("min_duration_ms is above max_duration_ms".into());
        }
        Ok(TraceFilter {
            service: non_empty(&q.service),
            operation: non_empty(&q.operation),
            status,
            index: index.filter(|i| !i.is_root()),
            min_ns,
            max_ns,
        })
    }

    /// The filters read from the record itself (service, operation, index): checked before a summary is made.
    fn matches_record(&self, t: &TraceRecord) -> bool {
        if let Some(service) = &self.service
            && !t.occurrences.iter().any(|o| {
                [&o.client_service, &o.server_service]
                    .into_iter()
                    .flatten()
                    .any(|x| **x == **service)
            })
        {
            return false;
        }
        if let Some(op) = &self.operation
            && !t
                .occurrences
                .iter()
                .any(|o| o.signature.as_deref().is_some_and(|sig| sig.contains(op.as_str())))
        {
            return false;
        }
        self.index
            .as_ref()
            .is_none_or(|prefix| t.indexes().any(|i| i.starts_with(prefix)))
    }

    /// The filters read from the summary (status, duration).
    fn matches_summary(&self, s: &TraceSummary) -> bool {
        match self.status {
            Some(StatusFilter::Ok) if s.status != TraceStatus::Ok => return false,
            Some(StatusFilter::Error) if s.status != TraceStatus::Error => return false,
            Some(StatusFilter::Fault) if s.faults == 0 => return false,
            _ => {}
        }
        self.min_ns.is_none_or(|lo| s.duration_nano >= lo) && self.max_ns.is_none_or(|hi| s.duration_nano <= hi)
    }
}

/// The list for a query: the newest matching traces, at most `limit` (default [`DEFAULT_LIMIT`], at most
/// [`MAX_LIMIT`]), with how many matched in all.
pub fn list(a: &CollectorState, q: &TraceQuery) -> Result<TraceList, String> {
    let filter = TraceFilter::from_query(q)?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    let all = a.traces.ordered();
    let mut matched = 0;
    let mut traces = Vec::new();
    for t in all.iter().rev() {
        if !filter.matches_record(t) {
            continue;
        }
        let s = t.summary();
        if filter.matches_summary(&s) {
            matched += 1;
            if traces.len() < limit {
                traces.push(s);
            }
        }
    }
    Ok(TraceList {
        retained: all.len(),
        traces,
        matched,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Counters;
    use crate::span_record::{DeiAttributes, Kind, PeerSource, SpanRecord};
    use crate::state::StateConfig;
    use dei_propagator::{Element, ElementDigest};
    use std::sync::Arc;
    use std::time::Instant;

    fn index(path: &[u8]) -> Index {
        Index::from_elements(path.iter().map(|&n| Element::new(ElementDigest([n; 8]), 1)).collect())
    }

    /// One RPC `from → to` at `index`, `ms` long, failed when `fault` (injected) is given.
    #[allow(clippy::too_many_arguments)]
    fn rpc(
        trace: u8,
        id: u8,
        from: &str,
        to: &str,
        sig: &str,
        at: &[u8],
        ms: u64,
        fault: Option<&str>,
    ) -> Vec<SpanRecord> {
        let start = 1_000_000_000 + id as u64 * 1_000_000;
        let dei = DeiAttributes {
            index: Some(index(at)),
            signature: Some(Arc::from(sig)),
            fault: fault.map(str::to_string),
            ..Default::default()
        };
        let client = SpanRecord {
            trace_id: [trace; 16],
            span_id: [id, 1, 0, 0, 0, 0, 0, 0],
            parent_span_id: None,
            service: Arc::from(from),
            name: String::new(),
            kind: Kind::Client,
            start_ns: start,
            end_ns: start + ms * 1_000_000,
            error: fault.is_some(),
            status: Default::default(),
            peer: Some((to.to_string(), PeerSource::RpcService)),
            database: false,
            dei: dei.clone(),
        };
        let mut out = vec![client.clone()];
        if fault.is_none() {
            out.push(SpanRecord {
                span_id: [id, 2, 0, 0, 0, 0, 0, 0],
                parent_span_id: Some(client.span_id),
                service: Arc::from(to),
                kind: Kind::Server,
                error: false,
                peer: None,
                ..client
            });
        }
        out
    }

    fn state() -> CollectorState {
        let mut a = CollectorState::new(StateConfig::default(), Arc::new(Counters::default()));
        let mut spans = Vec::new();
        // trace 1: ok, 30 ms, test → users → bookings
        spans.extend(rpc(1, 1, "test", "users", "cinema.Users/Get", &[1], 30, None));
        spans.extend(rpc(1, 2, "users", "bookings", "cinema.Bookings/Get", &[1, 2], 10, None));
        // trace 2: a fault on bookings, 5 ms
        spans.extend(rpc(2, 3, "test", "users", "cinema.Users/Get", &[1], 5, None));
        spans.extend(rpc(
            2,
            4,
            "users",
            "bookings",
            "cinema.Bookings/Get",
            &[1, 2],
            1,
            Some("c"),
        ));
        // trace 3: another root, 100 ms
        spans.extend(rpc(3, 5, "test", "movies", "cinema.Movies/List", &[3], 100, None));
        a.ingest(spans, Instant::now());
        a
    }

    fn ids(a: &CollectorState, q: TraceQuery) -> Vec<u8> {
        let list = list(a, &q).expect("a valid query");
        list.traces
            .iter()
            .map(|t| hex::decode(&t.trace_id).expect("hex")[0])
            .collect()
    }

    #[test]
    fn summaries_give_times_root_services_and_status() {
        let a = state();
        let list = list(&a, &TraceQuery::default()).expect("no filter");
        assert_eq!((list.retained, list.matched, list.traces.len()), (3, 3, 3));
        let t1 = list
            .traces
            .iter()
            .find(|t| t.trace_id.starts_with("01"))
            .expect("trace 1");
        assert_eq!(t1.duration_nano, 30_000_000);
        assert_eq!(t1.root_operation.as_deref(), Some("cinema.Users/Get"));
        assert_eq!(t1.root_service.as_deref(), Some("test"));
        assert_eq!(
            t1.services,
            [Arc::from("bookings"), Arc::from("test"), Arc::from("users")]
        );
        assert_eq!((t1.status, t1.faults, t1.errors), (TraceStatus::Ok, 0, 0));
        let t2 = list
            .traces
            .iter()
            .find(|t| t.trace_id.starts_with("02"))
            .expect("trace 2");
        assert_eq!((t2.status, t2.faults, t2.errors), (TraceStatus::Error, 1, 1));
    }

    #[test]
    fn each_filter_narrows_the_list() {
        let a = state();
        let q = |f: fn(&mut TraceQuery)| {
            let mut q = TraceQuery::default();
            f(&mut q);
            q
        };
        let sorted = |mut v: Vec<u8>| {
            v.sort();
            v
        };
        assert_eq!(sorted(ids(&a, q(|q| q.service = Some("bookings".into())))), [1, 2]);
        assert_eq!(sorted(ids(&a, q(|q| q.operation = Some("Movies/".into())))), [3]);
        assert_eq!(ids(&a, q(|q| q.status = Some("fault".into()))), [2]);
        assert_eq!(ids(&a, q(|q| q.status = Some("error".into()))), [2]);
        assert_eq!(sorted(ids(&a, q(|q| q.status = Some("ok".into())))), [1, 3]);
        let prefix = index(&[1]).encode();
        let both = TraceQuery {
            index: Some(prefix),
            min_duration_ms: Some(20.0),
            ..Default::default()
        };
        assert_eq!(ids(&a, both), [1], "index prefix 1 and at least 20 ms");
        assert_eq!(sorted(ids(&a, q(|q| q.max_duration_ms = Some(30.0)))), [1, 2]);
        let limited = list(&a, &q(|q| q.limit = Some(1))).expect("limit");
        assert_eq!((limited.matched, limited.traces.len(), limited.limit), (3, 1, 1));
    }

    #[test]
    fn bad_filters_are_refused_with_a_reason() {
        for (q, why) in [
            (
                TraceQuery {
                    status: Some("late".into()),
                    ..Default::default()
                },
                "unknown status",
            ),
            (
                TraceQuery {
                    index: Some("1.nope".into()),
                    ..Default::default()
                },
                "invalid index",
            ),
            (
                TraceQuery {
                    min_duration_ms: Some(-1.0),
                    ..Default::default()
                },
                "non-negative",
            ),
            (
                TraceQuery {
                    min_duration_ms: Some(5.0),
                    max_duration_ms: Some(1.0),
                    ..Default::default()
                },
                "above",
            ),
        ] {
            let e = TraceFilter::from_query(&q).expect_err(why);
            assert!(e.contains(why), "{e}");
        }
    }
}
