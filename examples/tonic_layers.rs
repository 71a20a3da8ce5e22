//! Add distributed execution indexes to a tonic service: one layer on each server, one on each client channel.
//!
//! ```sh
//! cargo run --example tonic_layers
//! ```
//!
//! A `World` service answers `Get` by calling an `Echo` service twice, in a loop; a client calls `World.Get`
//! twice from one root scope. Every RPC span then carries its index as `dei.index`, and the example prints
//! them: a call's index extends its caller's, and the count `c` of its last element `r|c` tells the loop's
//! iterations apart.
//!
//! The telemetry is set up as a service sets it up (`telemetry` below; dei-instrumentation's GUIDE.md,
//! section 1): a tracer provider with the service's name, exporting in batches over OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector (`OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 cargo
//! run --example tonic_layers`, to Jaeger, an OpenTelemetry Collector or dei-collector), behind
//! tracing-opentelemetry, with log lines (DEI's warnings among them) filtered by `RUST_LOG`. The example also
//! keeps the spans in memory, which a service does not, to print their indexes. DEI adds its propagator and
//! the two layers.
//!
//! Standalone: it uses only the published crates and the `helloworld` proto that the root package compiles.
#![forbid(unsafe_code)]

use dei_instrumentation::{DeiClientLayer, DeiClientService, DeiConfig, DeiServerLayer, root_context};
use dei_propagator::Index;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tonic::transport::{Endpoint, Server, server::TcpIncoming};
use tonic::{Request, Response, Status};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

mod pb {
    tonic::include_proto!("helloworld");
}
use pb::Text;
use pb::service_c_client::ServiceCClient as EchoClient;
use pb::service_c_server::{ServiceC as Echo, ServiceCServer as EchoServer};
use pb::world_client::WorldClient;
use pb::world_server::{World, WorldServer};

/// A tonic channel with the DEI client layer: it computes each call's index and sends it in the `dei` header.
type Channel = DeiClientService<tonic::transport::Channel>;

fn channel(addr: SocketAddr, config: &DeiConfig) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?;
    Ok(tower::ServiceBuilder::new()
        // `server`: the client spans' server.address and server.port (the channel adds them below the layer)
        .layer(DeiClientLayer::new(config.clone()).server(endpoint.uri()))
        .service(endpoint.connect_lazy()))
}

struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(&self, request: Request<Text>) -> Result<Response<Text>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

struct WorldService {
    echo: EchoClient<Channel>,
}

#[tonic::async_trait]
impl World for WorldService {
    async fn get(&self, request: Request<Text>) -> Result<Response<Text>, Status> {
        let mut words = Vec::new();
        // Two calls from one call site: same signature, payload and stack, so counts 1 and 2.
        for _ in 0..2 {
            let reply = self.echo.clone().echo(request.get_ref().clone()).await?;
            words.push(reply.into_inner().text);
        }
        Ok(Response::new(Text { text: words.join(" ") }))
    }
}

/// The service's telemetry, as it already is: a tracer provider named after the service, exporting over
/// OTLP/gRPC in batches when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, behind tracing-opentelemetry, beside a log
/// layer. `in_memory` is this example's own addition, to read the spans back.
fn telemetry(in_memory: InMemorySpanExporter) -> Result<SdkTracerProvider, Box<dyn std::error::Error>> {
    let mut provider =
        SdkTracerProvider::builder().with_resource(Resource::builder().with_service_name("tonic-layers").build());
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        // The endpoint, headers and timeout come from the standard OTEL_EXPORTER_OTLP_* variables.
        let otlp = opentelemetry_otlp::SpanExporter::builder().with_tonic().build()?;
        provider = provider.with_batch_exporter(otlp);
    }
    let provider = provider.with_simple_exporter(in_memory).build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    // Spans at INFO and above go to OpenTelemetry: the RPC spans, not the TRACE-level internals of h2, hyper
    // and tower (nor those of the OTLP exporter's own connection). Log lines (`RUST_LOG`, `info` by default) go
    // to stderr.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("tonic-layers"))
        .with_filter(LevelFilter::INFO);
    let logs = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::registry().with(spans).with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(logs),
    );
    tracing::subscriber::set_global_default(subscriber)?;
    Ok(provider)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exporter = InMemorySpanExporter::default();
    let provider = telemetry(exporter.clone())?;
    // DEI's part: the propagator (the default global one is a no-op) and the layers.
    dei_propagator::install_global_propagator();
    let config = DeiConfig::default();

    // Servers: the DEI server layer reads the caller's index and serves each request in its own scope.
    let echo_listener = TcpListener::bind("127.0.0.1:0").await?;
    let echo_addr = echo_listener.local_addr()?;
    let echo = Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(EchoServer::new(EchoService));
    tokio::spawn(echo.serve_with_incoming(TcpIncoming::from(echo_listener)));

    let world_listener = TcpListener::bind("127.0.0.1:0").await?;
    let world_addr = world_listener.local_addr()?;
    let world = Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(WorldServer::new(WorldService {
            echo: EchoClient::new(channel(echo_addr, &config)?),
        }));
    tokio::spawn(world.serve_with_incoming(TcpIncoming::from(world_listener)));

    // Two calls from one root scope (a request your service receives is one already).
    let cx = root_context(&config);
    let mut client = WorldClient::new(channel(world_addr, &config)?);
    for text in ["hello", "hello"] {
        let request = Request::new(Text { text: text.into() });
        let reply = client.get(request).with_context(cx.clone()).await?;
        println!("World.Get -> {:?}", reply.into_inner().text);
    }

    // Each RPC's client span carries its index; print them, shortest first.
    // (The in-memory exporter has them once they ended; a collector that cannot be reached is logged, not
    // fatal, as it would be in a service.)
    if let Err(e) = provider.force_flush() {
        tracing::warn!("exporting spans: {e}");
    }
    let mut indexes: Vec<(String, Index)> = exporter
        .get_finished_spans()?
        .into_iter()
        .filter(|span| span.span_kind == opentelemetry::trace::SpanKind::Client)
        .filter_map(|span| {
            let value = span
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == dei_instrumentation::span::INDEX)?
                .value
                .as_str()
                .into_owned();
            Some((span.name.into_owned(), Index::decode(&value).ok()?))
        })
        .collect();
    indexes.sort_by_key(|(_, index)| (index.depth(), index.encode()));
    for (name, index) in &indexes {
        let counts: Vec<String> = index.elements().iter().map(|e| e.count.to_string()).collect();
        println!(
            "{name:<40} depth {} counts [{}]  dei.index {index}",
            index.depth(),
            counts.join(" :: ")
        );
    }

    // What the layers promise: six RPCs, six distinct indexes, each Echo call's index one element longer than
    // the World call it was made in.
    let distinct: std::collections::BTreeSet<String> = indexes.iter().map(|(_, i)| i.encode()).collect();
    let worlds: Vec<&Index> = indexes
        .iter()
        .filter(|(n, _)| n.ends_with("World/Get"))
        .map(|(_, i)| i)
        .collect();
    let echoes: Vec<&Index> = indexes
        .iter()
        .filter(|(n, _)| n.ends_with("Echo"))
        .map(|(_, i)| i)
        .collect();
    let nested = echoes
        .iter()
        .all(|echo| echo.parent().is_some_and(|parent| worlds.contains(&&parent)));
    if distinct.len() != 6 || worlds.len() != 2 || echoes.len() != 4 || !nested {
        return Err(format!("expected 6 distinct indexes, 4 Echo calls under 2 World calls: {indexes:?}").into());
    }
    println!("6 RPCs, 6 distinct indexes, each Echo call's index extends its World call's");
    // As a service does when it stops: the spans still in the batch are exported.
    if let Err(e) = provider.shutdown() {
        tracing::warn!("exporting spans at shutdown: {e}");
    }
    Ok(())
}
