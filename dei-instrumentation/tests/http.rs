//! HTTP specifics: the payload digest cap, bodies passed on untouched, raw payloads only on request, and
//! concurrent identical calls flagged ambiguous.

mod common;

use axum::Router;
use axum::routing::post;
use common::*;
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer};
use dei_propagator::PayloadDigest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_pass_untouched_and_only_the_cap_is_digested() {
    dei_instrumentation::testing::telemetry();
    let cap = 100;
    let config = DeiConfig::builder()
        .payload_digest_cap(cap)
        .record_payloads(true)
        .build();
    let app = Router::new()
        .route(
            "/upload/{name}",
            post(|body: axum::body::Bytes| async move { format!("{}", body.len()) }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let addr = serve_http(app).await;
    let client = http_client(&config);
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let url = format!("http://{addr}/upload/a?x=1");
    let (reply, trace) = text_in_root(&config, client.post(&url).body(body.clone())).await;
    assert_eq!(reply.expect("upload"), "10000", "the handler got the whole body");
    let spans = spans_of(trace, 3).await;
    let mut expected = b"x=1?".to_vec();
    expected.extend_from_slice(&body[..cap]);
    let digest = PayloadDigest::of(&expected).to_hex();
    let client_span = spans.iter().find(|s| is_client(s)).expect("client span");
    let server_span = spans.iter().find(|s| is_server(s)).expect("server span");
    assert_eq!(attr(client_span, "dei.payload.digest"), Some(digest.clone()));
    assert_eq!(attr(server_span, "dei.payload.digest"), Some(digest));
    assert_eq!(
        attr(server_span, "dei.signature").as_deref(),
        Some("POST /upload/{name}")
    );
    assert!(
        attr(client_span, "dei.payload").is_some(),
        "raw payloads recorded when turned on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_are_flagged_ambiguous() {
    let sys = System::start().await;
    let leaf = sys.leaf_client().await;
    let (_, trace) = in_root(&sys.config, |cx| cx, async {
        // Same signature, payload and call site, in flight together (C answers them as a pair): scheduling may
        // swap them between runs.
        futures::future::join_all((0..2).map(|_| {
            let mut leaf = leaf.clone();
            async move { leaf.get(msg(TOGETHER)).await }
        }))
        .await;
        // Alone, a call is not ambiguous.
        let mut leaf = leaf.clone();
        leaf.get(msg("dup")).await
    })
    .await;
    let spans = spans_of(trace, 7).await;
    let mut flags: Vec<(String, String)> = spans
        .iter()
        .filter(|s| is_client(s))
        .map(|s| {
            (
                attr(s, "dei.count").unwrap_or_default(),
                attr(s, "dei.ambiguous").unwrap_or_default(),
            )
        })
        .collect();
    flags.sort();
    let expected: Vec<(String, String)> = [("1", "false"), ("1", "true"), ("2", "true")]
        .map(|(c, a)| (c.to_string(), a.to_string()))
        .to_vec();
    assert_eq!(flags, expected);
}
