//! Reading executions from OpenTelemetry spans: RPCs, parents, faults, outcomes, stream messages; malformed
//! DEI attributes are skipped, never a panic.

use dei_propagator::{Element, ElementDigest, Fault, Index};
use dei_sfit::source::{MessageTargeting, attr, observation_from_spans, observation_from_spans_with};
use dei_sfit::{InMemorySpans, Outcome, SpanSource};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

fn idx(elements: &[(u8, u32)]) -> Index {
    Index::from_elements(
        elements
            .iter()
            .map(|&(d, c)| Element::new(ElementDigest([d; 8]), c))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_become_an_observation() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("t");
    let source = InMemorySpans::new(exporter.clone()).with_provider(provider.clone());
    source.begin().await.expect("begin");

    let a = idx(&[(1, 1)]);
    let b = idx(&[(1, 1), (2, 1)]);
    let pre = idx(&[(1, 1), (3, 1)])
        .elements()
        .iter()
        .map(|e| e.preliminary())
        .collect::<Vec<_>>();
    let pre = Index::from_elements(pre);
    let fin = idx(&[(1, 1), (4, 1)]);
    // client A (root) -> server (A's callee) -> client B, which failed with an injected fault
    let client_a = tracer
        .span_builder("a")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new(attr::INDEX, a.encode()),
            KeyValue::new(attr::SIGNATURE, "svc.A/Get"),
        ])
        .start(&tracer);
    let cx_a = Context::current().with_span(client_a);
    let server = tracer
        .span_builder("serve-a")
        .with_kind(SpanKind::Server)
        .start_with_context(&tracer, &cx_a);
    let cx_s = cx_a.with_span(server);
    let mut client_b = tracer
        .span_builder("b")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new(attr::INDEX, b.encode()),
            KeyValue::new(attr::SIGNATURE, "svc.B/Get"),
            KeyValue::new(attr::FAULT, "g14"),
            // recorded only when the services turn payloads on; the preview keeps its start
            KeyValue::new(attr::PAYLOAD, format!("{{\"user\":\"chris\"}}{}", "x".repeat(200))),
        ])
        .start_with_context(&tracer, &cx_s);
    opentelemetry::trace::Span::end(&mut client_b);
    // a stream under the server, with one message event
    let mut stream = tracer
        .span_builder("stream")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new(attr::INDEX, pre.encode()),
            KeyValue::new(attr::SIGNATURE, "svc.C/Chat"),
        ])
        .start_with_context(&tracer, &cx_s);
    opentelemetry::trace::Span::add_event(
        &mut stream,
        attr::STREAM_MESSAGE_EVENT,
        vec![
            KeyValue::new(attr::PRELIMINARY_INDEX, pre.encode()),
            KeyValue::new(attr::INDEX, fin.encode()),
            KeyValue::new(attr::MESSAGE, 1i64),
        ],
    );
    opentelemetry::trace::Span::end(&mut stream);
    // malformed: a bad index, a bad fault; a client span without an index; a gRPC error status
    for (index, fault) in [("1.!!", "g14"), ("garbage", "zz")] {
        let mut s = tracer
            .span_builder("bad")
            .with_kind(SpanKind::Client)
            .with_attributes(vec![
                KeyValue::new(attr::INDEX, index),
                KeyValue::new(attr::FAULT, fault),
            ])
            .start_with_context(&tracer, &cx_s);
        opentelemetry::trace::Span::end(&mut s);
    }
    let c = idx(&[(1, 1), (5, 2)]);
    let mut errored = tracer
        .span_builder("c")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new(attr::INDEX, c.encode()),
            KeyValue::new(attr::FAULT, "not-a-fault"),
            KeyValue::new(attr::GRPC_STATUS, 13i64),
        ])
        .start_with_context(&tracer, &cx_s);
    opentelemetry::trace::Span::end(&mut errored);
    cx_s.span().end();
    cx_a.span().end();

    let mut obs = source.collect().await.expect("collect");
    obs.finalize();
    let find = |i: &Index| obs.rpcs.iter().position(|r| &r.index == i).expect("rpc");
    assert_eq!(obs.rpcs.len(), 5, "A, B, the stream, its message, C: {:#?}", obs.rpcs);
    let (pa, pb, pc) = (find(&a), find(&b), find(&c));
    assert_eq!(obs.rpcs[pa].parent, None);
    assert_eq!(
        obs.rpcs[pb].parent,
        Some(pa),
        "B's parent RPC is A, through A's server span"
    );
    assert_eq!(obs.rpcs[pb].fault, Some(Fault::UNAVAILABLE));
    let preview = obs.rpcs[pb].payload_preview.as_deref().expect("a payload preview");
    assert!(
        preview.starts_with("{\"user\":\"chris\"}xxx") && preview.ends_with('…'),
        "{preview}"
    );
    assert_eq!(
        preview.chars().count(),
        dei_sfit::observation::PAYLOAD_PREVIEW_CHARS + 1
    );
    assert_eq!(obs.rpcs[pa].payload_preview, None, "no payload recorded, no preview");
    assert_eq!(obs.rpcs[pb].outcome, Outcome::Err { code: "g14".into() });
    assert_eq!(obs.rpcs[pc].fault, None, "a malformed fault is left out");
    assert_eq!(obs.malformed, 3, "the two spans with a malformed index, and C's fault");
    assert_eq!(obs.rpcs[pc].outcome, Outcome::Err { code: "g13".into() });
    let message = obs.rpcs.iter().find(|r| r.index == fin).expect("message");
    assert!(
        message.injectable && message.targetable(),
        "messages are targeted by default"
    );
    assert_eq!(message.fault, None);
    assert_eq!(message.message, Some(1), "the message's number on its stream");
    assert_eq!(obs.rpcs[message.parent.expect("parent")].index, pre);
    // the callee served message 1 under the preliminary index counted up by 1
    assert_eq!(obs.streams[0].preliminary, pre.stream_message(1));
    assert_eq!(obs.effective().len(), 1);
    assert_eq!(observation_from_spans(&[]).rpcs.len(), 0);
    let spans = exporter.get_finished_spans().expect("spans");
    let observed = observation_from_spans_with(&spans, MessageTargeting::Observed);
    let message = observed.rpcs.iter().find(|r| r.index == fin).expect("message");
    assert!(
        !message.targetable(),
        "with MessageTargeting::Observed, only whole streams"
    );

    source.begin().await.expect("begin");
    assert!(
        source.collect().await.expect("collect").rpcs.is_empty(),
        "begin forgets earlier spans"
    );
}

/// Per-message stream faults: the instrumentation records `dei.fault` on the faulted message's event (the
/// stream's span has one only when the stream itself was failed); the fault belongs to that message's final
/// index, not to the stream.
#[test]
fn a_fault_on_a_stream_message_event_is_that_messages() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("t");
    let pre = Index::from_elements(
        idx(&[(1, 1), (3, 1)])
            .elements()
            .iter()
            .map(|e| e.preliminary())
            .collect(),
    );
    let (fin1, fin2) = (idx(&[(1, 1), (4, 1)]), idx(&[(1, 1), (4, 2)]));
    let stream_span = |fault_on: Option<u32>, own_fault: Option<&'static str>| {
        let mut attributes = vec![
            KeyValue::new(attr::INDEX, pre.encode()),
            KeyValue::new(attr::SIGNATURE, "svc.B/Chat"),
        ];
        if let Some(f) = own_fault {
            attributes.push(KeyValue::new(attr::FAULT, f));
        }
        let mut stream = tracer
            .span_builder("stream")
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start(&tracer);
        for (k, fin) in [(1u32, &fin1), (2, &fin2)] {
            if own_fault.is_some() {
                break;
            }
            let mut event = vec![
                KeyValue::new(attr::PRELIMINARY_INDEX, pre.encode()),
                KeyValue::new(attr::INDEX, fin.encode()),
                KeyValue::new(attr::MESSAGE, i64::from(k)),
            ];
            if fault_on == Some(k) {
                event.push(KeyValue::new(attr::FAULT, "g4"));
            }
            opentelemetry::trace::Span::add_event(&mut stream, attr::STREAM_MESSAGE_EVENT, event);
        }
        opentelemetry::trace::Span::end(&mut stream);
        let spans = exporter.get_finished_spans().expect("spans");
        exporter.reset();
        let mut obs = observation_from_spans(&spans);
        obs.finalize();
        assert_eq!(
            observation_from_spans_with(&spans, MessageTargeting::Observed).effective(),
            obs.effective(),
            "faults are read the same whether messages are targeted or not"
        );
        obs
    };

    // message 2 failed: the effective set is that message's final index, the stream itself was not failed
    let obs = stream_span(Some(2), None);
    assert_eq!(obs.rpcs.len(), 3, "{:#?}", obs.rpcs);
    let get = |i: &Index| obs.rpcs.iter().find(|r| &r.index == i).expect("rpc");
    assert_eq!(get(&pre).fault, None);
    assert_eq!(get(&fin1).fault, None);
    assert!(get(&fin1).outcome.is_ok());
    assert_eq!(get(&fin2).fault, Some(Fault::DEADLINE_EXCEEDED));
    assert_eq!(get(&fin2).outcome, Outcome::Err { code: "g4".into() });
    assert!(get(&fin1).injectable && get(&fin2).injectable);
    assert_eq!(
        obs.effective(),
        [(fin2.clone(), Fault::DEADLINE_EXCEEDED)].into_iter().collect()
    );

    // a fault on the stream's own index, before any message: the stream's
    let obs = stream_span(None, Some("g14"));
    assert_eq!(obs.rpcs.len(), 1);
    assert_eq!(
        obs.effective(),
        [(pre.clone(), Fault::UNAVAILABLE)].into_iter().collect()
    );

    // no fault anywhere
    assert!(stream_span(None, None).effective().is_empty());
}

/// A client span with a DEI index in `cx`'s trace.
fn rpc_span(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    cx: &Context,
    index: &Index,
) -> opentelemetry_sdk::trace::Span {
    tracer
        .span_builder("rpc")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new(attr::INDEX, index.encode()),
            KeyValue::new(attr::SIGNATURE, "svc.B/Get"),
        ])
        .start_with_context(tracer, cx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_executions_see_only_their_own_trace_through_a_router() {
    use dei_sfit::{ExecutionKey, Settled, SpanRouter};
    let exporter = InMemorySpanExporter::default();
    let router = SpanRouter::new();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_span_processor(router.clone())
        .build();
    let tracer = provider.tracer("t");
    // without a router there are no per-execution views: open spans could not be seen
    assert!(
        InMemorySpans::new(exporter.clone())
            .execution(&ExecutionKey::new(1))
            .is_none()
    );
    {
        let routed = true;
        let source = InMemorySpans::new(exporter.clone()).with_router(router.clone());
        let (k1, k2) = (ExecutionKey::new(1), ExecutionKey::new(2));
        let (e1, e2) = (
            source.execution(&k1).expect("an execution source"),
            source.execution(&k2).expect("an execution source"),
        );
        let (cx1, cx2) = (
            e1.execution_context(Context::new()),
            e2.execution_context(Context::new()),
        );
        assert_eq!(cx1.span().span_context().trace_id(), k1.trace_id);
        let (a, b) = (idx(&[(1, 1)]), idx(&[(2, 1)]));
        let mut s1 = rpc_span(&tracer, &cx1, &a);
        // a child still open when its parent ends: a quiet period or a parent check would call this complete
        let mut child = {
            let parent_cx = cx1.with_remote_span_context(opentelemetry::trace::Span::span_context(&s1).clone());
            rpc_span(&tracer, &parent_cx, &idx(&[(1, 1), (3, 1)]))
        };
        let mut s2 = rpc_span(&tracer, &cx2, &b);
        let before = router.unattributed();
        let mut outside = rpc_span(&tracer, &Context::new(), &b);
        opentelemetry::trace::Span::end(&mut outside);
        assert_eq!(
            router.unattributed(),
            before + 1,
            "the span outside both traces is counted"
        );
        opentelemetry::trace::Span::end(&mut s2);
        opentelemetry::trace::Span::end(&mut s1);
        // execution 1's child span is still open: its settle step waits for it, and says so when it gives up
        let Settled::TimedOut(what) = e1.settle().await.expect("settle") else {
            panic!("an open span of the trace was not waited for");
        };
        assert!(what.contains("1 span(s) of the trace are still open"), "{what}");
        opentelemetry::trace::Span::end(&mut child);
        for (e, index, n) in [(&e1, &a, 2), (&e2, &b, 1)] {
            assert_eq!(e.settle().await.expect("settle"), Settled::Complete);
            let obs = e.collect().await.expect("collect");
            assert_eq!(obs.rpcs.len(), n, "routed={routed}: {:#?}", obs.rpcs);
            let root = obs.rpcs.iter().find(|r| r.parent.is_none()).expect("a root RPC");
            assert_eq!(&root.index, index, "the execution's remote root is no RPC");
        }
        drop((e1, e2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_search_whose_test_ignores_its_context_observes_nothing_and_says_why() {
    use dei_sfit::{FaultCatalog, Search, SearchOptions, SpanRouter, test_fn};
    let exporter = InMemorySpanExporter::default();
    let router = SpanRouter::new();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_span_processor(router.clone())
        .build();
    let tracer = provider.tracer("t");
    // the test's RPC runs in a trace of its own, not under run.context()
    let test = test_fn("no context", move |_run| {
        let tracer = tracer.clone();
        async move {
            let mut s = rpc_span(&tracer, &Context::new(), &idx(&[(1, 1)]));
            opentelemetry::trace::Span::end(&mut s);
            Ok(())
        }
    });
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        parallelism: 2,
        ..SearchOptions::default()
    };
    let source = InMemorySpans::new(exporter).with_router(router.clone());
    let report = Search::new(options.clone(), source).run(&test).await.expect("search");
    assert_eq!(report.executions.len(), 1);
    assert!(report.executions[0].rpcs.is_empty(), "{report}");
    assert_eq!(
        router.unattributed(),
        1,
        "the span was counted as belonging to no execution"
    );
    // the report does not look clean: the lost span is a counted warning
    assert_eq!(report.unattributed_spans, 1, "{report}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.starts_with("1 span(s) outside the executions' traces")),
        "{:?}",
        report.warnings
    );
    assert!(format!("{report}").contains("WARNING: 1 span(s) outside"), "{report}");
    let why = report.tested_faults().expect_err("nothing planned");
    assert!(why.contains("TestRun::context()"), "{why}");

    // without a router the search refuses to run executions at once, and its note says why
    let exporter = InMemorySpanExporter::default();
    let report = Search::new(options, InMemorySpans::new(exporter))
        .run(&test_fn("no router", |_run| async { Ok(()) }))
        .await
        .expect("search");
    assert_eq!(report.parallelism_used, 1);
    assert!(
        report.notes.iter().any(|n| n.contains("no SpanRouter")),
        "{:?}",
        report.notes
    );
}
