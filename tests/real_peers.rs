//! The cinema services with the DEI layers, in the loop with the real programs users run: the OpenTelemetry
//! Collector (`$DEI_OTELCOL_BIN`, the distribution of `deploy/otelcol/`) and Jaeger v2 (`$DEI_JAEGER_BIN`,
//! v1.76.0), both built by `.ci/run` from their Go modules and run with the files of `docs/deploy/` as
//! written (ephemeral loopback ports in their variables).
//!
//! One run of the demo's search (cinema-10, searched exhaustively by dei-sfit) exports every span twice, over
//! OTLP/HTTP with each service's `service.name`:
//! - directly to an embedded dei-collector (*direct*);
//! - to the Collector (`otelcol-in-front.yaml` + `otelcol-spanmetrics.yaml`), which exports to a second
//!   embedded dei-collector (*via the Collector*), which forwards to Jaeger (`jaeger.yaml`).
//!
//! The test checks that every span is in Jaeger's query API exactly once with its parent and its `dei.*`
//! attributes unchanged; that the two dei-collectors' service graphs and prefix trees are the same; and that
//! the Collector's spanmetrics connector, on the same spans, counts what dei-collector's service-graph metrics
//! count (the relations and the documented differences: `docs/deploying-collector.md`).
//!
//! A second test runs the demo binary (`examples/demo.rs`) with `--forward` to a real Jaeger and finds every
//! span it reports in Jaeger.
//!
//! Without the binaries the tests say loudly that they did not run; with `DEI_REQUIRE_INTEROP=1` (CI) they
//! fail.

use dei_corpus as common;
use dei_corpus::demo_setup;
#[path = "../collector-plugin/tests/peers/mod.rs"]
mod peers;

use common::cinema::{self, Variant};
use dei_collector::server::{self, Running, ServerConfig};
use dei_collector::server::{Downstream, ForwardConfig};
use dei_sfit::{InMemorySpans, Progress, Search, SearchOptions};
use demo_setup::ServiceRouter;
use opentelemetry::trace::{SpanId, SpanKind};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use peers::{Jaeger, JaegerSpan, Peer, Sample, deploy_file, eventually, free_addr, free_port, http_get, sum};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// How long a peer may take to show what it was sent (not a performance bound).
const PATIENCE: Duration = Duration::from_secs(60);

/// The process's telemetry: the DEI propagator, and one tracer provider that sends every span to `all` (a
/// record of every span, never reset), to `search` (which the search reads and resets) and, batched, through
/// one [`ServiceRouter`] per endpoint.
fn telemetry(
    all: &InMemorySpanExporter,
    search: &InMemorySpanExporter,
    routers: &[ServiceRouter],
) -> SdkTracerProvider {
    let mut builder = SdkTracerProvider::builder()
        .with_simple_exporter(all.clone())
        .with_simple_exporter(search.clone());
    for r in routers {
        builder = builder.with_batch_exporter(r.clone());
    }
    demo_setup::install_telemetry(builder, "dei-real-peers")
}

/// Searches cinema-10's functional test exhaustively (as the demo does); every span ends up in the routers'
/// endpoints.
async fn search(search: InMemorySpanExporter, provider: SdkTracerProvider, routers: Vec<ServiceRouter>) -> usize {
    let dei_config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let cinema = cinema::start(Variant::Cinema10, &dei_config).await;
    let test = cinema::functional_test(cinema);
    let options = SearchOptions {
        catalog: cinema::catalog(),
        progress: Progress::Silent,
        ..SearchOptions::default()
    };
    let report = Search::new(options, InMemorySpans::new(search))
        .run(&test)
        .await
        .expect("the search runs");
    tokio::task::spawn_blocking(move || {
        provider.force_flush().expect("flush the batch exporters");
        for r in routers {
            futures::executor::block_on(r.export_pending()).expect("export the spans that waited for a parent");
        }
    })
    .await
    .expect("flush");
    report.executions.len()
}

fn api(c: &Running, path: &str) -> Value {
    let (status, body) = http_get(&c.api_addr.to_string(), path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// A span as made, in the terms Jaeger shows: trace and span id, parent, name and `dei.*` attributes.
type Shown = (String, String, Option<String>, String, BTreeMap<String, String>);

fn made(s: &SpanData) -> Shown {
    (
        s.span_context.trace_id().to_string(),
        s.span_context.span_id().to_string(),
        (s.parent_span_id != SpanId::INVALID).then(|| s.parent_span_id.to_string()),
        s.name.to_string(),
        s.attributes
            .iter()
            .filter(|kv| kv.key.as_str().starts_with("dei."))
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect(),
    )
}

fn in_jaeger(s: &JaegerSpan) -> Shown {
    (
        s.trace_id.clone(),
        s.span_id.clone(),
        s.parent.clone(),
        s.operation.clone(),
        s.tags
            .iter()
            .filter(|(k, _)| k.starts_with("dei."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Every span of `want` is in Jaeger exactly once, as made; returns the services Jaeger shows them under.
fn assert_all_in_jaeger(jaeger: &Jaeger, want: &BTreeSet<Shown>) -> BTreeSet<String> {
    let traces: BTreeSet<&String> = want.iter().map(|w| &w.0).collect();
    let mut got: Vec<JaegerSpan> = Vec::new();
    let complete = eventually(PATIENCE, || {
        got = traces.iter().flat_map(|t| jaeger.trace(t)).collect();
        got.len() >= want.len()
    });
    assert!(complete, "Jaeger shows {} of the {} spans", got.len(), want.len());
    let shown: Vec<Shown> = got.iter().map(in_jaeger).collect();
    let distinct: BTreeSet<Shown> = shown.iter().cloned().collect();
    assert_eq!(distinct.len(), shown.len(), "no span is in Jaeger twice");
    let missing: Vec<&Shown> = want.difference(&distinct).take(5).collect();
    let extra: Vec<&Shown> = distinct.difference(want).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "Jaeger shows every span as made (ids, parent, name, dei.* attributes); missing: {missing:#?}; not made: {extra:#?}"
    );
    got.into_iter().map(|s| s.service).collect()
}

/// The graph's edges as (client, server) → (requests, failed), from `/api/v1/graph`.
fn edges(c: &Running) -> BTreeMap<(String, String), (u64, u64)> {
    api(c, "/api/v1/graph")["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .filter(|e| e["requests"].as_u64().unwrap_or(0) > 0)
        .map(|e| {
            (
                (
                    e["client"].as_str().unwrap_or_default().to_string(),
                    e["server"].as_str().unwrap_or_default().to_string(),
                ),
                (e["requests"].as_u64().unwrap_or(0), e["failed"].as_u64().unwrap_or(0)),
            )
        })
        .collect()
}

/// The service-graph samples of dei-collector's `/metrics` as (client, server) → (requests, failed).
fn dei_edge_metrics(c: &Running) -> BTreeMap<(String, String), (f64, f64)> {
    let samples = peers::scrape(&c.api_addr.to_string());
    let mut out: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for s in &samples {
        let slot = match s.name.as_str() {
            "traces_service_graph_request_total" => 0,
            "traces_service_graph_request_failed_total" => 1,
            _ => continue,
        };
        let key = (s.labels["client"].clone(), s.labels["server"].clone());
        let e = out.entry(key).or_default();
        if slot == 0 {
            e.0 += s.value;
        } else {
            e.1 += s.value;
        }
    }
    out
}

/// The service a server span's `rpc.service` names, by the demo's rule (`cinema.Bookings` → `bookings`).
fn service_of(rpc_service: &str) -> String {
    rpc_service.rsplit('.').next().unwrap_or(rpc_service).to_lowercase()
}

#[test]
fn cinema_through_the_collector_and_dei_collector_to_jaeger() {
    let (Some(jaeger_bin), Some(otelcol_bin)) = (peers::jaeger_bin(), peers::otelcol_bin()) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let jaeger = Jaeger::start(&jaeger_bin, "jaeger.yaml", &[]);
    let start = |forward: Option<Downstream>| {
        let mut config = ServerConfig::ephemeral();
        config.forward = forward.map(ForwardConfig::new);
        rt.block_on(server::start(config))
            .expect("start an embedded dei-collector")
    };
    let direct = start(None);
    let via = start(Some(Downstream::Grpc(format!("http://{}", jaeger.otlp_grpc))));
    let (grpc, http, spanmetrics) = (free_addr(), free_addr(), free_addr());
    let _otelcol = Peer::start(
        "otelcol",
        &otelcol_bin,
        &[
            deploy_file("otelcol-in-front.yaml"),
            deploy_file("otelcol-spanmetrics.yaml"),
        ],
        &[
            ("OTELCOL_OTLP_GRPC", grpc.clone()),
            ("OTELCOL_OTLP_HTTP", http.clone()),
            ("OTELCOL_METRICS_HOST", "127.0.0.1".into()),
            ("OTELCOL_METRICS_PORT", free_port().to_string()),
            ("DEI_COLLECTOR_OTLP", via.grpc_addr.to_string()),
            ("SPANMETRICS_PROMETHEUS", spanmetrics.clone()),
            ("SPANMETRICS_FLUSH", "1s".into()),
        ],
        &[&grpc, &http],
    );

    let (all, searched) = (InMemorySpanExporter::default(), InMemorySpanExporter::default());
    let routers = vec![
        ServiceRouter::new(format!("http://{}/v1/traces", direct.http_addr)),
        ServiceRouter::new(format!("http://{http}/v1/traces")),
    ];
    let provider = telemetry(&all, &searched, &routers);
    let executions = rt.block_on(search(searched, provider, routers));
    let spans = all.get_finished_spans().expect("the spans made");
    let n = spans.len() as u64;
    assert!(
        executions > 1 && n > 0,
        "the search ran ({executions} executions, {n} spans)"
    );

    // Both dei-collectors received every span once, and the second forwarded every one to Jaeger.
    let arrived = eventually(PATIENCE, || {
        direct.collector.counters().snapshot().spans_received == n
            && via.collector.counters().snapshot().spans_received == n
            && via.collector.counters().snapshot().forward_spans_sent == n
    });
    assert!(
        arrived,
        "{n} spans made; direct received {}, via the Collector received {} and forwarded {}",
        direct.collector.counters().snapshot().spans_received,
        via.collector.counters().snapshot().spans_received,
        via.collector.counters().snapshot().forward_spans_sent
    );
    // the graphs are final once no half waits for its peer
    let settled = eventually(PATIENCE, || {
        direct.collector.stats().graph_waiting_spans == 0 && via.collector.stats().graph_waiting_spans == 0
    });
    assert!(settled, "no span waits for its peer in either graph");

    // 1. Jaeger shows every span as made, under the services of dei-collector's graph.
    let want: BTreeSet<Shown> = spans.iter().map(made).collect();
    assert_eq!(want.len() as u64, n, "span ids are unique");
    assert!(
        want.iter().filter(|w| w.4.contains_key("dei.index")).count() > 10,
        "the cinema's RPC spans carry dei.index"
    );
    let services = assert_all_in_jaeger(&jaeger, &want);
    let graph = api(&via, "/api/v1/graph");
    let nodes: BTreeSet<String> = graph["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["virtual"] != true)
        .filter_map(|n| n["id"].as_str().map(String::from))
        .collect();
    assert_eq!(
        services,
        jaeger.services(),
        "every service Jaeger lists has spans of the search"
    );
    assert!(
        services.is_superset(&nodes),
        "Jaeger's services {services:?} include the graph's {nodes:?}"
    );

    // Jaeger finds the spans of one DEI index by tag, as the guide shows (`tags={"dei.index":"…"}`): take a
    // server span's index, whose calls failed in some executions and not in others.
    let (service, index) = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Server)
        .find_map(|s| {
            let index = s.attributes.iter().find(|kv| kv.key.as_str() == "dei.index")?;
            let service = s.attributes.iter().find(|kv| kv.key.as_str() == "rpc.service")?;
            Some((service_of(&service.value.to_string()), index.value.to_string()))
        })
        .expect("a server span with dei.index");
    // Jaeger's search returns the traces in which a span of `service` has the tag, with all their spans.
    let has_index = |s: &SpanData| {
        s.attributes
            .iter()
            .any(|kv| kv.key.as_str() == "dei.index" && kv.value.to_string() == index)
    };
    let traces_with: BTreeSet<String> = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Server && has_index(s))
        .filter(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "rpc.service" && service_of(&kv.value.to_string()) == service)
        })
        .map(|s| s.span_context.trace_id().to_string())
        .collect();
    let with_index: BTreeSet<String> = spans
        .iter()
        .filter(|s| has_index(s) && traces_with.contains(&s.span_context.trace_id().to_string()))
        .map(|s| s.span_context.span_id().to_string())
        .collect();
    assert!(!traces_with.is_empty());
    let tags = peers::percent_encode(&serde_json::json!({ "dei.index": index }).to_string());
    let found: BTreeSet<String> = jaeger.get(&format!(
        "/api/traces?service={service}&tags={tags}&limit=10000&lookback=custom&start=0&end={}",
        peers::now_micros() + 3_600_000_000
    ))["data"]
        .as_array()
        .expect("traces")
        .iter()
        .flat_map(JaegerSpan::all_of)
        .filter(|s| s.tags.get("dei.index") == Some(&index))
        .map(|s| s.span_id)
        .collect();
    assert_eq!(found, with_index, "Jaeger finds the spans of dei.index {index} by tag");

    // The same graph and prefix tree as with direct export.
    assert_eq!(
        api(&via, "/api/v1/graph"),
        api(&direct, "/api/v1/graph"),
        "the same graph"
    );
    let tree = "/api/v1/tree?limit=100000";
    assert_eq!(api(&via, tree), api(&direct, tree), "the same prefix tree");
    assert!(edges(&via).len() >= 3, "the graph has the cinema's edges: {graph}");

    // 4. The Collector's spanmetrics connector, on the same spans, beside dei-collector's service graph.
    let dei = dei_edge_metrics(&via);
    assert_eq!(dei, dei_edge_metrics(&direct));
    let mut last: Vec<Sample> = Vec::new();
    let spans_of = |samples: &[Sample]| -> f64 {
        samples
            .iter()
            .filter(|s| s.name == "traces_span_metrics_calls_total")
            .map(|s| s.value)
            .sum()
    };
    let flushed = eventually(PATIENCE, || {
        last = peers::scrape(&spanmetrics);
        spans_of(&last) == n as f64
    });
    assert!(
        flushed,
        "spanmetrics counted {} of {n} spans: {:#?}",
        spans_of(&last),
        last.iter()
            .filter(|s| s.name.starts_with("traces_span"))
            .take(20)
            .collect::<Vec<_>>()
    );
    // calls that never reached their server (merged from virtual nodes into the edges to it), per server
    let mut unreached: BTreeMap<String, f64> = BTreeMap::new();
    for e in api(&via, "/api/v1/graph")["edges"].as_array().expect("edges") {
        if let (Some(server), Some(n)) = (e["server"].as_str(), e["merged_requests"].as_u64()) {
            *unreached.entry(server.to_string()).or_default() += n as f64;
        }
    }
    compare_spanmetrics(&last, &dei, &unreached, &spans);
    eprintln!(
        "real peers: {executions} executions, {n} spans in Jaeger and both dei-collectors; service-graph edges \
         (requests, failed): {dei:?}"
    );
}

/// Relates the spanmetrics connector's calls (per service, span kind, status and `rpc.service`) to
/// dei-collector's service-graph edges (docs/deploying-collector.md, "spanmetrics beside dei-collector"):
/// - per client service: its client spans = the requests of its edges (to services and virtual nodes), and
///   its failed client spans = the failed requests of those edges;
/// - per server service: its server spans = the requests of the edges into it, less the calls that never
///   reached it (`merged_requests`: client spans that named its `rpc.service` and met no server span);
/// - per client service and `rpc.service` R: its client spans (all, and failed) = the requests (all, and
///   failed) of its edge to R's service plus those of its edge to the virtual node R (calls that never
///   reached a server, named by `rpc.service`: merged into the edge to R's service once a server span showed
///   that service serving R, so the virtual edge is then absent).
fn compare_spanmetrics(
    samples: &[Sample],
    dei: &BTreeMap<(String, String), (f64, f64)>,
    unreached: &BTreeMap<String, f64>,
    spans: &[SpanData],
) {
    let calls = |with: &[(&str, &str)]| sum(samples, "traces_span_metrics_calls", with);
    let clients: BTreeSet<&String> = dei.keys().map(|(c, _)| c).collect();
    let servers: BTreeSet<&String> = dei.keys().map(|(_, s)| s).collect();
    let virtual_nodes: BTreeSet<&String> = servers
        .iter()
        .copied()
        .filter(|s| calls(&[("service_name", s), ("span_kind", "SPAN_KIND_SERVER")]) == 0.0)
        .collect();
    assert!(!clients.is_empty());
    for client in &clients {
        let (requests, failed) = dei
            .iter()
            .filter(|((c, _), _)| c == *client)
            .fold((0.0, 0.0), |(r, f), (_, (er, ef))| (r + er, f + ef));
        assert_eq!(
            calls(&[("service_name", client), ("span_kind", "SPAN_KIND_CLIENT")]),
            requests,
            "client spans of {client} = requests of its edges"
        );
        assert_eq!(
            calls(&[
                ("service_name", client),
                ("span_kind", "SPAN_KIND_CLIENT"),
                ("status_code", "STATUS_CODE_ERROR")
            ]),
            failed,
            "failed client spans of {client} = failed requests of its edges"
        );
        // per callee: the client spans naming it by rpc.service are the requests of the edge to the service
        // plus those of the edge to the virtual node of that name (calls that never reached a server)
        let rpc_services: BTreeSet<&String> = samples
            .iter()
            .filter(|s| s.labels.get("service_name") == Some(client))
            .filter_map(|s| s.labels.get("rpc_service"))
            .collect();
        for rpc in rpc_services {
            let with_rpc = |status: Option<&'static str>| {
                let mut with = vec![
                    ("service_name", client.as_str()),
                    ("span_kind", "SPAN_KIND_CLIENT"),
                    ("rpc_service", rpc.as_str()),
                ];
                with.extend(status.map(|s| ("status_code", s)));
                calls(&with)
            };
            let edge = |server: &str| {
                dei.get(&(client.to_string(), server.to_string()))
                    .copied()
                    .unwrap_or_default()
            };
            let (to_service, to_virtual) = (edge(&service_of(rpc)), edge(rpc));
            assert_eq!(
                with_rpc(None),
                to_service.0 + to_virtual.0,
                "{client} → {rpc}: client spans = requests to {} and to the virtual node {rpc}",
                service_of(rpc)
            );
            assert_eq!(
                with_rpc(Some("STATUS_CODE_ERROR")),
                to_service.1 + to_virtual.1,
                "{client} → {rpc}: failed client spans = failed requests"
            );
        }
    }
    for server in servers.iter().filter(|s| !virtual_nodes.contains(*s)) {
        let into: f64 = dei.iter().filter(|((_, s), _)| s == *server).map(|(_, e)| e.0).sum();
        assert_eq!(
            calls(&[("service_name", server), ("span_kind", "SPAN_KIND_SERVER")]),
            into - unreached.get(*server).copied().unwrap_or_default(),
            "server spans of {server} = requests of the edges into it, less the calls that never reached it"
        );
    }
    // the spans the connector counted are the spans made, by kind
    for (kind, name) in [
        (SpanKind::Client, "SPAN_KIND_CLIENT"),
        (SpanKind::Server, "SPAN_KIND_SERVER"),
    ] {
        let made = spans.iter().filter(|s| s.span_kind == kind).count() as f64;
        assert_eq!(calls(&[("span_kind", name)]), made, "{name} spans");
    }
}

/// The demo binary, built beside this test by `cargo test` (examples are built with the tests).
fn demo_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join("demo");
    path.is_file().then_some(path)
}

#[test]
fn the_demo_forwards_every_span_to_jaeger() {
    let Some(jaeger_bin) = peers::jaeger_bin() else {
        return;
    };
    let Some(demo) = demo_binary() else {
        let why = "the demo binary (target/…/examples/demo) is not built: run `cargo test` without --test, or \
                   `cargo build --example demo`";
        if peers::required() {
            panic!("DEI_REQUIRE_INTEROP=1 but {why}");
        }
        eprintln!("\n!!!!!!!!!! NOT RUN: {why} !!!!!!!!!!\n");
        return;
    };
    for protocol in ["grpc", "http"] {
        let jaeger = Jaeger::start(&jaeger_bin, "jaeger.yaml", &[]);
        let endpoint = match protocol {
            "grpc" => format!("http://{}", jaeger.otlp_grpc),
            _ => format!("http://{}/v1/traces", jaeger.otlp_http),
        };
        let report = std::env::temp_dir().join(format!("dei-real-peers-demo-{}-{protocol}.json", std::process::id()));
        let out = Command::new(&demo)
            .args(["--exit", "--forward", &endpoint, "--forward-protocol", protocol])
            .arg("--report")
            .arg(&report)
            .output()
            .expect("run the demo");
        let _ = std::fs::remove_file(&report);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the demo runs: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |name: &str| -> String {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("no {name:?} line in {stdout}"))
        };
        let received: usize = field("spans received:").parse().expect("a count");
        let services: BTreeSet<String> = field("services:")
            .split_once('(')
            .map(|(_, list)| list.trim_end_matches(')').split(", ").map(String::from).collect())
            .expect("the services");
        assert!(received > 0, "{stdout}");
        // Every span the demo's collector received is in Jaeger, once, under the demo's services.
        let mut found: BTreeSet<(String, String)> = BTreeSet::new();
        let complete = eventually(PATIENCE, || {
            found = jaeger
                .services()
                .iter()
                .flat_map(|s| jaeger.spans_of_service(s, 100_000))
                .map(|s| (s.trace_id, s.span_id))
                .collect();
            found.len() >= received
        });
        assert!(
            complete,
            "{protocol}: Jaeger has {} of the {received} spans",
            found.len()
        );
        assert_eq!(found.len(), received, "{protocol}: no other spans");
        assert!(
            jaeger.services().is_superset(&services),
            "{protocol}: Jaeger lists the demo's services {services:?}: {:?}",
            jaeger.services()
        );
    }
}
