//! Every documented way of running part of a request in another task or thread keeps the request's scope, on a
//! multi-thread runtime; a call that loses it while its thread serves a request is counted.
//!
//! A gRPC service (the Middle service of the test protos) calls C's `Get` in the way the request's text names;
//! C answers with the index it was served under. A call that kept the scope reaches C with the Middle request's
//! index plus one element; a call that lost it reaches C as a new root (one element).

mod common;

use common::pb::Msg;
use common::*;
use dei_instrumentation::{DeiConfig, DeiServerLayer};
use dei_propagator::{DeiContextExt, Index};
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use std::net::SocketAddr;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tracing::Instrument;

#[derive(Clone)]
struct Spawner {
    leaf: pb::leaf_client::LeafClient<DeiChannel>,
}

async fn get(mut leaf: pb::leaf_client::LeafClient<DeiChannel>, text: &str) -> Result<String, Status> {
    Ok(leaf.get(msg(text)).await?.into_inner().text)
}

#[tonic::async_trait]
impl pb::middle_server::Middle for Spawner {
    async fn work(&self, request: Request<Msg>) -> Result<Response<Msg>, Status> {
        let how = request.into_inner().text;
        let served = Context::current()
            .dei_scope()
            .map(|s| s.prefix().encode())
            .unwrap_or_default();
        let leaf = self.leaf.clone();
        let joined = |r: Result<Result<String, Status>, tokio::task::JoinError>| {
            r.map_err(|e| Status::internal(e.to_string()))?
        };
        let reply = match how.as_str() {
            "inline" => get(leaf, &how).await,
            "dei_propagator::spawn" => joined(dei_propagator::spawn(async move { get(leaf, "s").await }).await),
            "dei_propagator::spawn_blocking" => {
                let rt = tokio::runtime::Handle::current();
                joined(dei_propagator::spawn_blocking(move || rt.block_on(get(leaf, "b"))).await)
            }
            "dei_propagator::spawn_thread" => {
                let rt = tokio::runtime::Handle::current();
                dei_propagator::spawn_thread(move || rt.block_on(get(leaf, "t")))
                    .join()
                    .map_err(|_| Status::internal("the thread panicked"))?
            }
            "in_current_span" => joined(tokio::spawn(async move { get(leaf, "c").await }.in_current_span()).await),
            "instrument" => {
                let span = tracing::info_span!("handler.part");
                joined(tokio::spawn(async move { get(leaf, "i").await }.instrument(span)).await)
            }
            "tokio::spawn" => joined(tokio::spawn(async move { get(leaf, "p").await }).await),
            "detached" => {
                // A Context without the scope attached by hand, in a span of a trace of its own: the scope is lost
                // while this thread serves the request.
                get(leaf, "d")
                    .with_context(Context::new())
                    .instrument(tracing::info_span!(parent: None, "detached"))
                    .await
            }
            other => return Err(Status::invalid_argument(format!("unknown way: {other}"))),
        }?;
        Ok(Response::new(msg(&format!("{served}|{reply}"))))
    }
}

async fn start() -> (DeiConfig, SocketAddr) {
    let sys = System::start().await;
    let config = sys.config.clone();
    let leaf = sys.leaf_client().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(pb::middle_server::MiddleServer::new(Spawner { leaf }));
    tokio::spawn(router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    (config, addr)
}

/// The index the Spawner served, and the one C served the Spawner's call under.
async fn indexes(config: &DeiConfig, addr: SocketAddr, how: &str) -> (Index, Index) {
    let mut client = pb::middle_client::MiddleClient::new(channel(addr, config).await);
    let how = how.to_string();
    let (reply, _) = in_root(config, |cx| cx, async move { client.work(msg(&how)).await }).await;
    let text = reply.expect("Middle.Work").into_inner().text;
    let (served, leaf) = text.split_once('|').expect("served|reply");
    let leaf_index = leaf.rsplit_once('@').expect("leaf:text@index").1;
    (
        Index::decode(served).expect("the Spawner's index"),
        Index::decode(leaf_index).expect("C's index"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_documented_way_of_spawning_keeps_the_request_scope() {
    let (config, addr) = start().await;
    for how in [
        "inline",
        "dei_propagator::spawn",
        "dei_propagator::spawn_blocking",
        "dei_propagator::spawn_thread",
        "in_current_span",
        "instrument",
    ] {
        let (served, leaf) = indexes(&config, addr, how).await;
        assert_eq!(served.depth(), 1, "{how}: the test's call to the Spawner");
        assert_eq!(leaf.depth(), 2, "{how}: C's index extends the Spawner's ({leaf})");
        assert!(leaf.starts_with(&served), "{how}: {leaf} under {served}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_tokio_spawn_starts_a_new_root() {
    // What the docs warn about: neither the Context nor the tracing span goes along.
    let (config, addr) = start().await;
    let (served, leaf) = indexes(&config, addr, "tokio::spawn").await;
    assert_eq!(served.depth(), 1);
    assert_eq!(leaf.depth(), 1, "a new root: {leaf}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_without_scope_while_serving_is_counted() {
    let (config, addr) = start().await;
    let before = dei_instrumentation::calls_without_scope_total();
    let (_, leaf) = indexes(&config, addr, "detached").await;
    assert_eq!(leaf.depth(), 1, "the call lost its scope: {leaf}");
    let after = dei_instrumentation::calls_without_scope_total();
    assert!(after > before, "counted: {before} -> {after}");
    // Calls that keep their scope are not counted (this test binary's other tests may add to the count
    // concurrently only through the `detached` way, which no other test uses).
    let before = dei_instrumentation::calls_without_scope_total();
    let (_, leaf) = indexes(&config, addr, "in_current_span").await;
    assert_eq!(leaf.depth(), 2);
    assert_eq!(dei_instrumentation::calls_without_scope_total(), before);
}
