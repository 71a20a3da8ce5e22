//! Hidden redundancy (issue #22, part 2): redundancy is judged by reference index (full DEI) too, so an
//! instantiation that collapses RPCs shows executions that failed the same RPCs as redundant, instead of
//! `0 redundant`.

use dei_propagator::{Fault, Instantiation};
use dei_sfit::model::Caller;
use dei_sfit::search::fault_set;
use dei_sfit::*;

/// Fig. 3's fan-out made deterministic: A calls B's echo with "Hello" and "World" from one call site, in an
/// order the scheduler would pick (here: the execution's number, so that the test is repeatable). Without
/// the payload (Filibuster's instantiation) the two calls are told apart by their count only, so a plan on
/// "the first echo" fails Hello in one execution and World in the next.
fn fan_out(rec: &Recorder) -> impl FunctionalTest + use<> {
    let r = rec.clone();
    test_fn("fan-out", move |run| {
        let a = Caller::root(&run, &r);
        let order = if run.number() % 2 == 0 {
            ["World", "Hello"]
        } else {
            ["Hello", "World"]
        };
        async move {
            for s in order {
                let _ = a.call("B/echo", s, &[7], |_| async { Ok(()) }).await;
            }
            Ok(())
        }
    })
}

async fn search(instantiation: Instantiation) -> Report {
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        instantiation,
        ..SearchOptions::default()
    };
    Search::new(options, rec.clone())
        .run(&fan_out(&rec))
        .await
        .expect("search")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collapsing_instantiation_shows_its_repeated_fault_sets_as_redundant() {
    let coarse = search(Instantiation::filibuster()).await;
    // under its own indexes every execution failed a different set ...
    assert!(coarse.executions.iter().all(|e| e.redundant_with.is_none()), "{coarse}");
    // ... but some failed the same RPCs as an earlier one
    let hidden: Vec<&ExecutionRecord> = coarse
        .executions
        .iter()
        .filter(|e| e.redundant_by_reference_with.is_some())
        .collect();
    // depth-first: #2 fails the second echo, which in an even execution is Hello; #3 fails the first echo,
    // which in an odd one is Hello again: the same RPC by reference index, under a different coarse index.
    // #4 fails both.
    assert_eq!(coarse.executions.len(), 4, "{coarse}");
    assert_eq!(
        hidden
            .iter()
            .map(|e| (e.number, e.redundant_by_reference_with))
            .collect::<Vec<_>>(),
        vec![(3, Some(2))],
        "{coarse}"
    );
    for e in &hidden {
        let first = e.redundant_by_reference_with.expect("set");
        let earlier = coarse
            .executions
            .iter()
            .find(|x| x.number == first)
            .expect("the earlier execution");
        assert!(earlier.number < e.number);
        assert_eq!(earlier.reference_set(), e.reference_set(), "{coarse}");
        assert_ne!(fault_set(&earlier.effective), fault_set(&e.effective), "{coarse}");
    }
    assert_eq!(coarse.redundant().len(), hidden.len(), "redundant() counts them");
    let text = format!("{coarse}");
    assert!(text.contains(&format!("{} redundant", hidden.len())), "{text}");
    assert!(text.contains("REDUNDANT by reference index with #"), "{text}");
    let xml = coarse.to_junit(&ReplayCommand::Api);
    assert!(xml.contains(r#"<property name="dei.redundant" value=""#), "{xml}");
    assert!(xml.contains("the same effective fault set by reference index"), "{xml}");
    // the JSON keeps it, and canonical order recomputes it from the sets
    let loaded: Report = serde_json::from_str(&coarse.to_json().expect("json")).expect("parse");
    assert_eq!(loaded.redundant().len(), hidden.len());
    let mut canonical = coarse.clone();
    canonical.canonical_order();
    assert_eq!(canonical.redundant().len(), hidden.len(), "{canonical}");

    // full DEI tells Hello from World by payload: nothing is redundant, by either measure
    let full = search(Instantiation::dei()).await;
    assert!(full.redundant().is_empty(), "{full}");
    assert_eq!(full.executions.len(), 4, "{full}");
}
