//! A plan that was not carried out is never a pass (issue #15, part 3):
//! - a search over a program whose indexes change between runs counts the executions with unreached faults
//!   in its report (JSON and terminal) and says why they matter;
//! - replaying such an execution fails with [`SearchError::Unreached`], naming the fault and the likely
//!   causes, unless [`Search::replay_allowing_unreached`]; a faithful replay injects its whole plan;
//! - the span sources' settle step reports a timeout ([`Settled::TimedOut`]), and the search records it on
//!   the execution and counts it in the report.

use dei_collector::server::{self, ServerConfig};
use dei_propagator::Fault;
use dei_sfit::model::Caller;
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{
    CollectorSpans, FaultCatalog, InMemorySpans, Recorder, Report, Search, SearchError, SearchOptions, Settled,
    SpanSource, test_fn,
};
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn options() -> SearchOptions {
    SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        ..SearchOptions::default()
    }
}

/// Fig. 1 with a fallback on each call, except that the second call's payload changes in every run (a
/// request id, a timestamp): its index names a different RPC each time, so a plan made from one run cannot
/// be carried out in the next.
fn drifting(recorder: &Recorder) -> impl dei_sfit::FunctionalTest + use<> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = recorder.clone();
    test_fn("drifting", move |run| {
        let a = Caller::root(&run, &r);
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            let _ = a.call("B/echo", "Hello", &[3, 10], |_| async { Ok("Hello") }).await;
            let world = format!("World {n}");
            let _ = a.call("B/echo", &world, &[4, 10], |_| async { Ok("World") }).await;
            Ok(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreached_faults_are_counted_and_a_replay_of_them_fails() {
    let rec = Recorder::new();
    let test = drifting(&rec);
    // every run observes a new World RPC and plans a fault on it: the space never ends, so limit it (breadth
    // first, so that the plan on Hello runs too)
    let limited = SearchOptions {
        max_executions: Some(6),
        strategy: dei_sfit::Strategy::BreadthFirst,
        ..options()
    };
    let report = Search::new(limited, rec.clone()).run(&test).await.expect("search");
    let unreached = report.unreached();
    assert!(!unreached.is_empty(), "{report}");
    assert_eq!(report.unreached_executions, unreached.len());
    // every execution passed: without the count, this report would look like a clean pass
    assert!(report.failing().is_empty(), "{report}");
    let text = format!("{report}");
    assert!(
        text.contains(&format!("{} with unreached faults", unreached.len())),
        "{text}"
    );
    assert!(
        text.contains("WARNING") && text.contains("did not test its plan"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json().expect("json")).expect("parse");
    assert_eq!(json["unreached_executions"], unreached.len());
    assert!(
        json["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("unreached faults") && w.contains("non-determinism")),
        "{json}"
    );

    // saved and loaded, an execution whose fault was reached replays faithfully ...
    let path = std::env::temp_dir().join(format!("sfit-honesty-{}.json", std::process::id()));
    report.save(&path).expect("save");
    let loaded = Report::load(&path).expect("load");
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.unreached_executions, report.unreached_executions);
    let hello = loaded
        .executions
        .iter()
        .find(|e| e.plan.len() == 1 && e.unreached.is_empty() && e.plan[0].index == loaded.executions[0].rpcs[0].index)
        .expect("the execution failing Hello");
    let again = Search::replay(&test, &loaded, hello.number, Arc::new(rec.clone()))
        .await
        .expect("a plan on a stable index is carried out");
    assert_eq!(again.effective, again.plan);
    assert!(again.unreached.is_empty());

    // ... and one whose plan names the drifting RPC does not, whatever the test says
    let drifted = &loaded.executions[0].rpcs[1];
    let number = loaded
        .executions
        .iter()
        .find(|e| e.plan.iter().any(|p| p.index == drifted.index))
        .expect("an execution planned on World 0")
        .number;
    let err = Search::replay(&test, &loaded, number, Arc::new(rec.clone()))
        .await
        .expect_err("a replay that injects nothing is not a pass");
    let SearchError::Unreached(u) = &err else {
        panic!("not an Unreached error: {err}");
    };
    assert!(u.record.outcome.passed(), "the test passed, and the replay still fails");
    assert_eq!(u.record.unreached.len(), 1);
    let message = err.to_string();
    for expected in [
        format!("replay of execution #{number} did not carry out its plan").as_str(),
        drifted.index.to_string().as_str(),
        "B/echo",
        "The indexes did not match",
        "a different build",
        "working directory",
        "instantiation",
        "lost by a spawn",
        "non-determinism",
    ] {
        assert!(message.contains(expected), "{expected:?} in {message}");
    }
    // the explicit opt-out returns the record, with the unreached fault listed
    let allowed = Search::replay_allowing_unreached(&test, &loaded, number, Arc::new(rec))
        .await
        .expect("allowed");
    assert_eq!(allowed.unreached.len(), 1);
    assert!(allowed.effective.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deterministic_search_reports_no_unreached_or_unsettled_execution() {
    let rec = Recorder::new();
    let r = rec.clone();
    let test = test_fn("fig1", move |run| {
        let a = Caller::root(&run, &r);
        async move {
            let _ = a.call("B/echo", "Hello", &[3, 10], |_| async { Ok("Hello") }).await;
            let _ = a.call("B/echo", "World", &[4, 10], |_| async { Ok("World") }).await;
            Ok(())
        }
    });
    let report = Search::new(options(), rec).run(&test).await.expect("search");
    assert_eq!(report.executions.len(), 4, "{report}");
    assert_eq!((report.unreached_executions, report.unsettled_executions), (0, 0));
    assert!(report.warnings.is_empty());
    assert!(!format!("{report}").contains("WARNING"), "{report}");
}

/// A tracer provider exporting every span to an in-memory exporter as it ends.
fn in_memory() -> (InMemorySpanExporter, SdkTracerProvider) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (exporter, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_settle_reports_a_span_whose_parent_never_ends() {
    let (exporter, provider) = in_memory();
    let source = InMemorySpans::new(exporter.clone()).with_provider(provider.clone());
    let tracer = provider.tracer("t");
    source.begin().await.expect("begin");
    // the parent span stays open: its child is exported, the parent never is
    let parent = tracer.start("open parent");
    let cx = opentelemetry::Context::current().with_span(parent);
    tracer.start_with_context("child", &cx).end();
    match source.settle().await.expect("settle") {
        Settled::TimedOut(what) => assert!(what.contains("1 span(s) still wait for their parent"), "{what}"),
        Settled::Complete => panic!("a span misses its parent, yet settle said complete"),
    }
    // once the parent ends, the spans settle
    drop(cx);
    source.begin().await.expect("begin");
    let parent = tracer.start("parent");
    let cx = opentelemetry::Context::current().with_span(parent);
    tracer.start_with_context("child", &cx).end();
    cx.span().end();
    assert_eq!(source.settle().await.expect("settle"), Settled::Complete);
}

/// A client span whose `dei.*` attributes the span contract rejects is no quiet pass: its malformed values are
/// left out, and the execution and the report count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_counts_spans_with_malformed_dei_attributes() {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::SpanKind;
    let (exporter, provider) = in_memory();
    let source = InMemorySpans::new(exporter).with_provider(provider.clone());
    let t = provider.tracer("t");
    let test = test_fn("malformed", move |_run| {
        for (index, fault) in [("1.AQEBAQEBAQE1", "not-a-fault"), ("not an index", "g14")] {
            t.span_builder("call")
                .with_kind(SpanKind::Client)
                .with_attributes(vec![
                    KeyValue::new(dei_sfit::source::attr::INDEX, index),
                    KeyValue::new(dei_sfit::source::attr::FAULT, fault),
                ])
                .start(&t)
                .end();
        }
        async { Ok(()) }
    });
    let report = Search::new(options(), source).run(&test).await.expect("search");
    let first = &report.executions[0];
    assert_eq!(first.malformed_spans, 2, "{report}");
    assert_eq!(first.rpcs.len(), 1, "the span whose index is malformed is no RPC");
    assert_eq!(first.rpcs[0].fault, None, "the malformed fault is left out");
    assert!(
        report.warnings.iter().any(|w| w.contains("malformed dei.* attributes")),
        "{:?}",
        report.warnings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_records_and_counts_unsettled_executions() {
    let (exporter, provider) = in_memory();
    let source = InMemorySpans::new(exporter).with_provider(provider.clone());
    // the test leaves a span open while its child ended: every execution's spans stay incomplete
    let leaked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (t, l) = (provider.tracer("t"), leaked.clone());
    let test = test_fn("leaky", move |_run| {
        let cx = opentelemetry::Context::current().with_span(t.start("open"));
        t.start_with_context("child", &cx).end();
        l.lock().expect("lock").push(cx);
        async { Ok(()) }
    });
    let report = Search::new(options(), source).run(&test).await.expect("search");
    assert_eq!(report.executions.len(), 1, "{report}");
    assert_eq!(report.unsettled_executions, 1);
    let what = report.executions[0]
        .unsettled
        .as_deref()
        .expect("recorded on the execution");
    assert!(what.contains("did not settle"), "{what}");
    let text = format!("{report}");
    assert!(
        text.contains("1 unsettled") && text.contains("UNSETTLED") && text.contains("may be incomplete"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_settle_reports_a_trace_that_never_arrived() {
    let collector = server::start(ServerConfig::ephemeral()).await.expect("collector");
    let source = CollectorSpans::new(format!("http://{}", collector.api_addr)).with_settle(SettleConfig {
        quiet: Duration::from_millis(10),
        poll: Duration::from_millis(10),
        timeout: Duration::from_millis(100),
    });
    source.begin().await.expect("begin");
    let trace = source.trace_id().expect("trace").to_string();
    match source.settle().await.expect("settle") {
        Settled::TimedOut(what) => {
            assert!(
                what.contains("no span of trace") && what.contains(&trace) && what.contains("reached the collector"),
                "{what}"
            )
        }
        Settled::Complete => panic!("nothing arrived, yet settle said complete"),
    }
    collector.shutdown().await;
}

/// How [`deviating`] runs: as recorded, its two echoes swapped, with a request under another execution's
/// plan, or twice.
const AS_RECORDED: usize = 0;
const SWAPPED: usize = 1;
const STALE_PLAN: usize = 2;
const TWICE: usize = 3;

/// A calls B/echo("x") then B/echo("y") from one call site, then C/c, each with a fallback; `mode` changes how
/// a run departs from the recorded one.
fn deviating(
    recorder: &Recorder,
    mode: Arc<AtomicUsize>,
    stale: Arc<std::sync::Mutex<Option<String>>>,
) -> impl dei_sfit::FunctionalTest + use<> {
    let r = recorder.clone();
    test_fn("deviating", move |run| {
        let mode = mode.load(Ordering::SeqCst);
        let roots = if mode == TWICE { 2 } else { 1 };
        let callers: Vec<Caller> = (0..roots).map(|_| Caller::root(&run, &r)).collect();
        let stale_caller = (mode == STALE_PLAN).then(|| {
            let wire = stale.lock().expect("lock").clone().expect("a stale plan");
            let plan = dei_propagator::FaultPlan::decode(&wire).expect("a plan");
            Caller::with_plan(plan, run.instantiation().clone(), &r.for_run(&run))
        });
        async move {
            for a in callers {
                let (first, second) = if mode == SWAPPED { ("y", "x") } else { ("x", "y") };
                let _ = a.call("B/echo", first, &[1], |_| async { Ok(()) }).await;
                let _ = a.call("B/echo", second, &[1], |_| async { Ok(()) }).await;
                let _ = a.call("C/c", "", &[2], |_| async { Ok(()) }).await;
            }
            if let Some(s) = stale_caller {
                let _ = s.call("C/c", "", &[2], |_| async { Ok(()) }).await;
            }
            Ok(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_tested_another_fault_set_than_recorded_fails() {
    let rec = Recorder::new();
    let mode = Arc::new(AtomicUsize::new(AS_RECORDED));
    let stale = Arc::new(std::sync::Mutex::new(None));
    let test = deviating(&rec, mode.clone(), stale.clone());
    // Filibuster's instantiation: no payload, so swapping x and y keeps the indexes and changes the RPCs
    let options = SearchOptions {
        instantiation: dei_propagator::Instantiation::filibuster(),
        ..options()
    };
    let report = Search::new(options, rec.clone()).run(&test).await.expect("search");
    let first = report.executions[0].rpcs[0].index.clone();
    let on_x = report
        .executions
        .iter()
        .find(|e| e.plan.len() == 1 && e.plan[0].index == first)
        .expect("the plan failing echo(x)")
        .number;
    let on_c = report
        .executions
        .iter()
        .find(|e| e.plan.len() == 1 && e.plan[0].signature == "C/c")
        .expect("the plan failing C/c");
    *stale.lock().expect("lock") = Some(on_c.plan_wire.clone());
    let source = || -> Arc<dyn SpanSource> { Arc::new(rec.clone()) };
    // as recorded: a faithful replay
    let again = Search::replay(&test, &report, on_x, source())
        .await
        .expect("a faithful replay");
    assert!(report.deviations(&again).is_empty());
    for (m, expected) in [
        (SWAPPED, "hit other RPCs by reference index"),
        (STALE_PLAN, "which the plan does not name"),
        (TWICE, "was injected on more than one RPC"),
    ] {
        mode.store(m, Ordering::SeqCst);
        let err = Search::replay(&test, &report, on_x, source())
            .await
            .expect_err("a replay that ran another fault set");
        let SearchError::Unreached(u) = &err else {
            panic!("mode {m}: not an Unreached error: {err}");
        };
        assert!(
            u.record.unreached.is_empty(),
            "mode {m}: every planned fault was injected"
        );
        assert!(!u.deviations.is_empty(), "mode {m}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!(
                "replay of execution #{on_x} did not run the recorded execution"
            )) && message.contains(expected),
            "mode {m}: {message}"
        );
        // the explicit opt-out returns the record, and the report says how it differs
        let allowed = Search::replay_allowing_unreached(&test, &report, on_x, source())
            .await
            .expect("allowed");
        assert_eq!(report.deviations(&allowed), u.deviations, "mode {m}");
    }
}
