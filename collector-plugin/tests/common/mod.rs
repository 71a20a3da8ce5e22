//! Shared parts of the integration tests: an OTLP receiver standing in for Jaeger (opentelemetry-proto's
//! generated `TraceServiceServer`, independent of the collector's own receiver), the collector binary as a
//! child process, and small HTTP helpers.
#![allow(dead_code)]

pub mod chain;

use dei_collector::server;
use dei_collector::server::{Downstream as Target, ForwardConfig};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What the stand-in downstream received.
#[derive(Debug, Default)]
pub struct Received {
    pub requests: Vec<ExportTraceServiceRequest>,
    /// When set, every export is answered with this `partial_success` (rejected spans, error message).
    pub answer_partial: Option<(i64, String)>,
}

impl Received {
    /// (trace id, span id) of every span received, with duplicates.
    pub fn span_ids(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| (s.trace_id.clone(), s.span_id.clone()))
            .collect()
    }
    pub fn distinct(&self) -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        self.span_ids().into_iter().collect()
    }
}

#[derive(Clone)]
struct Store(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = self.0.lock().unwrap();
        received.requests.push(request.into_inner());
        let partial_success = received.answer_partial.as_ref().map(|(rejected, message)| {
            opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess {
                rejected_spans: *rejected,
                error_message: message.clone(),
            }
        });
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success }))
    }
}

/// An OTLP/gRPC receiver that can be stopped and started again on the same port.
pub struct Downstream {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Received>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Downstream {
    pub async fn start() -> Downstream {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut d = Downstream {
            addr,
            received: Arc::default(),
            stop: None,
            task: None,
        };
        d.serve(l);
        d
    }

    fn serve(&mut self, l: tokio::net::TcpListener) {
        let (tx, rx) = oneshot::channel();
        let svc = TraceServiceServer::new(Store(self.received.clone()));
        self.stop = Some(tx);
        self.task = Some(tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(l), async {
                    let _ = rx.await;
                })
                .await;
        }));
    }

    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }

    pub async fn restart(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => return self.serve(l),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("cannot rebind {}: {e}", self.addr),
            }
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `n` distinct spans arrived (or the timeout passes) and returns how many did.
    pub async fn wait_for_spans(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received.lock().unwrap().distinct().len();
            if got >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The collector binary as a child process, killed on drop.
pub struct CollectorProcess {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub api: SocketAddr,
}

impl CollectorProcess {
    pub fn start(extra: &[&str]) -> CollectorProcess {
        CollectorProcess::start_with_env(extra, &[])
    }

    /// Like [`CollectorProcess::start`], with its log (stderr) read line by line into the returned channel.
    #[allow(dead_code)]
    pub fn start_logged(extra: &[&str]) -> (CollectorProcess, std::sync::mpsc::Receiver<String>) {
        let mut process = CollectorProcess::spawn(extra, &[], Stdio::piped());
        let stderr = BufReader::new(process.child.stderr.take().expect("stderr"));
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (process, log)
    }

    /// Like [`CollectorProcess::start`], with extra environment variables.
    #[allow(dead_code)]
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> CollectorProcess {
        CollectorProcess::spawn(extra, env, Stdio::inherit())
    }

    fn spawn(extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> CollectorProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
            .args([
                "serve",
                "--grpc-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--api-listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start dei-collector");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let field = |name: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
                .parse()
                .unwrap()
        };
        CollectorProcess {
            grpc: field("grpc"),
            http: field("http"),
            api: field("api"),
            child,
        }
    }

    pub fn get_json(&self, path: &str) -> serde_json::Value {
        get_json(self.api, path)
    }
}

impl Drop for CollectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dei-collector query` over `peers` (API base URLs of shards or other query nodes), with `extra` options,
/// killed on drop.
#[allow(dead_code)]
pub struct QueryNodeProcess {
    pub child: Child,
    pub api: SocketAddr,
}

#[allow(dead_code)]
impl QueryNodeProcess {
    pub fn start(peers: &[String], extra: &[&str]) -> QueryNodeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
            .args(["query", "--api-listen", "127.0.0.1:0", "--interval-ms", "200"])
            .args(extra)
            .arg("--peers")
            .arg(peers.join(","))
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start dei-collector query");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its first line");
        let api = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("api="))
            .unwrap_or_else(|| panic!("no api= in {line:?}"))
            .parse()
            .expect("an address");
        QueryNodeProcess { child, api }
    }
}

impl Drop for QueryNodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET a JSON document with a blocking HTTP/1.1 request.
pub fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let body = get_text(addr, path);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// GET a body as text.
pub fn get_text(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        // de-chunk
        let mut rest = body;
        let mut out = String::new();
        while let Some((len, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        return out;
    }
    body.to_string()
}

/// Sends `body` (an encoded `ExportTraceServiceRequest`, valid or not) as one OTLP/gRPC export to `addr`.
pub async fn grpc_export(addr: SocketAddr, body: Vec<u8>) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut g = tonic::client::Grpc::new(channel);
    g.ready().await.expect("ready");
    g.unary(
        tonic::Request::new(bytes::Bytes::from(body)),
        http::uri::PathAndQuery::from_static(server::GRPC_EXPORT_PATH),
        dei_collector_bench::RawCodec,
    )
    .await
    .map(|_| ())
}

/// Polls `f` until it returns true or the timeout passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// A request of 10 spans named `fill`.
fn filler() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (1..=10u8)
                    .map(|i| Span {
                        trace_id: vec![9; 16],
                        span_id: vec![0, 0, 0, 0, 0, 0, 1, i],
                        name: "fill".into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A collector whose forwarding queue (10 spans) is full: its one worker holds a batch of 10 while the
/// downstream is down.
pub async fn full_collector() -> (Downstream, server::Running) {
    let mut downstream = Downstream::start().await;
    downstream.stop().await;
    let mut config = server::ServerConfig::ephemeral();
    let mut f = ForwardConfig::new(Target::Grpc(downstream.endpoint()));
    f.capacity_spans = 10;
    f.workers = 1;
    f.initial_backoff = Duration::from_millis(20);
    f.max_backoff = Duration::from_millis(100);
    f.enqueue_wait = Duration::from_millis(20);
    config.forward = Some(f);
    let running = server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    client.export(filler()).await.expect("room for the first batch");
    assert_eq!(running.collector.queued_spans(), 10);
    (downstream, running)
}
