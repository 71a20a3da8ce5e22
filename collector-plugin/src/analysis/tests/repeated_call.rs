//! Repeated calls on golden data (`testdata/repeated_call/`).

use super::golden;
use crate::analysis::repeated_call;
use crate::views::RepeatScope;

/// frontend calls users.GetCurrentUser("tok") twice, and cart (called once by frontend) calls it once more.
#[test]
fn one_parent_and_across_layers() {
    let (_, view) = golden::check(
        "repeated_call/one_parent_and_across_layers",
        |a| serde_json::json!({ "findings": repeated_call::detect(a) }),
    );
    let f: Vec<crate::views::RepeatedCall> =
        serde_json::from_value(view["findings"].clone()).expect("findings read back");
    let same = f
        .iter()
        .find(|f| f.scope == RepeatScope::SameParent)
        .expect("same parent");
    assert_eq!(
        (&*same.signature, same.max_calls_in_one_trace),
        ("users.Users/GetCurrentUser", 2)
    );
    let across = f
        .iter()
        .find(|f| f.scope == RepeatScope::AcrossLayers)
        .expect("across layers");
    assert_eq!(across.max_calls_in_one_trace, 3);
    assert!(across.callers.contains("cart") && across.callers.contains("frontend"));
    assert_eq!(f.len(), 2, "Cart/Get is called once: {f:?}");
}
