//! A tonic unary echo with a 1 KiB payload on loopback, OpenTelemetry tracing on both sides, with and without
//! the DEI layers, in the same run.
//!
//! - Baseline: the usual OpenTelemetry instrumentation — a client span with `traceparent` and `baggage`
//!   injected through the global propagator, a server span parented on the extracted context.
//! - DEI: [`DeiClientLayer`] and [`DeiServerLayer`], which do the same and give every call its index.
//!
//! Both export through a batch span processor to an exporter that drops the spans. Criterion measures the
//! latency of one call; then, in the same process, an interleaved loop in a runtime task (as a service handler
//! calls) reports the median latency ratio, and a closed-loop load (64 calls in flight; rounds of one window
//! per variant, each round in a random order) reports the max-throughput ratio and the ratio of the process's
//! CPU time per call, each ratio with a 95 % bootstrap interval over the latency cycles or the rounds (within
//! this run: separate runs on a shared VM spread further). Besides both sides instrumented
//! alike, the comparison has variants without unwinding, with each walker forced, and with DEI on one side
//! only (`dei_client_only`, `dei_server_only`), which shows where the cost lies, the baseline a second time
//! (`otel_only_control`, and `otel_only_unsampled_control` for traces that are not sampled), whose ratio to the
//! first is the run's noise floor, and a second baseline,
//! `otel_semconv`: tonic-tracing-opentelemetry's layers, which record the semantic conventions' RPC attributes
//! (`rpc.service`, `rpc.method`, `server.address`) as the DEI layers do and the minimal baseline does not (they
//! read the status code from the response's headers only, and end the span there, where the DEI layers wrap the
//! body to read it from the trailers). `otel_only_payload_first` (and `_unsampled_payload_first`) is the
//! minimal baseline that reads and digests the message before the call goes out and does nothing more: what
//! naming a call by its payload costs by itself, beside what the DEI layers cost.
//!
//! `cargo bench -p dei-instrumentation --bench grpc_echo`
// `criterion_group!` defines an undocumented `pub fn` (the workspace warns on missing docs).
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use dei_instrumentation::{DeiClientLayer, DeiConfig, DeiServerLayer};
use futures::future::BoxFuture;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Server};
use tower::{Layer, Service, ServiceBuilder};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

mod pb {
    tonic::include_proto!("deitest");
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

// ---------- the baseline: plain OpenTelemetry instrumentation ----------

struct Inject<'a>(&'a mut http::HeaderMap);

impl opentelemetry::propagation::Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct Extract<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

#[derive(Clone)]
struct OtelClientLayer;

impl<S> Layer<S> for OtelClientLayer {
    type Service = OtelClient<S>;
    fn layer(&self, inner: S) -> OtelClient<S> {
        OtelClient(inner)
    }
}

#[derive(Clone)]
struct OtelClient<S>(S);

impl<S> Service<http::Request<tonic::body::Body>> for OtelClient<S>
where
    S: Service<http::Request<tonic::body::Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let name = request.uri().path().trim_start_matches('/').to_string();
        let span = tracing::info_span!("grpc.client", otel.name = %name, otel.kind = "client", rpc.system = "grpc");
        let cx = span.context();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Inject(request.headers_mut())));
        let clone = self.0.clone();
        let mut inner = std::mem::replace(&mut self.0, clone);
        Box::pin(async move { inner.call(request).await }.instrument(span))
    }
}

/// Reads a unary call's message and digests it (SHA-256) before handing the request on, as any layer that
/// names a call by its payload must before the call's headers go out, and does nothing else: under the minimal
/// layers, the `payload_first` variants. The DEI client layer does this work plus the index; without a layer
/// like this, tonic encodes the message later, in the connection's task. The message goes on in a
/// [`ReadMessage`] body, framed as the DEI client layer frames a unary call it has read.
#[derive(Clone)]
struct PayloadFirst<S>(S);

/// A unary request's message, read before the call went out: one data frame, the end of the stream announced
/// with it, its size not (as the DEI client layer's body does: the framing alone moves this bench's latency by
/// several per cent, so the two must match).
struct ReadMessage(Option<bytes::Bytes>);

impl http_body::Body for ReadMessage {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Poll::Ready(self.0.take().map(|data| Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

impl<S> Service<http::Request<tonic::body::Body>> for PayloadFirst<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        use http_body::Body as _;
        use sha2::Digest as _;
        let (parts, mut body) = request.into_parts();
        // tonic encodes a unary call's one message at once: a waker that does nothing is enough.
        let mut noop = std::task::Context::from_waker(std::task::Waker::noop());
        let frame = match std::pin::Pin::new(&mut body).poll_frame(&mut noop) {
            Poll::Ready(Some(Ok(frame))) => frame,
            _ => panic!("the bench's unary message is ready at once"),
        };
        let data = frame.into_data().unwrap_or_default();
        std::hint::black_box(sha2::Sha256::digest(&data));
        let body = tonic::body::Body::new(ReadMessage(Some(data)));
        self.0.call(http::Request::from_parts(parts, body))
    }
}

#[derive(Clone)]
struct OtelServerLayer;

impl<S> Layer<S> for OtelServerLayer {
    type Service = OtelServer<S>;
    fn layer(&self, inner: S) -> OtelServer<S> {
        OtelServer(inner)
    }
}

#[derive(Clone)]
struct OtelServer<S>(S);

impl<S> Service<http::Request<tonic::body::Body>> for OtelServer<S>
where
    S: Service<http::Request<tonic::body::Body>> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Extract(request.headers())));
        let name = request.uri().path().trim_start_matches('/').to_string();
        let span = tracing::info_span!("grpc.server", otel.name = %name, otel.kind = "server", rpc.system = "grpc");
        let _ = span.set_parent(parent);
        let future = self.0.call(request);
        Box::pin(future.instrument(span))
    }
}

// ---------- setup ----------

fn install_telemetry() -> (Arc<AtomicU64>, SdkTracerProvider) {
    dei_propagator::install_global_propagator();
    let exported = Arc::new(AtomicU64::new(0));
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(DropExporter(exported.clone()))
        .with_resource(Resource::builder().with_service_name("bench").build())
        .build();
    // INFO and above, as services run: the RPC spans, not the TRACE-level internals of h2 and hyper.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bench"))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    let subscriber = tracing_subscriber::registry().with(otel);
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    (exported, provider)
}

/// CPU time used by the whole process so far, user and system: the runtime's workers, the batch span
/// processor's thread and the kernel's work for them.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
    };
    micros(usage.user_time()) + micros(usage.system_time())
}

async fn listen() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn connect(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect")
}

type BaselineClient = pb::middle_client::MiddleClient<OtelClient<Channel>>;
type SemconvClient =
    pb::middle_client::MiddleClient<tonic_tracing_opentelemetry::middleware::client::OtelGrpcService<Channel>>;
type DeiClient = pb::middle_client::MiddleClient<dei_instrumentation::DeiClientService<Channel>>;
type PayloadFirstClient = pb::middle_client::MiddleClient<OtelClient<PayloadFirst<Channel>>>;

/// Clients of one configuration: both sides instrumented alike (`baseline`: OpenTelemetry only, `dei`: the DEI
/// layers), and one side each (`dei_client_only`: DEI client to the OpenTelemetry-only server,
/// `dei_server_only`: OpenTelemetry-only client to the DEI server), and `payload_first`: the OpenTelemetry-only
/// client with [`PayloadFirst`] under it, to the OpenTelemetry-only server.
struct Clients {
    baseline: BaselineClient,
    dei: DeiClient,
    dei_client_only: DeiClient,
    dei_server_only: BaselineClient,
    payload_first: PayloadFirstClient,
}

async fn start(config: DeiConfig) -> Clients {
    let (l1, a1) = listen().await;
    tokio::spawn(
        Server::builder()
            .layer(OtelServerLayer)
            .add_service(pb::middle_server::MiddleServer::new(Echo))
            .serve_with_incoming(incoming(l1)),
    );
    let (l2, a2) = listen().await;
    tokio::spawn(
        Server::builder()
            .layer(DeiServerLayer::new(config.clone()))
            .add_service(pb::middle_server::MiddleServer::new(Echo))
            .serve_with_incoming(incoming(l2)),
    );
    let otel_client =
        |channel| pb::middle_client::MiddleClient::new(ServiceBuilder::new().layer(OtelClientLayer).service(channel));
    let dei_client = |channel| {
        pb::middle_client::MiddleClient::new(
            ServiceBuilder::new()
                .layer(DeiClientLayer::new(config.clone()))
                .service(channel),
        )
    };
    Clients {
        baseline: otel_client(connect(a1).await),
        dei: dei_client(connect(a2).await),
        dei_client_only: dei_client(connect(a1).await),
        dei_server_only: otel_client(connect(a2).await),
        payload_first: pb::middle_client::MiddleClient::new(OtelClient(PayloadFirst(connect(a1).await))),
    }
}

/// Both sides instrumented by tonic-tracing-opentelemetry, on a server and a connection of their own.
async fn start_semconv() -> SemconvClient {
    let (listener, addr) = listen().await;
    tokio::spawn(
        Server::builder()
            .layer(tonic_tracing_opentelemetry::middleware::server::OtelGrpcLayer::default())
            .add_service(pb::middle_server::MiddleServer::new(Echo))
            .serve_with_incoming(incoming(listener)),
    );
    pb::middle_client::MiddleClient::new(
        ServiceBuilder::new()
            .layer(tonic_tracing_opentelemetry::middleware::client::OtelGrpcLayer)
            .service(connect(addr).await),
    )
}

/// A client of the same-run comparison.
#[derive(Clone)]
enum Variant {
    Baseline(BaselineClient),
    Semconv(SemconvClient),
    Dei(DeiClient),
    PayloadFirst(PayloadFirstClient),
    /// The same client, each call made in a trace that is not sampled (under a remote parent whose sampled
    /// flag is off, as a service sees an incoming request that an upstream sampler dropped).
    Unsampled(Box<Variant>),
}

/// A context whose remote parent span is not sampled: the default `ParentBased` sampler then drops every span
/// of the call, on both sides (the trace context goes out with the flag off).
fn unsampled_context() -> opentelemetry::Context {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
    let parent = SpanContext::new(
        TraceId::from(0x5eed_0000_0000_0000_0000_0000_0000_0001u128),
        SpanId::from(0x5eed_0000_0000_0001u64),
        TraceFlags::default(),
        true,
        TraceState::default(),
    );
    opentelemetry::Context::new().with_remote_span_context(parent)
}

impl Variant {
    /// One echo; the outcome without the reply.
    async fn call(&self) -> Result<(), tonic::Status> {
        match self {
            Variant::Baseline(c) => c.clone().work(payload()).await.map(drop),
            Variant::Semconv(c) => c.clone().work(payload()).await.map(drop),
            Variant::Dei(c) => c.clone().work(payload()).await.map(drop),
            Variant::PayloadFirst(c) => c.clone().work(payload()).await.map(drop),
            Variant::Unsampled(inner) => {
                use opentelemetry::context::FutureExt as _;
                Box::pin(inner.call()).with_context(unsampled_context()).await
            }
        }
    }
}

fn payload() -> pb::Msg {
    pb::Msg {
        text: "echo".into(),
        n: 1,
        blob: vec![0x5a; 1024],
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `0..n` in a random order.
fn shuffled(n: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    order
}

/// Calls completed by `concurrency` loops in `window`.
async fn throughput<F, Fut>(concurrency: usize, window: Duration, call: F) -> u64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + window;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (call, done) = (call.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    call().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed)
}

fn bench(c: &mut Criterion) {
    let (exported, provider) = install_telemetry();
    // `DEI_ECHO_CURRENT_THREAD=1` (with `DEI_ECHO_PROFILE`): servers, clients and connections on one thread, so
    // that an instruction count does not depend on how two workers happened to share the work (see
    // `profile_calls`).
    let rt = if std::env::var("DEI_ECHO_CURRENT_THREAD").is_ok() {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .expect("runtime");
    let Clients {
        baseline,
        dei,
        dei_client_only,
        dei_server_only,
        payload_first,
    } = rt.block_on(start(DeiConfig::default()));
    // The same layers without unwinding (`StackMode::CallSiteOnly`): how much of the cost is the stack.
    let no_unwind = rt.block_on(start(
        DeiConfig::builder()
            .stack(dei_instrumentation::StackConfig::default().mode(dei_instrumentation::StackMode::CallSiteOnly))
            .build(),
    ));
    let dei_no_unwind = no_unwind.dei;
    // The noise floor's baseline client: the same layers as `otel_only`, on a server and a connection of its own
    // (the same start's OpenTelemetry-only server).
    let control = no_unwind.baseline;
    // The default walker (`Auto`) walks frame pointers where a start-up check finds them, else DWARF; each alone.
    let walker = |w| {
        DeiConfig::builder()
            .stack(dei_instrumentation::StackConfig::default().walker(w))
            .build()
    };
    let dei_dwarf = rt.block_on(start(walker(dei_instrumentation::StackWalker::Dwarf))).dei;
    let dei_fp = rt
        .block_on(start(walker(dei_instrumentation::StackWalker::FramePointers)))
        .dei;
    // The same-run comparison's variants (the criterion group below uses the first two).
    let variants: Vec<(&str, Variant)> = vec![
        ("otel_only", Variant::Baseline(baseline.clone())),
        ("otel_plus_dei", Variant::Dei(dei.clone())),
        ("otel_plus_dei_call_site_only", Variant::Dei(dei_no_unwind)),
        ("otel_plus_dei_dwarf", Variant::Dei(dei_dwarf)),
        ("otel_plus_dei_frame_pointers", Variant::Dei(dei_fp)),
        ("dei_client_only", Variant::Dei(dei_client_only)),
        ("dei_server_only", Variant::Baseline(dei_server_only)),
        // The baseline again, on its own server and connection, measured like any variant: how far the same
        // code lands from itself in this run is the run's noise floor.
        ("otel_only_control", Variant::Baseline(control.clone())),
        // A second baseline: OpenTelemetry instrumentation as a widely used crate does it
        // (tonic-tracing-opentelemetry), with the semantic conventions' RPC attributes (`rpc.service`,
        // `rpc.method`, `server.address`, …) that the DEI layers record too and the minimal `otel_only` layers
        // leave out. `DEI_ECHO_VARIANTS=otel_semconv,otel_plus_dei,…` measures DEI against it.
        ("otel_semconv", Variant::Semconv(rt.block_on(start_semconv()))),
        // Traces that are not sampled (issue #18's `Unsampled` modes): the minimal layers unsampled as their
        // baseline, DEI's default `Lean` (the index computed and propagated, nothing recorded) and `Off`.
        (
            "otel_only_unsampled",
            Variant::Unsampled(Box::new(Variant::Baseline(baseline.clone()))),
        ),
        // The unsampled baseline again, on the control's server and connection: the noise floor of the
        // unsampled comparison.
        (
            "otel_only_unsampled_control",
            Variant::Unsampled(Box::new(Variant::Baseline(control))),
        ),
        (
            "otel_plus_dei_unsampled_lean",
            Variant::Unsampled(Box::new(Variant::Dei(dei.clone()))),
        ),
        // The minimal layers with the payload read and digested before the call goes out ([`PayloadFirst`]):
        // the part of `Lean`'s cost that any index of the payload pays, whatever computes it.
        ("otel_only_payload_first", Variant::PayloadFirst(payload_first.clone())),
        (
            "otel_only_unsampled_payload_first",
            Variant::Unsampled(Box::new(Variant::PayloadFirst(payload_first))),
        ),
        (
            "otel_plus_dei_unsampled_off",
            Variant::Unsampled(Box::new(Variant::Dei(
                rt.block_on(start(
                    DeiConfig::builder()
                        .unsampled(dei_instrumentation::Unsampled::Off)
                        .build(),
                ))
                .dei,
            ))),
        ),
    ];
    if let Ok(variant) = std::env::var("DEI_ECHO_PROFILE") {
        let Some((_, client)) = variants.into_iter().find(|(name, _)| *name == variant) else {
            panic!("unknown DEI_ECHO_PROFILE variant {variant}");
        };
        profile_calls(&rt, &variant, client);
        return;
    }

    // `DEI_ECHO_VARIANTS=otel_only,dei_server_only` narrows the same-run comparison to some variants (the
    // first one named is the baseline of every ratio, so name `otel_only` first), `DEI_ECHO_ROUNDS=N` sets its
    // rounds of throughput windows (default: one per variant), `DEI_ECHO_CYCLES=N` its latency cycles
    // (default 3,000) and `DEI_ECHO_RUN=K` the latency calls each variant makes in a row (default 1): longer
    // runs of two variants, to tell a small difference from the machine's noise.
    // Criterion's group below still measures `otel_only` and `otel_plus_dei`; a filter that matches neither
    // (`-- nothing`) skips it.
    let variants = match std::env::var("DEI_ECHO_VARIANTS") {
        Ok(names) => names
            .split(',')
            .map(str::trim)
            .map(|name| {
                variants
                    .iter()
                    .find(|(n, _)| *n == name)
                    .cloned()
                    .unwrap_or_else(|| panic!("unknown variant {name} in DEI_ECHO_VARIANTS"))
            })
            .collect(),
        Err(_) => variants,
    };
    let rounds = env_count("DEI_ECHO_ROUNDS", variants.len(), |_| true, "a number of rounds").max(1);

    let mut group = c.benchmark_group("unary_echo_1KiB");
    group.bench_function("otel_only", |b| {
        b.iter(|| {
            let mut client = baseline.clone();
            rt.block_on(async move { client.work(payload()).await.expect("echo") })
        })
    });
    group.bench_function("otel_plus_dei", |b| {
        b.iter(|| {
            let mut client = dei.clone();
            rt.block_on(async move { client.work(payload()).await.expect("echo") })
        })
    });
    group.finish();

    // The same run: interleaved latency samples, then interleaved throughput windows.
    // The calls are made from a task on the runtime, as a service's handler makes them (its stack ends at the
    // task's poll), not from the thread that blocks on the runtime.
    let latency_variants = variants.clone();
    let cycles = latency_cycles();
    let run = latency_run();
    let samples: Vec<Vec<Duration>> = rt
        .block_on(rt.spawn(async move {
            let n = latency_variants.len();
            let mut samples = vec![Vec::new(); n];
            // Each turn in its own random order, as the throughput windows below; in a turn every variant
            // makes `run` calls in a row (one by default).
            let mut rng = StdRng::seed_from_u64(0x1a7e);
            for _ in 0..cycles / run {
                for i in shuffled(n, &mut rng) {
                    let client = &latency_variants[i].1;
                    for _ in 0..run {
                        let t = Instant::now();
                        client.call().await.expect("echo");
                        samples[i].push(t.elapsed());
                    }
                }
            }
            samples
        }))
        .expect("latency task");
    let medians: Vec<Duration> = samples.iter().cloned().map(median).collect();
    // Each window starts with the span queue empty, so that no window exports another's spans; its CPU time
    // (the whole process's, user and system) is taken over the window and the flush after it, so it includes
    // exporting the window's own spans (the calls per second count the window alone): a second view of the
    // cost, as noisy on a shared VM as the first.
    let window = Duration::from_secs(2);
    // Each round's windows, (calls, CPU seconds) per variant: every figure below, and the intervals, come from
    // these.
    let mut round_raw: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut rng = StdRng::seed_from_u64(0xd31);
    for _ in 0..rounds {
        let mut raw = vec![(0.0, 0.0); variants.len()];
        // Each round in its own random order (seeded, so runs repeat it): on this VM a window's position in its
        // round alone moved the same variant's throughput by up to 14 % (the baseline against itself), and what
        // runs just before a window may matter too; a fixed or rotated order would charge both to some variants.
        for i in shuffled(variants.len(), &mut rng) {
            let client = variants[i].1.clone();
            let _ = provider.force_flush();
            let before = cpu_time();
            let done = rt.block_on(throughput(64, window, move || {
                let client = client.clone();
                // A failed call counts as done (none fail on loopback).
                async move {
                    let _ = client.call().await;
                }
            }));
            let _ = provider.force_flush();
            raw[i] = (done as f64, cpu_time().saturating_sub(before).as_secs_f64());
        }
        round_raw.push(raw);
    }
    let per_call = |(calls, cpu): (f64, f64)| cpu / calls.max(1.0);
    let totals: Vec<(f64, f64)> = (0..variants.len())
        .map(|i| round_raw.iter().fold((0.0, 0.0), |(n, c), r| (n + r[i].0, c + r[i].1)))
        .collect();
    println!(
        "same-run comparison ({cycles} cycles of sequential calls from a runtime task, {run} per variant at a time in random order; {rounds} rounds of {window:?} windows, one per variant in random order, 64 in flight):"
    );
    for (i, (name, _)) in variants.iter().enumerate() {
        println!(
            "  {name:30} median {:>10.1?}  ratio {:.3}   throughput {:>7.0} rps  ratio {:.3}   CPU {:>6.1} µs/call  ratio {:.3}",
            medians[i],
            medians[i].as_secs_f64() / medians[0].as_secs_f64(),
            totals[i].0 / (rounds as f64 * window.as_secs_f64()),
            totals[i].0 / totals[0].0,
            per_call(totals[i]) * 1e6,
            per_call(totals[i]) / per_call(totals[0])
        );
    }
    // Each round's ratios to the baseline (throughput, CPU per call): their spread is the machine's noise.
    let each: Vec<String> = round_raw
        .iter()
        .map(|r| format!("{:.0}", r[0].0 / window.as_secs_f64()))
        .collect();
    println!("  {:30} per round, calls/s: {}", variants[0].0, each.join(" "));
    for (i, (name, _)) in variants.iter().enumerate().skip(1) {
        let each: Vec<String> = round_raw
            .iter()
            .map(|r| {
                format!(
                    "{:.0} ({:.3}/{:.3})",
                    r[i].0 / window.as_secs_f64(),
                    r[i].0 / r[0].0,
                    per_call(r[i]) / per_call(r[0])
                )
            })
            .collect();
        println!(
            "  {name:30} per round, calls/s (throughput/CPU-per-call ratios): {}",
            each.join(" ")
        );
    }
    print_intervals(&variants, &samples, &round_raw);
    println!("spans exported: {}", exported.load(Ordering::Relaxed));
}

/// Latency cycles: `DEI_ECHO_CYCLES`, or 3,000. Each cycle makes one sequential call of every variant.
/// A ratio of medians over 3,000 cycles carries about ±1.5 % of sampling noise (its interval), as much as
/// the difference a 3 % goal has to tell apart; 30,000 cycles take about 4 s more per variant and narrow it
/// about threefold.
fn latency_cycles() -> usize {
    env_count(
        "DEI_ECHO_CYCLES",
        3000,
        |n| n >= CYCLE_BLOCK,
        &format!("a number of cycles (at least {CYCLE_BLOCK})"),
    )
}

/// Calls each variant makes in a row in the latency loop: `DEI_ECHO_RUN`, or 1 (every call interleaved). A
/// divisor of [`CYCLE_BLOCK`], so that the intervals still resample whole turns. With one call at a time, a
/// variant's code is often cold after another variant's call, and how often depends on which variants share
/// code: the same build measured Lean at 1.02 among three unsampled variants and 1.04 among four. Runs of 50
/// let each variant warm up as a service that runs only its own code does.
fn latency_run() -> usize {
    env_count(
        "DEI_ECHO_RUN",
        1,
        |n| n >= 1 && CYCLE_BLOCK.is_multiple_of(n),
        &format!("a divisor of {CYCLE_BLOCK}"),
    )
}

/// The count in the environment variable `name`, or `default` when it is unset; a value that is not a count
/// `valid` accepts stops the bench and says what was expected (`what`).
fn env_count(name: &str, default: usize, valid: impl Fn(usize) -> bool, what: &str) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .ok()
            .filter(|&n| valid(n))
            .unwrap_or_else(|| panic!("{name}={v} is not {what}")),
        Err(_) => default,
    }
}

/// Resamples drawn for each interval.
const RESAMPLES: usize = 2000;

/// Latency cycles resampled together: neighbouring cycles share the VM's drift, so resampling them one by one
/// would understate the spread.
const CYCLE_BLOCK: usize = 50;

/// Fewer rounds than this give no throughput interval: a bootstrap over so few says little.
const MIN_ROUNDS_FOR_INTERVAL: usize = 5;

/// The 2.5th and 97.5th percentiles of `stat` over [`RESAMPLES`] bootstrap resamples of `0..n` (seeded): a
/// 95 % interval for a statistic of `n` paired observations. Observations are drawn with replacement in
/// blocks of `block` consecutive ones (a moving-block bootstrap; `1` draws them one by one).
fn bootstrap(n: usize, block: usize, rng: &mut StdRng, mut stat: impl FnMut(&[usize]) -> f64) -> (f64, f64) {
    use rand::Rng;
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let block = block.clamp(1, n);
    let mut draws = Vec::with_capacity(n + block);
    let mut values: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            draws.clear();
            while draws.len() < n {
                let start = rng.random_range(0..=n - block);
                draws.extend(start..start + block);
            }
            draws.truncate(n);
            stat(&draws)
        })
        .collect();
    values.sort_by(f64::total_cmp);
    // As many resamples below the interval as above it.
    (values[RESAMPLES * 25 / 1000], values[(RESAMPLES - 1) * 975 / 1000])
}

/// 95 % intervals for each variant's ratios to the baseline (the first variant), resampling what the ratios
/// pair: the latency cycles (each cycle made one call of every variant) for the ratio of medians, the rounds
/// (each round ran one window of every variant) for the throughput and CPU-per-call ratios. They cover this run
/// only: on a shared VM separate runs spread further. The control's interval shows what the same code against
/// itself spans.
fn print_intervals(variants: &[(&str, Variant)], samples: &[Vec<Duration>], rounds: &[Vec<(f64, f64)>]) {
    let mut rng = StdRng::seed_from_u64(0xb007);
    let cycles = samples[0].len();
    let mut picked = Vec::with_capacity(cycles);
    let mut median_of = |variant: usize, draws: &[usize]| {
        picked.clear();
        picked.extend(draws.iter().map(|&c| samples[variant][c]));
        let mid = picked.len() / 2;
        *picked.select_nth_unstable(mid).1
    };
    println!(
        "  95 % bootstrap intervals of the ratios ({RESAMPLES} resamples of the cycles, in blocks of {CYCLE_BLOCK}, and of the rounds):"
    );
    for (i, (name, _)) in variants.iter().enumerate().skip(1) {
        let latency = bootstrap(cycles, CYCLE_BLOCK, &mut rng, |draws| {
            median_of(i, draws).as_secs_f64() / median_of(0, draws).as_secs_f64()
        });
        let sum = |variant: usize, draws: &[usize], field: fn(&(f64, f64)) -> f64| -> f64 {
            draws.iter().map(|&r| field(&rounds[r][variant])).sum()
        };
        let per_round = if rounds.len() < MIN_ROUNDS_FOR_INTERVAL {
            format!("throughput and CPU per call: n/a (fewer than {MIN_ROUNDS_FOR_INTERVAL} rounds)")
        } else {
            let throughput = bootstrap(rounds.len(), 1, &mut rng, |draws| {
                sum(i, draws, |r| r.0) / sum(0, draws, |r| r.0)
            });
            let cpu = bootstrap(rounds.len(), 1, &mut rng, |draws| {
                (sum(i, draws, |r| r.1) / sum(i, draws, |r| r.0)) / (sum(0, draws, |r| r.1) / sum(0, draws, |r| r.0))
            });
            format!(
                "throughput [{:.3}, {:.3}]   CPU per call [{:.3}, {:.3}]",
                throughput.0, throughput.1, cpu.0, cpu.1
            )
        };
        println!("  {name:30} latency [{:.3}, {:.3}]   {per_round}", latency.0, latency.1);
    }
}

/// `DEI_ECHO_PROFILE=<variant>` (a name of the same-run comparison: `otel_only`, `otel_plus_dei`,
/// `dei_client_only`, …), `[DEI_ECHO_CALLS=N]`, `[DEI_ECHO_CONCURRENCY=C]`, `[DEI_ECHO_BLOCK_ON=1]`,
/// `[DEI_ECHO_CURRENT_THREAD=1]` (everything on one current-thread runtime, for instruction counts that repeat
/// from run to run: with two workers they vary by about ±2 k per call with the scheduling): make N
/// calls (default 2000, after 200 to warm up) on one variant, C in flight (default 1: sequential), from tasks on
/// the runtime, or one by one through `Runtime::block_on` from the main thread (as criterion's loop calls,
/// printing the median), and skip the measurements, so that a profiler or an instruction counter
/// (`valgrind --tool=callgrind`, `perf stat -e task-clock,context-switches`) can compare the variants' cost
/// per call.
fn profile_calls(rt: &tokio::runtime::Runtime, variant: &str, client: Variant) {
    let calls: usize = std::env::var("DEI_ECHO_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let concurrency: usize = std::env::var("DEI_ECHO_CONCURRENCY")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);
    if std::env::var("DEI_ECHO_BLOCK_ON").is_ok() {
        let mut samples: Vec<Duration> = (0..200 + calls)
            .map(|_| {
                let t = Instant::now();
                rt.block_on(client.call()).expect("echo");
                t.elapsed()
            })
            .collect();
        samples.drain(..200);
        println!(
            "{variant}: {calls} calls through block_on after 200 to warm up, median {:?}",
            median(samples)
        );
        return;
    }
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..concurrency)
            .map(|i| {
                let client = client.clone();
                let share = (200 + calls) / concurrency + usize::from(i < (200 + calls) % concurrency);
                tokio::spawn(async move {
                    for _ in 0..share {
                        client.call().await.expect("echo");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("calls");
        }
    });
    let per_call = started.elapsed() / (calls + 200) as u32;
    println!("{variant}: {calls} calls after 200 to warm up, {concurrency} in flight, {per_call:?} per call");
}

criterion_group!(benches, bench);
criterion_main!(benches);
