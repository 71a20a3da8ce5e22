//! Distributed execution indexes (DEIs) for OpenTelemetry.
//!
//! A DEI names each *dynamic* RPC so that the name is unique within one run and the same across runs, despite
//! loops, branches, helper functions, concurrency and scheduling nondeterminism: `[r1|c1 :: … :: rn|cn]`,
//! where each `r` is an invocation signature — RPC [`Signature`], payload and call stack — and `c` counts how
//! often that invocation signature was issued under the same path prefix ("Distributed Execution Indexing",
//! §3).
//!
//! This crate holds the model and its plumbing:
//! - the model: [`Signature`], [`PayloadDigest`], [`CallStack`], [`InvocationSignature`], [`Index`], and
//!   [`Instantiation`]s (which components count), with [`projection`] to coarser instantiations;
//! - the compact [`wire`] format shared by the `dei` header and the `dei` baggage entry
//!   (docs/wire-format.md);
//! - [`RequestScope`], the per-request counters shared by reference by every task and thread that serves one
//!   request, carried in the OpenTelemetry [`Context`](opentelemetry::Context) ([`DeiContextExt`]) and across
//!   [`spawn`], [`spawn_blocking`] and [`spawn_thread`];
//! - [`DeiPropagator`], a [`TextMapPropagator`](opentelemetry::propagation::TextMapPropagator); the crate's
//!   [`composite_propagator`] writes the `dei` header only, and the baggage copy is opt-in
//!   ([`composite_propagator_with`]`(`[`Carriers::HEADER_AND_BAGGAGE`]`)`); [`inject_with_index`] and
//!   [`extract_with_index`] carry an RPC's index without a `Context` value of its own
//!   ([`extract_with_index_counted`] reads a carrier's single `dei` value without a list);
//! - [`FaultPlan`]s that ride on the same context;
//! - the span contract, [`semconv`]: every `dei.*` span attribute key with its type and meaning, the parser of
//!   a span's `dei.*` attributes and the rewriter of preliminary stream indexes, shared by the instrumentation
//!   that records them and the collector and search that read them.
//!
//! Instrumentation that fills in payloads and stacks for tonic, axum and reqwest lives in
//! `dei-instrumentation`.
//!
//! # Example
//! Two concurrent calls from one call site, told apart by their payloads, in whatever order they run:
//! ```
//! use dei_propagator::*;
//!
//! let scope = RequestScope::root(Instantiation::dei());
//! let site = CallStack::new(vec![Frame::new("src/a.rs", 7, 20)]).digest();
//! let echo = |s: &str| InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(s.as_bytes()), site);
//! let world = scope.issue(&echo("World")).index().clone(); // scheduled first this time
//! let hello = scope.issue(&echo("Hello")).index().clone();
//! assert_eq!((hello.last().unwrap().count, world.last().unwrap().count), (1, 1));
//! assert_ne!(hello, world);
//! ```

mod context;
mod digest;
pub mod fault;
mod index;
mod instantiation;
mod invocation;
pub mod projection;
mod propagator;
pub mod rejection;
pub mod scope;
pub mod semconv;
mod signature;
mod spawn;
mod stack;
pub mod wire;

pub use context::{
    DeiContextExt, extract_with_index, extract_with_index_counted, inject_with_index, inject_with_index_wire,
};
pub use digest::{HexDigestError, PayloadDigest, PayloadHasher, StackDigest};
pub use fault::{FAULT_PLAN_KEY, Fault, FaultPlan, FaultPlanError, PlanLimits};
pub use index::{Element, ElementDigest, Index, StreamCountOverflow};
pub use instantiation::{Instantiation, PathMode};
pub use invocation::InvocationSignature;
pub use propagator::{
    CarrierError, Carriers, DeiPropagator, INDEX_KEY, OtherBaggagePropagator, baggage_without_dei,
    composite_propagator, composite_propagator_with, install_global_propagator, install_global_propagator_with,
};
pub use scope::{IssuedIndex, RequestScope};
pub use signature::Signature;
pub use spawn::{spawn, spawn_blocking, spawn_thread};
pub use stack::{CallStack, Frame};
pub use wire::{Limits, MAX_DEPTH, WireError};
