//! The distributed execution index `[r1|c1 :: … :: rn|cn]` (paper definition 4).

use crate::rejection::{self, Event};
use crate::wire::{self, Limits, WireError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The 64-bit identity of an invocation signature under an instantiation (`r`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElementDigest(pub [u8; 8]);

impl fmt::Display for ElementDigest {
    /// The 11-character unpadded base64url form used on the wire.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&wire::encode_digest(self))
    }
}

impl fmt::Debug for ElementDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ElementDigest({self})")
    }
}

/// One element `r|c` of an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element {
    /// The invocation signature's digest `r`.
    pub digest: ElementDigest,
    /// The invocation count `c`, starting at 1.
    pub count: u32,
    /// A stream's preliminary element (paper §4.2), to be rewritten to its final form.
    pub preliminary: bool,
}

impl Element {
    /// The `count`-th invocation of `digest`.
    pub fn new(digest: ElementDigest, count: u32) -> Self {
        Element {
            digest,
            count,
            preliminary: false,
        }
    }

    /// The same element marked preliminary.
    pub fn preliminary(mut self) -> Self {
        self.preliminary = true;
        self
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.digest, self.count)?;
        if self.preliminary {
            f.write_str("~")?;
        }
        Ok(())
    }
}

/// A stream message whose count would pass the largest count, 4294967295 ([`Index::checked_stream_message`]):
/// its callee cannot serve it under a count of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "message {k} of a stream opened with count {count} has no count of its own: {count} + {k} is past the largest \
     count, 4294967295"
)]
pub struct StreamCountOverflow {
    /// The count `x` of the stream's preliminary element.
    pub count: u32,
    /// The message's 1-based position `k` on the stream.
    pub k: u32,
}

/// A distributed execution index: the path of elements from the system's entry point to one RPC.
///
/// The empty index is the root `[ ]`, the path of a request that entered the system with no index.
///
/// ```
/// use dei_propagator::{Element, ElementDigest, Index};
/// let parent = Index::root().child(Element::new(ElementDigest([1; 8]), 1));
/// let child = parent.child(Element::new(ElementDigest([2; 8]), 3));
/// assert_eq!(child.encode(), "1.AQEBAQEBAQE1.AgICAgICAgI3");
/// assert!(child.starts_with(&parent));
/// assert_eq!(Index::decode(&child.encode()), Ok(child));
/// ```
///
/// Cloning an index shares its elements (it is handed to the context, the span and the scope of every RPC).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Index {
    elements: Arc<[Element]>,
}

impl Index {
    /// The root: the empty path.
    pub fn root() -> Self {
        Index::default()
    }

    /// An index from its elements, outermost first. (Collecting an iterator of elements into an `Index` takes
    /// one allocation fewer.)
    pub fn from_elements(elements: Vec<Element>) -> Self {
        Index {
            elements: elements.into(),
        }
    }

    /// The elements, outermost first.
    pub fn elements(&self) -> &[Element] {
        &self.elements
    }

    /// The number of elements.
    pub fn depth(&self) -> usize {
        self.elements.len()
    }

    /// True for the empty path.
    pub fn is_root(&self) -> bool {
        self.elements.is_empty()
    }

    /// The innermost element.
    pub fn last(&self) -> Option<&Element> {
        self.elements.last()
    }

    /// The index without its innermost element, or `None` for the root.
    pub fn parent(&self) -> Option<Index> {
        let (_, rest) = self.elements.split_last()?;
        Some(Index {
            elements: Arc::from(rest),
        })
    }

    /// This index extended by one element.
    pub fn child(&self, element: Element) -> Index {
        // One allocation: the iterator's length is known.
        let elements = self.elements.iter().copied().chain(std::iter::once(element)).collect();
        Index { elements }
    }

    /// True when `prefix` is a prefix of this index (every index starts with itself and with the root).
    pub fn starts_with(&self, prefix: &Index) -> bool {
        self.elements.starts_with(&prefix.elements)
    }

    /// True when any element is preliminary: the index of a stream, or of a call made under one.
    pub fn is_preliminary(&self) -> bool {
        self.elements.iter().any(|e| e.preliminary)
    }

    /// True when the innermost element is preliminary: the index of a stream itself, not of a call made while
    /// serving one of a stream's messages.
    ///
    /// ```
    /// use dei_propagator::Index;
    /// let stream = Index::decode("1.AQEBAQEBAQE1~").unwrap();
    /// let under_a_message = Index::decode("1.AQEBAQEBAQE2~.AgICAgICAgI1").unwrap();
    /// assert!(stream.opens_stream() && stream.is_preliminary());
    /// assert!(!under_a_message.opens_stream() && under_a_message.is_preliminary());
    /// ```
    pub fn opens_stream(&self) -> bool {
        self.elements.last().is_some_and(|e| e.preliminary)
    }

    /// Replaces the prefix `from` by `to`, for rewriting preliminary stream indexes to final ones.
    /// Returns `None` when this index does not start with `from`.
    pub fn rewrite_prefix(&self, from: &Index, to: &Index) -> Option<Index> {
        if !self.starts_with(from) {
            return None;
        }
        let elements = to
            .elements
            .iter()
            .chain(&self.elements[from.depth()..])
            .copied()
            .collect();
        Some(Index { elements })
    }

    /// The prefix under which a callee serves the `k`-th message (1-based) of a stream opened with this
    /// preliminary index: the callee counts messages implicitly, so `…r|x~` becomes `…r|(x+k)~` (paper §4.2).
    ///
    /// A count has no value past 4294967295 (`u32::MAX`, the wire's largest). A stream index whose count is
    /// near it (a crafted incoming one: a scope counts from 1) leaves its later messages without a count of
    /// their own: they are served under the largest count, all of them, so that their calls can share
    /// indexes. That is counted and logged ([`Event::StreamCountOverflow`]); use
    /// [`checked_stream_message`](Self::checked_stream_message) to tell such a message apart.
    ///
    /// ```
    /// use dei_propagator::Index;
    /// let stream = Index::decode("1.AQEBAQEBAQE5~").unwrap();
    /// assert_eq!(stream.stream_message(2).encode(), "1.AQEBAQEBAQE7~");
    /// ```
    pub fn stream_message(&self, k: u32) -> Index {
        self.checked_stream_message(k).unwrap_or_else(|overflow| {
            rejection::record_event(
                Event::StreamCountOverflow,
                &format_args!(
                    "{overflow}: it is served under the largest count, as every later message of the stream is, \
                     so their calls can share indexes"
                ),
            );
            let last = self.elements.len().saturating_sub(1);
            (self.elements.iter().enumerate())
                .map(|(i, e)| Element {
                    count: if i == last { u32::MAX } else { e.count },
                    ..*e
                })
                .collect()
        })
    }

    /// [`stream_message`](Self::stream_message), or the error when the message's count `x + k` would pass the
    /// largest count (4294967295): the callee cannot serve the message under a count of its own.
    ///
    /// ```
    /// use dei_propagator::{Index, StreamCountOverflow};
    /// let crafted = Index::decode("1.AQEBAQEBAQE4294967294~").unwrap();
    /// assert_eq!(crafted.checked_stream_message(1).map(|i| i.encode()).as_deref(), Ok("1.AQEBAQEBAQE4294967295~"));
    /// assert_eq!(crafted.checked_stream_message(2), Err(StreamCountOverflow { count: 4294967294, k: 2 }));
    /// ```
    pub fn checked_stream_message(&self, k: u32) -> Result<Index, StreamCountOverflow> {
        let Some((last, outer)) = self.elements.split_last() else {
            return Ok(Index::root());
        };
        let count = (last.count.checked_add(k)).ok_or(StreamCountOverflow { count: last.count, k })?;
        Ok(outer
            .iter()
            .copied()
            .chain(std::iter::once(Element { count, ..*last }))
            .collect())
    }

    /// [`encode`](Self::encode) as a shared string, in one allocation.
    pub fn encode_shared(&self) -> std::sync::Arc<str> {
        crate::wire::encode_shared(self)
    }

    /// The wire form (docs/wire-format.md).
    pub fn encode(&self) -> String {
        wire::encode(self)
    }

    /// Decodes the wire form under the default [`Limits`].
    pub fn decode(value: &str) -> Result<Index, WireError> {
        wire::decode(value, &Limits::default())
    }

    /// Decodes the wire form under the given limits.
    pub fn decode_with(value: &str, limits: &Limits) -> Result<Index, WireError> {
        wire::decode(value, limits)
    }
}

/// Collects elements, outermost first, into an index (one allocation for the standard library's iterators over
/// slices, chains of them and `once`, whose exact length it trusts).
///
/// ```
/// use dei_propagator::{Element, ElementDigest, Index};
/// let index: Index = (1..=3).map(|c| Element::new(ElementDigest([c; 8]), u32::from(c))).collect();
/// assert_eq!(index.depth(), 3);
/// assert_eq!(index.parent().map(|p| p.depth()), Some(2));
/// ```
/// An index hashes and compares as its elements, so that a map keyed by indexes is looked up by a prefix of
/// another index's elements without making an index of it.
impl std::borrow::Borrow<[Element]> for Index {
    fn borrow(&self) -> &[Element] {
        &self.elements
    }
}

impl FromIterator<Element> for Index {
    fn from_iter<I: IntoIterator<Item = Element>>(iter: I) -> Self {
        Index {
            elements: iter.into_iter().collect(),
        }
    }
}

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Index({})", self.encode())
    }
}

impl FromStr for Index {
    type Err = WireError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Index::decode(s)
    }
}

impl Serialize for Index {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Index {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Index::decode(&s).map_err(serde::de::Error::custom)
    }
}
