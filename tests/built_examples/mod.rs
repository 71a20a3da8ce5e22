//! The root package's examples as the tests run them: built by `cargo test` (or `cargo build --examples`)
//! next to the test executable's folder, `target/<profile>/examples/NAME`.

use std::path::{Path, PathBuf};

/// The path of example `name`; fails the test when it was not built.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/..")
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples (or run `cargo build --examples`)",
        path.display()
    );
    path
}
