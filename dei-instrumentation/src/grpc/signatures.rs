//! gRPC signatures by request path, made once per method: a signature's digest is computed when it is made,
//! and every call of a method shares its name and its declared kind.

use super::methods::{MethodKind, MethodKinds};
use dei_propagator::Signature;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::RwLock;

/// At most this many distinct paths are kept; further paths get a fresh signature on every call (a client
/// that calls unboundedly many paths cannot grow the cache).
const MAX_PATHS: usize = 4096;

/// Longer paths are never kept (real method paths are far shorter; a peer cannot pin memory with long ones).
const MAX_PATH_LEN: usize = 256;

/// A gRPC method as spans name it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GrpcMethod {
    /// Its signature (`pkg.Service/Method`).
    pub(crate) signature: Signature,
    /// Its declared kind, if it was declared.
    pub(crate) kind: Option<MethodKind>,
    /// `rpc.service` and `rpc.method` as span attribute values, made once: `pkg.Service` and `Method` (empty
    /// when the path has no `/` after the service).
    pub(crate) rpc: (Arc<str>, Arc<str>),
}

impl GrpcMethod {
    fn new(path: &str, kinds: &MethodKinds) -> Self {
        let signature = Signature::grpc_path(path);
        let name = signature.name();
        let (service, method) = name.split_once('/').unwrap_or((name, ""));
        let rpc = (Arc::from(service), Arc::from(method));
        GrpcMethod {
            signature,
            kind: kinds.get(path),
            rpc,
        }
    }
}

/// A bounded cache of gRPC methods keyed by request path (`/pkg.Service/Method`).
#[derive(Debug, Default)]
pub(crate) struct GrpcSignatures(RwLock<HashMap<Box<str>, Arc<GrpcMethod>>>);

impl GrpcSignatures {
    /// The method at `path`; `kinds` are the declared kinds (the same every time: the configuration's).
    pub(crate) fn get(&self, path: &str, kinds: &MethodKinds) -> Arc<GrpcMethod> {
        let full = {
            let map = self.0.read().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = map.get(path) {
                return s.clone();
            }
            map.len() >= MAX_PATHS
        };
        let method = Arc::new(GrpcMethod::new(path, kinds));
        if !full && path.len() <= MAX_PATH_LEN {
            let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
            if map.len() < MAX_PATHS {
                map.insert(path.into(), method.clone());
            }
        }
        method
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_signature_per_path_and_bounded() {
        let none = MethodKinds::default();
        let cache = GrpcSignatures::default();
        let a = cache.get("/cinema.Bookings/Get", &none);
        assert_eq!(a.signature, Signature::grpc_path("/cinema.Bookings/Get"));
        assert_eq!((&*a.rpc.0, &*a.rpc.1), ("cinema.Bookings", "Get"));
        assert_eq!(
            cache.get("/cinema.Bookings/Get", &none).signature.digest(),
            a.signature.digest()
        );
        for i in 0..MAX_PATHS + 10 {
            assert_eq!(
                cache.get(&format!("/s.S/M{i}"), &none).signature.name(),
                format!("s.S/M{i}")
            );
        }
        assert_eq!(cache.0.read().expect("lock").len(), MAX_PATHS);
        let long = format!("/s.S/{}", "m".repeat(MAX_PATH_LEN));
        let fresh = GrpcSignatures::default();
        assert_eq!(fresh.get(&long, &none).signature.name(), &long[1..]);
        assert!(fresh.0.read().expect("lock").is_empty(), "long paths are not kept");
        let bare = fresh.get("/NoMethod", &none);
        assert_eq!((&*bare.rpc.0, &*bare.rpc.1), ("NoMethod", ""));
    }

    #[test]
    fn a_method_carries_its_declared_kind() {
        let mut kinds = MethodKinds::default();
        kinds.insert("/s.S/Stream", MethodKind::Bidi);
        let cache = GrpcSignatures::default();
        assert_eq!(cache.get("/s.S/Stream", &kinds).kind, Some(MethodKind::Bidi));
        assert_eq!(cache.get("/s.S/Stream", &kinds).kind, Some(MethodKind::Bidi), "cached");
        assert_eq!(cache.get("/s.S/Unary", &kinds).kind, None);
    }
}
