//! Which frames belong to the application, and how their files are named.
//!
//! A frame is kept when its source file lies in the application: not in the cargo registry or a git checkout,
//! not in the Rust standard library (`/rustc/…`, `library/std`…), not in the runtime and RPC crates (tokio,
//! tonic, tower, hyper, futures, …) and not in DEI's own crates. The allow list wins over every other rule;
//! the deny list is applied after the built-in rules. Files are named relative to the workspace root with `/`
//! separators, so that the key of a frame is the same wherever the workspace is checked out.

use std::path::{Path, PathBuf};

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

/// Path fragments (with `/` separators) that mark a file outside the application.
const FOREIGN_PATHS: &[&str] = &[
    "/.cargo/registry/",
    "/.cargo/git/",
    "/rustc/",
    "/library/std/",
    "/library/core/",
    "/library/alloc/",
    "/dei-instrumentation/src/",
    "/dei-propagator/src/",
];

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

/// The frame filter: allow and deny lists and the workspace root.
#[derive(Clone, Debug)]
pub(crate) struct FrameFilter {
    roots: Vec<String>,
    allow: Vec<String>,
    deny: Vec<String>,
}

fn slashes(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}

/// The directories that relative file names are taken against, most specific first: the configured root, the
/// `DEI_WORKSPACE_ROOT` variable, the outermost ancestor of the current directory that holds a `Cargo.toml`
/// (the cargo workspace), and the current directory.
fn detect_roots(configured: Option<&Path>) -> Vec<String> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(r) = configured {
        roots.push(r.to_path_buf());
    }
    if let Some(r) = std::env::var_os("DEI_WORKSPACE_ROOT") {
        roots.push(PathBuf::from(r));
    }
    if let Ok(cwd) = std::env::current_dir() {
        let outermost = cwd.ancestors().filter(|a| a.join("Cargo.toml").is_file()).last();
        if let Some(ws) = outermost {
            roots.push(ws.to_path_buf());
        }
        roots.push(cwd);
    }
    roots
        .into_iter()
        .map(|r| {
            let mut s = slashes(&r);
            if !s.ends_with('/') {
                s.push('/');
            }
            s
        })
        .collect()
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
    pub(crate) fn new(root: Option<&Path>, allow: Vec<String>, deny: Vec<String>) -> Self {
        FrameFilter {
            roots: detect_roots(root),
            allow,
            deny,
        }
    }

    /// The workspace-relative name of a source file.
    pub(crate) fn relative(&self, file: &Path) -> String {
        let s = normalize(&slashes(file));
        for root in &self.roots {
            if let Some(rest) = s.strip_prefix(root.as_str()) {
                return rest.to_string();
            }
        }
        s
    }

    fn allowed(&self, text: &str) -> bool {
        self.allow.iter().any(|a| text.contains(a.as_str()))
    }

    fn denied(&self, text: &str) -> bool {
        self.deny.iter().any(|d| text.contains(d.as_str()))
    }

    /// Classifies a symbol from its demangled name (without hash) and, when line tables exist, its file.
    pub(crate) fn classify(&self, name: Option<&str>, file: Option<&str>) -> Class {
        // Inlined frames carry short names (`block_on<F>`, `{closure#0}`): the file tells them apart.
        if name.is_some_and(is_runtime_boundary) || file.is_some_and(is_runtime_file) {
            return Class::Boundary;
        }
        let subject = file.or(name).unwrap_or("");
        if subject.is_empty() {
            return Class::Foreign;
        }
        if self.allowed(subject) || name.is_some_and(|n| self.allowed(n)) {
            return Class::App;
        }
        let foreign = match file {
            Some(f) => {
                let f = format!("/{}", f.trim_start_matches('/'));
                FOREIGN_PATHS.iter().any(|p| f.contains(p)) || f.starts_with("/rustc") || is_generated(&f)
            }
            None => name.is_none_or(is_foreign_name),
        };
        if foreign || self.denied(subject) || name.is_some_and(|n| self.denied(n)) {
            Class::Foreign
        } else {
            Class::App
        }
    }
}

/// True for code generated by build scripts into `target/…/build/<crate>-<hash>/out/` (tonic and prost
/// stubs): its path holds the build hash, which changes with the profile and the features, and it only ever
/// forwards the application's calls.
fn is_generated(path: &str) -> bool {
    path.find("/build/").is_some_and(|b| path[b..].contains("/out/"))
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

    fn filter() -> FrameFilter {
        FrameFilter {
            roots: vec!["/home/u/ws/".into()],
            allow: vec!["vendored/keep".into()],
            deny: vec!["src/generated/".into()],
        }
    }

    #[test]
    fn relative_names() {
        assert_eq!(filter().relative(Path::new("/home/u/ws/svc/src/a.rs")), "svc/src/a.rs");
        assert_eq!(filter().relative(Path::new("svc/src/a.rs")), "svc/src/a.rs");
        assert_eq!(
            filter().relative(Path::new("/home/u/ws/svc/tests/../src/./a.rs")),
            "svc/src/a.rs"
        );
        assert_eq!(filter().relative(Path::new("svc/tests/../../x/a.rs")), "x/a.rs");
        assert_eq!(filter().relative(Path::new("../x/a.rs")), "../x/a.rs");
    }

    #[test]
    fn classification() {
        let f = filter();
        assert_eq!(f.classify(Some("svc::handler"), Some("svc/src/a.rs")), Class::App);
        let reg = "/root/.cargo/registry/src/index.crates.io-1/tonic-0.14.9/src/client/grpc.rs";
        assert_eq!(
            f.classify(Some("tonic::client::grpc::Grpc<T>::unary"), Some(reg)),
            Class::Foreign
        );
        assert_eq!(
            f.classify(
                Some("core::ops::function::FnOnce::call_once"),
                Some("/rustc/abc/library/core/src/ops/function.rs")
            ),
            Class::Foreign
        );
        assert_eq!(
            f.classify(Some("<tokio::runtime::task::harness::Harness<T,S>>::poll"), Some(reg)),
            Class::Boundary
        );
        assert_eq!(
            f.classify(Some("svc::gen"), Some("svc/src/generated/x.rs")),
            Class::Foreign
        );
        let kept = "/root/.cargo/registry/src/x/vendored/keep/src/lib.rs";
        assert_eq!(f.classify(Some("keep::f"), Some(kept)), Class::App);
        assert_eq!(
            f.classify(
                Some("dei_instrumentation::grpc::client::x"),
                Some("dei-instrumentation/src/grpc/client.rs")
            ),
            Class::Foreign
        );
        // symbols only
        assert_eq!(f.classify(Some("svc::handler::{{closure}}"), None), Class::App);
        assert_eq!(f.classify(Some("tower::util::Oneshot::poll"), None), Class::Foreign);
        assert_eq!(f.classify(Some("memcpy"), None), Class::Foreign);
        assert_eq!(f.classify(None, None), Class::Foreign);
    }
}
