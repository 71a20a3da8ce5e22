//! Unit tests of the analyzer (tree, traces, preliminary rewriting, views); the analyses' own tests are on
//! golden data, one module each ([`golden`]).

use super::fixtures::*;
use super::*;
use crate::api::tree as views;
use crate::counters::Counters;
use crate::state::{CollectorState, StateConfig};
use dei_propagator::Index;
use std::sync::Arc;
use std::time::Instant;

mod ambiguous;
mod chained_call;
mod circuit_breaker;
mod golden;
mod projection;
mod repeated_call;

fn analyzer() -> CollectorState {
    CollectorState::new(StateConfig::default(), Arc::new(Counters::default()))
}

/// frontend → users.GetUser, frontend → catalog.List → pricing.Price ×2
fn shop(a: &mut CollectorState, trace: u8, t0: u64, fault_on_users: bool) -> (Index, Index) {
    let mut b = TraceBuilder::new(trace, t0);
    let root = b.root("frontend");
    let r = Index::root();
    let users = b.rpc(
        (&r, root),
        "frontend",
        "users",
        "users.Users/GetUser",
        "u1",
        1,
        1,
        5,
        fault_on_users.then_some("g14"),
    );
    let cat = b.rpc(
        (&r, root),
        "frontend",
        "catalog",
        "catalog.Catalog/List",
        "c",
        1,
        6,
        20,
        None,
    );
    b.rpc(
        (&cat.index, cat.server_span),
        "catalog",
        "pricing",
        "pricing.Pricing/Price",
        "a",
        1,
        7,
        9,
        None,
    );
    b.rpc(
        (&cat.index, cat.server_span),
        "catalog",
        "pricing",
        "pricing.Pricing/Price",
        "b",
        1,
        10,
        12,
        None,
    );
    a.ingest(b.spans, Instant::now());
    (users.index, cat.index)
}

#[test]
fn tree_merges_traces_and_counts_occurrences_once() {
    let mut a = analyzer();
    let (users, cat) = shop(&mut a, 1, 1_000_000_000, false);
    shop(&mut a, 2, 2_000_000_000, false);
    assert_eq!(a.tree.len(), 5); // root, users, catalog, 2 × pricing
    let (_, n) = a.tree.get(&users).unwrap();
    assert_eq!((n.stats.seen, n.stats.traces), (2, 2));
    assert_eq!(n.stats.client_services.get("frontend"), Some(&2));
    assert_eq!(n.stats.server_services.get("users"), Some(&2));
    assert_eq!(n.stats.client_latency.count, 2);
    assert_eq!(n.stats.server_latency.count, 2);
    let (cid, _) = a.tree.get(&cat).unwrap();
    assert_eq!(a.tree.children(cid).len(), 2);
    // one trace's tree nests pricing under catalog
    let t = views::trace_view(a.trace(&[1; 16]).unwrap());
    assert_eq!(t.rpcs, 4);
    assert_eq!(t.tree.len(), 2);
    let catalog = t.tree.iter().find(|n| n.occurrence.index == cat).unwrap();
    assert_eq!(catalog.children.len(), 2);
    // the graph saw the pairs, the prefix relation gives the same edges
    let g = crate::api::render::graph_view(&a);
    let e = g
        .edges
        .iter()
        .find(|e| &*e.client == "catalog" && &*e.server == "pricing")
        .unwrap();
    assert_eq!((e.requests, e.index_requests), (4, 4));
}

#[test]
fn diff_between_windows_and_trace_sets() {
    let mut a = analyzer();
    let (users, _) = shop(&mut a, 1, 1_000_000_000, false);
    let mut b = TraceBuilder::new(2, 5_000_000_000);
    let root = b.root("frontend");
    b.rpc(
        (&Index::root(), root),
        "frontend",
        "users",
        "users.Users/GetUser",
        "u1",
        1,
        1,
        5,
        None,
    );
    let new = b.rpc(
        (&Index::root(), root),
        "frontend",
        "ads",
        "ads.Ads/Get",
        "x",
        1,
        6,
        9,
        None,
    );
    a.ingest(b.spans, Instant::now());
    let d = views::diff(
        &a,
        &views::Selection::Window {
            from: 0,
            to: 3_000_000_000,
        },
        &views::Selection::Window {
            from: 3_000_000_000,
            to: 10_000_000_000,
        },
        100,
    );
    assert_eq!((d.a.traces, d.b.traces), (1, 1));
    assert_eq!(
        d.appeared.iter().map(|n| n.index.clone()).collect::<Vec<_>>(),
        vec![new.index.encode()]
    );
    assert_eq!(d.disappeared.len(), 3); // catalog and its two pricing calls
    assert_eq!(d.common, 1);
    let d2 = views::diff(
        &a,
        &views::Selection::Traces(vec![[2; 16]]),
        &views::Selection::Traces(vec![[1; 16]]),
        100,
    );
    assert_eq!(d2.appeared_total, 3);
    assert!(
        d2.disappeared
            .iter()
            .any(|n| n.signature.as_deref() == Some("ads.Ads/Get"))
    );
    let _ = users;
}

#[test]
fn preliminary_stream_indexes_are_rewritten_when_the_mapping_arrives() {
    let mut a = analyzer();
    let mut b = TraceBuilder::new(7, 1_000);
    let root = b.root("a");
    let r = Index::root();
    let (prelim, stream_server, finals) = b.stream((&r, root), "a", "b", "b.B/Echo", &["Hello", "World"]);
    // the callee serves message 2 under prelim+2~ and calls c from there
    let msg2 = prelim.stream_message(2);
    let nested = b.rpc((&msg2, stream_server), "b", "c", "c.C/Store", "World", 1, 2, 3, None);
    // deliver: nested spans first, then the stream's spans (the client span carries the mapping)
    let mut spans = b.spans;
    let nested_spans: Vec<_> = spans.drain(3..).collect();
    a.ingest(nested_spans, Instant::now());
    assert!(
        a.tree.get(&nested.index).is_none(),
        "nested span must wait for its mapping"
    );
    assert_eq!(a.trace(&[7; 16]).unwrap().pending.len(), 2);
    a.ingest(spans, Instant::now());
    let rewritten = nested.index.rewrite_prefix(&msg2, &finals[1]).unwrap();
    let (_, n) = a.tree.get(&rewritten).expect("rewritten under the final index");
    assert_eq!(n.stats.seen, 1);
    assert_eq!(n.stats.server_services.get("c"), Some(&1));
    assert!(a.tree.get(&finals[0]).is_some());
    let (_, stream) = a.tree.get(&prelim).expect("the stream itself stays preliminary");
    assert!(stream.stats.preliminary);
    assert_eq!(a.counters().snapshot().preliminary_rewritten, 2);
    assert!(
        a.tree
            .ids()
            .filter_map(|i| a.tree.node(i))
            .all(|n| n.index == prelim || !n.index.is_preliminary())
    );
}

/// A stream opened while serving another stream's message (B streams to C while serving A's message): the
/// inner mapping is keyed under the outer preliminary prefix and its final index is under it too, so
/// resolution goes innermost first, and the inner messages wait for the outer mapping when it comes last.
#[test]
fn nested_streams_resolve_innermost_first_in_either_arrival_order() {
    for outer_mapping_last in [false, true] {
        let mut a = analyzer();
        let mut b = TraceBuilder::new(9, 1_000);
        let root = b.root("a");
        let r = Index::root();
        let (outer, outer_server, outer_finals) = b.stream((&r, root), "a", "b", "b.B/Chat", &["Hello"]);
        let served = outer.stream_message(1);
        let (inner, inner_server, inner_finals) = b.stream((&served, outer_server), "b", "c", "c.C/Chat", &["x"]);
        let under = inner.stream_message(1);
        let leaf = b.rpc((&under, inner_server), "c", "d", "d.D/Put", "x", 1, 2, 3, None);
        let mut spans = b.spans;
        if outer_mapping_last {
            spans.reverse();
        }
        a.ingest(spans, Instant::now());
        let outer_final = |i: &Index| {
            i.rewrite_prefix(&served, &outer_finals[0])
                .expect("under the outer message")
        };
        let inner_stream = outer_final(&inner);
        let inner_message = outer_final(&inner_finals[0]);
        let leaf_final = outer_final(&leaf.index.rewrite_prefix(&under, &inner_finals[0]).expect("under x"));
        for (what, i) in [
            ("the inner stream", &inner_stream),
            ("its message", &inner_message),
            ("the call under it", &leaf_final),
        ] {
            assert!(
                a.tree.get(i).is_some(),
                "{what} at {i} (outer mapping last: {outer_mapping_last})"
            );
        }
        let t = a.trace(&[9; 16]).expect("trace");
        assert_eq!((t.pending.len(), t.pending_messages.len()), (0, 0));
        assert!(
            a.tree
                .ids()
                .filter_map(|i| a.tree.node(i))
                .all(|n| n.index == outer || n.index == inner_stream || !n.index.is_preliminary()),
            "only the two streams' own indexes stay preliminary"
        );
    }
}

#[test]
fn unresolved_preliminary_spans_are_kept_at_finish() {
    let mut a = analyzer();
    let mut b = TraceBuilder::new(8, 1_000);
    let root = b.root("a");
    let prelim =
        Index::root().child(dei_propagator::Element::new(dei_propagator::ElementDigest([5; 8]), 3).preliminary());
    let nested = b.rpc((&prelim, root), "b", "c", "c.C/Store", "x", 1, 2, 3, None);
    a.ingest(b.spans, Instant::now());
    assert!(a.tree.get(&nested.index).is_none());
    a.finish();
    assert!(a.tree.get(&nested.index).is_some());
    assert_eq!(a.counters().snapshot().preliminary_unresolved, 2);
}

#[test]
fn report_runs_every_analysis() {
    let mut a = analyzer();
    shop(&mut a, 1, 1_000_000_000, false);
    let r = report(&a, &[Instantiation::signature_only()]);
    assert_eq!(r.traces_analyzed, 1);
    assert_eq!(r.projections.len(), 3);
    assert!(serde_json::to_string(&r).is_ok());
}

#[test]
fn memory_is_bounded_with_counters() {
    let mut config = StateConfig::default();
    config.traces.max_traces = 5;
    config.max_nodes = 20;
    let mut a = CollectorState::new(config, Arc::new(Counters::default()));
    for t in 0..50u8 {
        let mut b = TraceBuilder::new(t, t as u64 * 1_000_000_000);
        let root = b.root("frontend");
        // every trace calls a distinct payload: a new node each time
        b.rpc(
            (&Index::root(), root),
            "frontend",
            "users",
            "users.Users/Get",
            &format!("u{t}"),
            1,
            1,
            2,
            None,
        );
        a.ingest(b.spans, Instant::now());
    }
    assert!(a.traces.len() <= 5);
    assert!(a.tree.len() <= 20);
    let c = a.counters().snapshot();
    assert_eq!(c.traces_evicted, 45);
    assert_eq!(c.tree_nodes_evicted as usize, 51 - a.tree.len());
    // the newest trace's node survives
    assert!(a.trace(&[49; 16]).is_some());
}

/// The trace view of a stream as `dei-instrumentation` records it (OTLP/JSON through the receivers' parser):
/// events name the stream's own preliminary index and the position k (`dei.message`); the second message
/// was failed (`dei.fault` on its event; the stream's span ended with UNAVAILABLE).
#[test]
fn trace_view_carries_statuses_digests_and_stream_messages() {
    use dei_propagator::Element;
    let root_el = |d: u8| Element::new(dei_propagator::ElementDigest([d; 8]), 1);
    let a = Index::root().child(root_el(1));
    let prelim = a.child(root_el(2).preliminary());
    let (hello, world) = (a.child(root_el(3)), a.child(root_el(4)));
    let nested = prelim.stream_message(1).child(root_el(5));
    let digest = "cd".repeat(32);
    let attr = |k: &str, v: &str| format!(r#"{{"key":"{k}","value":{{"stringValue":"{v}"}}}}"#);
    let span = |id: u8, parent: u8, kind: u8, attrs: Vec<String>, events: &str, status: &str| {
        format!(
            r#"{{"traceId":"0909090909090909090909090909090a","spanId":"{id:02x}{id:02x}{id:02x}{id:02x}{id:02x}{id:02x}{id:02x}{id:02x}",
            "parentSpanId":"{}","name":"n","kind":{kind},"startTimeUnixNano":"{}","endTimeUnixNano":"{}",
            "status":{status},"attributes":[{}],"events":[{events}]}}"#,
            if parent == 0 {
                String::new()
            } else {
                format!("{parent:02x}").repeat(8)
            },
            1000 + u64::from(id),
            2000 - u64::from(id),
            attrs.join(",")
        )
    };
    let event = |k: u32, fin: &Index, fault: Option<&str>, t: u64| {
        format!(
            r#"{{"timeUnixNano":"{t}","name":"dei.stream.message","attributes":[{},{},{{"key":"dei.message","value":{{"intValue":"{k}"}}}}{}]}}"#,
            attr("dei.preliminary_index", &prelim.encode()),
            attr("dei.index", &fin.encode()),
            fault.map(|f| format!(",{}", attr("dei.fault", f))).unwrap_or_default()
        )
    };
    let spans = [
        // the test's call to A, which failed with UNAVAILABLE
        span(
            1,
            0,
            3,
            vec![
                attr("dei.index", &a.encode()),
                attr("dei.signature", "a.A/Run"),
                attr("dei.payload.digest", &"ab".repeat(32)),
                attr("dei.stack.digest", &digest),
                r#"{"key":"rpc.grpc.status_code","value":{"intValue":"14"}}"#.into(),
            ],
            "",
            r#"{"code":2,"message":"Unavailable"}"#,
        ),
        span(2, 1, 2, vec![attr("dei.index", &a.encode())], "", "{}"),
        // A's stream to B, carrying both message events
        span(
            3,
            2,
            3,
            vec![
                attr("dei.index", &prelim.encode()),
                attr("dei.signature", "b.B/Chat"),
                attr("dei.stack.digest", &digest),
                r#"{"key":"dei.preliminary","value":{"boolValue":true}}"#.into(),
                r#"{"key":"rpc.grpc.status_code","value":{"intValue":"14"}}"#.into(),
            ],
            &format!("{},{}", event(1, &hello, None, 1500), event(2, &world, Some("c"), 1600)),
            r#"{"code":2,"message":"Unavailable"}"#,
        ),
        span(
            4,
            3,
            2,
            vec![
                attr("dei.index", &prelim.encode()),
                r#"{"key":"dei.preliminary","value":{"boolValue":true}}"#.into(),
            ],
            "",
            "{}",
        ),
        // B's call to C while serving message 1, under the preliminary index counted up by 1
        span(
            5,
            4,
            3,
            vec![attr("dei.index", &nested.encode()), attr("dei.signature", "c.C/Log")],
            "",
            "{}",
        ),
    ];
    let json = format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{}]}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        attr("service.name", "svc"),
        spans.join(",")
    );
    let arena = bumpalo::Bump::new();
    let req = crate::otlp::decode_json_lite(json.as_bytes(), &arena).expect("OTLP/JSON");
    let mut issues = Vec::new();
    let records = crate::span_record::extract_lite(&req, &mut issues);
    assert_eq!(issues, vec![]);
    let mut an = analyzer();
    an.ingest(records, Instant::now());
    let view = serde_json::to_value(views::trace_view(
        an.trace(&{
            let mut t = [9u8; 16];
            t[15] = 10;
            t
        })
        .expect("trace"),
    ))
    .expect("JSON");
    assert_eq!(view["pending_preliminary"], 0, "{view:#}");
    let mut nodes = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
        for n in v.as_array().into_iter().flatten() {
            out.push(n.clone());
            walk(&n["children"], out);
        }
    }
    walk(&view["tree"], &mut nodes);
    let node = |i: &Index| {
        nodes
            .iter()
            .find(|n| n["index"] == i.encode())
            .unwrap_or_else(|| panic!("no node {i} in {view:#}"))
            .clone()
    };
    let na = node(&a);
    assert_eq!(na["stack_digest"], digest);
    assert_eq!(na["client_status"]["code"], "error");
    assert_eq!(na["client_status"]["message"], "Unavailable");
    assert_eq!(na["client_status"]["grpc_status_code"], 14);
    assert_eq!(na["server_status"]["code"], "unset");
    let ns = node(&prelim);
    assert_eq!(ns["preliminary"], true);
    assert_eq!(ns["fault"], serde_json::Value::Null, "the fault was the message's");
    let messages = ns["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["k"], 1);
    assert_eq!(messages[0]["preliminary_index"], prelim.stream_message(1).encode());
    assert_eq!(messages[0]["index"], hello.encode());
    assert_eq!(messages[0]["fault"], serde_json::Value::Null);
    assert_eq!(messages[1]["fault"], "c");
    assert_eq!(messages[1]["time_unix_nano"], 1600);
    let nw = node(&world);
    assert_eq!(nw["fault"], "c");
    assert_eq!(nw["stream"]["index"], prelim.encode());
    assert_eq!(nw["stream"]["k"], 2);
    assert_eq!(node(&hello)["fault"], serde_json::Value::Null);
    // the nested call is under Hello's final index (k = 1), not the stream's own index
    let rewritten = nested
        .rewrite_prefix(&prelim.stream_message(1), &hello)
        .expect("prefix");
    assert_eq!(node(&rewritten)["signature"], "c.C/Log");
    let (_, tw) = an.tree.get(&world).expect("world in the tree");
    assert_eq!(tw.stats.faults.get("c"), Some(&1));
    let (_, ts) = an.tree.get(&prelim).expect("stream in the tree");
    assert!(ts.stats.faults.is_empty());
}

/// A stack's frames come on one span only (`dei.stack` once per stack); every node whose spans carry that
/// stack's digest shows them, whichever node's span carried them and whether it came first or last.
#[test]
fn nodes_find_their_frames_by_stack_digest() {
    let mut a = analyzer();
    let mut b = TraceBuilder::new(7, 1_000);
    let root = b.root("frontend");
    let r = Index::root();
    let one = b.rpc(
        (&r, root),
        "frontend",
        "users",
        "users.Users/GetUser",
        "1",
        1,
        1,
        2,
        None,
    );
    let two = b.rpc(
        (&r, root),
        "frontend",
        "users",
        "users.Users/GetUser",
        "2",
        1,
        3,
        4,
        None,
    );
    let frames = vec!["examples/shop.rs:10:5".to_string(), "examples/shop.rs:40:9".to_string()];
    // only the last span of the second call carries the frames; all carry the digest
    let last = b.spans.len() - 1;
    b.spans[last].dei.stack = Some(frames.clone());
    let spans = std::mem::take(&mut b.spans);
    a.ingest(spans, Instant::now());
    let (_, first) = a.tree.get(&one.index).expect("a node per call");
    assert_eq!(
        first.stats.stack, None,
        "the first call's spans carried no frames of their own"
    );
    for index in [&one.index, &two.index] {
        let (_, node) = a.tree.get(index).expect("a node per call");
        assert_eq!(
            views::node_view(node, &a.stacks).stack,
            Some(frames.clone()),
            "{}",
            index.encode()
        );
    }
    assert_eq!(a.stacks.len(), 1);
}

/// What the API serializes, a client deserializes into the same [`crate::views`] types, equal to the original:
/// no field is renamed, dropped or defaulted on the way.
#[test]
fn every_view_reads_back_as_what_was_sent() {
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(v: &T) {
        let text = serde_json::to_string(v).expect("serializes");
        let back: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(&back, v, "{text}");
        // and the text it gives is the same again
        assert_eq!(serde_json::to_string(&back).expect("serializes"), text);
    }
    let mut a = analyzer();
    shop(&mut a, 1, 1_000_000_000, true);
    shop(&mut a, 2, 2_000_000_000, false);
    let t = views::trace_view(a.trace(&[1; 16]).unwrap());
    assert!(!t.tree.is_empty());
    round_trip(&t);
    let mut budget = 1000;
    let sub = views::subtree(&a, crate::tree::ROOT, 64, &mut budget).expect("root");
    assert!(!sub.subtree.is_empty());
    round_trip(&sub);
    round_trip(&crate::api::render::graph_view(&a));
    round_trip(&crate::analysis::report(&a, &[]));
    round_trip(&crate::api::stats(&a, &a.counters().snapshot(), Default::default()));
    round_trip(&views::diff(
        &a,
        &views::Selection::Traces(vec![[1; 16]]),
        &views::Selection::Traces(vec![[2; 16]]),
        10,
    ));
    // a renamed field is an error, not a default
    let mut value = serde_json::to_value(&t).expect("serializes");
    let node = &mut value["tree"][0];
    let rpc = node.as_object_mut().expect("object").remove("rpc").expect("rpc");
    node["rpc_id"] = rpc;
    assert!(serde_json::from_value::<crate::views::TraceView>(value).is_err());
}
