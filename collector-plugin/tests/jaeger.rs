//! Jaeger v2 in the loop, the real one: `$DEI_JAEGER_BIN`, built by `.ci/run` from the Go module
//! `github.com/jaegertracing/jaeger` v1.76.0 (`deploy/jaeger/`), running the configuration files of
//! `docs/deploy/` as written (ephemeral loopback ports in their variables):
//! - Jaeger as the collector in front (`jaeger-in-front.yaml`): services → Jaeger's OTLP receiver → a
//!   pipeline that stores every span in Jaeger and exports it to dei-collector;
//! - Jaeger as the backend (`jaeger.yaml`): services → dei-collector → Jaeger, forwarded over OTLP/gRPC and
//!   over OTLP/HTTP.
//!
//! Each test reads Jaeger's query API (`/api/traces/{id}`, `/api/services`) and checks that every span the
//! services made is there once, with its parent and its `dei.*` attributes unchanged, and that dei-collector
//! counted every span and built the expected graph edge and tree node.
//!
//! Without `$DEI_JAEGER_BIN` the tests say loudly that they did not run; with `DEI_REQUIRE_INTEROP=1` (CI) they
//! fail.

mod common;
use common::chain::peers;

use common::chain::{assert_frontend_users_edge, element, frontend_to_users_trace};
use common::{CollectorProcess, eventually, get_text};
use dei_propagator::Index;
use opentelemetry::trace::SpanId;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use peers::{Jaeger, JaegerSpan, jaeger_bin, parse_prometheus, sum};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn grpc_exporter(endpoint: String) -> SpanExporter {
    SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .unwrap()
}

fn http_exporter(endpoint: String) -> SpanExporter {
    SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .unwrap()
}

/// Runs `traces` frontend → users traces through providers exporting with `exporter` (and to memory);
/// returns every span made.
fn services(traces: usize, index: &Index, exporter: impl Fn() -> SpanExporter) -> Vec<SpanData> {
    let made = InMemorySpanExporter::default();
    let provider = |service: &str| {
        SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name(service.to_string()).build())
            .with_simple_exporter(exporter())
            .with_simple_exporter(made.clone())
            .build()
    };
    let (f, u) = (provider("frontend"), provider("users"));
    for _ in 0..traces {
        frontend_to_users_trace(&f, &u, index);
    }
    let spans = made.get_finished_spans().unwrap();
    f.shutdown().unwrap();
    u.shutdown().unwrap();
    spans
}

/// A made span as Jaeger should show it: ids, parent, name, service and its `dei.*` attributes.
type Expected = (String, String, Option<String>, String, String, BTreeMap<String, String>);

fn expected(s: &SpanData, service: &str) -> Expected {
    let dei = s
        .attributes
        .iter()
        .filter(|kv| kv.key.as_str().starts_with("dei."))
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    (
        s.span_context.trace_id().to_string(),
        s.span_context.span_id().to_string(),
        (s.parent_span_id != SpanId::INVALID).then(|| s.parent_span_id.to_string()),
        s.name.to_string(),
        service.to_string(),
        dei,
    )
}

fn shown(s: &JaegerSpan) -> Expected {
    (
        s.trace_id.clone(),
        s.span_id.clone(),
        s.parent.clone(),
        s.operation.clone(),
        s.service.clone(),
        s.tags
            .iter()
            .filter(|(k, _)| k.starts_with("dei."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Every span made is in Jaeger exactly once, with its parent, name, service and `dei.*` attributes.
fn assert_in_jaeger(jaeger: &Jaeger, made: &[(SpanData, &str)]) {
    let want: BTreeSet<Expected> = made.iter().map(|(s, svc)| expected(s, svc)).collect();
    assert_eq!(want.len(), made.len());
    assert!(
        want.iter().any(|w| !w.5.is_empty()),
        "the services made spans with dei.* attributes"
    );
    let trace_ids: BTreeSet<String> = want.iter().map(|w| w.0.clone()).collect();
    let mut got: Vec<Expected> = Vec::new();
    let all_there = eventually(Duration::from_secs(60), || {
        got = trace_ids
            .iter()
            .flat_map(|t| jaeger.trace(t))
            .map(|s| shown(&s))
            .collect();
        got.len() >= want.len()
    });
    assert!(all_there, "Jaeger has {} of {} spans", got.len(), want.len());
    let distinct: BTreeSet<Expected> = got.iter().cloned().collect();
    assert_eq!(distinct.len(), got.len(), "no span is in Jaeger twice");
    assert_eq!(distinct, want, "Jaeger shows every span as made");
    assert_eq!(
        jaeger.services(),
        BTreeSet::from(["frontend".to_string(), "users".to_string()]),
        "Jaeger's services"
    );
}

/// dei-collector received `n` spans and built the frontend → users edge and the tree node of `traces` calls.
fn assert_analyzed(c: &CollectorProcess, index: &Index, n: usize, traces: usize) {
    let received = || {
        sum(
            &parse_prometheus(&get_text(c.api, "/metrics")),
            "dei_collector_spans_received_total",
            &[],
        )
    };
    assert!(
        eventually(Duration::from_secs(30), || received() == n as f64),
        "dei-collector received {} of {n} spans",
        received()
    );
    let node_path = format!("/api/v1/tree/node?index={}", index.encode());
    assert!(
        eventually(Duration::from_secs(10), || {
            let node = c.get_json(&node_path);
            node["seen"] == traces && node["server_services"]["users"] == traces
        }),
        "tree node: {}",
        c.get_json(&node_path)
    );
    assert_frontend_users_edge(c, traces as u64);
}

#[test]
fn jaeger_in_front_stores_and_passes_every_span_to_dei_collector() {
    let Some(bin) = jaeger_bin() else {
        return;
    };
    let rt = runtime();
    let c = CollectorProcess::start(&[]);
    let jaeger = Jaeger::start(
        &bin,
        "jaeger-in-front.yaml",
        &[("DEI_COLLECTOR_OTLP", c.grpc.to_string())],
    );
    let index = Index::root().child(element("users.Users/GetUser", "j1"));
    let mut made = {
        let _g = rt.enter();
        services(3, &index, || grpc_exporter(format!("http://{}", jaeger.otlp_grpc)))
    };
    made.extend(services(2, &index, || {
        http_exporter(format!("http://{}/v1/traces", jaeger.otlp_http))
    }));
    let with_service: Vec<(SpanData, &str)> = made.into_iter().map(with_service_name).collect();
    assert_in_jaeger(&jaeger, &with_service);
    assert_analyzed(&c, &index, with_service.len(), 5);
    // Jaeger's own count of what its otlp receiver took and its exporter to dei-collector sent.
    let n = with_service.len() as f64;
    let mut own = Vec::new();
    let counted = eventually(Duration::from_secs(30), || {
        own = jaeger.own_metrics();
        sum(
            &own,
            "otelcol_exporter_sent_spans",
            &[("exporter", "otlp/dei-collector")],
        ) == n
    });
    assert!(counted, "Jaeger's exporter counted {n} spans sent: {own:?}");
    assert_eq!(sum(&own, "otelcol_receiver_accepted_spans", &[("receiver", "otlp")]), n);
    assert_eq!(sum(&own, "otelcol_exporter_send_failed_spans", &[]), 0.0);
}

/// The service of a span made by [`services`]: the root span and the client span are the frontend's.
fn with_service_name(s: SpanData) -> (SpanData, &'static str) {
    let service = if s.span_kind == opentelemetry::trace::SpanKind::Server && s.parent_span_id != SpanId::INVALID {
        "users"
    } else {
        "frontend"
    };
    (s, service)
}

/// Services → dei-collector (`flag` to Jaeger's receiver) → Jaeger with `jaeger.yaml`.
fn behind_dei_collector(flag: &str, endpoint: impl Fn(&Jaeger) -> String) {
    let Some(bin) = jaeger_bin() else {
        return;
    };
    let rt = runtime();
    let jaeger = Jaeger::start(&bin, "jaeger.yaml", &[]);
    let ui = format!("http://{}/", jaeger.query);
    let c = CollectorProcess::start(&[flag, &endpoint(&jaeger), "--jaeger-ui", &ui]);
    let index = Index::root().child(element("users.Users/GetUser", "j2"));
    let mut made = {
        let _g = rt.enter();
        services(2, &index, || grpc_exporter(format!("http://{}", c.grpc)))
    };
    made.extend(services(2, &index, || {
        http_exporter(format!("http://{}/v1/traces", c.http))
    }));
    let with_service: Vec<(SpanData, &str)> = made.into_iter().map(with_service_name).collect();
    assert_in_jaeger(&jaeger, &with_service);
    assert_analyzed(&c, &index, with_service.len(), 4);
    let forwarded = sum(
        &parse_prometheus(&get_text(c.api, "/metrics")),
        "dei_collector_forward_spans_sent_total",
        &[],
    );
    assert_eq!(
        forwarded,
        with_service.len() as f64,
        "dei-collector counted what it forwarded"
    );
    follow_the_web_views_links(&jaeger, &c, &with_service, &index);
    let accepted = || {
        sum(
            &jaeger.own_metrics(),
            "otelcol_receiver_accepted_spans",
            &[("receiver", "otlp")],
        )
    };
    assert!(
        eventually(Duration::from_secs(30), || accepted() == with_service.len() as f64),
        "Jaeger counted {} spans received of {}",
        accepted(),
        with_service.len()
    );
}

#[test]
fn dei_collector_forwards_to_jaeger_over_grpc() {
    behind_dei_collector("--forward-grpc", |j| format!("http://{}", j.otlp_grpc));
}

#[test]
fn dei_collector_forwards_to_jaeger_over_http() {
    behind_dei_collector("--forward-http", |j| format!("http://{}/v1/traces", j.otlp_http));
}

/// The web view's links into Jaeger (`--jaeger-ui`), as `/ui/config.json` gives them and `app.js` fills
/// them in, lead to this trace and to this index on the real Jaeger: its UI's routes (`/trace/{id}`,
/// `/search?service=…&tags=…`) take the same parameters as its API's (`/api/traces/{id}`, `/api/traces?…`),
/// which a module build serves (its UI pages are a placeholder).
fn follow_the_web_views_links(jaeger: &Jaeger, c: &CollectorProcess, made: &[(SpanData, &str)], index: &Index) {
    let config = c.get_json("/ui/config.json");
    let base = format!("http://{}", jaeger.query);
    assert_eq!(
        config["jaeger_ui"],
        base.as_str(),
        "the base URL, without its trailing slash"
    );
    let app = get_text(c.api, "/ui/app.js");
    for used in [
        "/ui/config.json",
        "c.trace.replace(\"{trace_id}\"",
        "c.search.replace(\"{service}\"",
        "\"dei.index\"",
    ] {
        assert!(app.contains(used), "app.js fills in the links: {used}");
    }
    let api_path = |link: &str, ui_route: &str, api_route: &str| -> String {
        let path = link
            .strip_prefix(&base)
            .unwrap_or_else(|| panic!("{link} is on {base}"));
        let rest = path
            .strip_prefix(ui_route)
            .unwrap_or_else(|| panic!("{path} starts with {ui_route}"));
        // the UI route is served by Jaeger's query service too
        let (status, _) = peers::http_get(&jaeger.query, path);
        assert_eq!(status, 200, "Jaeger serves {path}");
        format!("{api_route}{rest}")
    };

    // a trace id's link: the trace, every span of it
    let trace_id = made[0].0.span_context.trace_id().to_string();
    let link = config["trace"]
        .as_str()
        .expect("a trace link")
        .replace("{trace_id}", &trace_id);
    let spans = jaeger.get(&api_path(&link, "/trace/", "/api/traces/"));
    let in_trace = made
        .iter()
        .filter(|(s, _)| s.span_context.trace_id().to_string() == trace_id)
        .count();
    let shown: usize = spans["data"]
        .as_array()
        .expect("a trace")
        .iter()
        .map(|t| JaegerSpan::all_of(t).len())
        .sum();
    assert_eq!(shown, in_trace, "the trace link shows the trace's {in_trace} spans");

    // a tree node's link: a search for its dei.index on its server's service finds every call under it
    let tags = peers::percent_encode(&serde_json::json!({ "dei.index": index.encode() }).to_string());
    let link = config["search"]
        .as_str()
        .expect("a search link")
        .replace("{service}", "users")
        .replace("{tags}", &tags);
    let found = jaeger.get(&format!(
        "{}&limit=1000&lookback=custom&start=0&end={}",
        api_path(&link, "/search", "/api/traces"),
        peers::now_micros() + 3_600_000_000
    ));
    let with_index: BTreeSet<String> = found["data"]
        .as_array()
        .expect("traces")
        .iter()
        .flat_map(JaegerSpan::all_of)
        .filter(|s| s.tags.get("dei.index") == Some(&index.encode()))
        .map(|s| s.span_id)
        .collect();
    let want: BTreeSet<String> = made
        .iter()
        .filter(|(s, _)| s.attributes.iter().any(|kv| kv.key.as_str() == "dei.index"))
        .map(|(s, _)| s.span_context.span_id().to_string())
        .collect();
    assert_eq!(
        with_index, want,
        "the node's link finds its calls' client and server spans"
    );
}

#[test]
fn a_jaeger_ui_that_is_not_a_url_is_refused() {
    for bad in ["jaeger:16686", "http://jaeger:16686/?x"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dei-collector"))
            .args(["serve", "--api-listen", "127.0.0.1:0", "--jaeger-ui", bad])
            .output()
            .expect("run dei-collector");
        assert!(!out.status.success(), "{bad} is refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--jaeger-ui") && err.contains("not"), "{bad}: {err}");
    }
}
