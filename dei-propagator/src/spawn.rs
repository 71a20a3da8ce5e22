//! Spawning work that keeps the current OpenTelemetry [`Context`], and with it the request's scope.
//!
//! `tokio::spawn`, `tokio::task::spawn_blocking` and `std::thread::spawn` do not carry the context (it is
//! thread-local). These helpers capture it at the call and attach it to the new task or thread, so every RPC
//! issued there extends the same request's prefix and shares its counters.

use opentelemetry::Context;
use opentelemetry::context::FutureExt;
use std::future::Future;

/// `tokio::spawn` that carries the current context into the task.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// use dei_propagator::{DeiContextExt, Instantiation, RequestScope};
/// let scope = RequestScope::root(Instantiation::dei());
/// let _guard = opentelemetry::Context::current().with_dei_scope(scope.clone()).attach();
/// let seen = dei_propagator::spawn(async { RequestScope::current() }).await.unwrap();
/// assert!(seen.is_some_and(|s| s.same_scope(&scope)));
/// # }
/// ```
#[track_caller]
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.with_context(Context::current()))
}

/// `tokio::task::spawn_blocking` that carries the current context into the closure.
#[track_caller]
pub fn spawn_blocking<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let cx = Context::current();
    tokio::task::spawn_blocking(move || {
        let _guard = cx.attach();
        f()
    })
}

/// `std::thread::spawn` that carries the current context into the thread.
pub fn spawn_thread<F, R>(f: F) -> std::thread::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let cx = Context::current();
    std::thread::spawn(move || {
        let _guard = cx.attach();
        f()
    })
}
