//! Stalled OTLP/HTTP clients cannot exhaust memory: request bytes buffered across all connections are capped
//! (requests past the cap get the retryable 503 with `Retry-After`), a body that stalls is answered 408 after
//! the body timeout, both counted, and valid traffic gets through once the stalled bodies are gone. The issue's
//! 300 stalled connections (each 7 MiB of an 8 MiB body, which took RSS to 2.6 GiB) scaled down to 1 MiB of
//! a 2 MiB body each: the collector's peak RSS stays far below the 300 MiB offered.

mod common;

use common::CollectorProcess;
use dei_collector::server::{self, ServerConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GOOD: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x"}]}]}]}"#;

/// Sends the headers of a 512 KiB body and 200 KiB of it, then stalls; returns the response head.
async fn stalled(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = "POST /v1/traces HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                content-length: 524288\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    // the collector may answer (and stop reading) before all of it is written
    let _ = s.write_all(&vec![b' '; 200 * 1024]).await;
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_are_capped_timed_out_and_counted() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.max_buffered_bytes = 1024 * 1024;
    config.ingest.body_timeout = Duration::from_secs(1);
    let r = server::start(config).await.unwrap();
    let conns: Vec<_> = (0..30).map(|_| tokio::spawn(stalled(r.http_addr))).collect();
    let mut heads = Vec::new();
    for c in conns {
        heads.push(tokio::time::timeout(Duration::from_secs(60), c).await.unwrap().unwrap());
    }
    let refused = heads.iter().filter(|h| h.starts_with("HTTP/1.1 503")).count();
    let timed_out = heads.iter().filter(|h| h.starts_with("HTTP/1.1 408")).count();
    assert_eq!(refused + timed_out, 30, "every stalled request was answered: {heads:?}");
    assert!(refused >= 1, "the cap refused some: {heads:?}");
    assert!(timed_out >= 1, "the ones within the cap timed out: {heads:?}");
    assert!(
        heads
            .iter()
            .filter(|h| h.starts_with("HTTP/1.1 503"))
            .all(|h| h.to_ascii_lowercase().contains("retry-after: 1")),
        "{heads:?}"
    );
    let c = r.collector.counters().snapshot();
    assert_eq!(c.rejected_overloaded as usize, refused, "{c:?}");
    assert_eq!(c.rejected_incomplete_body as usize, timed_out, "{c:?}");
    assert_eq!(r.collector.buffered_bytes(), 0, "every buffered byte was released");
    // valid traffic gets through
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", r.http_addr))
        .header("content-type", "application/json")
        .body(GOOD)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(r.collector.counters().snapshot().requests_accepted, 1);
    r.shutdown().await;
}

/// Peak resident memory of a process, from `/proc/<pid>/status` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_stalled_connections_keep_rss_bounded() {
    let c = CollectorProcess::start(&[
        "--max-buffered-bytes",
        "33554432",
        "--body-timeout-secs",
        "2",
        "--max-body-bytes",
        "2097152",
    ]);
    let before = peak_rss_kib(c.child.id());
    let part: Arc<Vec<u8>> = Arc::new(vec![b' '; 1024 * 1024]);
    let addr = c.http;
    let conns: Vec<_> = (0..300)
        .map(|_| {
            let part = part.clone();
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                s.write_all(
                    b"POST /v1/traces HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                      content-length: 2097152\r\n\r\n",
                )
                .await
                .unwrap();
                let _ = s.write_all(&part).await;
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                String::from_utf8_lossy(&got).into_owned()
            })
        })
        .collect();
    let mut heads = Vec::new();
    for h in conns {
        heads.push(
            tokio::time::timeout(Duration::from_secs(120), h)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let peak = peak_rss_kib(c.child.id());
    eprintln!("peak RSS {peak} KiB (from {before} KiB)");
    let refused = heads.iter().filter(|h| h.starts_with("HTTP/1.1 503")).count();
    let timed_out = heads.iter().filter(|h| h.starts_with("HTTP/1.1 408")).count();
    assert_eq!(refused + timed_out, 300, "every stalled request was answered");
    assert!(refused > 0 && timed_out > 0, "{refused} refused, {timed_out} timed out");
    assert!(
        peak < 128 * 1024,
        "peak RSS {peak} KiB (from {before} KiB) with 300 MiB offered and a 32 MiB buffer cap"
    );
    let stats = tokio::task::spawn_blocking(move || {
        let ok = {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(
                s,
                "POST /v1/traces HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{GOOD}",
                GOOD.len()
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        (ok, c.get_json("/api/v1/stats"))
    })
    .await
    .unwrap();
    assert!(
        stats.0.starts_with("HTTP/1.1 200"),
        "valid traffic gets through: {}",
        stats.0
    );
    let counters = &stats.1["counters"];
    assert_eq!(counters["rejected_overloaded"], refused as u64);
    assert_eq!(counters["rejected_incomplete_body"], timed_out as u64);
    assert_eq!(counters["requests_accepted"], 1);
}
