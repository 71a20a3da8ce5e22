//! The compact, versioned ASCII wire form of an index (docs/wire-format.md).
//!
//! `1` followed by one `.`-separated element per hop; an element is an 11-character base64url digest, a
//! decimal count and an optional `~` for a preliminary stream element: `1.x-Ab3pQ0zZU1.AgICAgICAgI3`.

use crate::index::{Element, ElementDigest, Index};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::sync::Arc;

/// The wire version this crate writes and reads.
pub const VERSION: char = '1';
/// Characters in one encoded element digest.
pub const DIGEST_CHARS: usize = 11;

/// Size limits that a decoder enforces before anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted value, in bytes.
    pub max_len: usize,
    /// Most elements in one index.
    pub max_depth: usize,
}

/// The most elements an index has: the default decoding limit, and the depth beyond which a sender does not
/// extend an index (see [`crate::RequestScope::issue`]).
pub const MAX_DEPTH: usize = 64;

/// The longest element on the wire: `.`, 11 digest characters, a 10-digit count and `~`.
pub const MAX_ELEMENT_CHARS: usize = 1 + DIGEST_CHARS + 10 + 1;

impl Limits {
    /// Limits for indexes of at most `max_depth` elements, with `max_len` just large enough for any of them:
    /// `1 + max_depth * MAX_ELEMENT_CHARS` bytes.
    pub const fn for_depth(max_depth: usize) -> Self {
        Limits {
            max_len: 1 + max_depth * MAX_ELEMENT_CHARS,
            max_depth,
        }
    }
}

impl Default for Limits {
    /// 64 elements and 1473 bytes: every index within the depth limit fits the length limit.
    fn default() -> Self {
        Limits::for_depth(MAX_DEPTH)
    }
}

/// Why a wire value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The value was empty.
    #[error("empty value")]
    Empty,
    /// Longer than [`Limits::max_len`].
    #[error("value of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More elements than [`Limits::max_depth`].
    #[error("index deeper than the limit of {max} elements")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The version is not `1`.
    #[error("unsupported version {0:?}")]
    UnsupportedVersion(String),
    /// An element's digest was not 11 canonical base64url characters.
    #[error("element {element}: malformed digest")]
    BadDigest {
        /// 0-based element position.
        element: usize,
    },
    /// An element's count was missing, zero, had a leading zero or was too large.
    #[error("element {element}: malformed count")]
    BadCount {
        /// 0-based element position.
        element: usize,
    },
}

impl WireError {
    /// A short stable name for counters and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::Empty => "empty",
            WireError::TooLong { .. } => "too_long",
            WireError::TooDeep { .. } => "too_deep",
            WireError::UnsupportedVersion(_) => "version",
            WireError::BadDigest { .. } => "digest",
            WireError::BadCount { .. } => "count",
        }
    }
}

/// The 11-character base64url form of a digest.
pub fn encode_digest(digest: &ElementDigest) -> String {
    URL_SAFE_NO_PAD.encode(digest.0)
}

/// Appends the wire form of `index` to `out`.
pub(crate) fn encode_into(index: &Index, out: &mut String) {
    out.reserve(1 + index.depth() * MAX_ELEMENT_CHARS);
    write(index, |bytes| {
        out.push_str(std::str::from_utf8(bytes).expect("`write` writes ASCII only"));
    });
}

/// Writes the wire form of `index`.
pub fn encode(index: &Index) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(1 + index.depth() * MAX_ELEMENT_CHARS);
    write(index, |bytes| out.extend_from_slice(bytes));
    String::from_utf8(out).expect("`write` writes ASCII only")
}

/// The wire form of `index` as a shared string, in one allocation (an index of usual depth is written on the
/// stack first).
pub(crate) fn encode_shared(index: &Index) -> Arc<str> {
    const ON_STACK: usize = 512;
    if 1 + index.depth() * MAX_ELEMENT_CHARS > ON_STACK {
        return encode(index).into();
    }
    let mut buf = [0u8; ON_STACK];
    let mut len = 0;
    write(index, |bytes| {
        // within the bound checked above
        if let Some(dst) = buf.get_mut(len..len + bytes.len()) {
            dst.copy_from_slice(bytes);
            len += bytes.len();
        } else {
            debug_assert!(false, "the wire form outgrew its bound");
        }
    });
    std::str::from_utf8(&buf[..len])
        .expect("`write` writes ASCII only")
        .into()
}

/// Hands the wire form of `index` to `push`, piece by piece.
fn write(index: &Index, mut push: impl FnMut(&[u8])) {
    push(&[VERSION as u8]);
    let mut digest_buf = [0u8; DIGEST_CHARS];
    let mut count_buf = [0u8; 10];
    for element in index.elements() {
        push(b".");
        let written = URL_SAFE_NO_PAD
            .encode_slice(element.digest.0, &mut digest_buf)
            .expect("8 bytes encode to exactly 11 base64url characters, the buffer's size");
        push(&digest_buf[..written]);
        push(decimal(element.count, &mut count_buf));
        if element.preliminary {
            push(b"~");
        }
    }
}

/// The decimal digits of `n`, written at the end of `buf`.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// The error [`decode`] gives for the wire form of `index` under `limits` (the first it finds), without writing
/// it: an index built by hand can be longer or deeper than the limits, or have a count of 0, which the wire has
/// no form for. Every other element is written as it is read back.
pub(crate) fn check_written(index: &Index, limits: &Limits) -> Result<(), WireError> {
    let len = encoded_len(index);
    if len > limits.max_len {
        return Err(WireError::TooLong {
            len,
            max: limits.max_len,
        });
    }
    for (element, e) in index.elements().iter().enumerate() {
        if element >= limits.max_depth {
            return Err(WireError::TooDeep { max: limits.max_depth });
        }
        if e.count == 0 {
            return Err(WireError::BadCount { element });
        }
    }
    Ok(())
}

/// The length of the wire form of `index`, without writing it.
pub(crate) fn encoded_len(index: &Index) -> usize {
    1 + (index.elements().iter())
        .map(|e| 1 + DIGEST_CHARS + decimal(e.count, &mut [0; 10]).len() + usize::from(e.preliminary))
        .sum::<usize>()
}

/// Reads a wire value under `limits`. Any defect rejects the whole value.
pub fn decode(value: &str, limits: &Limits) -> Result<Index, WireError> {
    if value.len() > limits.max_len {
        return Err(WireError::TooLong {
            len: value.len(),
            max: limits.max_len,
        });
    }
    let mut parts = value.split('.');
    match parts.next() {
        None | Some("") => return Err(WireError::Empty),
        Some("1") => {}
        Some(other) => {
            return Err(WireError::UnsupportedVersion(other.chars().take(16).collect()));
        }
    }
    // Up to this depth the elements are decoded on the stack and the index takes one allocation.
    const ON_STACK: usize = 16;
    let mut stack = [Element::new(ElementDigest([0; 8]), 1); ON_STACK];
    let mut heap = Vec::new();
    let mut depth = 0;
    for (position, part) in parts.enumerate() {
        if position >= limits.max_depth {
            return Err(WireError::TooDeep { max: limits.max_depth });
        }
        let element = decode_element(part, position)?;
        if position < ON_STACK {
            stack[position] = element;
        } else {
            if heap.is_empty() {
                let dots = value.bytes().filter(|&b| b == b'.').count();
                heap.reserve_exact(dots.min(limits.max_depth));
                heap.extend_from_slice(&stack);
            }
            heap.push(element);
        }
        depth = position + 1;
    }
    Ok(if depth == 0 {
        Index::root()
    } else if depth <= ON_STACK {
        stack[..depth].iter().copied().collect()
    } else {
        Index::from_elements(heap)
    })
}

fn decode_element(part: &str, element: usize) -> Result<Element, WireError> {
    let bytes = part.as_bytes();
    if bytes.len() < DIGEST_CHARS || !part.is_char_boundary(DIGEST_CHARS) {
        return Err(WireError::BadDigest { element });
    }
    let (digest_text, rest) = part.split_at(DIGEST_CHARS);
    let mut digest = [0u8; 8];
    match URL_SAFE_NO_PAD.decode_slice(digest_text, &mut digest) {
        Ok(8) => {}
        _ => return Err(WireError::BadDigest { element }),
    }
    let (count_text, preliminary) = match rest.strip_suffix('~') {
        Some(c) => (c, true),
        None => (rest, false),
    };
    let count = parse_count(count_text).ok_or(WireError::BadCount { element })?;
    Ok(Element {
        digest: ElementDigest(digest),
        count,
        preliminary,
    })
}

/// A canonical decimal count: 1 to 10 digits, no leading zero, at most `u32::MAX`.
fn parse_count(text: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || bytes[0] == b'0' {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    u32::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(byte: u8, count: u32) -> Element {
        Element::new(ElementDigest([byte; 8]), count)
    }

    /// Every depth on both sides of the stack buffers (16 elements decoded on the stack, 512 bytes encoded on
    /// it), with preliminary elements and counts of every width.
    #[test]
    fn the_shared_encoding_and_decoding_agree_with_encode_at_every_depth() {
        let limits = Limits::for_depth(64);
        for depth in 0..=40u32 {
            let index: Index = (0..depth)
                .map(|i| {
                    let e = el(i as u8, 10u32.pow(i % 10));
                    if i % 3 == 2 { e.preliminary() } else { e }
                })
                .collect();
            let text = encode(&index);
            assert_eq!(&*encode_shared(&index), text, "depth {depth}");
            assert_eq!(decode(&text, &limits), Ok(index), "depth {depth}");
        }
    }

    /// Test vectors, also listed in docs/wire-format.md.
    #[test]
    fn vectors() {
        let cases: Vec<(Index, &str)> = vec![
            (Index::root(), "1"),
            (Index::from_elements(vec![el(0, 1)]), "1.AAAAAAAAAAA1"),
            (
                Index::from_elements(vec![el(0xff, 4294967295)]),
                "1.__________84294967295",
            ),
            (
                Index::from_elements(vec![el(1, 1), el(2, 12)]),
                "1.AQEBAQEBAQE1.AgICAgICAgI12",
            ),
            (Index::from_elements(vec![el(0xfb, 2).preliminary()]), "1.-_v7-_v7-_s2~"),
        ];
        for (index, text) in cases {
            assert_eq!(index.encode(), text);
            assert_eq!(Index::decode(text), Ok(index));
        }
    }

    #[test]
    fn rejections() {
        let l = Limits::default();
        let bad: &[(&str, &str)] = &[
            ("", "empty"),
            ("2.AAAAAAAAAAA1", "version"),
            ("1.", "digest"),
            ("1.AAAAAAAAAA1", "digest"), // 11 chars: the count is missing and "1" is not canonical
            ("1.AAAAAAAAAAB1", "digest"), // non-canonical trailing bits
            ("1.AAAAAAAAA=A1", "digest"),
            ("1.AAAAAAAAAAA0", "count"),
            ("1.AAAAAAAAAAA01", "count"),
            ("1.AAAAAAAAAAA", "count"),
            ("1.AAAAAAAAAAA4294967296", "count"),
            ("1.AAAAAAAAAAA+1", "count"),
            ("1.AAAAAAAAAAA1~~", "count"),
            ("1.AAAAAAAAAAA1..AAAAAAAAAAA1", "digest"),
            ("1.AAAAAAAAAé1", "digest"),
            ("1.AAAAAAAAAAA1 ", "count"),
            (" 1", "version"),
        ];
        for (text, kind) in bad {
            let err = decode(text, &l).expect_err(text);
            assert_eq!(err.kind(), *kind, "{text:?}: {err}");
        }
        let deep = format!("1{}", ".AAAAAAAAAAA1".repeat(80));
        assert_eq!(decode(&deep, &l).map_err(|e| e.kind()), Err("too_deep"));
        let long = format!("1{}", ".AAAAAAAAAAA1000000000".repeat(70));
        assert_eq!(decode(&long, &l).map_err(|e| e.kind()), Err("too_long"));
    }
}
