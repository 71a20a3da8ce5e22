//! The `dei-collector-bench` binary: a load generator with nothing to send to fails and says why, and the load
//! generator, the sink, the relay and `bench` (without rotel, dei-collector alone against the ceiling) run
//! briefly end to end and report what they measured.

use dei_collector_bench::compare::{Guard, wait_listening};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_dei-collector-bench");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run dei-collector-bench")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn loadgen_fails_when_nothing_was_accepted() {
    let o = run(&["loadgen", "--endpoint", "notaurl", "--duration-secs", "1"]);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        stderr(&o).contains("--endpoint \"notaurl\" is not a usable"),
        "{}",
        stderr(&o)
    );
    // a well-formed endpoint where nothing listens
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let o = run(&[
        "loadgen",
        "--endpoint",
        &endpoint,
        "--duration-secs",
        "1",
        "--concurrency",
        "1",
    ]);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        stderr(&o).contains(&format!("{endpoint} accepted no span")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_refuses_a_missing_collector_binary() {
    let o = run(&[
        "bench",
        "--collector",
        "/nonexistent/dei-collector",
        "--duration-secs",
        "1",
        "--rounds",
        "1",
    ]);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        stderr(&o).contains("the dei-collector binary /nonexistent/dei-collector does not exist"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_into_the_sink_counts_what_it_sent() {
    let sink = loopback_sink().await;
    let endpoint = format!("http://{}", sink.grpc_addr);
    load_and_count(&sink, endpoint).await;
}

/// The relay target of `bench`: what goes into the relay arrives at the sink, request for request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_through_the_relay_reaches_the_sink_whole() {
    let sink = loopback_sink().await;
    let listen = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let relay_addr = listen.local_addr().expect("its address");
    drop(listen);
    let relay = Command::new(BIN)
        .args([
            "relay",
            "--listen",
            &relay_addr.to_string(),
            "--upstream",
            &sink.grpc_addr.to_string(),
        ])
        .spawn()
        .expect("start the relay");
    let _relay = Guard(relay);
    assert!(
        wait_listening(relay_addr).await,
        "the relay did not listen on {relay_addr}"
    );
    load_and_count(&sink, format!("http://{relay_addr}")).await;
}

/// A sink on loopback ports.
async fn loopback_sink() -> dei_collector_bench::sink::Sink {
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    dei_collector_bench::sink::start(any, any)
        .await
        .expect("sink on loopback")
}

/// One second of load to `endpoint`: every span the load generator saw acknowledged was counted by `sink`.
async fn load_and_count(sink: &dei_collector_bench::sink::Sink, endpoint: String) {
    let o = tokio::task::spawn_blocking(move || {
        run(&[
            "loadgen",
            "--endpoint",
            &endpoint,
            "--duration-secs",
            "1",
            "--concurrency",
            "2",
            "--traces-per-request",
            "2",
        ])
    })
    .await
    .expect("loadgen ran");
    assert!(o.status.success(), "{}", stderr(&o));
    let result: serde_json::Value = serde_json::from_slice(&o.stdout).expect("loadgen prints its result as JSON");
    let spans = result["spans"].as_u64().expect("spans");
    assert!(spans > 0, "{result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(
        spans % (2 * dei_collector_bench::loadgen::SPANS_PER_TRACE as u64),
        0,
        "{result}"
    );
    // every span acknowledged was counted by the sink, and the requests too
    let counted = sink.counts.spans.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(counted, spans, "{result}");
    assert_eq!(
        sink.counts.requests.load(std::sync::atomic::Ordering::Relaxed),
        result["requests"].as_u64().expect("requests")
    );
}
