//! Test services on loopback: A (Front) → B (Middle) → C (Leaf), where B also calls C over HTTP (axum).
#![allow(dead_code)]

pub mod pb {
    tonic::include_proto!("deitest");
}

use axum::Router;
use axum::routing::{get, post};
use dei_instrumentation::testing::{TestTelemetry, attribute, telemetry};
use dei_instrumentation::{
    DeiClientLayer, DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, DeiServerLayer, DeiStreaming, root_context,
};
use dei_propagator::DeiContextExt;
use futures::{Stream, StreamExt};
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanKind, TraceContextExt, TraceId};
use opentelemetry_sdk::trace::SpanData;
use pb::Msg;
use rand::Rng;
use reqwest_middleware::ClientWithMiddleware;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The channel type behind every test client.
pub type DeiChannel = dei_instrumentation::DeiClientService<Channel>;

/// Encoded descriptor set of the test protos (written by build.rs).
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/deitest_descriptor.bin"));

/// The configuration every test service uses: streaming methods declared from the descriptor set, fault plans
/// applied (they are off by default).
pub fn config() -> DeiConfig {
    DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .methods_from_descriptor_set(DESCRIPTORS)
        .expect("descriptor set of the test protos")
        .build()
}

pub fn msg(text: &str) -> Msg {
    Msg {
        text: text.to_string(),
        ..Default::default()
    }
}

/// The payload of `Leaf.Get` requests that C answers in pairs (see [`together`]).
pub const TOGETHER: &str = "together";

/// The barrier that pairs `Leaf.Get` requests whose payload is [`TOGETHER`].
fn together() -> &'static tokio::sync::Barrier {
    static BARRIER: std::sync::OnceLock<tokio::sync::Barrier> = std::sync::OnceLock::new();
    BARRIER.get_or_init(|| tokio::sync::Barrier::new(2))
}

/// Notified each time `Leaf.Collect` starts serving a call (before it reads any message), so that a test can
/// send a stream's first message only once the call is under way, without sleeping.
pub fn collect_started() -> &'static tokio::sync::Notify {
    static STARTED: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    STARTED.get_or_init(tokio::sync::Notify::new)
}

/// A random delay of 0–3 ms, to shuffle the schedule between runs.
pub async fn jitter() {
    let micros = rand::rng().random_range(0..3000);
    tokio::time::sleep(Duration::from_micros(micros)).await;
}

pub async fn channel(addr: SocketAddr, config: &DeiConfig) -> DeiChannel {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()))
        .service(channel)
}

pub fn http_client(config: &DeiConfig) -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build()
}

async fn serve_grpc<S>(svc: S, config: &DeiConfig) -> SocketAddr
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(svc);
    tokio::spawn(async move {
        router
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)))
            .await
    });
    addr
}

/// The index of the request being served, as seen by the handler (`1` for a root).
fn served_index() -> String {
    Context::current()
        .dei_scope()
        .map(|s| s.prefix().encode())
        .unwrap_or_else(|| "none".into())
}

// ---------- C: Leaf (gRPC) and its HTTP side (axum) ----------

#[derive(Clone)]
pub struct Leaf {
    /// Base URL of C's own HTTP side, called once per stream message in the message's scope.
    http_base: String,
    http: ClientWithMiddleware,
}

type MsgStream = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

impl Leaf {
    async fn per_message_call(&self, text: &str) -> Result<String, Status> {
        let response = self
            .http
            .post(format!("{}/echo", self.http_base))
            .body(text.to_string())
            .send()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        response.text().await.map_err(|e| Status::internal(e.to_string()))
    }
}

#[tonic::async_trait]
impl pb::leaf_server::Leaf for Leaf {
    async fn get(&self, request: Request<Msg>) -> Result<Response<Msg>, Status> {
        jitter().await;
        let text = request.into_inner().text;
        if text == TOGETHER {
            // Answered only once a second such request arrived: the two are in flight together, however the
            // caller's task is scheduled.
            together().wait().await;
        }
        Ok(Response::new(Msg {
            text: format!("leaf:{text}@{}", served_index()),
            ..Default::default()
        }))
    }

    async fn collect(&self, request: Request<tonic::Streaming<Msg>>) -> Result<Response<Msg>, Status> {
        collect_started().notify_one();
        let mut stream = DeiStreaming::new(request);
        let mut replies = Vec::new();
        while let Some(m) = stream.message().await? {
            let echoed = m.in_scope(self.per_message_call(&m.message.text)).await?;
            replies.push(format!("{}:{echoed}", m.k));
        }
        Ok(Response::new(msg(&replies.join(" "))))
    }

    type WatchStream = MsgStream;

    async fn watch(&self, request: Request<Msg>) -> Result<Response<MsgStream>, Status> {
        let text = request.into_inner().text;
        let index = served_index();
        let out = futures::stream::iter((1..=3).map(move |i| Ok(msg(&format!("{text}{i}@{index}")))));
        Ok(Response::new(Box::pin(out)))
    }

    type ChatStream = MsgStream;

    async fn chat(&self, request: Request<tonic::Streaming<Msg>>) -> Result<Response<MsgStream>, Status> {
        let stream = DeiStreaming::new(request);
        let leaf = self.clone();
        let out = stream.then(move |m| {
            let leaf = leaf.clone();
            async move {
                let m = m?;
                let echoed = m.in_scope(leaf.per_message_call(&m.message.text)).await?;
                Ok(msg(&format!("{}:{echoed}", m.k)))
            }
        });
        Ok(Response::new(Box::pin(out)))
    }
}

/// C's HTTP side.
pub fn leaf_http(config: &DeiConfig) -> Router {
    Router::new()
        .route(
            "/items/{id}",
            get(|axum::extract::Path(id): axum::extract::Path<String>| async move {
                jitter().await;
                format!("item:{id}@{}", served_index())
            }),
        )
        .route(
            "/echo",
            post(|body: String| async move { format!("{body}@{}", served_index()) }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()))
}

pub async fn serve_http(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

// ---------- B: Middle ----------

#[derive(Clone)]
pub struct Middle {
    leaf: pb::leaf_client::LeafClient<DeiChannel>,
    http: ClientWithMiddleware,
    leaf_http: String,
}

fn outcome<T>(name: &str, r: Result<T, Status>) -> String {
    match r {
        Ok(_) => format!("{name}:ok"),
        Err(s) => format!("{name}:{:?}", s.code()),
    }
}

#[tonic::async_trait]
impl pb::middle_server::Middle for Middle {
    async fn work(&self, request: Request<Msg>) -> Result<Response<Msg>, Status> {
        let text = request.into_inner().text;
        let mut leaf = self.leaf.clone();
        let mut outcomes = Vec::new();
        // Fig. 1: the same RPC with the same payload from two call sites.
        let first = leaf.get(msg("same")).await;
        outcomes.push(outcome("site1", first));
        let second = leaf.get(msg("same")).await;
        outcomes.push(outcome("site2", second));
        // Fig. 2: the same call site in a loop.
        for i in 0..3 {
            let r = leaf.get(msg("loop")).await;
            outcomes.push(outcome(&format!("loop{i}"), r));
        }
        // Concurrent fan-out from one call site, told apart by payload.
        let fan = futures::future::join_all(["a", "b", "c"].map(|p| {
            let mut leaf = leaf.clone();
            async move {
                jitter().await;
                leaf.get(msg(p)).await
            }
        }))
        .await;
        for (p, r) in ["a", "b", "c"].iter().zip(fan) {
            outcomes.push(outcome(&format!("fan-{p}"), r));
        }
        // Spawned tasks that keep the request's context.
        let handles = ["s1", "s2"].map(|p| {
            let mut leaf = leaf.clone();
            dei_propagator::spawn(async move {
                jitter().await;
                leaf.get(msg(p)).await
            })
        });
        for (p, h) in ["s1", "s2"].iter().zip(handles) {
            let r = h.await.map_err(|e| Status::internal(e.to_string()))?;
            outcomes.push(outcome(&format!("spawn-{p}"), r));
        }
        // C over HTTP.
        let http = self.http.get(format!("{}/items/{text}", self.leaf_http)).send().await;
        outcomes.push(match http {
            Ok(r) if r.status().is_success() => "http:ok".to_string(),
            Ok(r) => format!("http:{}", r.status().as_u16()),
            Err(e) => format!("http:error:{}", e.is_middleware()),
        });
        Ok(Response::new(msg(&outcomes.join(" "))))
    }
}

// ---------- A: Front ----------

#[derive(Clone)]
pub struct Front {
    middle: pb::middle_client::MiddleClient<DeiChannel>,
}

#[tonic::async_trait]
impl pb::front_server::Front for Front {
    async fn run(&self, request: Request<Msg>) -> Result<Response<Msg>, Status> {
        let text = request.into_inner().text;
        let (mut m1, mut m2) = (self.middle.clone(), self.middle.clone());
        let (p, q) = futures::join!(
            async {
                jitter().await;
                m1.work(msg(&format!("{text}-p"))).await
            },
            async {
                jitter().await;
                m2.work(msg(&format!("{text}-q"))).await
            }
        );
        let p = p?.into_inner().text;
        let q = q?.into_inner().text;
        Ok(Response::new(msg(&format!("{p} | {q}"))))
    }
}

/// The three services, started on loopback.
pub struct System {
    pub config: DeiConfig,
    pub front: SocketAddr,
    pub middle: SocketAddr,
    pub leaf: SocketAddr,
    pub leaf_http: SocketAddr,
}

impl System {
    pub async fn start() -> System {
        System::start_with(config()).await
    }

    /// The three services with this configuration.
    pub async fn start_with(config: DeiConfig) -> System {
        telemetry();
        let leaf_http = serve_http(leaf_http(&config)).await;
        let http_base = format!("http://{leaf_http}");
        let leaf = serve_grpc(
            pb::leaf_server::LeafServer::new(Leaf {
                http_base: http_base.clone(),
                http: http_client(&config),
            }),
            &config,
        )
        .await;
        let middle = serve_grpc(
            pb::middle_server::MiddleServer::new(Middle {
                leaf: pb::leaf_client::LeafClient::new(channel(leaf, &config).await),
                http: http_client(&config),
                leaf_http: http_base,
            }),
            &config,
        )
        .await;
        let front = serve_grpc(
            pb::front_server::FrontServer::new(Front {
                middle: pb::middle_client::MiddleClient::new(channel(middle, &config).await),
            }),
            &config,
        )
        .await;
        System {
            config,
            front,
            middle,
            leaf,
            leaf_http,
        }
    }

    pub async fn front_client(&self) -> pb::front_client::FrontClient<DeiChannel> {
        pb::front_client::FrontClient::new(channel(self.front, &self.config).await)
    }

    pub async fn leaf_client(&self) -> pb::leaf_client::LeafClient<DeiChannel> {
        pb::leaf_client::LeafClient::new(channel(self.leaf, &self.config).await)
    }
}

/// Runs `f` as a functional test's entry point: in a root scope (plus `extra`, e.g. a fault plan), under a
/// root span whose trace id is returned with the result.
pub async fn in_root<F, T>(config: &DeiConfig, extra: impl FnOnce(Context) -> Context, f: F) -> (T, TraceId)
where
    F: std::future::Future<Output = T>,
{
    let cx = extra(root_context(config));
    // The span is created inside the context, so that its own context carries the scope.
    let span = {
        let _g = cx.clone().attach();
        tracing::info_span!("test.run")
    };
    let trace_id = span.context().span().span_context().trace_id();
    let out = f.instrument(span).with_context(cx).await;
    (out, trace_id)
}

/// Sends `request` (built by an [`http_client`]) in a root scope, as [`in_root`] does, and reads its reply as
/// text; the trace id with it.
pub async fn text_in_root(
    config: &DeiConfig,
    request: reqwest_middleware::RequestBuilder,
) -> (reqwest_middleware::Result<String>, TraceId) {
    in_root(config, |cx| cx, async {
        request
            .send()
            .await?
            .text()
            .await
            .map_err(reqwest_middleware::Error::from)
    })
    .await
}

/// The spans of a trace; waits until `min` spans arrived (spans end when their response bodies finish).
pub async fn spans_of(trace_id: TraceId, min: usize) -> Vec<SpanData> {
    let t: &TestTelemetry = telemetry();
    for _ in 0..200 {
        let spans = t.trace(trace_id);
        if spans.len() >= min {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.trace(trace_id)
}

pub fn attr(span: &SpanData, key: &str) -> Option<String> {
    attribute(span, key)
}

pub fn is_client(span: &SpanData) -> bool {
    span.span_kind == SpanKind::Client
}

pub fn is_server(span: &SpanData) -> bool {
    span.span_kind == SpanKind::Server
}
