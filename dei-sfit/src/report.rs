//! Reports: per functional test, every execution with its plan, effective faults and outcome; printed in the
//! terminal and saved as JSON, from which a failing execution can be replayed.

use crate::junit::fault_label;
use crate::observation::ObservedRpc;
use crate::search::{SearchError, SearchOptions};
use crate::test::PlannedFault;
use dei_propagator::{Fault, Index};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// A functional test's verdict in one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum TestOutcome {
    /// It passed.
    Pass,
    /// It failed.
    Fail {
        /// Why.
        message: String,
    },
}

impl TestOutcome {
    /// True for [`TestOutcome::Pass`].
    pub fn passed(&self) -> bool {
        matches!(self, TestOutcome::Pass)
    }
}

/// One execution of a functional test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// 1-based position in the search (1 is the fault-free run).
    pub number: usize,
    /// The planned faults.
    pub plan: Vec<PlannedFault>,
    /// The plan in `dei-faults` wire form: enough to replay the execution.
    pub plan_wire: String,
    /// The faults actually injected, by index under the search's instantiation.
    pub effective: Vec<PlannedFault>,
    /// The faults actually injected, by reference index (full DEI), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_reference: Option<Vec<(Index, Fault)>>,
    /// Planned faults that were never injected: no RPC of the execution had their index. The outcome then
    /// does not test the plan (see [`Report::unreached`]).
    pub unreached: Vec<PlannedFault>,
    /// Planned indexes that were injected on more than one RPC.
    pub multiply_injected: Vec<Index>,
    /// The test's verdict.
    pub outcome: TestOutcome,
    /// Set when the span source's settle step timed out: what was still missing. The observed RPCs and
    /// injected faults may then be incomplete. (Spans that arrived but were not recorded are not this: see
    /// [`spans_dropped`](ExecutionRecord::spans_dropped) and [`incomplete`](ExecutionRecord::incomplete).)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<String>,
    /// The earlier execution with the same effective fault set, if any.
    pub redundant_with: Option<usize>,
    /// The earlier execution with the same effective fault set *by reference index* (full DEI, when the
    /// search runs under a coarser instantiation), if any and if `redundant_with` is not set: a coarse
    /// instantiation that collapses RPCs can give two executions different effective sets that failed the
    /// same RPCs. Counted as redundant ([`Report::redundant`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundant_by_reference_with: Option<usize>,
    /// The execution whose observations scheduled this one.
    pub scheduled_by: Option<usize>,
    /// Set in a parallel search when this execution's plan became redundant (service-encapsulation
    /// reduction would have skipped it) only after it had been started: why. Such executions are the only
    /// ones a parallel search runs beyond the sequential search's ([`Report::in_flight_redundant`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_redundant: Option<Witness>,
    /// Spans whose DEI data was malformed ([`Observation::malformed`]): the observation may lack RPCs or
    /// injected faults.
    ///
    /// [`Observation::malformed`]: crate::Observation::malformed
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_spans: usize,
    /// Spans and stream message events of the execution that were not recorded where the span source reads
    /// them ([`Observation::spans_dropped`]: `dei-collector` dropped them past its cap of RPCs per trace): its
    /// observed RPCs and injected faults are incomplete by theirs, however long the source waited. Such
    /// an execution is [incomplete](ExecutionRecord::incomplete) ([`Report::incomplete`]).
    ///
    /// [`Observation::spans_dropped`]: crate::Observation::spans_dropped
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub spans_dropped: u64,
    /// The traces its RPCs ran in (hex trace ids), when the span source knows them: links from the report to
    /// the execution's traces in a trace backend or dei-collector's web view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<String>,
    /// The RPCs observed.
    pub rpcs: Vec<ObservedRpc>,
    /// Time spent in the test itself, microseconds.
    pub test_us: u64,
    /// Time the search spent preparing the source and collecting, rewriting and indexing the spans,
    /// microseconds.
    pub collect_us: u64,
    /// Time the search spent around the test in all (`collect_us` plus scheduling), microseconds.
    pub overhead_us: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl ExecutionRecord {
    /// Why the execution's observation is incomplete, when some of its spans were not recorded where the span
    /// source reads them ([`spans_dropped`](ExecutionRecord::spans_dropped)): `incomplete: the collector
    /// dropped N span(s) or stream message event(s) …`. `None` when none was dropped.
    pub fn incomplete(&self) -> Option<String> {
        (self.spans_dropped > 0).then(|| {
            format!(
                "incomplete: the collector dropped {} span(s) or stream message event(s) of the execution's trace \
                 past its cap of RPCs per trace (dei-collector serve --max-trace-rpcs): their RPCs and faults are \
                 missing",
                self.spans_dropped
            )
        })
    }

    /// The effective fault set by reference index, as a set.
    pub fn reference_set(&self) -> Option<BTreeSet<(Index, Fault)>> {
        self.effective_reference.as_ref().map(|v| v.iter().cloned().collect())
    }
}

/// Why service-encapsulation reduction judged a plan redundant: RPC `rpc` returns `outcome` under the
/// faults `inside` of its subtree, and execution `execution` already ran `ran` (the faults outside) with `rpc`
/// returning that. The execution is kept as a number, so that renumbering ([`Report::canonical_order`])
/// renumbers it too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witness {
    /// The RPC whose subtree holds the inside faults.
    pub rpc: String,
    /// What it returns under them.
    pub outcome: String,
    /// The faults inside its subtree.
    pub inside: String,
    /// The execution that ran the outside faults with the RPC returning that.
    pub execution: usize,
    /// The faults that execution ran.
    pub ran: String,
}

impl fmt::Display for Witness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} returns {} under {}; execution #{} ran {} with it returning that",
            self.rpc, self.outcome, self.inside, self.execution, self.ran
        )
    }
}

/// A plan that service-encapsulation reduction skipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedPlan {
    /// The plan.
    pub plan: String,
    /// Why it is redundant.
    pub witness: Witness,
}

/// The result of searching one functional test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The functional test.
    pub test: String,
    /// The options it ran with (including the instantiation).
    pub options: SearchOptions,
    /// Every execution, in order.
    pub executions: Vec<ExecutionRecord>,
    /// Plans skipped by dynamic reduction.
    pub skipped: Vec<SkippedPlan>,
    /// True when the execution limit stopped the search.
    pub truncated: bool,
    /// Plans still queued when it stopped.
    pub pending: usize,
    /// Executions with unreached faults: planned but not injected ([`Report::unreached`]).
    #[serde(default)]
    pub unreached_executions: usize,
    /// Executions whose spans did not settle in time ([`Report::unsettled`]).
    #[serde(default)]
    pub unsettled_executions: usize,
    /// Executions some of whose spans were not recorded where the span source reads them
    /// ([`Report::incomplete`]).
    #[serde(default)]
    pub incomplete_executions: usize,
    /// True when no execution injected any fault: the search tested nothing beyond the fault-free run. Its
    /// warning says why ([`NOTHING_INJECTED_WHY`] when faults were planned, [`NOTHING_PLANNED_WHY`] when none
    /// was); [`Report::tested_faults`] is the check for a test to assert.
    #[serde(default)]
    pub nothing_injected: bool,
    /// Why those counts matter, one sentence each (empty when both are zero and faults were injected); a
    /// search stopped by its execution limit has one too ([`TRUNCATED_WHY`]).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// How the search ran, when it did not run as asked (a parallelism it could not use, and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// How many executions could run at once (1: one at a time).
    #[serde(default = "one")]
    pub parallelism_used: usize,
    /// Spans that ended, while a parallel search ran, in no execution's trace: requests a test issued outside
    /// [`TestRun::context`](crate::TestRun::context), or spans that ended after their execution was collected.
    /// The search did not see them; a non-zero count has its warning ([`UNATTRIBUTED_WHY`]).
    #[serde(default)]
    pub unattributed_spans: u64,
}

fn one() -> usize {
    1
}

/// Why a search whose plans injected nothing at all matters.
pub const NOTHING_INJECTED_WHY: &str = "no execution injected any of its planned faults, so the search tested \
nothing beyond the fault-free run. Fault plans are off by default in dei-instrumentation: every service a plan \
should act in needs DeiConfig::builder().faults(Faults::Accept) (or DEI_ACCEPT_FAULTS=1 in a test deployment); \
a service that drops plans counts Event::FaultNotApplied";

/// Why a search that planned no fault at all matters.
pub const NOTHING_PLANNED_WHY: &str = "the search planned no fault, so it tested nothing beyond the fault-free run: \
the span source observed no RPC with a DEI index (are the DEI client layers installed, and the span source \
reading the tracer provider the services export to? in a parallel search, does the test issue its requests \
under TestRun::context(), whose trace tells the source which execution a span belongs to?), or the fault \
catalog gives none of them a fault";

/// Why an execution with unreached faults matters.
pub const UNREACHED_WHY: &str = "a planned fault that was not injected means the execution did not test its plan: \
its outcome (even a pass) says nothing about that fault. The search plans only faults it observed, so this \
points at non-determinism in the system under test (an RPC whose payload or call path changes between runs), \
a request scope lost by a spawn (tokio::spawn without dei_propagator::spawn or in_current_span), or spans \
that did not arrive";

/// Why a search stopped by its execution limit matters.
pub const TRUNCATED_WHY: &str = "the fault space was not exhausted: the plans still queued never ran, so the \
faults they would have tested are untested (raise max_executions, --max, or drop it)";

/// Why an execution whose spans did not settle matters.
pub const UNSETTLED_WHY: &str = "the span source gave up waiting for some executions' spans: their observed RPCs \
and injected faults may be incomplete, so faults may be reported unreached and RPCs left unplanned";

/// Why an execution whose spans the collector dropped matters.
pub const INCOMPLETE_WHY: &str = "dei-collector dropped some of these executions' spans (or stream message \
events) past its cap of RPCs per trace, so their observed RPCs and injected faults are incomplete however long the span source waits: faults may \
be reported unreached and RPCs left unplanned. Run the collector with a --max-trace-rpcs above an execution's \
RPCs";

/// Why spans outside the executions' traces in a parallel search matter.
pub const UNATTRIBUTED_WHY: &str = "spans ended in no running execution's trace while the parallel search ran, so \
no execution saw them: a test that issues requests outside TestRun::context() (whose trace tells the source \
which execution a span belongs to), work that outlived its execution, or another search on the same tracer \
provider. Their RPCs were neither observed nor planned";

/// Why a parallel search over a source that cannot count spans outside the executions' traces matters.
pub const UNATTRIBUTED_UNKNOWN_WHY: &str = "this span source cannot count the spans that end outside the \
executions' traces (only InMemorySpans with a SpanRouter and Recorder can): spans of requests issued outside \
TestRun::context() would be missed without a trace of it";

impl Report {
    /// Records the spans a parallel search saw end outside every execution's trace: `Some(n)` counted, `None`
    /// when the source cannot count them. Either adds a warning unless `Some(0)`.
    pub fn record_unattributed(&mut self, counted: Option<u64>) {
        match counted {
            Some(0) => {}
            Some(n) => {
                self.unattributed_spans = n;
                tracing::warn!("dei-sfit: {n} span(s) outside the executions' traces: {UNATTRIBUTED_WHY}");
                self.warnings.push(format!(
                    "{n} span(s) outside the executions' traces: {UNATTRIBUTED_WHY}"
                ));
            }
            None => self.warnings.push(format!(
                "spans outside the executions' traces not counted: {UNATTRIBUTED_UNKNOWN_WHY}"
            )),
        }
    }

    /// The warning saying that nothing was injected, if any.
    fn nothing_injected_warning(&self) -> Option<&str> {
        self.warnings
            .iter()
            .find(|w| w.starts_with("nothing injected"))
            .map(String::as_str)
    }

    /// A report of these executions.
    pub fn new(
        test: &str,
        options: SearchOptions,
        executions: Vec<ExecutionRecord>,
        skipped: Vec<SkippedPlan>,
        truncated: bool,
        pending: usize,
    ) -> Self {
        let unreached_executions = executions.iter().filter(|e| !e.unreached.is_empty()).count();
        let unsettled_executions = executions.iter().filter(|e| e.unsettled.is_some()).count();
        let incomplete_executions = executions.iter().filter(|e| e.spans_dropped > 0).count();
        let mut warnings = Vec::new();
        let nothing_injected = !executions.is_empty() && executions.iter().all(|e| e.effective.is_empty());
        if unreached_executions > 0 {
            warnings.push(format!(
                "{unreached_executions} execution(s) with unreached faults: {UNREACHED_WHY}"
            ));
        }
        if unsettled_executions > 0 {
            warnings.push(format!(
                "{unsettled_executions} execution(s) whose spans did not settle: {UNSETTLED_WHY}"
            ));
        }
        if incomplete_executions > 0 {
            let spans: u64 = executions.iter().map(|e| e.spans_dropped).sum();
            warnings.push(format!(
                "{incomplete_executions} execution(s) incomplete, {spans} span(s) or stream message event(s) \
                 dropped by the collector: {INCOMPLETE_WHY}"
            ));
        }
        if truncated {
            warnings.push(format!(
                "stopped at the execution limit ({} execution(s)) with {pending} plan(s) pending: {TRUNCATED_WHY}",
                executions.len()
            ));
        }
        let malformed_executions = executions.iter().filter(|e| e.malformed_spans > 0).count();
        if malformed_executions > 0 {
            let spans: usize = executions.iter().map(|e| e.malformed_spans).sum();
            warnings.push(format!(
                "{malformed_executions} execution(s) with {spans} span(s) with malformed dei.* attributes, left \
                 out (logged as they were read): RPCs and faults may be missing"
            ));
        }
        if nothing_injected {
            let why = if executions.iter().any(|e| !e.plan.is_empty()) {
                NOTHING_INJECTED_WHY
            } else {
                NOTHING_PLANNED_WHY
            };
            tracing::warn!("dei-sfit: nothing injected: {why}");
            warnings.push(format!("nothing injected: {why}"));
        }
        Report {
            test: test.to_string(),
            options,
            executions,
            skipped,
            truncated,
            pending,
            unreached_executions,
            unsettled_executions,
            incomplete_executions,
            nothing_injected,
            warnings,
            notes: Vec::new(),
            parallelism_used: 1,
            unattributed_spans: 0,
        }
    }

    /// Sorts the executions in canonical order and renumbers them 1, 2, …: by number of planned faults, then
    /// by the planned (index, fault) pairs. The fault-free run stays #1. `scheduled_by` follows the new
    /// numbers, and `redundant_with` names the first execution in this order with the same effective fault
    /// set; witnesses of redundancy (skipped plans, executions redundant in flight) name the new numbers, and
    /// skipped plans are sorted by plan. A parallel search's report comes in this order (its executions finish
    /// in any order), so two reports of the same search can be diffed; apply it to a sequential report to
    /// compare the two.
    pub fn canonical_order(&mut self) {
        let key = |e: &ExecutionRecord| -> (usize, Vec<(Index, Fault)>) {
            let mut plan: Vec<(Index, Fault)> = e.plan.iter().map(|p| (p.index.clone(), p.fault)).collect();
            plan.sort();
            (plan.len(), plan)
        };
        self.executions.sort_by_cached_key(key);
        let renumber: std::collections::HashMap<usize, usize> = self
            .executions
            .iter()
            .enumerate()
            .map(|(i, e)| (e.number, i + 1))
            .collect();
        let mut first: std::collections::HashMap<BTreeSet<(Index, Fault)>, usize> = Default::default();
        let mut first_by_reference: std::collections::HashMap<BTreeSet<(Index, Fault)>, usize> = Default::default();
        for (i, e) in self.executions.iter_mut().enumerate() {
            e.number = i + 1;
            e.scheduled_by = e.scheduled_by.and_then(|n| renumber.get(&n).copied());
            let effective: BTreeSet<(Index, Fault)> = e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect();
            e.redundant_with = match first.get(&effective) {
                Some(&n) => Some(n),
                None => {
                    first.insert(effective, e.number);
                    None
                }
            };
            e.redundant_by_reference_with = None;
            if let Some(reference) = e.reference_set() {
                match first_by_reference.get(&reference) {
                    Some(&n) if e.redundant_with.is_none() => e.redundant_by_reference_with = Some(n),
                    Some(_) => {}
                    None => {
                        first_by_reference.insert(reference, e.number);
                    }
                }
            }
            if let Some(w) = &mut e.in_flight_redundant {
                w.execution = renumber.get(&w.execution).copied().unwrap_or(w.execution);
            }
        }
        for s in &mut self.skipped {
            s.witness.execution = renumber
                .get(&s.witness.execution)
                .copied()
                .unwrap_or(s.witness.execution);
        }
        self.skipped
            .sort_by_cached_key(|s| (s.plan.clone(), s.witness.to_string()));
    }

    /// An error saying why, when no execution injected a fault (the search tested nothing beyond the fault-free
    /// run: fault plans not accepted by the services, no RPC observed, or a catalog without faults).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() {
    /// use dei_sfit::{model::programs, FaultCatalog, Recorder, Search, SearchOptions};
    /// let recorder = Recorder::new();
    /// // a catalog without faults: the search runs the fault-free execution only
    /// let options = SearchOptions { catalog: FaultCatalog::none(), ..SearchOptions::default() };
    /// let report = Search::new(options, recorder.clone()).run(&programs::FIG2.test(&recorder)).await.unwrap();
    /// assert!(report.nothing_injected);
    /// assert!(report.tested_faults().unwrap_err().contains("planned no fault"));
    /// # }
    /// ```
    pub fn tested_faults(&self) -> Result<(), String> {
        if self.nothing_injected {
            Err(self
                .nothing_injected_warning()
                .map(str::to_string)
                .unwrap_or_else(|| format!("nothing injected: {NOTHING_INJECTED_WHY}")))
        } else {
            Ok(())
        }
    }

    /// The executions with unreached faults: planned but never injected.
    pub fn unreached(&self) -> Vec<&ExecutionRecord> {
        self.executions.iter().filter(|e| !e.unreached.is_empty()).collect()
    }

    /// The executions whose span source timed out waiting for their spans.
    pub fn unsettled(&self) -> Vec<&ExecutionRecord> {
        self.executions.iter().filter(|e| e.unsettled.is_some()).collect()
    }

    /// The executions some of whose spans were not recorded where the span source reads them (dropped by the
    /// collector past its cap of RPCs per trace): their observations are incomplete
    /// ([`ExecutionRecord::incomplete`]).
    pub fn incomplete(&self) -> Vec<&ExecutionRecord> {
        self.executions.iter().filter(|e| e.spans_dropped > 0).collect()
    }

    /// The failing executions.
    pub fn failing(&self) -> Vec<&ExecutionRecord> {
        self.executions.iter().filter(|e| !e.outcome.passed()).collect()
    }

    /// The executions whose effective fault set repeats an earlier one, under the search's instantiation or
    /// by reference index ([`ExecutionRecord::redundant_by_reference_with`]).
    pub fn redundant(&self) -> Vec<&ExecutionRecord> {
        self.executions
            .iter()
            .filter(|e| e.redundant_with.is_some() || e.redundant_by_reference_with.is_some())
            .collect()
    }

    /// The executions a parallel search started before their plan became redundant (see
    /// [`ExecutionRecord::in_flight_redundant`]).
    pub fn in_flight_redundant(&self) -> Vec<&ExecutionRecord> {
        self.executions
            .iter()
            .filter(|e| e.in_flight_redundant.is_some())
            .collect()
    }

    /// The distinct effective fault sets by reference index (what was really failed, judged at full
    /// granularity).
    pub fn reference_sets(&self) -> BTreeSet<BTreeSet<(Index, Fault)>> {
        self.executions.iter().filter_map(|e| e.reference_set()).collect()
    }

    /// Checks that the records agree with each other, as a search writes them: every execution number names
    /// one execution, and each execution's `plan_wire` decodes to the faults its readable `plan` lists. A
    /// hand-edited or corrupt report fails with [`SearchError::Inconsistent`], naming the execution and the
    /// field: replaying it could run a plan the report does not show.
    pub fn check_consistent(&self) -> Result<(), SearchError> {
        let mut seen = std::collections::HashSet::new();
        for e in &self.executions {
            let inconsistent = |field, why| SearchError::Inconsistent {
                execution: e.number,
                field,
                why,
            };
            if !seen.insert(e.number) {
                let count = self.executions.iter().filter(|o| o.number == e.number).count();
                return Err(inconsistent(
                    "number",
                    format!("{count} executions have this number, which must name one"),
                ));
            }
            let wire = dei_propagator::FaultPlan::decode(&e.plan_wire)
                .map_err(|err| inconsistent("plan_wire", format!("does not decode: {err}")))?;
            let wire: BTreeSet<(Index, Fault)> = wire.entries().iter().cloned().collect();
            let readable: BTreeSet<(Index, Fault)> = e.plan.iter().map(|p| (p.index.clone(), p.fault)).collect();
            if wire != readable {
                let show = |set: &BTreeSet<(Index, Fault)>, other: &BTreeSet<(Index, Fault)>| {
                    let only: Vec<String> = set.difference(other).map(|(i, f)| format!("{i}:{f}")).collect();
                    if only.is_empty() {
                        "nothing".to_string()
                    } else {
                        only.join(", ")
                    }
                };
                return Err(inconsistent(
                    "plan_wire",
                    format!(
                        "it disagrees with `plan`: only in `plan_wire`: {}; only in `plan`: {}",
                        show(&wire, &readable),
                        show(&readable, &wire)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// How `replayed`, a replay of this report's execution `replayed.number`, differed from the recorded
    /// execution besides its unreached faults ([`ExecutionRecord::unreached`]): empty for a faithful replay,
    /// and for an execution the report does not have.
    pub fn deviations(&self, replayed: &ExecutionRecord) -> Vec<crate::search::Deviation> {
        use crate::search::Deviation;
        let Some(recorded) = self.executions.iter().find(|e| e.number == replayed.number) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let planned: BTreeSet<(Index, Fault)> = replayed.plan.iter().map(|p| (p.index.clone(), p.fault)).collect();
        for p in &replayed.effective {
            if !planned.contains(&(p.index.clone(), p.fault)) {
                out.push(Deviation::Extra(p.clone()));
            }
        }
        for i in &replayed.multiply_injected {
            if !recorded.multiply_injected.contains(i) {
                out.push(Deviation::MultiplyInjected(i.clone()));
            }
        }
        for p in &replayed.effective {
            let recorded_signature = recorded
                .effective
                .iter()
                .chain(&recorded.plan)
                .find(|r| r.index == p.index && !r.signature.is_empty())
                .map(|r| r.signature.as_str());
            match recorded_signature {
                Some(sig) if !p.signature.is_empty() && sig != p.signature => out.push(Deviation::OtherSignature {
                    fault: p.clone(),
                    recorded: sig.to_string(),
                }),
                _ => {}
            }
        }
        let effective = |e: &ExecutionRecord| -> BTreeSet<(Index, Fault)> {
            e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect()
        };
        if effective(recorded) == effective(replayed)
            && let (Some(a), Some(b)) = (recorded.reference_set(), replayed.reference_set())
            && a != b
        {
            out.push(Deviation::OtherReference {
                recorded: a.into_iter().collect(),
                replayed: b.into_iter().collect(),
            });
        }
        out
    }

    /// The JSON form.
    pub fn to_json(&self) -> Result<String, SearchError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Writes the JSON form to `path`, whole or not at all ([`write_atomically`]): a failed write leaves the
    /// previous file in place.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SearchError> {
        write_atomically(path.as_ref(), self.to_json()?.as_bytes())?;
        Ok(())
    }

    /// Reads a report written by [`save`](Report::save), of at most [`MAX_REPORT_BYTES`] (256 MiB): a longer
    /// file is refused with [`SearchError::ReportTooLarge`], naming it and the limit, before it is read (and a
    /// file that grows while it is read is read no further than the limit).
    pub fn load(path: impl AsRef<Path>) -> Result<Report, SearchError> {
        load_bounded(path.as_ref(), MAX_REPORT_BYTES)
    }
}

/// The largest report file [`Report::load`] reads: 256 MiB. A search's report grows with the RPCs its
/// executions observed (about 1 KB each, pretty-printed), so this holds some 250,000 of them; a larger file is
/// not a report worth holding in memory whole, or not a report.
pub const MAX_REPORT_BYTES: u64 = 256 << 20;

/// [`Report::load`] under a limit of `max` bytes.
fn load_bounded(path: &Path, max: u64) -> Result<Report, SearchError> {
    use std::io::Read as _;
    let too_large = || SearchError::ReportTooLarge {
        path: path.display().to_string(),
        max,
    };
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() > max {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(max.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(too_large());
    }
    Ok(serde_json::from_str(&text)?)
}

/// Writes `contents` to `path` whole or not at all: into a temporary file in the same directory, synced, then
/// renamed over `path`. A failed write (a full disk, a file size limit) removes the temporary file and leaves
/// whatever was at `path` untouched, never a torn file; two writers of one path leave one of their files whole.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    replace_atomically(path, |aside| {
        let mut file = std::fs::File::create(aside)?;
        file.write_all(contents)?;
        file.sync_all()
    })
}

/// The name of the file, beside a folder's reports, that points at the newest of them ([`point_latest_at`]).
pub const LATEST: &str = "latest.json";

/// Points [`LATEST`] (`latest.json`), in the folder of `report`, at `report`: a symbolic link to its file name
/// on Unix, a copy elsewhere. The new link (or copy) is made under a temporary name in the same folder and
/// renamed over `latest.json`, so that a reader sees the previous one or the new one, never none and never a
/// part of a copy; a failure leaves the previous one in place and no temporary file. Returns the link's path.
pub fn point_latest_at(report: &Path) -> std::io::Result<PathBuf> {
    let name = report
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no report file", report.display())))?;
    let latest = report.with_file_name(LATEST);
    #[cfg(unix)]
    replace_atomically(&latest, |aside| std::os::unix::fs::symlink(name, aside))?;
    #[cfg(not(unix))]
    replace_atomically(&latest, |aside| {
        let _ = name;
        std::fs::copy(report, aside)?;
        std::fs::File::open(aside)?.sync_all()
    })?;
    Ok(latest)
}

/// Makes `path` anew, atomically: `make` creates the new file (or link) at a temporary path beside it, which is
/// then renamed over `path`. When either fails, the temporary path is removed and `path` is left as it was.
fn replace_atomically(path: &Path, make: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    // hidden, and not `*.json`: a reader listing the folder's reports does not take it for one
    let mut aside_name = std::ffi::OsString::from(".");
    aside_name.push(name);
    aside_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let aside = path.with_file_name(aside_name);
    let replaced = make(&aside).and_then(|()| std::fs::rename(&aside, path));
    if replaced.is_err() {
        // best effort: the error that matters is the one returned
        let _ = std::fs::remove_file(&aside);
    }
    replaced
}

impl fmt::Display for Report {
    /// The terminal form: a summary, then one line per execution.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failing = self.failing().len();
        writeln!(
            f,
            "sfit report: {} [{}]: {} executions, {} failing, {} redundant, {} with unreached faults, {} \
             unsettled, {} incomplete, {} skipped by reduction{}",
            self.test,
            self.options.instantiation.name,
            self.executions.len(),
            failing,
            self.redundant().len(),
            self.unreached().len(),
            self.unsettled().len(),
            self.incomplete().len(),
            self.skipped.len(),
            if self.truncated {
                format!(", STOPPED at the limit with {} pending", self.pending)
            } else {
                String::new()
            }
        )?;
        let unreached = self.unreached().len();
        if unreached > 0 {
            writeln!(
                f,
                "  WARNING: {unreached} execution(s) with unreached faults: {UNREACHED_WHY}"
            )?;
        }
        let unsettled = self.unsettled().len();
        if unsettled > 0 {
            writeln!(
                f,
                "  WARNING: {unsettled} execution(s) whose spans did not settle: {UNSETTLED_WHY}"
            )?;
        }
        let incomplete = self.incomplete();
        if !incomplete.is_empty() {
            let spans: u64 = incomplete.iter().map(|e| e.spans_dropped).sum();
            writeln!(
                f,
                "  WARNING: {} execution(s) incomplete, {spans} span(s) or stream message event(s) dropped by the \
                 collector: {INCOMPLETE_WHY}",
                incomplete.len()
            )?;
        }
        if self.truncated {
            writeln!(
                f,
                "  WARNING: stopped at the execution limit with {} plan(s) pending: {TRUNCATED_WHY}",
                self.pending
            )?;
        }
        if self.unattributed_spans > 0 {
            writeln!(
                f,
                "  WARNING: {} span(s) outside the executions' traces: {UNATTRIBUTED_WHY}",
                self.unattributed_spans
            )?;
        }
        for note in &self.notes {
            writeln!(f, "  NOTE: {note}")?;
        }
        let late = self.in_flight_redundant().len();
        if late > 0 {
            writeln!(
                f,
                "  {late} execution(s) became redundant only while they ran (parallelism {}): beyond what a \
                 sequential search runs",
                self.parallelism_used
            )?;
        }
        if self.nothing_injected {
            writeln!(
                f,
                "  WARNING: {}",
                self.nothing_injected_warning().unwrap_or("nothing injected")
            )?;
        }
        for e in &self.executions {
            let eff: Vec<String> = e.effective.iter().map(|p| fault_label(Some(e), p)).collect();
            write!(
                f,
                "  #{:<4} {:<4} rpcs {:<3} faults [{}]",
                e.number,
                if e.outcome.passed() { "pass" } else { "FAIL" },
                e.rpcs.len(),
                eff.join(", ")
            )?;
            if !e.unreached.is_empty() {
                write!(
                    f,
                    " unreached [{}]",
                    e.unreached
                        .iter()
                        .map(|p| fault_label(None, p))
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
            }
            if !e.multiply_injected.is_empty() {
                write!(
                    f,
                    " hit-several {:?}",
                    e.multiply_injected.iter().map(|i| i.to_string()).collect::<Vec<_>>()
                )?;
            }
            if e.unsettled.is_some() {
                write!(f, " UNSETTLED")?;
            }
            if e.spans_dropped > 0 {
                write!(
                    f,
                    " INCOMPLETE ({} span(s) or stream message event(s) dropped by the collector)",
                    e.spans_dropped
                )?;
            }
            if let Some(r) = e.redundant_with {
                write!(f, " REDUNDANT with #{r}")?;
            }
            if let Some(r) = e.redundant_by_reference_with {
                write!(f, " REDUNDANT by reference index with #{r}")?;
            }
            if let TestOutcome::Fail { message } = &e.outcome {
                write!(f, " -- {message}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report file over the limit is refused naming the file and the limit, one at the limit is read.
    #[test]
    fn a_report_file_is_read_up_to_its_limit() {
        let d = std::env::temp_dir().join(format!("dei-sfit-load-limit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        let path = d.join("r.json");
        let report = Report::new("t", SearchOptions::default(), Vec::new(), Vec::new(), false, 0);
        report.save(&path).expect("save");
        let len = std::fs::metadata(&path).expect("metadata").len();
        let read = load_bounded(&path, len).expect("a file of exactly the limit");
        assert_eq!(read.test, "t");
        let err = load_bounded(&path, len - 1).expect_err("one byte over the limit");
        assert!(
            matches!(&err, SearchError::ReportTooLarge { path: p, max } if *p == path.display().to_string() && *max == len - 1),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&path.display().to_string()) && message.contains(&format!("{} bytes", len - 1)),
            "{message}"
        );
        // the public limit, on a sparse file one byte over it: refused before anything is read
        let sparse = d.join("sparse.json");
        std::fs::File::create(&sparse)
            .and_then(|f| f.set_len(MAX_REPORT_BYTES + 1))
            .expect("a sparse file");
        let err = Report::load(&sparse).expect_err("over 256 MiB");
        assert!(
            matches!(&err, SearchError::ReportTooLarge { max, .. } if *max == MAX_REPORT_BYTES),
            "{err}"
        );
        assert!(err.to_string().contains("256 MiB"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// `latest.json` is relinked by a rename over it: a reader polling it all along never finds it missing,
    /// it ends up pointing at the newest report, and nothing is left beside it.
    #[test]
    fn latest_json_is_relinked_atomically() {
        let d = std::env::temp_dir().join(format!("dei-sfit-latest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        let (a, b) = (d.join("a.json"), d.join("b.json"));
        std::fs::write(&a, "{\"a\": 1}").expect("a");
        std::fs::write(&b, "{\"b\": 2}").expect("b");
        let latest = point_latest_at(&a).expect("first link");
        assert_eq!(latest, d.join(LATEST));
        assert_eq!(std::fs::read(&latest).expect("read through it"), b"{\"a\": 1}");
        let done = std::sync::atomic::AtomicBool::new(false);
        let missing = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut missing = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if std::fs::symlink_metadata(&latest).is_err() {
                        missing += 1;
                    }
                }
                missing
            });
            for i in 0..2000 {
                point_latest_at(if i % 2 == 0 { &b } else { &a }).expect("relink");
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap_or(u32::MAX)
        });
        assert_eq!(missing, 0, "a reader found latest.json missing {missing} time(s)");
        // the last relink (#1999) pointed it at a.json; now at b.json
        point_latest_at(&b).expect("relink");
        assert_eq!(std::fs::read(&latest).expect("read through it"), b"{\"b\": 2}");
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(&latest).expect("a link"),
            std::path::PathBuf::from("b.json"),
            "relative: the folder can move"
        );
        // a relink that cannot be carried out (latest.json is a folder) leaves no temporary file either
        let other = d.join("other");
        std::fs::create_dir_all(other.join(LATEST).join("x")).expect("a folder in the way");
        std::fs::write(other.join("c.json"), "{}").expect("c");
        assert!(point_latest_at(&other.join("c.json")).is_err());
        let listing = |dir: &Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .expect("dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(listing(&d), ["a.json", "b.json", "latest.json", "other"]);
        assert_eq!(listing(&other), ["c.json", "latest.json"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_nothing_aside() {
        let d = std::env::temp_dir().join(format!("dei-sfit-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        let path = d.join("r.json");
        write_atomically(&path, b"first").expect("write");
        write_atomically(&path, b"second").expect("overwrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        // a write that cannot be carried out (its target is a directory) keeps what was there
        let sub = d.join("sub");
        std::fs::create_dir(&sub).expect("dir");
        assert!(write_atomically(&sub, b"x").is_err());
        assert!(sub.is_dir());
        let mut left: Vec<_> = std::fs::read_dir(&d)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["r.json", "sub"]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
