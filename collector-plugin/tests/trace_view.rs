//! The trace view (`GET /api/v1/traces/{id}`) of a trace whose RPCs share indexes (collisions), with the real
//! binary: each RPC appears once, so the view grows with the trace, not with the number of colliding
//! occurrences to the power of the depth.

mod common;

use common::CollectorProcess;
use serde_json::{Value, json};

/// A trace of `levels` nested indexes with `k` client spans (distinct span ids) at each: every level's
/// occurrences collide.
fn colliding(levels: usize, k: usize, trace_id: &str) -> Value {
    let mut spans = Vec::new();
    let mut n = 1u64;
    for depth in 1..=levels {
        let index = format!("1{}", ".AAAAAAAAAAA1".repeat(depth));
        for _ in 0..k {
            n += 1;
            spans.push(json!({
                "traceId": trace_id,
                "spanId": format!("{n:016x}"),
                "name": "s",
                "kind": 3,
                "startTimeUnixNano": (1_700_000_000_000_000_000u64 + n).to_string(),
                "endTimeUnixNano": (1_700_000_000_000_001_000u64 + n).to_string(),
                "attributes": [
                    {"key": "dei.index", "value": {"stringValue": index}},
                    {"key": "dei.signature", "value": {"stringValue": "a.B/C"}},
                ],
            }));
        }
    }
    json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "x"}}]},
        "scopeSpans": [{"spans": spans}],
    }]})
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
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", c.http))
        .header("content-type", "application/json")
        .body(colliding(8, 3, trace_id).to_string())
        .send()
        .await
        .expect("export");
    assert!(r.status().is_success(), "{}", r.status());
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
