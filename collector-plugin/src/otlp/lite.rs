//! A borrowing decoder of just the parts of an OTLP `ExportTraceServiceRequest` that analysis reads.
//!
//! Field numbers and wire types are those of `opentelemetry/proto/trace/v1/trace.proto`,
//! `common/v1/common.proto` and `resource/v1/resource.proto`; fields the view does not hold (scopes, links,
//! trace state, schema URLs, entity references, dropped counts, `kvlist` values, …) are skipped without
//! allocating. Strings and ids are slices of the request body: no copy and no reference count per field.
//! This is the hot path of the receivers: the body itself is forwarded unchanged.
//!
//! Every proto3 `string` of the schema must be UTF-8, as in a schema-strict decoder (prost, protobuf-go's
//! `proto.Unmarshal`; the OpenTelemetry Collector's own decoder does not check): the strings the view holds
//! (keys, string values, span and event names, status messages) and those of the skipped fields that are
//! strings or hold strings (scope name, version and attributes; link trace state and attributes; span trace
//! state; schema URLs; entity references; `kvlist` values) are checked once, as they are decoded, and a body
//! with an invalid one is refused ([`DecodeError::InvalidUtf8`], naming the field), never forwarded. The check
//! is cheap on the hot path: an attribute whose encoding is ASCII as a whole (its tags and short lengths are
//! ASCII bytes too; nearly every attribute is) has only ASCII strings, checked at once; other strings are
//! checked one by one, ASCII first, then [`std::str::from_utf8`]. Nesting of array and `kvlist` values counts against one [`MAX_DEPTH`].
//!
//! Protobuf's merge rules apply as in generated code: a repeated field appends, a scalar's last value wins,
//! a message field given twice is merged, and a `oneof` takes its last member (merged when it is the same
//! message). Nesting of array (and `kvlist`) values deeper than [`MAX_DEPTH`] is an error, as is a declared
//! field with the wrong wire type.
//!
//! What the view allocates is bounded by the body's size ([`Budget`]): a body of tiny spans, attributes, events or
//! array values (an empty span is 2 bytes on the wire and 160 in the view) is refused once its view would pass
//! [`EXPANSION`] times the body, instead of taking hundreds of megabytes.

pub mod json;

use prost::bytes::Buf;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use std::cell::Cell;

/// Deepest nesting of array and `kvlist` values accepted (`AnyValue` in `ArrayValue` or `KeyValueList` in
/// `AnyValue` …).
pub const MAX_DEPTH: u32 = 32;

/// Why a body is not an `ExportTraceServiceRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A malformed key, varint or skipped field.
    #[error(transparent)]
    Protobuf(#[from] prost::DecodeError),
    /// A length or fixed-width value runs past the end of its message.
    #[error("a field runs past the end of its message")]
    Truncated,
    /// A declared field came with another wire type.
    #[error("field {tag} has wire type {got:?}, expected {want:?}")]
    WireType {
        /// The field number.
        tag: u32,
        /// The wire type given.
        got: WireType,
        /// The field's wire type.
        want: WireType,
    },
    /// Array values nested deeper than [`MAX_DEPTH`].
    #[error("array values nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A `string` field is not UTF-8, which proto3 requires of it.
    #[error("{path}: invalid UTF-8 in a string field ({why})")]
    InvalidUtf8 {
        /// Where, as OTLP/JSON names it: `resourceSpans[0].scopeSpans[1].spans[2].name`.
        path: String,
        /// What was wrong with the bytes ([`std::str::Utf8Error`]).
        why: String,
    },
    /// The view would take more than its [`Budget`].
    #[error("{0}")]
    Expanded(Expanded),
}

/// Bytes of view a decode may allocate per byte of body, spare capacity included. The densest valid values, arrays
/// of one-byte integers (4 bytes on the wire, 24 in the view), take 6 times their size, 12 with the spare
/// capacity of a vector that just grew; a span, 30 bytes or more on the wire, takes 160.
pub const EXPANSION: usize = 16;

/// Bytes of view a decode may allocate whatever the body's size.
pub const EXPANSION_FLOOR: usize = 64 * 1024;

/// A request whose view would take more than its [`Budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "decoded, the request would take more than {limit} bytes ({EXPANSION}\u{d7} its body of {body} bytes): too many spans, attributes, events or array values for its size"
)]
pub struct Expanded {
    /// The budget, in bytes.
    pub limit: usize,
    /// The body's size, in bytes.
    pub body: usize,
}

/// What a decode may allocate for the view: the vectors of spans, attributes, events and array values are
/// charged for every byte of capacity they grow by (strings and ids borrow from the body and cost nothing).
#[derive(Debug)]
pub struct Budget {
    left: Cell<usize>,
    exceeded: Cell<bool>,
    limit: usize,
    body: usize,
}

impl Budget {
    /// The budget of a body of `len` bytes: [`EXPANSION`] bytes per byte, plus [`EXPANSION_FLOOR`].
    pub fn for_body(len: usize) -> Budget {
        let limit = len.saturating_mul(EXPANSION).saturating_add(EXPANSION_FLOOR);
        Budget {
            left: Cell::new(limit),
            exceeded: Cell::new(false),
            limit,
            body: len,
        }
    }

    /// A budget that never runs out (a document that is not a request off the network: tests, files).
    pub fn unlimited() -> Budget {
        Budget {
            left: Cell::new(usize::MAX),
            exceeded: Cell::new(false),
            limit: usize::MAX,
            body: 0,
        }
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What was refused, once a charge was.
    pub fn exceeded(&self) -> Option<Expanded> {
        self.exceeded.get().then(|| self.expanded())
    }

    fn expanded(&self) -> Expanded {
        Expanded {
            limit: self.limit(),
            body: self.body,
        }
    }

    /// Makes room for one more element in `to`, charging the capacity it grows by; refused (and then
    /// [`Budget::exceeded`]) when that passes the budget.
    pub(crate) fn room_for_one<T>(&self, to: &mut Vec<T>) -> Result<(), Expanded> {
        if to.len() < to.capacity() {
            return Ok(());
        }
        let grow = to.capacity().max(4);
        let bytes = grow.saturating_mul(std::mem::size_of::<T>());
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                to.reserve_exact(grow);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(self.expanded())
            }
        }
    }
}

/// Pushes `item` onto `to` within `budget`.
fn push<T>(to: &mut Vec<T>, item: T, budget: &Budget) -> Result<(), DecodeError> {
    budget.room_for_one(to).map_err(DecodeError::Expanded)?;
    to.push(item);
    Ok(())
}

/// `ExportTraceServiceRequest`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request<'a> {
    /// `resource_spans = 1`.
    pub resource_spans: Vec<ResourceSpans<'a>>,
}

/// `ResourceSpans`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceSpans<'a> {
    /// `resource = 1`.
    pub resource: Option<Resource<'a>>,
    /// `scope_spans = 2`.
    pub scope_spans: Vec<ScopeSpans<'a>>,
}

/// `Resource`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resource<'a> {
    /// `attributes = 1`.
    pub attributes: Vec<KeyValue<'a>>,
}

/// `ScopeSpans`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScopeSpans<'a> {
    /// `spans = 2`.
    pub spans: Vec<Span<'a>>,
}

/// `Span`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span<'a> {
    /// `trace_id = 1`.
    pub trace_id: &'a [u8],
    /// `span_id = 2`.
    pub span_id: &'a [u8],
    /// `parent_span_id = 4`.
    pub parent_span_id: &'a [u8],
    /// `name = 5` (a string, kept as bytes).
    pub name: &'a [u8],
    /// `kind = 6`.
    pub kind: i32,
    /// `start_time_unix_nano = 7`.
    pub start_time_unix_nano: u64,
    /// `end_time_unix_nano = 8`.
    pub end_time_unix_nano: u64,
    /// `attributes = 9`.
    pub attributes: Vec<KeyValue<'a>>,
    /// `events = 11`.
    pub events: Vec<Event<'a>>,
    /// `status = 15`.
    pub status: Option<Status<'a>>,
}

/// `Span.Event`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Event<'a> {
    /// `time_unix_nano = 1`.
    pub time_unix_nano: u64,
    /// `name = 2`.
    pub name: &'a [u8],
    /// `attributes = 3`.
    pub attributes: Vec<KeyValue<'a>>,
}

/// `Status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status<'a> {
    /// `message = 2` (a string, kept as bytes).
    pub message: &'a [u8],
    /// `code = 3` (2 is ERROR).
    pub code: i32,
}

/// `KeyValue`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyValue<'a> {
    /// `key = 1`.
    pub key: &'a [u8],
    /// `value = 2`.
    pub value: Option<AnyValue<'a>>,
}

/// `AnyValue`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnyValue<'a> {
    /// The value (`kvlist_value = 6` is not read).
    pub value: Option<Value<'a>>,
}

/// `AnyValue.value`.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::enum_variant_names)] // the proto's `oneof` member names
pub enum Value<'a> {
    /// `string_value = 1`.
    StringValue(&'a [u8]),
    /// `bool_value = 2`.
    BoolValue(bool),
    /// `int_value = 3`.
    IntValue(i64),
    /// `double_value = 4`.
    DoubleValue(f64),
    /// `array_value = 5`.
    ArrayValue(ArrayValue<'a>),
    /// `bytes_value = 7`.
    BytesValue(&'a [u8]),
}

/// `ArrayValue`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArrayValue<'a> {
    /// `values = 1`.
    pub values: Vec<AnyValue<'a>>,
}

impl<'a> Request<'a> {
    /// Decodes a protobuf `ExportTraceServiceRequest`, borrowing from `body`, within the [`Budget`] of its size.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode_within(body, &Budget::for_body(body.len()))
    }

    /// [`Request::decode`] within `budget`.
    pub fn decode_within(body: &'a [u8], budget: &Budget) -> Result<Self, DecodeError> {
        let mut r = Request::default();
        fields(body, |tag, wire, buf| match tag {
            1 => {
                push(&mut r.resource_spans, ResourceSpans::default(), budget)?;
                let last = r.resource_spans.len() - 1;
                r.resource_spans[last]
                    .merge(message(wire, buf)?, budget)
                    .map_err(|e| within(e, || format!("resourceSpans[{last}]")))
            }
            _ => skip(wire, tag, buf),
        })?;
        Ok(r)
    }

    /// Spans in the request.
    pub fn span_count(&self) -> usize {
        self.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum()
    }
}

impl<'a> ResourceSpans<'a> {
    fn merge(&mut self, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
        fields(body, |tag, wire, buf| match tag {
            1 => self
                .resource
                .get_or_insert_with(Default::default)
                .merge(message(wire, buf)?, budget)
                .map_err(|e| within(e, || "resource".into())),
            2 => {
                let mut s = ScopeSpans::default();
                let n = self.scope_spans.len();
                s.merge(message(wire, buf)?, budget)
                    .map_err(|e| within(e, || format!("scopeSpans[{n}]")))?;
                push(&mut self.scope_spans, s, budget)
            }
            3 => string(wire, buf, "schemaUrl").map(|_| ()),
            _ => skip(wire, tag, buf),
        })
    }
}

impl<'a> Resource<'a> {
    fn merge(&mut self, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
        let mut entity_refs = 0usize;
        fields(body, |tag, wire, buf| match tag {
            1 => {
                let n = self.attributes.len();
                push_key_value(&mut self.attributes, message(wire, buf)?, budget)
                    .map_err(|e| within(e, || format!("attributes[{n}]")))
            }
            3 => {
                let n = entity_refs;
                entity_refs += 1;
                check_entity_ref(message(wire, buf)?).map_err(|e| within(e, || format!("entityRefs[{n}]")))
            }
            _ => skip(wire, tag, buf),
        })
    }
}

impl<'a> ScopeSpans<'a> {
    fn merge(&mut self, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
        fields(body, |tag, wire, buf| match tag {
            1 => check_scope(message(wire, buf)?).map_err(|e| within(e, || "scope".into())),
            2 => {
                let mut s = Span::default();
                let n = self.spans.len();
                s.merge(message(wire, buf)?, budget)
                    .map_err(|e| within(e, || format!("spans[{n}]")))?;
                push(&mut self.spans, s, budget)
            }
            3 => string(wire, buf, "schemaUrl").map(|_| ()),
            _ => skip(wire, tag, buf),
        })
    }
}

impl<'a> Span<'a> {
    fn merge(&mut self, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
        let mut links = 0usize;
        fields(body, |tag, wire, buf| {
            match tag {
                1 => self.trace_id = bytes(wire, buf)?,
                2 => self.span_id = bytes(wire, buf)?,
                3 => {
                    string(wire, buf, "traceState")?;
                }
                4 => self.parent_span_id = bytes(wire, buf)?,
                5 => self.name = string(wire, buf, "name")?,
                6 => self.kind = varint(wire, buf)? as i32,
                7 => self.start_time_unix_nano = fixed64(wire, buf)?,
                8 => self.end_time_unix_nano = fixed64(wire, buf)?,
                9 => {
                    let n = self.attributes.len();
                    push_key_value(&mut self.attributes, message(wire, buf)?, budget)
                        .map_err(|e| within(e, || format!("attributes[{n}]")))?
                }
                11 => {
                    let mut e = Event::default();
                    let n = self.events.len();
                    e.merge(message(wire, buf)?, budget)
                        .map_err(|e| within(e, || format!("events[{n}]")))?;
                    push(&mut self.events, e, budget)?;
                }
                13 => {
                    let n = links;
                    links += 1;
                    check_link(message(wire, buf)?).map_err(|e| within(e, || format!("links[{n}]")))?
                }
                15 => self
                    .status
                    .get_or_insert_with(Default::default)
                    .merge(message(wire, buf)?)
                    .map_err(|e| within(e, || "status".into()))?,
                _ => skip(wire, tag, buf)?,
            }
            Ok(())
        })
    }
}

impl<'a> Event<'a> {
    fn merge(&mut self, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
        fields(body, |tag, wire, buf| {
            match tag {
                1 => self.time_unix_nano = fixed64(wire, buf)?,
                2 => self.name = string(wire, buf, "name")?,
                3 => {
                    let n = self.attributes.len();
                    push_key_value(&mut self.attributes, message(wire, buf)?, budget)
                        .map_err(|e| within(e, || format!("attributes[{n}]")))?
                }
                _ => skip(wire, tag, buf)?,
            }
            Ok(())
        })
    }
}

impl<'a> Status<'a> {
    fn merge(&mut self, body: &'a [u8]) -> Result<(), DecodeError> {
        fields(body, |tag, wire, buf| {
            match tag {
                2 => self.message = string(wire, buf, "message")?,
                3 => self.code = varint(wire, buf)? as i32,
                _ => skip(wire, tag, buf)?,
            }
            Ok(())
        })
    }
}

fn push_key_value<'a>(to: &mut Vec<KeyValue<'a>>, body: &'a [u8], budget: &Budget) -> Result<(), DecodeError> {
    let mut kv = KeyValue::default();
    // an attribute is ASCII as a whole nearly always (its tags and short lengths are ASCII bytes too): then so
    // is every string in it, checked at once instead of one by one
    let ascii = body.is_ascii();
    fields(body, |tag, wire, buf| {
        match tag {
            1 => kv.key = string_in(wire, buf, "key", ascii)?,
            2 => kv
                .value
                .get_or_insert_with(Default::default)
                .merge(message(wire, buf)?, 0, ascii, budget)
                .map_err(|e| within(e, || "value".into()))?,
            _ => skip(wire, tag, buf)?,
        }
        Ok(())
    })?;
    push(to, kv, budget)
}

impl<'a> AnyValue<'a> {
    /// Merges the value in `body`, `depth` array levels down; `ascii`: `body` is known to be ASCII, and so are
    /// its strings.
    fn merge(&mut self, body: &'a [u8], depth: u32, ascii: bool, budget: &Budget) -> Result<(), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        fields(body, |tag, wire, buf| {
            let v = match tag {
                1 => Value::StringValue(string_in(wire, buf, "stringValue", ascii)?),
                2 => Value::BoolValue(varint(wire, buf)? != 0),
                3 => Value::IntValue(varint(wire, buf)? as i64),
                4 => Value::DoubleValue(f64::from_bits(fixed64(wire, buf)?)),
                5 => {
                    let body = message(wire, buf)?;
                    let mut array = match self.value.take() {
                        Some(Value::ArrayValue(a)) => a,
                        _ => ArrayValue::default(),
                    };
                    fields(body, |tag, wire, buf| match tag {
                        1 => {
                            let mut v = AnyValue::default();
                            let n = array.values.len();
                            v.merge(message(wire, buf)?, depth + 1, ascii, budget)
                                .map_err(|e| within(e, || format!("arrayValue.values[{n}]")))?;
                            push(&mut array.values, v, budget)
                        }
                        _ => skip(wire, tag, buf),
                    })?;
                    Value::ArrayValue(array)
                }
                6 => {
                    // not held by the view: the oneof's last member, so no value
                    check_key_value_list(message(wire, buf)?, depth + 1)
                        .map_err(|e| within(e, || "kvlistValue".into()))?;
                    self.value = None;
                    return Ok(());
                }
                7 => Value::BytesValue(bytes(wire, buf)?),
                _ => return skip(wire, tag, buf),
            };
            self.value = Some(v);
            Ok(())
        })
    }
}

/// Checks the strings of an `InstrumentationScope` (`name = 1`, `version = 2`, `attributes = 3`), which the
/// view does not hold.
fn check_scope(body: &[u8]) -> Result<(), DecodeError> {
    let mut attributes = 0usize;
    fields(body, |tag, wire, buf| match tag {
        1 => string(wire, buf, "name").map(|_| ()),
        2 => string(wire, buf, "version").map(|_| ()),
        3 => {
            let n = attributes;
            attributes += 1;
            check_key_value(message(wire, buf)?, 0).map_err(|e| within(e, || format!("attributes[{n}]")))
        }
        _ => skip(wire, tag, buf),
    })
}

/// Checks the strings of a `Span.Link` (`trace_state = 3`, `attributes = 4`), which the view does not hold.
fn check_link(body: &[u8]) -> Result<(), DecodeError> {
    let mut attributes = 0usize;
    fields(body, |tag, wire, buf| match tag {
        3 => string(wire, buf, "traceState").map(|_| ()),
        4 => {
            let n = attributes;
            attributes += 1;
            check_key_value(message(wire, buf)?, 0).map_err(|e| within(e, || format!("attributes[{n}]")))
        }
        _ => skip(wire, tag, buf),
    })
}

/// Checks the strings of an `EntityRef` (`schema_url = 1`, `type = 2`, `id_keys = 3`, `description_keys = 4`).
fn check_entity_ref(body: &[u8]) -> Result<(), DecodeError> {
    let (mut id_keys, mut description_keys) = (0usize, 0usize);
    fields(body, |tag, wire, buf| match tag {
        1 => string(wire, buf, "schemaUrl").map(|_| ()),
        2 => string(wire, buf, "type").map(|_| ()),
        3 => {
            let n = id_keys;
            id_keys += 1;
            string(wire, buf, "")
                .map(|_| ())
                .map_err(|e| within(e, || format!("idKeys[{n}]")))
        }
        4 => {
            let n = description_keys;
            description_keys += 1;
            string(wire, buf, "")
                .map(|_| ())
                .map_err(|e| within(e, || format!("descriptionKeys[{n}]")))
        }
        _ => skip(wire, tag, buf),
    })
}

/// Checks the strings of a `KeyValue` the view does not hold (`key = 1`, `value = 2`), `depth` levels of array
/// or `kvlist` values down.
fn check_key_value(body: &[u8], depth: u32) -> Result<(), DecodeError> {
    fields(body, |tag, wire, buf| match tag {
        1 => string(wire, buf, "key").map(|_| ()),
        2 => check_any_value(message(wire, buf)?, depth).map_err(|e| within(e, || "value".into())),
        _ => skip(wire, tag, buf),
    })
}

/// Checks the strings of a `KeyValueList` (`values = 1`).
fn check_key_value_list(body: &[u8], depth: u32) -> Result<(), DecodeError> {
    let mut values = 0usize;
    fields(body, |tag, wire, buf| match tag {
        1 => {
            let n = values;
            values += 1;
            check_key_value(message(wire, buf)?, depth).map_err(|e| within(e, || format!("values[{n}]")))
        }
        _ => skip(wire, tag, buf),
    })
}

/// Checks the strings of an `AnyValue` the view does not hold: its string, and those of its array or
/// `kvlist` values, nested at most [`MAX_DEPTH`] deep.
fn check_any_value(body: &[u8], depth: u32) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    fields(body, |tag, wire, buf| match tag {
        1 => string(wire, buf, "stringValue").map(|_| ()),
        5 => {
            let mut values = 0usize;
            fields(message(wire, buf)?, |tag, wire, buf| match tag {
                1 => {
                    let n = values;
                    values += 1;
                    check_any_value(message(wire, buf)?, depth + 1)
                        .map_err(|e| within(e, || format!("arrayValue.values[{n}]")))
                }
                _ => skip(wire, tag, buf),
            })
        }
        6 => check_key_value_list(message(wire, buf)?, depth + 1).map_err(|e| within(e, || "kvlistValue".into())),
        _ => skip(wire, tag, buf),
    })
}

/// Calls `field(tag, wire_type, rest)` for each field of a message body; `field` consumes the value.
fn fields<'a>(
    mut buf: &'a [u8],
    mut field: impl FnMut(u32, WireType, &mut &'a [u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf)?;
        field(tag, wire, &mut buf).map_err(|e| match e {
            DecodeError::WireType { tag: 0, got, want } => DecodeError::WireType { tag, got, want },
            e => e,
        })?;
    }
    Ok(())
}

fn expect(wire: WireType, want: WireType) -> Result<(), DecodeError> {
    if wire == want {
        Ok(())
    } else {
        // the field number is filled in by `fields`, which knows it
        Err(DecodeError::WireType {
            tag: 0,
            got: wire,
            want,
        })
    }
}

/// A length-delimited value, borrowed.
fn bytes<'a>(wire: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    expect(wire, WireType::LengthDelimited)?;
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= buf.len())
        .ok_or(DecodeError::Truncated)?;
    let (value, rest) = buf.split_at(len);
    *buf = rest;
    Ok(value)
}

/// A `string` value, borrowed (as bytes: a reader that wants a `str` converts it again, which cannot fail), once
/// checked to be UTF-8; otherwise [`DecodeError::InvalidUtf8`] at `field` (its OTLP/JSON name).
fn string<'a>(wire: WireType, buf: &mut &'a [u8], field: &'static str) -> Result<&'a [u8], DecodeError> {
    let value = bytes(wire, buf)?;
    if value.is_ascii() {
        return Ok(value);
    }
    match std::str::from_utf8(value) {
        Ok(_) => Ok(value),
        Err(e) => Err(DecodeError::InvalidUtf8 {
            path: field.to_string(),
            why: e.to_string(),
        }),
    }
}

/// [`string`], or when `ascii` (the enclosing message is ASCII, and so this value is) the value unchecked.
fn string_in<'a>(
    wire: WireType,
    buf: &mut &'a [u8],
    field: &'static str,
    ascii: bool,
) -> Result<&'a [u8], DecodeError> {
    if ascii {
        bytes(wire, buf)
    } else {
        string(wire, buf, field)
    }
}

/// `e`, when it is an invalid string, located under `segment` (the field that holds it: its path grows as the
/// error leaves each message, so the valid path costs nothing).
fn within(e: DecodeError, segment: impl FnOnce() -> String) -> DecodeError {
    match e {
        DecodeError::InvalidUtf8 { path, why } => {
            let segment = segment();
            DecodeError::InvalidUtf8 {
                path: if path.is_empty() {
                    segment
                } else {
                    format!("{segment}.{path}")
                },
                why,
            }
        }
        e => e,
    }
}

/// An embedded message's body, borrowed.
fn message<'a>(wire: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    bytes(wire, buf)
}

fn varint(wire: WireType, buf: &mut &[u8]) -> Result<u64, DecodeError> {
    expect(wire, WireType::Varint)?;
    Ok(decode_varint(buf)?)
}

fn fixed64(wire: WireType, buf: &mut &[u8]) -> Result<u64, DecodeError> {
    expect(wire, WireType::SixtyFourBit)?;
    if buf.len() < 8 {
        return Err(DecodeError::Truncated);
    }
    Ok(buf.get_u64_le())
}

fn skip(wire: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), DecodeError> {
    Ok(skip_field(wire, tag, buf, DecodeContext::default())?)
}

#[cfg(test)]
mod tests;
