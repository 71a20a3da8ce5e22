//! RPC signatures (paper definition 1): what is called, independent of how or from where.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// The signature `(m, f, a)` of an RPC: the service or module, the method, and the parameter types or route.
///
/// Its identity is the SHA-256 of its readable [`name`](Signature::name), which is exactly what instrumentation
/// records as the `dei.signature` span attribute:
/// `pkg.Service/Method` for gRPC, `METHOD /route/{template}` for an HTTP server route and
/// `METHOD authority/path` for an outgoing HTTP call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature {
    name: String,
}

impl Signature {
    /// A signature from its readable name, as recorded in `dei.signature`.
    pub fn from_name(name: impl Into<String>) -> Self {
        Signature { name: name.into() }
    }

    /// A gRPC signature from the request path `/pkg.Service/Method` (the leading `/` is optional).
    ///
    /// ```
    /// use dei_propagator::Signature;
    /// assert_eq!(Signature::grpc_path("/cinema.Bookings/Get").name(), "cinema.Bookings/Get");
    /// ```
    pub fn grpc_path(path: &str) -> Self {
        Signature::from_name(path.strip_prefix('/').unwrap_or(path))
    }

    /// An HTTP signature from a method and a route template (server) or `authority/path` (client).
    ///
    /// ```
    /// use dei_propagator::Signature;
    /// assert_eq!(Signature::http("GET", "/bookings/{user}").name(), "GET /bookings/{user}");
    /// ```
    pub fn http(method: &str, route: &str) -> Self {
        Signature::from_name(format!("{method} {route}"))
    }

    /// A signature from its three parts: module or service, function or method, parameters.
    pub fn new(service: &str, method: &str, params: &str) -> Self {
        if params.is_empty() {
            Signature::from_name(format!("{service}/{method}"))
        } else {
            Signature::from_name(format!("{service}/{method}({params})"))
        }
    }

    /// The readable name (`dei.signature`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the readable name: the signature's identity.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.name.as_bytes()).into()
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}
