//! The axum server layer against a real reqwest client on loopback: requests that matched no route (or carry an
//! unknown method) get low-cardinality span names and signatures.

mod common;

use axum::Router;
use axum::routing::{any, get};
use common::*;
use dei_instrumentation::DeiHttpServerLayer;
use opentelemetry_sdk::trace::SpanData;

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
