//! The exhaustive search (paper §2, "dynamic analysis" and "dynamic reduction").
//!
//! 1. Run the functional test without faults.
//! 2. For each execution, and each RPC it observed without a fault, schedule a new plan: the faults this
//!    execution injected *before that RPC completed* (excluding the RPC's own descendants), plus one fault on
//!    the RPC, once per fault type the catalog gives its signature. Faults that were injected only after the
//!    RPC completed are left out, since failing the RPC may change whether they are reached: every scheduled
//!    plan is therefore reachable, and its effective fault set is the plan itself.
//! 3. Never plan a fault on an RPC whose index is a prefix of (an ancestor of) another planned fault.
//! 4. Skip plans already scheduled; report any execution whose effective fault set (the faults actually
//!    injected) repeats an earlier one — with deterministic, fine-grained indexes there are none.
//!
//! Options: depth-first or breadth-first order, a maximum number of executions, single-fault mode, and
//! service-encapsulation reduction (§2): a plan with faults both inside and outside the subtree of some RPC
//! `p` is skipped when an earlier execution showed what `p` returns under exactly the inside faults and
//! another already ran the outside faults with `p` returning that.

use crate::catalog::FaultCatalog;
use crate::observation::{FaultSet, Observation, ObservedRpc, Outcome, describe_set};
use crate::report::{ExecutionRecord, Report, SkippedPlan, TestOutcome, Witness};
use crate::source::{ExecutionKey, Settled, SourceError, SpanSource};
use crate::test::{FunctionalTest, PlannedFault, TestRun};
use dei_propagator::{Fault, FaultPlan, Index, Instantiation, PathMode};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The order in which scheduled plans run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Newest plan first (Filibuster's order).
    DepthFirst,
    /// Oldest plan first: all single faults before any pair.
    BreadthFirst,
}

/// Dynamic reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    /// Run every reachable plan.
    None,
    /// Service encapsulation (§2): an RPC's callers see its callees' failures only as its own outcome.
    /// Outcomes compare by status (the paper's assumption) or also by response digest when recorded.
    ServiceEncapsulation {
        /// Also compare response digests of successful outcomes.
        compare_responses: bool,
    },
}

/// How progress is shown while the search runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// Nothing.
    Silent,
    /// One line per execution on stderr.
    Stderr,
}

/// Search options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Which components make up indexes in this search.
    pub instantiation: Instantiation,
    /// The instantiation reference indexes are computed under (to judge coarser ones); `None` skips them.
    pub reference: Option<Instantiation>,
    /// Which faults each RPC is tested for.
    pub catalog: FaultCatalog,
    /// Plan order.
    pub strategy: Strategy,
    /// Stop after this many executions.
    pub max_executions: Option<usize>,
    /// Plans of one fault only.
    pub single_fault: bool,
    /// Dynamic reduction.
    pub reduction: Reduction,
    /// Never plan a fault on an ancestor (index prefix) of a planned fault. On by default; off reproduces
    /// Filibuster's scheduling, which runs such plans (their descendant's fault cannot be reached).
    pub prune_ancestors: bool,
    /// Fail an execution whose test runs longer than this.
    pub timeout: Option<Duration>,
    /// Progress display.
    pub progress: Progress,
    /// Run up to this many executions at once (0 and 1: one at a time). Each execution is its own root with
    /// its own fault plan and trace; the span source must tell executions apart
    /// ([`SpanSource::execution`]), and the functional test must allow it ([`FunctionalTest::serial_only`]).
    /// Otherwise the search runs one at a time and says why in the report's notes ([`Report::notes`]).
    #[serde(default = "one")]
    pub parallelism: usize,
}

fn one() -> usize {
    1
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            instantiation: Instantiation::dei(),
            reference: Some(Instantiation::dei()),
            catalog: FaultCatalog::default(),
            strategy: Strategy::DepthFirst,
            max_executions: None,
            single_fault: false,
            reduction: Reduction::None,
            prune_ancestors: true,
            timeout: Some(Duration::from_secs(60)),
            progress: Progress::Silent,
            parallelism: 1,
        }
    }
}

/// Why a search could not go on.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The span source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A report's execution does not exist or its plan does not decode.
    #[error("cannot replay: {0}")]
    Replay(String),
    /// A replay was given a report written by another functional test: its plans name that test's RPCs, so
    /// replaying them under this test would carry out nothing and point at the wrong causes.
    #[error(
        "cannot replay: the report was written by test `{report_test}`, and the test being replayed is \
         `{test}` (a report's plans name its own test's RPCs)"
    )]
    WrongTest {
        /// The test named in the report (`Report::test`).
        report_test: String,
        /// The test being replayed ([`FunctionalTest::name`]).
        test: String,
    },
    /// A report whose records contradict each other (hand-edited or corrupt): refused before a replay runs,
    /// since it cannot say which plan the execution ran.
    #[error("cannot replay: the report is inconsistent: execution #{execution}, field `{field}`: {why}")]
    Inconsistent {
        /// The execution's number.
        execution: usize,
        /// The field that disagrees.
        field: &'static str,
        /// How.
        why: String,
    },
    /// A report file could not be read or written.
    #[error("report file: {0}")]
    Io(#[from] std::io::Error),
    /// A report file is longer than [`Report::load`] reads ([`MAX_REPORT_BYTES`](crate::report::MAX_REPORT_BYTES),
    /// 256 MiB).
    #[error(
        "report file {path} is longer than the limit of {max} bytes ({} MiB) that a report is read up to",
        max >> 20
    )]
    ReportTooLarge {
        /// The file.
        path: String,
        /// The limit, in bytes.
        max: u64,
    },
    /// A report file is not valid JSON.
    #[error("report JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The catalog holds a fault no service carries out (not [`Fault::is_valid`](dei_propagator::Fault::is_valid):
    /// a gRPC code outside 1–16, an HTTP status outside 200–599, a latency not of whole milliseconds up to
    /// [`MAX_LATENCY_MS`](dei_propagator::fault::MAX_LATENCY_MS)): refused by [`Search::run`] before anything runs.
    /// The propagator sends no plan holding an out-of-range code or status, and a latency goes out shortened, so
    /// the search would record the fault as never injected and blame the services' configuration.
    #[error(
        "invalid fault {} in the catalog's rule #{rule} (pattern `{pattern}`): no service carries it out as \
         planned (a gRPC code must be 1-16 and an HTTP status 200-599, or no plan holding it is sent; a latency \
         is sent shortened to whole milliseconds up to {max_latency} ms); the search was not started",
        fault_text(fault),
        max_latency = dei_propagator::fault::MAX_LATENCY_MS
    )]
    InvalidFault {
        /// The fault.
        fault: Fault,
        /// Its rule's position in [`FaultCatalog::rules`].
        rule: usize,
        /// Its rule's pattern.
        pattern: String,
    },
    /// A replay did not inject every planned fault: the plan was not carried out, whatever the outcome.
    #[error("{0}")]
    Unreached(Box<Unreached>),
}

/// A fault as the error names it: its wire form (`g17`, `h100`), or for a latency its exact length, which the
/// wire form would shorten.
fn fault_text(fault: &Fault) -> String {
    match fault {
        Fault::Latency(d) => format!("`latency {d:?}`"),
        other => format!("`{other}`"),
    }
}

/// How a replay's run differed from the execution the report recorded, beyond planned faults it did not
/// inject ([`Report::deviations`]): each means the replay tested another fault set than the recorded one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deviation {
    /// A fault was injected that the plan does not name (a request carried another plan).
    Extra(PlannedFault),
    /// A planned index was injected on more than one RPC, which the recorded execution was not.
    MultiplyInjected(Index),
    /// A fault hit an RPC with another signature than the one the report recorded for its index.
    OtherSignature {
        /// The fault, with the signature of the RPC it hit in the replay.
        fault: PlannedFault,
        /// The signature the report recorded.
        recorded: String,
    },
    /// The same indexes were injected, but on other RPCs by reference index (full DEI): a coarser
    /// instantiation's index named another call (another payload, say) in the replay.
    OtherReference {
        /// The recorded effective faults by reference index.
        recorded: Vec<(Index, dei_propagator::Fault)>,
        /// The replay's.
        replayed: Vec<(Index, dei_propagator::Fault)>,
    },
}

impl std::fmt::Display for Deviation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs = |v: &[(Index, dei_propagator::Fault)]| {
            v.iter().map(|(i, x)| format!("{i}:{x}")).collect::<Vec<_>>().join(", ")
        };
        match self {
            Deviation::Extra(p) => write!(
                f,
                "injected {} on {} at index {}, which the plan does not name",
                p.fault, p.signature, p.index
            ),
            Deviation::MultiplyInjected(i) => write!(
                f,
                "index {i} was injected on more than one RPC (the recorded execution injected it once)"
            ),
            Deviation::OtherSignature { fault, recorded } => write!(
                f,
                "{} at index {} hit {}, where the report recorded {recorded}",
                fault.fault, fault.index, fault.signature
            ),
            Deviation::OtherReference { recorded, replayed } => write!(
                f,
                "the faults hit other RPCs by reference index: recorded [{}], replayed [{}]",
                pairs(recorded),
                pairs(replayed)
            ),
        }
    }
}

/// A replay that did not carry out its plan: the planned faults no RPC of the run had the index of, and how
/// else the run differed from the recorded execution. Its [`Display`](std::fmt::Display) names them and the
/// likely causes.
#[derive(Clone, Debug)]
pub struct Unreached {
    /// The replayed execution's record (its `unreached` lists the faults; its outcome is the test's verdict,
    /// which does not test the plan).
    pub record: ExecutionRecord,
    /// The instantiation the report was recorded with.
    pub instantiation: String,
    /// How else the run differed from the recorded execution ([`Report::deviations`]).
    pub deviations: Vec<Deviation>,
}

impl std::fmt::Display for Unreached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.record;
        if !self.deviations.is_empty() {
            writeln!(
                f,
                "replay of execution #{} did not run the recorded execution: {} difference(s) (the test said \
                 {}, which does not test the recorded plan):",
                r.number,
                self.deviations.len(),
                if r.outcome.passed() { "pass" } else { "fail" },
            )?;
            for d in &self.deviations {
                writeln!(f, "  {d}")?;
            }
            write!(
                f,
                "Likely causes: non-determinism in the system under test (an RPC whose payload or call order \
                 changes between runs), a test that retries or repeats calls, requests carrying another \
                 execution's plan (a stale plan), or a different build"
            )?;
            if r.unreached.is_empty() {
                return Ok(());
            }
            writeln!(f, ";")?;
        }
        writeln!(
            f,
            "replay of execution #{} did not carry out its plan: {} of {} planned fault(s) were not injected \
             (the test said {}, which does not test the plan):",
            r.number,
            r.unreached.len(),
            r.plan.len(),
            if r.outcome.passed() { "pass" } else { "fail" },
        )?;
        for p in &r.unreached {
            let sig = if p.signature.is_empty() {
                "?"
            } else {
                p.signature.as_str()
            };
            writeln!(f, "  {} on {sig} at index {}", p.fault, p.index)?;
        }
        writeln!(
            f,
            "The indexes did not match: none of the {} RPC(s) this run observed had these indexes. Likely causes:",
            r.rpcs.len()
        )?;
        writeln!(
            f,
            "  - a different build: the binary or its sources changed since the report was written (an index \
             digests the call stack's source locations);"
        )?;
        writeln!(
            f,
            "  - a binary whose debug info was stripped or split off, run with another DEI_WORKSPACE_ROOT than the \
             recorded run (its frames keep absolute paths; otherwise neither the working directory nor the \
             binary's location plays a part);"
        )?;
        writeln!(
            f,
            "  - a different instantiation: the report was recorded under `{}`, and the services must index \
             RPCs the same way;",
            self.instantiation
        )?;
        writeln!(
            f,
            "  - a request scope lost by a spawn: work started with tokio::spawn (without \
             dei_propagator::spawn or .in_current_span()) runs as a new root, outside the plan;"
        )?;
        write!(
            f,
            "  - non-determinism in the system under test: an RPC whose payload or call path changes between runs"
        )?;
        if let Some(what) = &r.unsettled {
            write!(f, ";\n  - spans that did not arrive: {what}")?;
        }
        if let Some(incomplete) = r.incomplete() {
            write!(f, ";\n  - spans that were not recorded: {incomplete}")?;
        }
        Ok(())
    }
}

/// The search engine: options and a span source.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// use dei_sfit::model::Caller;
/// use dei_sfit::{Recorder, Search, SearchOptions, FaultCatalog, test_fn};
/// use dei_propagator::Fault;
///
/// // Fig. 1 of the paper as a simulated program: A calls B's echo twice, with a fallback each time.
/// let rec = Recorder::new();
/// let r = rec.clone();
/// let test = test_fn("fig1", move |run| {
///     let a = Caller::root(&run, &r);
///     async move {
///         let hello = a.call("B/echo", "Hello", &[3, 10], |_| async { Ok("Hello") }).await.unwrap_or("Hello");
///         let world = a.call("B/echo", "World", &[4, 10], |_| async { Ok("World") }).await.unwrap_or("World");
///         if format!("{hello} {world}") == "Hello World" { Ok(()) } else { Err("wrong".into()) }
///     }
/// });
/// let options = SearchOptions { catalog: FaultCatalog::single(Fault::Connection), ..SearchOptions::default() };
/// let report = Search::new(options, rec).run(&test).await.unwrap();
/// assert_eq!(report.executions.len(), 4); // {}, {hello}, {world}, {hello, world}
/// assert!(report.redundant().is_empty());
/// # }
/// ```
#[derive(Clone)]
pub struct Search {
    options: SearchOptions,
    source: Arc<dyn SpanSource>,
}

/// A test's task, aborted when dropped: an abandoned execution does not keep running.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), String>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The search's progress: the plans queued and seen, the executions done, what they taught.
#[derive(Default)]
struct State {
    queue: VecDeque<(FaultSet, Option<usize>)>,
    scheduled: HashSet<FaultSet>,
    executions: Vec<ExecutionRecord>,
    skipped: Vec<SkippedPlan>,
    know: Knowledge,
    truncated: bool,
    /// reference effective fault set → the number of the first execution with it
    by_reference: HashMap<std::collections::BTreeSet<(Index, dei_propagator::Fault)>, usize>,
}

/// What the search learned about one RPC across executions.
#[derive(Default)]
struct Knowledge {
    /// index → parent index, first seen.
    parents: HashMap<Index, Option<Index>>,
    /// index → signature.
    signatures: HashMap<Index, String>,
    /// (RPC, faults injected in its subtree) → the RPC's outcome.
    subtree_outcomes: HashMap<(Index, FaultSet), Outcome>,
    /// effective fault set → execution position.
    by_effective: HashMap<FaultSet, usize>,
}

impl Search {
    /// A search with these options reading spans from `source`.
    pub fn new(options: SearchOptions, source: impl SpanSource + 'static) -> Self {
        Search {
            options,
            source: Arc::new(source),
        }
    }

    /// A search over a shared source.
    pub fn with_shared_source(options: SearchOptions, source: Arc<dyn SpanSource>) -> Self {
        Search { options, source }
    }

    /// The span source.
    pub fn source(&self) -> Arc<dyn SpanSource> {
        self.source.clone()
    }

    /// The options.
    pub fn options(&self) -> &SearchOptions {
        &self.options
    }

    /// Runs `test` once under `planned` and records what happened. `number` only labels the execution.
    pub async fn execute(
        &self,
        test: &dyn FunctionalTest,
        number: usize,
        planned: Vec<PlannedFault>,
    ) -> Result<ExecutionRecord, SearchError> {
        self.execute_in(self.source.clone(), None, test, number, planned).await
    }

    /// [`execute`](Search::execute) reading spans from `source`: one execution's own in a parallel search
    /// (named by `key`), the search's otherwise.
    async fn execute_in(
        &self,
        source: Arc<dyn SpanSource>,
        key: Option<ExecutionKey>,
        test: &dyn FunctionalTest,
        number: usize,
        planned: Vec<PlannedFault>,
    ) -> Result<ExecutionRecord, SearchError> {
        let started = Instant::now();
        source.begin().await?;
        let run = match key {
            Some(key) => {
                TestRun::for_execution(key, planned.clone(), self.options.instantiation.clone(), source.clone())
            }
            None => TestRun::new(
                number,
                planned.clone(),
                self.options.instantiation.clone(),
                source.clone(),
            ),
        };
        let test_started = Instant::now();
        let fut = test.run(run);
        // aborted when this execution is abandoned (the search failed, or its future was dropped)
        let mut task = AbortOnDrop(tokio::spawn(fut));
        let verdict = match self.options.timeout {
            Some(t) => match tokio::time::timeout(t, &mut task.0).await {
                Ok(joined) => joined,
                Err(_) => {
                    // a timed-out test does not keep running beside the next executions
                    task.0.abort();
                    Ok(Err(format!("timed out after {t:?}")))
                }
            },
            None => (&mut task.0).await,
        };
        drop(task);
        let outcome = match verdict {
            Ok(Ok(())) => TestOutcome::Pass,
            Ok(Err(message)) => TestOutcome::Fail { message },
            Err(join) => TestOutcome::Fail {
                message: format!("test panicked: {join}"),
            },
        };
        let test_time = test_started.elapsed();
        let unsettled = match source.settle().await? {
            Settled::Complete => None,
            Settled::TimedOut(what) => Some(what),
        };
        let mut obs = source.collect().await?;
        // preliminary indexes become final before anything is scheduled from this execution (§4.2)
        obs.finalize();
        match &self.options.reference {
            // under its own instantiation an RPC's reference index is the index it ran under (also for stream
            // messages, whose invocation components are not on their span events)
            Some(reference) if *reference == self.options.instantiation => {
                for rpc in &mut obs.rpcs {
                    rpc.reference = Some(rpc.index.clone());
                }
            }
            Some(reference) => obs.compute_reference(reference),
            None => {}
        }
        let effective = obs.effective();
        let plan_set: FaultSet = planned.iter().map(|p| (p.index.clone(), p.fault)).collect();
        let unreached: Vec<PlannedFault> = planned
            .iter()
            .filter(|p| !effective.contains(&(p.index.clone(), p.fault)))
            .cloned()
            .collect();
        let mut hits: HashMap<&Index, usize> = HashMap::new();
        for r in obs.rpcs.iter().filter(|r| r.fault.is_some()) {
            *hits.entry(&r.index).or_default() += 1;
        }
        let mut multiply_injected: Vec<Index> = hits
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(i, _)| i.clone())
            .collect();
        multiply_injected.sort();
        let sig = |i: &Index| {
            obs.rpcs
                .iter()
                .find(|r| &r.index == i)
                .map(|r| r.signature.clone())
                .unwrap_or_default()
        };
        let to_planned = |set: &FaultSet| -> Vec<PlannedFault> {
            set.iter()
                .map(|(i, f)| PlannedFault {
                    index: i.clone(),
                    fault: *f,
                    signature: sig(i),
                })
                .collect()
        };
        let effective_reference = obs.effective_reference().map(|s| s.into_iter().collect());
        let total = started.elapsed();
        Ok(ExecutionRecord {
            number,
            plan_wire: FaultPlan::new(plan_set.iter().cloned().collect()).encode(),
            plan: planned,
            effective: to_planned(&effective),
            effective_reference,
            unreached,
            multiply_injected,
            outcome,
            unsettled,
            redundant_with: None,
            redundant_by_reference_with: None,
            scheduled_by: None,
            in_flight_redundant: None,
            malformed_spans: obs.malformed,
            spans_dropped: obs.spans_dropped,
            traces: obs.traces.into_iter().collect(),
            rpcs: obs.rpcs,
            test_us: test_time.as_micros() as u64,
            collect_us: total.saturating_sub(test_time).as_micros() as u64,
            overhead_us: total.saturating_sub(test_time).as_micros() as u64,
        })
    }

    /// Runs the search for `test` until the fault space is exhausted or the execution limit is reached.
    ///
    /// With [`SearchOptions::parallelism`] above 1 (and a span source that tells executions apart and a test
    /// that is not [serial-only](FunctionalTest::serial_only)), up to that many executions run at once; the
    /// report then lists them in canonical order (see [`Report::canonical_order`]).
    ///
    /// A catalog holding a fault no service carries out ([`FaultCatalog::invalid_fault`]) is refused with
    /// [`SearchError::InvalidFault`] before anything runs.
    pub async fn run(&self, test: &dyn FunctionalTest) -> Result<Report, SearchError> {
        let opts = &self.options;
        if let Some((rule, fault)) = opts.catalog.invalid_fault() {
            return Err(SearchError::InvalidFault {
                fault,
                rule,
                pattern: opts.catalog.rules[rule].pattern.as_str().to_string(),
            });
        }
        let mut state = State::default();
        state.queue.push_back((FaultSet::new(), None));
        state.scheduled.insert(FaultSet::new());
        let mut notes = Vec::new();
        let mut parallelism = opts.parallelism.max(1);
        if parallelism > 1 && test.serial_only() {
            notes.push(format!(
                "parallelism {parallelism} requested, executions ran one at a time: the functional test is \
                 declared serial-only"
            ));
            parallelism = 1;
        }
        if parallelism > 1 && self.source.execution(&ExecutionKey::new(0)).is_none() {
            let why = format!(
                "parallelism {parallelism} requested, executions ran one at a time: {}",
                self.source.why_not_parallel()
            );
            tracing::warn!("dei-sfit: {why}");
            notes.push(why);
            parallelism = 1;
        }
        let mut unattributed = None;
        if parallelism == 1 {
            self.run_sequential(test, &mut state).await?;
        } else {
            let before = self.source.unattributed();
            self.run_parallel(test, &mut state, parallelism).await?;
            unattributed = Some(before.zip(self.source.unattributed()).map(|(b, a)| a.saturating_sub(b)));
        }
        let State {
            queue,
            executions,
            skipped,
            truncated,
            ..
        } = state;
        let mut report = Report::new(test.name(), opts.clone(), executions, skipped, truncated, queue.len());
        report.notes = notes;
        report.parallelism_used = parallelism;
        if let Some(counted) = unattributed {
            report.record_unattributed(counted);
        }
        if parallelism > 1 {
            report.canonical_order();
        }
        Ok(report)
    }

    /// The next plan to run, in the strategy's order; `None` when the queue is empty or the limit is reached
    /// (then `truncated` is set and the plan stays queued).
    fn next_plan(&self, state: &mut State, started: usize) -> Option<(FaultSet, Option<usize>)> {
        let opts = &self.options;
        if state.queue.is_empty() {
            return None;
        }
        if opts.max_executions.is_some_and(|m| started >= m) {
            state.truncated = true;
            return None;
        }
        match opts.strategy {
            Strategy::DepthFirst => state.queue.pop_back(),
            Strategy::BreadthFirst => state.queue.pop_front(),
        }
    }

    fn planned_faults(&self, plan: &FaultSet, know: &Knowledge) -> Vec<PlannedFault> {
        plan.iter()
            .map(|(i, f)| PlannedFault {
                index: i.clone(),
                fault: *f,
                signature: know.signatures.get(i).cloned().unwrap_or_default(),
            })
            .collect()
    }

    async fn run_sequential(&self, test: &dyn FunctionalTest, state: &mut State) -> Result<(), SearchError> {
        while let Some((plan, from)) = self.next_plan(state, state.executions.len()) {
            let planned = self.planned_faults(&plan, &state.know);
            let number = state.executions.len() + 1;
            let record = self.execute(test, number, planned).await?;
            self.absorb(test, state, record, &plan, from, None);
        }
        Ok(())
    }

    /// Up to `n` executions at once: whenever one finishes, its extensions are queued and the next plans
    /// start, in the strategy's order, until `n` run again.
    async fn run_parallel(&self, test: &dyn FunctionalTest, state: &mut State, n: usize) -> Result<(), SearchError> {
        use futures::stream::{FuturesUnordered, StreamExt as _};
        let mut running = FuturesUnordered::new();
        let mut started = 0usize;
        loop {
            while running.len() < n {
                let Some((plan, from)) = self.next_plan(state, started) else {
                    break;
                };
                // a plan that became redundant while queued (service encapsulation) is skipped, as it would
                // have been had the knowledge been there when it was scheduled
                if let Some(witness) = self.witness(&plan, &state.know, &state.executions, None) {
                    state.skipped.push(SkippedPlan {
                        plan: describe_set(&plan),
                        witness,
                    });
                    continue;
                }
                started += 1;
                let key = ExecutionKey::new(started);
                let Some(source) = self.source.execution(&key) else {
                    // dropping `running` aborts the executions still in flight (AbortOnDrop)
                    drop(running);
                    return Err(SearchError::Source(SourceError::Backend(
                        "the span source stopped attributing spans to executions".into(),
                    )));
                };
                let planned = self.planned_faults(&plan, &state.know);
                running.push(async move {
                    let record = self.execute_in(source, Some(key), test, started, planned).await;
                    (record, plan, from)
                });
            }
            let Some((record, plan, from)) = running.next().await else {
                break;
            };
            let record = match record {
                Ok(record) => record,
                Err(e) => {
                    // the others are abandoned: dropping them aborts their tests (AbortOnDrop)
                    drop(running);
                    return Err(e);
                }
            };
            // was the plan made redundant by an execution that finished while this one ran?
            let late = self.witness(&plan, &state.know, &state.executions, None);
            self.absorb(test, state, record, &plan, from, late);
        }
        Ok(())
    }

    /// Service encapsulation's witness that `plan` is redundant, when that reduction is on.
    fn witness(
        &self,
        plan: &FaultSet,
        know: &Knowledge,
        executions: &[ExecutionRecord],
        current: Option<&ExecutionRecord>,
    ) -> Option<Witness> {
        match self.options.reduction {
            Reduction::ServiceEncapsulation { compare_responses } => {
                self.encapsulated(plan, know, executions, current, compare_responses)
            }
            Reduction::None => None,
        }
    }

    /// Records a finished execution: its redundancy, what it teaches, the plans it schedules.
    fn absorb(
        &self,
        test: &dyn FunctionalTest,
        state: &mut State,
        mut record: ExecutionRecord,
        plan: &FaultSet,
        from: Option<usize>,
        in_flight_redundant: Option<Witness>,
    ) {
        let opts = &self.options;
        let sched_started = Instant::now();
        record.scheduled_by = from;
        record.in_flight_redundant = in_flight_redundant;
        let number = record.number;
        let effective: FaultSet = record.effective.iter().map(|p| (p.index.clone(), p.fault)).collect();
        if let Some(&first) = state.know.by_effective.get(&effective) {
            record.redundant_with = Some(state.executions[first].number);
        }
        // hidden redundancy: the same RPCs failed, judged by reference index
        if let Some(reference) = record.reference_set() {
            match state.by_reference.get(&reference) {
                Some(&first) if record.redundant_with.is_none() => record.redundant_by_reference_with = Some(first),
                Some(_) => {}
                None => {
                    state.by_reference.insert(reference, number);
                }
            }
        }
        let obs = Observation {
            rpcs: record.rpcs.clone(),
            ..Observation::default()
        };
        self.learn(&mut state.know, &obs, &effective, state.executions.len());
        for new_plan in self.extensions(&obs, &state.know) {
            if !state.scheduled.insert(new_plan.clone()) {
                continue;
            }
            if let Some(witness) = self.witness(&new_plan, &state.know, &state.executions, Some(&record)) {
                state.skipped.push(SkippedPlan {
                    plan: describe_set(&new_plan),
                    witness,
                });
                continue;
            }
            state.queue.push_back((new_plan, Some(number)));
        }
        record.overhead_us += sched_started.elapsed().as_micros() as u64;
        if opts.progress == Progress::Stderr {
            eprintln!(
                "sfit [{}] #{:<4} {:<5} plan {} -> {}{}{}{} (queued {})",
                test.name(),
                number,
                if record.outcome.passed() { "pass" } else { "FAIL" },
                describe_set(plan),
                describe_set(&effective),
                if record.unreached.is_empty() {
                    String::new()
                } else {
                    format!(" UNREACHED {}", record.unreached.len())
                },
                match (record.redundant_with, record.redundant_by_reference_with) {
                    (Some(r), _) => format!(" REDUNDANT with #{r}"),
                    (None, Some(r)) => format!(" REDUNDANT by reference index with #{r}"),
                    (None, None) => String::new(),
                },
                if record.in_flight_redundant.is_some() {
                    " (redundant once in flight)"
                } else {
                    ""
                },
                state.queue.len()
            );
        }
        state.executions.push(record);
    }

    fn learn(&self, know: &mut Knowledge, obs: &Observation, effective: &FaultSet, position: usize) {
        know.by_effective.entry(effective.clone()).or_insert(position);
        for (i, r) in obs.rpcs.iter().enumerate() {
            let parent = r.parent.and_then(|p| obs.rpcs.get(p)).map(|p| p.index.clone());
            know.parents.entry(r.index.clone()).or_insert(parent);
            know.signatures
                .entry(r.index.clone())
                .or_insert_with(|| r.signature.clone());
            if matches!(r.outcome, Outcome::Unknown) || r.fault.is_some() {
                continue;
            }
            let sub: FaultSet = obs
                .rpcs
                .iter()
                .enumerate()
                .filter(|(j, q)| q.fault.is_some() && obs.is_descendant(*j, i))
                .filter_map(|(_, q)| q.fault.map(|f| (q.index.clone(), f)))
                .collect();
            know.subtree_outcomes
                .entry((r.index.clone(), sub))
                .or_insert_with(|| r.outcome.clone());
        }
    }

    /// The plans that extend one execution by one fault.
    fn extensions(&self, obs: &Observation, know: &Knowledge) -> Vec<FaultSet> {
        let opts = &self.options;
        let path_mode = opts.instantiation.path == PathMode::Path;
        let mut out = Vec::new();
        for (i, r) in obs.rpcs.iter().enumerate() {
            if r.fault.is_some() || !r.targetable() {
                continue;
            }
            let before: FaultSet = obs
                .rpcs
                .iter()
                .enumerate()
                .filter(|(j, q)| q.fault.is_some() && q.start < r.end && !obs.is_descendant(*j, i))
                .filter_map(|(_, q)| q.fault.map(|f| (q.index.clone(), f)))
                .collect();
            if opts.single_fault && !before.is_empty() {
                continue;
            }
            if opts.prune_ancestors
                && before
                    .iter()
                    .any(|(q, _)| self.is_ancestor(&r.index, q, know, path_mode))
            {
                continue;
            }
            for fault in opts.catalog.faults_for(&r.signature) {
                let mut plan = before.clone();
                plan.insert((r.index.clone(), fault));
                out.push(plan);
            }
        }
        out
    }

    /// True when `a` is a proper ancestor of `b`: a proper prefix under path indexes, or a recorded parent.
    fn is_ancestor(&self, a: &Index, b: &Index, know: &Knowledge, path_mode: bool) -> bool {
        if a == b {
            return false;
        }
        if path_mode && b.starts_with(a) {
            return true;
        }
        let mut cur = know.parents.get(b).cloned().flatten();
        let mut steps = 0;
        while let Some(p) = cur {
            if &p == a {
                return true;
            }
            steps += 1;
            if steps > know.parents.len() {
                return false;
            }
            cur = know.parents.get(&p).cloned().flatten();
        }
        false
    }

    fn ancestors(&self, index: &Index, know: &Knowledge) -> Vec<Index> {
        let mut out = Vec::new();
        let mut cur = know.parents.get(index).cloned().flatten();
        while let Some(p) = cur {
            if out.contains(&p) || out.len() > know.parents.len() {
                break;
            }
            out.push(p.clone());
            cur = know.parents.get(&p).cloned().flatten();
        }
        out
    }

    /// Service encapsulation: `Some(witness)` when `plan` is redundant.
    fn encapsulated(
        &self,
        plan: &FaultSet,
        know: &Knowledge,
        executions: &[ExecutionRecord],
        current: Option<&ExecutionRecord>,
        compare_responses: bool,
    ) -> Option<Witness> {
        let same = |a: &Outcome, b: &Outcome| match (a, b) {
            (Outcome::Ok { response: x }, Outcome::Ok { response: y }) => !compare_responses || x == y,
            _ => a == b,
        };
        let record_at = |pos: usize| -> Option<&ExecutionRecord> { executions.get(pos).or(current) };
        let mut candidates: Vec<Index> = plan.iter().flat_map(|(i, _)| self.ancestors(i, know)).collect();
        candidates.sort();
        candidates.dedup();
        for p in candidates {
            if plan.iter().any(|(i, _)| i == &p) {
                continue;
            }
            let inside: FaultSet = plan
                .iter()
                .filter(|(i, _)| self.ancestors(i, know).contains(&p))
                .cloned()
                .collect();
            if inside.len() == plan.len() || inside.is_empty() {
                continue;
            }
            let Some(o) = know.subtree_outcomes.get(&(p.clone(), inside.clone())) else {
                continue;
            };
            let outside: FaultSet = plan.difference(&inside).cloned().collect();
            let mut alternatives: Vec<FaultSet> = vec![outside.clone()];
            for f in self
                .options
                .catalog
                .faults_for(know.signatures.get(&p).map(String::as_str).unwrap_or(""))
            {
                let mut alt = outside.clone();
                alt.insert((p.clone(), f));
                alternatives.push(alt);
            }
            for alt in alternatives {
                let Some(&pos) = know.by_effective.get(&alt) else {
                    continue;
                };
                let Some(rec) = record_at(pos) else {
                    continue;
                };
                if rec.rpcs.iter().any(|r| r.index == p && same(&r.outcome, o)) {
                    return Some(Witness {
                        rpc: p.to_string(),
                        outcome: o.to_string(),
                        inside: describe_set(&inside),
                        execution: rec.number,
                        ran: describe_set(&alt),
                    });
                }
            }
        }
        None
    }

    /// Reruns execution `number` of a saved report, with the plan and instantiation recorded there.
    ///
    /// The report must be `test`'s own: one written by another test (its `test` field names another
    /// [`FunctionalTest::name`]) is refused with [`SearchError::WrongTest`] before anything runs, and so is
    /// one whose records contradict each other ([`Report::check_consistent`]). Only the name is compared: a
    /// replay of another test under the same name fails as unreached, since a plan's indexes name the
    /// recorded test's call paths (the fault-free run, which plans nothing, gives that test's verdict).
    ///
    /// A replay that does not inject every planned fault did not carry out the plan: it fails with
    /// [`SearchError::Unreached`], which names the faults and the likely causes, whatever the test's verdict.
    /// So does a replay that ran another fault set than the recorded execution ([`Report::deviations`]): an
    /// injected fault the plan does not name, a planned index hit more than once (and not in the recording),
    /// a fault on an RPC of another signature or reference index than recorded.
    /// [`replay_allowing_unreached`](Search::replay_allowing_unreached) accepts such a run.
    pub async fn replay(
        test: &dyn FunctionalTest,
        report: &Report,
        number: usize,
        source: Arc<dyn SpanSource>,
    ) -> Result<ExecutionRecord, SearchError> {
        let record = Self::replay_allowing_unreached(test, report, number, source).await?;
        let deviations = report.deviations(&record);
        if record.unreached.is_empty() && deviations.is_empty() {
            Ok(record)
        } else {
            Err(SearchError::Unreached(Box::new(Unreached {
                record,
                instantiation: report.options.instantiation.name.to_string(),
                deviations,
            })))
        }
    }

    /// [`replay`](Search::replay), returning the record even when planned faults were not injected (listed
    /// in its `unreached`) or the run differed from the recorded execution otherwise ([`Report::deviations`]
    /// says how): the explicit opt-out. A report of another test is still refused
    /// ([`SearchError::WrongTest`]), and so is an inconsistent one.
    pub async fn replay_allowing_unreached(
        test: &dyn FunctionalTest,
        report: &Report,
        number: usize,
        source: Arc<dyn SpanSource>,
    ) -> Result<ExecutionRecord, SearchError> {
        if report.test != test.name() {
            return Err(SearchError::WrongTest {
                report_test: report.test.clone(),
                test: test.name().to_string(),
            });
        }
        report.check_consistent()?;
        let exec = report.executions.iter().find(|e| e.number == number).ok_or_else(|| {
            SearchError::Replay(format!(
                "no execution #{number} in the report (it has {})",
                report.executions.len()
            ))
        })?;
        let plan = FaultPlan::decode(&exec.plan_wire).map_err(|e| SearchError::Replay(e.to_string()))?;
        let planned = plan
            .entries()
            .iter()
            .map(|(i, f)| PlannedFault {
                index: i.clone(),
                fault: *f,
                signature: exec
                    .plan
                    .iter()
                    .find(|p| &p.index == i)
                    .map(|p| p.signature.clone())
                    .unwrap_or_default(),
            })
            .collect();
        let options = SearchOptions {
            progress: Progress::Silent,
            ..report.options.clone()
        };
        Search::with_shared_source(options, source)
            .execute(test, number, planned)
            .await
    }
}

/// A convenience for tests: the set of (index, fault) of a list of planned faults.
pub fn fault_set(faults: &[PlannedFault]) -> FaultSet {
    faults.iter().map(|p| (p.index.clone(), p.fault)).collect()
}

/// A convenience: the RPCs of a record with a given signature, in start order.
pub fn rpcs_with_signature<'a>(record: &'a ExecutionRecord, signature: &str) -> Vec<&'a ObservedRpc> {
    record.rpcs.iter().filter(|r| r.signature == signature).collect()
}
