//! The trace view (`GET /api/v1/traces/{id}`) of a trace whose RPCs share indexes (collisions), with the real
//! binary: each RPC appears once, so the view grows with the trace, not with the number of colliding
//! occurrences to the power of the depth.

mod common;

use common::CollectorProcess;
use serde_json::{Value, json};

/// A client span of `trace_id` at `index` (wire form), with `dei.count` as given if given (a string is
/// malformed).
fn client_span(trace_id: &str, n: u64, index: &str, count: Option<Value>) -> Value {
    let mut attributes = vec![
        json!({"key": "dei.index", "value": {"stringValue": index}}),
        json!({"key": "dei.signature", "value": {"stringValue": "a.B/C"}}),
    ];
    if let Some(count) = count {
        attributes.push(json!({"key": "dei.count", "value": count}));
    }
    json!({
        "traceId": trace_id,
        "spanId": format!("{n:016x}"),
        "name": "s",
        "kind": 3,
        "startTimeUnixNano": (1_700_000_000_000_000_000u64 + n).to_string(),
        "endTimeUnixNano": (1_700_000_000_000_001_000u64 + n).to_string(),
        "attributes": attributes,
    })
}

/// The spans of a trace of `levels` nested indexes with `k` client spans (distinct span ids) at each: every
/// level's occurrences collide.
fn colliding(levels: usize, k: usize, trace_id: &str) -> Vec<Value> {
    let mut spans = Vec::new();
    let mut n = 1u64;
    for depth in 1..=levels {
        let index = format!("1{}", ".AAAAAAAAAAA1".repeat(depth));
        for _ in 0..k {
            n += 1;
            spans.push(client_span(trace_id, n, &index, None));
        }
    }
    spans
}

/// Exports `spans` as one OTLP/JSON request of service `x` to the collector's HTTP port; it must be accepted.
async fn export(http: std::net::SocketAddr, spans: Vec<Value>) {
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "x"}}]},
        "scopeSpans": [{"spans": spans}],
    }]});
    let r = reqwest::Client::new()
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("export");
    assert!(r.status().is_success(), "{}", r.status());
}

/// Nodes in a view's tree, and its depth.
fn count(nodes: &[Value], depth: usize) -> (usize, usize) {
    nodes.iter().fold((0, depth), |(n, d), node| {
        let children = node["children"].as_array().map(Vec::as_slice).unwrap_or_default();
        let (cn, cd) = count(children, depth + 1);
        (n + 1 + cn, d.max(cd))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_occurrences_appear_once_in_the_trace_view() {
    let c = CollectorProcess::start(&[]);
    let trace_id = "0102030405060708090a0b0c0d0e0f12";
    export(c.http, colliding(8, 3, trace_id)).await;
    let view = c.get_json(&format!("/api/v1/traces/{trace_id}"));
    assert_eq!(view["rpcs"], 24, "{}", view["rpcs"]);
    let tree = view["tree"].as_array().expect("tree");
    assert_eq!(tree.len(), 3, "the three top-level RPCs");
    // 24 RPCs, each once (it was 3 + 9 + … + 3^8 = 9 840 nodes), under the first of each level
    assert_eq!(count(tree, 0), (24, 8));
    let first = &tree[0];
    assert_eq!(first["children"].as_array().map(Vec::len), Some(3), "{first}");
    assert!(
        tree[1..]
            .iter()
            .all(|t| t["children"].as_array().is_some_and(Vec::is_empty)),
        "the other occurrences of an index have no children"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_view_counts_spans_dropped_past_the_cap_and_spans_whose_dei_data_was_skipped() {
    let shard = CollectorProcess::start(&["--max-trace-rpcs", "3"]);
    let trace_id = "0102030405060708090a0b0c0d0e0f13";
    // five RPCs at distinct indexes (two past the cap of 3), and one whose dei.count is not an int
    let mut spans: Vec<Value> = "AEIMQ"
        .chars()
        .zip(1u64..)
        .map(|(last, n)| {
            client_span(
                trace_id,
                n,
                &format!("1.AAAAAAAAAA{last}1"),
                Some(json!({"intValue": "1"})),
            )
        })
        .collect();
    spans.push(client_span(
        trace_id,
        9,
        "1.AAAAAAAAAAU1",
        Some(json!({"stringValue": "x"})),
    ));
    export(shard.http, spans).await;
    let view = shard.get_json(&format!("/api/v1/traces/{trace_id}"));
    assert_eq!(view["rpcs"], 3, "{view:#}");
    assert_eq!(view["occurrences_dropped"], 2, "{view:#}");
    assert_eq!(view["spans_dei_skipped"], 1, "{view:#}");
    // the view parses with the type a client reads it with
    let typed: dei_collector::views::TraceView = serde_json::from_value(view.clone()).expect("a TraceView");
    assert_eq!((typed.occurrences_dropped, typed.spans_dei_skipped), (2, 1));
    // the trace list says so too, so that an incomplete trace shows before it is opened
    let listed = |list: &Value| {
        list["traces"]
            .as_array()
            .and_then(|traces| traces.iter().find(|t| t["trace_id"] == trace_id))
            .map(|t| (t["occurrences_dropped"].clone(), t["spans_dei_skipped"].clone()))
    };
    let list = shard.get_json("/api/v1/traces");
    assert_eq!(listed(&list), Some((json!(2), json!(1))), "{list:#}");
    let counters = &shard.get_json("/api/v1/stats")["counters"];
    assert_eq!(counters["trace_occurrences_dropped"], 2, "{counters:#}");
    assert_eq!(counters["spans_dei_skipped"], 1, "{counters:#}");

    // a query node's lookup gives the shard's view, and its merged state (what a query node above it pulls)
    // keeps the counts
    let q = common::QueryNodeProcess::start(&[format!("http://{}", shard.api)], &[]);
    let through = common::get_json(q.api, &format!("/api/v1/traces/{trace_id}"));
    assert_eq!(through, view);
    let merged = common::eventually(std::time::Duration::from_secs(10), || {
        let snapshot = common::get_json(q.api, "/api/v1/snapshot");
        snapshot["traces"].as_array().is_some_and(|traces| {
            traces
                .iter()
                .any(|t| t["trace_id"] == trace_id && t["occurrences_dropped"] == 2 && t["spans_dei_skipped"] == 1)
        })
    });
    assert!(merged, "{:#}", common::get_json(q.api, "/api/v1/snapshot")["traces"]);
    let list = common::get_json(q.api, "/api/v1/traces");
    assert_eq!(
        listed(&list),
        Some((json!(2), json!(1))),
        "the query node's list: {list:#}"
    );
}

/// `dei-collector query --max-trace-rpcs` bounds the RPCs its merged view keeps per trace: a trace of 5 RPCs
/// on a shard that keeps them all is listed by a query node with a cap of 3 with 3 RPCs and the spans of the
/// other 2 counted (`occurrences_dropped`), not cut silently; the trace's own view is still the shard's,
/// whole. A cap of 0 is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_nodes_cap_of_rpcs_per_trace_is_counted_on_the_merged_trace() {
    let shard = CollectorProcess::start(&["--max-trace-rpcs", "100"]);
    let trace_id = "0102030405060708090a0b0c0d0e0f14";
    let spans = "AEIMQ"
        .chars()
        .zip(1u64..)
        .map(|(last, n)| client_span(trace_id, n, &format!("1.AAAAAAAAAA{last}1"), None))
        .collect();
    export(shard.http, spans).await;
    let q = common::QueryNodeProcess::start(&[format!("http://{}", shard.api)], &["--max-trace-rpcs", "3"]);
    let listed = || {
        let list = common::get_json(q.api, "/api/v1/traces");
        list["traces"]
            .as_array()
            .and_then(|traces| traces.iter().find(|t| t["trace_id"] == trace_id))
            .map(|t| (t["rpcs"].clone(), t["occurrences_dropped"].clone()))
    };
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || listed().is_some()),
        "the query node lists the trace: {:#}",
        common::get_json(q.api, "/api/v1/traces")
    );
    assert_eq!(
        listed(),
        Some((json!(3), json!(2))),
        "3 RPCs kept, the 2 others' spans counted"
    );
    let view = common::get_json(q.api, &format!("/api/v1/traces/{trace_id}"));
    assert_eq!(
        (&view["rpcs"], &view["occurrences_dropped"]),
        (&json!(5), &json!(0)),
        "the trace's view is the shard's: {view:#}"
    );

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .args(["query", "--peers", "http://127.0.0.1:9", "--max-trace-rpcs", "0"])
        .output()
        .expect("run dei-collector query");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--max-trace-rpcs") && stderr.contains("must be 1 or more"),
        "{:?}: {stderr}",
        refused.status
    );
}
