//! `#[track_caller]` call sites: the innermost frame of a stack, where the user marks one.
//!
//! Unwinding sees the `.await` that polls the RPC, which is enough to tell call sites apart in most code. Where
//! a helper issues RPCs for many callers, mark the callers' sites: [`CallSiteExt::at_call_site`] records the
//! caller's location (about 10 ns) and every stack captured while the wrapped future is polled gets it as its
//! innermost frame.
//!
//! ```
//! use dei_instrumentation::stack::CallSiteExt;
//! # async fn get_user(id: u32) -> u32 { id }
//! # async fn run() {
//! let user = get_user(7).at_call_site().await;
//! # }
//! ```

use pin_project_lite::pin_project;
use std::cell::Cell;
use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    static CURRENT: Cell<Option<&'static Location<'static>>> = const { Cell::new(None) };
}

/// The call site marked by the innermost [`AtCallSite`] being polled on this thread.
pub(crate) fn current() -> Option<&'static Location<'static>> {
    CURRENT.with(|c| c.get())
}

pin_project! {
    /// A future that marks its creation site as the innermost frame of stacks captured while it is polled.
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct AtCallSite<F> {
        #[pin]
        inner: F,
        location: &'static Location<'static>,
    }
}

impl<F> AtCallSite<F> {
    /// The marked location.
    pub fn location(&self) -> &'static Location<'static> {
        self.location
    }
}

impl<F: Future> Future for AtCallSite<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let previous = CURRENT.with(|c| c.replace(Some(*this.location)));
        let out = this.inner.poll(cx);
        CURRENT.with(|c| c.set(previous));
        out
    }
}

/// Marks the caller's location on a future (see [`CallSiteExt::at_call_site`]).
pub trait CallSiteExt: Future + Sized {
    /// Wraps the future; stacks captured while it is polled get the caller's location as innermost frame.
    #[track_caller]
    fn at_call_site(self) -> AtCallSite<Self> {
        AtCallSite {
            inner: self,
            location: Location::caller(),
        }
    }
}

impl<F: Future> CallSiteExt for F {}

/// Function form of [`CallSiteExt::at_call_site`].
#[track_caller]
pub fn at_call_site<F: Future>(future: F) -> AtCallSite<F> {
    future.at_call_site()
}
