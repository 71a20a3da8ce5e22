//! Shared code of the corpus examples and tests: generated protos, test telemetry, loopback servers.
//!
//! Included with `#[path = "common/mod.rs"] mod common;` (examples) or
//! `#[path = "../examples/common/mod.rs"] mod common;` (tests).
#![allow(dead_code)]

pub mod cinema;
pub mod hello;
pub mod table1;

use dei_instrumentation::{DeiClientLayer, DeiClientService, DeiConfig, DeiServerLayer};
use dei_sfit::InMemorySpans;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::net::SocketAddr;
use std::sync::OnceLock;
use tokio::net::TcpListener;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

/// The generated protobuf code.
pub mod pb {
    /// examples/proto/cinema.proto
    pub mod cinema {
        tonic::include_proto!("cinema");
    }
    /// examples/proto/helloworld.proto
    pub mod helloworld {
        tonic::include_proto!("helloworld");
    }
}

/// The process's telemetry: the DEI propagator installed globally, and a tracing subscriber whose
/// OpenTelemetry layer exports every span, as it ends, to an in-memory exporter.
pub fn spans() -> InMemorySpans {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    let exporter = EXPORTER.get_or_init(|| {
        dei_propagator::install_global_propagator();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("dei-corpus");
        // INFO and above: the DEI client and server spans, not the transport crates' debug and trace spans
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        let subscriber = tracing_subscriber::registry().with(layer);
        let _ = tracing::subscriber::set_global_default(subscriber);
        opentelemetry::global::set_tracer_provider(provider);
        exporter
    });
    InMemorySpans::new(exporter.clone())
}

/// A gRPC channel to `addr` through the DEI client layer.
pub type Channel = DeiClientService<tonic::transport::Channel>;

/// A lazily connecting channel to `addr` with the DEI client layer.
pub fn channel(addr: SocketAddr, config: &DeiConfig) -> Channel {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("loopback URI");
    tower::ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()))
        .service(endpoint.tcp_nodelay(true).connect_lazy())
}

/// Binds an ephemeral loopback port.
pub async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    (listener, addr)
}

/// Serves one tonic service with the DEI server layer on `listener` until the process ends.
pub fn serve<S>(listener: TcpListener, config: &DeiConfig, service: S)
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
        let _ = router.serve_with_incoming(incoming).await;
    });
}

/// Command-line options shared by the corpus examples.
#[derive(Debug, Default)]
pub struct Args {
    /// `--replay FILE N`: rerun execution N of a saved report instead of searching.
    pub replay: Option<(String, usize)>,
    /// `--bfs`: breadth-first.
    pub bfs: bool,
    /// `--max N`: stop after N executions.
    pub max: Option<usize>,
    /// `--single`: single-fault mode.
    pub single: bool,
    /// `--encapsulation`: service-encapsulation reduction.
    pub encapsulation: bool,
    /// `--json PATH`: where to write the report (default target/sfit/NAME.json).
    pub json: Option<String>,
    /// `--quiet`: no per-execution progress.
    pub quiet: bool,
}

impl Args {
    /// Parses `std::env::args`.
    pub fn parse() -> Args {
        let mut args = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--replay" => {
                    let file = it.next().unwrap_or_default();
                    let n = it.next().and_then(|n| n.parse().ok()).unwrap_or(1);
                    args.replay = Some((file, n));
                }
                "--bfs" => args.bfs = true,
                "--max" => args.max = it.next().and_then(|n| n.parse().ok()),
                "--single" => args.single = true,
                "--encapsulation" => args.encapsulation = true,
                "--json" => args.json = it.next(),
                "--quiet" => args.quiet = true,
                other => eprintln!("ignoring unknown argument {other}"),
            }
        }
        args
    }

    /// Search options from these arguments.
    pub fn options(&self, base: dei_sfit::SearchOptions) -> dei_sfit::SearchOptions {
        use dei_sfit::{Progress, Reduction, Strategy};
        dei_sfit::SearchOptions {
            strategy: if self.bfs {
                Strategy::BreadthFirst
            } else {
                base.strategy
            },
            max_executions: self.max.or(base.max_executions),
            single_fault: self.single || base.single_fault,
            reduction: if self.encapsulation {
                Reduction::ServiceEncapsulation {
                    compare_responses: false,
                }
            } else {
                base.reduction
            },
            progress: if self.quiet { Progress::Silent } else { Progress::Stderr },
            ..base
        }
    }
}

/// Searches `test` (or replays one execution of a saved report), prints the report and writes it as JSON.
pub async fn search_main(name: &str, test: &dyn dei_sfit::FunctionalTest, base: dei_sfit::SearchOptions) {
    let args = Args::parse();
    let source: std::sync::Arc<dyn dei_sfit::SpanSource> = std::sync::Arc::new(spans());
    if let Some((file, n)) = &args.replay {
        let report = match dei_sfit::Report::load(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cannot read {file}: {e}");
                std::process::exit(2);
            }
        };
        match dei_sfit::Search::replay(test, &report, *n, source).await {
            Ok(e) => {
                println!("replayed #{n} of {file}: {:?}", e.outcome);
                for p in &e.effective {
                    println!("  injected {} on {} ({})", p.fault, p.index, p.signature);
                }
                if !e.outcome.passed() {
                    std::process::exit(1);
                }
            }
            Err(e) => {
                eprintln!("replay failed: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    let options = args.options(base);
    let report = match dei_sfit::Search::with_shared_source(options, source).run(test).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("search failed: {e}");
            std::process::exit(2);
        }
    };
    print!("{report}");
    let path = args.json.clone().unwrap_or_else(|| format!("target/sfit/{name}.json"));
    if let Some(dir) = std::path::Path::new(&path).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match report.save(&path) {
        Ok(()) => println!("report: {path} (replay a failing execution: --replay {path} N)"),
        Err(e) => eprintln!("cannot write {path}: {e}"),
    }
}
