//! OTLP/JSON straight into the [`lite`](super) view, without the generated types in between.
//!
//! The rules are OTLP/JSON's (the protobuf JSON mapping as OTLP restricts it): field names in lowerCamelCase
//! (the proto's snake_case names are read too), trace and span ids as hex strings, enums (`kind`,
//! `status.code`) as integers, 64-bit integers (`startTimeUnixNano`, `intValue`, …) as strings or numbers,
//! `bytesValue` as base64, and fields this view does not declare ignored, whatever they hold. `null` stands
//! for the field's default (absent). A field given twice keeps its last value.
//!
//! Strings borrow from the body when they have no escapes, as the protobuf decoder borrows; an escaped string,
//! a decoded id and a decoded `bytesValue` are written once into an arena (`bumpalo::Bump`) that the caller
//! owns and that lives as long as the body, so the view has one lifetime either way. Array values nested
//! deeper than [`MAX_DEPTH`] are refused, as in protobuf, and so is a view that would pass its [`Budget`].

use super::{
    AnyValue, ArrayValue, Budget, Event, KeyValue, MAX_DEPTH, Request, Resource, ResourceSpans, ScopeSpans, Span,
    Status, Value,
};
use bumpalo::Bump;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Decodes an OTLP/JSON `ExportTraceServiceRequest` into the lite view within `budget` (once it refused a
/// charge, [`Budget::exceeded`] says so). Strings without escapes borrow from `body`; what had to be decoded
/// (escaped strings, ids, base64) is allocated in `arena`.
pub fn decode_within<'a>(
    body: &'a [u8],
    arena: &'a Bump,
    budget: &'a Budget,
) -> Result<Request<'a>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let req = Message::<Request<'a>>::new(arena, budget).deserialize(&mut de)?;
    de.end()?;
    Ok(req)
}

/// [`decode_within`] from an already parsed JSON value (a pretty-printed document read as a stream): strings borrow
/// from `value`, decoded bytes go into `arena`. Not bounded: the value is parsed already.
pub fn from_value<'a>(value: &'a serde_json::Value, arena: &'a Bump) -> Result<Request<'a>, serde_json::Error> {
    Message::<Request<'a>>::new(arena, arena.alloc(Budget::unlimited())).deserialize(value)
}

/// A message of the view, read field by field from a JSON object.
trait Fields<'a>: Default {
    /// Field names (camelCase first, then snake_case), by position.
    const NAMES: &'static [&'static str];
    /// Checked when an object of this message begins (array values too deeply nested).
    fn enter<E: de::Error>(_cx: Cx<'a>) -> Result<(), E> {
        Ok(())
    }
    /// Reads the value of the field at `index` of [`Fields::NAMES`].
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, index: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error>;
}

/// What every seed carries: the arena, the budget and the nesting depth of array values.
#[derive(Clone, Copy)]
struct Cx<'a> {
    arena: &'a Bump,
    budget: &'a Budget,
    depth: u32,
}

/// Reads a message `T` (or `null`, its default).
struct Message<'a, T> {
    cx: Cx<'a>,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T> Message<'a, T> {
    fn new(arena: &'a Bump, budget: &'a Budget) -> Self {
        Self::at(Cx {
            arena,
            budget,
            depth: 0,
        })
    }

    fn at(cx: Cx<'a>) -> Self {
        Message {
            cx,
            _t: std::marker::PhantomData,
        }
    }
}

impl<'de: 'a, 'a, T: Fields<'a>> DeserializeSeed<'de> for Message<'a, T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a, T: Fields<'a>> Visitor<'de> for Message<'a, T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with the fields {:?}", T::NAMES)
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<T, M::Error> {
        T::enter(self.cx)?;
        let mut msg = T::default();
        while let Some(index) = map.next_key_seed(Key(T::NAMES))? {
            match index {
                Some(i) => msg.field(i, &mut map, self.cx)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(msg)
    }
}

/// A key: its position among the names (both spellings of a field count as one), or `None` when unknown.
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        // the names come in pairs (camelCase, snake_case); a message's fields are few
        Ok(self.0.iter().position(|n| *n == v).map(|i| i / 2))
    }
}

/// A repeated field: a JSON array of `S`'s values (`null` is empty), grown within the budget.
struct Repeated<'a, S>(S, &'a Budget);

impl<'de, S: DeserializeSeed<'de> + Copy> DeserializeSeed<'de> for Repeated<'_, S> {
    type Value = Vec<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: DeserializeSeed<'de> + Copy> Visitor<'de> for Repeated<'_, S> {
    type Value = Vec<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.0)? {
            self.1.room_for_one(&mut out).map_err(de::Error::custom)?;
            out.push(v);
        }
        Ok(out)
    }
}

impl<T> Clone for Message<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Message<'_, T> {}

/// A scalar field of one kind (`Text`, `Hex`, `Base64`), with the arena its decoded bytes go to.
#[derive(Clone, Copy)]
struct Scalar<'a, K> {
    arena: &'a Bump,
    _kind: K,
}

/// A string's UTF-8 bytes: borrowed from the body when unescaped, else copied into the arena.
#[derive(Clone, Copy)]
struct Text;
/// Hex-encoded bytes (ids), decoded into the arena.
#[derive(Clone, Copy)]
struct Hex;
/// Base64-encoded bytes (`bytesValue`), decoded into the arena.
#[derive(Clone, Copy)]
struct Base64;

impl<'de: 'a, 'a> DeserializeSeed<'de> for Scalar<'a, Text> {
    type Value = &'a [u8];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'a [u8], D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Scalar<'a, Text> {
    type Value = &'a [u8];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_unit<E: de::Error>(self) -> Result<&'a [u8], E> {
        Ok(b"")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<&'a [u8], E> {
        Ok(v.as_bytes())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'a [u8], E> {
        Ok(self.arena.alloc_slice_copy(v.as_bytes()))
    }
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Scalar<'a, Hex> {
    type Value = &'a [u8];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'a [u8], D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Scalar<'a, Hex> {
    type Value = &'a [u8];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a hex string")
    }
    fn visit_unit<E: de::Error>(self) -> Result<&'a [u8], E> {
        Ok(b"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'a [u8], E> {
        let hex = v.as_bytes();
        if !hex.len().is_multiple_of(2) {
            return Err(E::custom(format_args!("an odd number of hex digits ({})", hex.len())));
        }
        let out = self.arena.alloc_slice_fill_copy(hex.len() / 2, 0u8);
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let digit = |c: u8| match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(E::custom(format_args!("{:?} is not hex", c as char))),
            };
            *o = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Ok(out)
    }
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Scalar<'a, Base64> {
    type Value = &'a [u8];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'a [u8], D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Scalar<'a, Base64> {
    type Value = &'a [u8];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a base64 string")
    }
    fn visit_unit<E: de::Error>(self) -> Result<&'a [u8], E> {
        Ok(b"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'a [u8], E> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|e| E::custom(format_args!("bytesValue: {e}")))?;
        Ok(self.arena.alloc_slice_copy(&bytes))
    }
}

/// An integer as OTLP/JSON writes 64-bit ones: a number or a decimal string; `null` is 0. `T` is the field's
/// type; a value outside it is refused.
struct Int<T>(std::marker::PhantomData<T>);

fn int<'de, T, D>(d: D) -> Result<T, D::Error>
where
    T: TryFrom<i128> + Default,
    D: Deserializer<'de>,
{
    d.deserialize_any(Int::<T>(std::marker::PhantomData))
}

impl<T: TryFrom<i128> + Default> Int<T> {
    fn fit<E: de::Error>(v: i128) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::custom(format_args!("{v} is out of range for {}", std::any::type_name::<T>())))
    }
}

impl<'de, T: TryFrom<i128> + Default> Visitor<'de> for Int<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer, or a string of one")
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Self::fit(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Self::fit(v.into())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        let n: i128 = v.parse().map_err(|e| E::custom(format_args!("{v:?}: {e}")))?;
        Self::fit(n)
    }
}

/// A double: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"` or a decimal string; `null` is 0.
struct Double;

impl<'de> Visitor<'de> for Double {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        Ok(0.0)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => v.parse().map_err(|e| E::custom(format_args!("{v:?}: {e}"))),
        }
    }
}

/// A bool; `null` is false.
struct Bool;

impl<'de> Visitor<'de> for Bool {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a boolean")
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }
}

/// `map`'s next value as a string's bytes.
fn text<'de: 'a, 'a, M: MapAccess<'de>>(map: &mut M, cx: Cx<'a>) -> Result<&'a [u8], M::Error> {
    map.next_value_seed(Scalar {
        arena: cx.arena,
        _kind: Text,
    })
}

/// `map`'s next value as hex-decoded bytes.
fn hex<'de: 'a, 'a, M: MapAccess<'de>>(map: &mut M, cx: Cx<'a>) -> Result<&'a [u8], M::Error> {
    map.next_value_seed(Scalar {
        arena: cx.arena,
        _kind: Hex,
    })
}

/// `map`'s next value as an integer of type `T` (number or string).
fn integer<'de, T: TryFrom<i128> + Default, M: MapAccess<'de>>(map: &mut M) -> Result<T, M::Error> {
    struct Seed<T>(std::marker::PhantomData<T>);
    impl<'de, T: TryFrom<i128> + Default> DeserializeSeed<'de> for Seed<T> {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            int(d)
        }
    }
    map.next_value_seed(Seed::<T>(std::marker::PhantomData))
}

/// `map`'s next value as a repeated message field.
fn repeated<'de: 'a, 'a, T: Fields<'a>, M: MapAccess<'de>>(map: &mut M, cx: Cx<'a>) -> Result<Vec<T>, M::Error> {
    map.next_value_seed(Repeated(Message::<T>::at(cx), cx.budget))
}

/// `map`'s next value as an optional message field (`null` is absent).
fn optional<'de: 'a, 'a, T: Fields<'a>, M: MapAccess<'de>>(map: &mut M, cx: Cx<'a>) -> Result<Option<T>, M::Error> {
    struct Seed<'a, T>(Cx<'a>, std::marker::PhantomData<T>);
    impl<'de: 'a, 'a, T: Fields<'a>> DeserializeSeed<'de> for Seed<'a, T> {
        type Value = Option<T>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_option(self)
        }
    }
    impl<'de: 'a, 'a, T: Fields<'a>> Visitor<'de> for Seed<'a, T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object or null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            Message::<T>::at(self.0).deserialize(d).map(Some)
        }
    }
    map.next_value_seed(Seed::<T>(cx, std::marker::PhantomData))
}

impl<'a> Fields<'a> for Request<'a> {
    const NAMES: &'static [&'static str] = &["resourceSpans", "resource_spans"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, _: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        self.resource_spans = repeated(map, cx)?;
        Ok(())
    }
}

impl<'a> Fields<'a> for ResourceSpans<'a> {
    const NAMES: &'static [&'static str] = &["resource", "resource", "scopeSpans", "scope_spans"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        match i {
            0 => self.resource = optional(map, cx)?,
            _ => self.scope_spans = repeated(map, cx)?,
        }
        Ok(())
    }
}

impl<'a> Fields<'a> for Resource<'a> {
    const NAMES: &'static [&'static str] = &["attributes", "attributes"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, _: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        self.attributes = repeated(map, cx)?;
        Ok(())
    }
}

impl<'a> Fields<'a> for ScopeSpans<'a> {
    const NAMES: &'static [&'static str] = &["spans", "spans"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, _: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        self.spans = repeated(map, cx)?;
        Ok(())
    }
}

impl<'a> Fields<'a> for Span<'a> {
    const NAMES: &'static [&'static str] = &[
        "traceId",
        "trace_id",
        "spanId",
        "span_id",
        "parentSpanId",
        "parent_span_id",
        "name",
        "name",
        "kind",
        "kind",
        "startTimeUnixNano",
        "start_time_unix_nano",
        "endTimeUnixNano",
        "end_time_unix_nano",
        "attributes",
        "attributes",
        "events",
        "events",
        "status",
        "status",
    ];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        match i {
            0 => self.trace_id = hex(map, cx)?,
            1 => self.span_id = hex(map, cx)?,
            2 => self.parent_span_id = hex(map, cx)?,
            3 => self.name = text(map, cx)?,
            4 => self.kind = integer(map)?,
            5 => self.start_time_unix_nano = integer(map)?,
            6 => self.end_time_unix_nano = integer(map)?,
            7 => self.attributes = repeated(map, cx)?,
            8 => self.events = repeated(map, cx)?,
            _ => self.status = optional(map, cx)?,
        }
        Ok(())
    }
}

impl<'a> Fields<'a> for Event<'a> {
    const NAMES: &'static [&'static str] = &[
        "timeUnixNano",
        "time_unix_nano",
        "name",
        "name",
        "attributes",
        "attributes",
    ];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        match i {
            0 => self.time_unix_nano = integer(map)?,
            1 => self.name = text(map, cx)?,
            _ => self.attributes = repeated(map, cx)?,
        }
        Ok(())
    }
}

impl<'a> Fields<'a> for Status<'a> {
    const NAMES: &'static [&'static str] = &["message", "message", "code", "code"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        match i {
            0 => self.message = text(map, cx)?,
            _ => self.code = integer(map)?,
        }
        Ok(())
    }
}

impl<'a> Fields<'a> for KeyValue<'a> {
    const NAMES: &'static [&'static str] = &["key", "key", "value", "value"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        match i {
            0 => self.key = text(map, cx)?,
            // a key's value is the outermost array level, depth 0
            _ => self.value = optional(map, Cx { depth: 0, ..cx })?,
        }
        Ok(())
    }
}

impl<'a> Fields<'a> for AnyValue<'a> {
    const NAMES: &'static [&'static str] = &[
        "stringValue",
        "string_value",
        "boolValue",
        "bool_value",
        "intValue",
        "int_value",
        "doubleValue",
        "double_value",
        "arrayValue",
        "array_value",
        "bytesValue",
        "bytes_value",
    ];
    fn enter<E: de::Error>(cx: Cx<'a>) -> Result<(), E> {
        if cx.depth > MAX_DEPTH {
            return Err(E::custom(format_args!("array values nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, i: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        // a member given as null leaves the value as it was, as OTLP/JSON's reference decoder does
        let value = match i {
            0 => map
                .next_value_seed(Nullable(Scalar {
                    arena: cx.arena,
                    _kind: Text,
                }))?
                .map(Value::StringValue),
            1 => map.next_value_seed(Nullable(VisitorSeed(Bool)))?.map(Value::BoolValue),
            2 => map.next_value_seed(Nullable(IntSeed))?.map(Value::IntValue),
            3 => map
                .next_value_seed(Nullable(VisitorSeed(Double)))?
                .map(Value::DoubleValue),
            4 => map
                .next_value_seed(Nullable(Message::<ArrayOf<'a>>::at(Cx {
                    depth: cx.depth + 1,
                    ..cx
                })))?
                .map(|a| Value::ArrayValue(a.0)),
            _ => map
                .next_value_seed(Nullable(Scalar {
                    arena: cx.arena,
                    _kind: Base64,
                }))?
                .map(Value::BytesValue),
        };
        if value.is_some() {
            self.value = value;
        }
        Ok(())
    }
}

/// `ArrayValue`, whose values are one level deeper.
#[derive(Default)]
struct ArrayOf<'a>(ArrayValue<'a>);

impl<'a> Fields<'a> for ArrayOf<'a> {
    const NAMES: &'static [&'static str] = &["values", "values"];
    fn field<'de: 'a, M: MapAccess<'de>>(&mut self, _: usize, map: &mut M, cx: Cx<'a>) -> Result<(), M::Error> {
        self.0.values = repeated(map, cx)?;
        Ok(())
    }
}

/// A seed of a plain visitor.
#[derive(Clone, Copy)]
struct VisitorSeed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for VisitorSeed<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_any(self.0)
    }
}

/// `intValue`'s seed.
#[derive(Clone, Copy)]
struct IntSeed;

impl<'de> DeserializeSeed<'de> for IntSeed {
    type Value = i64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<i64, D::Error> {
        int(d)
    }
}

/// `S`'s value, or `None` for `null`.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Nullable<S> {
    type Value = Option<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Nullable<S> {
    type Value = Option<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// [`decode_within`] the [`Budget`] of the body's size (tests).
#[cfg(test)]
pub fn decode<'a>(body: &'a [u8], arena: &'a Bump) -> Result<Request<'a>, serde_json::Error> {
    decode_within(body, arena, arena.alloc(Budget::for_body(body.len())))
}

#[cfg(test)]
mod tests;
