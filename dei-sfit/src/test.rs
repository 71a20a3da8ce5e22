//! Functional tests: what the search reruns under each fault plan.

use crate::catalog::Pattern;
use crate::observation::ObservedRpc;
use crate::source::{ExecutionKey, SourceError, SpanSource};
use dei_propagator::{DeiContextExt, Fault, FaultPlan, Index, Instantiation, RequestScope};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;

/// A functional test's verdict: `Ok(())` passes, `Err(message)` fails.
pub type Verdict = Result<(), String>;

/// One planned fault, with the signature of the RPC it targets (for reports and conditional assertions).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PlannedFault {
    /// The target's index.
    pub index: Index,
    /// The fault.
    pub fault: Fault,
    /// The target's signature, when known.
    #[serde(default)]
    pub signature: String,
}

/// The handle a functional test gets for one execution: the fault plan, the context to run under, and the
/// faults injected so far (for conditional assertions).
#[derive(Clone)]
pub struct TestRun {
    inner: Arc<RunInner>,
}

struct RunInner {
    number: usize,
    planned: Vec<PlannedFault>,
    plan: FaultPlan,
    instantiation: Instantiation,
    source: Arc<dyn SpanSource>,
    key: Option<ExecutionKey>,
}

impl TestRun {
    /// A handle for execution `number` of `planned` under `instantiation`, observed through `source`.
    pub fn new(
        number: usize,
        planned: Vec<PlannedFault>,
        instantiation: Instantiation,
        source: Arc<dyn SpanSource>,
    ) -> Self {
        let plan = FaultPlan::new(planned.iter().map(|p| (p.index.clone(), p.fault)).collect());
        TestRun {
            inner: Arc::new(RunInner {
                number,
                planned,
                plan,
                instantiation,
                source,
                key: None,
            }),
        }
    }

    /// [`new`](TestRun::new) for one execution of a parallel search: `source` is the execution's own
    /// ([`SpanSource::execution`]) and `key` names it.
    pub fn for_execution(
        key: ExecutionKey,
        planned: Vec<PlannedFault>,
        instantiation: Instantiation,
        source: Arc<dyn SpanSource>,
    ) -> Self {
        let plan = FaultPlan::new(planned.iter().map(|p| (p.index.clone(), p.fault)).collect());
        TestRun {
            inner: Arc::new(RunInner {
                number: key.number,
                planned,
                plan,
                instantiation,
                source,
                key: Some(key),
            }),
        }
    }

    /// The execution's key in a parallel search (its trace); `None` when executions run one at a time. A
    /// functional test that keeps state of its own across executions can key it by this (see
    /// [`FunctionalTest::serial_only`]).
    pub fn execution_key(&self) -> Option<ExecutionKey> {
        self.inner.key
    }

    /// The execution's number in its search (1 is the fault-free run). In a parallel search it is the order in
    /// which executions were started; the report renumbers them in canonical order.
    pub fn number(&self) -> usize {
        self.inner.number
    }

    /// The fault plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.inner.plan
    }

    /// The planned faults with their targets' signatures.
    pub fn planned(&self) -> &[PlannedFault] {
        &self.inner.planned
    }

    /// The instantiation indexes are computed under.
    pub fn instantiation(&self) -> &Instantiation {
        &self.inner.instantiation
    }

    /// The context to issue the test's requests under: the current context with a root [`RequestScope`]
    /// under the instantiation and the fault plan (and what the span source adds, such as the execution's
    /// trace: [`SpanSource::execution_context`]). Attach it (or use `FutureExt::with_context`) around the
    /// client calls the test makes.
    pub fn context(&self) -> opentelemetry::Context {
        let cx = opentelemetry::Context::current()
            .with_dei_scope(RequestScope::root(self.inner.instantiation.clone()))
            .with_fault_plan(self.inner.plan.clone());
        self.inner.source.execution_context(cx)
    }

    /// True when the plan targets an RPC whose signature matches `pattern` (`*` wildcards).
    pub fn planned_on(&self, pattern: &str) -> bool {
        let p = Pattern::new(pattern);
        self.inner.planned.iter().any(|f| p.matches(&f.signature))
    }

    /// Every RPC observed so far in this execution (those that completed, for span-based sources).
    pub async fn observed(&self) -> Result<Vec<ObservedRpc>, SourceError> {
        let mut obs = self.inner.source.collect().await?;
        obs.finalize();
        Ok(obs.rpcs)
    }

    /// The RPCs that had a fault injected so far in this execution.
    pub async fn injected(&self) -> Result<Vec<ObservedRpc>, SourceError> {
        let obs = self.inner.source.collect().await?;
        Ok(obs.rpcs.into_iter().filter(|r| r.fault.is_some()).collect())
    }

    /// True when a fault was injected so far on an RPC whose signature matches `pattern`.
    pub async fn injected_on(&self, pattern: &str) -> bool {
        let p = Pattern::new(pattern);
        self.injected()
            .await
            .is_ok_and(|rpcs| rpcs.iter().any(|r| p.matches(&r.signature)))
    }

    /// True when any fault was injected so far.
    pub async fn any_injected(&self) -> bool {
        self.injected().await.is_ok_and(|rpcs| !rpcs.is_empty())
    }
}

/// A functional test: drives the system under one execution's plan and passes or fails.
///
/// # Running in parallel
/// With [`SearchOptions::parallelism`](crate::SearchOptions::parallelism) above 1, several executions of the
/// test run at once against the same services. The test must then keep no mutable state shared between
/// executions (counters, a fixture row every execution writes, a mock's expectations), or key such state by
/// the execution ([`TestRun::execution_key`], or [`TestRun::plan`]); and it must issue its requests under
/// [`TestRun::context`], whose trace tells the span source which execution a span belongs to. A test that
/// cannot is declared serial-only ([`serial_only`](FunctionalTest::serial_only), or [`FnTest::serial`]):
/// the search then runs it one execution at a time and says so in the report.
pub trait FunctionalTest: Send + Sync {
    /// The test's name, used in reports.
    fn name(&self) -> &str;
    /// Runs the test once.
    fn run(&self, run: TestRun) -> BoxFuture<'static, Verdict>;
    /// True when executions of this test must not overlap (the search ignores its parallelism for it).
    fn serial_only(&self) -> bool {
        false
    }
}

/// A functional test made from an async closure.
pub struct FnTest<F> {
    name: String,
    f: F,
    serial: bool,
}

impl<F> FnTest<F> {
    /// Declares the test serial-only: its executions never overlap, whatever the search's parallelism.
    pub fn serial(mut self) -> Self {
        self.serial = true;
        self
    }
}

/// Makes a functional test from a name and an async closure taking the [`TestRun`].
///
/// ```
/// let test = dei_sfit::test_fn("always passes", |_run| async { Ok(()) });
/// # use dei_sfit::FunctionalTest;
/// assert_eq!(test.name(), "always passes");
/// ```
pub fn test_fn<F, Fut>(name: impl Into<String>, f: F) -> FnTest<F>
where
    F: Fn(TestRun) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    FnTest {
        name: name.into(),
        f,
        serial: false,
    }
}

impl<F, Fut> FunctionalTest for FnTest<F>
where
    F: Fn(TestRun) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, run: TestRun) -> BoxFuture<'static, Verdict> {
        Box::pin((self.f)(run))
    }

    fn serial_only(&self) -> bool {
        self.serial
    }
}
