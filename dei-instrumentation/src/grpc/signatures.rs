//! gRPC signatures by request path, made once per method: a signature's digest is computed when it is made,
//! and every call of a method shares its name.

use dei_propagator::Signature;
use std::collections::HashMap;
use std::sync::RwLock;

/// At most this many distinct paths are kept; further paths get a fresh signature on every call (a client
/// that calls unboundedly many paths cannot grow the cache).
const MAX_PATHS: usize = 4096;

/// Longer paths are never kept (real method paths are far shorter; a peer cannot pin memory with long ones).
const MAX_PATH_LEN: usize = 256;

/// A bounded cache of gRPC signatures keyed by request path (`/pkg.Service/Method`).
#[derive(Debug, Default)]
pub(crate) struct GrpcSignatures(RwLock<HashMap<Box<str>, Signature>>);

impl GrpcSignatures {
    /// The signature of the method at `path`.
    pub(crate) fn get(&self, path: &str) -> Signature {
        let full = {
            let map = self.0.read().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = map.get(path) {
                return s.clone();
            }
            map.len() >= MAX_PATHS
        };
        let signature = Signature::grpc_path(path);
        if !full && path.len() <= MAX_PATH_LEN {
            let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
            if map.len() < MAX_PATHS {
                map.insert(path.into(), signature.clone());
            }
        }
        signature
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_signature_per_path_and_bounded() {
        let cache = GrpcSignatures::default();
        let a = cache.get("/cinema.Bookings/Get");
        assert_eq!(a, Signature::grpc_path("/cinema.Bookings/Get"));
        assert_eq!(cache.get("/cinema.Bookings/Get").digest(), a.digest());
        for i in 0..MAX_PATHS + 10 {
            assert_eq!(cache.get(&format!("/s.S/M{i}")).name(), format!("s.S/M{i}"));
        }
        assert_eq!(cache.0.read().expect("lock").len(), MAX_PATHS);
        let long = format!("/s.S/{}", "m".repeat(MAX_PATH_LEN));
        let fresh = GrpcSignatures::default();
        assert_eq!(fresh.get(&long).name(), &long[1..]);
        assert!(fresh.0.read().expect("lock").is_empty(), "long paths are not kept");
    }
}
