//! The [`TextMapPropagator`] that carries indexes and fault plans between services.

use crate::context::DeiContextExt;
use crate::fault::{FAULT_PLAN_KEY, FaultPlan, PlanLimits};
use crate::rejection::{self, Event, Source};
use crate::wire::{self, Limits};
use opentelemetry::Context;
use opentelemetry::baggage::{Baggage, BaggageExt};
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{Extractor, Injector, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use std::cell::OnceCell;

/// The header, gRPC metadata key and baggage entry that carry an index.
pub const INDEX_KEY: &str = "dei";
const BAGGAGE_HEADER: &str = "baggage";
/// The W3C baggage size limit that `opentelemetry`'s `Baggage` enforces on its entries.
const MAX_BAGGAGE_BYTES: usize = 8192;
/// The number of entries `opentelemetry`'s `Baggage` keeps at most.
const MAX_BAGGAGE_ENTRIES: usize = 64;

/// The one header an inner propagator writes.
struct CapturedHeader(Option<String>);

impl Injector for CapturedHeader {
    fn set(&mut self, _key: &str, value: String) {
        self.0 = Some(value);
    }
}

/// Which carriers the propagator writes. It always reads both, preferring the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carriers {
    /// Write the `dei` (and `dei-faults`) header.
    pub header: bool,
    /// Write the `dei` (and `dei-faults`) baggage entries.
    pub baggage: bool,
}

impl Default for Carriers {
    /// Both (what [`DeiPropagator::new`] writes; the crate's [`composite_propagator`] writes the header only).
    fn default() -> Self {
        Carriers {
            header: true,
            baggage: true,
        }
    }
}

impl Carriers {
    /// The `dei` (and `dei-faults`) header only: what [`composite_propagator`] writes.
    pub const HEADER: Carriers = Carriers {
        header: true,
        baggage: false,
    };
    /// The header and a copy in the W3C baggage, for paths through services that relay only baggage (the
    /// header is still preferred on reading).
    pub const HEADER_AND_BAGGAGE: Carriers = Carriers {
        header: true,
        baggage: true,
    };
}

/// Injects the index of the RPC being sent as the `dei` header and baggage entry, and extracts it on the
/// receiving side; does the same for the fault plan (`dei-faults`).
///
/// Bad input is never an error to the request: a malformed, oversized, too-deep or duplicated value is
/// rejected, counted and logged ([`crate::rejection`]) and treated as absent. When the header is rejected or
/// missing the baggage entry is tried. A receiver that extracts a plan decides itself whether to apply it
/// (`dei-instrumentation` applies plans only where its configuration says so).
///
/// It writes only indexes it would read: one deeper or longer than its [`Limits`] (by default 64 elements and
/// 1473 bytes, the wire limits; an index built by hand through the public API can be) is cut to its first
/// elements within them, and the cut is counted and logged ([`Event::DepthLimited`]), as for a scope at the
/// depth limit. Sent whole, it would be rejected by every receiver with the same limits and the call served as a
/// new root. An index with an element whose count is 0 (built by hand too: counts start at 1, and the wire has
/// no form for 0) is cut before that element, counted and logged ([`Event::ZeroCount`]), for the same reason.
///
/// Nor does it write a fault plan that it would reject: a plan built by hand ([`FaultPlan::new`]) beyond its
/// [`PlanLimits`] (by default 64 entries and 4096 bytes), with an entry's index deeper than 64 elements, or
/// with any other defect a receiver rejects ([`FaultPlan::check_with`]) is not sent at all, and that is
/// counted and logged ([`Event::FaultPlanNotSent`]). Sent, it would be rejected whole by every receiver with
/// the same limits, so none of its faults would be carried out; a part of it would test other faults than
/// asked. The index is sent as usual. The plan stays in the context, so the entries naming the sending process's
/// own calls are still carried out where its layers apply plans (those whose faults are valid), and those alone;
/// the count says so. A plan it sends with a latency the wire does not carry (longer than
/// [`MAX_LATENCY_MS`](crate::fault::MAX_LATENCY_MS), or finer than a millisecond) has it written shortened, and
/// that is counted and logged ([`Event::LatencyClamped`]).
///
/// Extraction reads the carrier alone (the `dei` header, else the carrier's `baggage` header), so it gives the
/// same result wherever it stands in a [`TextMapCompositePropagator`]. Injection writes the whole `baggage`
/// header (the context's baggage, properties included, plus our entries), and in a composite the last writer
/// of `baggage` wins: place it *after* [`BaggagePropagator`], as [`composite_propagator`] does, for the
/// baggage copy to reach the wire. Placed before it, only the `dei` header carries the index.
///
/// ```
/// use dei_propagator::{DeiContextExt, DeiPropagator, Index};
/// use opentelemetry::propagation::TextMapPropagator;
/// use opentelemetry::Context;
/// use std::collections::HashMap;
///
/// let index = Index::decode("1.AQEBAQEBAQE1").unwrap();
/// let mut headers = HashMap::new();
/// DeiPropagator::new().inject_context(&Context::new().with_dei_index(index.clone()), &mut headers);
/// assert_eq!(headers["dei"], "1.AQEBAQEBAQE1");
/// assert_eq!(headers["baggage"], "dei=1.AQEBAQEBAQE1");
/// let cx = DeiPropagator::new().extract(&headers);
/// assert_eq!(cx.dei_index(), Some(&index));
/// ```
#[derive(Debug, Clone)]
pub struct DeiPropagator {
    carriers: Carriers,
    limits: Limits,
    plan_limits: PlanLimits,
    fields: Vec<String>,
}

impl Default for DeiPropagator {
    fn default() -> Self {
        DeiPropagator::new()
    }
}

impl DeiPropagator {
    /// Writes both carriers, default limits.
    pub fn new() -> Self {
        DeiPropagator::with_config(Carriers::default(), Limits::default(), PlanLimits::default())
    }

    /// Chooses the carriers and limits.
    pub fn with_config(carriers: Carriers, limits: Limits, plan_limits: PlanLimits) -> Self {
        let mut fields = vec![INDEX_KEY.to_string(), FAULT_PLAN_KEY.to_string()];
        if carriers.baggage {
            fields.push(BAGGAGE_HEADER.to_string());
        }
        DeiPropagator {
            carriers,
            limits,
            plan_limits,
            fields,
        }
    }

    /// The limits applied to incoming indexes, and to the indexes this propagator writes (see
    /// [`DeiPropagator`]).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The wire form of `plan`, when a receiver with this propagator's [`PlanLimits`] reads it; otherwise
    /// `None`, counted and logged ([`Event::FaultPlanNotSent`]). A latency the wire does not carry is written
    /// shortened, counted and logged ([`Event::LatencyClamped`]). See [`DeiPropagator`].
    fn plan_to_send(&self, plan: &FaultPlan) -> Option<String> {
        let wire = plan.encode_unrecorded();
        if let Err(error) = plan.check(wire.len(), &self.plan_limits, false) {
            let PlanLimits { max_len, max_entries } = self.plan_limits;
            rejection::record_event(
                Event::FaultPlanNotSent,
                &format_args!(
                    "a fault plan of {} entries and {} bytes was given to inject, and a receiver with the limits of \
                     {max_entries} entries and {max_len} bytes would reject it whole ({error}): it was not sent, so \
                     no callee carries out any of its faults, while the entries naming this process's own calls are \
                     still carried out where its layers apply plans (they read the plan from the context, not from \
                     the wire; an invalid fault is not), and those alone",
                    plan.entries().len(),
                    wire.len()
                ),
            );
            return None;
        }
        if let Some(shortened) = plan.shortened_latencies() {
            rejection::record_event(
                Event::LatencyClamped,
                &format_args!("a fault plan given to inject has {shortened}: it was sent so"),
            );
        }
        Some(wire)
    }

    /// `wire`, the wire form of an index to inject, cut to its longest prefix of whole elements that a receiver
    /// with this propagator's [`Limits`] (by default 64 elements, 1473 bytes) reads: a deeper index, built by hand
    /// through the public API, would be rejected whole by a receiver with the same limits, which would serve the
    /// call as a new root. A cut keeps the outermost elements, as a scope at the depth limit does
    /// ([`RequestScope::issue`](crate::RequestScope::issue)); it is counted and logged ([`Event::DepthLimited`]).
    /// So is an element with a count of 0 (built by hand: counts start at 1, and a receiver rejects a count of 0
    /// whole): the index is cut before it, counted and logged as [`Event::ZeroCount`].
    fn within_limits<'a>(&self, wire: &'a str) -> &'a str {
        let Limits { max_len, max_depth } = self.limits;
        // An index of more than `max_depth` elements has at least this many bytes (each element is at least
        // `.`, 11 digest characters and a one-digit count), so a shorter value within the length limit (every
        // index a scope issues, under the default limits) needs no look at its elements' ends, only at their
        // counts.
        let shortest_too_deep = 1 + max_depth.saturating_add(1).saturating_mul(2 + wire::DIGEST_CHARS);
        if wire.len() <= max_len && wire.len() < shortest_too_deep && !has_zero_count(wire) {
            return wire;
        }
        // The end of each element: the `.` that starts the next one, and the end of the value for the last.
        let ends = (wire.match_indices('.').skip(1).map(|(at, _)| at)).chain(std::iter::once(wire.len()));
        let mut cut = 1.min(wire.len());
        let mut zero_count = false;
        for (depth, end) in (1..).zip(ends) {
            if depth > max_depth || end > max_len {
                break;
            }
            // A count is written without leading zeros, so one that starts with `0` is 0.
            if wire.as_bytes().get(cut + 1 + wire::DIGEST_CHARS) == Some(&b'0') {
                zero_count = true;
                break;
            }
            cut = end;
        }
        if cut == wire.len() {
            return wire;
        }
        let depth = wire.bytes().filter(|&b| b == b'.').count();
        let kept = wire[..cut].bytes().filter(|&b| b == b'.').count();
        if zero_count {
            rejection::record_event(
                Event::ZeroCount,
                &format_args!(
                    "an index of {depth} elements was given to inject whose element {} has a count of 0, which no \
                     receiver accepts (counts start at 1): its first {kept} elements were sent",
                    kept + 1
                ),
            );
        } else {
            rejection::record_event(
                Event::DepthLimited,
                &format_args!(
                    "an index of {depth} elements and {} bytes was given to inject, beyond the limits of {max_depth} \
                     elements and {max_len} bytes that a receiver accepts: its first {kept} elements were sent",
                    wire.len()
                ),
            );
        }
        &wire[..cut]
    }
}

/// True when an element of `wire`, the wire form of an index, has a count of 0: its count, written without
/// leading zeros, starts with `0`. An element is at least 13 bytes (`.`, 11 digest characters, a digit), none of
/// them `.` but the first, so each next `.` is looked for from 13 bytes on: a few nanoseconds for an index of 8
/// elements, where looking at every byte (or `match_indices`) takes about 70.
fn has_zero_count(wire: &str) -> bool {
    let bytes = wire.as_bytes();
    let mut dot = 1;
    while dot < bytes.len() {
        if bytes.get(dot + 1 + wire::DIGEST_CHARS) == Some(&b'0') {
            return true;
        }
        dot += 2 + wire::DIGEST_CHARS;
        while bytes.get(dot).is_some_and(|&b| b != b'.') {
            dot += 1;
        }
    }
    false
}

/// Why a value was rejected before its text was decoded: how it was carried, not what it said.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CarrierError {
    /// The header came more than once: which one counts is not defined, so none does.
    #[error("the {key} header came {count} times; duplicates are rejected")]
    DuplicateHeader {
        /// The header.
        key: &'static str,
        /// How many values it had.
        count: usize,
    },
    /// The baggage held the entry more than once.
    #[error("the baggage holds {count} {key} entries; duplicates are rejected")]
    DuplicateEntry {
        /// The entry's key.
        key: &'static str,
        /// How many there were.
        count: usize,
    },
    /// The baggage (all `baggage` header values, joined by `,`) is longer than the W3C limit, so none of its
    /// entries is read.
    #[error("the baggage of {len} bytes exceeds the W3C limit of 8192 bytes; its {key} entry is not read")]
    BaggageTooLong {
        /// The entry's key.
        key: &'static str,
        /// The baggage's length.
        len: usize,
    },
    /// The entry comes after the 64 list members the W3C limit allows.
    #[error("the {key} entry is baggage member {position}, beyond the W3C limit of 64; it is not read")]
    BeyondEntryLimit {
        /// The entry's key.
        key: &'static str,
        /// Its 1-based position among the baggage's list members.
        position: usize,
    },
}

/// A baggage list member's key: the text before its first `=` or `;` (the whole member without either),
/// trimmed of spaces and tabs. Keys are tokens, never percent-encoded, so this is the only reading.
fn member_key(member: &str) -> &str {
    member.split(['=', ';']).next().unwrap_or("").trim_matches([' ', '\t'])
}

/// A baggage list member's value, exactly as written: the text after the key's `=`, trimmed of spaces and
/// tabs, with nothing decoded and nothing cut (a `;property` stays part of it). Empty when the key is not
/// followed by `=`.
fn member_value(member: &str) -> &str {
    let key_end = member.find(['=', ';']).unwrap_or(member.len());
    match member[key_end..].strip_prefix('=') {
        Some(value) => value.trim_matches([' ', '\t']),
        None => "",
    }
}

/// True when a baggage list member's key is `dei` or `dei-faults`.
fn is_ours(member: &str) -> bool {
    matches!(member_key(member), INDEX_KEY | FAULT_PLAN_KEY)
}

/// The baggage header values with the `dei` and `dei-faults` members removed (the other members as written),
/// or `None` when there were none: what a server at a trust boundary hands on to the W3C baggage
/// propagator, so that the request's own baggage is kept and ours is dropped.
///
/// ```
/// use dei_propagator::baggage_without_dei;
/// assert_eq!(baggage_without_dei("a=1, dei=1.AAAAAAAAAAA1,dei-faults=1*1:c ,b=2").as_deref(), Some("a=1,b=2"));
/// assert_eq!(baggage_without_dei("a=1,deity=2"), None);
/// ```
pub fn baggage_without_dei(header: &str) -> Option<String> {
    if !header.split(',').any(is_ours) {
        return None;
    }
    let kept: Vec<&str> = header.split(',').filter(|m| !is_ours(m)).map(str::trim).collect();
    Some(kept.join(","))
}

/// What the carrier's baggage holds under one of our keys.
enum Entry<'a> {
    /// No such entry.
    Absent,
    /// One entry, within the limits: its value as written.
    Value(&'a str),
    /// Entries that are not read, and why.
    Rejected(CarrierError),
}

/// The `baggage` header values of a carrier, read when a value has to be taken from them (the header was
/// missing or rejected), each key at most once.
struct CarrierBaggage<'a> {
    extractor: &'a dyn Extractor,
    fields: OnceCell<Vec<&'a str>>,
}

impl<'a> CarrierBaggage<'a> {
    fn new(extractor: &'a dyn Extractor) -> Self {
        CarrierBaggage {
            extractor,
            fields: OnceCell::new(),
        }
    }

    /// The entry under `key`, by the rule of docs/wire-format.md: every `baggage` value is read, as one list;
    /// a member's key ends at its first `=` or `;`; the value is taken as written; a baggage over 8192 bytes,
    /// a member after the 64th, and a key held twice are rejected.
    fn entry(&self, key: &'static str) -> Entry<'a> {
        let fields = self
            .fields
            .get_or_init(|| self.extractor.get_all(BAGGAGE_HEADER).unwrap_or_default());
        // A value that does not mention the key cannot hold it (keys are tokens, never percent-encoded).
        if !fields.iter().any(|f| f.contains(key)) {
            return Entry::Absent;
        }
        let members = || fields.iter().flat_map(|f| f.split(','));
        let len = fields.iter().map(|f| f.len()).sum::<usize>() + fields.len().saturating_sub(1);
        let mut found = members().enumerate().filter(|(_, m)| member_key(m) == key);
        let Some((position, first)) = found.next() else {
            return Entry::Absent;
        };
        let others = found.count();
        if len > MAX_BAGGAGE_BYTES {
            Entry::Rejected(CarrierError::BaggageTooLong { key, len })
        } else if others > 0 {
            Entry::Rejected(CarrierError::DuplicateEntry { key, count: others + 1 })
        } else if position >= MAX_BAGGAGE_ENTRIES {
            Entry::Rejected(CarrierError::BeyondEntryLimit {
                key,
                position: position + 1,
            })
        } else {
            Entry::Value(member_value(first))
        }
    }
}

/// Reads one of our values by the rule of docs/wire-format.md: the header when it came exactly once and is
/// accepted, else the baggage entry when it is accepted; every rejection on the way is counted (`header` and
/// `baggage` are the counters). Returns the decoded value and its text.
fn read<'a, T>(
    extractor: &'a dyn Extractor,
    baggage: &CarrierBaggage<'a>,
    key: &'static str,
    (header, in_baggage): (Source, Source),
    decode: impl Fn(&str) -> Result<T, String>,
) -> Option<(T, &'a str)> {
    let decoded = |value: &'a str, source: Source| match decode(value) {
        Ok(v) => Some((v, value)),
        Err(e) => {
            rejection::record(source, &e);
            None
        }
    };
    // A carrier that said how many `dei` values it holds (`extract_with_index_counted`) is read without the
    // list `get_all` makes, when it holds none or one: `get` then gives what `get_all` would.
    let counted = if key == INDEX_KEY {
        crate::context::index_values(extractor)
    } else {
        None
    };
    let single: [&'a str; 1];
    let listed: Vec<&'a str>;
    let values: Option<&[&'a str]> = match counted {
        Some(0) => None,
        Some(1) => match extractor.get(key) {
            Some(v) => {
                single = [v];
                Some(&single)
            }
            None => None,
        },
        _ => match extractor.get_all(key) {
            Some(v) => {
                listed = v;
                Some(&listed)
            }
            None => None,
        },
    };
    if let Some(values) = values {
        match *values {
            [value] => {
                if let Some(found) = decoded(value, header) {
                    return Some(found);
                }
            }
            [] => {}
            _ => rejection::record(
                header,
                &CarrierError::DuplicateHeader {
                    key,
                    count: values.len(),
                },
            ),
        }
    }
    match baggage.entry(key) {
        Entry::Absent => None,
        Entry::Value(value) => decoded(value, in_baggage),
        Entry::Rejected(e) => {
            rejection::record(in_baggage, &e);
            None
        }
    }
}

impl TextMapPropagator for DeiPropagator {
    /// Writes the context's [`dei_index`](DeiContextExt::dei_index) and non-empty
    /// [`fault_plan`](DeiContextExt::fault_plan) into the configured carriers. The baggage carrier is written
    /// as a whole `baggage` header: the context's other baggage entries (with their properties) followed by
    /// ours, replacing any `dei`/`dei-faults` entries the context's baggage held (an incoming request's).
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        crate::context::with_outgoing(|outgoing| self.inject_index(cx, outgoing, injector));
    }
    /// Reads the index and the fault plan from the carrier by the rule of docs/wire-format.md ("Reading what
    /// comes in"): the `dei` (`dei-faults`) header when it came exactly once and is valid, else the `dei`
    /// (`dei-faults`) entry of the carrier's `baggage` values, taken as written, when it is there once, within
    /// the W3C limits, and valid. Every rejection on the way (a malformed value, a duplicate, an entry beyond the
    /// limits) is counted and treated as absent; `cx` is returned unchanged apart from the values found. The
    /// carrier's [`Extractor::get_all`] is used to see repeated headers (for `dei`, only when the carrier did
    /// not say how many it holds: [`crate::extract_with_index_counted`]).
    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        let baggage = CarrierBaggage::new(extractor);
        let mut out = cx.clone();
        let index = read(extractor, &baggage, INDEX_KEY, (Source::Header, Source::Baggage), |v| {
            wire::decode(v, &self.limits).map_err(|e| e.to_string())
        });
        if let Some((index, wire)) = index
            && let Some(index) = crate::context::capture_extracted(index)
        {
            out = crate::context::with_decoded_index(&out, index, wire);
        }
        let plan = read(
            extractor,
            &baggage,
            FAULT_PLAN_KEY,
            (Source::FaultPlan, Source::FaultPlan),
            |v| FaultPlan::decode_with(v, &self.plan_limits).map_err(|e| e.to_string()),
        );
        if let Some((plan, _)) = plan {
            out = out.with_fault_plan(plan);
        }
        without_our_entries(out)
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(&self.fields)
    }
}

impl DeiPropagator {
    /// [`TextMapPropagator::inject_context`] with the index of the call being sent (`outgoing`, from
    /// [`crate::inject_with_index`]), else the context's, whose wire form is encoded at most once per context
    /// value (on first use).
    fn inject_index(&self, cx: &Context, outgoing: Option<&str>, injector: &mut dyn Injector) {
        let index: Option<&str> = outgoing.or_else(|| cx.dei_index_wire().map(|w| &**w));
        let index = index.map(|wire| self.within_limits(wire));
        let plan = (cx.fault_plan().filter(|p| !p.is_empty())).and_then(|p| self.plan_to_send(p));
        let plan = plan.as_deref();
        if index.is_none() && plan.is_none() {
            return;
        }
        if self.carriers.header {
            if let Some(v) = index {
                injector.set(INDEX_KEY, v.to_string());
            }
            if let Some(v) = plan {
                injector.set(FAULT_PLAN_KEY, v.to_string());
            }
        }
        let ours_len =
            index.map_or(0, |v| INDEX_KEY.len() + 1 + v.len()) + plan.map_or(0, |v| FAULT_PLAN_KEY.len() + 2 + v.len());
        if self.carriers.baggage && cx.baggage().is_empty() && ours_len <= MAX_BAGGAGE_BYTES {
            // Nothing else to carry: write the header directly. Our values use an alphabet that the baggage
            // propagator never percent-encodes, and they fit its size limit, so this is byte for byte what it
            // would write.
            let mut header = String::with_capacity(
                INDEX_KEY.len() + FAULT_PLAN_KEY.len() + 3 + index.map_or(0, str::len) + plan.map_or(0, str::len),
            );
            for (key, value) in [(INDEX_KEY, index), (FAULT_PLAN_KEY, plan)] {
                if let Some(value) = value {
                    if !header.is_empty() {
                        header.push(',');
                    }
                    header.push_str(key);
                    header.push('=');
                    header.push_str(value);
                }
            }
            injector.set(BAGGAGE_HEADER, header);
        } else if self.carriers.baggage {
            // The other entries as the W3C propagator writes them, then ours appended as they are (as above),
            // within the limits `Baggage` applies (64 entries, 8192 bytes of keys, values and properties) and
            // the 8192 bytes a receiver accepts for the whole header.
            let filtered;
            let others_cx = match other_entries(cx.baggage()) {
                // An incoming request's entries, when its context was not extracted by this propagator.
                Some(rest) => {
                    filtered = Context::new().with_baggage(rest);
                    &filtered
                }
                None => cx,
            };
            let mut others = CapturedHeader(None);
            BaggagePropagator::new().inject_context(others_cx, &mut others);
            let (mut entries, mut bytes) = others_cx.baggage().iter().fold((0, 0), |(n, b), (k, (v, m))| {
                (n + 1, b + k.as_str().len() + v.as_str().len() + m.as_str().len())
            });
            let mut header = others.0.unwrap_or_default();
            for (key, value) in [(INDEX_KEY, index), (FAULT_PLAN_KEY, plan)] {
                let Some(value) = value else { continue };
                // `Baggage` would drop the entry without a word, and a receiver drops a header over the size
                // limit whole: leave ours out of the baggage (the header still carries it) and count it.
                let wire_len = header.len() + usize::from(!header.is_empty()) + key.len() + 1 + value.len();
                if entries >= MAX_BAGGAGE_ENTRIES
                    || bytes + key.len() + value.len() > MAX_BAGGAGE_BYTES
                    || wire_len > MAX_BAGGAGE_BYTES
                {
                    rejection::record_baggage_full(key, value.len());
                    continue;
                }
                entries += 1;
                bytes += key.len() + value.len();
                if !header.is_empty() {
                    header.push(',');
                }
                header.push_str(key);
                header.push('=');
                header.push_str(value);
            }
            if !header.is_empty() {
                injector.set(BAGGAGE_HEADER, header);
            }
        }
    }
}

/// `cx` with the `dei` and `dei-faults` entries removed from its baggage (the W3C baggage propagator, which runs
/// first in [`composite_propagator`], copied them there from the carrier). Extraction has put their values in
/// the context as the index and the plan, so they are no longer needed there: without them the next hop's
/// inject writes the `baggage` header directly (nothing else to merge), and an application that forwards the
/// baggage elsewhere does not carry a stale index.
fn without_our_entries(cx: Context) -> Context {
    match other_entries(cx.baggage()) {
        Some(rest) => cx.with_baggage(rest),
        None => cx,
    }
}

/// `baggage` without the `dei` and `dei-faults` entries, or `None` when it holds neither (nothing to remove).
fn other_entries(baggage: &Baggage) -> Option<Baggage> {
    if baggage.get(INDEX_KEY).is_none() && baggage.get(FAULT_PLAN_KEY).is_none() {
        return None;
    }
    Some(
        baggage
            .iter()
            .filter(|(k, _)| k.as_str() != INDEX_KEY && k.as_str() != FAULT_PLAN_KEY)
            .map(|(k, (v, m))| (k.clone(), (v.clone(), m.clone())))
            .collect(),
    )
}

/// The W3C baggage propagator for every entry but DEI's own (`dei`, `dei-faults`), which [`DeiPropagator`]
/// reads and writes: extraction hides them from the standard [`BaggagePropagator`], so that it does not parse
/// and percent-decode a value that is about to be dropped, and parses nothing when they are all there is.
/// Injection is the standard one.
#[derive(Debug, Default)]
pub struct OtherBaggagePropagator(BaggagePropagator);

impl OtherBaggagePropagator {
    /// The propagator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TextMapPropagator for OtherBaggagePropagator {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        self.0.inject_context(cx, injector);
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        let Some(header) = extractor.get(BAGGAGE_HEADER) else {
            return cx.clone();
        };
        // A header the standard propagator rejects whole (too long) is left to it, as is one without ours.
        if !header.contains(INDEX_KEY) || header.len() > MAX_BAGGAGE_BYTES {
            return self.0.extract_with_context(cx, extractor);
        }
        // Among the first 64 entries, as the standard propagator reads them.
        let others = || header.split(',').take(MAX_BAGGAGE_ENTRIES).filter(|m| !is_ours(m));
        if others().all(|entry| entry.trim().is_empty()) {
            // A header with ours alone: the request's baggage is empty (not the ambient context's).
            return if cx.baggage().is_empty() {
                cx.clone()
            } else {
                cx.with_cleared_baggage()
            };
        }
        let others = others().collect::<Vec<_>>().join(",");
        self.0.extract_with_context(
            cx,
            &WithBaggageHeader {
                header: &others,
                extractor,
            },
        )
    }

    fn fields(&self) -> FieldIter<'_> {
        self.0.fields()
    }
}

/// A carrier whose `baggage` header is replaced.
struct WithBaggageHeader<'a> {
    header: &'a str,
    extractor: &'a dyn Extractor,
}

impl Extractor for WithBaggageHeader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if key.eq_ignore_ascii_case(BAGGAGE_HEADER) {
            Some(self.header)
        } else {
            self.extractor.get(key)
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.extractor.keys()
    }
}

/// W3C trace context, W3C baggage (for entries other than DEI's: [`OtherBaggagePropagator`]) and the DEI
/// propagator, composed in the order that works. The index and the fault plan go in the `dei` and
/// `dei-faults` headers only ([`Carriers::HEADER`]); both carriers are read. For a copy in the baggage, use
/// [`composite_propagator_with`]`(`[`Carriers::HEADER_AND_BAGGAGE`]`)`.
pub fn composite_propagator() -> TextMapCompositePropagator {
    composite_propagator_with(Carriers::HEADER)
}

/// [`composite_propagator`] writing `carriers`: [`Carriers::HEADER_AND_BAGGAGE`] adds the baggage copy, for
/// paths through services that relay only W3C baggage.
pub fn composite_propagator_with(carriers: Carriers) -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(OtherBaggagePropagator::new()),
        Box::new(DeiPropagator::with_config(
            carriers,
            Limits::default(),
            PlanLimits::default(),
        )),
    ])
}

/// Installs [`composite_propagator`] as the global propagator (the default global propagator is a no-op).
pub fn install_global_propagator() {
    opentelemetry::global::set_text_map_propagator(composite_propagator());
}

/// Installs [`composite_propagator_with`]`(carriers)` as the global propagator.
pub fn install_global_propagator_with(carriers: Carriers) {
    opentelemetry::global::set_text_map_propagator(composite_propagator_with(carriers));
}
