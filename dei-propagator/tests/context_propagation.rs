//! The request scope follows the work of one request across tasks, blocking tasks, threads and tracing
//! spans, sharing its counters by reference (paper §3.3). All on a multi-thread runtime with 2 workers: a
//! current-thread runtime would hide a missing context.

use dei_propagator::{
    CallStack, DeiContextExt, Frame, Instantiation, InvocationSignature, PayloadDigest, RequestScope, Signature,
};
use opentelemetry::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::collections::BTreeSet;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// One invocation signature, issued from everywhere: the counts must come out as 1..=n.
fn same_call() -> InvocationSignature {
    let stack = CallStack::new(vec![Frame::new("src/handler.rs", 42, 9)]);
    InvocationSignature::new(
        Signature::grpc_path("/B/echo"),
        PayloadDigest::of(b"same"),
        stack.digest(),
    )
}

fn issue_here(expected: &RequestScope) -> u32 {
    let scope = RequestScope::current().expect("the scope is in the current context");
    assert!(
        scope.same_scope(expected),
        "the same scope, shared by reference, not a copy"
    );
    scope.issue(&same_call()).element().count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_spawn_blocking_and_spawn_thread_share_one_scope() {
    let scope = RequestScope::root(Instantiation::dei());
    let cx = Context::current().with_dei_scope(scope.clone());
    let per_kind = 40;
    let counts = async {
        let mut tasks = Vec::new();
        let mut blocking = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..per_kind {
            let s = scope.clone();
            tasks.push(dei_propagator::spawn(async move {
                tokio::task::yield_now().await;
                // also after a yield, possibly on the other worker
                issue_here(&s)
            }));
            let s = scope.clone();
            blocking.push(dei_propagator::spawn_blocking(move || issue_here(&s)));
            let s = scope.clone();
            threads.push(dei_propagator::spawn_thread(move || issue_here(&s)));
        }
        let mut counts = Vec::new();
        for t in tasks {
            counts.push(t.await.expect("task"));
        }
        for t in blocking {
            counts.push(t.await.expect("blocking task"));
        }
        for t in threads {
            counts.push(t.join().expect("thread"));
        }
        counts
    }
    .with_context(cx)
    .await;
    let n = 3 * per_kind;
    let distinct: BTreeSet<u32> = counts.iter().copied().collect();
    assert_eq!(counts.len(), n as usize);
    assert_eq!(
        distinct,
        (1..=n).collect::<BTreeSet<u32>>(),
        "counts 1..=n, no duplicates, none lost"
    );
    assert_eq!(scope.issued(), u64::from(n));
}

use opentelemetry::context::FutureExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tokio_spawn_does_not_carry_the_scope() {
    // The control for the test above: the context is thread-local, and a plain spawn runs on a worker thread.
    let scope = RequestScope::root(Instantiation::dei());
    let _guard = Context::current().with_dei_scope(scope.clone()).attach();
    assert!(RequestScope::current().is_some());
    let seen = tokio::spawn(async { RequestScope::current() }).await.expect("task");
    assert!(
        seen.is_none(),
        "tokio::spawn loses the context on a multi-thread runtime"
    );
    let seen = tokio::task::spawn_blocking(RequestScope::current).await.expect("task");
    assert!(seen.is_none(), "so does spawn_blocking");
    let seen = std::thread::spawn(RequestScope::current).join().expect("thread");
    assert!(seen.is_none(), "and std::thread::spawn");
    let seen = dei_propagator::spawn(async { RequestScope::current() })
        .await
        .expect("task");
    assert!(
        seen.is_some_and(|s| s.same_scope(&scope)),
        "the crate's spawn carries it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_context_carries_the_scope_across_workers() {
    let scope = RequestScope::root(Instantiation::dei());
    let cx = Context::new().with_dei_scope(scope.clone());
    let task = tokio::spawn(
        async move {
            let mut counts = Vec::new();
            for _ in 0..10 {
                tokio::task::yield_now().await;
                counts.push(issue_here(&scope));
            }
            counts
        }
        .with_context(cx),
    );
    assert_eq!(task.await.expect("task"), (1..=10).collect::<Vec<u32>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scope_follows_a_tracing_span_through_tracing_opentelemetry() {
    let provider = SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("dei-propagator-test")));
    let _default = tracing::subscriber::set_default(subscriber);

    let scope = RequestScope::root(Instantiation::dei());
    let span = tracing::info_span!("serve");
    span.set_parent(Context::new().with_dei_scope(scope.clone()))
        .expect("set_parent before the span is entered");
    {
        let _entered = span.enter();
        let seen = Context::current();
        assert!(
            seen.dei_scope().is_some_and(|s| s.same_scope(&scope)),
            "inside the span"
        );
        assert_eq!(issue_here(&scope), 1);
        let child = tracing::info_span!("child");
        let _child = child.enter();
        assert_eq!(issue_here(&scope), 2, "and inside its child span");
    }
    assert!(RequestScope::current().is_none(), "gone once the span is exited");

    // A future instrumented with the span carries the scope into a plain tokio::spawn.
    let task = tokio::spawn({
        let scope = scope.clone();
        async move {
            tokio::task::yield_now().await;
            issue_here(&scope)
        }
        .instrument(span.clone())
    });
    assert_eq!(task.await.expect("task"), 3);

    // set_parent after the span was entered fails, as the known trap says
    let late = tracing::info_span!("late");
    drop(late.enter());
    assert!(late.set_parent(Context::new().with_dei_scope(scope)).is_err());
}
