//! Ambiguous indexes on golden data (`testdata/ambiguous/`).

use super::golden;
use crate::analysis::ambiguous;

/// Two identical concurrent calls get the same index; instrumentation flagged all four spans ambiguous.
#[test]
fn flags_and_collisions() {
    let (_, view) = golden::check(
        "ambiguous/flags_and_collisions",
        |a| serde_json::json!({ "findings": ambiguous::detect(a) }),
    );
    let f: Vec<crate::views::AmbiguousIndex> =
        serde_json::from_value(view["findings"].clone()).expect("findings read back");
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].flagged_by_instrumentation, f[0].collisions_in_trace), (4, 1));
}
