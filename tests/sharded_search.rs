//! dei-sfit's exhaustive search reading its spans from a sharded deployment (issue #21): the cinema-10
//! services export every span both to one dei-collector and to the real OpenTelemetry Collector, whose
//! loadbalancing exporter (`docs/deploy/otelcol-loadbalancing.yaml`, routing by trace id) spreads them over
//! three dei-collectors; a query node (`server::start_query`) serves the union. The same search, with
//! `CollectorSpans` unchanged, once against the single instance and once against the query node, gives the
//! same report.
//!
//! Without `$DEI_OTELCOL_BIN` the test says loudly that it did not run; with `DEI_REQUIRE_INTEROP=1` (CI) it
//! fails.

use dei_corpus::cinema::{self, Variant};
use dei_corpus::demo_setup::{ServiceRouter, install_telemetry};
#[path = "../collector-plugin/tests/peers/mod.rs"]
mod peers;

use dei_collector::server::{self, QueryConfig, Running, ServerConfig};
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{CollectorSpans, Progress, Report, Search, SearchOptions};
use opentelemetry_sdk::trace::SdkTracerProvider;
use peers::{Peer, deploy_file, free_addr, free_port};
use std::time::Duration;

/// The process's telemetry: the DEI propagator, and one tracer provider that sends every span, batched,
/// through one [`ServiceRouter`] per endpoint (each span with its service's `service.name`).
fn telemetry(routers: &[ServiceRouter]) -> SdkTracerProvider {
    let mut builder = SdkTracerProvider::builder();
    for r in routers {
        builder = builder.with_batch_exporter(r.clone());
    }
    install_telemetry(builder, "dei-sharded-search")
}

/// What a report says, without what differs from run to run (trace ids, times).
fn essence(report: &Report) -> Vec<String> {
    report
        .executions
        .iter()
        .map(|e| {
            let faults = |fs: &[dei_sfit::PlannedFault]| -> Vec<String> {
                fs.iter().map(|f| format!("{}={}", f.index.encode(), f.fault)).collect()
            };
            let rpcs: Vec<String> = e
                .rpcs
                .iter()
                .map(|r| format!("{} {}", r.index.encode(), r.signature))
                .collect();
            format!(
                "#{} plan {:?} effective {:?} unreached {:?} outcome {:?} unsettled {:?} dropped {} rpcs {rpcs:?}",
                e.number,
                faults(&e.plan),
                faults(&e.effective),
                faults(&e.unreached),
                e.outcome,
                e.unsettled,
                e.spans_dropped,
            )
        })
        .collect()
}

#[test]
fn the_search_through_three_shards_gives_the_single_instances_report() {
    let Some(otelcol_bin) = peers::otelcol_bin() else {
        return;
    };
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    // the collectors on a runtime of their own: the search's flush blocks a thread of the search's runtime
    // while the spans go to them
    let (rt, servers) = (runtime(), runtime());
    let start = || {
        servers
            .block_on(server::start(ServerConfig::ephemeral()))
            .expect("a dei-collector")
    };
    let single: Running = start();
    let shards: Vec<Running> = (0..3).map(|_| start()).collect();
    let mut query = QueryConfig::new(
        shards.iter().map(|s| format!("http://{}", s.api_addr)).collect(),
        "127.0.0.1:0".parse().expect("an address"),
    );
    query.interval = Duration::from_millis(100);
    let query = servers.block_on(server::start_query(query)).expect("a query node");
    let (grpc, http) = (free_addr(), free_addr());
    let mut vars = vec![
        ("OTELCOL_OTLP_GRPC", grpc.clone()),
        ("OTELCOL_OTLP_HTTP", http.clone()),
        ("OTELCOL_METRICS_HOST", "127.0.0.1".to_string()),
        ("OTELCOL_METRICS_PORT", free_port().to_string()),
    ];
    for (name, shard) in ["DEI_SHARD_1", "DEI_SHARD_2", "DEI_SHARD_3"].into_iter().zip(&shards) {
        vars.push((name, shard.grpc_addr.to_string()));
    }
    let _otelcol = Peer::start(
        "otelcol",
        &otelcol_bin,
        &[deploy_file("otelcol-loadbalancing.yaml")],
        &vars,
        &[&grpc, &http],
    );

    let routers = vec![
        ServiceRouter::new(format!("http://{}/v1/traces", single.http_addr)),
        ServiceRouter::new(format!("http://{http}/v1/traces")),
    ];
    let provider = telemetry(&routers);
    // every span of an execution on its way before the search reads it: the batch processor's queue, then
    // the spans that waited for their parent (on a thread of its own: the exporters block)
    let flush = move || {
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = provider.force_flush();
                for r in &routers {
                    let _ = futures::executor::block_on(r.export_pending());
                }
            });
        });
    };
    let flush = std::sync::Arc::new(flush);
    let dei_config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let settle = SettleConfig {
        // longer than the query node's pull interval and the Collector's hop
        quiet: Duration::from_millis(800),
        timeout: Duration::from_secs(20),
        ..SettleConfig::default()
    };
    let search = |api: String| {
        let flush = flush.clone();
        let settle = settle.clone();
        let dei_config = dei_config.clone();
        rt.block_on(async move {
            let cinema = cinema::start(Variant::Cinema10, &dei_config).await;
            let test = cinema::functional_test(cinema);
            let options = SearchOptions {
                catalog: cinema::catalog(),
                progress: Progress::Silent,
                ..SearchOptions::default()
            };
            let source = CollectorSpans::new(api).with_settle(settle).with_flush(move || flush());
            Search::new(options, source).run(&test).await.expect("the search runs")
        })
    };
    let through_one = search(format!("http://{}", single.api_addr));
    let through_shards = search(format!("http://{}", query.api_addr));

    assert!(through_one.executions.len() > 1, "{through_one}");
    assert!(
        through_one
            .executions
            .iter()
            .all(|e| e.unsettled.is_none() && e.spans_dropped == 0),
        "every execution's trace settled, whole, in the single instance: {through_one}"
    );
    let (a, b) = (essence(&through_shards), essence(&through_one));
    let differ: Vec<String> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("through the shards: {x}\nthrough one:        {y}"))
        .collect();
    assert!(
        differ.is_empty() && a.len() == b.len(),
        "the same search, the same report ({} and {} executions): {differ:#?}",
        a.len(),
        b.len()
    );
    // the shards really shared the work: traces are routed by trace id, at random, so a shard may get none of
    // a short search's few traces by chance, but not all of them go to one shard
    let retained: Vec<usize> = shards.iter().map(|s| s.collector.stats().traces_retained).collect();
    assert!(
        retained.iter().filter(|&&n| n > 0).count() >= 2,
        "the traces went to more than one shard: {retained:?}"
    );
    let stats = query.collector.stats();
    assert_eq!(stats.peers.map(|p| p.partial), Some(false));
    servers.block_on(query.shutdown());
}
