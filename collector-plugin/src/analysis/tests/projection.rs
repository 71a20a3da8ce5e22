//! Projection to coarser instantiations on golden data (`testdata/projection/`).

use super::golden;
use crate::analysis::projection;
use crate::views::Projection;
use dei_propagator::Instantiation;

fn projections(case: &str, targets: &[(&str, Instantiation)]) -> Vec<Projection> {
    let (_, view) = golden::check(case, |a| {
        serde_json::Value::Object(
            targets
                .iter()
                .map(|(name, i)| {
                    let p = projection::project_tree(a, i, 10);
                    (name.to_string(), serde_json::to_value(p).expect("a projection writes"))
                })
                .collect(),
        )
    });
    targets
        .iter()
        .map(|(name, _)| serde_json::from_value(view[name].clone()).expect("a projection reads back"))
        .collect()
}

/// The shop's trace: the two Price calls differ only by payload.
#[test]
fn payload_distinguished_calls() {
    let [p, s] = &projections(
        "projection/payload_distinguished_calls",
        &[
            ("filibuster", Instantiation::filibuster()),
            ("signature_only", Instantiation::signature_only()),
        ],
    )[..] else {
        unreachable!("two targets")
    };
    // full DEI tells them apart, Filibuster (no payload) gives them counts 1 and 2 (distinct names) ...
    assert_eq!(p.rpcs, 4);
    assert_eq!(
        p.reproduced_recorded, 4,
        "replay under dei reproduces the recorded indexes"
    );
    assert_eq!(p.collapsed_names, 0);
    // ... while signature-only collapses them into one name
    assert_eq!(s.collapsed_names, 1);
    assert_eq!(s.collapses[0].max_in_one_trace, 2);
    assert_eq!(s.distinct_full, 4);
    assert_eq!(s.distinct_projected, 3);
}

/// Two concurrent Price calls from one call site, issued in a different order in each of two traces.
#[test]
fn names_change_meaning() {
    let [full, f] = &projections(
        "projection/names_change_meaning",
        &[
            ("dei", Instantiation::dei()),
            ("filibuster", Instantiation::filibuster()),
        ],
    )[..] else {
        unreachable!("two targets")
    };
    assert_eq!(
        (full.distinct_full, full.unstable_names),
        (2, 0),
        "the full DEI names are stable"
    );
    assert_eq!(
        f.collapsed_names, 0,
        "within one trace the counts still tell them apart"
    );
    assert_eq!(
        f.unstable_names, 2,
        "…but Price|1 and Price|2 each meant a and b: {f:?}"
    );
    assert!(f.unstable.iter().all(|u| u.distinct_full == 2));
}
