//! The search against the brute-force oracle on simulated programs (no real services needed).

use dei_propagator::{Fault, Index, Instantiation};
use dei_sfit::model::{Caller, programs};
use dei_sfit::*;
use std::collections::BTreeSet;
use std::sync::Arc;

type Sets = BTreeSet<FaultSet>;

async fn oracle(p: &programs::ModelProgram, catalog: FaultCatalog) -> OracleResult {
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog,
        ..SearchOptions::default()
    };
    Oracle::new(options, Arc::new(rec.clone()), 12)
        .run(&p.test(&rec))
        .await
        .expect("oracle")
}

async fn search(p: &programs::ModelProgram, options: SearchOptions) -> Report {
    let rec = Recorder::new();
    Search::new(options, rec.clone())
        .run(&p.test(&rec))
        .await
        .expect("search")
}

fn opts(p: &programs::ModelProgram, instantiation: Instantiation) -> SearchOptions {
    SearchOptions {
        catalog: p.catalog(),
        instantiation,
        ..SearchOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_program_is_complete_and_non_redundant_in_both_orders() {
    for p in programs::all() {
        let truth = oracle(&p, p.catalog()).await;
        assert!(!truth.reference.is_empty());
        for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
            let report = search(
                &p,
                SearchOptions {
                    strategy,
                    ..opts(&p, Instantiation::dei())
                },
            )
            .await;
            assert!(
                report.redundant().is_empty(),
                "{}: redundant executions\n{report}",
                p.name
            );
            assert_eq!(
                report.reference_sets(),
                truth.reference,
                "{} ({strategy:?}): incomplete\n{report}",
                p.name
            );
            assert_eq!(report.executions.len(), truth.reference.len(), "{}", p.name);
            assert!(
                report.executions.iter().all(|e| e.unreached.is_empty()),
                "{}: unreachable plan\n{report}",
                p.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_default_catalog_multiplies_fault_types() {
    // Fig. 1 with gRPC defaults (UNAVAILABLE, DEADLINE_EXCEEDED, connection): (1 + 3)^2 combinations
    let p = programs::FIG1;
    let catalog = FaultCatalog::protocol_defaults().with_rule("A/*", vec![]);
    let truth = oracle(&p, catalog.clone()).await;
    assert_eq!(truth.reference.len(), 16);
    let report = search(
        &p,
        SearchOptions {
            catalog,
            ..opts(&p, Instantiation::dei())
        },
    )
    .await;
    assert_eq!(report.executions.len(), 16);
    assert_eq!(report.reference_sets(), truth.reference);
    let faults: BTreeSet<Fault> = report
        .executions
        .iter()
        .flat_map(|e| e.effective.iter().map(|p| p.fault))
        .collect();
    assert_eq!(
        faults,
        BTreeSet::from([Fault::UNAVAILABLE, Fault::DEADLINE_EXCEEDED, Fault::Connection])
    );
}

/// The failure pattern of B's calls in an execution, in issue order: `.` ok, `x` failed.
fn pattern(e: &ExecutionRecord) -> String {
    e.rpcs
        .iter()
        .filter(|r| r.signature == "B/echo")
        .map(|r| if r.fault.is_some() { 'x' } else { '.' })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig2_runs_exactly_the_five_executions_of_section_3_2() {
    let p = programs::FIG2;
    for inst in [Instantiation::dei(), Instantiation::filibuster()] {
        let report = search(&p, opts(&p, inst.clone())).await;
        let got: BTreeSet<String> = report.executions.iter().map(pattern).collect();
        // e1 (A8|1, A8|2), e2 (A8|1, ¬A8|2, A16|1), e3 (A8|1, ¬A8|2, ¬A16|1), e4 (¬A8|1, A16|1), e5 (¬A8|1, ¬A16|1)
        let want: BTreeSet<String> = ["..", ".x.", ".xx", "x.", "xx"].map(String::from).into();
        assert_eq!(got, want, "{}\n{report}", inst.name);
        assert_eq!(report.executions.len(), 5);
        // the fallback call is the same RPC in e2 and e4: one index, A^16|1
        let fallback: BTreeSet<Index> = report
            .executions
            .iter()
            .filter(|e| e.rpcs.len() == 4 || (e.rpcs.len() == 3 && pattern(e).starts_with('x')))
            .filter_map(|e| {
                e.rpcs
                    .iter()
                    .rfind(|r| r.signature == "B/echo")
                    .map(|r| r.index.clone())
            })
            .collect();
        assert_eq!(fallback.len(), 1, "{}: {fallback:?}", inst.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig4_path_tells_e1_from_e2() {
    let p = programs::FIG4;
    let run = |inst: Instantiation, plan: Vec<PlannedFault>| {
        let rec = Recorder::new();
        let test = p.test(&rec);
        let search = Search::new(opts(&p, inst), rec);
        async move { search.execute(&test, 1, plan).await.expect("execute") }
    };
    for (inst, distinct) in [(Instantiation::dei(), true), (Instantiation::no_path(), false)] {
        let e1 = run(inst.clone(), vec![]).await;
        // e1: the second B call (World, line 9) and its call to C
        let b_calls: Vec<&ObservedRpc> = e1.rpcs.iter().filter(|r| r.signature == "B/echo").collect();
        let a_w_9 = b_calls[1].index.clone();
        let c_under_loop = e1
            .rpcs
            .iter()
            .filter(|r| r.signature == "C/echo")
            .nth(1)
            .expect("C")
            .index
            .clone();
        let e2 = run(
            inst.clone(),
            vec![PlannedFault {
                index: a_w_9,
                fault: Fault::Connection,
                signature: String::new(),
            }],
        )
        .await;
        let c_under_retry = e2
            .rpcs
            .iter()
            .filter(|r| r.signature == "C/echo")
            .nth(1)
            .expect("C")
            .index
            .clone();
        assert_eq!(
            c_under_loop != c_under_retry,
            distinct,
            "{}: B(W)^29|1 under A(W)^9 vs under A(W)^19",
            inst.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_indexes_are_rewritten_to_deterministic_final_ones() {
    // Fig. 5 with B calling C for each message: C's calls run under preliminary prefixes counted in arrival
    // order and are rewritten under the messages' final indexes
    let rec = Recorder::new();
    let r = rec.clone();
    let test = test_fn("fig5-nested", move |run| {
        let a = Caller::root(&run, &r);
        async move {
            a.stream("B/hello", &[3], &[6], &["Hello", "World"], |b, s| async move {
                b.call("C/log", &s, &[14], |_| async { Ok(()) }).await
            })
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
    });
    let search = Search::new(
        SearchOptions {
            catalog: FaultCatalog::single(Fault::Connection),
            ..SearchOptions::default()
        },
        rec,
    );
    let mut finals: BTreeSet<Vec<Index>> = BTreeSet::new();
    for _ in 0..20 {
        let e = search.execute(&test, 1, vec![]).await.expect("run");
        let c: Vec<&ObservedRpc> = e.rpcs.iter().filter(|r| r.signature == "C/log").collect();
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|r| r.rewritten && !r.index.is_preliminary()));
        // each C call hangs under the message that caused it
        for call in &c {
            let parent = &e.rpcs[call.parent.expect("parent")];
            assert_eq!(call.index.parent().as_ref(), Some(&parent.index));
        }
        let mut idx: Vec<Index> = c.iter().map(|r| r.index.clone()).collect();
        idx.sort();
        finals.insert(idx);
    }
    assert_eq!(finals.len(), 1, "rewritten indexes differ between runs: {finals:?}");
    // the search targets the messages (final indexes) but not the rewritten nested calls
    let report = search.run(&test).await.expect("search");
    assert!(report.redundant().is_empty());
    assert!(
        report
            .executions
            .iter()
            .all(|e| e.effective.iter().all(|p| p.signature != "C/log"))
    );
    assert_eq!(report.executions.len(), 1 + 4, "{report}"); // {stream}, and the 2^2 subsets of the messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table1_all_column_and_ablation_losses() {
    let c3 = programs::CINEMA3;
    let c9 = programs::CINEMA9;
    let c10 = programs::CINEMA10;
    for (p, all) in [(c3, 7), (c9, 5), (c10, 6)] {
        let truth = oracle(&p, p.catalog()).await;
        assert_eq!(truth.reference.len(), all, "{}", p.name);
        let report = search(&p, opts(&p, Instantiation::dei())).await;
        assert_eq!(report.executions.len(), all, "{}\n{report}", p.name);
    }
    // cinema-3 without invocation count: one index for both attempts; faults hit both
    let truth3: Sets = oracle(&c3, c3.catalog()).await.reference;
    let no_ic = search(&c3, opts(&c3, Instantiation::no_count())).await;
    assert_eq!(no_ic.executions.len(), 3, "{no_ic}");
    assert!(
        no_ic.executions.iter().any(|e| !e.multiply_injected.is_empty()),
        "unsound: a fault lands on several RPCs"
    );
    assert_eq!(
        truth3.difference(&no_ic.reference_sets()).count(),
        4,
        "incomplete: 4 of 7 sets never reached"
    );
    // Filibuster's scheduling (no ancestor pruning) runs the paper's 4, the 4th repeating an earlier set
    let filibuster_rules = search(
        &c3,
        SearchOptions {
            prune_ancestors: false,
            ..opts(&c3, Instantiation::no_count())
        },
    )
    .await;
    assert_eq!(filibuster_rules.executions.len(), 4);
    assert_eq!(filibuster_rules.redundant().len(), 1);
    assert_eq!(
        search(&c3, opts(&c3, Instantiation::no_stack())).await.executions.len(),
        7
    );

    // cinema-9 loses only without both count and stack
    let truth9 = oracle(&c9, c9.catalog()).await.reference;
    for inst in [Instantiation::no_count(), Instantiation::no_stack()] {
        let r = search(&c9, opts(&c9, inst)).await;
        assert_eq!(r.reference_sets(), truth9);
    }
    let r9 = search(&c9, opts(&c9, Instantiation::no_count_no_stack())).await;
    assert_eq!(r9.executions.len(), 3);
    assert_eq!(truth9.difference(&r9.reference_sets()).count(), 2);
    assert!(r9.executions.iter().any(|e| !e.multiply_injected.is_empty()));

    // cinema-10 loses only without path: the fault meant for bookings->movies also hits users->movies
    let truth10 = oracle(&c10, c10.catalog()).await.reference;
    for inst in [
        Instantiation::no_count(),
        Instantiation::no_stack(),
        Instantiation::no_count_no_stack(),
    ] {
        let r = search(&c10, opts(&c10, inst)).await;
        assert_eq!(r.reference_sets(), truth10);
    }
    let r10 = search(&c10, opts(&c10, Instantiation::no_path_count_stack())).await;
    assert_eq!(r10.executions.len(), 5);
    let reached10 = r10.reference_sets();
    let missing: Vec<&FaultSet> = truth10.difference(&reached10).collect();
    assert_eq!(missing.len(), 1);
    assert_eq!(
        missing[0].len(),
        1,
        "the lost set is bookings->movies failing alone: {missing:?}"
    );
    assert!(r10.executions.iter().any(|e| !e.multiply_injected.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_encapsulation_skips_e_with_c_or_d() {
    let p = programs::ENCAPSULATION;
    let truth = oracle(&p, p.catalog()).await.reference;
    assert_eq!(truth.len(), 12); // B subtree {ok, B, E} x C {ok, C} x D {ok, D}
    let reduced = search(
        &p,
        SearchOptions {
            reduction: Reduction::ServiceEncapsulation {
                compare_responses: false,
            },
            ..opts(&p, Instantiation::dei())
        },
    )
    .await;
    assert_eq!(reduced.executions.len(), 9, "{reduced}");
    // {E,C} and {E,D} are skipped; {E,C,D} would only be scheduled from a run of one of them
    assert_eq!(reduced.skipped.len(), 2, "{:?}", reduced.skipped);
    let missing: Vec<FaultSet> = truth.difference(&reduced.reference_sets()).cloned().collect();
    assert_eq!(missing.len(), 3);
    // each skipped set fails E (depth 3: A::B::E) together with C or D
    for set in &missing {
        assert!(set.len() >= 2 && set.iter().any(|(i, _)| i.depth() == 3), "{set:?}");
    }
    // comparing responses too: B answers the same with or without E, so the same plans are skipped
    let strict = search(
        &p,
        SearchOptions {
            reduction: Reduction::ServiceEncapsulation {
                compare_responses: true,
            },
            ..opts(&p, Instantiation::dei())
        },
    )
    .await;
    assert_eq!(strict.executions.len(), 9);
    // where the encapsulating service's answer depends on the failure, nothing is skipped: fig4's B falls back
    // to its own argument, the same answer as C's echo, but cinema-3's bookings fails instead
    let c3 = programs::CINEMA3;
    let r = search(
        &c3,
        SearchOptions {
            reduction: Reduction::ServiceEncapsulation {
                compare_responses: true,
            },
            ..opts(&c3, Instantiation::dei())
        },
    )
    .await;
    assert_eq!(r.reference_sets(), oracle(&c3, c3.catalog()).await.reference, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_execution_replays_from_its_report_file() {
    let p = programs::FIG5; // A has no fallback for the stream itself: failing the stream fails the test
    let rec = Recorder::new();
    let test = p.test(&rec);
    let report = Search::new(opts(&p, Instantiation::dei()), rec.clone())
        .run(&test)
        .await
        .expect("search");
    let failing = report.failing();
    assert_eq!(failing.len(), 1, "{report}");
    let path = std::env::temp_dir().join(format!("sfit-replay-{}.json", std::process::id()));
    report.save(&path).expect("save");
    let loaded = Report::load(&path).expect("load");
    let _ = std::fs::remove_file(&path);
    let number = loaded.failing()[0].number;
    let again = Search::replay(&test, &loaded, number, Arc::new(rec))
        .await
        .expect("replay");
    assert!(!again.outcome.passed());
    assert_eq!(again.effective, failing[0].effective);
    assert!(loaded.to_json().expect("json").contains("\"plan_wire\""));
    assert!(format!("{loaded}").contains("FAIL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_another_test_is_refused_before_anything_runs() {
    // fig2's report, saved and loaded
    let fig2 = programs::FIG2;
    let report = search(&fig2, opts(&fig2, Instantiation::dei())).await;
    let path = std::env::temp_dir().join(format!("sfit-wrong-test-{}.json", std::process::id()));
    report.save(&path).expect("save");
    let loaded = Report::load(&path).expect("load");
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.test, "fig2");
    // given to cinema-10's replay: refused with both names, and the test never runs
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let cinema10 = test_fn(programs::CINEMA10.name, move |_run| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(()) }
    });
    let rec = Recorder::new();
    for allowing_unreached in [false, true] {
        let replayed = if allowing_unreached {
            Search::replay_allowing_unreached(&cinema10, &loaded, 1, Arc::new(rec.clone())).await
        } else {
            Search::replay(&cinema10, &loaded, 1, Arc::new(rec.clone())).await
        };
        let err = replayed.expect_err("a report of another test");
        let SearchError::WrongTest { report_test, test } = &err else {
            panic!("not a WrongTest error: {err}");
        };
        assert_eq!((report_test.as_str(), test.as_str()), ("fig2", "cinema-10"));
        let message = err.to_string();
        assert!(
            message.contains("`fig2`") && message.contains("`cinema-10`"),
            "{message}"
        );
    }
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "the test ran");
    // the report's own test still replays it
    let again = Search::replay(&fig2.test(&rec), &loaded, 1, Arc::new(rec.clone()))
        .await
        .expect("fig2's own replay");
    assert!(again.unreached.is_empty());
}

/// `SearchError::WrongTest` compares the test's name only. Another test under the report's test name gets
/// past it, and its replay of any execution with a plan is still caught: the plan names the recorded test's
/// RPCs, by indexes that digest the whole call path from the test's own call down, so the other test reaches
/// none of them and the replay fails as unreached (exit 3 in the examples). That holds for a test that makes
/// the very same entry call (fig. 4's body: `A/helloworld` with the same payload, from the same call site, at
/// the same index) as for one that calls other services (cinema-3's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_test_under_the_reports_test_name_does_not_replay_its_plans() {
    let fig2 = programs::FIG2;
    let report = search(&fig2, opts(&fig2, Instantiation::dei())).await;
    let planned: Vec<&ExecutionRecord> = report.executions.iter().filter(|e| !e.plan.is_empty()).collect();
    assert_eq!(planned.len(), 4, "{report}");
    for impostor in [programs::FIG4, programs::CINEMA3] {
        let rec = Recorder::new();
        let test = programs::ModelProgram {
            name: fig2.name,
            ..impostor
        }
        .test(&rec);
        if impostor.name == "fig4" {
            // the same entry call as fig2's test: its RPC, and its index, are those the report recorded
            let own = Search::replay_allowing_unreached(&test, &report, 1, Arc::new(rec.clone()))
                .await
                .expect("the fault-free run");
            let entry = |e: &ExecutionRecord| e.rpcs.iter().find(|r| r.parent.is_none()).map(|r| r.index.clone());
            assert_eq!(entry(&own), entry(&report.executions[0]));
        }
        for recorded in &planned {
            let err = Search::replay(&test, &report, recorded.number, Arc::new(rec.clone()))
                .await
                .expect_err("another test's replay of a plan");
            let SearchError::Unreached(u) = &err else {
                panic!(
                    "{} as fig2, #{}: not an Unreached error: {err}",
                    impostor.name, recorded.number
                );
            };
            assert_eq!(
                u.record.unreached.len(),
                recorded.plan.len(),
                "{} as fig2, #{}: no planned fault reached: {err}",
                impostor.name,
                recorded.number
            );
            assert!(
                err.to_string().contains(&format!(
                    "replay of execution #{} did not carry out its plan",
                    recorded.number
                )),
                "{err}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_single_fault_mode() {
    let p = programs::CINEMA3;
    let single = search(
        &p,
        SearchOptions {
            single_fault: true,
            ..opts(&p, Instantiation::dei())
        },
    )
    .await;
    // the fault-free run observes bookings and movies once each
    assert_eq!(single.executions.len(), 3);
    assert!(single.executions.iter().all(|e| e.plan.len() <= 1));
    let capped = search(
        &p,
        SearchOptions {
            max_executions: Some(2),
            ..opts(&p, Instantiation::dei())
        },
    )
    .await;
    assert_eq!(capped.executions.len(), 2);
    assert!(capped.truncated && capped.pending > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_assertions_see_where_faults_were_injected() {
    let rec = Recorder::new();
    let r = rec.clone();
    let test = test_fn("conditional", move |run| {
        let a = Caller::root(&run, &r);
        async move {
            let got = a.call("B/echo", "x", &[1], |_| async { Ok("x") }).await;
            let injected = run.injected_on("B/*").await;
            match (got, injected, run.planned_on("B/echo")) {
                (Ok(_), false, false) | (Err(_), true, true) => Ok(()),
                other => Err(format!("inconsistent: {other:?}")),
            }
        }
    });
    let report = Search::new(
        SearchOptions {
            catalog: FaultCatalog::single(Fault::UNAVAILABLE),
            ..SearchOptions::default()
        },
        rec,
    )
    .run(&test)
    .await
    .expect("search");
    assert_eq!(report.executions.len(), 2);
    assert!(report.failing().is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_whose_records_contradict_each_other_is_refused_before_anything_runs() {
    let fig2 = programs::FIG2;
    let report = search(&fig2, opts(&fig2, Instantiation::dei())).await;
    let two = report
        .executions
        .iter()
        .position(|e| e.plan.len() == 2)
        .expect("a two-fault execution");
    let one = report
        .executions
        .iter()
        .position(|e| e.plan.len() == 1)
        .expect("a one-fault execution");
    let other = Index::decode("1.AAAAAAAAAAA1").expect("an index");
    // the readable plan names another index than plan_wire
    let mut plan_changed = report.clone();
    plan_changed.executions[one].plan[0].index = other.clone();
    // plan_wire names another fault than the readable plan
    let mut wire_changed = report.clone();
    let e = &mut wire_changed.executions[one];
    let wrong = if e.plan[0].fault == Fault::Connection {
        Fault::UNAVAILABLE
    } else {
        Fault::Connection
    };
    e.plan_wire = dei_propagator::FaultPlan::new(vec![(e.plan[0].index.clone(), wrong)]).encode();
    // garbage in plan_wire
    let mut wire_garbage = report.clone();
    wire_garbage.executions[one].plan_wire = "!!!garbage".into();
    // a second execution with the two-fault execution's number, before it
    let mut duplicate = report.clone();
    let mut copy = duplicate.executions[one].clone();
    copy.number = duplicate.executions[two].number;
    duplicate.executions.insert(two, copy);
    let cases = [
        (
            plan_changed,
            report.executions[one].number,
            "plan_wire",
            "only in `plan`: 1.AAAAAAAAAAA1",
        ),
        (
            wire_changed,
            report.executions[one].number,
            "plan_wire",
            "disagrees with `plan`",
        ),
        (
            wire_garbage,
            report.executions[one].number,
            "plan_wire",
            "does not decode",
        ),
        (
            duplicate,
            report.executions[two].number,
            "number",
            "2 executions have this number",
        ),
    ];
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let test = test_fn(fig2.name, move |_run| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(()) }
    });
    for (tampered, number, field_expected, why_expected) in cases {
        let replayed = Search::replay_allowing_unreached(&test, &tampered, number, Arc::new(Recorder::new())).await;
        let err = replayed.expect_err("an inconsistent report");
        let message = err.to_string();
        let SearchError::Inconsistent { execution, field, .. } = &err else {
            panic!("not an Inconsistent error: {message}");
        };
        assert_eq!((*execution, *field), (number, field_expected), "{message}");
        assert!(
            message.contains(why_expected) && message.contains(&format!("execution #{number}")),
            "{message}"
        );
    }
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "the test ran");
    report
        .check_consistent()
        .expect("the search's own report is consistent");
}
