//! Parallel executions on real services (issue #22), the in-memory exporter read through a span router:
//! - cinema-10 searched with 4 executions at once, 20 times in each order, gives the sequential search's
//!   effective fault sets, as many executions, and the same canonical report every time; its JUnit file has
//!   one test case per execution;
//! - every corpus program (cinema-3, cinema-9, Figs. 1-4) at N = 4 in both orders reaches the sequential
//!   search's sets and the brute-force oracle's, with as many executions.
//!
//! One test: the telemetry is process-wide, and sequential searches clear the shared exporter.

use dei_corpus as common;
mod sfit_compare;

use common::cinema::{self, Variant};
use common::hello::{self, Figure};
use dei_propagator::Instantiation;
use dei_sfit::{
    FaultCatalog, FunctionalTest, Oracle, ReplayCommand, Report, Search, SearchOptions, SpanSource, Strategy,
};
use sfit_compare::{canonical_json, effective_sets};
use std::sync::Arc;

/// The canonical listing: number, plan, effective faults, verdict, redundancy.
fn listing(report: &Report) -> Vec<String> {
    report
        .executions
        .iter()
        .map(|e| {
            let faults =
                |v: &[dei_sfit::PlannedFault]| v.iter().map(|p| format!("{}:{}", p.index, p.fault)).collect::<Vec<_>>();
            format!(
                "#{} plan {:?} effective {:?} pass={} redundant={:?}",
                e.number,
                faults(&e.plan),
                faults(&e.effective),
                e.outcome.passed(),
                e.redundant_with
            )
        })
        .collect()
}

/// At N = 4 in both orders: the sequential search's sets and the oracle's, as many executions, nothing
/// redundant, unreached or unsettled.
async fn same_as_sequential(
    name: &str,
    test: &dyn FunctionalTest,
    catalog: FaultCatalog,
    source: &Arc<dyn SpanSource>,
) {
    let options = SearchOptions {
        catalog,
        ..SearchOptions::default()
    };
    let truth = Oracle::new(options.clone(), source.clone(), 10)
        .run(test)
        .await
        .expect("oracle");
    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let options = SearchOptions {
            strategy,
            ..options.clone()
        };
        let sequential = Search::with_shared_source(options.clone(), source.clone())
            .run(test)
            .await
            .expect("sequential search");
        let parallel = Search::with_shared_source(
            SearchOptions {
                parallelism: 4,
                ..options
            },
            source.clone(),
        )
        .run(test)
        .await
        .expect("parallel search");
        let what = format!("{name} {strategy:?}");
        assert_eq!(parallel.parallelism_used, 4, "{what}: {:?}", parallel.notes);
        assert_eq!(
            effective_sets(&parallel),
            effective_sets(&sequential),
            "{what}\n{parallel}\n{sequential}"
        );
        assert_eq!(
            parallel.reference_sets(),
            truth.reference,
            "{what}: the oracle's sets\n{parallel}"
        );
        assert_eq!(parallel.executions.len(), sequential.executions.len(), "{what}");
        assert_eq!(parallel.failing().len(), sequential.failing().len(), "{what}");
        assert!(
            parallel.redundant().is_empty()
                && parallel.unreached().is_empty()
                && parallel.unsettled().is_empty()
                && parallel.incomplete().is_empty(),
            "{what}\n{parallel}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_in_parallel_matches_the_sequential_search() {
    let spans = common::spans();
    let router = spans
        .router()
        .cloned()
        .expect("the examples' telemetry has a span router");
    let source: Arc<dyn SpanSource> = Arc::new(spans);
    let config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let cinema = cinema::start(Variant::Cinema10, &config).await;
    let test = cinema::functional_test(cinema);
    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let options = SearchOptions {
            catalog: cinema::catalog(),
            strategy,
            ..SearchOptions::default()
        };
        let mut sequential = Search::with_shared_source(options.clone(), source.clone())
            .run(&test)
            .await
            .expect("sequential search");
        // docs/corpus.md: cinema-10 has 6 executions under full DEI
        assert_eq!(sequential.executions.len(), 6, "{sequential}");
        sequential.canonical_order();
        let mut first: Option<Report> = None;
        for round in 0..20 {
            let before = router.ended();
            let report = Search::with_shared_source(
                SearchOptions {
                    parallelism: 4,
                    ..options.clone()
                },
                source.clone(),
            )
            .run(&test)
            .await
            .expect("parallel search");
            let what = format!("{strategy:?} round {round}");
            assert!(router.ended() > before, "{what}: the router received no span");
            assert_eq!(report.parallelism_used, 4, "{what}: {:?}", report.notes);
            assert_eq!(effective_sets(&report), effective_sets(&sequential), "{what}\n{report}");
            assert_eq!(report.executions.len(), sequential.executions.len(), "{what}");
            assert!(
                report.redundant().is_empty()
                    && report.unreached().is_empty()
                    && report.unsettled().is_empty()
                    && report.incomplete().is_empty()
                    && report.in_flight_redundant().is_empty(),
                "{what}\n{report}"
            );
            // each execution saw only its own RPCs: the same observations as the sequential search's
            for (p, s) in report.executions.iter().zip(&sequential.executions) {
                assert_eq!(
                    p.rpcs.len(),
                    s.rpcs.len(),
                    "{what}: #{}\n{report}\n{sequential}",
                    p.number
                );
                assert_eq!(p.outcome, s.outcome, "{what}: #{}", p.number);
            }
            assert_eq!(listing(&report), listing(&sequential), "{what}: the canonical report");
            assert!(report.warnings.is_empty(), "{what}: {:?}", report.warnings);
            assert_eq!(
                canonical_json(&report, true),
                canonical_json(&sequential, true),
                "{what}: the whole canonical report, parallel = sequential"
            );
            if let Some(first) = &first {
                assert_eq!(
                    canonical_json(&report, false),
                    canonical_json(first, false),
                    "{what}: the whole canonical report, every round"
                );
            } else {
                first = Some(report);
            }
        }
        // the JUnit file of a parallel search: one test case per execution, in canonical order
        let report = first.expect("a report");
        let xml = report.to_junit(&ReplayCommand::Template(
            "cargo run --example cinema10 -- --replay target/sfit/cinema10.json {n}".into(),
        ));
        assert_eq!(xml.matches("<testcase ").count(), 6, "{xml}");
        assert!(xml.contains(r#"<property name="dei.parallelism" value="4"/>"#), "{xml}");
        assert!(xml.contains(r##"name="#1 no faults""##), "{xml}");
        assert!(
            !xml.contains("<failure") && !xml.contains("<skipped") && !xml.contains("<error"),
            "{xml}"
        );
        assert!(xml.contains(r#"errors="0""#), "{xml}");
    }
    // the rest of the corpus, once in each order
    let config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    for variant in [Variant::Cinema3, Variant::Cinema9] {
        let cinema = cinema::start(variant, &config).await;
        same_as_sequential(
            variant.name(),
            &cinema::functional_test(cinema),
            cinema::catalog(),
            &source,
        )
        .await;
    }
    let config = hello::config(Instantiation::dei());
    let (url, client) = hello::start_fig1_http(&config).await;
    let catalog = FaultCatalog::protocol_defaults().with_rule("GET */helloworld", vec![]);
    same_as_sequential("fig1", &hello::fig1_test(url, client), catalog, &source).await;
    for figure in [Figure::Fig2, Figure::Fig3, Figure::Fig4] {
        let a = hello::start(figure, &config).await;
        same_as_sequential(
            &format!("{figure:?}"),
            &hello::fig_test(figure, a),
            hello::catalog(),
            &source,
        )
        .await;
    }
}
