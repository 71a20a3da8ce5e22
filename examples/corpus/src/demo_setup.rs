//! The demo's setup, shared by `examples/demo.rs` and `tests/web_view.rs`: an embedded dei-collector on
//! loopback, the cinema services with the DEI layers exporting their spans to it over real OTLP/HTTP, and the
//! functional test searched exhaustively by dei-sfit, whose report the collector serves to the web view (with
//! the other reports in its directory, when one is given: every run's report side by side).
//!
//! Used as `dei_corpus::demo_setup`.

use crate::cinema::{self, Variant};
use dei_collector::server::{self, Running, ServerConfig};
use dei_collector::server::{Downstream, ForwardConfig};
use dei_sfit::{InMemorySpans, Progress, Report, Search, SearchOptions};
use opentelemetry::trace::{SpanId, SpanKind, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData, SpanExporter};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// The `service.name` of spans outside every service: the functional test's own client calls.
pub const TEST_SERVICE: &str = "functional-test";

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The cinema program.
    pub variant: Variant,
    /// Also forward every span to this OTLP endpoint.
    pub forward: Option<Downstream>,
    /// Where the search report (JSON) goes; the collector serves it at `/api/v1/search`.
    pub report_path: PathBuf,
    /// The directory of reports the collector serves (`serve --search-report DIR`, e.g. `target/sfit`, where
    /// each run writes `<program>/<UTC time>.json`), so that the web view lists this run's report beside the
    /// earlier ones; `None` serves `report_path` alone.
    pub report_dir: Option<PathBuf>,
    /// Print one line per execution while searching.
    pub progress: bool,
}

/// A finished search with the collector still serving.
pub struct Demo {
    /// The embedded collector.
    pub collector: Running,
    /// The search's report.
    pub report: Report,
    /// Where the report was written.
    pub report_path: PathBuf,
}

/// What the demo found, read back from the collector.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Services in the service graph (nodes that sent spans), sorted.
    pub services: Vec<String>,
    /// Virtual nodes of the service graph, sorted: callees never seen serving (not instrumented, or named by
    /// an `rpc.service` several services serve). A call that failed before reaching its server (a connection
    /// fault) is merged into the service that serves its `rpc.service`, so the cinema leaves none.
    pub virtual_nodes: Vec<String>,
    /// Edges of the service graph.
    pub edges: usize,
    /// Distinct RPCs: prefix-tree nodes other than the root.
    pub distinct_rpcs: usize,
    /// Executions of the functional test.
    pub executions: usize,
    /// Executions whose functional test failed.
    pub failures: usize,
    /// Spans the collector received.
    pub spans_received: u64,
    /// Executions with planned faults that were not injected (their verdict does not test their plan).
    pub unreached: usize,
    /// Executions whose spans did not settle (their observation may be incomplete).
    pub unsettled: usize,
    /// Executions some of whose spans or stream message events the collector dropped (past its cap of RPCs per
    /// trace): their observations are incomplete.
    pub incomplete: usize,
    /// Client spans still waiting for their server peer when the demo stopped waiting (the graph may then
    /// miss edges to virtual nodes).
    pub graph_waiting: usize,
}

/// Starts the collector, the services and the search; returns once every span is in the collector. Once per
/// process: it installs the global tracing subscriber.
pub async fn run(options: DemoOptions) -> Result<Demo, String> {
    if let Some(dir) = options.report_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut config = ServerConfig::ephemeral();
    config.ingest.search_report = Some(
        options
            .report_dir
            .clone()
            .unwrap_or_else(|| options.report_path.clone()),
    );
    config.forward = options.forward.clone().map(ForwardConfig::new);
    let collector = server::start(config).await.map_err(|e| e.to_string())?;

    let endpoint = format!("http://{}/v1/traces", collector.http_addr);
    let (memory, router, provider) = telemetry(endpoint);
    let dei_config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let cinema = cinema::start(options.variant, &dei_config).await;
    let test = cinema::functional_test(cinema);
    let search_options = SearchOptions {
        catalog: cinema::catalog(),
        progress: if options.progress {
            Progress::Stderr
        } else {
            Progress::Silent
        },
        ..SearchOptions::default()
    };
    let report = Search::new(search_options, InMemorySpans::new(memory))
        .run(&test)
        .await
        .map_err(|e| format!("search failed: {e}"))?;
    report
        .save(&options.report_path)
        .map_err(|e| format!("{}: {e}", options.report_path.display()))?;

    // every span to the collector: the batch processor's queue, then the spans that waited for their parent
    tokio::task::spawn_blocking(move || {
        let _ = provider.force_flush();
        futures::executor::block_on(router.export_pending())
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("exporting to the collector: {e}"))?;
    // a client span without a server peer (an injected connection fault) waits for its peer until the
    // pairing TTL, then becomes an edge to a virtual node: wait until no span waits, so the graph is final
    let settle = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while collector.collector.stats().graph_waiting_spans > 0 && std::time::Instant::now() < settle {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(Demo {
        collector,
        report,
        report_path: options.report_path,
    })
}

impl Demo {
    /// Reads the summary from the collector's state and the report.
    pub fn summary(&self) -> Summary {
        let stats = self.collector.collector.stats();
        let view = self.collector.collector.graph();
        let names = |is_virtual: bool| {
            let mut v: Vec<String> = view
                .nodes
                .iter()
                .filter(|n| n.is_virtual == is_virtual)
                .map(|n| n.id.to_string())
                .collect();
            v.sort();
            v
        };
        Summary {
            services: names(false),
            virtual_nodes: names(true),
            edges: view.edges.len(),
            distinct_rpcs: stats.tree_nodes.saturating_sub(1),
            executions: self.report.executions.len(),
            failures: self.report.failing().len(),
            spans_received: stats.counters.spans_received,
            unreached: self.report.unreached().len(),
            unsettled: self.report.unsettled().len(),
            incomplete: self.report.incomplete().len(),
            graph_waiting: stats.graph_waiting_spans,
        }
    }
}

/// Installs the process's telemetry: the DEI propagator, and one tracer provider that sends every span both
/// to an in-memory exporter (read by the search, synchronously as spans end) and, batched, over OTLP/HTTP to
/// `endpoint` with the `service.name` of the service that made it.
fn telemetry(endpoint: String) -> (InMemorySpanExporter, ServiceRouter, SdkTracerProvider) {
    let memory = InMemorySpanExporter::default();
    let router = ServiceRouter::new(endpoint);
    let builder = SdkTracerProvider::builder()
        .with_simple_exporter(memory.clone())
        .with_batch_exporter(router.clone());
    let provider = install_telemetry(builder, "dei-demo");
    (memory, router, provider)
}

/// Makes `builder`'s provider the process's telemetry: installs the DEI propagator, a `tracing` subscriber
/// that turns spans at INFO and above into OpenTelemetry spans of the tracer `name`, and the global tracer
/// provider. The process's first subscriber stays (`tracing` allows one).
pub fn install_telemetry(
    builder: opentelemetry_sdk::trace::TracerProviderBuilder,
    name: &'static str,
) -> SdkTracerProvider {
    dei_propagator::install_global_propagator();
    let provider = builder.build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(name))
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
    opentelemetry::global::set_tracer_provider(provider.clone());
    provider
}

/// A span exporter that gives each span the `service.name` of the service that made it, so that services
/// sharing one process (and one tracer provider) appear as separate nodes of the collector's service graph.
///
/// A server span belongs to its `rpc.service` (`cinema.Bookings` → `bookings`); any other span to its
/// parent's service, or to [`TEST_SERVICE`] without a parent. A span whose parent has not been exported yet
/// (a client span ends before the server span around it) waits for one more batch.
#[derive(Clone, Debug)]
pub struct ServiceRouter {
    endpoint: String,
    state: Arc<Mutex<RouterState>>,
}

#[derive(Debug, Default)]
struct RouterState {
    services: HashMap<SpanId, String>,
    /// Spans waiting for their parent, with the number of batches they have waited.
    pending: Vec<(SpanData, u32)>,
    exporters: HashMap<String, Arc<opentelemetry_otlp::SpanExporter>>,
}

/// One service's spans and the OTLP exporter that sends them with its `service.name`.
type Routed = (Arc<opentelemetry_otlp::SpanExporter>, Vec<SpanData>);

/// Most span ids remembered for parent lookups.
const MAX_REMEMBERED: usize = 200_000;

fn service_of_server(span: &SpanData) -> Option<String> {
    if span.span_kind != SpanKind::Server {
        return None;
    }
    let rpc = span.attributes.iter().find(|kv| kv.key.as_str() == "rpc.service");
    let name = match rpc.map(|kv| &kv.value) {
        Some(Value::String(s)) => s.as_str().to_string(),
        _ => span.name.split('/').next().unwrap_or(&span.name).to_string(),
    };
    Some(name.rsplit('.').next().unwrap_or(&name).to_lowercase())
}

impl ServiceRouter {
    /// A router exporting over OTLP/HTTP (binary protobuf) to `endpoint` (`http://host:port/v1/traces`).
    pub fn new(endpoint: String) -> Self {
        ServiceRouter {
            endpoint,
            state: Arc::default(),
        }
    }

    /// Sorts `batch` (and the waiting spans) by service; keeps unresolved spans for one more batch unless
    /// `flush`.
    fn route(&self, batch: Vec<SpanData>, flush: bool) -> Result<Vec<Routed>, String> {
        let mut state = self.state.lock().map_err(|e| e.to_string())?;
        let mut todo: Vec<(SpanData, u32)> = std::mem::take(&mut state.pending);
        todo.extend(batch.into_iter().map(|s| (s, 0)));
        let mut groups: HashMap<String, Vec<SpanData>> = HashMap::new();
        loop {
            let before = todo.len();
            let mut rest = Vec::new();
            for (span, waited) in todo {
                let service = service_of_server(&span)
                    .or_else(|| (span.parent_span_id == SpanId::INVALID).then(|| TEST_SERVICE.to_string()))
                    .or_else(|| state.services.get(&span.parent_span_id).cloned());
                match service {
                    Some(s) => {
                        if state.services.len() >= MAX_REMEMBERED {
                            state.services.clear();
                        }
                        state.services.insert(span.span_context.span_id(), s.clone());
                        groups.entry(s).or_default().push(span);
                    }
                    None => rest.push((span, waited)),
                }
            }
            todo = rest;
            if todo.len() == before || todo.is_empty() {
                break;
            }
        }
        for (span, waited) in todo {
            if flush || waited >= 1 {
                groups.entry(TEST_SERVICE.to_string()).or_default().push(span);
            } else {
                state.pending.push((span, waited + 1));
            }
        }
        let mut out = Vec::new();
        for (service, spans) in groups {
            let exporter = match state.exporters.get(&service) {
                Some(e) => e.clone(),
                None => {
                    let mut e = opentelemetry_otlp::SpanExporter::builder()
                        .with_http()
                        .with_protocol(Protocol::HttpBinary)
                        .with_endpoint(self.endpoint.clone())
                        .build()
                        .map_err(|e| e.to_string())?;
                    e.set_resource(
                        &Resource::builder_empty()
                            .with_attributes([KeyValue::new("service.name", service.clone())])
                            .build(),
                    );
                    let e = Arc::new(e);
                    state.exporters.insert(service, e.clone());
                    e
                }
            };
            out.push((exporter, spans));
        }
        Ok(out)
    }

    async fn send(&self, batch: Vec<SpanData>, flush: bool) -> OTelSdkResult {
        let groups = self.route(batch, flush).map_err(OTelSdkError::InternalFailure)?;
        let mut result = Ok(());
        for (exporter, spans) in groups {
            if let Err(e) = exporter.export(spans).await {
                result = Err(e);
            }
        }
        result
    }

    /// Exports the spans still waiting for their parent. Blocking (call it off the async runtime).
    pub async fn export_pending(&self) -> OTelSdkResult {
        self.send(Vec::new(), true).await
    }
}

impl SpanExporter for ServiceRouter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.send(batch, false).await
    }
}
