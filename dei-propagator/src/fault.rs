//! Fault plans: which RPCs to fail, and how, riding on the trace context (docs/wire-format.md).
//!
//! A plan is a list of (index, fault). It travels as the baggage entry `dei-faults` or is set in the
//! [`Context`](opentelemetry::Context) in process; a client whose outgoing index matches an entry returns the
//! fault instead of sending.

use crate::index::Index;
use crate::wire::{self, WireError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The baggage entry (and header) that carries a fault plan.
pub const FAULT_PLAN_KEY: &str = "dei-faults";

const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The largest latency a plan carries, in milliseconds (six decimal digits on the wire, about 17 minutes):
/// the wire limit. Longer latencies are written as this value; sub-millisecond parts are dropped. The
/// propagator counts and logs each plan it sends with a latency so shortened, and [`FaultPlan::encode`] each
/// text it writes so ([`Event::LatencyClamped`](crate::rejection::Event::LatencyClamped));
/// [`FaultPlan::try_new`] refuses one. A
/// service applies its own, lower cap (`dei-instrumentation`'s `DeiConfigBuilder::max_latency`, 30 s by
/// default).
pub const MAX_LATENCY_MS: u64 = 999_999;

/// One fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Fail a call with this gRPC status code, 1–16 (0, OK, is not a fault). An HTTP call gets the HTTP
    /// status gRPC maps the code to.
    Grpc(u8),
    /// Fail a call with this HTTP status, 200–599 (a 1xx status is never a final response). A gRPC call gets
    /// the status gRPC maps it to (docs/wire-format.md, "Faults as a caller sees them").
    Http(u16),
    /// Fail as if the connection could not be made: nothing is sent.
    Connection,
    /// Wait this long, then send as usual. The wire carries whole milliseconds up to [`MAX_LATENCY_MS`]: a
    /// longer or finer latency is written shortened (counted when the propagator sends it, and when
    /// [`FaultPlan::encode`] writes a record of the plan: [`Event::LatencyClamped`](crate::rejection::Event::LatencyClamped)).
    Latency(Duration),
}

impl Fault {
    /// gRPC UNAVAILABLE.
    pub const UNAVAILABLE: Fault = Fault::Grpc(14);
    /// gRPC DEADLINE_EXCEEDED.
    pub const DEADLINE_EXCEEDED: Fault = Fault::Grpc(4);
    /// gRPC INTERNAL.
    pub const INTERNAL: Fault = Fault::Grpc(13);
    /// gRPC UNKNOWN.
    pub const UNKNOWN: Fault = Fault::Grpc(2);
    /// gRPC UNIMPLEMENTED.
    pub const UNIMPLEMENTED: Fault = Fault::Grpc(12);

    /// A gRPC fault by code name, such as `UNAVAILABLE` (case-insensitive); `None` for `OK`, which is not a
    /// fault.
    ///
    /// ```
    /// use dei_propagator::Fault;
    /// assert_eq!(Fault::grpc_named("deadline_exceeded"), Some(Fault::DEADLINE_EXCEEDED));
    /// assert_eq!(Fault::grpc_named("OK"), None);
    /// ```
    pub fn grpc_named(name: &str) -> Option<Fault> {
        GRPC_CODES
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .filter(|&i| i > 0)
            .map(|i| Fault::Grpc(i as u8))
    }

    /// The gRPC code name of a [`Fault::Grpc`].
    pub fn grpc_code_name(&self) -> Option<&'static str> {
        match self {
            Fault::Grpc(code) => GRPC_CODES.get(*code as usize).copied(),
            _ => None,
        }
    }

    /// True when the wire form of this fault decodes back to it: a gRPC code 1–16, an HTTP status 200–599, a
    /// connection error, or a latency of whole milliseconds up to [`MAX_LATENCY_MS`].
    ///
    /// ```
    /// use dei_propagator::Fault;
    /// assert!(Fault::Http(503).is_valid());
    /// assert!(!Fault::Grpc(17).is_valid());
    /// assert!(!Fault::Grpc(0).is_valid() && !Fault::Http(100).is_valid());
    /// ```
    pub fn is_valid(&self) -> bool {
        match self {
            Fault::Grpc(code) => (1..=16).contains(code),
            Fault::Http(status) => (200..=599).contains(status),
            Fault::Connection => true,
            Fault::Latency(d) => d.subsec_nanos() % 1_000_000 == 0 && d.as_millis() <= u128::from(MAX_LATENCY_MS),
        }
    }

    /// A readable description, e.g. `grpc UNAVAILABLE` or `http 503`.
    pub fn describe(&self) -> String {
        match self {
            Fault::Grpc(_) => format!("grpc {}", self.grpc_code_name().unwrap_or("?")),
            Fault::Http(s) => format!("http {s}"),
            Fault::Connection => "connection error".to_string(),
            Fault::Latency(d) => format!("latency {}ms", d.as_millis()),
        }
    }
}

impl fmt::Display for Fault {
    /// The wire form: `g14`, `h503`, `c`, `l250`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Grpc(code) => write!(f, "g{code}"),
            Fault::Http(status) => write!(f, "h{status}"),
            Fault::Connection => f.write_str("c"),
            Fault::Latency(d) => write!(f, "l{}", d.as_millis().min(MAX_LATENCY_MS as u128)),
        }
    }
}

/// Why a fault or fault plan was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    /// Longer than the limit.
    #[error("plan of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More entries than the limit.
    #[error("plan has more than {max} entries")]
    TooManyEntries {
        /// The limit.
        max: usize,
    },
    /// The version is not `1`.
    #[error("unsupported plan version")]
    UnsupportedVersion,
    /// An entry is not `index:fault`.
    #[error("entry {entry}: expected index:fault")]
    BadEntry {
        /// 0-based entry position.
        entry: usize,
    },
    /// An entry's index is malformed.
    #[error("entry {entry}: {source}")]
    BadIndex {
        /// 0-based entry position.
        entry: usize,
        /// What was wrong with the index.
        source: WireError,
    },
    /// An entry's fault is malformed.
    #[error("entry {entry}: malformed fault")]
    BadFault {
        /// 0-based entry position.
        entry: usize,
    },
    /// An entry names the index of an earlier one: one call cannot take two faults, and the later entry
    /// would never be carried out.
    #[error("entry {entry}: its index is entry {first}'s too")]
    RepeatedIndex {
        /// 0-based position of the repeated entry.
        entry: usize,
        /// 0-based position of the entry that named the index first.
        first: usize,
    },
}

impl FromStr for Fault {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let (kind, digits) = s.split_at_checked(1).ok_or(())?;
        let number = |max_len: usize| -> Result<u64, ()> {
            // canonical decimal only: no sign, no leading zeros, so that decoding then encoding gives the input back
            if digits.is_empty()
                || digits.len() > max_len
                || (digits.len() > 1 && digits.starts_with('0'))
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(());
            }
            digits.parse::<u64>().map_err(|_| ())
        };
        match kind {
            "g" => match number(2)? {
                n @ 1..=16 => Ok(Fault::Grpc(n as u8)),
                _ => Err(()),
            },
            "h" if digits.len() == 3 => match number(3)? {
                n @ 200..=599 => Ok(Fault::Http(n as u16)),
                _ => Err(()),
            },
            "c" if digits.is_empty() => Ok(Fault::Connection),
            "l" => Ok(Fault::Latency(Duration::from_millis(number(6)?))),
            _ => Err(()),
        }
    }
}

/// Size limits for fault plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// Largest accepted value in bytes.
    pub max_len: usize,
    /// Most entries.
    pub max_entries: usize,
}

impl Default for PlanLimits {
    /// 4096 bytes and 64 entries.
    fn default() -> Self {
        PlanLimits {
            max_len: 4096,
            max_entries: 64,
        }
    }
}

/// A list of (index, fault): the RPCs to fail in one execution.
///
/// ```
/// use dei_propagator::{Fault, FaultPlan, Index};
/// let target = Index::decode("1.AAAAAAAAAAA1").unwrap();
/// let plan = FaultPlan::new(vec![(target.clone(), Fault::UNAVAILABLE)]);
/// assert_eq!(plan.encode(), "1*1.AAAAAAAAAAA1:g14");
/// assert_eq!(FaultPlan::decode(&plan.encode()), Ok(plan.clone()));
/// assert_eq!(plan.fault_for(&target), Some(Fault::UNAVAILABLE));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultPlan {
    entries: Vec<(Index, Fault)>,
}

impl FaultPlan {
    /// A plan of these entries, unchecked: it can be one that no receiver reads (more than 64 entries, more
    /// than 4096 bytes on the wire, an entry's index deeper than 64 elements, an invalid fault, an index named
    /// twice: see [`check_with`](Self::check_with)). The propagator does not send such a plan at all: it is
    /// counted and logged ([`Event::FaultPlanNotSent`](crate::rejection::Event::FaultPlanNotSent)), since every
    /// receiver would reject it whole; the entries naming the calls of the process that holds it are still
    /// matched there, in process. [`try_new`](Self::try_new) refuses it here instead.
    pub fn new(entries: Vec<(Index, Fault)>) -> Self {
        FaultPlan { entries }
    }

    /// A plan of these entries, or the error its wire form would decode to under the default [`PlanLimits`]
    /// (see [`check_with`](Self::check_with)): [`FaultPlanError::TooLong`] for a wire form of more than 4096
    /// bytes, [`FaultPlanError::TooManyEntries`] for more than 64 entries, [`FaultPlanError::BadIndex`] for an
    /// entry's index deeper than 64 elements or with a count of 0, [`FaultPlanError::BadFault`] for the first
    /// fault whose wire form would not decode back to it (see [`Fault::is_valid`]: a latency longer than
    /// [`MAX_LATENCY_MS`] or not of whole milliseconds too), [`FaultPlanError::RepeatedIndex`] for the first
    /// entry whose index an earlier one names.
    ///
    /// ```
    /// use dei_propagator::{Element, ElementDigest, Fault, FaultPlan, FaultPlanError, Index};
    /// let entries: Vec<(Index, Fault)> = (1..=65)
    ///     .map(|c| (Index::root().child(Element::new(ElementDigest([1; 8]), c)), Fault::UNAVAILABLE))
    ///     .collect();
    /// assert_eq!(FaultPlan::try_new(entries), Err(FaultPlanError::TooManyEntries { max: 64 }));
    /// ```
    pub fn try_new(entries: Vec<(Index, Fault)>) -> Result<Self, FaultPlanError> {
        let plan = FaultPlan { entries };
        plan.check(plan.encoded_len(), &PlanLimits::default(), true)?;
        Ok(plan)
    }

    /// `Ok` when a receiver with these limits reads this plan's wire form ([`encode`](Self::encode)), else the
    /// error it rejects the whole plan with ([`decode_with`](Self::decode_with)'s): a plan built by
    /// [`new`](Self::new) can be longer than `limits.max_len` ([`FaultPlanError::TooLong`]), have more than
    /// `limits.max_entries` entries ([`FaultPlanError::TooManyEntries`]), an entry's index deeper than 64
    /// elements or with a count of 0 ([`FaultPlanError::BadIndex`]), a gRPC code outside 1–16 or an HTTP status
    /// outside 200–599 ([`FaultPlanError::BadFault`]), or an index named twice
    /// ([`FaultPlanError::RepeatedIndex`]). The propagator sends only a plan that passes, under its own limits.
    ///
    /// A latency passes whatever its length: it is written as whole milliseconds up to [`MAX_LATENCY_MS`],
    /// shortened when it is longer or finer ([`Fault::is_valid`] says whether it is written as it is).
    ///
    /// ```
    /// use dei_propagator::{Element, ElementDigest, Fault, FaultPlan, FaultPlanError, Index, PlanLimits, WireError};
    /// let deep: Index = (0..65).map(|i| Element::new(ElementDigest([i; 8]), 1)).collect();
    /// let plan = FaultPlan::new(vec![(deep, Fault::UNAVAILABLE)]);
    /// assert_eq!(
    ///     plan.check_with(&PlanLimits::default()),
    ///     Err(FaultPlanError::BadIndex { entry: 0, source: WireError::TooDeep { max: 64 } })
    /// );
    /// assert_eq!(FaultPlan::decode(&plan.encode()).map(drop), plan.check_with(&PlanLimits::default()));
    /// ```
    pub fn check_with(&self, limits: &PlanLimits) -> Result<(), FaultPlanError> {
        self.check(self.encoded_len(), limits, false)
    }

    /// [`check_with`](Self::check_with) for a plan whose wire form is `encoded_len` bytes long, failing any
    /// fault that is not [`Fault::is_valid`] when `strict` (latencies included), or only those a receiver
    /// rejects otherwise. The errors are [`decode_with`](Self::decode_with)'s, in its order.
    pub(crate) fn check(&self, encoded_len: usize, limits: &PlanLimits, strict: bool) -> Result<(), FaultPlanError> {
        if encoded_len > limits.max_len {
            return Err(FaultPlanError::TooLong {
                len: encoded_len,
                max: limits.max_len,
            });
        }
        let index_limits = entry_index_limits(limits);
        for (entry, (index, fault)) in self.entries.iter().enumerate() {
            if entry >= limits.max_entries {
                return Err(FaultPlanError::TooManyEntries {
                    max: limits.max_entries,
                });
            }
            wire::check_written(index, &index_limits).map_err(|source| FaultPlanError::BadIndex { entry, source })?;
            let read = match fault {
                Fault::Latency(_) if !strict => true,
                _ => fault.is_valid(),
            };
            if !read {
                return Err(FaultPlanError::BadFault { entry });
            }
            if let Some(first) = self.entries[..entry].iter().position(|(i, _)| i == index) {
                return Err(FaultPlanError::RepeatedIndex { entry, first });
            }
        }
        Ok(())
    }

    /// The length of [`encode`](Self::encode)'s text.
    fn encoded_len(&self) -> usize {
        let digits = |n: u128| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        1 + (self.entries.iter())
            .map(|(index, fault)| {
                let fault_len = match fault {
                    Fault::Grpc(code) => 1 + digits(u128::from(*code)),
                    Fault::Http(status) => 1 + digits(u128::from(*status)),
                    Fault::Connection => 1,
                    Fault::Latency(d) => 1 + digits(d.as_millis().min(u128::from(MAX_LATENCY_MS))),
                };
                2 + wire::encoded_len(index) + fault_len
            })
            .sum::<usize>()
    }

    /// The entries.
    pub fn entries(&self) -> &[(Index, Fault)] {
        &self.entries
    }

    /// True when the plan fails nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The fault planned for the RPC with this index, if any.
    pub fn fault_for(&self, index: &Index) -> Option<Fault> {
        self.entries.iter().find(|(i, _)| i == index).map(|(_, f)| *f)
    }

    /// The wire form: `1` then `*index:fault` per entry. A latency is written as whole milliseconds up to
    /// [`MAX_LATENCY_MS`]: one the wire does not carry (longer, or with a part finer than a millisecond, in a plan
    /// built by [`new`](Self::new)) is written shortened, so that the text decodes to another plan, and that is
    /// counted and logged ([`Event::LatencyClamped`](crate::rejection::Event::LatencyClamped)), once per text
    /// written, as the propagator counts each call it sends such a plan on. The text is also what a record of the
    /// plan holds (a server span's `dei.fault.plan`, a search report's plan). [`Display`](fmt::Display) writes the
    /// same text without counting: a log line may format a plan once per subscriber layer, or not at all when
    /// its level is off, so a count there would follow the logging. [`try_new`](Self::try_new) refuses such a
    /// plan.
    ///
    /// ```
    /// use dei_propagator::rejection::{self, Event};
    /// use dei_propagator::{Fault, FaultPlan, Index};
    /// use std::time::Duration;
    /// let plan = FaultPlan::new(vec![(Index::root(), Fault::Latency(Duration::from_secs(3600)))]);
    /// let before = rejection::event_total(Event::LatencyClamped);
    /// assert_eq!(plan.encode(), "1*1:l999999");
    /// assert_eq!(rejection::event_total(Event::LatencyClamped), before + 1);
    /// ```
    pub fn encode(&self) -> String {
        let text = self.encode_unrecorded();
        if let Some(shortened) = self.shortened_latencies() {
            crate::rejection::record_event(
                crate::rejection::Event::LatencyClamped,
                &format_args!("the text of a fault plan (a record of it, or its wire form) has {shortened}"),
            );
        }
        text
    }

    /// [`encode`](Self::encode)'s text, without counting a latency written shortened: for the propagator, which
    /// counts each call it sends such a plan on.
    pub(crate) fn encode_unrecorded(&self) -> String {
        let mut out = String::from("1");
        for (index, fault) in &self.entries {
            out.push('*');
            out.push_str(&index.encode());
            out.push(':');
            out.push_str(&fault.to_string());
        }
        out
    }

    /// The latencies of this plan that the wire does not carry (longer than [`MAX_LATENCY_MS`], or with a part
    /// finer than a millisecond), described for a log line, or `None` when every one is carried as it is.
    pub(crate) fn shortened_latencies(&self) -> Option<ShortenedLatencies> {
        let mut shortened = (self.entries.iter().enumerate()).filter_map(|(entry, (_, fault))| match fault {
            Fault::Latency(asked) if !fault.is_valid() => Some((entry, *asked)),
            _ => None,
        });
        let (entry, asked) = shortened.next()?;
        Some(ShortenedLatencies {
            count: 1 + shortened.count(),
            entry,
            asked,
        })
    }

    /// Decodes under the default [`PlanLimits`].
    pub fn decode(value: &str) -> Result<FaultPlan, FaultPlanError> {
        FaultPlan::decode_with(value, &PlanLimits::default())
    }

    /// Decodes under the given limits. Any defect rejects the whole plan.
    pub fn decode_with(value: &str, limits: &PlanLimits) -> Result<FaultPlan, FaultPlanError> {
        if value.len() > limits.max_len {
            return Err(FaultPlanError::TooLong {
                len: value.len(),
                max: limits.max_len,
            });
        }
        let mut parts = value.split('*');
        if parts.next() != Some("1") {
            return Err(FaultPlanError::UnsupportedVersion);
        }
        let index_limits = entry_index_limits(limits);
        let mut entries = Vec::new();
        for (entry, part) in parts.enumerate() {
            if entry >= limits.max_entries {
                return Err(FaultPlanError::TooManyEntries {
                    max: limits.max_entries,
                });
            }
            let (index_text, fault_text) = part.split_once(':').ok_or(FaultPlanError::BadEntry { entry })?;
            let index =
                wire::decode(index_text, &index_limits).map_err(|source| FaultPlanError::BadIndex { entry, source })?;
            let fault = fault_text.parse().map_err(|()| FaultPlanError::BadFault { entry })?;
            if let Some(first) = entries.iter().position(|(i, _)| *i == index) {
                return Err(FaultPlanError::RepeatedIndex { entry, first });
            }
            entries.push((index, fault));
        }
        Ok(FaultPlan { entries })
    }
}

/// The limits under which a plan's entries' indexes are read: the plan's length, and the default depth (64).
fn entry_index_limits(limits: &PlanLimits) -> wire::Limits {
    wire::Limits {
        max_len: limits.max_len,
        ..wire::Limits::default()
    }
}

/// The latencies of a plan that its text has shortened ([`FaultPlan::shortened_latencies`]).
pub(crate) struct ShortenedLatencies {
    /// How many.
    count: usize,
    /// The first one's entry, 0-based.
    entry: usize,
    /// The first one's latency, as given.
    asked: Duration,
}

impl fmt::Display for ShortenedLatencies {
    /// `{count} latencies that the wire does not carry …: written shortened, the first (entry …) of … as l…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ShortenedLatencies { count, entry, asked } = self;
        write!(
            f,
            "{count} latencies that the wire does not carry (whole milliseconds up to {MAX_LATENCY_MS}): written \
             shortened, the first (entry {entry}) of {asked:?} as l{}",
            asked.as_millis().min(u128::from(MAX_LATENCY_MS))
        )
    }
}

/// The text [`FaultPlan::encode`] writes, uncounted (see there).
impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode_unrecorded())
    }
}

impl Serialize for Fault {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|()| serde::de::Error::custom(format!("malformed fault {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_vectors() {
        for (text, fault) in [
            ("g14", Fault::UNAVAILABLE),
            ("g4", Fault::DEADLINE_EXCEEDED),
            ("h503", Fault::Http(503)),
            ("c", Fault::Connection),
            ("l250", Fault::Latency(Duration::from_millis(250))),
        ] {
            assert_eq!(text.parse::<Fault>(), Ok(fault));
            assert_eq!(fault.to_string(), text);
        }
        for bad in [
            "", "g", "g0", "g17", "g-1", "h99", "h100", "h199", "h600", "h5031", "c1", "l", "l1234567", "x1", "gé",
        ] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }

    #[test]
    fn plan_vectors_and_rejections() {
        let plan = FaultPlan::decode("1*1.AAAAAAAAAAA1:g14*1.AAAAAAAAAAA1.AQEBAQEBAQE2:h503").expect("valid");
        assert_eq!(plan.entries().len(), 2);
        assert_eq!(FaultPlan::decode("1"), Ok(FaultPlan::default()));
        assert!(matches!(
            FaultPlan::decode("2"),
            Err(FaultPlanError::UnsupportedVersion)
        ));
        assert!(matches!(
            FaultPlan::decode("1*1.AAAAAAAAAAA1"),
            Err(FaultPlanError::BadEntry { entry: 0 })
        ));
        assert!(matches!(
            FaultPlan::decode("1*x:g14"),
            Err(FaultPlanError::BadIndex { .. })
        ));
        assert!(matches!(
            FaultPlan::decode("1*1:zz"),
            Err(FaultPlanError::BadFault { .. })
        ));
        let many = FaultPlan::new(
            (0..65u8)
                .map(|i| {
                    let element = crate::Element::new(crate::ElementDigest([i; 8]), 1);
                    (Index::root().child(element), Fault::Connection)
                })
                .collect(),
        )
        .encode();
        assert!(matches!(
            FaultPlan::decode(&many),
            Err(FaultPlanError::TooManyEntries { .. })
        ));
        let long = format!("1*1{}:c", ".AAAAAAAAAAA1".repeat(400));
        assert!(matches!(FaultPlan::decode(&long), Err(FaultPlanError::TooLong { .. })));
        assert_eq!(
            FaultPlan::decode("1*1:c*1.AAAAAAAAAAA1:g14*1:l5"),
            Err(FaultPlanError::RepeatedIndex { entry: 2, first: 0 })
        );
    }
}
