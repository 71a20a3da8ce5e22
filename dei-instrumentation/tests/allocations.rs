//! Heap allocations per unary call: the DEI layers against the same call with only minimal OpenTelemetry
//! layers (issue #18's goal: at most 10 more; see [`ALLOWED_EXTRA`] for where it stands and what they are).
//!
//! What is counted: every allocation (`stats_alloc`'s counters: an allocation or a reallocation each count one)
//! while a current-thread tokio runtime runs a window of calls. On that runtime everything the call does
//! runs on that one thread: the client's code and layers, tonic's channel and its buffer worker, the
//! hyper/h2 connection tasks of both sides, the server's layers and handler, and the span processor, which
//! exports each span synchronously when it ends (to an exporter that drops it). So the count is the whole
//! call, both sides. A current-thread runtime is used for the measurement only: the same layers run on
//! multi-thread runtimes in every other test of this crate (e2e, streams, modes, ...).
//!
//! Both variants run the same service (`deitest.Middle/Work`, an echo of a 1 KiB message) on loopback, in the
//! same process, interleaved, each measured as the smallest mean over several windows (a window may catch
//! a connection's buffer growing); calls are made from one request scope, as a handler makes them. The
//! sampled path is measured (every span sampled and exported), which does the most work.

#[path = "common/otel_layers.rs"]
mod otel_layers;

mod pb {
    tonic::include_proto!("deitest");
}

use dei_instrumentation::{DeiClientLayer, DeiConfig, DeiServerLayer, root_context};
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use otel_layers::{OtelClientLayer, OtelServerLayer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tonic::transport::{Endpoint, Server};
use tower::ServiceBuilder;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

/// The system allocator wrapped by `stats_alloc`, which counts every allocation of the process with relaxed
/// atomics (no lock, so no thread can stall another's allocation), and keeps the `unsafe` of a global
/// allocator in that crate.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Counts the allocations (and reallocations) made while running `f`. The process's, not only this thread's:
/// the measurement runs everything on one current-thread runtime, this file holds one test, and no other
/// thread of the test binary allocates while it runs.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let region = stats_alloc::Region::new(ALLOCATOR);
    let out = f();
    let change = region.change();
    (out, (change.allocations + change.reallocations) as u64)
}

/// Counts spans and drops them.
#[derive(Debug, Default)]
struct DropExporter(Arc<AtomicU64>);

impl SpanExporter for DropExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

struct Echo;

#[tonic::async_trait]
impl pb::middle_server::Middle for Echo {
    async fn work(&self, request: tonic::Request<pb::Msg>) -> Result<tonic::Response<pb::Msg>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }
}

async fn listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect")
}

/// The most allocations per call that DEI may add (issue #18's goal: 10). It adds 9.0 today: 9 whole
/// allocations, and a few hundredths from the server's HPACK table, which the `dei` header's value (new on every
/// call) turns over a little faster, so that a header the client sends on every call is now and then sent, and
/// copied, again. The 9, on a sampled call:
/// - client: the issued index, the `dei` header's value, and the `dei.index` and `dei.payload.digest` values;
///   the request body that carries the message read to digest it (tonic boxes any body but its own);
/// - server: the request scope and `Context::with_value` for it (a map and two `Arc`s); the decoded index;
///   the `dei` header's value as h2 decodes it and the copy its HPACK table keeps; the `dei.index` and
///   `dei.payload.digest` values; the request body that digests what it passes (tonic boxes it). (The header
///   map tells the propagator how many `dei` values came, `extract_with_index_counted`, so that it reads the
///   one value without the list `Extractor::get_all` makes.);
/// - less six that the minimal layers make and DEI's do not: `rpc.system`, two per span (as a tracing field its
///   value is copied into a `String`, in a list of its own; DEI sets it as a static value with the `dei.*`
///   attributes), and two on the client's headers (the minimal layers parse `traceparent` and `tracestate` into
///   new names and copy the traceparent value; DEI's names are made once and the value's buffer is shared, one
///   allocation).
const ALLOWED_EXTRA: f64 = 9.5;

/// The same on a trace that is not sampled ([`dei_instrumentation::Unsampled::Lean`]: the index computed and
/// propagated, no span work): 4.0 today, the list above without the attribute values and the server's body.
const ALLOWED_LEAN_EXTRA: f64 = 4.5;

const WINDOW: u64 = 200;
const WINDOWS: usize = 5;

fn message() -> pb::Msg {
    pb::Msg {
        text: "allocations".into(),
        n: 7,
        blob: vec![0x5a; 1024],
    }
}

#[test]
fn a_dei_call_allocates_little_more_than_the_opentelemetry_baseline() {
    dei_propagator::install_global_propagator();
    let exported = Arc::new(AtomicU64::new(0));
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(DropExporter(exported.clone()))
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("allocations"))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(otel));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let config = DeiConfig::default();
    let (mut dei, mut plain, scope) = runtime.block_on(async {
        let (l1, dei_addr) = listener().await;
        let dei_server = Server::builder()
            .layer(DeiServerLayer::new(config.clone()))
            .add_service(pb::middle_server::MiddleServer::new(Echo));
        tokio::spawn(async move { dei_server.serve_with_incoming(incoming(l1)).await });
        let (l2, plain_addr) = listener().await;
        let plain_server = Server::builder()
            .layer(OtelServerLayer)
            .add_service(pb::middle_server::MiddleServer::new(Echo));
        tokio::spawn(async move { plain_server.serve_with_incoming(incoming(l2)).await });
        let dei = pb::middle_client::MiddleClient::new(
            ServiceBuilder::new()
                .layer(DeiClientLayer::new(config.clone()))
                .service(channel(dei_addr).await),
        );
        let plain = pb::middle_client::MiddleClient::new(
            ServiceBuilder::new()
                .layer(OtelClientLayer)
                .service(channel(plain_addr).await),
        );
        (dei, plain, root_context(&config))
    });
    // A trace that is not sampled: calls under a remote parent whose sampled flag is off.
    let unsampled_parent = SpanContext::new(
        TraceId::from_bytes([0xde; 16]),
        SpanId::from_bytes([0x1e; 8]),
        TraceFlags::default(),
        true,
        TraceState::default(),
    );
    let dei_unsampled = scope.with_remote_span_context(unsampled_parent.clone());
    let plain_unsampled = Context::new().with_remote_span_context(unsampled_parent);
    // One window of calls through each client; the mean allocations per call.
    let mut dei_window = |calls: u64, cx: &Context| {
        let ((), n) = counted(|| {
            runtime.block_on(
                async {
                    for _ in 0..calls {
                        let reply = dei.work(message()).await.expect("DEI call");
                        assert_eq!(reply.get_ref().blob.len(), 1024);
                    }
                }
                .with_context(cx.clone()),
            )
        });
        n as f64 / calls as f64
    };
    let mut plain_window = |calls: u64, cx: &Context| {
        let ((), n) = counted(|| {
            runtime.block_on(
                async {
                    for _ in 0..calls {
                        let reply = plain.work(message()).await.expect("plain call");
                        assert_eq!(reply.get_ref().blob.len(), 1024);
                    }
                }
                .with_context(cx.clone()),
            )
        });
        n as f64 / calls as f64
    };
    let sampled = (scope.clone(), Context::new());
    let unsampled = (dei_unsampled, plain_unsampled);
    // Warm up: connections, caches (symbols, signatures), buffers.
    for (dei_cx, plain_cx) in [&sampled, &unsampled] {
        dei_window(WINDOW, dei_cx);
        plain_window(WINDOW, plain_cx);
    }
    let exported_before = exported.load(Ordering::Relaxed);
    let (mut dei_means, mut plain_means) = (Vec::new(), Vec::new());
    let (mut lean_means, mut plain_unsampled_means) = (Vec::new(), Vec::new());
    for _ in 0..WINDOWS {
        dei_means.push(dei_window(WINDOW, &sampled.0));
        plain_means.push(plain_window(WINDOW, &sampled.1));
        lean_means.push(dei_window(WINDOW, &unsampled.0));
        plain_unsampled_means.push(plain_window(WINDOW, &unsampled.1));
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (dei_min, plain_min) = (min(&dei_means), min(&plain_means));
    let extra = dei_min - plain_min;
    let (lean_min, plain_unsampled_min) = (min(&lean_means), min(&plain_unsampled_means));
    let lean_extra = lean_min - plain_unsampled_min;
    println!(
        "allocations per unary call (both sides), sampled: DEI {dei_min:.1}, OpenTelemetry baseline {plain_min:.1}, \
         DEI adds {extra:.1} (windows of {WINDOW}: DEI {dei_means:?}, baseline {plain_means:?})"
    );
    println!(
        "allocations per unary call (both sides), not sampled (Unsampled::Lean): DEI {lean_min:.1}, OpenTelemetry \
         baseline {plain_unsampled_min:.1}, DEI adds {lean_extra:.1} (windows of {WINDOW}: DEI {lean_means:?}, \
         baseline {plain_unsampled_means:?})"
    );
    // Every sampled call's spans were exported (the baseline is not a baseline without its spans), and none of
    // the unsampled ones.
    let sampled_calls = WINDOWS as u64 * WINDOW * 2;
    let _ = provider.force_flush();
    let exported = exported.load(Ordering::Relaxed) - exported_before;
    assert_eq!(
        exported,
        2 * sampled_calls,
        "spans exported for {sampled_calls} sampled calls"
    );
    assert!(
        lean_extra <= ALLOWED_LEAN_EXTRA,
        "DEI adds {lean_extra:.1} allocations per unsampled call (at most {ALLOWED_LEAN_EXTRA})"
    );
    assert!(
        extra <= ALLOWED_EXTRA,
        "DEI adds {extra:.1} allocations per call (at most {ALLOWED_EXTRA})"
    );
}
