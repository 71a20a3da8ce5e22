//! Serde helpers: indexes as their wire form, ids and digests as lowercase hex.

use dei_propagator::{Index, PayloadDigest, StackDigest};
use serde::Serializer;

/// An index as its wire form (`1.…`).
pub fn serialize<S: Serializer>(index: &Index, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&index.encode())
}

/// An 8-byte id as 16 hex characters.
pub fn hex8<S: Serializer>(id: &[u8; 8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(id))
}

/// An optional 8-byte id as hex or null.
pub fn hex8_opt<S: Serializer>(id: &Option<[u8; 8]>, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => s.serialize_str(&hex::encode(id)),
        None => s.serialize_none(),
    }
}

/// An optional payload digest as 64 hex characters or null.
pub fn digest_opt<S: Serializer>(d: &Option<PayloadDigest>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&d.to_hex()),
        None => s.serialize_none(),
    }
}

/// An optional stack digest as 64 hex characters or null.
pub fn stack_digest_opt<S: Serializer, D: std::borrow::Borrow<StackDigest>>(
    d: &Option<D>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&d.borrow().to_hex()),
        None => s.serialize_none(),
    }
}
