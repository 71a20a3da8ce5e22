//! RPC signatures (paper definition 1): what is called, independent of how or from where.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The signature `(m, f, a)` of an RPC: the service or module, the method, and the parameter types or route.
///
/// Its identity is the SHA-256 of its readable [`name`](Signature::name), which is exactly what instrumentation
/// records as the `dei.signature` span attribute:
/// `pkg.Service/Method` for gRPC, `METHOD /route/{template}` for an HTTP server route and
/// `METHOD host/path` for an outgoing HTTP call (the URL's host without its port).
///
/// The digest is computed once, when the signature is made; clones share the name.
#[derive(Clone)]
pub struct Signature {
    name: Name,
    digest: [u8; 32],
}

/// A signature's name: shared by reference count, or static (cloned without touching a count that other
/// threads touch too: see [`Signature::from_static_name`]).
#[derive(Clone)]
enum Name {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Name {
    fn as_str(&self) -> &str {
        match self {
            Name::Static(s) => s,
            Name::Shared(s) => s,
        }
    }
}

impl Signature {
    /// A signature from its readable name, as recorded in `dei.signature`.
    pub fn from_name(name: impl Into<String>) -> Self {
        let name: Arc<str> = name.into().into();
        let digest = Sha256::digest(name.as_bytes()).into();
        Signature {
            name: Name::Shared(name),
            digest,
        }
    }

    /// A signature whose name lives for the whole process (a literal, or a name interned once): its clones
    /// copy a pointer, where [`from_name`](Self::from_name)'s share a reference count.
    ///
    /// ```
    /// use dei_propagator::Signature;
    /// let s = Signature::from_static_name("cinema.Bookings/Get");
    /// assert_eq!(s, Signature::grpc_path("/cinema.Bookings/Get"));
    /// assert_eq!(s.static_name(), Some("cinema.Bookings/Get"));
    /// ```
    pub fn from_static_name(name: &'static str) -> Self {
        Signature {
            name: Name::Static(name),
            digest: Sha256::digest(name.as_bytes()).into(),
        }
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

    /// An HTTP signature from a method and a route template (server) or `host/path` (client: the URL's host, without its port).
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
        self.name.as_str()
    }

    /// The readable name, shared: recording it on a span does not copy it (a static name is copied once
    /// here; see [`static_name`](Self::static_name)).
    pub fn name_shared(&self) -> Arc<str> {
        match &self.name {
            Name::Static(s) => Arc::from(*s),
            Name::Shared(s) => s.clone(),
        }
    }

    /// The readable name when it lives for the whole process ([`from_static_name`](Self::from_static_name)).
    pub fn static_name(&self) -> Option<&'static str> {
        match self.name {
            Name::Static(s) => Some(s),
            Name::Shared(_) => None,
        }
    }

    /// SHA-256 of the readable name: the signature's identity.
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }
}

// Identity, order and hashing are the name's (the digest is a function of it).
impl PartialEq for Signature {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Signature {}

impl Hash for Signature {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl PartialOrd for Signature {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Signature {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Signature").field(&self.name()).finish()
    }
}

/// Serialized as its readable name.
impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Signature::from_name)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_the_name_and_survives_serde() {
        let s = Signature::grpc_path("/cinema.Bookings/Get");
        assert_eq!(s.digest(), <[u8; 32]>::from(Sha256::digest(b"cinema.Bookings/Get")));
        let json = serde_json::to_string(&s).expect("serialize");
        assert_eq!(json, "\"cinema.Bookings/Get\"");
        let back: Signature = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, s);
        assert_eq!(back.digest(), s.digest());
        assert_eq!(format!("{s:?}"), "Signature(\"cinema.Bookings/Get\")");
        assert!(Signature::from_name("a") < Signature::from_name("b"));
    }
}
