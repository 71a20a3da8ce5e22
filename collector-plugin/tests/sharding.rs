//! Many dei-collectors behind a real OpenTelemetry Collector's loadbalancing exporter (issue #21): the
//! configuration `docs/deploy/otelcol-loadbalancing.yaml`, run as written by the Collector built from
//! `deploy/otelcol/` (`$DEI_OTELCOL_BIN`), in front of three `dei-collector serve` processes.
//!
//! The same recorded spans go to one dei-collector directly and through the Collector to the three shards:
//! - routed by trace id, every trace lands whole on one shard, and the shards' trace lists, prefix-tree
//!   counts, graph edges (requests, failures, latency histograms bucket by bucket) and Prometheus
//!   servicegraph series (`sum by (client, server)`) add up to the single instance's;
//! - routed by service, an edge's client and server spans land on different shards: no shard can pair them,
//!   and the edges between services are lost (what the guide warns about).
//!
//! Spans are counted at every hop: sent, accepted and sent on by the Collector's receiver and exporter,
//! received by each shard.
//!
//! Losing a shard under load: with the static resolver the exporter keeps the dead shard's share for it;
//! with the dns resolver (`docs/deploy/otelcol-loadbalancing-dns.yaml`) over a name that lists the shards
//! whose `/readyz` answers, it routes around it.

mod common;

use common::chain::peers;
use common::{CollectorProcess, QueryNodeProcess, eventually, get_text};
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use peers::{Peer, Sample, deploy_file, otelcol_bin, parse_prometheus};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

const CONFIG: &str = "otelcol-loadbalancing.yaml";
const TRACES: u64 = 90;

/// One RPC of the recorded workload.
struct Rpc {
    trace: u64,
    index: Index,
    parent: Option<usize>,
    client: &'static str,
    server: &'static str,
    signature: &'static str,
    failed: bool,
    micros: u64,
}

/// A shop's traces: gateway → users, gateway → orders → stock ×2, orders → pricing and gateway → audit;
/// every seventh trace's pricing call fails, every eleventh trace's audit call fails before it reaches
/// audit (a client span alone, which becomes an edge to the virtual node `shop.Audit`, merged into `audit`),
/// and latencies vary so that the histograms fill several buckets.
fn workload() -> Vec<Rpc> {
    workload_of(0..TRACES)
}

/// [`workload`]'s traces numbered `traces`.
fn workload_of(traces: std::ops::Range<u64>) -> Vec<Rpc> {
    let mut rpcs: Vec<Rpc> = Vec::new();
    for trace in traces {
        let mut add = |parent: Option<usize>, client, server, signature, payload: String, failed| {
            let base = parent.map_or_else(Index::root, |p: usize| rpcs[p].index.clone());
            let invocation = InvocationSignature::new(
                Signature::from_name(signature),
                PayloadDigest::of(payload.as_bytes()),
                StackDigest([7; 32]),
            );
            let count = 1 + rpcs
                .iter()
                .filter(|r| r.trace == trace && r.parent == parent && r.signature == signature)
                .count() as u32;
            rpcs.push(Rpc {
                trace,
                index: base.child(Element::new(invocation.element_digest(&Instantiation::dei()), count)),
                parent,
                client,
                server,
                signature,
                failed,
                micros: 100 + (trace * 37 + rpcs.len() as u64 * 11) % 900 * (1 + trace % 4) * 10,
            });
            rpcs.len() - 1
        };
        let user = format!("user-{}", trace % 5);
        let gateway = add(None, "loadgen", "gateway", "shop.Gateway/Checkout", user.clone(), false);
        add(Some(gateway), "gateway", "users", "shop.Users/Get", user, false);
        let orders = add(
            Some(gateway),
            "gateway",
            "orders",
            "shop.Orders/Place",
            format!("order-{trace}"),
            false,
        );
        for item in 0..2 {
            add(
                Some(orders),
                "orders",
                "stock",
                "shop.Stock/Reserve",
                format!("item-{item}"),
                false,
            );
        }
        add(
            Some(orders),
            "orders",
            "pricing",
            "shop.Pricing/Quote",
            format!("order-{trace}"),
            trace % 7 == 3,
        );
        add(
            Some(gateway),
            "gateway",
            "audit",
            "shop.Audit/Record",
            format!("order-{trace}"),
            trace % 11 == 5,
        );
    }
    rpcs
}

/// The audit calls that never reached audit.
fn unreached(rpc: &Rpc) -> bool {
    rpc.server == "audit" && rpc.failed
}

fn trace_id(trace: u64) -> TraceId {
    // spread over the id space, as real trace ids are (the loadbalancing exporter hashes them)
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&(trace + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    id[8..].copy_from_slice(&(trace + 1).to_be_bytes());
    TraceId::from_bytes(id)
}

/// Every span of the workload, by the service that sends it.
fn spans(rpcs: &[Rpc]) -> BTreeMap<&'static str, Vec<SpanData>> {
    // one start for every call, so that the same trace sent twice is the same spans
    static START: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| SystemTime::now() - Duration::from_secs(60));
    let scope = InstrumentationScope::builder("dei-sharding-test").build();
    let client_id = |i: usize| SpanId::from_bytes((2 * i as u64 + 1).to_be_bytes());
    let server_id = |i: usize| SpanId::from_bytes((2 * i as u64 + 2).to_be_bytes());
    let mut out: BTreeMap<&'static str, Vec<SpanData>> = BTreeMap::new();
    for (i, rpc) in rpcs.iter().enumerate() {
        let attributes = vec![
            KeyValue::new("dei.index", rpc.index.encode()),
            KeyValue::new("dei.signature", rpc.signature),
            KeyValue::new("dei.count", i64::from(rpc.index.last().map_or(1, |e| e.count))),
            KeyValue::new("dei.depth", rpc.index.depth() as i64),
            KeyValue::new("dei.instantiation", "dei"),
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new(
                "rpc.service",
                rpc.signature.split('/').next().unwrap_or_default().to_string(),
            ),
        ];
        let at = start + Duration::from_millis(rpc.trace * 10) + Duration::from_micros(i as u64);
        let status = if rpc.failed {
            Status::error("unavailable")
        } else {
            Status::Ok
        };
        let span = |id: SpanId, parent: SpanId, kind: SpanKind, from: u64, to: u64| SpanData {
            span_context: SpanContext::new(
                trace_id(rpc.trace),
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: kind,
            name: rpc.signature.into(),
            start_time: at + Duration::from_micros(from),
            end_time: at + Duration::from_micros(to),
            attributes: attributes.clone(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: status.clone(),
            instrumentation_scope: scope.clone(),
        };
        let caller = rpc.parent.map_or(SpanId::INVALID, server_id);
        out.entry(rpc.client)
            .or_default()
            .push(span(client_id(i), caller, SpanKind::Client, 0, rpc.micros + 40));
        if !unreached(rpc) {
            out.entry(rpc.server).or_default().push(span(
                server_id(i),
                client_id(i),
                SpanKind::Server,
                20,
                rpc.micros + 20,
            ));
        }
    }
    out
}

/// Sends the spans over OTLP/gRPC with the SDK's exporter, one `service.name` per request.
fn export(endpoint: String, spans: &BTreeMap<&'static str, Vec<SpanData>>) -> usize {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .expect("an OTLP/gRPC exporter");
        let mut sent = 0;
        for (service, spans) in spans {
            exporter.set_resource(
                &Resource::builder_empty()
                    .with_attributes([KeyValue::new("service.name", *service)])
                    .build(),
            );
            exporter
                .export(spans.clone())
                .await
                .unwrap_or_else(|e| panic!("exporting {service}'s spans: {e}"));
            sent += spans.len();
        }
        sent
    })
}

fn metrics(c: &CollectorProcess) -> Vec<Sample> {
    parse_prometheus(&get_text(c.api, "/metrics"))
}

fn received(c: &CollectorProcess) -> u64 {
    peers::sum(&metrics(c), "dei_collector_spans_received", &[]) as u64
}

/// The retained traces' ids.
fn traces(c: &CollectorProcess) -> BTreeSet<String> {
    let list = c.get_json("/api/v1/traces?limit=10000");
    list["traces"]
        .as_array()
        .expect("a trace list")
        .iter()
        .map(|t| t["trace_id"].as_str().expect("a trace id").to_string())
        .collect()
}

/// Every prefix-tree node's counts: index → (seen, traces, errors).
fn tree(c: &CollectorProcess) -> BTreeMap<String, [u64; 3]> {
    fn walk(node: &Value, out: &mut BTreeMap<String, [u64; 3]>) {
        if let Some(index) = node["index"].as_str().filter(|i| !i.is_empty()) {
            let n = |k: &str| node[k].as_u64().unwrap_or(0);
            out.insert(index.to_string(), [n("seen"), n("traces"), n("errors")]);
        }
        for child in node["subtree"].as_array().into_iter().flatten() {
            walk(child, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&c.get_json("/api/v1/tree?depth=64&limit=100000"), &mut out);
    out
}

/// The servicegraph series (`traces_service_graph_*` counters and histogram buckets), summed by
/// `(client, server, connection_type, le)` as Prometheus's `sum by` would; and every label name they carry.
fn servicegraph(samples: &[Sample], into: &mut BTreeMap<String, f64>, labels: &mut BTreeSet<String>) {
    for s in samples
        .iter()
        .filter(|s| s.name.starts_with("traces_service_graph_request"))
    {
        labels.extend(s.labels.keys().cloned());
        let key = format!(
            "{}{{client={},server={},connection_type={},le={}}}",
            s.name,
            s.labels.get("client").map_or("", String::as_str),
            s.labels.get("server").map_or("", String::as_str),
            s.labels.get("connection_type").map_or("", String::as_str),
            s.labels.get("le").map_or("", String::as_str),
        );
        *into.entry(key).or_insert(0.0) += s.value;
    }
}

/// The same series with the same values: counters and buckets exactly, `_sum` up to the order of
/// floating-point addition.
fn assert_same_series(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, what: &str) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: the same series"
    );
    let differ: Vec<String> = b
        .iter()
        .filter(|(k, v)| {
            let x = a[*k];
            if k.contains("_sum{") {
                (x - **v).abs() > 1e-9 * v.abs().max(1.0)
            } else {
                x != **v
            }
        })
        .map(|(k, v)| format!("{k}: {} != {v}", a[k]))
        .collect();
    assert!(differ.is_empty(), "{what}: {differ:#?}");
}

/// Adds `b` into `a`, key by key.
fn add<const N: usize>(a: &mut BTreeMap<String, [u64; N]>, b: BTreeMap<String, [u64; N]>) {
    for (k, v) in b {
        let e = a.entry(k).or_insert([0; N]);
        for i in 0..N {
            e[i] += v[i];
        }
    }
}

/// The graph's edges between real services: `client->server` → (requests, failed).
fn edges(c: &CollectorProcess) -> BTreeMap<String, [u64; 2]> {
    let graph = c.get_json("/api/v1/graph");
    graph["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                format!(
                    "{}->{} ({})",
                    e["client"].as_str().unwrap_or_default(),
                    e["server"].as_str().unwrap_or_default(),
                    e["connection_type"].as_str().unwrap_or_default()
                ),
                [e["requests"].as_u64().unwrap_or(0), e["failed"].as_u64().unwrap_or(0)],
            )
        })
        .collect()
}

/// A Collector running `otelcol-loadbalancing.yaml` in front of `shards`, routing by `routing_key`: the
/// process, its OTLP/gRPC port and its metrics address.
fn otelcol(bin: &std::path::Path, shards: &[CollectorProcess], routing_key: &str) -> (Peer, u16, String) {
    let (grpc, http, metrics) = (peers::free_port(), peers::free_port(), peers::free_port());
    let mut vars = vec![
        ("OTELCOL_OTLP_GRPC", format!("127.0.0.1:{grpc}")),
        ("OTELCOL_OTLP_HTTP", format!("127.0.0.1:{http}")),
        ("OTELCOL_METRICS_HOST", "127.0.0.1".to_string()),
        ("OTELCOL_METRICS_PORT", metrics.to_string()),
        ("DEI_ROUTING_KEY", routing_key.to_string()),
    ];
    for (name, shard) in ["DEI_SHARD_1", "DEI_SHARD_2", "DEI_SHARD_3"].into_iter().zip(shards) {
        vars.push((name, shard.grpc.to_string()));
    }
    let peer = Peer::start(
        "otelcol",
        bin,
        &[deploy_file(CONFIG)],
        &vars,
        &[&format!("127.0.0.1:{grpc}"), &format!("127.0.0.1:{http}")],
    );
    (peer, grpc, format!("127.0.0.1:{metrics}"))
}

/// Starts the single instance and three shards (the pairing store's TTL short, so that unpaired halves
/// expire within the test).
fn collectors() -> (CollectorProcess, Vec<CollectorProcess>) {
    let args = ["--pairing-ttl-ms", "1000"];
    let single = CollectorProcess::start(&args);
    let shards = (0..3).map(|_| CollectorProcess::start(&args)).collect();
    (single, shards)
}

/// Sends the workload to `single` directly and through the Collector to the shards, and waits until every
/// span is counted at every hop.
fn run(routing_key: &str) -> Option<(CollectorProcess, Vec<CollectorProcess>)> {
    let bin = otelcol_bin()?;
    let rpcs = workload();
    let spans = spans(&rpcs);
    let total: usize = spans.values().map(Vec::len).sum();
    let (single, shards) = collectors();
    let (_otelcol, otelcol_grpc, otelcol_metrics) = otelcol(&bin, &shards, routing_key);

    assert_eq!(export(format!("http://{}", single.grpc), &spans), total);
    assert_eq!(export(format!("http://127.0.0.1:{otelcol_grpc}"), &spans), total);

    let arrived = eventually(Duration::from_secs(30), || {
        received(&single) == total as u64 && shards.iter().map(received).sum::<u64>() == total as u64
    });
    let per_shard: Vec<u64> = shards.iter().map(received).collect();
    let own = peers::scrape(&otelcol_metrics);
    let accepted = peers::sum(&own, "otelcol_receiver_accepted_spans", &[]);
    let sent_on = peers::sum(&own, "otelcol_exporter_sent_spans", &[]);
    assert!(
        arrived,
        "{routing_key}: spans at every hop: sent {total} to each path; single received {}; the Collector \
         accepted {accepted} and sent {sent_on}; the shards received {per_shard:?}",
        received(&single)
    );
    // the Collector's loadbalancing exporter sends through one otlp exporter per endpoint: its own count
    // of sent spans is theirs, summed
    assert_eq!(
        accepted as usize, total,
        "{routing_key}: the Collector accepted every span"
    );
    assert!(
        sent_on as usize >= total,
        "{routing_key}: the Collector sent every span on ({sent_on})"
    );
    // every query applies what was accepted; halves still waiting for their peer expire after the pairing
    // store's TTL and are then counted as unpaired
    for c in std::iter::once(&single).chain(&shards) {
        let settled = || c.get_json("/api/v1/stats")["graph_waiting_spans"] == 0;
        assert!(
            eventually(Duration::from_secs(10), settled),
            "{routing_key}: pairing settled"
        );
    }
    Some((single, shards))
}

/// `dei-collector query` over the shards.
struct QueryNode(QueryNodeProcess);

impl std::ops::Deref for QueryNode {
    type Target = QueryNodeProcess;
    fn deref(&self) -> &QueryNodeProcess {
        &self.0
    }
}

impl QueryNode {
    fn start(shards: &[&CollectorProcess]) -> QueryNode {
        QueryNode::over(shards.iter().map(|s| format!("http://{}", s.api)).collect())
    }

    /// A query node over these API base URLs (shards, or other query nodes).
    fn over(peers: Vec<String>) -> QueryNode {
        QueryNode(QueryNodeProcess::start(&peers, &["--timeout-ms", "2000"]))
    }

    fn get(&self, path: &str) -> Value {
        common::get_json(self.api, path)
    }
}

/// Where two JSON documents differ: `path: a != b` per differing leaf. Declared: sums of floating-point
/// seconds (latency sums and means) are equal up to the order of addition (1e-9, relative).
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            if (x - y).abs() > 1e-9 * x.abs().max(y.abs()).max(1e-12) {
                out.push(format!("{at}: {x} != {y}"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()).collect::<BTreeSet<_>>() {
                differences(&x[k], y.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{at}[{i}]"), out);
            }
        }
        _ if a != b => out.push(format!("{at}: {a} != {b}")),
        _ => {}
    }
}

/// The same document from the merged view and from the single instance.
fn same(query: &QueryNode, single: &CollectorProcess, path: &str) -> Value {
    let (merged, one) = (query.get(path), single.get_json(path));
    let mut differ = Vec::new();
    differences(&merged, &one, "", &mut differ);
    assert!(
        differ.is_empty(),
        "{path}: the merged view (left) differs from the single instance: {differ:#?}"
    );
    one
}

#[test]
fn routed_by_trace_id_the_shards_add_up_to_one_instance() {
    let Some((single, shards)) = run("traceID") else {
        return;
    };

    // every trace whole on exactly one shard, and every shard got some
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, shard) in shards.iter().enumerate() {
        let mine = traces(shard);
        assert!(!mine.is_empty(), "shard {i} got traces");
        for t in mine {
            assert!(seen.insert(t.clone(), i).is_none(), "trace {t} on two shards");
        }
    }
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), traces(&single));
    assert_eq!(seen.len() as u64, TRACES);

    // prefix-tree counts and graph edges add up
    let mut sum_tree = BTreeMap::new();
    let mut sum_edges = BTreeMap::new();
    for shard in &shards {
        add(&mut sum_tree, tree(shard));
        add(&mut sum_edges, edges(shard));
    }
    let single_tree = tree(&single);
    assert!(single_tree.len() > 10, "the workload's tree: {single_tree:?}");
    assert_eq!(sum_tree, single_tree, "tree counts");
    let single_edges = edges(&single);
    assert!(
        single_edges.contains_key("orders->pricing ()") && single_edges["orders->pricing ()"][1] > 0,
        "{single_edges:?}"
    );
    assert_eq!(sum_edges, single_edges, "edge requests and failures");
    let never_reached = (0..TRACES).filter(|t| t % 11 == 5).count() as u64;
    let audit = &single.get_json("/api/v1/graph")["edges"];
    assert!(
        audit.as_array().is_some_and(|edges| edges
            .iter()
            .any(|e| e["server"] == "audit" && e["merged_failed"].as_u64() == Some(never_reached))),
        "the {never_reached} audit calls that failed before reaching audit are merged into its edge: {audit}"
    );

    // Prometheus: the servicegraph series, summed over the instances by (client, server), bucket by bucket,
    // equal one instance's; no series carries a per-process label (Prometheus adds `instance` at scrape)
    let (mut summed, mut one) = (BTreeMap::new(), BTreeMap::new());
    let mut labels = BTreeSet::new();
    for shard in &shards {
        servicegraph(&metrics(shard), &mut summed, &mut labels);
    }
    servicegraph(&metrics(&single), &mut one, &mut labels);
    assert!(one.keys().any(|k| k.contains("_bucket")), "histogram buckets: {one:?}");
    assert_same_series(&summed, &one, "sum by (client, server) over the shards");
    assert_eq!(
        labels,
        ["client", "connection_type", "le", "server"].map(String::from).into(),
        "the servicegraph series' labels"
    );

    // one view over the shards: `dei-collector query` answers the same JSON as the single instance
    let query = QueryNode::start(&shards.iter().collect::<Vec<_>>());
    let total = single.get_json("/api/v1/stats")["counters"]["spans_received"].clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            query.get("/api/v1/stats")["counters"]["spans_received"] == total
        }),
        "the query node pulled every shard"
    );
    let stats = query.get("/api/v1/stats");
    let peers = &stats["peers"];
    assert_eq!(peers["partial"], false, "{stats}");
    assert_eq!(peers["peers"].as_array().map(Vec::len), Some(3), "{stats}");
    let one = single.get_json("/api/v1/stats");
    for key in ["tree_nodes", "traces_retained", "graph_edges", "graph_waiting_spans"] {
        assert_eq!(stats[key], one[key], "stats.{key}");
    }
    same(&query, &single, "/api/v1/tree?depth=64&limit=100000");
    same(&query, &single, "/api/v1/graph");
    same(&query, &single, "/api/v1/analyses");
    let list = same(&query, &single, "/api/v1/traces?limit=10000");
    for t in list["traces"].as_array().expect("traces") {
        same(
            &query,
            &single,
            &format!("/api/v1/traces/{}", t["trace_id"].as_str().expect("an id")),
        );
    }
    let (mut merged_series, mut one_series) = (BTreeMap::new(), BTreeMap::new());
    servicegraph(
        &parse_prometheus(&get_text(query.api, "/metrics")),
        &mut merged_series,
        &mut BTreeSet::new(),
    );
    servicegraph(&metrics(&single), &mut one_series, &mut BTreeSet::new());
    assert_same_series(&merged_series, &one_series, "the query node's servicegraph series");

    // query nodes stack: a query node serves the same snapshots (whole and changes) as a shard, so one over
    // two query nodes (over shards 0 and 1, and over shard 2) answers the same again
    let lower = [
        QueryNode::start(&[&shards[0], &shards[1]]),
        QueryNode::start(&[&shards[2]]),
    ];
    let top = QueryNode::over(lower.iter().map(|q| format!("http://{}", q.api)).collect());
    assert!(
        eventually(Duration::from_secs(10), || {
            top.get("/api/v1/stats")["counters"]["spans_received"] == total
        }),
        "the query node over query nodes pulled them"
    );
    same(&top, &single, "/api/v1/tree?depth=64&limit=100000");
    same(&top, &single, "/api/v1/graph");
    same(&top, &single, "/api/v1/analyses");
    let list = same(&top, &single, "/api/v1/traces?limit=10000");
    for t in list["traces"].as_array().expect("traces").iter().take(10) {
        same(
            &top,
            &single,
            &format!("/api/v1/traces/{}", t["trace_id"].as_str().expect("an id")),
        );
    }
}

#[test]
fn routed_by_service_the_edges_between_services_are_lost() {
    let Some((single, shards)) = run("service") else {
        return;
    };
    // each service's spans on one shard: a trace is split over several
    let mut on: BTreeMap<String, usize> = BTreeMap::new();
    for shard in &shards {
        for t in traces(shard) {
            *on.entry(t).or_insert(0) += 1;
        }
    }
    assert!(on.values().any(|n| *n > 1), "traces split over shards: {on:?}");

    // an edge between two services routed to different shards is never paired: its requests are missing
    // from every shard (they appear, if at all, as calls to virtual nodes or as unpaired spans)
    let single_edges = edges(&single);
    let mut sum_edges = BTreeMap::new();
    for shard in &shards {
        add(&mut sum_edges, edges(shard));
    }
    let real = |edges: &BTreeMap<String, [u64; 2]>| -> u64 {
        edges.iter().filter(|(k, _)| k.ends_with("()")).map(|(_, v)| v[0]).sum()
    };
    assert!(
        real(&sum_edges) < real(&single_edges),
        "edges between real services lost: shards {sum_edges:?}, single {single_edges:?}"
    );
    let unpaired: f64 = shards
        .iter()
        .map(|s| peers::sum(&metrics(s), "traces_service_graph_unpaired_spans", &[]))
        .sum();
    assert!(unpaired > 0.0, "the shards counted unpaired halves");
    assert_eq!(
        peers::sum(&metrics(&single), "traces_service_graph_unpaired_spans", &[]),
        0.0
    );
}

/// The workload's spans of the traces that `keep` selects.
fn spans_of(rpcs: &[Rpc], keep: impl Fn(u64) -> bool) -> BTreeMap<&'static str, Vec<SpanData>> {
    let mut out = spans(rpcs);
    for spans in out.values_mut() {
        spans.retain(|s| {
            let id = s.span_context.trace_id().to_bytes();
            keep(u64::from_be_bytes(id[8..].try_into().expect("8 bytes")) - 1)
        });
    }
    out.retain(|_, spans| !spans.is_empty());
    out
}

fn spans_received(v: &Value) -> u64 {
    v["counters"]["spans_received"].as_u64().unwrap_or(0)
}

#[test]
fn a_shard_that_is_down_makes_the_view_partial_until_it_returns() {
    // three shards, each sent the traces that routing by trace id would send it (no Collector needed here)
    let rpcs = workload();
    let share = |i: u64| move |trace: u64| trace % 3 == i;
    let single = CollectorProcess::start(&[]);
    let ports: Vec<u16> = (0..3).map(|_| peers::free_port()).collect();
    let shard = |i: usize| CollectorProcess::start(&["--api-listen", &format!("127.0.0.1:{}", ports[i])]);
    let mut shards: Vec<Option<CollectorProcess>> = (0..3).map(|i| Some(shard(i))).collect();
    let total = export(format!("http://{}", single.grpc), &spans(&rpcs)) as u64;
    let mut shares = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        let s = s.as_ref().expect("running");
        shares.push(export(format!("http://{}", s.grpc), &spans_of(&rpcs, share(i as u64))) as u64);
    }
    assert_eq!(shares.iter().sum::<u64>(), total);
    let query = QueryNode::start(&shards.iter().flatten().collect::<Vec<_>>());
    assert!(eventually(Duration::from_secs(10), || spans_received(
        &query.get("/api/v1/stats")
    ) == total));
    same(&query, &single, "/api/v1/tree?depth=64&limit=100000");

    // shard 2 goes away: the view holds the others' shares, says it is partial and which shard is missing,
    // and every page still answers
    drop(shards[2].take());
    assert!(
        eventually(
            Duration::from_secs(10),
            || query.get("/api/v1/stats")["peers"]["partial"] == true
        ),
        "the view became partial"
    );
    let stats = query.get("/api/v1/stats");
    assert_eq!(spans_received(&stats), total - shares[2], "{stats}");
    let view = query.get("/api/v1/peers");
    let missing = &view["peers"][2];
    assert_eq!(
        (missing["answered"].clone(), view["peers"][0]["answered"].clone()),
        (Value::Bool(false), Value::Bool(true)),
        "{view}"
    );
    assert!(missing["error"].as_str().is_some_and(|e| !e.is_empty()), "{view}");
    // still ready: two of three shards answer (a query node receives nothing, so no receiver is claimed)
    let (code, ready) = peers::http_get(&query.api.to_string(), "/readyz");
    let ready: Value = serde_json::from_str(&ready).expect("JSON");
    assert_eq!(code, 200, "{ready}");
    assert_eq!(ready["receivers"], "none", "{ready}");
    assert_eq!(ready["shards"]["answered"], 2, "{ready}");
    assert_eq!(ready["shards"]["partial"], true, "{ready}");
    for path in [
        "/api/v1/tree",
        "/api/v1/graph",
        "/api/v1/traces",
        "/api/v1/analyses",
        "/metrics",
    ] {
        let text = get_text(query.api, path);
        assert!(!text.is_empty(), "{path} answers while a shard is down");
    }
    let traces = query.get("/api/v1/traces?limit=10000");
    assert_eq!(traces["retained"].as_u64(), Some(TRACES - TRACES / 3), "{traces}");

    // it returns (empty, on the same address) and gets its share again: the view is whole and exact
    let back = shard(2);
    assert_eq!(
        export(format!("http://{}", back.grpc), &spans_of(&rpcs, share(2))) as u64,
        shares[2]
    );
    shards[2] = Some(back);
    assert!(
        eventually(Duration::from_secs(10), || {
            let s = query.get("/api/v1/stats");
            s["peers"]["partial"] == false && spans_received(&s) == total
        }),
        "the view is whole again"
    );
    same(&query, &single, "/api/v1/tree?depth=64&limit=100000");
    same(&query, &single, "/api/v1/traces?limit=10000");
    same(&query, &single, "/api/v1/analyses");
}

/// Losing a shard under load, behind the real loadbalancing exporter with its static resolver: the exporter
/// does not route around it (the static resolver keeps it in the ring; the dns resolver does route around,
/// in the next test); its otlp sub-exporter queues and
/// retries that shard's share, which arrives when the shard is back. What the killed process had analyzed
/// before it died is lost to the analysis (not to the downstream it forwarded to). Every span is counted at
/// every hop.
#[test]
fn a_shard_killed_under_load_gets_its_share_when_it_returns() {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let (grpc_port, api_port) = (peers::free_port(), peers::free_port());
    let fixed = [
        "--grpc-listen".to_string(),
        format!("127.0.0.1:{grpc_port}"),
        "--api-listen".to_string(),
        format!("127.0.0.1:{api_port}"),
    ];
    let fixed: Vec<&str> = fixed.iter().map(String::as_str).collect();
    let mut shards = vec![
        CollectorProcess::start(&[]),
        CollectorProcess::start(&[]),
        CollectorProcess::start(&fixed),
    ];
    let (_otelcol, otelcol_grpc, otelcol_metrics) = otelcol(&bin, &shards, "traceID");
    let query = QueryNode::start(&shards.iter().collect::<Vec<_>>());

    // three waves of traces: before the kill, while shard 2 is down, after it returns
    let waves = [0..60u64, 60..120, 120..180];
    let send = |w: usize| {
        export(
            format!("http://127.0.0.1:{otelcol_grpc}"),
            &spans(&workload_of(waves[w].clone())),
        )
    };
    let mut sent = send(0) as u64;
    assert!(eventually(Duration::from_secs(20), || shards
        .iter()
        .map(received)
        .sum::<u64>()
        == sent));
    let lost_with_the_process = received(&shards[2]);
    assert!(lost_with_the_process > 0, "shard 2 had a share before it died");
    drop(shards.pop());

    sent += send(1) as u64;
    // the other shards get their shares at once; shard 2's waits in the Collector, which keeps retrying
    let others = || shards.iter().map(received).sum::<u64>();
    assert!(eventually(Duration::from_secs(20), || {
        query.get("/api/v1/stats")["peers"]["partial"] == true
    }));
    let own = peers::scrape(&otelcol_metrics);
    let accepted = peers::sum(&own, "otelcol_receiver_accepted_spans", &[]) as u64;
    assert_eq!(
        accepted, sent,
        "the Collector accepted every span while a shard was down"
    );
    let during = others();

    shards.push(CollectorProcess::start(&fixed));
    sent += send(2) as u64;
    assert!(
        eventually(Duration::from_secs(60), || {
            shards.iter().map(received).sum::<u64>() + lost_with_the_process == sent
        }),
        "every span reached a shard once the shard was back: sent {sent}; received {:?}, and {} by the \
         killed process; while it was down the others had {during}",
        shards.iter().map(received).collect::<Vec<_>>(),
        lost_with_the_process
    );
    // not routed around: the returned shard holds traces of the wave sent while it was down (the Collector
    // kept them for it), and no trace is on two shards
    let wave1: BTreeSet<String> = waves[1]
        .clone()
        .map(|t| ::hex::encode(trace_id(t).to_bytes()))
        .collect();
    let back = traces(&shards[2]);
    assert!(
        back.iter().any(|t| wave1.contains(t)),
        "shard 2's share of wave 1 waited for it"
    );
    let mut seen = BTreeSet::new();
    for shard in &shards {
        for t in traces(shard) {
            assert!(seen.insert(t.clone()), "trace {t} on two shards");
        }
    }
    let own = peers::scrape(&otelcol_metrics);
    assert_eq!(
        peers::sum(&own, "otelcol_exporter_send_failed_spans", &[]),
        0.0,
        "the Collector gave up on no span (its retries outlasted the outage)"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let s = query.get("/api/v1/stats");
            s["peers"]["partial"] == false && spans_received(&s) == sent - lost_with_the_process
        }),
        "the merged view is whole again, without what the killed process held"
    );
}

const DNS_CONFIG: &str = "otelcol-loadbalancing-dns.yaml";
/// The name that `otelcol-loadbalancing-dns.yaml`'s dns resolver resolves to the shards that are up.
const SHARDS_NAME: &str = "dei-shards.test";

/// How this machine gives a child its own `/etc/hosts`: `unshare`'s options for a mount namespace (`-m` as
/// root, `-Urm` with a user namespace otherwise), or `None` after a report. That private file is how the
/// Collector sees a name that lists only the shards that are up.
fn private_hosts_file() -> Option<&'static [&'static str]> {
    let works = |options: &[&str]| {
        Command::new("unshare")
            .args(options)
            .args(["sh", "-c", "mount --bind /dev/null /etc/hosts"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let found = [&["-m"][..], &["-Urm"][..]].into_iter().find(|o| works(o));
    if found.is_none() {
        common::chain::unavailable(
            "`unshare -m` or `unshare -Urm` (a private /etc/hosts for the Collector's dns resolver)",
        );
    }
    found
}

/// Plays the part of a Kubernetes headless Service with a readiness probe: every 100 ms it asks each
/// shard's `/readyz` and writes the ones that are ready (not three failures in a row) into a hosts file
/// under [`SHARDS_NAME`], shard `i` as 127.0.0.`i+1`. The Collector sees that file as its `/etc/hosts`.
struct Endpoints {
    file: tempfile::NamedTempFile,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Endpoints {
    fn start(apis: [SocketAddr; 3]) -> Endpoints {
        use std::sync::atomic::Ordering;
        let file = tempfile::NamedTempFile::new().expect("a hosts file");
        let path = file.path().to_path_buf();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hosts = |up: &[bool]| -> String {
            let mut out = String::from("127.0.0.1 localhost\n");
            for (i, _) in up.iter().enumerate().filter(|(_, up)| **up) {
                out.push_str(&format!("127.0.0.{} {SHARDS_NAME}\n", i + 1));
            }
            out
        };
        let write = move |up: &[bool]| {
            // in place: the Collector's bind mount holds this inode
            std::fs::write(&path, hosts(up)).expect("write the hosts file");
        };
        write(&[true; 3]);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut last = vec![true; 3];
                let mut failures = [0u32; 3];
                while !stop.load(Ordering::Relaxed) {
                    // as a readiness probe with `failureThreshold: 3`: one slow answer on a busy machine
                    // does not take a shard out
                    for (f, api) in failures.iter_mut().zip(&apis) {
                        *f = if ready(*api) { 0 } else { *f + 1 };
                    }
                    let up: Vec<bool> = failures.iter().map(|f| *f < 3).collect();
                    if up != last {
                        write(&up);
                        last = up;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Endpoints {
            file,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `GET /readyz` answers 200 within 500 ms.
fn ready(api: SocketAddr) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&api, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if write!(s, "GET /readyz HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Traces sent one after the other, each service's spans of a trace in a request of their own (a batch that
/// one shard refuses holds no other shard's spans), until stopped.
struct Load {
    traces: std::sync::Arc<std::sync::atomic::AtomicU64>,
    spans: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Load {
    fn start(endpoint: String) -> Load {
        use std::sync::atomic::Ordering;
        let traces = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let spans_sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (traces, spans_sent, stop) = (traces.clone(), spans_sent.clone(), stop.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                rt.block_on(async {
                    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                        .with_tonic()
                        .with_endpoint(endpoint)
                        .build()
                        .map_err(|e| e.to_string())?;
                    let mut trace = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for (service, batch) in spans(&workload_of(trace..trace + 1)) {
                            exporter.set_resource(
                                &Resource::builder_empty()
                                    .with_attributes([KeyValue::new("service.name", service)])
                                    .build(),
                            );
                            let n = batch.len() as u64;
                            exporter
                                .export(batch)
                                .await
                                .map_err(|e| format!("trace {trace}, {service}'s spans: {e}"))?;
                            spans_sent.fetch_add(n, Ordering::SeqCst);
                        }
                        trace += 1;
                        traces.store(trace, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                    Ok(())
                })
            })
        };
        Load {
            traces,
            spans: spans_sent,
            stop,
            thread: Some(thread),
        }
    }

    /// Traces sent whole so far.
    fn traces(&self) -> u64 {
        self.traces.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until `n` more traces were sent whole.
    fn wait_for(&self, n: u64) -> u64 {
        let target = self.traces() + n;
        assert!(
            eventually(Duration::from_secs(60), || self.traces() >= target),
            "the load sent {n} more traces"
        );
        self.traces()
    }

    /// Stops the load: (traces, spans) sent.
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the load thread").expect("every export succeeded");
        }
        (self.traces(), self.spans.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// The Collector running `otelcol-loadbalancing-dns.yaml` with `hosts` as its `/etc/hosts` (a private mount
/// namespace; Go's own resolver, which reads the file again when it changes): the process, its OTLP/gRPC
/// port and its metrics address.
fn otelcol_dns(
    bin: &std::path::Path,
    unshare_options: &[&str],
    hosts: &std::path::Path,
    shards_port: u16,
) -> (Peer, u16, String) {
    let (grpc, http, metrics) = (peers::free_port(), peers::free_port(), peers::free_port());
    let vars = vec![
        ("OTELCOL_OTLP_GRPC", format!("127.0.0.1:{grpc}")),
        ("OTELCOL_OTLP_HTTP", format!("127.0.0.1:{http}")),
        ("OTELCOL_METRICS_HOST", "127.0.0.1".to_string()),
        ("OTELCOL_METRICS_PORT", metrics.to_string()),
        ("DEI_SHARDS_HOSTNAME", SHARDS_NAME.to_string()),
        ("DEI_SHARDS_PORT", shards_port.to_string()),
        ("GODEBUG", "netdns=go".to_string()),
    ];
    let mut unshare = Command::new("unshare");
    unshare
        .args(unshare_options)
        .args(["sh", "-c", r#"mount --bind "$0" /etc/hosts && exec "$@""#])
        .arg(hosts)
        .arg(bin);
    let peer = Peer::start_command(
        "otelcol",
        unshare,
        &[deploy_file(DNS_CONFIG)],
        &vars,
        &[&format!("127.0.0.1:{grpc}"), &format!("127.0.0.1:{http}")],
    );
    (peer, grpc, format!("127.0.0.1:{metrics}"))
}

/// A port free on 127.0.0.1, .2 and .3 (the shards share it, as pods behind a headless Service do).
fn port_on_three_addresses() -> u16 {
    (0..100)
        .map(|_| peers::free_port())
        .find(|p| (2..=3).all(|i| std::net::TcpListener::bind((format!("127.0.0.{i}"), *p)).is_ok()))
        .expect("a port free on 127.0.0.1-3")
}

/// Losing a shard under load, behind the real loadbalancing exporter with its dns resolver
/// (`otelcol-loadbalancing-dns.yaml`) over a name that lists the shards whose `/readyz` answers: the name
/// drops the dead shard, the exporter's ring follows, the batches that failed on the dead shard are routed
/// again to the others, and the traces sent while it is down go whole to the other two. The merged view is
/// partial until the shard returns; then the name lists it again and it gets its share of new traces.
///
/// Spans are counted at every hop (the load, the Collector's receiver and exporter, each shard in and out,
/// the downstream the shards forward to). What is lost is what the killed process held and had not yet
/// forwarded, and only from traces sent before the ring dropped it.
#[test]
fn a_shard_killed_under_load_is_routed_around_when_the_name_drops_it() {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let Some(unshare_options) = private_hosts_file() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let downstream = rt.block_on(common::Downstream::start());
    let port = port_on_three_addresses();
    let apis: [SocketAddr; 3] = std::array::from_fn(|_| peers::free_addr().parse().expect("an address"));
    let args = |i: usize| {
        vec![
            "--grpc-listen".to_string(),
            format!("127.0.0.{}:{port}", i + 1),
            "--api-listen".to_string(),
            apis[i].to_string(),
            "--forward-grpc".to_string(),
            downstream.endpoint(),
        ]
    };
    let start = |i: usize| {
        let args = args(i);
        CollectorProcess::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let mut shards: Vec<CollectorProcess> = (0..3).map(start).collect();
    let endpoints = Endpoints::start(apis);
    let (_otelcol, otelcol_grpc, otelcol_metrics) = otelcol_dns(&bin, unshare_options, endpoints.file.path(), port);
    let backends = || {
        peers::sum(
            &peers::scrape(&otelcol_metrics),
            "otelcol_loadbalancer_num_backends",
            &[],
        )
    };
    assert!(
        eventually(Duration::from_secs(20), || backends() == 3.0),
        "the Collector resolved three shards"
    );
    let query = QueryNode::start(&shards.iter().collect::<Vec<_>>());

    let load = Load::start(format!("http://127.0.0.1:{otelcol_grpc}"));
    load.wait_for(40);
    assert!(
        eventually(Duration::from_secs(20), || shards.iter().all(|s| received(s) > 0)),
        "each shard got a share before the kill"
    );
    let killed_at = load.traces();
    drop(shards.pop());

    // the name drops shard 2, the Collector's ring follows; from then on, traces go whole to the others
    assert!(
        eventually(Duration::from_secs(30), || backends() == 2.0),
        "the Collector's ring dropped the dead shard"
    );
    let down_from = load.traces();
    assert!(
        eventually(
            Duration::from_secs(20),
            || query.get("/api/v1/stats")["peers"]["partial"] == true
        ),
        "the merged view says it is partial"
    );
    let down_to = load.wait_for(60);

    shards.push(start(2));
    assert!(
        eventually(Duration::from_secs(30), || backends() == 3.0),
        "the Collector's ring took the shard back"
    );
    let up_from = load.wait_for(1);
    load.wait_for(60);
    let (traces_sent, spans_sent) = load.finish();

    // every hop drains: the Collector's queue, the shards' forwarders
    let own = || peers::scrape(&otelcol_metrics);
    let settled = eventually(Duration::from_secs(60), || {
        let own = own();
        peers::sum(&own, "otelcol_receiver_accepted_spans", &[]) as u64 == spans_sent
            && peers::sum(&own, "otelcol_exporter_queue_size", &[]) == 0.0
            && shards.iter().all(|s| {
                let m = metrics(s);
                peers::sum(&m, "dei_forward_queue_spans", &[]) == 0.0
                    && peers::sum(&m, "dei_collector_forward_spans_sent", &[])
                        == peers::sum(&m, "dei_collector_spans_received", &[])
            })
    });
    let own = own();
    let accepted = peers::sum(&own, "otelcol_receiver_accepted_spans", &[]) as u64;
    let exporter = |name: &str| peers::sum(&own, name, &[("exporter", "load_balancing")]) as u64;
    let (lb_sent, lb_failed) = (
        exporter("otelcol_exporter_sent_spans"),
        exporter("otelcol_exporter_send_failed_spans"),
    );
    let shard_in: Vec<u64> = shards.iter().map(received).collect();
    let shard_out: Vec<u64> = shards
        .iter()
        .map(|s| peers::sum(&metrics(s), "dei_collector_forward_spans_sent", &[]) as u64)
        .collect();
    let (at_downstream, distinct) = {
        let r = downstream.received.lock().expect("the downstream's spans");
        (r.span_ids().len() as u64, r.distinct())
    };
    let by_killed = at_downstream.saturating_sub(shard_out.iter().sum());
    let account = format!(
        "the load sent {spans_sent} spans in {traces_sent} traces (shard 2 killed after trace {killed_at}, the \
         ring without it from trace {down_from} to {down_to}, with it again from {up_from}); the Collector \
         accepted {accepted}, its exporter sent {lb_sent} and gave up on {lb_failed}; shards 0, 1 and the \
         restarted 2 received {shard_in:?} and forwarded {shard_out:?}; the killed shard forwarded \
         {by_killed} before it died; the downstream got {at_downstream} spans, {} distinct",
        distinct.len()
    );
    eprintln!("{account}");
    assert!(settled, "every hop drained: {account}");
    assert_eq!(accepted, spans_sent, "the Collector accepted every span: {account}");
    assert_eq!(lb_failed, 0, "the Collector gave up on no span: {account}");

    // what is missing downstream: spans that the killed process held, of traces sent before the ring
    // dropped it
    let sent: BTreeSet<(Vec<u8>, Vec<u8>)> = (0..traces_sent)
        .flat_map(|t| spans(&workload_of(t..t + 1)).into_values().flatten())
        .map(|s| {
            (
                s.span_context.trace_id().to_bytes().to_vec(),
                s.span_context.span_id().to_bytes().to_vec(),
            )
        })
        .collect();
    assert_eq!(sent.len() as u64, spans_sent);
    let number = |id: &[u8]| u64::from_be_bytes(id[8..].try_into().expect("8 bytes")) - 1;
    let missing: Vec<u64> = sent.difference(&distinct).map(|(t, _)| number(t)).collect();
    assert!(
        missing.iter().all(|t| *t < down_from),
        "only spans of traces sent before the ring dropped the dead shard are missing ({missing:?}): {account}"
    );
    assert!(
        distinct.is_subset(&sent),
        "the downstream got only spans that were sent"
    );

    // routed around: each trace sent while the ring lacked shard 2 is whole on shard 0 or 1, and none is on
    // the restarted shard 2; after the return, the restarted shard gets its share
    let on: Vec<BTreeSet<String>> = shards.iter().map(traces).collect();
    let hex = |t: u64| ::hex::encode(trace_id(t).to_bytes());
    for t in down_from..down_to {
        let holders = on.iter().filter(|s| s.contains(&hex(t))).count();
        assert!(
            holders == 1 && !on[2].contains(&hex(t)),
            "trace {t}, sent while shard 2 was down, is on one of the other two: {account}"
        );
    }
    let back = (up_from..traces_sent).filter(|t| on[2].contains(&hex(*t))).count();
    assert!(
        back > 0,
        "the restarted shard got a share of the traces sent after it returned: {account}"
    );
    for t in up_from..traces_sent {
        assert_eq!(
            on.iter().filter(|s| s.contains(&hex(t))).count(),
            1,
            "trace {t} is on one shard: {account}"
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            let s = query.get("/api/v1/stats");
            s["peers"]["partial"] == false && spans_received(&s) == shard_in.iter().sum::<u64>()
        }),
        "the merged view is whole again: {account}"
    );
    drop(rt);
}

/// `GET /api/v1/snapshot` over HTTP: whole without a cursor; with the cursor of an earlier answer, only what
/// changed since (nothing, then one new trace's nodes and record); whole again for another process's epoch;
/// 400 for a partial or malformed cursor.
#[test]
fn the_snapshot_answers_what_changed_since_a_cursor() {
    let shard = CollectorProcess::start(&[]);
    let first = workload_of(0..5);
    let spans_sent = export(format!("http://{}", shard.grpc), &spans(&first));
    assert!(eventually(Duration::from_secs(10), || received(&shard) == spans_sent as u64));
    let whole = shard.get_json("/api/v1/snapshot");
    assert_eq!(whole["full"], true);
    assert_eq!(whole["version"], 2);
    let nodes = whole["nodes"].as_array().expect("nodes").len();
    assert_eq!(whole["traces"].as_array().expect("traces").len(), 5);
    let since = |c: &Value| {
        format!(
            "/api/v1/snapshot?epoch={}&tree={}&traces={}&stacks={}",
            c["epoch"], c["tree"], c["traces"], c["stacks"]
        )
    };
    let nothing = shard.get_json(&since(&whole["cursor"]));
    assert_eq!(nothing["full"], false, "{nothing}");
    assert_eq!(nothing["nodes"], Value::Array(vec![]), "nothing changed");
    assert_eq!(nothing["traces"], Value::Array(vec![]));
    assert_eq!(nothing["edges"], whole["edges"], "the graph comes whole");

    // one more trace: its nodes (and their ancestors) and its record, nothing else
    let more = export(format!("http://{}", shard.grpc), &spans(&workload_of(5..6)));
    assert!(eventually(Duration::from_secs(10), || received(&shard)
        == (spans_sent + more) as u64));
    let changed = shard.get_json(&since(&whole["cursor"]));
    assert_eq!(changed["full"], false);
    let traces: Vec<&str> = changed["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .filter_map(|t| t["trace_id"].as_str())
        .collect();
    assert_eq!(traces, [::hex::encode(trace_id(5).to_bytes())]);
    let changed_nodes = changed["nodes"].as_array().expect("nodes").len();
    let trace_5_nodes: BTreeSet<String> = workload_of(5..6)
        .iter()
        .flat_map(|r| (0..=r.index.depth()).map(|d| Index::from_elements(r.index.elements()[..d].to_vec()).encode()))
        .collect();
    assert_eq!(changed_nodes, trace_5_nodes.len(), "{changed}");
    assert!(changed_nodes < nodes);
    assert_eq!(changed["removed_nodes"], Value::Array(vec![]));

    // another process's cursor: whole
    let mut other = whole["cursor"].clone();
    other["epoch"] = Value::from(whole["cursor"]["epoch"].as_u64().expect("an epoch") ^ 2);
    assert_eq!(shard.get_json(&since(&other))["full"], true);
    for bad in [
        "/api/v1/snapshot?epoch=1",
        "/api/v1/snapshot?epoch=1&tree=x&traces=0&stacks=0",
    ] {
        let text = get_text(shard.api, bad);
        assert!(!text.contains("\"nodes\""), "{bad}: {text}");
        let status = peers::http_get(&shard.api.to_string(), bad).0;
        assert_eq!(status, 400, "{bad}");
    }
}
