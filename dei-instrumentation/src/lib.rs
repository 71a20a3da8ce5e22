//! Distributed execution indexes for services that already use OpenTelemetry: add a few layers, and every RPC
//! carries its index.
//!
//! | integration | feature | where | what it does |
//! |---|---|---|---|
//! | `DeiClientLayer` | `tonic` | over a tonic `Channel` | signature, payload digest, call stack → next index; injects it through the global propagator (the default: `dei`, `traceparent`; `baggage` for other entries, and a `dei` copy there only with [`Carriers::HEADER_AND_BAGGAGE`](dei_propagator::Carriers::HEADER_AND_BAGGAGE)); faults. `DeiClientLayer::new(config).server(endpoint.uri())` names the server on its spans (`server.address`, `server.port`) |
//! | `DeiServerLayer` | `tonic` | `tonic::transport::Server::builder().layer(..)` | extracts; serves the request in its own scope |
//! | `DeiHttpServerLayer` | `axum` | axum `Router::layer` | the same for HTTP (signature from the matched route) |
//! | `DeiReqwestMiddleware` | `reqwest` | reqwest-middleware | the client side for HTTP calls |
//! | `grpc::stream` | `tonic` | streaming calls | preliminary and final indexes (paper §4.2) |
//!
//! (Named without links: each exists only in a build with its feature. The [`grpc`] and [`http`] modules
//! describe them.)
//!
//! Each call's index is recorded on its client and server spans as `dei.*` attributes ([`span`]) through
//! tracing-opentelemetry, so they reach whatever exporter the service uses. Install the propagator once
//! ([`dei_propagator::install_global_propagator`]): the default global propagator is a no-op.
//!
//! The layers take the next index from the [`dei_propagator::RequestScope`] in the current
//! OpenTelemetry `Context`. Server layers open one per request. Outside any scope a call is its own root
//! (one element, count 1): a functional test opens a root scope with [`root_context`] so that its calls are
//! counted together. Tasks must carry the context: use [`dei_propagator::spawn`] rather than `tokio::spawn`.
//!
//! Call stacks need line tables: build with `debug = "line-tables-only"` ([`stack`] says what happens
//! without).
//!
//! On a trace that is not sampled the layers still compute and propagate the index, but record nothing
//! ([`Unsampled::Lean`], the default), or do nothing at all ([`Unsampled::Off`]).
//!
//! # Features
//! `tonic`, `axum` and `reqwest` (all on by default) each bring one integration; a service that uses one
//! turns the others off (`default-features = false, features = ["tonic"]`) and does not compile them.
//! `testing` adds the `testing` module (test telemetry with an in-memory exporter).
//!
//! # Example
//! An axum service called through reqwest, inside a root scope with a fault plan:
//! ```
//! use axum::{Router, routing::get, extract::Request};
//! use dei_instrumentation::{root_context, DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, Faults};
//! use dei_propagator::{DeiContextExt, Fault, FaultPlan};
//! use opentelemetry::context::FutureExt;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! dei_propagator::install_global_propagator();
//! // Fault plans are off unless enabled: this example is a test, so it enables them.
//! let config = DeiConfig::builder().faults(Faults::Accept).build();
//! // A service that answers with the index it was called with.
//! let app = Router::new()
//!     .route("/users/{id}", get(|| async {
//!         opentelemetry::Context::current().dei_scope().map(|s| s.prefix().encode()).unwrap_or_default()
//!     }))
//!     .layer(DeiHttpServerLayer::new(config.clone()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}/users/7", listener.local_addr()?);
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(DeiReqwestMiddleware::new(config.clone()))
//!     .build();
//! // Run the same call twice from one call site (the call stack is part of the index): first without
//! // faults, then with a fault planned on the index the first run observed.
//! let mut plan: Option<FaultPlan> = None;
//! for step in 0..2 {
//!     let cx = match plan.take() {
//!         Some(p) => root_context(&config).with_fault_plan(p),
//!         None => root_context(&config),
//!     };
//!     let response = client.get(&url).send().with_context(cx).await?;
//!     if step == 0 {
//!         let served = response.text().await?; // the index the service was called with
//!         assert!(served.starts_with("1.") && served.ends_with('1'), "{served}");
//!         let index = dei_propagator::Index::decode(&served)?;
//!         plan = Some(FaultPlan::new(vec![(index, Fault::Http(503))]));
//!     } else {
//!         // The planned call fails with that fault, without being sent.
//!         assert_eq!(response.status(), 503);
//!     }
//! }
//! # Ok(()) }
//! ```
// Lint levels: the crate's `[lints]` table in Cargo.toml. `unsafe` is allowed in one audited module only,
// `stack::frame_pointer` (the frame-pointer walk of the thread's own stack); everywhere else it is denied, and
// no public API is `unsafe`.

// The shared core (carriers, scopes, spans, bodies) serves every integration; a build with some of them left
// out leaves parts of it unused. The full build (the default features) keeps every dead-code check.
#![cfg_attr(
    not(all(feature = "tonic", feature = "axum", feature = "reqwest")),
    allow(dead_code, unused_imports, unused_mut)
)]

#[cfg(any(feature = "tonic", feature = "axum"))]
mod body;
mod caller;
mod carrier;
pub mod config;
pub mod fault;
pub mod grpc;
pub mod http;
#[cfg(any(feature = "tonic", feature = "axum"))]
mod incoming;
mod interned;
#[cfg(any(feature = "tonic", feature = "reqwest"))]
mod outgoing;
pub mod span;
pub mod stack;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(any(feature = "tonic", feature = "axum"))]
pub use body::{DeiResponseBody, InboundBody};
pub use caller::calls_without_scope_total;
pub use config::{ConfigError, DeiConfig, DeiConfigBuilder, Faults, Incoming, StackFrames, Unsampled};
pub use fault::{InjectedConnectionError, invalid_faults_not_applied_total};
#[cfg(feature = "tonic")]
pub use grpc::client::{DeiClientLayer, DeiClientService};
pub use grpc::methods::MethodKind;
#[cfg(feature = "tonic")]
pub use grpc::server::{DeiServerLayer, DeiServerService};
#[cfg(feature = "tonic")]
pub use grpc::stream::{DeiStreaming, StreamMessage, StreamSender};
#[cfg(feature = "reqwest")]
pub use http::client::{DeiReqwestMiddleware, InjectedTimeout, TargetService};
#[cfg(feature = "axum")]
pub use http::server::{DeiHttpServerLayer, DeiHttpServerService};
#[cfg(any(feature = "tonic", feature = "axum"))]
pub use incoming::{IncomingCall, ServerFuture};
pub use stack::{CallSiteExt, StackConfig, StackMode, StackWalker};

use dei_propagator::{DeiContextExt, RequestScope};
use opentelemetry::Context;

/// The current context with a fresh root scope under the configuration's instantiation: the entry point of
/// a functional test. Run the test's calls inside it (`.with_context(root_context(&config))`).
pub fn root_context(config: &DeiConfig) -> Context {
    Context::current().with_dei_scope(RequestScope::root(config.instantiation().clone()))
}

/// The guide's snippets (GUIDE.md), compiled as doc tests (they use every integration); those that cannot stand alone are marked `ignore`
/// and say why.
#[cfg(all(doctest, feature = "tonic", feature = "axum", feature = "reqwest"))]
#[doc = include_str!("../GUIDE.md")]
struct GuideDoctests;
