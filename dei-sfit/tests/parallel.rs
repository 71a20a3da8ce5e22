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
            for round in 1..20 {
                let again = search(&p, options.clone()).await;
                assert_eq!(
                    listing(&again),
                    listing(&first),
                    "{} {strategy:?} round {round}",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_encapsulation_reduction_late_redundancy_is_reported_and_bounded() {
    let p = programs::ENCAPSULATION;
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
            let parallel = search(
                &p,
                SearchOptions {
                    parallelism: n,
                    ..options.clone()
                },
            )
            .await;
            let late = parallel.in_flight_redundant();
            // each late one ran only because it had started before the knowledge that skips it arrived: at
            // most n - 1 others run beside any execution
            assert!(
                late.len() <= (n - 1) * parallel.executions.len().saturating_sub(late.len()),
                "{strategy:?} N={n}\n{parallel}"
            );
            // the reduction only removes executions: never more than the unreduced search's, and every plan
            // it did not run has its witness (which plans those are depends on the order, as between DFS and
            // BFS sequentially)
            let unreduced = search(
                &p,
                SearchOptions {
                    parallelism: n,
                    reduction: Reduction::None,
                    ..options.clone()
                },
            )
            .await;
            assert!(
                parallel.executions.len() <= unreduced.executions.len(),
                "{strategy:?} N={n}\n{parallel}"
            );
            assert!(parallel.skipped.iter().all(|s| !s.witness.is_empty()));
            // beyond the sequential search's executions, only those that became redundant in flight
            assert!(
                parallel.executions.len() <= sequential.executions.len() + late.len(),
                "{strategy:?} N={n}\n{parallel}\n{sequential}"
            );
            assert_eq!(
                effective_sets(&unreduced),
                effective_sets(
                    &search(
                        &p,
                        SearchOptions {
                            reduction: Reduction::None,
                            ..options.clone()
                        }
                    )
                    .await
                )
            );
            eprintln!(
                "{strategy:?} N={n}: {} executions ({} in flight when they became redundant), {} skipped; sequential: {} and {}",
                parallel.executions.len(),
                late.len(),
                parallel.skipped.len(),
                sequential.executions.len(),
                sequential.skipped.len()
            );
            for e in late {
                assert!(
                    e.in_flight_redundant.as_deref().is_some_and(|w| w.contains("returns")),
                    "{e:?}"
                );
            }
        }
    }
}
