//! gRPC signatures by request path, made once per method per process: a signature's digest is computed when
//! it is made, and every call of a method shares its names.
//!
//! The names are interned for the life of the process (at most [`MAX_PATHS`] paths of at most
//! [`MAX_PATH_LEN`] bytes, about 1.5 MiB at worst), and each thread looks them up in a copy of its own. So a
//! call reads them without taking a lock or touching a reference count: the client and the server of a call,
//! and the exporter that drops a span's attributes, usually run on different cores, and every such shared
//! write would move a cache line between them on every call.

use super::methods::{MethodKind, MethodKinds};
use crate::interned::Interned;
use dei_propagator::Signature;
use opentelemetry::StringValue;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

/// At most this many distinct paths are interned; further paths get fresh names on every call (a client
/// that calls unboundedly many paths cannot grow the process's memory).
const MAX_PATHS: usize = 4096;

/// Longer paths are never interned (real method paths are far shorter; a peer cannot pin memory with long
/// ones).
const MAX_PATH_LEN: usize = 256;

/// A gRPC method as spans name it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GrpcMethod {
    /// Its signature (`pkg.Service/Method`).
    pub(crate) signature: Signature,
    /// Its declared kind, if it was declared.
    pub(crate) kind: Option<MethodKind>,
    /// `rpc.service` and `rpc.method` as span attribute values: `pkg.Service` and `Method` (empty when the
    /// path has no `/` after the service).
    pub(crate) rpc: (StringValue, StringValue),
}

impl GrpcMethod {
    /// The method at `path` (`/pkg.Service/Method`); `kinds` are the configuration's declared kinds.
    pub(crate) fn at(path: &str, kinds: &MethodKinds) -> Self {
        let kind = kinds.get(path);
        match interned(path) {
            Some(names) => GrpcMethod {
                signature: names.signature.clone(),
                kind,
                rpc: (names.service.into(), names.method.into()),
            },
            None => {
                let signature = Signature::grpc_path(path);
                let (service, method) = split(signature.name());
                let rpc = (service.to_owned().into(), method.to_owned().into());
                GrpcMethod { signature, kind, rpc }
            }
        }
    }
}

/// `pkg.Service` and `Method` of a signature's name.
fn split(name: &str) -> (&str, &str) {
    name.split_once('/').unwrap_or((name, ""))
}

/// A method's names, interned.
#[derive(Debug)]
struct Names {
    /// The path it was interned under.
    path: &'static str,
    /// With a static name: its clones copy a pointer.
    signature: Signature,
    service: &'static str,
    method: &'static str,
}

/// The names of `path` in `interned`, made and kept now if they were not (`None` past the bound, or for a path
/// too long to keep).
fn intern(interned: &Interned<&'static str, Names>, path: &str) -> Option<&'static Names> {
    if path.len() > MAX_PATH_LEN {
        return None;
    }
    interned.get_or_make(path, || {
        let path: &'static str = Box::leak(Box::from(path));
        let name = path.strip_prefix('/').unwrap_or(path);
        let (service, method) = split(name);
        let names = Names {
            path,
            signature: Signature::from_static_name(name),
            service,
            method,
        };
        (path, Box::new(names))
    })
}

/// The process's interned methods.
fn process_interned() -> &'static Interned<&'static str, Names> {
    static INTERNED: OnceLock<Interned<&'static str, Names>> = OnceLock::new();
    INTERNED.get_or_init(|| Interned::new(MAX_PATHS, "gRPC method paths"))
}

thread_local! {
    /// The interned methods this thread has looked up.
    static SEEN: RefCell<HashMap<&'static str, &'static Names>> = RefCell::default();
}

/// The interned names of `path` (see [`intern`]), from this thread's copy once it has met them.
fn interned(path: &str) -> Option<&'static Names> {
    // (While the thread's locals are being destroyed, the process-wide map answers alone.)
    if let Ok(Some(names)) = SEEN.try_with(|seen| seen.borrow().get(path).copied()) {
        return Some(names);
    }
    let names = intern(process_interned(), path)?;
    let _ = SEEN.try_with(|seen| seen.borrow_mut().insert(names.path, names));
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(m: &GrpcMethod) -> (&str, &str) {
        (m.rpc.0.as_str(), m.rpc.1.as_str())
    }

    #[test]
    fn one_interned_signature_per_path() {
        let none = MethodKinds::default();
        let a = GrpcMethod::at("/cinema.Bookings/Get", &none);
        assert_eq!(a.signature, Signature::grpc_path("/cinema.Bookings/Get"));
        assert_eq!(rpc(&a), ("cinema.Bookings", "Get"));
        let static_name = a.signature.static_name().expect("interned");
        // Every later lookup, from any thread, shares that one name.
        let again = GrpcMethod::at("/cinema.Bookings/Get", &none);
        let elsewhere = std::thread::spawn(|| GrpcMethod::at("/cinema.Bookings/Get", &MethodKinds::default()))
            .join()
            .expect("thread");
        for m in [&again, &elsewhere] {
            assert!(std::ptr::eq(m.signature.static_name().expect("interned"), static_name));
            assert_eq!(m.signature.digest(), a.signature.digest());
            assert_eq!(rpc(m), ("cinema.Bookings", "Get"));
        }
        let bare = GrpcMethod::at("/NoMethod", &none);
        assert_eq!(rpc(&bare), ("NoMethod", ""));
    }

    #[test]
    fn bounded_in_number_and_length() {
        let none = MethodKinds::default();
        let long = format!("/s.S/{}", "m".repeat(MAX_PATH_LEN));
        let m = GrpcMethod::at(&long, &none);
        assert_eq!(m.signature.name(), &long[1..]);
        assert_eq!(m.signature.static_name(), None, "long paths are not interned");
        assert_eq!(rpc(&m), ("s.S", &long[5..]));
        // The process's interned methods are shared with the other tests: the bound is checked on a set of
        // its own.
        let interned = Interned::new(3, "paths");
        for i in 0..5 {
            let names = intern(&interned, &format!("/bounded.S/M{i}"));
            assert_eq!(names.is_some(), i < 3, "path {i}");
        }
        assert!(intern(&interned, "/bounded.S/M1").is_some(), "still there");
        assert_eq!(interned.len(), 3);
        let names = intern(&interned, "/bounded.S/M2").expect("interned");
        assert_eq!((names.service, names.method), ("bounded.S", "M2"));
        assert_eq!(names.signature, Signature::grpc_path("/bounded.S/M2"));
    }

    #[test]
    fn a_method_carries_the_configurations_declared_kind() {
        let mut kinds = MethodKinds::default();
        kinds.insert("/s.S/Stream", MethodKind::Bidi);
        assert_eq!(GrpcMethod::at("/s.S/Stream", &kinds).kind, Some(MethodKind::Bidi));
        assert_eq!(
            GrpcMethod::at("/s.S/Stream", &kinds).kind,
            Some(MethodKind::Bidi),
            "interned"
        );
        assert_eq!(
            GrpcMethod::at("/s.S/Stream", &MethodKinds::default()).kind,
            None,
            "another configuration's kinds"
        );
        assert_eq!(GrpcMethod::at("/s.S/Unary", &kinds).kind, None);
    }
}
