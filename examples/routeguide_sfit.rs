//! A first search, written from the docs alone: a routeguide-style system on real tonic services
//! (examples/proto/routeguide.proto, compiled with protox by the root build.rs, no protoc) — a backend with the
//! four RPC kinds (unary, server-streaming, client-streaming, bidi) and a frontend that calls each of them
//! with a fallback. Set up as docs/sfit.md says: the layers with `Faults::Accept` and the descriptor set,
//! `dei_sfit::testing::in_process_spans()`, a catalog that leaves the test's own entry call alone. The search
//! must target every RPC kind (the server-streaming call both as a stream and by its request message), never
//! see the plan fail the test, and reach exactly the brute-force Oracle's fault sets, once each.
//!
//! ```sh
//! cargo run --example routeguide_sfit
//! ```
//! Exits 0 when the search agrees with the Oracle, 1 when it does not (and says how), 2 on a bad argument or
//! a standard output that cannot be written (a reader that went away, `| head`, only stops the printing).

use dei_corpus::{Stdout, outln};
use dei_instrumentation::grpc::stream::channel;
use dei_instrumentation::{DeiConfig, DeiStreaming, Faults};
use dei_propagator::Fault;
use dei_sfit::{FaultCatalog, Oracle, Search, SearchOptions, SpanSource, TestRun, test_fn, testing};
use futures::Stream;
use opentelemetry::context::FutureExt as _;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

mod pb {
    tonic::include_proto!("routeguide");
}
use pb::frontend_client::FrontendClient;
use pb::frontend_server::{Frontend, FrontendServer};
use pb::route_guide_client::RouteGuideClient;
use pb::route_guide_server::{RouteGuide, RouteGuideServer};
use pb::{Feature, Point, RouteNote, RouteSummary, Trip, TripPlan};

const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/routeguide_descriptor.bin"));

type Channel = testing::GrpcChannel;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

struct Backend;

#[tonic::async_trait]
impl RouteGuide for Backend {
    async fn get_feature(&self, request: Request<Point>) -> Result<Response<Feature>, Status> {
        let p = request.into_inner();
        Ok(Response::new(Feature {
            name: format!("feature at {},{}", p.latitude, p.longitude),
        }))
    }

    type ListFeaturesStream = BoxStream<Feature>;

    async fn list_features(&self, _: Request<Point>) -> Result<Response<Self::ListFeaturesStream>, Status> {
        let features = ["north", "south"].map(|name| Ok(Feature { name: name.to_string() }));
        Ok(Response::new(Box::pin(futures::stream::iter(features))))
    }

    async fn record_route(&self, request: Request<tonic::Streaming<Point>>) -> Result<Response<RouteSummary>, Status> {
        let mut points = DeiStreaming::new(request);
        let mut point_count = 0;
        while points.message().await?.is_some() {
            point_count += 1;
        }
        Ok(Response::new(RouteSummary { point_count }))
    }

    type RouteChatStream = BoxStream<RouteNote>;

    async fn route_chat(
        &self,
        request: Request<tonic::Streaming<RouteNote>>,
    ) -> Result<Response<Self::RouteChatStream>, Status> {
        let mut notes = DeiStreaming::new(request);
        let mut echoes = Vec::new();
        while let Some(note) = notes.message().await? {
            echoes.push(Ok(note.message));
        }
        Ok(Response::new(Box::pin(futures::stream::iter(echoes))))
    }
}

struct FrontendSvc {
    config: DeiConfig,
    guide: RouteGuideClient<Channel>,
}

/// How many messages a response stream delivered before it ended or failed.
async fn count<T>(stream: &mut tonic::Streaming<T>) -> usize {
    let mut n = 0;
    while let Ok(Some(_)) = stream.message().await {
        n += 1;
    }
    n
}

#[tonic::async_trait]
impl Frontend for FrontendSvc {
    /// Calls the four RPCs, each with a fallback: never fails.
    async fn plan(&self, _: Request<Trip>) -> Result<Response<TripPlan>, Status> {
        let mut guide = self.guide.clone();
        let feature = match guide
            .get_feature(Point {
                latitude: 1,
                longitude: 2,
            })
            .await
        {
            Ok(r) => r.into_inner().name,
            Err(_) => "?".to_string(),
        };
        let listed = match guide
            .list_features(Point {
                latitude: 0,
                longitude: 0,
            })
            .await
        {
            Ok(r) => count(&mut r.into_inner()).await,
            Err(_) => 0,
        };
        // client streaming: the call runs in its own task, spawned with the request's context
        let (points, request) = channel::<Point>(&self.config, 4);
        let mut g = guide.clone();
        let call = dei_propagator::spawn(async move { g.record_route(request).await });
        for i in 0..2 {
            if points
                .send(Point {
                    latitude: i,
                    longitude: i,
                })
                .await
                .is_err()
            {
                break; // a planned fault ended the stream
            }
        }
        drop(points);
        let recorded = match call.await {
            Ok(Ok(r)) => r.into_inner().point_count,
            _ => 0,
        };
        // bidi
        let (notes, request) = channel::<RouteNote>(&self.config, 4);
        let mut g = guide.clone();
        let call = dei_propagator::spawn(async move { g.route_chat(request).await });
        let _ = notes
            .send(RouteNote {
                message: "hi".to_string(),
            })
            .await;
        drop(notes);
        let chatted = match call.await {
            Ok(Ok(r)) => count(&mut r.into_inner()).await,
            _ => 0,
        };
        Ok(Response::new(TripPlan {
            summary: format!("{feature}|{listed}|{recorded}|{chatted}"),
        }))
    }
}

const USAGE: &str = "usage: routeguide_sfit [-h|--help]
  searches the routeguide system's fault space and checks the search against the brute-force Oracle";

/// `Err` with `message` unless `ok`.
fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(message()) }
}

/// The exit code for `code`, or 2 when standard output could not be written (other than by a reader that went
/// away: [`Stdout`]).
fn exit_code(out: &Stdout, code: u8) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(out.exit_code(i32::from(code))).unwrap_or(2))
}

fn main() -> std::process::ExitCode {
    // a reader that goes away (`| head`) stops the output, not the search and its check
    let mut out = Stdout::default();
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("-h" | "--help") => {
            outln!(out, "{USAGE}");
            return exit_code(&out, 0);
        }
        Some(other) => {
            eprintln!("routeguide_sfit: unknown argument {other:?}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(search(&mut out)) {
        Ok(()) => exit_code(&out, 0),
        Err(why) => {
            eprintln!("routeguide_sfit: {why}");
            exit_code(&out, 1)
        }
    }
}

async fn search(out: &mut Stdout) -> Result<(), String> {
    let spans: Arc<dyn SpanSource> = Arc::new(dei_sfit::testing::in_process_spans());
    let config = DeiConfig::builder()
        .faults(Faults::Accept)
        .methods_from_descriptor_set(DESCRIPTOR_SET)
        .map_err(|e| format!("the descriptor set: {e}"))?
        .build();
    // real tonic servers on loopback, behind the DEI server layer, called through the DEI client layer
    let (listener, backend) = testing::bind().await.map_err(|e| format!("bind: {e}"))?;
    testing::serve_grpc(listener, &config, RouteGuideServer::new(Backend));
    let frontend = FrontendSvc {
        config: config.clone(),
        guide: RouteGuideClient::new(testing::grpc_channel(backend, &config)),
    };
    let (listener, frontend_addr) = testing::bind().await.map_err(|e| format!("bind: {e}"))?;
    testing::serve_grpc(listener, &config, FrontendServer::new(frontend));
    let client = FrontendClient::new(testing::grpc_channel(frontend_addr, &config));

    let test = test_fn("routeguide plan degrades, never fails", move |run: TestRun| {
        let mut client = client.clone();
        async move {
            let reply = client
                .plan(Trip {
                    name: "trip".to_string(),
                })
                .with_context(run.context())
                .await
                .map_err(|s| format!("the frontend failed: {s}"))?;
            let summary = reply.into_inner().summary;
            if summary == "feature at 1,2|2|2|1" || run.planned_on("routeguide.RouteGuide/*") {
                Ok(())
            } else {
                Err(format!("a wrong plan without any fault: {summary:?}"))
            }
        }
    });
    let options = SearchOptions {
        // one fault per RPC and per stream message; the entry call (Frontend/Plan) has none
        catalog: FaultCatalog::none().with_rule("routeguide.RouteGuide/*", vec![Fault::UNAVAILABLE]),
        ..SearchOptions::default()
    };
    let report = Search::with_shared_source(options.clone(), spans.clone())
        .run(&test)
        .await
        .map_err(|e| format!("the search: {e}"))?;
    outln!(out, "{report}");
    report.tested_faults().map_err(|e| e.to_string())?;
    ensure(report.failing().is_empty(), || "the fallbacks failed the test".into())?;
    ensure(
        report.unreached().is_empty() && report.unsettled().is_empty() && report.incomplete().is_empty(),
        || "executions with unreached faults, unsettled spans or spans the collector dropped".into(),
    )?;
    ensure(report.redundant().is_empty(), || "redundant executions".into())?;

    // every kind was targeted; the server-streaming call both as a stream and by its request message
    let targeted = |method: &str, stream: bool| {
        report.executions.iter().any(|e| {
            e.effective
                .iter()
                .any(|p| p.signature == format!("routeguide.RouteGuide/{method}") && p.index.opens_stream() == stream)
        })
    };
    ensure(targeted("GetFeature", false), || "GetFeature was never targeted".into())?;
    for method in ["ListFeatures", "RecordRoute", "RouteChat"] {
        ensure(targeted(method, true), || {
            format!("{method} was never targeted as a stream")
        })?;
        ensure(targeted(method, false), || {
            format!("{method} was never targeted by a message")
        })?;
    }

    let oracle = Oracle::new(options, spans, 10)
        .run(&test)
        .await
        .map_err(|e| format!("the oracle: {e}"))?;
    let sets = report.reference_sets();
    ensure(sets == oracle.reference, || {
        format!(
            "the search reached {} distinct fault sets, the Oracle {}",
            sets.len(),
            oracle.reference.len()
        )
    })?;
    ensure(report.executions.len() == oracle.reference.len(), || {
        "the search ran an execution more than once per fault set".into()
    })?;
    outln!(
        out,
        "oracle agrees: {} executions, {} distinct fault sets, the same as the search's {} executions",
        oracle.executions,
        oracle.reference.len(),
        report.executions.len()
    );
    Ok(())
}
