//! Traces that are not sampled (issue #18): under `Unsampled::Lean` (the default) the layers give every call
//! the index a sampled trace gives it; under `Unsampled::Off` they propagate and issue nothing, unless the
//! request carries a fault plan. Real tonic and axum servers on loopback, multi-thread runtime.

mod common;

use axum::Router;
use axum::routing::get;
use common::*;
use dei_instrumentation::{DeiConfig, Unsampled};
use dei_propagator::{DeiContextExt, Fault, FaultPlan, Index};
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};

/// `cx` under a remote parent whose trace is not sampled (what a caller that did not sample sends).
fn unsampled(cx: Context) -> Context {
    let trace: [u8; 16] = rand::random();
    let span = SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes([7; 8]),
        TraceFlags::default(),
        true,
        TraceState::default(),
    );
    cx.with_remote_span_context(span)
}

/// What one round of calls showed: the index C served a unary call under, and the indexes C's HTTP side
/// served a two-message client stream's per-message calls under.
async fn round(sys: &System, sampled: bool) -> (String, String, TraceId) {
    let mut leaf = sys.leaf_client().await;
    let config = sys.config.clone();
    let ((get, collect), trace) = in_root(&sys.config, |cx| if sampled { cx } else { unsampled(cx) }, async move {
        let get = leaf.get(msg("k")).await.expect("Leaf.Get").into_inner().text;
        let (tx, request) = dei_instrumentation::grpc::stream::channel::<pb::Msg>(&config, 4);
        let mut streaming = leaf.clone();
        let call = dei_propagator::spawn(async move { streaming.collect(request).await });
        tx.send(msg("m1")).await.expect("send");
        tx.send(msg("m2")).await.expect("send");
        drop(tx);
        let collect = call.await.expect("join").expect("Leaf.Collect").into_inner().text;
        (get, collect)
    })
    .await;
    (get, collect, trace)
}

fn served(reply: &str) -> &str {
    reply.rsplit_once('@').map_or("", |(_, i)| i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_gives_unsampled_calls_the_sampled_index_and_records_nothing() {
    let sys = System::start().await;
    assert_eq!(sys.config.unsampled(), Unsampled::Lean, "the default");
    // One call site, a sampled round then an unsampled one, each in a fresh root scope: the same calls.
    let mut rounds = Vec::new();
    for sampled in [true, false, true, false] {
        rounds.push((sampled, round(&sys, sampled).await));
    }
    let (_, (get, collect, sampled_trace)) = &rounds[0];
    // The indexes are real: the sampled round's client span carries the index C served.
    let spans = spans_of(*sampled_trace, 8).await;
    let client_indexes: Vec<String> = spans
        .iter()
        .filter(|s| is_client(s))
        .filter_map(|s| attr(s, "dei.index"))
        .collect();
    assert!(
        client_indexes.iter().any(|i| i == served(get)),
        "{get} in {client_indexes:?}"
    );
    assert!(Index::decode(served(get)).is_ok(), "{get}");
    // Two messages, each with its HTTP call served under its own message's scope.
    let per_message: Vec<&str> = collect.split(' ').collect();
    assert_eq!(per_message.len(), 2, "{collect}");
    for (sampled, (g, c, trace)) in &rounds[1..] {
        assert_eq!(g, get, "sampled={sampled}: the unary call's index");
        assert_eq!(c, collect, "sampled={sampled}: the stream messages' calls' indexes");
        if !sampled {
            // Nothing of an unsampled trace is exported.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert!(
                dei_instrumentation::testing::telemetry().trace(*trace).is_empty(),
                "an unsampled trace's spans were exported"
            );
        }
    }
}

/// An axum server without DEI that answers with what it received: whether a `dei` header came, and the
/// trace flags of `traceparent`.
async fn header_echo() -> String {
    let app = Router::new().route(
        "/headers",
        get(|headers: http::HeaderMap| async move {
            let flags = headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit('-').next())
                .unwrap_or("none")
                .to_string();
            format!("dei={} flags={flags}", headers.contains_key("dei"))
        }),
    );
    format!("http://{}/headers", serve_http(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_propagates_and_issues_nothing_unless_a_fault_plan_comes() {
    let config = DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .methods_from_descriptor_set(DESCRIPTORS)
        .expect("descriptor set")
        .unsampled(Unsampled::Off)
        .build();
    let sys = System::start_with(config.clone()).await;
    let echo = header_echo().await;
    let http = http_client(&config);
    // Unsampled, no plan: no index issued in the caller's scope, no `dei` header, the trace context goes on
    // (unsampled), and the server opens no scope.
    let scope_cx = unsampled(dei_instrumentation::root_context(&config));
    let scope = scope_cx.dei_scope().cloned().expect("root scope");
    let mut leaf = sys.leaf_client().await;
    let (reply, seen) = {
        let _attached = scope_cx.clone().attach();
        let reply = leaf.get(msg("k"));
        let seen = http.get(&echo).send();
        (reply, seen)
    };
    let (reply, seen) = futures::join!(
        opentelemetry::context::FutureExt::with_context(reply, scope_cx.clone()),
        opentelemetry::context::FutureExt::with_context(seen, scope_cx.clone())
    );
    let reply = reply.expect("Leaf.Get").into_inner().text;
    let seen = seen.expect("echo").text().await.expect("body");
    assert_eq!(served(&reply), "none", "the server opened no scope: {reply}");
    assert_eq!(seen, "dei=false flags=00");
    assert_eq!(scope.issued(), 0, "no index was issued");
    // The same under a fault plan: the full path (the plan names another call, so nothing fails).
    let other = Index::decode("1.AQEBAQEBAQE1").expect("index");
    let planned = scope_cx.with_fault_plan(FaultPlan::new(vec![(other, Fault::UNAVAILABLE)]));
    let seen = opentelemetry::context::FutureExt::with_context(http.get(&echo).send(), planned.clone())
        .await
        .expect("echo")
        .text()
        .await
        .expect("body");
    assert_eq!(seen, "dei=true flags=00");
    let reply = opentelemetry::context::FutureExt::with_context(leaf.get(msg("k")), planned)
        .await
        .expect("Leaf.Get")
        .into_inner()
        .text;
    assert!(Index::decode(served(&reply)).is_ok(), "{reply}");
    assert_eq!(scope.issued(), 2);
    // And a sampled trace under Off: the full path.
    let sampled_cx = dei_instrumentation::root_context(&config);
    let seen = opentelemetry::context::FutureExt::with_context(http.get(&echo).send(), sampled_cx.clone())
        .await
        .expect("echo")
        .text()
        .await
        .expect("body");
    assert_eq!(seen, "dei=true flags=01");
}
