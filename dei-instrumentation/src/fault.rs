//! Applying planned faults: a client whose outgoing index matches an entry of the fault plan in the current
//! `Context` returns the fault instead of sending (latency: the call takes that much longer) — only in a service whose
//! configuration applies plans ([`Faults::Accept`](crate::config::Faults::Accept); fault plans are off by
//! default), and never on a call whose index is at the depth limit.
//!
//! | planned | gRPC call (tonic client layer) | HTTP call (reqwest middleware) |
//! |---|---|---|
//! | `g<code>` (1–16) | that status, as a trailers-only response | the HTTP status gRPC maps the code to (14 → 503, 4 → 504, 12 → 501, 5 → 404, 16 → 401, 7 → 403, 8 → 429, others → 500) |
//! | `h<status>` (200–599) | that HTTP status without `grpc-status`, which the caller reads as gRPC's HTTP mapping says: 400 → INTERNAL, 401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED, 404 → UNIMPLEMENTED, 429, 502, 503, 504 → UNAVAILABLE, any other (200 and 418 too) → UNKNOWN | that status, empty body |
//! | `c` | UNAVAILABLE with message `dei: injected connection error` (what tonic reports for a refused connection) | an error, [`InjectedConnectionError`] (a middleware error: `is_connect()` is false) |
//! | `l<ms>` | sends the headers, holds the request's body that long (at most [`DeiConfig::max_latency`](crate::DeiConfig::max_latency)): the channel's `Endpoint::timeout` and the call's `grpc-timeout` count the wait, and a call past them ends as tonic ends any (`CANCELLED`, "Timeout expired") | waits (at most the same cap), then sends with what is left of the request's timeout (`RequestBuilder::timeout`); a wait as long as that timeout or longer waits the timeout and fails, unsent, with `InjectedTimeout` (feature `reqwest`; its `is_timeout()` is false). A client-level timeout (`reqwest::ClientBuilder::timeout`) is invisible to middleware: the wait is outside it; set the timeout per request or with `with_init` |
//!
//! docs/wire-format.md lists the same mapping as test vectors ("Faults as a caller sees them"), which the
//! tests check against real tonic and reqwest clients. A plan cannot carry `g0` (OK is not a fault) or a 1xx
//! status (never a final response): such a plan is rejected as a whole.
//!
//! A plan built by hand (`FaultPlan::new` checks nothing) can still hold such a fault, a gRPC code outside 1–16 or
//! an HTTP status outside 200–599 ([`Fault::is_valid`]). The propagator does not send that plan (every receiver
//! would reject it whole: `Event::FaultPlanNotSent`), and the layers of the process that holds it, which match
//! its entries against their own calls in process, do not carry out such an entry either: the call it names is
//! sent as if the plan did not name it, and that is counted ([`invalid_faults_not_applied_total`]) and logged (a
//! warning, at most once per 10 seconds); its client span has no `dei.fault`. The plan's valid entries naming this
//! process's calls are carried out as usual. (A latency the wire does not carry as it is, longer than
//! `MAX_LATENCY_MS` or finer than a millisecond, is not such a fault: it waits, at most the local cap.)
//!
//! Stream messages are targeted by their final index (see `grpc::stream`, feature `tonic`): a failing fault
//! ends the request stream before that message (the callee sees the earlier messages, then the end of the
//! stream), the call ends with the matching gRPC status towards the caller, and later sends through the
//! `StreamSender` fail; a latency fault delays that message and those after it.

use dei_propagator::{Fault, Index};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Plan entries not carried out because their fault is invalid (see [`invalid_faults_not_applied_total`]).
static INVALID_FAULTS: AtomicU64 = AtomicU64::new(0);
/// When the last warning about one was logged, and the count then.
static INVALID_FAULTS_WARNED: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
/// The least time between two warnings about invalid faults.
const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Plan entries that named a call of this process with an invalid fault ([`Fault::is_valid`]: a gRPC code
/// outside 1–16, an HTTP status outside 200–599), in a service that applies plans, since the process started
/// (an in-process count, not exported as a metric). Only a plan built by hand (`FaultPlan::new`) holds one; no
/// receiver reads such a plan and the propagator does not send it, so neither is the entry carried out here: the
/// call is sent as if the plan did not name it, and each such call is counted here and logged (a warning, at most
/// once per 10 seconds). See the [module docs](self).
pub fn invalid_faults_not_applied_total() -> u64 {
    INVALID_FAULTS.load(Ordering::Relaxed)
}

/// True when a planned fault is one no receiver reads, so that the call it names is sent as if unplanned: a gRPC
/// code or an HTTP status outside its range. A latency is carried out whatever its length (the wire shortens it,
/// the local cap too).
pub(crate) fn is_invalid(fault: Fault) -> bool {
    matches!(fault, Fault::Grpc(_) | Fault::Http(_)) && !fault.is_valid()
}

/// Counts a plan entry not carried out because its fault is invalid, and logs it unless one was logged within
/// the last 10 seconds.
pub(crate) fn record_invalid(fault: Fault, index: &Index) {
    let total = INVALID_FAULTS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut last = INVALID_FAULTS_WARNED.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if last.is_some_and(|(at, _)| now.duration_since(at) < WARN_INTERVAL) {
        return;
    }
    let suppressed = last.map_or(0, |(_, logged)| total.saturating_sub(logged + 1));
    *last = Some((now, total));
    drop(last);
    tracing::warn!(
        total,
        suppressed,
        "dei: the fault plan names this call ({}) with {fault}, which is not a fault (a gRPC code 1-16, an HTTP \
         status 200-599): no receiver reads a plan holding it, and the propagator does not send it, so the call is \
         sent as if unplanned; the plan's valid entries for this process's calls are carried out. Build plans with \
         FaultPlan::try_new to refuse it. Counted by dei_instrumentation::invalid_faults_not_applied_total(); \
         logged at most once per 10 s",
        index.encode()
    );
}

/// The fault injected on one of a stream's messages, shared by the client layer (which sets it), the sender
/// and the response body (which end with it).
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamFault(Arc<OnceLock<Fault>>);

impl StreamFault {
    /// Records the fault (the first one wins: the stream ends at it).
    #[cfg_attr(not(feature = "tonic"), allow(dead_code))]
    pub(crate) fn set(&self, fault: Fault) {
        let _ = self.0.set(fault);
    }

    /// The injected fault, if any.
    pub(crate) fn get(&self) -> Option<Fault> {
        self.0.get().copied()
    }
}

/// The error returned for a planned connection error on an HTTP call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("dei: injected connection error for the call with index {index}")]
pub struct InjectedConnectionError {
    /// The index of the call that was not sent.
    pub index: String,
}

/// What the client does about a planned fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send as usual.
    Send,
    /// Wait, then send.
    Delay(Duration),
    /// Do not send; fail with this fault.
    Fail(Fault),
}

#[cfg(any(feature = "tonic", feature = "reqwest"))]
impl Action {
    pub(crate) fn for_fault(fault: Option<Fault>) -> Self {
        match fault {
            None => Action::Send,
            Some(Fault::Latency(d)) => Action::Delay(d),
            Some(f) => Action::Fail(f),
        }
    }
}

#[cfg(feature = "reqwest")]
/// The HTTP status a gRPC code maps to (the inverse of the gRPC HTTP-to-status mapping, with 500 by default).
pub(crate) fn http_status_for_grpc(code: u8) -> u16 {
    match code {
        0 => 200,
        4 => 504,
        5 => 404,
        7 => 403,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500,
    }
}

#[cfg(feature = "tonic")]
/// The gRPC response for a failed call: trailers-only with `grpc-status`, or a bare HTTP status.
pub(crate) fn grpc_response<B>(fault: Fault, empty: B) -> http::Response<B> {
    let status = match fault {
        Fault::Grpc(code) => tonic::Status::new(tonic::Code::from_i32(i32::from(code)), "dei: injected fault"),
        Fault::Http(status) => {
            let mut response = http::Response::new(empty);
            *response.status_mut() =
                http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
            return response;
        }
        Fault::Connection | Fault::Latency(_) => tonic::Status::unavailable("dei: injected connection error"),
    };
    let (parts, _) = status.into_http::<()>().into_parts();
    http::Response::from_parts(parts, empty)
}

#[cfg(feature = "tonic")]
/// The status a stream call ends with when a failing fault hits one of its messages: a gRPC code as is, an
/// HTTP status as gRPC maps it (400 → INTERNAL, 401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED, 404 →
/// UNIMPLEMENTED, 429/502/503/504 → UNAVAILABLE, others → UNKNOWN: what a unary call gets from tonic), a
/// connection error as UNAVAILABLE.
pub(crate) fn status_for_stream(fault: Fault) -> tonic::Status {
    match fault {
        Fault::Grpc(code) => tonic::Status::new(tonic::Code::from_i32(i32::from(code)), "dei: injected fault"),
        Fault::Http(status) => {
            let code = match status {
                400 => tonic::Code::Internal,
                401 => tonic::Code::Unauthenticated,
                403 => tonic::Code::PermissionDenied,
                404 => tonic::Code::Unimplemented,
                429 | 502 | 503 | 504 => tonic::Code::Unavailable,
                _ => tonic::Code::Unknown,
            };
            tonic::Status::new(code, format!("dei: injected HTTP status {status}"))
        }
        Fault::Connection | Fault::Latency(_) => tonic::Status::unavailable("dei: injected connection error"),
    }
}

#[cfg(all(test, feature = "tonic", feature = "reqwest"))]
mod tests {
    use super::*;

    #[test]
    fn grpc_faults_become_statuses() {
        let r = grpc_response(Fault::UNAVAILABLE, ());
        let status = tonic::Status::from_header_map(r.headers()).map(|s| s.code());
        assert_eq!(status, Some(tonic::Code::Unavailable));
        let r = grpc_response(Fault::Http(502), ());
        assert_eq!(r.status(), 502);
        assert!(tonic::Status::from_header_map(r.headers()).is_none());
        assert_eq!(http_status_for_grpc(14), 503);
        assert_eq!(
            Action::for_fault(Some(Fault::Latency(Duration::from_millis(5)))),
            Action::Delay(Duration::from_millis(5))
        );
    }

    #[test]
    fn stream_faults_become_statuses() {
        assert_eq!(status_for_stream(Fault::INTERNAL).code(), tonic::Code::Internal);
        assert_eq!(status_for_stream(Fault::Http(503)).code(), tonic::Code::Unavailable);
        assert_eq!(status_for_stream(Fault::Http(500)).code(), tonic::Code::Unknown);
        assert_eq!(status_for_stream(Fault::Http(400)).code(), tonic::Code::Internal);
        assert_eq!(status_for_stream(Fault::Http(200)).code(), tonic::Code::Unknown);
        assert_eq!(status_for_stream(Fault::Connection).code(), tonic::Code::Unavailable);
    }
}
