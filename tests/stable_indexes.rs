//! Indexes name the same RPC wherever a service runs and wherever it was built.
//!
//! `tests/fixtures/stable-index` issues indexes as the layers do (signature, payload, captured stack, request
//! scope) from call sites reached through dependency code (`futures::future::join_all`, iterator adapters, a
//! spawned task) and prints them with their frames. Each test compares its output, indexes and frames, with a
//! reference run of the default build from the repository root:
//!
//! - the same binary started from other working directories, and copied elsewhere;
//! - the workspace copied to another path and rebuilt there with `CARGO_HOME` elsewhere;
//! - the workspace copied again and rebuilt from `cargo vendor`ed sources.
//!
//! Every frame must be the fixture's own (`src/…`): a dependency frame that slipped through would change the
//! indexes with every dependency bump. The builds go to `target/stable-index/` (incremental across runs); the
//! vendored build runs `cargo vendor`, which needs the registry.

mod built_examples;
use built_examples::example;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The repository root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture's directory inside a checkout.
fn fixture_in(checkout: &Path) -> PathBuf {
    checkout.join("tests/fixtures/stable-index")
}

/// `target/stable-index/`, beside this test's own build.
fn work_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    // target/<profile>/deps/<test>
    let target = exe.ancestors().nth(3).expect("the target directory").to_path_buf();
    let dir = target.join("stable-index");
    std::fs::create_dir_all(&dir).expect("target/stable-index");
    dir
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // What the outer `cargo test` set for this test is not the fixture's.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Builds the fixture of `checkout` into `target_dir`, with `envs`; returns the binary.
fn build(checkout: &Path, target_dir: &Path, envs: &[(&str, &Path)], offline: bool) -> PathBuf {
    // One build at a time: the machine may have two cores.
    static BUILDS: Mutex<()> = Mutex::new(());
    let _one = BUILDS.lock().unwrap_or_else(|p| p.into_inner());
    let mut cmd = cargo();
    cmd.current_dir(fixture_in(checkout))
        .args(["build", "--quiet", "--target-dir"])
        .arg(target_dir);
    if offline {
        cmd.arg("--offline");
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building the fixture in {} failed:\n{}",
        checkout.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir.join("debug/stable-index-fixture")
}

/// Runs `binary` from `cwd`; returns what it printed, checked for shape.
fn run(binary: &Path, cwd: &Path) -> String {
    let out = Command::new(binary)
        .current_dir(cwd)
        .output()
        .expect("the fixture runs");
    assert!(
        out.status.success(),
        "{} from {} failed:\n{}",
        binary.display(),
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    check_shape(&text, binary, cwd);
    text
}

/// Ten calls, ten distinct indexes, every frame the fixture's own.
fn check_shape(text: &str, binary: &Path, cwd: &Path) {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{} from {}:\n{text}", binary.display(), cwd.display());
    let mut indexes: Vec<&str> = Vec::new();
    for line in &lines {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "{line}");
        indexes.push(fields[1]);
        let frames: Vec<&str> = fields[2].split(';').collect();
        assert!(frames.len() >= 2, "too few frames: {line}");
        for frame in frames {
            assert!(
                frame.starts_with("src/main.rs:"),
                "a frame that is not the application's, from {} run in {}: {frame}\n{text}",
                binary.display(),
                cwd.display()
            );
        }
    }
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), 10, "indexes repeat:\n{text}");
}

/// The default build, run from the repository root.
fn reference() -> &'static (PathBuf, String) {
    static REFERENCE: OnceLock<(PathBuf, String)> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        // Online: it fetches whatever the fixture's lock names that the workspace's build did not, so that the
        // offline builds below find every package in the cache.
        let binary = build(&repo(), &work_dir().join("default"), &[], false);
        let text = run(&binary, &repo());
        (binary, text)
    })
}

/// Copies the checkout's files (tracked, and untracked but not ignored) to `to`, keeping what is unchanged.
fn copy_checkout(to: &Path) {
    let out = Command::new("git")
        .current_dir(repo())
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = std::str::from_utf8(name).expect("UTF-8 file names");
        let from = repo().join(name);
        if !from.is_file() {
            continue; // deleted in the working tree
        }
        let dest = to.join(name);
        if std::fs::read(&dest).ok() == std::fs::read(&from).ok() {
            continue; // unchanged: keep its time, so that the rebuild stays incremental
        }
        std::fs::create_dir_all(dest.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(&from, &dest).unwrap_or_else(|e| panic!("copy {name}: {e}"));
    }
}

/// The `CARGO_HOME` in use: `CARGO_HOME`, or `~/.cargo`.
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME")
}

/// Copies `from` to `to` recursively, by hard links where the file system allows.
fn link_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().expect("file type").is_dir() {
            link_tree(&src, &dest);
        } else if !dest.exists() && std::fs::hard_link(&src, &dest).is_err() {
            std::fs::copy(&src, &dest).expect("copy");
        }
    }
}

#[test]
fn the_same_binary_gives_the_same_indexes_from_any_directory() {
    let (binary, expected) = reference();
    let elsewhere = work_dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    for cwd in [
        fixture_in(&repo()),
        PathBuf::from("/"),
        elsewhere.clone(),
        std::env::temp_dir(),
    ] {
        assert_eq!(&run(binary, &cwd), expected, "started from {}", cwd.display());
    }
    // The binary copied to another directory and started there (as in a container's /app).
    let copy = elsewhere.join("stable-index-fixture");
    std::fs::copy(binary, &copy).expect("copy the binary");
    assert_eq!(
        &run(&copy, &elsewhere),
        expected,
        "the binary copied to {}",
        copy.display()
    );
    assert_eq!(&run(&copy, Path::new("/")), expected);
}

#[test]
fn a_copied_workspace_built_with_cargo_home_elsewhere_gives_the_same_indexes() {
    let (_, expected) = reference();
    let checkout = work_dir().join("checkout-copy");
    copy_checkout(&checkout);
    // A CARGO_HOME at another path (as in the official Rust images' /usr/local/cargo), holding the same
    // registry index and downloaded crates: the build is offline and unpacks them under the new path.
    let home = work_dir().join("cargo-home");
    for part in ["registry/index", "registry/cache"] {
        link_tree(&cargo_home().join(part), &home.join(part));
    }
    let binary = build(
        &checkout,
        &work_dir().join("checkout-copy-target"),
        &[("CARGO_HOME", &home)],
        true,
    );
    let text = run(&binary, &checkout);
    assert_eq!(
        &text,
        expected,
        "rebuilt in {} with CARGO_HOME={}",
        checkout.display(),
        home.display()
    );
}

#[test]
fn a_vendored_build_gives_the_same_indexes() {
    let (_, expected) = reference();
    let checkout = work_dir().join("vendored-copy");
    copy_checkout(&checkout);
    let fixture = fixture_in(&checkout);
    // `cargo vendor` copies every package in the lock file, for every platform: some are not downloaded yet.
    let out = cargo()
        .current_dir(&fixture)
        .args(["vendor", "--quiet", "vendor"])
        .output()
        .expect("cargo vendor runs");
    assert!(
        out.status.success(),
        "cargo vendor: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::create_dir_all(fixture.join(".cargo")).expect("mkdir");
    std::fs::write(
        fixture.join(".cargo/config.toml"),
        "[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n[source.vendored-sources]\ndirectory = \"vendor\"\n",
    )
    .expect("write the vendoring config");
    let binary = build(&checkout, &work_dir().join("vendored-target"), &[], true);
    let text = run(&binary, &fixture);
    assert_eq!(&text, expected, "built from vendored sources in {}", fixture.display());
}

/// Runs `binary args…` from `cwd`; returns the exit code and what it printed.
fn run_example(binary: &Path, cwd: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(binary)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the example runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("an exit code"), text)
}

/// The lines that name an injected fault and its index, in order.
fn injected(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("injected "))
        .collect()
}

#[test]
fn a_saved_report_replays_to_the_same_indexes_and_faults_from_any_directory() {
    let dir = work_dir().join("replay");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    // Fig. 2 passes under every plan (fallbacks); Fig. 5 has failing executions. Fig. 1 calls over HTTP, to
    // servers on ports chosen at run time.
    for (name, want_failing) in [
        ("fig2_loops", false),
        ("fig5_streaming", true),
        ("fig1_fallbacks", false),
    ] {
        let binary = example(name);
        let report_path = dir.join(format!("{name}.json"));
        let report_arg = report_path.to_str().expect("UTF-8");
        let (code, text) = run_example(&binary, &repo(), &["--quiet", "--json", report_arg]);
        assert_eq!(code, 0, "{name}: the search\n{text}");
        let report = dei_sfit::Report::load(&report_path).expect("the saved report");
        let execution = if want_failing {
            report.failing().first().copied().expect("a failing execution")
        } else {
            report
                .executions
                .iter()
                .max_by_key(|e| e.plan.len())
                .expect("an execution")
        };
        assert!(!execution.plan.is_empty(), "{name}: an execution with a plan");
        let n = execution.number.to_string();
        let args = ["--replay", report_arg, n.as_str()];
        let (ref_code, ref_text) = run_example(&binary, &repo(), &args);
        let expected_code = if want_failing { 1 } else { 0 };
        assert_eq!(ref_code, expected_code, "{name} #{n} from the repository\n{ref_text}");
        let reference = injected(&ref_text);
        assert_eq!(
            reference.len(),
            execution.plan.len(),
            "{name} #{n}: every fault injected\n{ref_text}"
        );
        let copy = dir.join(name);
        std::fs::copy(&binary, &copy).expect("copy the example");
        for (binary, cwd) in [
            (&binary, PathBuf::from("/")),
            (&binary, dir.clone()),
            (&copy, dir.clone()),
            (&copy, PathBuf::from("/")),
        ] {
            let (code, text) = run_example(binary, &cwd, &args);
            assert_eq!(
                (code, injected(&text)),
                (ref_code, reference.clone()),
                "{name} #{n}: {} run from {}\n{text}",
                binary.display(),
                cwd.display()
            );
        }
    }
}
