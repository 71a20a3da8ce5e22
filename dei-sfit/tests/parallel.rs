//! Parallel executions (issue #22, part 1) on the simulated programs: up to N executions at once, each with
//! its own recorder, reach exactly the sequential search's distinct effective fault sets and the brute-force
//! oracle's, in both orders, run no execution more, list executions in canonical order, and give the same
//! report every time; a serial-only test and a source that cannot tell executions apart run one at a time,
//! and the report says so.

use dei_propagator::{Fault, Index, Instantiation};
use dei_sfit::model::{Caller, programs};
use dei_sfit::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

type Sets = BTreeSet<BTreeSet<(Index, Fault)>>;

fn effective_sets(report: &Report) -> Sets {
    report
        .executions
        .iter()
        .map(|e| e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect())
        .collect()
}

/// What a canonical report lists, execution by execution: number, plan, effective faults, verdict, redundancy.
fn listing(report: &Report) -> Vec<String> {
    report
        .executions
        .iter()
        .map(|e| {
            format!(
                "#{} plan {:?} effective {:?} {} redundant {:?} scheduled_by {:?}",
                e.number,
                e.plan
                    .iter()
                    .map(|p| format!("{}:{}", p.index, p.fault))
                    .collect::<Vec<_>>(),
                e.effective
                    .iter()
                    .map(|p| format!("{}:{}", p.index, p.fault))
                    .collect::<Vec<_>>(),
                e.outcome.passed(),
                e.redundant_with,
                e.scheduled_by.is_some(),
            )
        })
        .collect()
}

/// The whole report as JSON, without the fields that legitimately differ between two runs of the same
/// search: timings (`test_us`, `collect_us`, `overhead_us`; an RPC's `start` and `end`, ticks of a
/// process-wide clock), `scheduled_by` (which of the executions that observed an RPC finished first), and
/// with `all_options` the parallelism asked and used and the notes (to compare with a sequential search).
fn canonical_json(report: &Report, all_options: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(report).expect("json");
    for e in v["executions"].as_array_mut().expect("executions") {
        let e = e.as_object_mut().expect("an execution");
        for k in ["test_us", "collect_us", "overhead_us", "scheduled_by"] {
            e.remove(k);
        }
        for r in e["rpcs"].as_array_mut().expect("rpcs") {
            let r = r.as_object_mut().expect("an rpc");
            r.remove("start");
            r.remove("end");
        }
    }
    if all_options {
        let o = v.as_object_mut().expect("a report");
        o.remove("parallelism_used");
        o.remove("notes");
        o["options"].as_object_mut().expect("options").remove("parallelism");
    }
    v
}

async fn search(p: &programs::ModelProgram, options: SearchOptions) -> Report {
    let rec = Recorder::new();
    Search::new(options, rec.clone())
        .run(&p.test(&rec))
        .await
        .expect("search")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_program_reaches_the_sequential_and_oracle_sets_at_n_2_4_8_in_both_orders() {
    for p in programs::all() {
        let rec = Recorder::new();
        let base = SearchOptions {
            catalog: p.catalog(),
            instantiation: Instantiation::dei(),
            ..SearchOptions::default()
        };
        let truth = Oracle::new(base.clone(), Arc::new(rec.clone()), 12)
            .run(&p.test(&rec))
            .await
            .expect("oracle");
        for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
            let options = SearchOptions {
                strategy,
                ..base.clone()
            };
            let sequential = search(&p, options.clone()).await;
            for n in [2, 4, 8] {
                let parallel = search(
                    &p,
                    SearchOptions {
                        parallelism: n,
                        ..options.clone()
                    },
                )
                .await;
                let what = format!("{} {strategy:?} N={n}", p.name);
                assert_eq!(parallel.parallelism_used, n, "{what}");
                assert!(parallel.notes.is_empty(), "{what}: {:?}", parallel.notes);
                assert_eq!(
                    effective_sets(&parallel),
                    effective_sets(&sequential),
                    "{what}\n{parallel}"
                );
                assert_eq!(parallel.reference_sets(), truth.reference, "{what}: oracle\n{parallel}");
                // no reduction: nothing can become redundant in flight, so exactly the sequential executions
                assert_eq!(parallel.executions.len(), sequential.executions.len(), "{what}");
                assert!(parallel.in_flight_redundant().is_empty(), "{what}");
                assert!(
                    parallel.redundant().is_empty() && parallel.unreached().is_empty(),
                    "{what}\n{parallel}"
                );
                // canonical order: the fault-free run first, then by number of faults, numbered 1..
                assert!(parallel.executions[0].plan.is_empty(), "{what}");
                for (i, e) in parallel.executions.iter().enumerate() {
                    assert_eq!(e.number, i + 1, "{what}");
                    assert!(
                        e.scheduled_by.is_none_or(|s| s < e.number),
                        "{what}: #{} from {:?}",
                        e.number,
                        e.scheduled_by
                    );
                }
                assert!(
                    parallel
                        .executions
                        .windows(2)
                        .all(|w| w[0].plan.len() <= w[1].plan.len()),
                    "{what}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_parallel_searches_give_the_same_canonical_report() {
    // cinema-10 and Fig. 5's streams as simulated programs (the real services: tests/sfit_parallel.rs)
    for p in [programs::CINEMA10, programs::FIG5] {
        for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
            let options = SearchOptions {
                catalog: p.catalog(),
                strategy,
                parallelism: 4,
                ..SearchOptions::default()
            };
            let first = search(&p, options.clone()).await;
            let mut sequential = search(
                &p,
                SearchOptions {
                    parallelism: 1,
                    ..options.clone()
                },
            )
            .await;
            sequential.canonical_order();
            assert_eq!(
                listing(&first),
                listing(&sequential),
                "{}: canonical sequential = parallel",
                p.name
            );
            assert_eq!(
                canonical_json(&first, true),
                canonical_json(&sequential, true),
                "{}: the whole canonical report, sequential = parallel",
                p.name
            );
            let first_json = canonical_json(&first, false);
            for round in 1..20 {
                let again = search(&p, options.clone()).await;
                assert_eq!(
                    canonical_json(&again, false),
                    first_json,
                    "{} {strategy:?} round {round}: the whole canonical report",
                    p.name
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executions_really_overlap_and_each_sees_only_its_own_rpcs() {
    // every execution waits until 3 others started (or a bound passes): with N = 4 they overlap, and each
    // recorder still holds exactly its own execution's RPCs
    let rec = Recorder::new();
    let r = rec.clone();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (run2, peak2) = (running.clone(), peak.clone());
    let test = test_fn("overlap", move |run| {
        let a = Caller::root(&run, &r);
        let (running, peak) = (run2.clone(), peak2.clone());
        async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            for _ in 0..200 {
                if running.load(Ordering::SeqCst) >= 4 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            for (i, s) in ["a", "b", "c", "d"].iter().enumerate() {
                let _ = a.call("B/echo", s, &[10, i as u32], |_| async { Ok(()) }).await;
            }
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    });
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        parallelism: 4,
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec).run(&test).await.expect("search");
    assert_eq!(report.executions.len(), 16, "{report}"); // 2^4
    assert!(peak.load(Ordering::SeqCst) >= 2, "executions never overlapped");
    for e in &report.executions {
        assert_eq!(
            e.rpcs.len(),
            4,
            "#{}: another execution's RPCs leaked in\n{report}",
            e.number
        );
        assert_eq!(e.effective.len(), e.plan.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serial_only_test_runs_one_execution_at_a_time() {
    let rec = Recorder::new();
    let r = rec.clone();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (run2, peak2) = (running.clone(), peak.clone());
    let test = test_fn("shared fixture", move |run| {
        let a = Caller::root(&run, &r);
        let (running, peak) = (run2.clone(), peak2.clone());
        async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let _ = a.call("B/echo", "x", &[1], |_| async { Ok(()) }).await;
            let _ = a.call("B/echo", "y", &[2], |_| async { Ok(()) }).await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    })
    .serial();
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        parallelism: 4,
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec).run(&test).await.expect("search");
    assert_eq!(report.executions.len(), 4);
    assert_eq!(
        peak.load(Ordering::SeqCst),
        1,
        "a serial-only test's executions overlapped"
    );
    assert_eq!(report.parallelism_used, 1);
    assert!(
        report.notes.iter().any(|n| n.contains("serial-only")),
        "{:?}",
        report.notes
    );
    assert!(
        format!("{report}").contains("NOTE: parallelism 4 requested"),
        "{report}"
    );
}

/// A source that reads the in-memory exporter but does not offer per-execution views.
struct Opaque(Recorder);

impl SpanSource for Opaque {
    fn begin(&self) -> futures::future::BoxFuture<'_, Result<(), SourceError>> {
        self.0.begin()
    }
    fn collect(&self) -> futures::future::BoxFuture<'_, Result<Observation, SourceError>> {
        self.0.collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_that_cannot_tell_executions_apart_runs_them_one_at_a_time_and_says_so() {
    let rec = Recorder::new();
    let p = programs::FIG2;
    let options = SearchOptions {
        catalog: p.catalog(),
        parallelism: 4,
        ..SearchOptions::default()
    };
    let report = Search::new(options, Opaque(rec.clone()))
        .run(&p.test(&rec))
        .await
        .expect("search");
    assert_eq!(report.executions.len(), 5);
    assert_eq!(report.parallelism_used, 1);
    assert!(
        report.notes.iter().any(|n| n.contains("cannot attribute spans")),
        "{:?}",
        report.notes
    );
}

/// What happened when, in a parallel search: an execution started (by its start number) or was collected
/// (with its effective fault set), in the order the search did it.
#[derive(Clone, Debug)]
enum Event {
    Started(usize),
    Collected(usize, FaultSet),
}

/// A recorder that logs when each parallel execution starts (its source is made as it is dispatched) and
/// when its spans are collected (just before the search absorbs it).
#[derive(Clone)]
struct Timeline {
    rec: Recorder,
    events: Arc<std::sync::Mutex<Vec<Event>>>,
}

struct TimedExecution {
    inner: Arc<dyn SpanSource>,
    number: usize,
    events: Arc<std::sync::Mutex<Vec<Event>>>,
}

impl SpanSource for Timeline {
    fn begin(&self) -> futures::future::BoxFuture<'_, Result<(), SourceError>> {
        self.rec.begin()
    }
    fn collect(&self) -> futures::future::BoxFuture<'_, Result<Observation, SourceError>> {
        self.rec.collect()
    }
    fn execution(&self, key: &ExecutionKey) -> Option<Arc<dyn SpanSource>> {
        let inner = self.rec.execution(key)?;
        self.events.lock().expect("events").push(Event::Started(key.number));
        Some(Arc::new(TimedExecution {
            inner,
            number: key.number,
            events: self.events.clone(),
        }))
    }
}

impl SpanSource for TimedExecution {
    fn begin(&self) -> futures::future::BoxFuture<'_, Result<(), SourceError>> {
        self.inner.begin()
    }
    fn collect(&self) -> futures::future::BoxFuture<'_, Result<Observation, SourceError>> {
        Box::pin(async move {
            let obs = self.inner.collect().await?;
            self.events
                .lock()
                .expect("events")
                .push(Event::Collected(self.number, obs.effective()));
            Ok(obs)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_encapsulation_reduction_late_redundancy_is_reported_and_bounded() {
    let p = programs::ENCAPSULATION;
    let rec = Recorder::new();
    let unreduced_options = SearchOptions {
        catalog: p.catalog(),
        ..SearchOptions::default()
    };
    let truth = Oracle::new(unreduced_options.clone(), Arc::new(rec.clone()), 12)
        .run(&p.test(&rec))
        .await
        .expect("oracle");
    let unreduced = search(&p, unreduced_options).await;
    assert_eq!(effective_sets(&unreduced), truth.effective, "{unreduced}");
    let mut any_late = 0;
    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let options = SearchOptions {
            catalog: p.catalog(),
            strategy,
            reduction: Reduction::ServiceEncapsulation {
                compare_responses: false,
            },
            ..SearchOptions::default()
        };
        let sequential = search(&p, options.clone()).await;
        for n in [2, 4] {
            let timeline = Timeline {
                rec: Recorder::new(),
                events: Arc::default(),
            };
            let parallel = Search::new(
                SearchOptions {
                    parallelism: n,
                    ..options.clone()
                },
                timeline.clone(),
            )
            .run(&p.test(&timeline.rec))
            .await
            .expect("search");
            let what = format!("{strategy:?} N={n}");
            let events = timeline.events.lock().expect("events").clone();
            // start number -> (position of its start, position of its collection, effective set)
            let at = |effective: &FaultSet| -> (usize, usize) {
                let (pos, number) = events
                    .iter()
                    .enumerate()
                    .find_map(|(i, e)| match e {
                        Event::Collected(k, set) if set == effective => Some((i, *k)),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{what}: no execution collected {effective:?}"));
                let start = events
                    .iter()
                    .position(|e| matches!(e, Event::Started(k) if *k == number))
                    .expect("started");
                (start, pos)
            };
            let late = parallel.in_flight_redundant();
            any_late += late.len();
            for e in &late {
                let w = e.in_flight_redundant.as_ref().expect("a witness");
                let witness = parallel
                    .executions
                    .iter()
                    .find(|x| x.number == w.execution)
                    .unwrap_or_else(|| panic!("{what}: #{} names no execution #{}", e.number, w.execution));
                assert_eq!(
                    w.ran,
                    fault_set_label(&witness.effective),
                    "{what}: the witness #{} names what it injected",
                    witness.number
                );
                let (e_start, e_end) = at(&search::fault_set(&e.effective));
                let (_, w_end) = at(&search::fault_set(&witness.effective));
                // the witness finished before this execution was absorbed ...
                assert!(
                    w_end < e_end,
                    "{what}: #{} before its witness #{}",
                    e.number,
                    witness.number
                );
                // ... and the knowledge that made it redundant came from an execution that finished while
                // this one ran (otherwise the plan would have been skipped when it was dispatched)
                assert!(
                    events[e_start..e_end]
                        .iter()
                        .any(|ev| matches!(ev, Event::Collected(..))),
                    "{what}: #{} overlapped no execution's finish: {events:?}",
                    e.number
                );
            }
            // beyond the sequential search's executions, only those that became redundant in flight
            assert!(
                parallel.executions.len() <= sequential.executions.len() + late.len(),
                "{what}\n{parallel}\n{sequential}"
            );
            // the reduction only removes executions: every set it ran is one the unreduced search and the
            // oracle reach, and every plan it skipped is one of those it did not run
            let sets = effective_sets(&parallel);
            assert!(sets.is_subset(&truth.effective), "{what}\n{parallel}");
            let ran: BTreeSet<String> = sets.iter().map(observation::describe_set).collect();
            let reachable: BTreeSet<String> = truth.effective.iter().map(observation::describe_set).collect();
            for s in &parallel.skipped {
                assert!(
                    reachable.contains(&s.plan),
                    "{what}: skipped {} is not reachable",
                    s.plan
                );
                assert!(!ran.contains(&s.plan), "{what}: skipped {} yet ran it", s.plan);
                // the witness names its execution by its canonical number: the one that ran what it says
                let witness = parallel
                    .executions
                    .iter()
                    .find(|x| x.number == s.witness.execution)
                    .unwrap_or_else(|| panic!("{what}: {} names no execution", s.witness));
                assert_eq!(
                    s.witness.ran,
                    fault_set_label(&witness.effective),
                    "{what}: {}",
                    s.witness
                );
            }
            // so does the sequential search with the same reduction (which plans it skips depends on the order)
            let seq_sets = effective_sets(&sequential);
            assert!(seq_sets.is_subset(&truth.effective), "{what}\n{sequential}");
            eprintln!(
                "{what}: {} executions ({} in flight when they became redundant), {} skipped; sequential: {} and {}",
                parallel.executions.len(),
                late.len(),
                parallel.skipped.len(),
                sequential.executions.len(),
                sequential.skipped.len()
            );
        }
    }
    eprintln!("{any_late} execution(s) in all became redundant in flight");
}

/// The effective faults as `describe_set` writes them.
fn fault_set_label(faults: &[PlannedFault]) -> String {
    observation::describe_set(&search::fault_set(faults))
}

/// Sends on drop: tells when a test's future was dropped (its task aborted).
struct DropSignal(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_test_is_aborted_not_left_running() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let test = test_fn("hangs", move |_run| {
        let signal = DropSignal(tx.lock().expect("sender").take());
        async move {
            let _signal = signal;
            std::future::pending::<()>().await;
            Ok(())
        }
    });
    let options = SearchOptions {
        timeout: Some(std::time::Duration::from_millis(50)),
        parallelism: 2,
        ..SearchOptions::default()
    };
    let report = Search::new(options, Recorder::new()).run(&test).await.expect("search");
    assert_eq!(report.failing().len(), 1, "{report}");
    assert!(
        matches!(&report.executions[0].outcome, TestOutcome::Fail { message } if message.contains("timed out")),
        "{report}"
    );
    // the hung test's future is dropped once its task is aborted (the bound only keeps a broken build from
    // hanging the test run)
    tokio::time::timeout(std::time::Duration::from_secs(30), rx)
        .await
        .expect("the timed-out test task is still running")
        .expect("the signal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rpcs_recorded_outside_the_executions_are_a_counted_warning() {
    // the test records into the search's recorder itself, not the execution's (Recorder::for_run): no
    // execution sees those RPCs, and the report must not look clean
    let rec = Recorder::new();
    let r = rec.clone();
    let test = test_fn("outside", move |run| {
        let own = Caller::root(&run, &r);
        let r = r.clone();
        async move {
            let _ = own.call("B/echo", "inside", &[1], |_| async { Ok(()) }).await;
            let p = r.start(
                Index::root(),
                dei_propagator::InvocationSignature::new(
                    dei_propagator::Signature::from_name("C/log"),
                    dei_propagator::PayloadDigest::of(b"outside"),
                    dei_propagator::CallStack::new(Vec::new()).digest(),
                ),
                None,
            );
            r.finish(p, None, Outcome::ok());
            Ok(())
        }
    });
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        parallelism: 2,
        ..SearchOptions::default()
    };
    let report = Search::new(options.clone(), rec.clone())
        .run(&test)
        .await
        .expect("search");
    assert_eq!(report.executions.len(), 2, "{report}");
    assert_eq!(report.unattributed_spans, 2, "one outside RPC per execution\n{report}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.starts_with("2 span(s) outside the executions' traces")),
        "{:?}",
        report.warnings
    );
    assert!(check_exhaustive(&report, &ReplayCommand::Api).is_err());
    // one at a time, the recorder is the execution's: nothing is outside
    let report = Search::new(
        SearchOptions {
            parallelism: 1,
            ..options
        },
        rec,
    )
    .run(&test)
    .await
    .expect("search");
    assert_eq!(report.unattributed_spans, 0);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}
