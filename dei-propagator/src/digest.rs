//! SHA-256 digests of invocation payloads and call stacks.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::fmt;

/// A hex string was not 64 lowercase or uppercase hexadecimal characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected 64 hexadecimal characters, got {0:?}")]
pub struct HexDigestError(pub String);

fn parse_hex32(s: &str) -> Result<[u8; 32], HexDigestError> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return Err(HexDigestError(s.chars().take(80).collect()));
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16);
        let lo = (pair[1] as char).to_digit(16);
        match (hi, lo) {
            (Some(h), Some(l)) => out[i] = (h * 16 + l) as u8,
            _ => return Err(HexDigestError(s.chars().take(80).collect())),
        }
    }
    Ok(out)
}

fn write_hex(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for b in bytes {
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

macro_rules! sha256_digest_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// Parses the 64-character hex form used in span attributes.
            pub fn from_hex(s: &str) -> Result<Self, HexDigestError> {
                parse_hex32(s).map($name)
            }

            /// The 64-character lowercase hex form used in span attributes.
            pub fn to_hex(&self) -> String {
                self.to_string()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::from_hex(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

sha256_digest_type!(
    /// SHA-256 of an invocation payload (paper definition 2): the encoded request message for gRPC, the query
    /// and body for HTTP.
    PayloadDigest
);

sha256_digest_type!(
    /// SHA-256 of a call stack's application frames (see [`crate::CallStack`]).
    StackDigest
);

impl PayloadDigest {
    /// The digest of a payload held in one buffer.
    ///
    /// ```
    /// use dei_propagator::PayloadDigest;
    /// assert_eq!(PayloadDigest::of(b"").to_hex(),
    ///     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /// ```
    #[inline]
    pub fn of(payload: &[u8]) -> Self {
        PayloadDigest(Sha256::digest(payload).into())
    }

    /// The digest of the empty payload, used for preliminary stream indexes.
    pub fn empty() -> Self {
        PayloadDigest::of(&[])
    }
}

/// Digests a payload that arrives in pieces (an HTTP body, gRPC frames) without buffering it.
#[derive(Clone, Default)]
pub struct PayloadHasher(Sha256);

impl PayloadHasher {
    /// A hasher with nothing fed yet.
    pub fn new() -> Self {
        PayloadHasher(Sha256::new())
    }

    /// Feeds the next piece.
    #[inline]
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The digest of everything fed.
    #[inline]
    pub fn finish(self) -> PayloadDigest {
        PayloadDigest(self.0.finalize().into())
    }
}

impl fmt::Debug for PayloadHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PayloadHasher")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_rejections() {
        let d = PayloadDigest::of(b"hello");
        assert_eq!(PayloadDigest::from_hex(&d.to_hex()), Ok(d));
        assert_eq!(PayloadDigest::from_hex(&d.to_hex().to_uppercase()), Ok(d));
        assert!(PayloadDigest::from_hex("abc").is_err());
        assert!(PayloadDigest::from_hex(&"g".repeat(64)).is_err());
        assert!(PayloadDigest::from_hex(&"é".repeat(32)).is_err());
    }

    #[test]
    fn streaming_hasher_matches_one_shot() {
        let mut h = PayloadHasher::new();
        h.update(b"hel");
        h.update(b"lo");
        assert_eq!(h.finish(), PayloadDigest::of(b"hello"));
    }
}
