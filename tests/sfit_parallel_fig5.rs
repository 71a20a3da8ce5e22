//! Parallel executions on Fig. 5's streams (issue #22): A opens a bidirectional tonic stream to B and sends
//! `Hello` and `World` concurrently; the search, with 4 executions at once, reaches the brute-force oracle's
//! effective fault sets, once each, 20 times in each order, with the same canonical report every time:
//! reading the in-memory spans through a span router (each execution its own trace's spans) and a real
//! dei-collector's API (each execution reads its own trace). One test: the telemetry is process-wide.

use dei_corpus as common;
mod sfit_compare;

use common::hello::{self, Figure};
use dei_collector::server::{self, ServerConfig};
use dei_propagator::Instantiation;
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{
    CollectorSpans, FaultSet, InMemorySpans, Oracle, Report, Search, SearchOptions, SpanRouter, SpanSource, Strategy,
};
use opentelemetry_sdk::trace::{BatchSpanProcessor, InMemorySpanExporter, SdkTracerProvider};
use sfit_compare::{canonical_json, effective_sets, without_injected_counts};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The process's telemetry: every span, as it ends, to an in-memory exporter and a span router, and in
/// batches over OTLP/HTTP to `otlp_url` (the collector).
fn telemetry(otlp_url: &str) -> (InMemorySpanExporter, SpanRouter, SdkTracerProvider) {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    dei_propagator::install_global_propagator();
    let exporter = InMemorySpanExporter::default();
    let router = SpanRouter::new();
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(otlp_url)
        .build()
        .expect("OTLP exporter");
    let batch = BatchSpanProcessor::builder(otlp)
        .with_batch_config(
            opentelemetry_sdk::trace::BatchConfigBuilder::default()
                .with_scheduled_delay(Duration::from_millis(10))
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_span_processor(router.clone())
        .with_span_processor(batch)
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("dei-fig5"))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).expect("the only subscriber");
    opentelemetry::global::set_tracer_provider(provider.clone());
    (exporter, router, provider)
}

fn listing(report: &Report) -> Vec<String> {
    report
        .executions
        .iter()
        .map(|e| {
            let faults =
                |v: &[dei_sfit::PlannedFault]| v.iter().map(|p| format!("{}:{}", p.index, p.fault)).collect::<Vec<_>>();
            format!(
                "#{} plan {:?} effective {:?} pass={}",
                e.number,
                faults(&e.plan),
                faults(&e.effective),
                e.outcome.passed()
            )
        })
        .collect()
}

/// [`canonical_json`] for Fig. 5, without what its program makes vary on purpose: A sends the stream's
/// messages concurrently (the figure's point), so which messages B served before a failed one, and their
/// numbers, vary from run to run: an execution's observed `rpcs` are left out (`check` tests the message
/// numbers the report shows). A failing verdict quotes the gRPC status with its `date` header, replaced by
/// `<date>`, and the number of faults its run had observed, replaced by `<n>`.
fn fig5_json(report: &Report) -> serde_json::Value {
    let mut v = canonical_json(report, false);
    for e in v["executions"].as_array_mut().expect("executions") {
        let e = e.as_object_mut().expect("an execution");
        e.remove("rpcs");
        if let Some(serde_json::Value::String(m)) = e.get_mut("outcome").and_then(|o| o.get_mut("message")) {
            *m = without_injected_counts(&without_dates(m));
        }
    }
    v
}

/// `text` with the value of every `"date": "…"` replaced by `<date>`.
fn without_dates(text: &str) -> String {
    const KEY: &str = "\"date\": \"";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at + KEY.len()]);
        out.push_str("<date>");
        rest = &rest[at + KEY.len()..];
        rest = rest.find('"').map_or("", |end| &rest[end..]);
    }
    out.push_str(rest);
    out
}

fn check(report: &Report, truth: &BTreeSet<FaultSet>, what: &str) {
    assert_eq!(report.parallelism_used, 4, "{what}: {:?}", report.notes);
    assert_eq!(&effective_sets(report), truth, "{what}\n{report}");
    assert_eq!(
        report.executions.len(),
        truth.len(),
        "{what}: one execution per set\n{report}"
    );
    assert!(
        report.redundant().is_empty()
            && report.unreached().is_empty()
            && report.unsettled().is_empty()
            && report.incomplete().is_empty(),
        "{what}\n{report}"
    );
    // A has no fallback: failing the stream or either message fails the test
    assert_eq!(report.failing().len(), 3, "{what}\n{report}");
    // a fault on a message says which message it hit
    let text = format!("{report}");
    for e in &report.executions {
        for p in &e.effective {
            let rpc = e.rpcs.iter().find(|r| r.index == p.index).expect("the faulted RPC");
            if rpc.parent.is_some_and(|s| e.rpcs[s].index.is_preliminary()) && !rpc.index.is_preliminary() {
                let k = rpc
                    .message
                    .unwrap_or_else(|| panic!("{what}: no message number on {rpc:?}"));
                assert!(text.contains(&format!("@{}[message {k}]:", p.index)), "{what}\n{text}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fig5_streams_in_parallel_through_memory_and_collector() {
    let collector = server::start(ServerConfig::ephemeral()).await.expect("collector");
    let (memory, router, provider) = telemetry(&format!("http://{}/v1/traces", collector.http_addr));
    let config = hello::config(Instantiation::dei());
    let a = hello::start(Figure::Fig5, &config).await;
    let test = hello::fig_test(Figure::Fig5, a);
    let in_memory: Arc<dyn SpanSource> = Arc::new(InMemorySpans::new(memory).with_router(router));
    let options = |strategy, parallelism| SearchOptions {
        catalog: hello::catalog(),
        strategy,
        parallelism,
        ..SearchOptions::default()
    };
    let truth = Oracle::new(options(Strategy::DepthFirst, 1), in_memory.clone(), 10)
        .run(&test)
        .await
        .expect("oracle");
    assert_eq!(truth.effective.len(), 4, "{:#?}", truth.effective);

    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let mut first: Option<Vec<String>> = None;
        let mut first_json = None;
        for round in 0..20 {
            let report = Search::with_shared_source(options(strategy, 4), in_memory.clone())
                .run(&test)
                .await
                .expect("in-memory parallel search");
            let what = format!("in-memory {strategy:?} round {round}");
            check(&report, &truth.effective, &what);
            assert!(report.warnings.is_empty(), "{what}: {:?}", report.warnings);
            let json = fig5_json(&report);
            match &first {
                Some(f) => {
                    assert_eq!(&listing(&report), f, "{what}");
                    assert_eq!(Some(&json), first_json.as_ref(), "{what}: the whole canonical report");
                }
                None => {
                    first = Some(listing(&report));
                    first_json = Some(json);
                }
            }
        }

        let api = format!("http://{}", collector.api_addr);
        let flush = provider.clone();
        let source = CollectorSpans::new(api)
            .with_settle(SettleConfig {
                quiet: Duration::from_millis(150),
                ..SettleConfig::default()
            })
            .with_flush(move || {
                let _ = flush.force_flush();
            });
        let mut collector_json = None;
        for round in 0..5 {
            let report = Search::new(options(strategy, 4), source.clone())
                .run(&test)
                .await
                .expect("collector parallel search");
            let what = format!("collector {strategy:?} round {round}");
            check(&report, &truth.effective, &what);
            // the collector cannot count spans outside the executions' traces, and the report says so
            assert!(
                report.warnings.iter().any(|w| w.contains("not counted")),
                "{what}: {:?}",
                report.warnings
            );
            let json = fig5_json(&report);
            match &collector_json {
                Some(f) => assert_eq!(&json, f, "{what}: the whole canonical report"),
                None => collector_json = Some(json),
            }
            assert_eq!(
                Some(listing(&report)),
                first,
                "{what}: the same canonical report as in memory"
            );
        }
    }
    collector.shutdown().await;
}
