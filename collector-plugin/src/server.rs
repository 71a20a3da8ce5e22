//! Starting and stopping the whole collector: the gRPC and HTTP receivers, the API, the forwarder and the
//! housekeeping timer.

pub use crate::collector::{Collector, IngestConfig};
pub use crate::counters::Counters;
pub use crate::forward::{
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_QUEUE_BYTES, Downstream, ForwardConfig, ForwardTls, GRPC_EXPORT_PATH, QueueDepth,
};
pub use crate::graph::GraphConfig;
pub use crate::limits::ConnectionLimits;
pub use crate::shards::peers::{DEFAULT_MAX_SNAPSHOT_BYTES, QueryConfig, QueryNode, start as start_query};
pub use crate::state::StateConfig;
pub use crate::tree::traces::TraceStoreConfig;

use crate::api;
use crate::forward::Forwarder;
use crate::limits::LimitedListener;
use crate::receiver::{grpc::TraceExportService, http};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Everything the collector needs to run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// OTLP/gRPC listen address (default `127.0.0.1:4317`).
    pub grpc_listen: SocketAddr,
    /// OTLP/HTTP listen address (default `127.0.0.1:4318`).
    pub http_listen: SocketAddr,
    /// API and `/metrics` listen address (default `127.0.0.1:4319`).
    pub api_listen: SocketAddr,
    /// Input handling.
    pub ingest: IngestConfig,
    /// Analysis limits.
    pub state: StateConfig,
    /// Where to forward, if anywhere.
    pub forward: Option<ForwardConfig>,
    /// Connection limits of every listener (the read timeout applies to the HTTP/1 listeners, OTLP/HTTP and
    /// the API; gRPC requests are bounded by the body timeout and the stream limit instead).
    pub limits: ConnectionLimits,
    /// Most concurrent gRPC streams (requests) per connection.
    pub max_grpc_streams: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 4317)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 4318)),
            api_listen: SocketAddr::from(([127, 0, 0, 1], 4319)),
            ingest: IngestConfig::default(),
            state: StateConfig::default(),
            forward: None,
            limits: ConnectionLimits::default(),
            max_grpc_streams: 100,
        }
    }
}

impl ServerConfig {
    /// Every listener on an ephemeral loopback port (for tests).
    pub fn ephemeral() -> Self {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        ServerConfig {
            grpc_listen: any,
            http_listen: any,
            api_listen: any,
            ..Default::default()
        }
    }
}

/// A running collector.
#[derive(Debug)]
pub struct Running {
    /// Bound OTLP/gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound OTLP/HTTP address.
    pub http_addr: SocketAddr,
    /// Bound API address.
    pub api_addr: SocketAddr,
    /// The collector core.
    pub collector: Arc<Collector>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Errors starting the collector.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The forwarder could not be set up.
    #[error("forwarding: {0}")]
    Forward(String),
    /// A query node's client for its shards could not be set up.
    #[error("pulling the shards: {0}")]
    Peers(String),
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// Binds every listener and starts serving.
pub async fn start(config: ServerConfig) -> Result<Running, StartError> {
    let counters = Arc::new(Counters::default());
    let http1_limits = config.limits;
    let grpc_limits = ConnectionLimits {
        read_timeout: None,
        ..config.limits
    };
    let forwarder = match config.forward.clone() {
        Some(f) => Some(Forwarder::start(f, counters.clone()).map_err(StartError::Forward)?),
        None => None,
    };
    let collector = Arc::new(Collector::new(
        config.ingest.clone(),
        config.state.clone(),
        forwarder,
        counters.clone(),
    ));
    let grpc_l = bind(config.grpc_listen).await?;
    let http_l = bind(config.http_listen).await?;
    let api_l = bind(config.api_listen).await?;
    let (grpc_addr, http_addr, api_addr) = (
        grpc_l.local_addr().unwrap_or(config.grpc_listen),
        http_l.local_addr().unwrap_or(config.http_listen),
        api_l.local_addr().unwrap_or(config.api_listen),
    );
    let (stop, stopped) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let mut tasks = Vec::new();
    let svc = TraceExportService::new(collector.clone());
    let rx = stopped.clone();
    let c = collector.clone();
    let grpc_l = LimitedListener::new(grpc_l, grpc_limits, counters.clone());
    let max_streams = config.max_grpc_streams;
    tasks.push(tokio::spawn(async move {
        let incoming = futures::stream::unfold(grpc_l, |mut l| async move {
            let (io, _) = l.next().await;
            Some((Ok::<_, std::io::Error>(io), l))
        });
        if let Err(e) = tonic::transport::Server::builder()
            .max_concurrent_streams(max_streams)
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, signal(rx))
            .await
        {
            tracing::error!(error = %e, "gRPC receiver stopped");
        }
        c.receiver_stopped();
    }));
    let app = http::router(collector.clone());
    let rx = stopped.clone();
    let c = collector.clone();
    let http_l = LimitedListener::new(http_l, http1_limits, counters.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(http_l, app).with_graceful_shutdown(signal(rx)).await {
            tracing::error!(error = %e, "HTTP receiver stopped");
        }
        c.receiver_stopped();
    }));
    let app = api::router(collector.clone());
    let rx = stopped.clone();
    let api_l = LimitedListener::new(api_l, http1_limits, counters.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(api_l, app).with_graceful_shutdown(signal(rx)).await {
            tracing::error!(error = %e, "API stopped");
        }
    }));
    let c = collector.clone();
    let mut rx = stopped.clone();
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tick.tick() => c.housekeeping(),
                _ = rx.wait_for(|v| *v) => return,
            }
        }
    }));
    Ok(Running {
        grpc_addr,
        http_addr,
        api_addr,
        collector,
        stop,
        tasks,
    })
}

impl Running {
    /// Stops the receivers and the API, then drains the forwarding queue.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.collector.shutdown().await;
    }
}
