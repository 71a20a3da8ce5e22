//! Service-level fault injection testing (SFIT) driven by distributed execution indexes (paper §2).
//!
//! The search reruns a functional test, failing a different combination of RPCs each time, until the fault
//! space is exhausted:
//! - a [`FunctionalTest`] drives the system under one execution's [`FaultPlan`](dei_propagator::FaultPlan)
//!   (its [`TestRun`] handle carries the plan and answers which faults were injected, for conditional
//!   assertions);
//! - a [`SpanSource`] tells the search which RPCs the execution issued: [`InMemorySpans`] reads the
//!   OpenTelemetry SDK's in-memory exporter for in-process services, [`Recorder`] is filled by simulated
//!   programs ([`model`]), [`CollectorSpans`] reads `dei-collector`'s API for services in other processes;
//! - the [`Search`] plans faults on observed indexes, at most one new fault per execution, never on an
//!   ancestor of a planned fault and never where a fault could become unreachable, and reports executions
//!   whose effective fault set repeats an earlier one, and those that did not carry out their plan (planned
//!   faults not injected), whose spans did not settle or whose spans the collector dropped (incomplete)
//!   ([`Report`], JSON and terminal, replayable; a replay that does not inject its whole plan is an error,
//!   [`SearchError::Unreached`]);
//! - the brute-force [`Oracle`] runs every combination of observed indexes, to check that the search is
//!   complete and non-redundant ([`oracle`] has the example that checks a search against it);
//! - [`SearchOptions::parallelism`] runs several executions at once, each its own root, plan and trace
//!   ([`SpanSource::execution`], [`SpanRouter`]; a test can be [serial-only](FunctionalTest::serial_only));
//! - for CI: [`Report::write_junit`] ([`junit`]) and [`Search::assert_exhaustive`] ([`assert`](mod@assert)), which fails
//!   a `cargo test` with one block per failing execution and a replay command.
//!
//! With feature `testing`, `testing::in_process_spans` sets up the span source for services in the test's
//! process in one call. A first search from start to finish, with HTTP services, the layers and the oracle's
//! check, is in the workspace's `docs/sfit.md` (section 0), compiled and run as a doc test.
//!
//! # Example
//! The paper's Fig. 2 as a simulated program: exactly the five executions of §3.2.
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use dei_sfit::{model::programs, Recorder, Search, SearchOptions};
//! let fig2 = programs::FIG2;
//! let recorder = Recorder::new();
//! let options = SearchOptions { catalog: fig2.catalog(), ..SearchOptions::default() };
//! let report = Search::new(options, recorder.clone()).run(&fig2.test(&recorder)).await.unwrap();
//! assert_eq!(report.executions.len(), 5);
//! assert!(report.failing().is_empty() && report.redundant().is_empty());
//! # }
//! ```

pub mod assert;
pub mod catalog;
pub mod junit;
pub mod model;
pub mod observation;
pub mod oracle;
pub mod report;
pub mod search;
pub mod source;
pub mod test;
#[cfg(feature = "testing")]
pub mod testing;

/// `docs/sfit.md`, compiled (and its complete example run) as doc tests: its snippets stay true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/sfit.md")]
pub struct SfitGuide;

/// `dei-sfit/README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;

#[cfg(feature = "testing")]
pub use assert::assert_exhaustive;
pub use assert::check_exhaustive;
pub use catalog::FaultCatalog;
pub use junit::ReplayCommand;
pub use observation::{FaultSet, Observation, ObservedRpc, Outcome};
pub use oracle::{Oracle, OracleError, OracleResult};
pub use report::{ExecutionRecord, Report, TestOutcome};
pub use search::{Deviation, Progress, Reduction, Search, SearchError, SearchOptions, Strategy, Unreached};
pub use source::collector::CollectorSpans;
pub use source::{ExecutionKey, InMemorySpans, Recorder, Settled, SourceError, SpanRouter, SpanSource};
pub use test::{FunctionalTest, PlannedFault, TestRun, Verdict, test_fn};
