//! The paper's Fig. 5 on real services: A opens a bidirectional tonic stream to B and sends `Hello` and
//! `World` concurrently. The search targets the stream and each of its messages by their final indexes
//! (message targeting is the default) and must reach every effective fault set the brute-force oracle finds,
//! once each, reading spans from the in-memory exporter and from a real dei-collector's API alike
//! (docs/corpus.md, "Fig. 5", derives the counts).
//!
//! The services export every span both to the in-memory exporter (as it ends) and over OTLP/HTTP in batches
//! to a dei-collector started in this process on loopback. One test: the telemetry is process-wide.

use dei_corpus as common;

use common::hello::{self, Figure};
use dei_collector::server::{self, ServerConfig};
use dei_propagator::{Fault, Index, Instantiation};
use dei_sfit::source::MessageTargeting;
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{
    CollectorSpans, ExecutionRecord, FaultSet, InMemorySpans, Oracle, Report, Search, SearchOptions, SpanSource,
    Strategy,
};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Every span to the in-memory exporter as it ends, and in batches over OTLP/HTTP to `otlp_url`.
fn telemetry(otlp_url: &str) -> (InMemorySpanExporter, SdkTracerProvider) {
    let t = dei_instrumentation::testing::telemetry_over_otlp_http(otlp_url);
    (t.exporter().clone(), t.provider().clone())
}

fn options(strategy: Strategy) -> SearchOptions {
    SearchOptions {
        catalog: hello::catalog(),
        strategy,
        ..SearchOptions::default()
    }
}

fn effective_sets(report: &Report) -> BTreeSet<FaultSet> {
    report
        .executions
        .iter()
        .map(|e| e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect())
        .collect()
}

/// Complete (the oracle's sets), non-redundant, every plan reached, no fault on two RPCs.
fn assert_complete_and_non_redundant(report: &Report, truth: &BTreeSet<FaultSet>, what: &str) {
    assert!(report.redundant().is_empty(), "{what}: redundant executions\n{report}");
    assert!(
        report.executions.iter().all(|e| e.unreached.is_empty()),
        "{what}: a planned fault was not reached\n{report}"
    );
    assert!(
        report.executions.iter().all(|e| e.multiply_injected.is_empty()),
        "{what}: a fault landed on several RPCs\n{report}"
    );
    assert_eq!(
        &effective_sets(report),
        truth,
        "{what}: not the oracle's sets\n{report}"
    );
    assert_eq!(report.executions.len(), truth.len(), "{what}: one execution per set");
}

/// What an execution showed, without times: per RPC its index, signature, parent's index, fault, outcome,
/// whether it can be targeted and whether its invocation signature is known. Messages sent before a failed
/// one are left out (whether the other message went first is up to the scheduler).
fn shape(e: &ExecutionRecord) -> BTreeSet<String> {
    e.rpcs
        .iter()
        .filter(|r| {
            let message = r.parent.is_some_and(|p| e.rpcs[p].index.is_preliminary()) && !r.index.is_preliminary();
            !message || r.fault.is_some() || e.effective.is_empty()
        })
        .map(|r| {
            format!(
                "{} {} parent={:?} fault={:?} outcome={} targetable={} invocation={:?}",
                r.index,
                r.signature,
                r.parent.map(|p| e.rpcs[p].index.to_string()),
                r.fault,
                r.outcome,
                r.targetable(),
                r.invocation
                    .as_ref()
                    .map(|i| (i.signature.name().to_string(), i.payload, i.stack))
            )
        })
        .collect()
}

fn shapes(report: &Report) -> BTreeMap<String, BTreeSet<String>> {
    report
        .executions
        .iter()
        .map(|e| {
            (
                dei_sfit::observation::describe_set(&e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect()),
                shape(e),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig5_stream_messages_are_targeted_through_memory_and_collector() {
    let collector = server::start(ServerConfig::ephemeral()).await.expect("collector");
    let (memory, provider) = telemetry(&format!("http://{}/v1/traces", collector.http_addr));
    let config = hello::config(Instantiation::dei());
    let a = hello::start(Figure::Fig5, &config).await;
    let test = hello::fig_test(Figure::Fig5, a);
    let in_memory: Arc<dyn SpanSource> = Arc::new(InMemorySpans::new(memory.clone()));

    // the oracle: every subset of {stream, Hello, World} (A is exempt by the catalog): 2^3 executions
    let truth = Oracle::new(options(Strategy::DepthFirst), in_memory.clone(), 10)
        .run(&test)
        .await
        .expect("oracle");
    assert_eq!(truth.executions, 8, "{truth:#?}");
    assert_eq!(
        truth.indexes.len(),
        4,
        "A, the stream, its two messages: {:#?}",
        truth.indexes
    );
    // {}, {stream}, {Hello}, {World}: failing a message ends the stream before it, so the other message is
    // sent only if it went first, and failing both fails whichever goes first
    assert_eq!(truth.effective.len(), 4, "{:#?}", truth.effective);
    let singles: Vec<&(Index, Fault)> = truth.effective.iter().flatten().collect();
    assert_eq!(singles.len(), 3, "three single faults: {:#?}", truth.effective);
    assert!(singles.iter().all(|(_, f)| *f == Fault::Connection));
    let streams = singles.iter().filter(|(i, _)| i.is_preliminary()).count();
    assert_eq!(
        streams, 1,
        "one on the stream's preliminary index, two on final message indexes"
    );

    // the search through the in-memory exporter, depth- and breadth-first
    let mut memory_reports = Vec::new();
    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let report = Search::with_shared_source(options(strategy), in_memory.clone())
            .run(&test)
            .await
            .expect("in-memory search");
        assert_complete_and_non_redundant(&report, &truth.effective, &format!("in-memory {strategy:?}"));
        // A has no fallback: failing the stream or either message fails the test
        assert_eq!(report.failing().len(), 3, "{report}");
        let first = &report.executions[0];
        assert!(first.effective.is_empty());
        assert_eq!(first.rpcs.len(), 4, "A, the stream, Hello, World: {:#?}", first.rpcs);
        assert_eq!(first.rpcs.iter().filter(|r| r.targetable()).count(), 4);
        memory_reports.push(report);
    }

    // the same through dei-collector's API
    let api = format!("http://{}", collector.api_addr);
    let settle = SettleConfig {
        quiet: Duration::from_millis(150),
        ..SettleConfig::default()
    };
    for (strategy, memory_report) in [Strategy::DepthFirst, Strategy::BreadthFirst]
        .into_iter()
        .zip(&memory_reports)
    {
        let flush = provider.clone();
        let source = CollectorSpans::new(api.clone())
            .with_settle(settle.clone())
            .with_flush(move || {
                let _ = flush.force_flush();
            });
        let report = Search::new(options(strategy), source.clone())
            .run(&test)
            .await
            .expect("collector search");
        assert_complete_and_non_redundant(&report, &truth.effective, &format!("collector {strategy:?}"));
        assert_eq!(report.failing().len(), 3, "{report}");
        // the collector's trace view gives the same observations as the spans themselves
        assert_eq!(shapes(&report), shapes(memory_report), "{strategy:?}");
    }

    // stream-level faults only: the stream, never a message
    let observed: Arc<dyn SpanSource> =
        Arc::new(InMemorySpans::new(memory).with_message_targeting(MessageTargeting::Observed));
    let coarse = Oracle::new(options(Strategy::DepthFirst), observed.clone(), 10)
        .run(&test)
        .await
        .expect("oracle, messages observed");
    assert_eq!(
        coarse.effective.len(),
        2,
        "{{}} and {{stream}}: {:#?}",
        coarse.effective
    );
    let report = Search::with_shared_source(options(Strategy::DepthFirst), observed)
        .run(&test)
        .await
        .expect("search, messages observed");
    assert_complete_and_non_redundant(&report, &coarse.effective, "messages observed");
    let messages = report.executions[0].rpcs.iter().filter(|r| !r.targetable()).count();
    assert_eq!(messages, 2, "the messages are observed, not targeted");
    collector.shutdown().await;
}
