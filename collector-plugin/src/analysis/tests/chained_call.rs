//! Chained calls on golden data (`testdata/chained_call/`).

use super::golden;
use crate::analysis::chained_call;

fn findings(case: &str) -> Vec<crate::views::ChainedCall> {
    let (_, view) = golden::check(
        case,
        |a| serde_json::json!({ "findings": chained_call::detect(a, &chained_call::Params::default()) }),
    );
    serde_json::from_value(view["findings"].clone()).expect("findings read back")
}

/// getUser(session) then getProfile(user) in three traces: the second input follows the first, sequentially.
#[test]
fn data_dependency() {
    let f = findings("chained_call/data_dependency");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (&*f[0].first, &*f[0].second, &*f[0].service),
        ("users.Users/GetUser", "users.Users/GetProfile", "users")
    );
    assert_eq!(
        (f[0].traces, f[0].confidence),
        (3, crate::views::Confidence::DataDependent)
    );
}

/// The same two calls, overlapping in time: not a chain.
#[test]
fn concurrent() {
    let f = findings("chained_call/concurrent");
    assert!(f.is_empty(), "{f:?}");
}
