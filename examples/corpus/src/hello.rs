//! The paper's §3 programs (Figs. 1-5) and the §5.2 Hello/World service, as real services on loopback.
//!
//! Fig. 1 is HTTP (axum servers, reqwest with the DEI middleware); the others are gRPC (tonic).

use crate::pb::helloworld::hello_client::HelloClient;
use crate::pb::helloworld::hello_server::{Hello, HelloServer};
use crate::pb::helloworld::service_a_client::ServiceAClient;
use crate::pb::helloworld::service_a_server::{ServiceA, ServiceAServer};
use crate::pb::helloworld::service_b_client::ServiceBClient;
use crate::pb::helloworld::service_b_server::{ServiceB, ServiceBServer};
use crate::pb::helloworld::service_c_client::ServiceCClient;
use crate::pb::helloworld::service_c_server::{ServiceC, ServiceCServer};
use crate::pb::helloworld::world_client::WorldClient;
use crate::pb::helloworld::world_server::{World, WorldServer};
use crate::pb::helloworld::{FanOut, Served, Strings, Text};
use crate::{Channel, bind, channel, serve};
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, DeiStreaming, MethodKind};
use dei_propagator::{DeiContextExt, RequestScope};
use opentelemetry::context::FutureExt as _;
use std::pin::Pin;
use tonic::{Request, Response, Status};

/// The streaming method of Fig. 5, declared to the layers.
pub const ECHO_STREAM: &str = "/helloworld.ServiceB/EchoStream";

/// A configuration that knows Fig. 5's streaming method and applies fault plans (off by default).
pub fn config(instantiation: dei_propagator::Instantiation) -> DeiConfig {
    DeiConfig::builder()
        .instantiation(instantiation)
        .faults(dei_instrumentation::Faults::Accept)
        .streaming_method(ECHO_STREAM, MethodKind::Bidi)
        .build()
}

/// Which of A's implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Loops: break on failure, then one fallback call.
    Fig2,
    /// Async fan-out.
    Fig3,
    /// Path: loop, then a retry loop; B calls C.
    Fig4,
    /// Streaming.
    Fig5,
    /// A generated wide example (the benchmark's): one call per string, sequentially, each with a fallback.
    Wide,
}

struct ASvc {
    figure: Figure,
    b: ServiceBClient<Channel>,
}

#[tonic::async_trait]
impl ServiceA for ASvc {
    async fn hello_world(&self, request: Request<Strings>) -> Result<Response<Text>, Status> {
        let ss = request.into_inner().items;
        let text = match self.figure {
            Figure::Fig2 => {
                let mut rs = Vec::new();
                let mut failure = false;
                for s in &ss {
                    match self.b.clone().echo(Text { text: s.clone() }).await {
                        Ok(r) => rs.push(r.into_inner().text),
                        Err(_) => {
                            failure = true;
                            break;
                        }
                    }
                }
                if failure {
                    self.b
                        .clone()
                        .echo(Text {
                            text: "Hello World".into(),
                        })
                        .await?
                        .into_inner()
                        .text
                } else {
                    rs.join(" ")
                }
            }
            Figure::Fig3 => {
                let mut tasks = Vec::new();
                for s in &ss {
                    let mut b = self.b.clone();
                    let s = s.clone();
                    tasks.push(dei_propagator::spawn(async move { b.echo(Text { text: s }).await }));
                }
                let mut rs = Vec::new();
                for t in tasks {
                    rs.push(
                        t.await
                            .ok()
                            .and_then(|r| r.ok())
                            .map(|r| r.into_inner().text)
                            .unwrap_or_default(),
                    );
                }
                rs.join(" ")
            }
            Figure::Fig4 => {
                let mut rs: Vec<String> = Vec::new();
                let mut failures = Vec::new();
                for s in &ss {
                    match self.b.clone().echo(Text { text: s.clone() }).await {
                        Ok(r) => rs.push(r.into_inner().text),
                        Err(_) => {
                            failures.push((rs.len(), s.clone()));
                            rs.push(String::new());
                        }
                    }
                }
                for (i, s) in failures {
                    if let Ok(r) = self.b.clone().echo(Text { text: s }).await {
                        rs[i] = r.into_inner().text;
                    }
                }
                rs.join(" ")
            }
            Figure::Wide => {
                let mut rs = Vec::with_capacity(ss.len());
                for s in &ss {
                    let r = self.b.clone().echo(Text { text: s.clone() }).await;
                    rs.push(r.map(|r| r.into_inner().text).unwrap_or_default());
                }
                rs.join(" ")
            }
            Figure::Fig5 => {
                let config = config(
                    RequestScope::current()
                        .map(|s| s.instantiation().clone())
                        .unwrap_or_default(),
                );
                let (tx, request) = dei_instrumentation::grpc::stream::channel::<Text>(&config, 16);
                let mut b = self.b.clone();
                let call = dei_propagator::spawn(async move { b.echo_stream(request).await });
                let mut sends = Vec::new();
                for s in &ss {
                    let tx = tx.clone();
                    let s = s.clone();
                    sends.push(dei_propagator::spawn(async move { tx.send(Text { text: s }).await }));
                }
                for s in sends {
                    let _ = s.await;
                }
                drop(tx);
                let mut responses = call.await.map_err(|e| Status::internal(e.to_string()))??.into_inner();
                let mut rs = Vec::new();
                while let Some(r) = responses.message().await? {
                    rs.push(r.text);
                }
                rs.sort();
                rs.join(" ")
            }
        };
        Ok(Response::new(Text { text }))
    }
}

struct BSvc {
    c: Option<ServiceCClient<Channel>>,
}

type TextStream = Pin<Box<dyn futures::Stream<Item = Result<Text, Status>> + Send>>;

#[tonic::async_trait]
impl ServiceB for BSvc {
    async fn echo(&self, request: Request<Text>) -> Result<Response<Text>, Status> {
        let s = request.into_inner().text;
        let Some(c) = &self.c else {
            return Ok(Response::new(Text { text: s }));
        };
        // Fig. 4: decorate through C, falling back to the argument
        let text = match c.clone().echo(Text { text: s.clone() }).await {
            Ok(r) => r.into_inner().text,
            Err(_) => s,
        };
        Ok(Response::new(Text { text }))
    }

    type EchoStreamStream = TextStream;

    async fn echo_stream(&self, request: Request<tonic::Streaming<Text>>) -> Result<Response<TextStream>, Status> {
        let mut incoming = DeiStreaming::new(request);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok(Some(m)) = incoming.message().await {
                let text = m.message.text.clone();
                let _ = tx.send(Ok(Text { text })).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

struct CSvc;

#[tonic::async_trait]
impl ServiceC for CSvc {
    async fn echo(&self, request: Request<Text>) -> Result<Response<Text>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

/// Starts A (and B, and C for Fig. 4); returns the client the test calls A through.
pub async fn start(figure: Figure, config: &DeiConfig) -> ServiceAClient<Channel> {
    let (l_b, a_b) = bind().await;
    let (l_a, a_a) = bind().await;
    let c = if figure == Figure::Fig4 {
        let (l_c, a_c) = bind().await;
        serve(l_c, config, ServiceCServer::new(CSvc));
        Some(ServiceCClient::new(channel(a_c, config)))
    } else {
        None
    };
    serve(l_b, config, ServiceBServer::new(BSvc { c }));
    serve(
        l_a,
        config,
        ServiceAServer::new(ASvc {
            figure,
            b: ServiceBClient::new(channel(a_b, config)),
        }),
    );
    ServiceAClient::new(channel(a_a, config))
}

/// Calls A with `["Hello", "World"]` under the run's context.
pub async fn call_a(a: &ServiceAClient<Channel>, cx: opentelemetry::Context) -> Result<String, Status> {
    call_a_with(a, cx, vec!["Hello".to_string(), "World".to_string()]).await
}

/// Calls A with these strings under the run's context.
pub async fn call_a_with(
    a: &ServiceAClient<Channel>,
    cx: opentelemetry::Context,
    items: Vec<String>,
) -> Result<String, Status> {
    let mut a = a.clone();
    async move { a.hello_world(Strings { items }).await }
        .with_context(cx)
        .await
        .map(|r| r.into_inner().text)
}

// ---- Fig. 1 over HTTP ----

/// Fig. 1's service A over HTTP: `GET /helloworld` calls B's `GET /echo?s=..` twice through a helper, with a
/// default on failure. Returns the URL of A's route.
pub async fn start_fig1_http(config: &DeiConfig) -> (String, reqwest_middleware::ClientWithMiddleware) {
    use axum::{Router, extract::Query, routing::get};
    use std::collections::HashMap;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build();
    let (l_b, a_b) = bind().await;
    let b = Router::new()
        .route(
            "/echo",
            get(|Query(q): Query<HashMap<String, String>>| async move { q.get("s").cloned().unwrap_or_default() }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    tokio::spawn(async move { axum::serve(l_b, b).await });
    let b_url = format!("http://{a_b}/echo");
    let (l_a, a_a) = bind().await;
    let a_client = client.clone();
    let a = Router::new()
        .route(
            "/helloworld",
            get(move || {
                let client = a_client.clone();
                let b_url = b_url.clone();
                async move {
                    // the helper of Fig. 1 (line 8): one call site, reached from two lines
                    let echo = |s: &'static str| {
                        let client = client.clone();
                        let url = format!("{b_url}?s={s}");
                        async move {
                            match client.get(url).send().await {
                                Ok(r) if r.status().is_success() => r.text().await.unwrap_or_else(|_| s.to_string()),
                                _ => s.to_string(),
                            }
                        }
                    };
                    let hello = echo("Hello").await;
                    let world = echo("World").await;
                    format!("{hello} {world}")
                }
            }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    tokio::spawn(async move { axum::serve(l_a, a).await });
    (format!("http://{a_a}/helloworld"), client)
}

// ---- §5.2: Hello fans out to World ----

struct HelloSvc {
    world: WorldClient<Channel>,
}

#[tonic::async_trait]
impl Hello for HelloSvc {
    async fn run(&self, request: Request<FanOut>) -> Result<Response<Served>, Status> {
        let n = request.into_inner().n.min(1024);
        let mut tasks = Vec::with_capacity(n as usize);
        for i in 0..n {
            let mut world = self.world.clone();
            // one call site; the payload carries the creation order
            tasks.push(dei_propagator::spawn(async move {
                world.get(Text { text: i.to_string() }).await
            }));
        }
        let mut indexes = Vec::with_capacity(n as usize);
        for t in tasks {
            let served = t.await.map_err(|e| Status::internal(e.to_string()))??;
            indexes.push(served.into_inner().text);
        }
        Ok(Response::new(Served { indexes }))
    }
}

struct WorldSvc;

#[tonic::async_trait]
impl World for WorldSvc {
    async fn get(&self, _request: Request<Text>) -> Result<Response<Text>, Status> {
        // answer with the index this call was served under
        let index = opentelemetry::Context::current()
            .dei_scope()
            .map(|s| s.prefix().encode())
            .unwrap_or_default();
        Ok(Response::new(Text { text: index }))
    }
}

/// Starts Hello and World; Hello's runtime is the caller's (run it on a 2-worker runtime).
pub async fn start_hello_world(config: &DeiConfig) -> HelloClient<Channel> {
    let (l_w, a_w) = bind().await;
    let (l_h, a_h) = bind().await;
    serve(l_w, config, WorldServer::new(WorldSvc));
    serve(
        l_h,
        config,
        HelloServer::new(HelloSvc {
            world: WorldClient::new(channel(a_w, config)),
        }),
    );
    HelloClient::new(channel(a_h, config))
}

// ---- functional tests ----

/// The paper's fault model for the figures: one connection error per RPC, none on the test's request to A.
pub fn catalog() -> dei_sfit::FaultCatalog {
    dei_sfit::FaultCatalog {
        rules: Vec::new(),
        protocol_defaults: false,
    }
    .with_rule("helloworld.ServiceA/*", vec![])
    .with_rule("*", vec![dei_propagator::Fault::Connection])
}

/// The functional test of Figs. 2-5: call A with `["Hello", "World"]`; expect "Hello World", or — under
/// faults (conditional assertions) — what the figure's fallbacks allow.
pub fn fig_test(figure: Figure, a: ServiceAClient<Channel>) -> impl dei_sfit::FunctionalTest {
    let name = format!("{figure:?}").to_lowercase();
    dei_sfit::test_fn(name, move |run: dei_sfit::TestRun| {
        let a = a.clone();
        async move {
            let got = call_a(&a, run.context()).await;
            let injected = run.injected().await.map_err(|e| e.to_string())?;
            let n = injected.len();
            let ok_words = |t: &str| {
                let words: Vec<&str> = t.split(' ').collect();
                words.len() == 2 && ["Hello", ""].contains(&words[0]) && ["World", ""].contains(&words[1])
            };
            match (figure, got) {
                (_, Ok(t)) if t == "Hello World" => Ok(()),
                // Fig. 2: the fallback's answer is "Hello World" too; only failing it fails A
                (Figure::Fig2, Err(_)) if n >= 2 => Ok(()),
                // Figs. 3 and 4: a failed string is left empty
                (Figure::Fig3 | Figure::Fig4, Ok(t)) if n > 0 && ok_words(&t) => Ok(()),
                // Fig. 5: the messages that failed are missing
                (Figure::Fig5, Ok(t)) if n > 0 && ["Hello", "World", ""].contains(&t.as_str()) => Ok(()),
                (Figure::Wide, _) => Err("the wide example has its own test".to_string()),
                (_, other) => Err(format!("A answered {other:?} with {n} faults injected")),
            }
        }
    })
}

/// The functional test of Fig. 1 over HTTP: A always answers "Hello World" thanks to its fallbacks.
pub fn fig1_test(url: String, client: reqwest_middleware::ClientWithMiddleware) -> impl dei_sfit::FunctionalTest {
    dei_sfit::test_fn("fig1", move |run: dei_sfit::TestRun| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let got = async { client.get(url).send().await }.with_context(run.context()).await;
            let text = match got {
                Ok(r) => r.text().await.map_err(|e| e.to_string())?,
                Err(e) => return Err(format!("A failed: {e}")),
            };
            if text == "Hello World" {
                Ok(())
            } else {
                Err(format!("A answered {text:?}"))
            }
        }
    })
}
