//! Rust services export with opentelemetry-otlp (gRPC and HTTP) to a dei-collector process, which
//! forwards to a second OTLP receiver standing in for Jaeger. The same spans arrive there, and the graph
//! and the tree are as expected.

mod common;

use common::{CollectorProcess, Downstream, eventually};
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;

fn provider(service: &str, exporter: SpanExporter) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service.to_string()).build())
        .with_simple_exporter(exporter)
        .build()
}

fn dei_attrs(index: &Index, sig: &str, payload: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("dei.index", index.encode()),
        KeyValue::new("dei.signature", sig.to_string()),
        KeyValue::new("dei.payload.digest", PayloadDigest::of(payload.as_bytes()).to_hex()),
        KeyValue::new("dei.stack.digest", StackDigest([1; 32]).to_hex()),
        KeyValue::new("dei.count", index.last().map_or(1, |e| e.count) as i64),
        KeyValue::new("dei.depth", index.depth() as i64),
        KeyValue::new("dei.instantiation", "dei"),
    ]
}

fn element(sig: &str, payload: &str) -> Element {
    let inv = InvocationSignature::new(
        Signature::from_name(sig),
        PayloadDigest::of(payload.as_bytes()),
        StackDigest([1; 32]),
    );
    Element::new(inv.element_digest(&Instantiation::dei()), 1)
}

/// frontend (root) → users.GetUser → db; returns the number of spans made and the two indexes.
fn make_trace(frontend: &SdkTracerProvider, users: &SdkTracerProvider) -> (usize, Index, Index) {
    let ft = frontend.tracer("test");
    let ut = users.tracer("test");
    let get_user = Index::root().child(element("users.Users/GetUser", "u1"));
    let query = get_user.child(element("SELECT users", "u1"));
    let root = ft.span_builder("GET /").with_kind(SpanKind::Server).start(&ft);
    let root_cx = Context::current_with_span(root);
    let client = ft
        .span_builder("users.Users/GetUser")
        .with_kind(SpanKind::Client)
        .with_attributes(dei_attrs(&get_user, "users.Users/GetUser", "u1"))
        .start_with_context(&ft, &root_cx);
    let client_cx = root_cx.with_span(client);
    let server = ut
        .span_builder("users.Users/GetUser")
        .with_kind(SpanKind::Server)
        .with_attributes(dei_attrs(&get_user, "users.Users/GetUser", "u1"))
        .start_with_context(&ut, &client_cx);
    let server_cx = client_cx.with_span(server);
    let mut db_attrs = dei_attrs(&query, "SELECT users", "u1");
    db_attrs.push(KeyValue::new("db.system", "postgresql"));
    let db = ut
        .span_builder("SELECT users")
        .with_kind(SpanKind::Client)
        .with_attributes(db_attrs)
        .start_with_context(&ut, &server_cx);
    drop(db);
    server_cx.span().end();
    client_cx.span().end();
    root_cx.span().end();
    (4, get_user, query)
}

fn check_graph_and_tree(c: &CollectorProcess, get_user: &Index, query: &Index, traces: u64) {
    assert!(
        eventually(Duration::from_secs(10), || {
            let g = c.get_json("/api/v1/graph");
            g["edges"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["client"] == "frontend" && e["server"] == "users" && e["requests"] == traces)
                && g["edges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["client"] == "user" && e["server"] == "frontend")
        }),
        "graph: {}",
        c.get_json("/api/v1/graph")
    );
    // the database peer becomes a virtual node once the unpaired client span expires (pairing TTL)
    assert!(
        eventually(Duration::from_secs(10), || {
            c.get_json("/api/v1/graph")["edges"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["client"] == "users" && e["server"] == "postgresql" && e["connection_type"] == "database")
        }),
        "graph: {}",
        c.get_json("/api/v1/graph")
    );
    let node = c.get_json(&format!("/api/v1/tree/node?index={}", get_user.encode()));
    assert_eq!(node["signature"], "users.Users/GetUser");
    assert_eq!(node["seen"], traces);
    assert_eq!(node["traces"], traces);
    assert_eq!(node["client_services"]["frontend"], traces);
    assert_eq!(node["server_services"]["users"], traces);
    let children = c.get_json(&format!("/api/v1/tree/children?index={}", get_user.encode()));
    assert_eq!(children.as_array().unwrap().len(), 1);
    assert_eq!(children[0]["index"], query.encode());
    assert_eq!(children[0]["peers"]["postgresql"], traces);
    // Paged: a page past the end is empty, a page of one holds the first child.
    let page = |o: usize, l: usize| {
        let url = format!("/api/v1/tree/children?index={}&offset={o}&limit={l}", get_user.encode());
        c.get_json(&url).as_array().unwrap().len()
    };
    assert_eq!((page(0, 1), page(1, 5), page(0, 0)), (1, 0, 0));
    let metrics = common::get_text(c.api, "/metrics");
    assert!(
        metrics.contains(&format!(
            "traces_service_graph_request_total{{client=\"frontend\",server=\"users\",connection_type=\"\"}} {traces}"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("traces_service_graph_request_server_seconds_bucket{client=\"frontend\""));
}

#[test]
fn grpc_exporter_through_collector_to_downstream() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let downstream = rt.block_on(Downstream::start());
    let c = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint(), "--pairing-ttl-ms", "300"]);
    let _guard = rt.enter();
    let exp = |()| {
        SpanExporter::builder()
            .with_tonic()
            .with_endpoint(format!("http://{}", c.grpc))
            .build()
            .unwrap()
    };
    let (frontend, users) = (provider("frontend", exp(())), provider("users", exp(())));
    let mut total = 0;
    let mut idx = None;
    for _ in 0..3 {
        let (n, a, b) = make_trace(&frontend, &users);
        total += n;
        idx = Some((a, b));
    }
    frontend.shutdown().unwrap();
    users.shutdown().unwrap();
    let got = rt.block_on(downstream.wait_for_spans(total, Duration::from_secs(15)));
    assert_eq!(got, total, "every span arrives downstream");
    let (a, b) = idx.unwrap();
    check_graph_and_tree(&c, &a, &b, 3);
    let stats = c.get_json("/api/v1/stats");
    assert_eq!(stats["counters"]["spans_received"], total as u64);
    assert_eq!(stats["counters"]["forward_spans_sent"], total as u64);
}

#[test]
fn http_exporter_through_collector_to_downstream() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let downstream = rt.block_on(Downstream::start());
    let c = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint(), "--pairing-ttl-ms", "300"]);
    let exp = |()| {
        SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("http://{}/v1/traces", c.http))
            .build()
            .unwrap()
    };
    let (frontend, users) = (provider("frontend", exp(())), provider("users", exp(())));
    let mut total = 0;
    let mut idx = None;
    for _ in 0..2 {
        let (n, a, b) = make_trace(&frontend, &users);
        total += n;
        idx = Some((a, b));
    }
    frontend.shutdown().unwrap();
    users.shutdown().unwrap();
    let got = rt.block_on(downstream.wait_for_spans(total, Duration::from_secs(15)));
    assert_eq!(got, total, "every span arrives downstream");
    let (a, b) = idx.unwrap();
    check_graph_and_tree(&c, &a, &b, 2);
    // the same spans, byte for byte: the downstream's ids are the ones the collector counted
    let stats = c.get_json("/api/v1/stats");
    assert_eq!(stats["counters"]["spans_received"], total as u64);
}
