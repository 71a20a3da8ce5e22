//! `/healthz` and `/readyz` (ready when the receivers serve and the downstream can be reached), and the API's
//! `Host` check against DNS rebinding.

mod common;

use common::Downstream;
use dei_collector::server::{self, ServerConfig};
use dei_collector::server::{Downstream as Target, ForwardConfig};
use std::net::SocketAddr;

async fn get(addr: SocketAddr, path: &str, host: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().get(format!("http://{addr}{path}"));
    if let Some(h) = host {
        req = req.header("host", h);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_downstream() {
    let mut downstream = Downstream::start().await;
    let mut config = ServerConfig::ephemeral();
    config.forward = Some(ForwardConfig::new(Target::Grpc(downstream.endpoint())));
    let r = server::start(config).await.unwrap();
    assert_eq!(
        get(r.api_addr, "/healthz", None).await,
        (200, serde_json::json!({"status": "ok"}))
    );
    let (code, body) = get(r.api_addr, "/readyz", None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["ready"], true);
    assert_eq!(body["receivers"], "serving");
    assert_eq!(body["downstream"]["endpoint"], downstream.endpoint());
    assert_eq!(body["downstream"]["reachable"], true);

    downstream.stop().await;
    let (code, body) = get(r.api_addr, "/readyz", None).await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert_eq!(body["downstream"]["reachable"], false);
    assert!(
        body["downstream"]["error"].as_str().unwrap().contains("connect to"),
        "{body}"
    );
    // liveness does not depend on the downstream
    assert_eq!(get(r.api_addr, "/healthz", None).await.0, 200);

    downstream.restart().await;
    let (code, body) = get(r.api_addr, "/readyz", None).await;
    assert_eq!(code, 200, "{body}");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_without_forwarding() {
    let r = server::start(ServerConfig::ephemeral()).await.unwrap();
    let (code, body) = get(r.api_addr, "/readyz", None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["downstream"], serde_json::Value::Null);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_only_to_ip_localhost_and_allowed_hosts() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.api_allowed_hosts = vec!["dei.internal".into()];
    let r = server::start(config).await.unwrap();
    let port = r.api_addr.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "[::1]:4319".to_string(),
        format!("dei.internal:{port}"),
        "DEI.internal".to_string(),
    ] {
        let (code, body) = get(r.api_addr, "/api/v1/graph", Some(&host)).await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    for host in [format!("evil.example:{port}"), "127.0.0.1.evil.example".to_string()] {
        for path in ["/api/v1/graph", "/ui/", "/metrics"] {
            let (code, body) = get(r.api_addr, path, Some(&host)).await;
            assert_eq!(code, 403, "{host} {path}: {body}");
            assert!(body["error"].as_str().unwrap().contains("DNS rebinding"), "{body}");
        }
    }
    assert_eq!(r.collector.counters().snapshot().api_host_refused, 6);
    r.shutdown().await;
}
