//! `examples/routeguide_sfit.rs`, the first search written from the docs alone, run as a user runs it: its
//! search covers the four RPC kinds and agrees with the brute-force Oracle (72 distinct fault sets on this
//! system), and it exits 0. The example is built by `cargo test` next to this test.

mod built_examples;
use built_examples::example;

use std::process::Command;

#[test]
fn the_routeguide_search_agrees_with_the_oracle() {
    let out = Command::new(example("routeguide_sfit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("oracle agrees: "))
        .unwrap_or_else(|| panic!("no verdict line:\n{stdout}"));
    // "oracle agrees: E executions, S distinct fault sets, the same as the search's N executions"
    let numbers: Vec<usize> = verdict
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(numbers.len(), 3, "{verdict}");
    let (oracle_executions, sets, searched) = (numbers[0], numbers[1], numbers[2]);
    assert_eq!(sets, 72, "{verdict}");
    assert_eq!(searched, sets, "one execution per distinct fault set: {verdict}");
    assert!(oracle_executions >= sets, "{verdict}");
}
