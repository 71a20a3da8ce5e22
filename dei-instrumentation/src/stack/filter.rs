//! Which frames belong to the application, and how their files are named.
//!
//! A frame is kept when its source file lies in the application's workspace. Everything else is dropped, and
//! recognised by structure, not by where a particular machine keeps it:
//!
//! - **dependencies**: files in a package that cargo compiled from outside the workspace, as the binary's own
//!   debug info records them ([`BuildLayout`]: registry, git and vendored crates and path dependencies outside
//!   the workspace, wherever `CARGO_HOME` or the vendor directory is), and, where that record is missing, the
//!   cargo layouts `…/registry/src/<index>/<crate>-<version>/`, `…/git/checkouts/…` and `…/vendor/<crate>/`;
//! - **the toolchain**: the standard library (`/rustc/<commit>/…`, `…/lib/rustlib/src/…`, `library/std` …);
//! - **generated code**: build-script output in `OUT_DIR` (`…/build/<crate>-<hash>/out/`), such as tonic and
//!   prost stubs;
//! - **the runtime and RPC crates** and DEI's own crates, by crate name when only symbol names are known.
//!
//! The allow list wins over every other rule; the deny list is applied after the built-in rules.
//!
//! Workspace files are named relative to the directory the binary was built in, with `/` separators, so that
//! a frame's key is the same wherever the binary runs, wherever it was built and wherever the checkout was.
//! That directory is, in order: [`StackConfig::workspace_root`](super::StackConfig::workspace_root), the
//! `DEI_WORKSPACE_ROOT` variable (both meant for binaries whose debug info was separated from them), and the
//! workspace root that the executable's debug info records. Allow-listed dependency files are named from their
//! package directory on (`tonic-0.14.9/src/…`).

use super::build_layout::BuildLayout;
use std::path::Path;

/// Crate name prefixes whose frames never belong to the application (used when only symbol names are known,
/// and for the runtime boundary).
const FOREIGN_CRATES: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "tokio::",
    "tokio_util::",
    "tokio_stream::",
    "tonic::",
    "tonic_prost::",
    "tower::",
    "tower_http::",
    "hyper::",
    "hyper_util::",
    "h2::",
    "http_body_util::",
    "futures::",
    "futures_util::",
    "futures_core::",
    "futures_executor::",
    "opentelemetry::",
    "opentelemetry_sdk::",
    "tracing::",
    "tracing_core::",
    "tracing_opentelemetry::",
    "tracing_subscriber::",
    "reqwest::",
    "reqwest_middleware::",
    "axum::",
    "axum_core::",
    "async_trait::",
    "backtrace::",
    "criterion::",
    "test::",
    "dei_instrumentation::",
    "dei_propagator::",
];

/// DEI's own crates, by workspace-relative path (when they are workspace members, as in this repository).
const OWN_CRATE_PATHS: &[&str] = &["dei-instrumentation/src/", "dei-propagator/src/"];

/// What a resolved symbol is, for the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// An application frame: kept.
    App,
    /// Not the application's: dropped.
    Foreign,
    /// The async runtime's task or `block_on` machinery: nothing outside it belongs to the request, so the
    /// walk stops here.
    Boundary,
}

/// Where a source file comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// In the workspace the binary was built from: named relative to its root.
    Workspace,
    /// In a dependency's package (registry, git, vendored, or a path dependency outside the workspace).
    Dependency,
    /// The Rust standard library.
    Toolchain,
    /// Build-script output (`OUT_DIR`).
    Generated,
    /// An absolute path in none of the above: the build's root is unknown (see [`BuildLayout::missing`]).
    Unknown,
}

/// A source file's origin and its stable name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) origin: Origin,
    /// The name frames are keyed by: workspace-relative for [`Origin::Workspace`], from the package directory
    /// on for [`Origin::Dependency`], the path as given otherwise.
    pub(crate) name: String,
}

/// The frame filter: allow and deny lists and the build's directories.
#[derive(Clone, Debug)]
pub(crate) struct FrameFilter {
    /// Workspace roots, most specific first, each ending in `/`.
    roots: Vec<String>,
    layout: BuildLayout,
    allow: Vec<String>,
    deny: Vec<String>,
}

fn slashes(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}

fn with_slash(mut s: String) -> String {
    if !s.ends_with('/') {
        s.push('/');
    }
    s
}

/// Resolves `.` and `..` segments lexically, so that a file included as `tests/../examples/x.rs` (with
/// `#[path]`) has the same name, and the same frame key, as `examples/x.rs`.
fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    if absolute { format!("/{joined}") } else { joined }
}

impl FrameFilter {
    /// A filter for the running executable: `root` (or `DEI_WORKSPACE_ROOT`) overrides the workspace root its
    /// debug info records.
    pub(crate) fn new(root: Option<&Path>, allow: Vec<String>, deny: Vec<String>) -> Self {
        let env_root = std::env::var_os("DEI_WORKSPACE_ROOT").filter(|r| !r.is_empty());
        let layout = BuildLayout::current().clone();
        if root.is_none()
            && env_root.is_none()
            && let Some(why) = &layout.missing
        {
            tracing::warn!(
                "dei: frames cannot be named relative to the workspace the binary was built in ({why}); \
                     they keep absolute paths, so indexes change with the build directory. Keep the debug info \
                     in the binary (`debug = \"line-tables-only\"`, no `strip`/`split-debuginfo`), or set \
                     DEI_WORKSPACE_ROOT (or StackConfig::workspace_root) to the directory it was built in"
            );
        }
        FrameFilter::with_layout(root, env_root.as_deref().map(Path::new), layout, allow, deny)
    }

    /// A filter over an explicit layout (tests).
    pub(crate) fn with_layout(
        root: Option<&Path>,
        env_root: Option<&Path>,
        layout: BuildLayout,
        allow: Vec<String>,
        deny: Vec<String>,
    ) -> Self {
        let mut roots: Vec<String> = root
            .into_iter()
            .chain(env_root)
            .map(|r| with_slash(normalize(&slashes(r))))
            .collect();
        roots.extend(layout.workspace_roots.iter().cloned());
        FrameFilter {
            roots,
            layout,
            allow,
            deny,
        }
    }

    /// Where a source file comes from, and the name its frames are keyed by.
    pub(crate) fn locate(&self, file: &Path) -> Located {
        let path = normalize(&slashes(file));
        let located = |origin, name: &str| Located {
            origin,
            name: name.to_string(),
        };
        if !path.starts_with('/') {
            // rustc was given a relative path: a workspace member, named relative to the workspace root already
            // (the standard library's own relative names come with `/rustc/…` in front).
            let origin = if is_toolchain_file(&path) {
                Origin::Toolchain
            } else {
                Origin::Workspace
            };
            return located(origin, &path);
        }
        if is_toolchain_file(&path) {
            return located(Origin::Toolchain, &path);
        }
        if is_generated(&path) {
            return located(Origin::Generated, &path);
        }
        if let Some(package) = self.layout.package_of(&path) {
            return located(Origin::Dependency, &package_relative(&path, package));
        }
        if let Some(name) = cargo_dependency(&path) {
            return located(Origin::Dependency, name);
        }
        if self.layout.in_package_collection(&path) {
            return located(Origin::Dependency, &path);
        }
        for root in &self.roots {
            if let Some(rest) = path.strip_prefix(root.as_str()) {
                // Without the debug info's record, `cargo vendor`'s layout is the only sign of a vendored crate.
                if self.layout.missing.is_some()
                    && let Some(name) = vendored(rest)
                {
                    return located(Origin::Dependency, name);
                }
                return located(Origin::Workspace, rest);
            }
        }
        located(Origin::Unknown, &path)
    }

    /// The name a source file's frames are keyed by (see [`locate`](Self::locate)).
    pub(crate) fn relative(&self, file: &Path) -> String {
        self.locate(file).name
    }

    fn allowed(&self, text: &str) -> bool {
        self.allow.iter().any(|a| text.contains(a.as_str()))
    }

    fn denied(&self, text: &str) -> bool {
        self.deny.iter().any(|d| text.contains(d.as_str()))
    }

    /// Classifies a symbol from its demangled name (without hash) and, when line tables exist, its file as the
    /// symbolizer gives it (`raw_file`) and as [`locate`](Self::locate) places it.
    pub(crate) fn classify(&self, name: Option<&str>, file: Option<(&str, &Located)>) -> Class {
        // Inlined frames carry short names (`block_on<F>`, `{closure#0}`): the file tells them apart.
        if name.is_some_and(is_runtime_boundary) || file.is_some_and(|(raw, _)| is_runtime_file(raw)) {
            return Class::Boundary;
        }
        let subject = file.map(|(raw, _)| raw).or(name).unwrap_or("");
        if subject.is_empty() {
            return Class::Foreign;
        }
        let located_name = file.map(|(_, l)| l.name.as_str());
        if self.allowed(subject)
            || located_name.is_some_and(|n| self.allowed(n))
            || name.is_some_and(|n| self.allowed(n))
        {
            return Class::App;
        }
        let foreign = match file {
            Some((_, located)) => match located.origin {
                Origin::Workspace | Origin::Unknown => {
                    let n = located.name.as_str();
                    OWN_CRATE_PATHS
                        .iter()
                        .any(|p| n.starts_with(p) || n.contains(&format!("/{p}")))
                }
                Origin::Dependency | Origin::Toolchain | Origin::Generated => true,
            },
            None => name.is_none_or(is_foreign_name),
        };
        if foreign
            || self.denied(subject)
            || located_name.is_some_and(|n| self.denied(n))
            || name.is_some_and(|n| self.denied(n))
        {
            Class::Foreign
        } else {
            Class::App
        }
    }

    /// The workspace root frames are named relative to, if one is known.
    pub(crate) fn root(&self) -> Option<&str> {
        self.roots.first().map(String::as_str)
    }
}

/// `path` from its package directory on: `<package-dir>/<rest>`.
fn package_relative(path: &str, package_root: &str) -> String {
    let dir = package_root.trim_end_matches('/');
    let name = dir.rsplit('/').next().unwrap_or(dir);
    format!("{name}/{}", path.strip_prefix(package_root).unwrap_or(path))
}

/// True for the standard library's sources, wherever the toolchain keeps them.
fn is_toolchain_file(path: &str) -> bool {
    path.starts_with("/rustc/")
        || path.contains("/lib/rustlib/src/rust/")
        || ["library/std/", "library/core/", "library/alloc/"]
            .iter()
            .any(|l| path.starts_with(l) || path.contains(&format!("/rustc/{l}")))
}

/// The cargo layouts of downloaded dependencies, wherever `CARGO_HOME` is: the registry
/// (`…/registry/src/<index>/<crate>-<version>/…`) and git checkouts (`…/git/checkouts/<repo>-<hash>/<rev>/…`).
/// Returns the file's name from the package directory on.
fn cargo_dependency(path: &str) -> Option<&str> {
    let segments: Vec<(usize, &str)> = path
        .match_indices('/')
        .map(|(i, _)| i + 1)
        .filter_map(|start| {
            let end = path[start..].find('/').map_or(path.len(), |e| start + e);
            (end > start).then(|| (start, &path[start..end]))
        })
        .collect();
    for w in segments.windows(4) {
        let [(_, a), (_, b), (third_at, _), (package_at, package)] = w else {
            continue;
        };
        if *a == "registry" && *b == "src" && is_crate_with_version(package) {
            return Some(&path[*package_at..]);
        }
        if *a == "git" && *b == "checkouts" {
            return Some(&path[*third_at..]);
        }
    }
    None
}

/// `<crate>-<version>` as cargo names a registry package's directory (`tonic-0.14.9`, `h2-0.4.12`).
fn is_crate_with_version(dir: &str) -> bool {
    dir.rsplit_once('-').is_some_and(|(name, version)| {
        !name.is_empty()
            && version.split('.').count() >= 3
            && version
                .split('.')
                .take(3)
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A workspace-relative path inside a `cargo vendor` directory (`vendor/<crate>/…`): the file's name from the
/// crate's directory on. Only used for files that the debug info does not place in a package.
fn vendored(relative: &str) -> Option<&str> {
    let rest = relative.strip_prefix("vendor/")?;
    rest.contains('/').then_some(rest)
}

/// True for code generated by build scripts into `target/…/build/<crate>-<hash>/out/` (tonic and prost
/// stubs): its path holds the build hash, which changes with the profile and the features, and it only ever
/// forwards the application's calls.
fn is_generated(path: &str) -> bool {
    path.match_indices("/build/").any(|(b, _)| {
        let rest = &path[b + "/build/".len()..];
        rest.split_once('/').is_some_and(|(dir, after)| {
            dir.rsplit_once('-')
                .is_some_and(|(_, hash)| hash.len() == 16 && hash.bytes().all(|c| c.is_ascii_hexdigit()))
                && after.starts_with("out/")
        })
    })
}

/// True for a source file of tokio's runtime (`tokio-1.x/src/runtime/…`).
fn is_runtime_file(file: &str) -> bool {
    file.find("/tokio-")
        .is_some_and(|t| file[t..].contains("/src/runtime/"))
}

/// True for the runtime's task and `block_on` machinery.
pub(crate) fn is_runtime_boundary(name: &str) -> bool {
    let n = name.strip_prefix('<').unwrap_or(name);
    n.starts_with("tokio::runtime::") || n.starts_with("std::rt::lang_start") || n.starts_with("test::run_test")
}

/// True for symbol names of crates outside the application (used when there are no line tables).
fn is_foreign_name(name: &str) -> bool {
    let n = name.strip_prefix('<').unwrap_or(name);
    // C symbols (libc, the loader) have no path.
    !n.contains("::") || FOREIGN_CRATES.iter().any(|c| n.starts_with(c)) || n.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout as the debug info of a binary built in `/home/u/ws` with `CARGO_HOME=/usr/local/cargo` records
    /// it: one vendored crate, one path dependency outside the workspace.
    fn layout() -> BuildLayout {
        let reg = "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
        BuildLayout::from_units(
            [
                ("svc/src/main.rs/@/svc.x", "/home/u/ws".to_string()),
                ("/x/tonic-0.14.9/src/lib.rs/@/tonic.x", format!("{reg}/tonic-0.14.9")),
                (
                    "/home/u/ws/vendor/tower/src/lib.rs/@/tower.x",
                    "/home/u/ws/vendor/tower".into(),
                ),
                ("/home/u/common/src/lib.rs/@/common.x", "/home/u/common".into()),
                ("library/std/src/lib.rs/@/std.x", "/rustc/abc".into()),
            ]
            .map(|(n, d)| (n.to_string(), d)),
        )
    }

    fn filter() -> FrameFilter {
        FrameFilter::with_layout(
            None,
            None,
            layout(),
            vec!["vendored/keep".into()],
            vec!["src/generated/".into()],
        )
    }

    fn origin(f: &FrameFilter, path: &str) -> (Origin, String) {
        let l = f.locate(Path::new(path));
        (l.origin, l.name)
    }

    #[test]
    fn workspace_files_are_named_relative_to_the_recorded_root() {
        let f = filter();
        assert_eq!(
            origin(&f, "/home/u/ws/svc/src/a.rs"),
            (Origin::Workspace, "svc/src/a.rs".into())
        );
        assert_eq!(origin(&f, "svc/src/a.rs"), (Origin::Workspace, "svc/src/a.rs".into()));
        assert_eq!(
            f.relative(Path::new("/home/u/ws/svc/tests/../src/./a.rs")),
            "svc/src/a.rs"
        );
        assert_eq!(f.relative(Path::new("svc/tests/../../x/a.rs")), "x/a.rs");
        assert_eq!(f.relative(Path::new("../x/a.rs")), "../x/a.rs");
        // The configured root and DEI_WORKSPACE_ROOT come first.
        let overridden = FrameFilter::with_layout(
            Some(Path::new("/srv/build")),
            Some(Path::new("/other")),
            layout(),
            vec![],
            vec![],
        );
        assert_eq!(
            overridden.relative(Path::new("/srv/build/svc/src/a.rs")),
            "svc/src/a.rs"
        );
        assert_eq!(overridden.relative(Path::new("/other/svc/src/a.rs")), "svc/src/a.rs");
        assert_eq!(
            overridden.relative(Path::new("/home/u/ws/svc/src/a.rs")),
            "svc/src/a.rs"
        );
        assert_eq!(overridden.root(), Some("/srv/build/"));
    }

    #[test]
    fn dependencies_are_recognised_by_structure_wherever_cargo_keeps_them() {
        let f = filter();
        for (path, name) in [
            // the debug info's package roots
            (
                "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tonic-0.14.9/src/client/grpc.rs",
                "tonic-0.14.9/src/client/grpc.rs",
            ),
            (
                "/home/u/ws/vendor/tower/src/util/oneshot.rs",
                "tower/src/util/oneshot.rs",
            ),
            ("/home/u/common/src/lib.rs", "common/src/lib.rs"),
            // inlined crates without a unit of their own, beside ones that have
            (
                "/home/u/ws/vendor/futures-util/src/lib.rs",
                "/home/u/ws/vendor/futures-util/src/lib.rs",
            ),
            // the registry and git layouts under any CARGO_HOME
            (
                "/opt/ch/registry/src/mirror-0123456789abcdef/h2-0.4.12/src/proto.rs",
                "h2-0.4.12/src/proto.rs",
            ),
            (
                "/srv/x/git/checkouts/tonic-0a1b2c/5f3e2d1/tonic/src/lib.rs",
                "tonic-0a1b2c/5f3e2d1/tonic/src/lib.rs",
            ),
        ] {
            assert_eq!(origin(&f, path), (Origin::Dependency, name.into()), "{path}");
        }
        assert_eq!(
            origin(&f, "/rustc/abc/library/core/src/ops/function.rs").0,
            Origin::Toolchain
        );
        assert_eq!(
            origin(
                &f,
                "/root/.rustup/toolchains/1.91-x86_64/lib/rustlib/src/rust/library/std/src/rt.rs"
            )
            .0,
            Origin::Toolchain
        );
        assert_eq!(
            origin(&f, "/home/u/ws/target/debug/build/svc-0123456789abcdef/out/hello.rs").0,
            Origin::Generated
        );
        // not a build hash: an ordinary folder named build
        assert_eq!(origin(&f, "/home/u/ws/build/out/x.rs").0, Origin::Workspace);
        // A folder named vendor in the workspace is the application's when the debug info knows better.
        assert_eq!(origin(&f, "/home/u/ws/vendor.rs").0, Origin::Workspace);
        // Outside everything known: kept as it is.
        assert_eq!(
            origin(&f, "/elsewhere/a.rs"),
            (Origin::Unknown, "/elsewhere/a.rs".into())
        );
    }

    #[test]
    fn without_the_debug_info_the_layouts_still_tell_dependencies() {
        let f = FrameFilter::with_layout(
            Some(Path::new("/home/u/ws")),
            None,
            BuildLayout::from_units(std::iter::empty()),
            vec![],
            vec![],
        );
        assert_eq!(
            origin(&f, "/home/u/ws/vendor/tonic/src/lib.rs"),
            (Origin::Dependency, "tonic/src/lib.rs".into())
        );
        assert_eq!(
            origin(
                &f,
                "/cache/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.48.0/src/io.rs"
            ),
            (Origin::Dependency, "tokio-1.48.0/src/io.rs".into())
        );
        assert_eq!(
            origin(&f, "/home/u/ws/svc/src/a.rs"),
            (Origin::Workspace, "svc/src/a.rs".into())
        );
    }

    fn class(f: &FrameFilter, name: Option<&str>, file: Option<&str>) -> Class {
        let located = file.map(|p| (p, f.locate(Path::new(p))));
        f.classify(name, located.as_ref().map(|(raw, l)| (*raw, l)))
    }

    #[test]
    fn classification() {
        let f = filter();
        assert_eq!(class(&f, Some("svc::handler"), Some("svc/src/a.rs")), Class::App);
        assert_eq!(
            class(&f, Some("svc::handler"), Some("/home/u/ws/svc/src/a.rs")),
            Class::App
        );
        let reg = "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tonic-0.14.9/src/client/grpc.rs";
        assert_eq!(
            class(&f, Some("tonic::client::grpc::Grpc<T>::unary"), Some(reg)),
            Class::Foreign
        );
        assert_eq!(
            class(
                &f,
                Some("tower::util::Oneshot::poll"),
                Some("/home/u/ws/vendor/tower/src/util/oneshot.rs")
            ),
            Class::Foreign
        );
        assert_eq!(
            class(&f, Some("common::f"), Some("/home/u/common/src/lib.rs")),
            Class::Foreign
        );
        assert_eq!(
            class(
                &f,
                Some("core::ops::function::FnOnce::call_once"),
                Some("/rustc/abc/library/core/src/ops/function.rs")
            ),
            Class::Foreign
        );
        let tokio =
            "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.48.0/src/runtime/task/harness.rs";
        assert_eq!(
            class(
                &f,
                Some("<tokio::runtime::task::harness::Harness<T,S>>::poll"),
                Some(reg)
            ),
            Class::Boundary
        );
        assert_eq!(class(&f, Some("{closure#0}"), Some(tokio)), Class::Boundary);
        assert_eq!(
            class(&f, Some("svc::gen"), Some("svc/src/generated/x.rs")),
            Class::Foreign
        );
        let kept = "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/keep-1.0.0/vendored/keep/src/lib.rs";
        assert_eq!(class(&f, Some("keep::f"), Some(kept)), Class::App);
        assert_eq!(
            class(
                &f,
                Some("dei_instrumentation::grpc::client::x"),
                Some("dei-instrumentation/src/grpc/client.rs")
            ),
            Class::Foreign
        );
        // symbols only
        assert_eq!(class(&f, Some("svc::handler::{{closure}}"), None), Class::App);
        assert_eq!(class(&f, Some("tower::util::Oneshot::poll"), None), Class::Foreign);
        assert_eq!(class(&f, Some("memcpy"), None), Class::Foreign);
        assert_eq!(class(&f, None, None), Class::Foreign);
    }
}
