//! Interop: Rust → a Python service that runs only the standard OpenTelemetry SDK and its baggage
//! propagator → Rust. The index reaches the far side unchanged, in the baggage copy (opt-in:
//! `install_global_propagator_with(Carriers::HEADER_AND_BAGGAGE)`).
//!
//! Needs `python3` with `opentelemetry-api` and `opentelemetry-sdk`
//! (`python3 -m pip install opentelemetry-api opentelemetry-sdk`). Without them the test is skipped, unless
//! `DEI_REQUIRE_INTEROP=1` (CI), where it fails.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const RELAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/relay.py");

fn required() -> bool {
    std::env::var("DEI_REQUIRE_INTEROP").is_ok_and(|v| v == "1")
}

/// Kills the relay when the test ends, however it ends.
struct Relay(Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_ready() -> Result<(), String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.sdk.trace, opentelemetry.propagate, opentelemetry.baggage",
        ])
        .output()
        .map_err(|e| format!("python3 not runnable: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "python OpenTelemetry SDK missing: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_crosses_a_python_service_unchanged() {
    if let Err(why) = python_ready() {
        assert!(!required(), "DEI_REQUIRE_INTEROP=1 but {why}");
        eprintln!("skipped: {why}");
        return;
    }
    let sys = System::start().await;
    // The relay forwards W3C baggage only: the index needs the baggage copy, which is opt-in.
    dei_propagator::install_global_propagator_with(dei_propagator::Carriers::HEADER_AND_BAGGAGE);
    let mut child = Command::new("python3")
        .arg(RELAY)
        .arg(format!("http://{}", sys.leaf_http))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the relay");
    let stdout = child.stdout.take().expect("relay stdout");
    let relay = Relay(child);
    let port = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map(|_| line.trim().to_string())
    })
    .await
    .expect("join")
    .expect("relay port");
    let port: u16 = port.parse().expect("a port number");

    let client = http_client(&sys.config);
    let url = format!("http://127.0.0.1:{port}/items/7");
    let (reply, trace) = text_in_root(&sys.config, client.get(&url)).await;
    let reply = reply.expect("the call through the relay");
    drop(relay);

    let spans = spans_of(trace, 3).await;
    let sent = spans
        .iter()
        .find(|s| is_client(s))
        .and_then(|s| attr(s, "dei.index"))
        .expect("the Rust client's index");
    let (_, served) = reply.rsplit_once('@').expect("item@index");
    assert_eq!(served, sent, "the far side serves under the index the near side sent");
    assert!(sent.starts_with("1.") && sent.matches('.').count() == 1, "{sent}");
    // The far side's server span is in the same trace (trace context relayed by Python) and carries the index.
    let far = spans
        .iter()
        .find(|s| is_server(s))
        .expect("the far side's server span, in the same trace");
    assert_eq!(attr(far, "dei.index").as_deref(), Some(sent.as_str()));
    assert_eq!(attr(far, "dei.signature").as_deref(), Some("GET /items/{id}"));
}
