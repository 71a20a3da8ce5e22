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
    // one table lookup per character (a collector parses two digests per span): a bad one has bit 4 set
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (hi, lo) = (HEX_VALUE[pair[0] as usize], HEX_VALUE[pair[1] as usize]);
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    if bad & 0x10 != 0 {
        return Err(HexDigestError(s.chars().take(80).collect()));
    }
    Ok(out)
}

/// Each byte's value as a hex digit (either case), or `0x10` when it is not one.
const HEX_VALUE: [u8; 256] = {
    let mut t = [0x10u8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// The 64-character lowercase hex form of a digest, without allocating.
fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    // Cannot fail: the output is exactly twice the input's length.
    let _ = hex::encode_to_slice(bytes, &mut out);
    out
}

fn write_hex(bytes: &[u8; 32], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let hex = hex32(bytes);
    // Hex digits are ASCII.
    f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
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
                std::str::from_utf8(&hex32(&self.0))
                    .expect("hex digits are ASCII")
                    .to_owned()
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
    pub const fn empty() -> Self {
        PayloadDigest(EMPTY_SHA256)
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

/// SHA-256 of the empty string (checked against `Sha256` by a test).
const EMPTY_SHA256: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41,
    0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

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

    proptest::proptest! {
        #[test]
        fn hex_parsing_agrees_with_the_hex_crate(s in "[0-9a-fA-F]{60,64}[0-9a-gA-G:/ é]{0,4}") {
            let want = hex::decode(&s).ok().and_then(|v| <[u8; 32]>::try_from(v).ok());
            proptest::prop_assert_eq!(parse_hex32(&s).ok(), want);
        }
    }

    #[test]
    fn hex_form_is_lowercase_and_matches_display() {
        let d = StackDigest(std::array::from_fn(|i| (i * 37 + 11) as u8));
        let expected: String = d.0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(d.to_hex(), expected);
        assert_eq!(d.to_string(), expected);
        assert_eq!(format!("{d:?}"), format!("StackDigest({expected})"));
    }

    #[test]
    fn empty_payload_digest_is_sha256_of_nothing() {
        assert_eq!(PayloadDigest::empty(), PayloadDigest::of(b""));
    }

    #[test]
    fn streaming_hasher_matches_one_shot() {
        let mut h = PayloadHasher::new();
        h.update(b"hel");
        h.update(b"lo");
        assert_eq!(h.finish(), PayloadDigest::of(b"hello"));
    }
}
