//! [`DeiSpan`] and [`StreamMessage`]: the `dei.*` attributes of a span and of a stream message event, parsed
//! from borrowed `(key, value)` pairs without copying a string.

use super::{
    AMBIGUOUS, COUNT, DEPTH, DEPTH_LIMITED, FAULT, FAULT_PLAN, FAULT_PLAN_DROPPED, INCOMING_DROPPED, INDEX,
    INSTANTIATION, MESSAGE, PAYLOAD, PAYLOAD_DIGEST, PAYLOAD_DIGEST_INCOMPLETE, PRELIMINARY, PRELIMINARY_INDEX,
    SIGNATURE, STACK, STACK_DIGEST, STACK_MODE, STACK_WALKER, STREAM_COUNT_OVERFLOW,
};
use crate::{Fault, HexDigestError, Index, PayloadDigest, StackDigest, WireError};
use std::fmt;

/// The items of an array attribute value, read one at a time (so that a reader's own array type is not
/// copied into a list of strings first).
pub trait StrArray<'a> {
    /// The number of items.
    fn len(&'a self) -> usize;
    /// Item `i` when it is a valid UTF-8 string; `None` for an item of another type or past the end.
    fn str_at(&'a self, i: usize) -> Option<&'a str>;
    /// True when there are no items.
    fn is_empty(&'a self) -> bool {
        self.len() == 0
    }
}

impl<'a> StrArray<'a> for Vec<&'a str> {
    fn len(&'a self) -> usize {
        Vec::len(self)
    }

    fn str_at(&'a self, i: usize) -> Option<&'a str> {
        self.get(i).copied()
    }
}

impl<'a, const N: usize> StrArray<'a> for [&'a str; N] {
    fn len(&'a self) -> usize {
        N
    }

    fn str_at(&'a self, i: usize) -> Option<&'a str> {
        self.get(i).copied()
    }
}

impl<'a> StrArray<'a> for Vec<opentelemetry::StringValue> {
    fn len(&'a self) -> usize {
        Vec::len(self)
    }

    fn str_at(&'a self, i: usize) -> Option<&'a str> {
        self.get(i).map(opentelemetry::StringValue::as_str)
    }
}

/// One span attribute's value, borrowed from wherever the reader holds it (an OTLP request, an SDK span).
#[derive(Clone, Copy)]
pub enum AttributeValue<'a> {
    /// A string.
    Str(&'a str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double.
    Double(f64),
    /// An array (only [`STACK`] takes one, of strings).
    Array(&'a dyn StrArray<'a>),
    /// Any other value (bytes, a key-value list, a string that is not UTF-8, no value), named by its type
    /// for the error message.
    Other(&'static str),
}

impl AttributeValue<'_> {
    /// The value's type, as error messages name it.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttributeValue::Str(_) => "string",
            AttributeValue::Int(_) => "int",
            AttributeValue::Bool(_) => "bool",
            AttributeValue::Double(_) => "double",
            AttributeValue::Array(_) => "array",
            AttributeValue::Other(name) => name,
        }
    }
}

impl fmt::Debug for AttributeValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Str(s) => f.debug_tuple("Str").field(s).finish(),
            AttributeValue::Int(i) => f.debug_tuple("Int").field(i).finish(),
            AttributeValue::Bool(b) => f.debug_tuple("Bool").field(b).finish(),
            AttributeValue::Double(d) => f.debug_tuple("Double").field(d).finish(),
            AttributeValue::Array(a) => f.debug_list().entries((0..a.len()).map(|i| a.str_at(i))).finish(),
            AttributeValue::Other(name) => f.debug_tuple("Other").field(name).finish(),
        }
    }
}

impl<'a> From<&'a opentelemetry::Value> for AttributeValue<'a> {
    fn from(value: &'a opentelemetry::Value) -> Self {
        use opentelemetry::{Array, Value};
        match value {
            Value::String(s) => AttributeValue::Str(s.as_str()),
            Value::I64(i) => AttributeValue::Int(*i),
            Value::Bool(b) => AttributeValue::Bool(*b),
            Value::F64(d) => AttributeValue::Double(*d),
            Value::Array(Array::String(items)) => AttributeValue::Array(items),
            Value::Array(_) => AttributeValue::Other("array"),
            _ => AttributeValue::Other("unknown"),
        }
    }
}

/// Why a `dei.*` attribute was rejected; every variant names the attribute's key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttributeError {
    /// The value has the wrong type.
    #[error("attribute {key:?}: expected {expected}, got {got}")]
    WrongType {
        /// The attribute.
        key: &'static str,
        /// The type the contract gives it.
        expected: &'static str,
        /// The type it came with.
        got: &'static str,
    },
    /// An index that does not decode.
    #[error("attribute {key:?}: malformed index: {source}")]
    Index {
        /// The attribute.
        key: &'static str,
        /// Why it does not decode.
        source: WireError,
    },
    /// A digest that is not 64 hex characters.
    #[error("attribute {key:?}: malformed digest: {source}")]
    Digest {
        /// The attribute.
        key: &'static str,
        /// Why.
        source: HexDigestError,
    },
    /// A fault that is not in wire form.
    #[error("attribute {key:?}: malformed fault {value:?} (expected g<code>, h<status>, c or l<ms>)")]
    Fault {
        /// The attribute.
        key: &'static str,
        /// The value (at most its first 64 bytes).
        value: String,
    },
    /// An integer out of the attribute's range.
    #[error("attribute {key:?}: {value} is out of range")]
    OutOfRange {
        /// The attribute.
        key: &'static str,
        /// The value.
        value: i64,
    },
    /// A string longer than the reader accepts ([`DeiSpan::parse_bounded`]).
    #[error("attribute {key:?}: longer than {max} bytes")]
    TooLong {
        /// The attribute.
        key: &'static str,
        /// The longest accepted, in bytes.
        max: usize,
    },
    /// A stream message event without one of its attributes.
    #[error("attribute {key:?}: missing on the {event} event", event = super::STREAM_MESSAGE_EVENT)]
    Missing {
        /// The attribute.
        key: &'static str,
    },
    /// A value that breaks the contract's rules.
    #[error("attribute {key:?}: {problem}")]
    Invalid {
        /// The attribute.
        key: &'static str,
        /// The rule it breaks.
        problem: &'static str,
    },
    /// `dei.depth` that does not match the index's depth.
    #[error("attribute {key:?}: {depth} does not match the index depth {index_depth}")]
    DepthMismatch {
        /// The attribute ([`DEPTH`]).
        key: &'static str,
        /// `dei.depth`.
        depth: u32,
        /// The depth of `dei.index`.
        index_depth: usize,
    },
}

impl AttributeError {
    /// The key of the rejected attribute.
    pub fn key(&self) -> &'static str {
        match self {
            AttributeError::WrongType { key, .. }
            | AttributeError::Index { key, .. }
            | AttributeError::Digest { key, .. }
            | AttributeError::Fault { key, .. }
            | AttributeError::OutOfRange { key, .. }
            | AttributeError::TooLong { key, .. }
            | AttributeError::Missing { key }
            | AttributeError::Invalid { key, .. }
            | AttributeError::DepthMismatch { key, .. } => key,
        }
    }
}

/// The readable frames of [`STACK`]: a string with one frame a line, or an array with one frame an item
/// (every item checked to be a string when parsed).
#[derive(Clone, Copy)]
pub enum StackFrames<'a> {
    /// One frame a line (empty lines are skipped).
    Lines(&'a str),
    /// One frame an item.
    Items(&'a dyn StrArray<'a>),
}

impl<'a> StackFrames<'a> {
    /// The frames, innermost first.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        let (lines, items) = match *self {
            StackFrames::Lines(s) => (Some(s.lines().filter(|l| !l.is_empty())), None),
            StackFrames::Items(a) => (None, Some((0..a.len()).filter_map(move |i| a.str_at(i)))),
        };
        lines.into_iter().flatten().chain(items.into_iter().flatten())
    }
}

impl fmt::Debug for StackFrames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for StackFrames<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

/// The DEI data of one span: its `dei.*` attributes, type-checked and parsed, each `None` (or `false`) when
/// absent. Strings are borrowed from the input; only the index is decoded into its own value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeiSpan<'a> {
    /// [`INDEX`].
    pub index: Option<Index>,
    /// [`SIGNATURE`].
    pub signature: Option<&'a str>,
    /// [`PAYLOAD_DIGEST`].
    pub payload_digest: Option<PayloadDigest>,
    /// [`PAYLOAD`]: the raw payload as recorded (see [`payload_preview`](super::payload_preview)).
    pub payload: Option<&'a str>,
    /// [`STACK_DIGEST`].
    pub stack_digest: Option<StackDigest>,
    /// [`STACK`].
    pub stack: Option<StackFrames<'a>>,
    /// [`STACK_MODE`].
    pub stack_mode: Option<&'a str>,
    /// [`STACK_WALKER`].
    pub stack_walker: Option<&'a str>,
    /// [`COUNT`] (at least 1).
    pub count: Option<u32>,
    /// [`DEPTH`] (the index's depth, when both are given).
    pub depth: Option<u32>,
    /// [`INSTANTIATION`].
    pub instantiation: Option<&'a str>,
    /// [`PRELIMINARY`].
    pub preliminary: bool,
    /// [`AMBIGUOUS`].
    pub ambiguous: bool,
    /// [`FAULT`].
    pub fault: Option<Fault>,
    /// [`FAULT_PLAN`], wire form, not decoded here ([`FaultPlan::decode`](crate::FaultPlan::decode) reads it).
    pub fault_plan: Option<&'a str>,
    /// [`FAULT_PLAN_DROPPED`].
    pub fault_plan_dropped: bool,
    /// [`INCOMING_DROPPED`].
    pub incoming_dropped: bool,
    /// [`DEPTH_LIMITED`].
    pub depth_limited: bool,
    /// [`PAYLOAD_DIGEST_INCOMPLETE`].
    pub payload_digest_incomplete: bool,
    /// [`STREAM_COUNT_OVERFLOW`].
    pub stream_count_overflow: bool,
}

impl<'a> DeiSpan<'a> {
    /// Parses a span's attributes: the `dei.*` ones are checked and read, others are ignored, and so are
    /// `dei.*` keys this contract does not define (a later version's). The first malformed attribute is the
    /// error: a reader skips the span's DEI data as a whole rather than record half of it.
    pub fn parse<I>(attributes: I) -> Result<Self, AttributeError>
    where
        I: IntoIterator<Item = (&'a str, AttributeValue<'a>)>,
    {
        DeiSpan::parse_bounded(attributes, usize::MAX)
    }

    /// [`parse`](DeiSpan::parse), rejecting a [`SIGNATURE`] or [`INSTANTIATION`] longer than `max_text` bytes
    /// (a reader that keeps them bounds its memory).
    pub fn parse_bounded<I>(attributes: I, max_text: usize) -> Result<Self, AttributeError>
    where
        I: IntoIterator<Item = (&'a str, AttributeValue<'a>)>,
    {
        let mut span = DeiSpan::default();
        for (key, value) in attributes {
            span.apply(key, value, max_text)?;
        }
        span.check()?;
        Ok(span)
    }

    /// [`parse`](DeiSpan::parse) for a reader that keeps what it can: a malformed attribute is handed to
    /// `rejected` and left out (`None`, `false`), and the others are read. A [`DEPTH`] that does not match the
    /// index is rejected and left out the same way.
    pub fn parse_lenient<I>(attributes: I, mut rejected: impl FnMut(AttributeError)) -> Self
    where
        I: IntoIterator<Item = (&'a str, AttributeValue<'a>)>,
    {
        let mut span = DeiSpan::default();
        for (key, value) in attributes {
            if let Err(e) = span.apply(key, value, usize::MAX) {
                rejected(e);
            }
        }
        if let Err(e) = span.check() {
            span.depth = None;
            rejected(e);
        }
        span
    }

    /// Reads one attribute; returns whether `key` is one of the contract's. [`check`](DeiSpan::check) the
    /// record once every attribute was applied.
    pub fn apply(&mut self, key: &str, value: AttributeValue<'a>, max_text: usize) -> Result<bool, AttributeError> {
        if !key.starts_with("dei.") {
            return Ok(false);
        }
        match key {
            INDEX => self.index = Some(index(INDEX, value)?),
            SIGNATURE => self.signature = Some(bounded(SIGNATURE, string(SIGNATURE, value)?, max_text)?),
            PAYLOAD_DIGEST => {
                self.payload_digest = Some(PayloadDigest::from_hex(string(PAYLOAD_DIGEST, value)?).map_err(
                    |source| AttributeError::Digest {
                        key: PAYLOAD_DIGEST,
                        source,
                    },
                )?)
            }
            PAYLOAD => self.payload = Some(string(PAYLOAD, value)?),
            STACK_DIGEST => {
                self.stack_digest = Some(StackDigest::from_hex(string(STACK_DIGEST, value)?).map_err(|source| {
                    AttributeError::Digest {
                        key: STACK_DIGEST,
                        source,
                    }
                })?)
            }
            STACK => self.stack = Some(frames(value)?),
            STACK_MODE => self.stack_mode = Some(string(STACK_MODE, value)?),
            STACK_WALKER => self.stack_walker = Some(string(STACK_WALKER, value)?),
            COUNT => match u32_value(COUNT, value)? {
                0 => {
                    return Err(AttributeError::Invalid {
                        key: COUNT,
                        problem: "a count is at least 1",
                    });
                }
                c => self.count = Some(c),
            },
            DEPTH => self.depth = Some(u32_value(DEPTH, value)?),
            INSTANTIATION => {
                self.instantiation = Some(bounded(INSTANTIATION, string(INSTANTIATION, value)?, max_text)?)
            }
            PRELIMINARY => self.preliminary = bool_value(PRELIMINARY, value)?,
            AMBIGUOUS => self.ambiguous = bool_value(AMBIGUOUS, value)?,
            FAULT => self.fault = Some(fault(FAULT, value)?),
            FAULT_PLAN => self.fault_plan = Some(string(FAULT_PLAN, value)?),
            FAULT_PLAN_DROPPED => self.fault_plan_dropped = bool_value(FAULT_PLAN_DROPPED, value)?,
            INCOMING_DROPPED => self.incoming_dropped = bool_value(INCOMING_DROPPED, value)?,
            DEPTH_LIMITED => self.depth_limited = bool_value(DEPTH_LIMITED, value)?,
            PAYLOAD_DIGEST_INCOMPLETE => self.payload_digest_incomplete = bool_value(PAYLOAD_DIGEST_INCOMPLETE, value)?,
            STREAM_COUNT_OVERFLOW => self.stream_count_overflow = bool_value(STREAM_COUNT_OVERFLOW, value)?,
            // a later version's key: not this contract's to judge
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The checks across attributes: [`DEPTH`] is the depth of [`INDEX`] when both are given.
    pub fn check(&self) -> Result<(), AttributeError> {
        if let (Some(index), Some(depth)) = (&self.index, self.depth)
            && index.depth() != depth as usize
        {
            return Err(AttributeError::DepthMismatch {
                key: DEPTH,
                depth,
                index_depth: index.depth(),
            });
        }
        Ok(())
    }
}

/// One [`STREAM_MESSAGE_EVENT`](super::STREAM_MESSAGE_EVENT): a message a stream's client sent, with the
/// mapping from the preliminary index its callee served it under to its final index (paper §4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamMessage {
    /// [`PRELIMINARY_INDEX`]: the stream's preliminary index `…r|x~` (it ends in a preliminary element).
    pub stream: Index,
    /// [`INDEX`]: the message's final index (it ends in a final element).
    pub final_index: Index,
    /// [`MESSAGE`]: the message's 1-based position k on the stream, when given.
    pub k: Option<u32>,
    /// [`FAULT`]: the fault injected on this message (the stream ended before it).
    pub fault: Option<Fault>,
}

impl StreamMessage {
    /// Parses a stream message event's attributes (others are ignored). An event whose stream count plus
    /// message position passes the largest count (4294967295) is rejected, naming [`MESSAGE`]: its callee
    /// served it under no count of its own ([`Index::checked_stream_message`]), so it maps nothing.
    pub fn parse<'a, I>(attributes: I) -> Result<Self, AttributeError>
    where
        I: IntoIterator<Item = (&'a str, AttributeValue<'a>)>,
    {
        let (mut stream, mut final_index, mut k, mut fault_on) = (None, None, None, None);
        for (key, value) in attributes {
            match key {
                PRELIMINARY_INDEX => stream = Some(index(PRELIMINARY_INDEX, value)?),
                INDEX => final_index = Some(index(INDEX, value)?),
                MESSAGE => match u32_value(MESSAGE, value)? {
                    0 => {
                        return Err(AttributeError::Invalid {
                            key: MESSAGE,
                            problem: "message positions start at 1",
                        });
                    }
                    n => k = Some(n),
                },
                FAULT => fault_on = Some(fault(FAULT, value)?),
                _ => {}
            }
        }
        let stream = stream.ok_or(AttributeError::Missing { key: PRELIMINARY_INDEX })?;
        let final_index = final_index.ok_or(AttributeError::Missing { key: INDEX })?;
        if !stream.opens_stream() {
            return Err(AttributeError::Invalid {
                key: PRELIMINARY_INDEX,
                problem: "a stream's index ends in a preliminary element",
            });
        }
        if final_index.last().is_none_or(|e| e.preliminary) {
            return Err(AttributeError::Invalid {
                key: INDEX,
                problem: "a stream message's index ends in a final element",
            });
        }
        // (`Index::checked_stream_message`'s test, without making the index)
        if let Some(k) = k
            && stream.last().is_some_and(|e| e.count.checked_add(k).is_none())
        {
            return Err(AttributeError::Invalid {
                key: MESSAGE,
                problem: "the stream's count plus the message's position is past the largest count, 4294967295: \
                          the message was served under no count of its own",
            });
        }
        Ok(StreamMessage {
            stream,
            final_index,
            k,
            fault: fault_on,
        })
    }

    /// The preliminary index the callee served the message under: the stream's counted up by k, `…r|(x+k)~`
    /// ([`Index::stream_message`]), or the stream's as given when the event has no position.
    pub fn served_under(&self) -> Index {
        match self.k {
            Some(k) => self.stream.stream_message(k),
            None => self.stream.clone(),
        }
    }
}

fn wrong(key: &'static str, expected: &'static str, value: AttributeValue) -> AttributeError {
    AttributeError::WrongType {
        key,
        expected,
        got: value.type_name(),
    }
}

fn string<'a>(key: &'static str, value: AttributeValue<'a>) -> Result<&'a str, AttributeError> {
    match value {
        AttributeValue::Str(s) => Ok(s),
        other => Err(wrong(key, "a string", other)),
    }
}

fn bool_value(key: &'static str, value: AttributeValue) -> Result<bool, AttributeError> {
    match value {
        AttributeValue::Bool(b) => Ok(b),
        other => Err(wrong(key, "a bool", other)),
    }
}

fn u32_value(key: &'static str, value: AttributeValue) -> Result<u32, AttributeError> {
    match value {
        AttributeValue::Int(i) => u32::try_from(i).map_err(|_| AttributeError::OutOfRange { key, value: i }),
        other => Err(wrong(key, "an int", other)),
    }
}

fn bounded<'a>(key: &'static str, s: &'a str, max: usize) -> Result<&'a str, AttributeError> {
    if s.len() > max {
        Err(AttributeError::TooLong { key, max })
    } else {
        Ok(s)
    }
}

fn index(key: &'static str, value: AttributeValue) -> Result<Index, AttributeError> {
    Index::decode(string(key, value)?).map_err(|source| AttributeError::Index { key, source })
}

fn fault(key: &'static str, value: AttributeValue) -> Result<Fault, AttributeError> {
    let s = string(key, value)?;
    s.parse::<Fault>().map_err(|()| AttributeError::Fault {
        key,
        value: s.chars().take(64).collect(),
    })
}

fn frames(value: AttributeValue) -> Result<StackFrames, AttributeError> {
    match value {
        AttributeValue::Str(s) => Ok(StackFrames::Lines(s)),
        AttributeValue::Array(items) => {
            if (0..items.len()).all(|i| items.str_at(i).is_some()) {
                Ok(StackFrames::Items(items))
            } else {
                Err(AttributeError::WrongType {
                    key: STACK,
                    expected: "an array of strings",
                    got: "an array with other items",
                })
            }
        }
        other => Err(wrong(STACK, "a string or a string array", other)),
    }
}
