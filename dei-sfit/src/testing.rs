//! Test support (feature `testing`): in-memory telemetry, services served with the DEI layers, and channels
//! and clients through them, so that a functional test of real services on loopback fits on one screen.
//!
//! - [`in_process_spans`]: the span source for services in this process (telemetry installed once);
//! - [`bind`], [`serve_grpc`], [`grpc_channel`]: a tonic service behind [`DeiServerLayer`] on an ephemeral
//!   loopback port, and a channel to it through [`DeiClientLayer`];
//! - [`serve_http`], [`http_client`]: the same for axum and reqwest.
//!
//! [`in_process_spans`] builds on
//! [`dei_instrumentation::testing::telemetry`]: once per process it installs the global propagator (W3C trace
//! context, W3C baggage, DEI), a tracer provider whose span processor is *simple* (a span is exported as it
//! ends, so an execution's spans are there when the test returns; a batch processor would make the search
//! wait for, or miss, them), its in-memory exporter, the global tracer provider
//! (`opentelemetry::global::set_tracer_provider`) and a global tracing subscriber exporting INFO and above
//! (the RPC spans, not the debug spans of h2, hyper and tower). It returns an [`InMemorySpans`] reading that
//! exporter.
//!
//! The services must run in the same process (their spans go to the global subscriber) and must accept
//! fault plans: `DeiConfig::builder().faults(Faults::Accept)`; plans are off by default, and a search whose
//! services drop them injects nothing ([`Report::nothing_injected`](crate::Report::nothing_injected)).
//!
//! One search at a time per process: the source clears the shared exporter when an execution begins, so run
//! searches (and oracles) one after another, never concurrently. Within one search, executions may run in
//! parallel ([`SearchOptions::parallelism`](crate::SearchOptions::parallelism)): the first call also adds a
//! [`SpanRouter`] to the tracer provider, from which each execution reads the spans of its own trace. When the
//! test telemetry was installed before (by a direct call of `dei_instrumentation::testing::telemetry`), the
//! router cannot be added; parallel executions then filter the exporter's spans by trace instead.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let spans = dei_sfit::testing::in_process_spans();
//! // let report = dei_sfit::Search::new(options, spans).run(&test).await?;
//! # let _ = spans;
//! # }
//! ```

use crate::source::{InMemorySpans, SpanRouter};
use dei_instrumentation::{
    DeiClientLayer, DeiClientService, DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, DeiServerLayer,
};
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use std::net::SocketAddr;
use std::sync::OnceLock;
use tokio::net::TcpListener;

/// The span source for services running in this process, with the test telemetry installed (once per
/// process; later calls return a source over the same exporter and router).
pub fn in_process_spans() -> InMemorySpans {
    static ROUTER: OnceLock<Option<SpanRouter>> = OnceLock::new();
    let router = ROUTER.get_or_init(|| {
        let router = SpanRouter::new();
        let telemetry = dei_instrumentation::testing::telemetry_with(router.clone());
        // the router is the provider's only if it sees a span end
        let before = router.ended();
        telemetry
            .provider()
            .tracer("dei-sfit")
            .start("dei-sfit: span router probe")
            .end();
        if router.ended() > before {
            Some(router)
        } else {
            tracing::warn!(
                "dei-sfit: the test telemetry was installed before in_process_spans(): parallel executions \
                 filter the exporter's spans by trace (every read copies them all)"
            );
            None
        }
    });
    let telemetry = dei_instrumentation::testing::telemetry();
    let spans = InMemorySpans::new(telemetry.exporter().clone()).with_provider(telemetry.provider().clone());
    match router {
        Some(r) => spans.with_router(r.clone()),
        None => spans,
    }
}

/// A tonic channel through the DEI client layer: every call gets its index, carries it in the `dei` header
/// and applies the planned fault for it.
pub type GrpcChannel = DeiClientService<tonic::transport::Channel>;

/// Binds an ephemeral loopback port: bind first and serve later when services call each other in a cycle,
/// or when a client needs the address before its server runs.
pub async fn bind() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves one tonic service behind [`DeiServerLayer`] on `listener`, in a task of the current runtime, until
/// the runtime ends. An error of the server ends the task and is logged.
pub fn serve_grpc<S>(listener: TcpListener, config: &DeiConfig, service: S)
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let router = tonic::transport::Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(service);
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        if let Err(error) = router.serve_with_incoming(incoming).await {
            tracing::error!(%error, "dei-sfit: a test's gRPC server stopped");
        }
    });
}

/// A lazily connecting channel to `addr` through [`DeiClientLayer`].
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> std::io::Result<()> {
/// let config = dei_instrumentation::DeiConfig::default();
/// let (_listener, addr) = dei_sfit::testing::bind().await?;
/// let channel = dei_sfit::testing::grpc_channel(addr, &config);
/// // `MyClient::new(channel)` for the generated client of any tonic service
/// # let _ = channel;
/// # Ok(()) }
/// ```
pub fn grpc_channel(addr: SocketAddr, config: &DeiConfig) -> GrpcChannel {
    let endpoint = tonic::transport::Endpoint::from(
        http::Uri::builder()
            .scheme("http")
            .authority(addr.to_string())
            .path_and_query("/")
            .build()
            .expect("a socket address is a valid URI authority"),
    );
    tower::ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()).server(endpoint.uri()))
        .service(endpoint.tcp_nodelay(true).connect_lazy())
}

/// Serves an axum router behind [`DeiHttpServerLayer`] on `listener`, in a task of the current runtime, until
/// the runtime ends. An error of the server ends the task and is logged.
pub fn serve_http(listener: TcpListener, config: &DeiConfig, router: axum::Router) {
    let app = router.layer(DeiHttpServerLayer::new(config.clone()));
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "dei-sfit: a test's HTTP server stopped");
        }
    });
}

/// A reqwest client through [`DeiReqwestMiddleware`].
pub fn http_client(config: &DeiConfig) -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build()
}
