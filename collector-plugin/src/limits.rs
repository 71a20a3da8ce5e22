//! Connection limits for the listeners: a cap on concurrent connections (a connection over it is closed at
//! once and counted) and an idle read timeout (a connection that sends nothing for that long while the
//! server waits for bytes, such as a client that sent headers and then stalled, is closed and counted).

use crate::counters::Counters;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Limits applied to every accepted connection of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once on one listener (`--max-connections`).
    pub max_connections: usize,
    /// Longest wait for the next byte while the server is reading (`--read-timeout-secs`); `None` disables.
    pub read_timeout: Option<Duration>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            read_timeout: Some(Duration::from_secs(30)),
        }
    }
}

/// A TCP listener that enforces [`ConnectionLimits`].
#[derive(Debug)]
pub struct LimitedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    limits: ConnectionLimits,
    counters: Arc<Counters>,
}

impl LimitedListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, limits: ConnectionLimits, counters: Arc<Counters>) -> Self {
        LimitedListener {
            inner,
            slots: Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS))),
            limits,
            counters,
        }
    }

    /// The next connection within the cap; connections over it are closed and counted
    /// (`connections_refused`), accept errors are retried after a short pause.
    pub async fn next(&mut self) -> (Limited, SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        Limited {
                            inner: stream,
                            _permit: permit,
                            read_timeout: self.limits.read_timeout,
                            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
                            armed: false,
                            counters: self.counters.clone(),
                            remote: addr,
                        },
                        addr,
                    );
                }
                Err(_) => {
                    Counters::add(&self.counters.connections_refused, 1);
                    drop(stream);
                }
            }
        }
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = Limited;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Limited, SocketAddr) {
        self.next().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// An accepted connection holding its slot under the cap, with an idle read timeout.
#[derive(Debug)]
pub struct Limited {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    read_timeout: Option<Duration>,
    timer: Pin<Box<Sleep>>,
    armed: bool,
    counters: Arc<Counters>,
    remote: SocketAddr,
}

impl AsyncRead for Limited {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let Some(timeout) = this.read_timeout else {
                    return Poll::Pending;
                };
                if !this.armed {
                    this.timer.as_mut().reset(Instant::now() + timeout);
                    this.armed = true;
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.armed = false;
                        Counters::add(&this.counters.connections_timed_out, 1);
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no data from {} for {timeout:?}", this.remote),
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Limited {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Limited {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
