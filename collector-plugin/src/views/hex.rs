//! Span ids as 16 lowercase hex characters, trace ids as 32 (`#[serde(with = "…")]`).

use serde::{Deserialize, Deserializer, Serializer};

/// An `N`-byte id (a span id: 8, a trace id: 16) as `2N` hex characters.
pub fn serialize<S: Serializer, const N: usize>(id: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&::hex::encode(id))
}

/// An `N`-byte id from `2N` hex characters.
pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(d: D) -> Result<[u8; N], D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    let mut id = [0u8; N];
    ::hex::decode_to_slice(s.as_bytes(), &mut id)
        .map_err(|e| serde::de::Error::custom(format!("id {s:?}: {e} (expected {} hex characters)", 2 * N)))?;
    Ok(id)
}

/// An optional 8-byte id as hex or `null`.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// An optional 8-byte id as 16 hex characters or `null`.
    pub fn serialize<S: Serializer>(id: &Option<[u8; 8]>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => super::serialize(id, s),
            None => s.serialize_none(),
        }
    }

    /// An optional 8-byte id from 16 hex characters or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 8]>, D::Error> {
        #[derive(Deserialize)]
        struct Id(#[serde(with = "super")] [u8; 8]);
        Ok(Option::<Id>::deserialize(d)?.map(|Id(id)| id))
    }
}
