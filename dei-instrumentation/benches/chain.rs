//! A realistic workload beside the echo's worst case (issue #18): a chain of three tonic services on loopback,
//! A → B → C, where each handler does about 200 µs of work (a busy loop) and then calls the next; C only works.
//! The same chain runs three times in one process: with the DEI layers on every hop; with minimal
//! OpenTelemetry layers (tests/common/otel_layers.rs: client span, trace context injected; server span
//! parented on it), the baseline of the goal; and with tonic-tracing-opentelemetry's layers, which a
//! tonic service that records the semantic conventions' RPC attributes through tracing already has. All three
//! export through a batch span processor to an exporter that drops the spans.
//!
//! Each round makes `--calls` sequential calls to each chain's A and takes each chain's median end-to-end
//! latency: `--run` calls of one chain in a row (by default all of them), then the next chain, in a random
//! order each time (`--run 1` interleaves the chains call by call). It prints the medians and the per-round
//! ratios DEI / minimal layers and DEI / tonic-tracing-opentelemetry (median, min and max over the rounds).
//! The goal: DEI's overhead ≤ 2 % against the minimal layers.
//!
//! Each hop's client is type-erased the same way in every chain (a boxed service, the response body boxed),
//! so the chains differ only in their layers.
//!
//! `cargo bench -p dei-instrumentation --bench chain -- --rounds 20 --calls 200` (the defaults; a short check:
//! `--rounds 2 --calls 20`; interleaved: `--run 1`). For a profiler, `--only dei` (or `otel`, `semconv`) runs
//! one chain alone and prints its median.

#[path = "../tests/common/otel_layers.rs"]
mod otel_layers;

mod pb {
    tonic::include_proto!("deitest");
}

use dei_instrumentation::{DeiClientLayer, DeiConfig, DeiServerLayer};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use otel_layers::{OtelClientLayer, OtelServerLayer};
use rand::seq::SliceRandom;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::body::Body;
use tonic::transport::{Endpoint, Server};
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

/// How long each handler works before it calls the next hop.
const WORK: Duration = Duration::from_micros(200);

/// A hop's client, the same type in both chains.
type Hop = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, tonic::transport::Error>;

/// Counts spans and drops them.
#[derive(Debug, Default)]
struct DropExporter(Arc<AtomicU64>);

impl SpanExporter for DropExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// About 200 µs of CPU work on the handler's thread.
fn work() {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < WORK {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

struct A(pb::middle_client::MiddleClient<Hop>);
struct B(pb::leaf_client::LeafClient<Hop>);
struct C;

#[tonic::async_trait]
impl pb::front_server::Front for A {
    async fn run(&self, request: tonic::Request<pb::Msg>) -> Result<tonic::Response<pb::Msg>, tonic::Status> {
        work();
        let reply = self.0.clone().work(request.into_inner()).await?;
        Ok(tonic::Response::new(reply.into_inner()))
    }
}

#[tonic::async_trait]
impl pb::middle_server::Middle for B {
    async fn work(&self, request: tonic::Request<pb::Msg>) -> Result<tonic::Response<pb::Msg>, tonic::Status> {
        work();
        let reply = self.0.clone().get(request.into_inner()).await?;
        Ok(tonic::Response::new(reply.into_inner()))
    }
}

#[tonic::async_trait]
impl pb::leaf_server::Leaf for C {
    async fn get(&self, request: tonic::Request<pb::Msg>) -> Result<tonic::Response<pb::Msg>, tonic::Status> {
        work();
        Ok(tonic::Response::new(request.into_inner()))
    }

    async fn collect(
        &self,
        _: tonic::Request<tonic::Streaming<pb::Msg>>,
    ) -> Result<tonic::Response<pb::Msg>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in the chain"))
    }

    type WatchStream = futures::stream::Empty<Result<pb::Msg, tonic::Status>>;

    async fn watch(&self, _: tonic::Request<pb::Msg>) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in the chain"))
    }

    type ChatStream = futures::stream::Empty<Result<pb::Msg, tonic::Status>>;

    async fn chat(
        &self,
        _: tonic::Request<tonic::Streaming<pb::Msg>>,
    ) -> Result<tonic::Response<Self::ChatStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in the chain"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The DEI layers.
    Dei,
    /// Minimal OpenTelemetry layers: the baseline.
    Otel,
    /// tonic-tracing-opentelemetry's layers.
    Semconv,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Dei, Variant::Otel, Variant::Semconv];

    fn named(name: &str) -> Option<Variant> {
        match name {
            "dei" => Some(Variant::Dei),
            "otel" => Some(Variant::Otel),
            "semconv" => Some(Variant::Semconv),
            _ => None,
        }
    }
}

async fn listen() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A client for the service at `addr`, with the variant's client layer.
async fn hop(addr: SocketAddr, variant: Variant, config: &DeiConfig) -> Hop {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect");
    match variant {
        Variant::Dei => BoxCloneSyncService::new(
            tower::ServiceBuilder::new()
                .layer(DeiClientLayer::new(config.clone()))
                .service(channel)
                .map_response(|r| r.map(Body::new)),
        ),
        Variant::Otel => BoxCloneSyncService::new(
            tower::ServiceBuilder::new()
                .layer(OtelClientLayer)
                .service(channel)
                .map_response(|r| r.map(Body::new)),
        ),
        Variant::Semconv => BoxCloneSyncService::new(
            tower::ServiceBuilder::new()
                .layer(tonic_tracing_opentelemetry::middleware::client::OtelGrpcLayer)
                .service(channel)
                .map_response(|r| r.map(Body::new)),
        ),
    }
}

/// Serves `service` with the variant's server layer; returns its address.
async fn serve<S>(service: S, variant: Variant, config: &DeiConfig) -> SocketAddr
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = std::convert::Infallible>
        + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let (listener, addr) = listen().await;
    match variant {
        Variant::Dei => {
            let router = Server::builder()
                .layer(DeiServerLayer::new(config.clone()))
                .add_service(service);
            tokio::spawn(async move { router.serve_with_incoming(incoming(listener)).await });
        }
        Variant::Otel => {
            let router = Server::builder().layer(OtelServerLayer).add_service(service);
            tokio::spawn(async move { router.serve_with_incoming(incoming(listener)).await });
        }
        Variant::Semconv => {
            let router = Server::builder()
                .layer(tonic_tracing_opentelemetry::middleware::server::OtelGrpcLayer::default())
                .add_service(service);
            tokio::spawn(async move { router.serve_with_incoming(incoming(listener)).await });
        }
    }
    addr
}

/// The chain A → B → C of one variant; returns a client for A (with the variant's client layer).
async fn chain(variant: Variant, config: &DeiConfig) -> pb::front_client::FrontClient<Hop> {
    let c = serve(pb::leaf_server::LeafServer::new(C), variant, config).await;
    let b = serve(
        pb::middle_server::MiddleServer::new(B(pb::leaf_client::LeafClient::new(hop(c, variant, config).await))),
        variant,
        config,
    )
    .await;
    let a = serve(
        pb::front_server::FrontServer::new(A(pb::middle_client::MiddleClient::new(hop(b, variant, config).await))),
        variant,
        config,
    )
    .await;
    pb::front_client::FrontClient::new(hop(a, variant, config).await)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The value after `name` on the command line.
fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn arg(name: &str, default: usize) -> usize {
    arg_value(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 20).max(1);
    let calls = arg("--calls", 200).max(1);
    let run = arg("--run", calls).max(1);
    let only = arg_value("--only").map(|name| Variant::named(&name).expect("--only dei, otel or semconv"));
    dei_propagator::install_global_propagator();
    let exported = Arc::new(AtomicU64::new(0));
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(DropExporter(exported.clone()))
        .with_resource(Resource::builder().with_service_name("chain-bench").build())
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("chain-bench"))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel)).expect("one subscriber");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = DeiConfig::default();
    let message = pb::Msg {
        text: "chain".into(),
        n: 1,
        blob: vec![0x5a; 256],
    };
    runtime.block_on(async move {
        let mut clients = Vec::new();
        for variant in Variant::ALL {
            if only.is_none_or(|o| o == variant) {
                clients.push((variant, chain(variant, &config).await));
            }
        }
        // Warm up every chain (connections, the symbol cache).
        for (_, client) in &mut clients {
            for _ in 0..20 {
                client.run(message.clone()).await.expect("warm-up call");
            }
        }
        let mut medians = vec![Vec::new(); clients.len()];
        // Per round: DEI / minimal layers, DEI / tonic-tracing-opentelemetry.
        let mut ratios = [Vec::new(), Vec::new()];
        let mut rng = rand::rng();
        for _ in 0..rounds {
            let mut latencies = vec![Vec::with_capacity(calls); clients.len()];
            // `run` calls of each chain in a row, the chains in a random order each time, until each made `calls`.
            let mut made = 0;
            while made < calls {
                let n = run.min(calls - made);
                let mut order: Vec<usize> = (0..clients.len()).collect();
                order.shuffle(&mut rng);
                for i in order {
                    let (variant, client) = &mut clients[i];
                    for _ in 0..n {
                        let start = Instant::now();
                        let reply = client.run(message.clone()).await.expect("call through the chain");
                        latencies[i].push(start.elapsed().as_secs_f64() * 1e6);
                        assert_eq!(reply.get_ref().blob.len(), 256, "{variant:?}: the echo came back");
                    }
                }
                made += n;
            }
            let round: Vec<f64> = latencies.iter_mut().map(|l| median(l)).collect();
            for (i, m) in round.iter().enumerate() {
                medians[i].push(*m);
            }
            if only.is_none() {
                ratios[0].push(round[0] / round[1]);
                ratios[1].push(round[0] / round[2]);
            }
        }
        if let Some(variant) = only {
            println!(
                "chain A->B->C, {variant:?} alone, {rounds} rounds x {calls} calls: median end-to-end latency {:.1} us",
                median(&mut medians[0])
            );
            return;
        }
        let [dei, plain, semconv] = [0, 1, 2].map(|i| median(&mut medians[i]));
        println!(
            "chain A->B->C, {} us of work per hop, {rounds} rounds x {calls} calls per variant:",
            WORK.as_micros()
        );
        println!(
            "  median end-to-end latency: DEI {dei:.1} us, minimal OpenTelemetry layers {plain:.1} us, \
             tonic-tracing-opentelemetry {semconv:.1} us"
        );
        for (name, ratios) in [
            ("minimal OpenTelemetry layers", &ratios[0]),
            ("tonic-tracing-opentelemetry", &ratios[1]),
        ] {
            let ratio = median(&mut ratios.clone());
            let (lo, hi) = ratios.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                (lo.min(*r), hi.max(*r))
            });
            println!("  DEI / {name} per round: median {ratio:.4} (min {lo:.4}, max {hi:.4})");
        }
    });
    let _ = provider.force_flush();
    assert!(
        exported.load(Ordering::Relaxed) > 0,
        "no span was exported: the comparison measured no tracing"
    );
}
