//! The axum server layer against a real reqwest client on loopback: a payload digest the handler left
//! incomplete is marked, and requests that matched no route (or carry an unknown method) get low-cardinality
//! span names and signatures.

mod common;

use axum::Router;
use axum::routing::{any, get, post};
use common::*;
use dei_instrumentation::DeiHttpServerLayer;
use dei_instrumentation::http::server::incomplete_payload_digests_total;
use dei_propagator::PayloadDigest;
use http_body_util::BodyExt as _;
use opentelemetry_sdk::trace::SpanData;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_handler_does_not_read_to_its_end_is_marked_incomplete() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let app = Router::new()
        // ignores the body
        .route("/ignore", post(|| async { "ignored" }))
        // reads data frames until the body says it has no more, without asking for its end
        .route(
            "/frames",
            post(|body: axum::body::Body| async move {
                let mut body = body;
                let mut read = 0;
                while !http_body::Body::is_end_stream(&body) {
                    match body.frame().await {
                        Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                        _ => break,
                    }
                }
                read.to_string()
            }),
        )
        // reads the whole body
        .route(
            "/whole",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let addr = serve_http(app).await;
    let client = http_client(&config);
    let body: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let mut expected = b"?".to_vec();
    expected.extend_from_slice(&body);
    let digest = PayloadDigest::of(&expected).to_hex();
    for (route, complete) in [("ignore", false), ("frames", true), ("whole", true)] {
        let before = incomplete_payload_digests_total();
        let (reply, trace) = text_in_root(
            &config,
            client.post(format!("http://{addr}/{route}")).body(body.clone()),
        )
        .await;
        reply.expect("served");
        let spans = spans_of(trace, 3).await;
        let client_span = spans.iter().find(|s| is_client(s)).expect("client span");
        let server_span = spans.iter().find(|s| is_server(s)).expect("server span");
        assert_eq!(attr(client_span, "dei.payload.digest"), Some(digest.clone()), "{route}");
        if complete {
            assert_eq!(attr(server_span, "dei.payload.digest"), Some(digest.clone()), "{route}");
            assert_eq!(attr(server_span, "dei.payload.digest.incomplete"), None, "{route}");
        } else {
            assert_eq!(attr(server_span, "dei.payload.digest"), None, "{route}");
            assert_eq!(
                attr(server_span, "dei.payload.digest.incomplete").as_deref(),
                Some("true"),
                "{route}"
            );
            assert!(incomplete_payload_digests_total() > before, "{route}: counted");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_fails_is_marked_incomplete() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let app = Router::new()
        .route(
            "/whole",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let addr = serve_http(app).await;
    // A client that announces 5000 bytes, sends 100 and goes away: the body the handler reads fails.
    let trace = opentelemetry::trace::TraceId::from_bytes(rand::random());
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /whole HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\ntraceparent: 00-{trace}-0102030405060708-01\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut tcp, head.as_bytes())
        .await
        .expect("head");
    tokio::io::AsyncWriteExt::write_all(&mut tcp, &[7; 100])
        .await
        .expect("100 bytes");
    drop(tcp);
    let spans = spans_of(trace, 1).await;
    let server_span = spans.iter().find(|s| is_server(s)).expect("server span");
    assert_eq!(attr(server_span, "dei.payload.digest"), None);
    assert_eq!(
        attr(server_span, "dei.payload.digest.incomplete").as_deref(),
        Some("true")
    );
}

/// The server span of one request made with `method` to `path`, and the response's status.
async fn served(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, SpanData) {
    let config = config();
    let client = http_client(&config);
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let (status, trace) = in_root(&config, |cx| cx, async {
        client
            .request(method, format!("http://{addr}{path}"))
            .send()
            .await
            .expect("a response")
            .status()
            .as_u16()
    })
    .await;
    let spans = spans_of(trace, 3).await;
    let server = spans.into_iter().find(is_server).expect("server span");
    (status, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_routes_and_unknown_methods_do_not_name_spans() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/anything", any(|| async { "any" }))
        .layer(DeiHttpServerLayer::new(config.clone()));
    let addr = serve_http(app).await;
    let attrs = |s: &SpanData| {
        [
            "http.route",
            "dei.signature",
            "http.request.method",
            "http.request.method_original",
            "url.path",
        ]
        .map(|k| attr(s, k))
    };

    // A matched route: as before.
    let (status, span) = served(addr, "GET", "/users/7").await;
    assert_eq!(status, 200);
    assert_eq!(span.name, "GET /users/{id}");
    let [route, signature, method, original, path] = attrs(&span);
    assert_eq!(route.as_deref(), Some("/users/{id}"));
    assert_eq!(signature.as_deref(), Some("GET /users/{id}"));
    assert_eq!((method.as_deref(), original), (Some("GET"), None));
    assert_eq!(path.as_deref(), Some("/users/7"));

    // No route: the path a client chose is in url.path only.
    let (status, span) = served(addr, "GET", "/no/such/secret-4711").await;
    assert_eq!(status, 404);
    assert_eq!(span.name, "GET");
    let [route, signature, method, _, path] = attrs(&span);
    assert_eq!(route, None);
    assert_eq!(signature.as_deref(), Some("GET <unmatched>"));
    assert_eq!(method.as_deref(), Some("GET"));
    assert_eq!(path.as_deref(), Some("/no/such/secret-4711"));

    // A method outside the conventions' list, on a route that takes any method, and on no route.
    let (status, span) = served(addr, "FROB4711", "/anything").await;
    assert_eq!(status, 200);
    assert_eq!(span.name, "HTTP /anything");
    let [route, signature, method, original, _] = attrs(&span);
    assert_eq!(route.as_deref(), Some("/anything"));
    assert_eq!(signature.as_deref(), Some("_OTHER /anything"));
    assert_eq!(method.as_deref(), Some("_OTHER"));
    assert_eq!(original.as_deref(), Some("FROB4711"));
    let (status, span) = served(addr, "FROB4711", "/nowhere-4711").await;
    assert_eq!(status, 404);
    assert_eq!(span.name, "HTTP");
    let [route, signature, method, original, _] = attrs(&span);
    assert_eq!(route, None);
    assert_eq!(signature.as_deref(), Some("_OTHER <unmatched>"));
    assert_eq!(
        (method.as_deref(), original.as_deref()),
        (Some("_OTHER"), Some("FROB4711"))
    );
}
