//! The parts of an OTLP span that the service graph and the prefix tree read, with the `dei.*` attributes
//! parsed and type-checked.
//!
//! Attributes of the wrong type or with malformed values are reported as [`AttributeIssue`]s, and the span's
//! DEI data as a whole is skipped (a half-read index, stack or fault would be recorded wrongly): the span
//! still counts for the service graph, and it is forwarded unchanged.

use crate::otlp::lite::{self, AnyValue, KeyValue, Span, Value};
use dei_propagator::semconv;
use dei_propagator::{Index, PayloadDigest, StackDigest};
use std::sync::Arc;

/// A 16-byte trace id.
pub type TraceId = [u8; 16];
/// An 8-byte span id.
pub type SpanId = [u8; 8];

/// The OTLP span kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `SPAN_KIND_UNSPECIFIED` or `SPAN_KIND_INTERNAL`.
    Internal,
    /// `SPAN_KIND_SERVER`.
    Server,
    /// `SPAN_KIND_CLIENT`.
    Client,
    /// `SPAN_KIND_PRODUCER`.
    Producer,
    /// `SPAN_KIND_CONSUMER`.
    Consumer,
}

impl Kind {
    fn from_otlp(kind: i32) -> Kind {
        match kind {
            2 => Kind::Server,
            3 => Kind::Client,
            4 => Kind::Producer,
            5 => Kind::Consumer,
            _ => Kind::Internal,
        }
    }

    /// Client or producer: the calling side of an edge.
    pub fn is_caller(self) -> bool {
        matches!(self, Kind::Client | Kind::Producer)
    }

    /// Server or consumer: the called side of an edge.
    pub fn is_callee(self) -> bool {
        matches!(self, Kind::Server | Kind::Consumer)
    }
}

/// Where a virtual (uninstrumented) peer's name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSource {
    /// `peer.service`.
    PeerService,
    /// `server.address`.
    ServerAddress,
    /// `rpc.service`.
    RpcService,
    /// `db.system`.
    DbSystem,
}

/// The peer attributes that name an uninstrumented callee, in order of preference.
pub const PEER_ATTRIBUTES: [(&str, PeerSource); 4] = [
    ("peer.service", PeerSource::PeerService),
    ("server.address", PeerSource::ServerAddress),
    ("rpc.service", PeerSource::RpcService),
    ("db.system", PeerSource::DbSystem),
];

/// The same for a span with a DEI index that is not a database call: `rpc.service` before `server.address`.
/// DEI's gRPC client spans carry both when the layer knows its server (`DeiClientLayer::server`, a client made
/// `with_origin`), and a call of theirs that never reached its server is merged into the service seen serving
/// its `rpc.service` (API.md, "Merged virtual nodes"), which an address (an IP, a load balancer's name) would
/// not be. Other spans keep the order above: there an address may tell apart hosts that serve one
/// `rpc.service`.
pub const DEI_PEER_ATTRIBUTES: [(&str, PeerSource); 4] = [
    ("peer.service", PeerSource::PeerService),
    ("rpc.service", PeerSource::RpcService),
    ("server.address", PeerSource::ServerAddress),
    ("db.system", PeerSource::DbSystem),
];

/// One stream message's index mapping: preliminary → final (paper §4.2), from a `dei.stream.message` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMapping {
    /// The preliminary index under which the callee served the message (`…r|(x+k)~`): the event's
    /// `dei.preliminary_index` (the stream's `…r|x~`) counted up by `dei.message` = k, or
    /// `dei.preliminary_index` as given when the event has no `dei.message`.
    pub preliminary: Index,
    /// The message's final index.
    pub final_index: Index,
    /// `dei.message`: the message's 1-based position k on the stream, when given.
    pub k: Option<u32>,
    /// `dei.fault` on the event: the fault injected on this message (the stream ended before it).
    pub fault: Option<String>,
    /// The event's time, Unix ns (when the message was sent).
    pub time_ns: u64,
}

pub use crate::views::{SpanStatus, StatusCode};

/// The `dei.*` attributes of one span, each `None` when absent or rejected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeiAttributes {
    /// `dei.index`.
    pub index: Option<Index>,
    /// `dei.signature`.
    pub signature: Option<Arc<str>>,
    /// `dei.payload.digest`.
    pub payload_digest: Option<PayloadDigest>,
    /// `dei.stack.digest`.
    pub stack_digest: Option<StackDigest>,
    /// `dei.stack`, innermost frame first.
    pub stack: Option<Vec<String>>,
    /// `dei.count`.
    pub count: Option<u32>,
    /// `dei.depth`.
    pub depth: Option<u32>,
    /// `dei.instantiation`.
    pub instantiation: Option<Arc<str>>,
    /// `dei.preliminary`.
    pub preliminary: bool,
    /// `dei.ambiguous`.
    pub ambiguous: bool,
    /// `dei.fault`.
    pub fault: Option<String>,
    /// How many faults the request's plan named (`dei.fault.plan` on a server span); 0 without a plan.
    pub planned_faults: u32,
    /// Mappings from `dei.stream.message` span events (at most [`MAX_STREAM_MESSAGES`]).
    pub stream_messages: Vec<StreamMapping>,
    /// `dei.stream.message` events past [`MAX_STREAM_MESSAGES`], ignored.
    pub stream_messages_dropped: u64,
    /// The start of `dei.payload` (the request's payload as text, recorded only when the service opts in with
    /// `record_payloads`), at most [`semconv::PAYLOAD_PREVIEW_CHARS`] characters, `…` marking a cut.
    pub payload_preview: Option<Arc<str>>,
    /// The span's DEI data was skipped for a malformed `dei.*` attribute or `dei.stream.message` event (the
    /// other fields are then empty): the collector counts it on the span's trace.
    pub skipped: bool,
}

/// Most `dei.stream.message` events kept per span: the analysis stores each (memory stays bounded).
pub const MAX_STREAM_MESSAGES: usize = 10_000;

/// A span, reduced to what analysis needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanRecord {
    /// Trace id.
    pub trace_id: TraceId,
    /// Span id.
    pub span_id: SpanId,
    /// Parent span id, `None` for a root span.
    pub parent_span_id: Option<SpanId>,
    /// The resource's `service.name` (`unknown_service` when missing).
    pub service: Arc<str>,
    /// The span name, kept only for spans with a `dei.index` and no `dei.signature` (the fallback signature).
    pub name: String,
    /// The span kind.
    pub kind: Kind,
    /// Start time, Unix nanoseconds.
    pub start_ns: u64,
    /// End time, Unix nanoseconds.
    pub end_ns: u64,
    /// Status code ERROR.
    pub error: bool,
    /// The status, and the gRPC or HTTP status code attributes.
    pub status: SpanStatus,
    /// The uninstrumented peer this span talks to, if named by a peer attribute.
    pub peer: Option<(String, PeerSource)>,
    /// A database call: the span has `db.system`. Its callee makes no span, so the service graph records
    /// its edge at once instead of waiting for a server half, as the Collector's servicegraph connector does.
    pub database: bool,
    /// The `dei.*` attributes.
    pub dei: DeiAttributes,
}

impl SpanRecord {
    /// Duration in seconds (0 when the end is before the start).
    pub fn duration_seconds(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
}

/// A `dei.*` attribute that was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeIssue {
    /// The attribute key.
    pub key: String,
    /// What was wrong with it.
    pub problem: String,
}

impl std::fmt::Display for AttributeIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "attribute {:?}: {}", self.key, self.problem)
    }
}

/// Extracts every span of a [`lite`] request (the receivers' hot path).
pub fn extract_lite(req: &lite::Request, issues: &mut Vec<AttributeIssue>) -> Vec<SpanRecord> {
    extract_lite_counted(req, issues).0
}

/// [`extract_lite`], also returning how many spans had their DEI data skipped for an issue.
pub fn extract_lite_counted(req: &lite::Request, issues: &mut Vec<AttributeIssue>) -> (Vec<SpanRecord>, usize) {
    let mut out = Vec::new();
    let skipped = extract_lite_into(req, issues, &mut out);
    (out, skipped)
}

/// [`extract_lite_counted`] into a buffer (appended to, e.g. one reused from an earlier request); returns how
/// many spans had their DEI data skipped for an issue.
pub fn extract_lite_into(req: &lite::Request, issues: &mut Vec<AttributeIssue>, out: &mut Vec<SpanRecord>) -> usize {
    let mut skipped = 0;
    out.reserve(req.span_count());
    for rs in &req.resource_spans {
        let service: Arc<str> = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == b"service.name"))
            .and_then(|kv| as_str(kv.value.as_ref()))
            .map(Arc::from)
            .unwrap_or_else(|| Arc::from("unknown_service"));
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let before = issues.len();
                if let Some(rec) = extract_span(span, &service, issues) {
                    out.push(rec);
                }
                if issues.len() > before {
                    skipped += 1;
                }
            }
        }
    }
    skipped
}

fn extract_span(span: &Span, service: &Arc<str>, issues: &mut Vec<AttributeIssue>) -> Option<SpanRecord> {
    let trace_id: TraceId = span.trace_id[..].try_into().ok()?;
    let span_id: SpanId = span.span_id[..].try_into().ok()?;
    let parent_span_id: Option<SpanId> = span.parent_span_id[..].try_into().ok();
    let database = span.attributes.iter().any(|kv| kv.key == b"db.system");
    let issues_before = issues.len();
    let mut dei = DeiAttributes::default();
    let mut status = SpanStatus::default();
    for kv in &span.attributes {
        match kv.key {
            b"rpc.grpc.status_code" => {
                status.grpc_status_code = as_int(kv.value.as_ref()).and_then(|v| i32::try_from(v).ok())
            }
            b"http.response.status_code" => {
                status.http_status_code = as_int(kv.value.as_ref()).and_then(|v| i32::try_from(v).ok())
            }
            key if key.starts_with(key::PREFIX) => {
                if let Err(problem) = apply_attribute(&mut dei, kv) {
                    issues.push(AttributeIssue {
                        key: String::from_utf8_lossy(kv.key).into_owned(),
                        problem,
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(s) = &span.status {
        status.code = match s.code {
            1 => StatusCode::Ok,
            2 => StatusCode::Error,
            _ => StatusCode::Unset,
        };
        if !s.message.is_empty() {
            let cut = &s.message[..s.message.len().min(MAX_TEXT)];
            status.message = Some(Arc::from(String::from_utf8_lossy(cut).as_ref()));
        }
    }
    if let (Some(index), Some(depth)) = (&dei.index, dei.depth)
        && index.depth() != depth as usize
    {
        issues.push(AttributeIssue {
            key: semconv::DEPTH.into(),
            problem: format!("{depth} does not match the index depth {}", index.depth()),
        });
    }
    for event in span.events.iter().filter(|e| e.name == key::STREAM_MESSAGE_EVENT) {
        if dei.stream_messages.len() >= MAX_STREAM_MESSAGES {
            dei.stream_messages_dropped += 1;
            continue;
        }
        match stream_mapping(&event.attributes, event.time_unix_nano) {
            Ok(m) => dei.stream_messages.push(m),
            Err(problem) => issues.push(AttributeIssue {
                key: semconv::STREAM_MESSAGE_EVENT.into(),
                problem,
            }),
        }
    }
    let order = if dei.index.is_some() && !database {
        &DEI_PEER_ATTRIBUTES
    } else {
        &PEER_ATTRIBUTES
    };
    let mut peer = None;
    for (key, source) in order {
        if let Some(v) = span
            .attributes
            .iter()
            .find(|kv| kv.key == key.as_bytes())
            .and_then(|kv| as_str(kv.value.as_ref()))
            && !v.is_empty()
        {
            peer = Some((v.to_string(), *source));
            break;
        }
    }
    if issues.len() > issues_before {
        dei = DeiAttributes {
            skipped: true,
            ..DeiAttributes::default()
        };
    }
    Some(SpanRecord {
        trace_id,
        span_id,
        parent_span_id: parent_span_id.filter(|p| p.iter().any(|b| *b != 0)),
        service: service.clone(),
        // only needed as a fallback signature
        name: if dei.index.is_some() && dei.signature.is_none() {
            String::from_utf8_lossy(span.name).into_owned()
        } else {
            String::new()
        },
        kind: Kind::from_otlp(span.kind),
        start_ns: span.start_time_unix_nano,
        end_ns: span.end_time_unix_nano,
        error: span.status.as_ref().is_some_and(|s| s.code == 2),
        status,
        peer,
        database,
        dei,
    })
}

fn as_str<'a>(v: Option<&AnyValue<'a>>) -> Option<&'a str> {
    match v?.value.as_ref()? {
        Value::StringValue(s) => std::str::from_utf8(s).ok(),
        _ => None,
    }
}

/// An integer attribute (or a decimal string), as the status code attributes come.
fn as_int(v: Option<&AnyValue>) -> Option<i64> {
    match v?.value.as_ref()? {
        Value::IntValue(i) => Some(*i),
        Value::StringValue(s) => std::str::from_utf8(s).ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn type_name(v: Option<&AnyValue>) -> &'static str {
    match v.and_then(|v| v.value.as_ref()) {
        None => "empty or kvlist",
        Some(Value::StringValue(s)) if std::str::from_utf8(s).is_err() => "invalid UTF-8 string",
        Some(Value::StringValue(_)) => "string",
        Some(Value::BoolValue(_)) => "bool",
        Some(Value::IntValue(_)) => "int",
        Some(Value::DoubleValue(_)) => "double",
        Some(Value::ArrayValue(_)) => "array",
        Some(Value::BytesValue(_)) => "bytes",
    }
}

fn want_str<'a>(kv: &KeyValue<'a>) -> Result<&'a str, String> {
    as_str(kv.value.as_ref()).ok_or_else(|| format!("expected a string, got {}", type_name(kv.value.as_ref())))
}

fn want_bool(kv: &KeyValue) -> Result<bool, String> {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::BoolValue(b)) => Ok(*b),
        _ => Err(format!("expected a bool, got {}", type_name(kv.value.as_ref()))),
    }
}

fn want_u32(kv: &KeyValue) -> Result<u32, String> {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::IntValue(i)) => u32::try_from(*i).map_err(|_| format!("{i} is out of range")),
        _ => Err(format!("expected an int, got {}", type_name(kv.value.as_ref()))),
    }
}

/// The longest readable text kept from an attribute (signatures, faults, frames).
const MAX_TEXT: usize = 1024;
/// The most stack frames kept.
const MAX_FRAMES: usize = 64;

/// `s`, cut to at most [`MAX_TEXT`] bytes at a character boundary.
fn clipped(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn bounded(s: &str) -> Result<&str, String> {
    if s.len() > MAX_TEXT {
        Err(format!("longer than {MAX_TEXT} bytes"))
    } else {
        Ok(s)
    }
}

fn apply_attribute(dei: &mut DeiAttributes, kv: &KeyValue) -> Result<(), String> {
    match kv.key {
        key::INDEX => {
            let s = want_str(kv)?;
            dei.index = Some(Index::decode(s).map_err(|e| format!("malformed index: {e}"))?);
        }
        key::SIGNATURE => dei.signature = Some(Arc::from(bounded(want_str(kv)?)?)),
        key::PAYLOAD => {
            dei.payload_preview = Some(Arc::from(semconv::payload_preview(want_str(kv)?)));
        }
        key::PAYLOAD_DIGEST => {
            let s = want_str(kv)?;
            dei.payload_digest = Some(PayloadDigest::from_hex(s).map_err(|e| format!("malformed digest: {e}"))?);
        }
        key::STACK_DIGEST => {
            let s = want_str(kv)?;
            dei.stack_digest = Some(StackDigest::from_hex(s).map_err(|e| format!("malformed digest: {e}"))?);
        }
        key::STACK => {
            // Only the first MAX_FRAMES frames are kept, and only they are copied: every value is checked, but
            // a stack of millions of lines allocates no more than one of MAX_FRAMES.
            let frames: Vec<String> = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => std::str::from_utf8(s)
                    .map_err(|_| "invalid UTF-8".to_string())?
                    .lines()
                    .filter(|l| !l.is_empty())
                    .take(MAX_FRAMES)
                    .map(clipped)
                    .collect(),
                Some(Value::ArrayValue(a)) => {
                    let mut frames = Vec::with_capacity(a.values.len().min(MAX_FRAMES));
                    for v in &a.values {
                        match v.value.as_ref() {
                            Some(Value::StringValue(s)) => {
                                let frame = std::str::from_utf8(s).map_err(|_| "invalid UTF-8".to_string())?;
                                if frames.len() < MAX_FRAMES {
                                    frames.push(clipped(frame));
                                }
                            }
                            _ => return Err("expected an array of strings".into()),
                        }
                    }
                    frames
                }
                _ => {
                    return Err(format!(
                        "expected a string array or a string, got {}",
                        type_name(kv.value.as_ref())
                    ));
                }
            };
            dei.stack = Some(frames);
        }
        key::COUNT => {
            let c = want_u32(kv)?;
            if c == 0 {
                return Err("count must be at least 1".into());
            }
            dei.count = Some(c);
        }
        key::DEPTH => dei.depth = Some(want_u32(kv)?),
        key::INSTANTIATION => dei.instantiation = Some(Arc::from(bounded(want_str(kv)?)?)),
        key::PRELIMINARY => dei.preliminary = want_bool(kv)?,
        key::AMBIGUOUS => dei.ambiguous = want_bool(kv)?,
        key::FAULT => {
            let s = want_str(kv)?;
            s.parse::<dei_propagator::Fault>()
                .map_err(|_| format!("malformed fault {s:?} (expected g<code>, h<status>, c or l<ms>)"))?;
            dei.fault = Some(s.to_string());
        }
        key::FAULT_PLAN => {
            let plan =
                dei_propagator::FaultPlan::decode(want_str(kv)?).map_err(|e| format!("malformed fault plan: {e}"))?;
            dei.planned_faults = u32::try_from(plan.entries().len()).unwrap_or(u32::MAX);
        }
        // Unknown `dei.*` keys (future attributes) are ignored silently.
        _ => {}
    }
    Ok(())
}

fn stream_mapping(attrs: &[KeyValue], time_ns: u64) -> Result<StreamMapping, String> {
    let get = |key: &str| -> Result<Index, String> {
        let kv = attrs
            .iter()
            .find(|kv| kv.key == key.as_bytes())
            .ok_or_else(|| format!("missing {key}"))?;
        let s = want_str(kv).map_err(|e| format!("{key}: {e}"))?;
        Index::decode(s).map_err(|e| format!("{key}: malformed index: {e}"))
    };
    let preliminary = get(semconv::PRELIMINARY_INDEX)?;
    let final_index = get(semconv::INDEX)?;
    if !preliminary.last().is_some_and(|e| e.preliminary) {
        return Err(format!(
            "{} does not end in a preliminary element",
            semconv::PRELIMINARY_INDEX
        ));
    }
    if final_index.last().is_none_or(|e| e.preliminary) {
        return Err(format!(
            "{} of a stream message must end in a final element",
            semconv::INDEX
        ));
    }
    let k = match attrs.iter().find(|kv| kv.key == key::MESSAGE) {
        Some(kv) => match want_u32(kv).map_err(|e| format!("{}: {e}", semconv::MESSAGE))? {
            0 => return Err(format!("{}: positions start at 1", semconv::MESSAGE)),
            k => Some(k),
        },
        None => None,
    };
    let fault = match attrs.iter().find(|kv| kv.key == key::FAULT) {
        Some(kv) => {
            let s = want_str(kv).map_err(|e| format!("{}: {e}", semconv::FAULT))?;
            s.parse::<dei_propagator::Fault>().map_err(|_| {
                format!(
                    "{}: malformed fault {s:?} (expected g<code>, h<status>, c or l<ms>)",
                    semconv::FAULT
                )
            })?;
            Some(s.to_string())
        }
        None => None,
    };
    Ok(StreamMapping {
        // the event names the stream's own preliminary index and the position: the callee served the
        // message under that index counted up by k
        preliminary: match k {
            Some(k) => preliminary.stream_message(k),
            None => preliminary,
        },
        final_index,
        k,
        fault,
        time_ns,
    })
}

/// The contract's keys ([`dei_propagator::semconv`]) as bytes, to match the borrowed keys of the lite view.
mod key {
    use dei_propagator::semconv;

    /// What every key of the contract starts with (`dei.`).
    pub(super) const PREFIX: &[u8] = semconv::INDEX.as_bytes().split_at(4).0;
    pub(super) const AMBIGUOUS: &[u8] = semconv::AMBIGUOUS.as_bytes();
    pub(super) const COUNT: &[u8] = semconv::COUNT.as_bytes();
    pub(super) const DEPTH: &[u8] = semconv::DEPTH.as_bytes();
    pub(super) const FAULT: &[u8] = semconv::FAULT.as_bytes();
    pub(super) const FAULT_PLAN: &[u8] = semconv::FAULT_PLAN.as_bytes();
    pub(super) const INDEX: &[u8] = semconv::INDEX.as_bytes();
    pub(super) const INSTANTIATION: &[u8] = semconv::INSTANTIATION.as_bytes();
    pub(super) const MESSAGE: &[u8] = semconv::MESSAGE.as_bytes();
    pub(super) const PAYLOAD: &[u8] = semconv::PAYLOAD.as_bytes();
    pub(super) const PAYLOAD_DIGEST: &[u8] = semconv::PAYLOAD_DIGEST.as_bytes();
    pub(super) const PRELIMINARY: &[u8] = semconv::PRELIMINARY.as_bytes();
    pub(super) const SIGNATURE: &[u8] = semconv::SIGNATURE.as_bytes();
    pub(super) const STACK: &[u8] = semconv::STACK.as_bytes();
    pub(super) const STACK_DIGEST: &[u8] = semconv::STACK_DIGEST.as_bytes();
    pub(super) const STREAM_MESSAGE_EVENT: &[u8] = semconv::STREAM_MESSAGE_EVENT.as_bytes();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::decode_json_lite;

    fn one(attrs: &str, events: &str) -> (Vec<SpanRecord>, Vec<AttributeIssue>) {
        let json = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc"}}}}]}},
            "scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",
            "parentSpanId":"0807060504030201","name":"n","kind":3,"startTimeUnixNano":"10","endTimeUnixNano":"30",
            "status":{{"code":2}},"attributes":[{attrs}],"events":[{events}]}}]}}]}}]}}"#
        );
        let arena = bumpalo::Bump::new();
        let req = decode_json_lite(json.as_bytes(), &arena).expect("a small request decodes");
        let mut issues = Vec::new();
        (extract_lite(&req, &mut issues), issues)
    }

    #[test]
    fn a_stack_keeps_its_first_frames_each_cut_at_a_character_boundary() {
        // a frame whose 1,024th byte falls inside a two-byte character, then thousands of lines more
        let long = format!("{}\u{e9}tail", "a".repeat(MAX_TEXT - 1));
        let lines = format!("{long}\n{}", "src/x.rs:1:1\n".repeat(5_000));
        let as_string = serde_json::json!({"key": "dei.stack", "value": {"stringValue": lines}});
        let frames: Vec<serde_json::Value> = std::iter::once(long.clone())
            .chain(std::iter::repeat_n("src/x.rs:1:1".to_string(), 5_000))
            .map(|f| serde_json::json!({"stringValue": f}))
            .collect();
        let as_array = serde_json::json!({"key": "dei.stack", "value": {"arrayValue": {"values": frames}}});
        for attribute in [as_string, as_array] {
            let (spans, issues) = one(&attribute.to_string(), "");
            assert_eq!(issues, vec![]);
            let stack = spans[0].dei.stack.as_ref().expect("the stack is read");
            assert_eq!(stack.len(), MAX_FRAMES);
            assert_eq!(
                stack[0],
                "a".repeat(MAX_TEXT - 1),
                "cut before the character that crosses the limit"
            );
            assert_eq!(stack[1], "src/x.rs:1:1");
        }
    }

    /// A DEI gRPC client span that names its server's address and its `rpc.service` is a call to that
    /// `rpc.service` (which the graph merges into the service seen serving it); a span without a DEI index, or a
    /// database call, is named by its address first, as before; `peer.service` wins over both.
    #[test]
    fn a_dei_span_names_its_peer_by_rpc_service_before_its_address() {
        let address = r#"{"key":"server.address","value":{"stringValue":"127.0.0.1"}}"#;
        let rpc = r#"{"key":"rpc.service","value":{"stringValue":"cinema.Bookings"}}"#;
        let peer = r#"{"key":"peer.service","value":{"stringValue":"bookings"}}"#;
        let dei = r#"{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}}"#;
        let db = r#"{"key":"db.system","value":{"stringValue":"dynamodb"}}"#;
        for (attrs, expected) in [
            (
                format!("{dei},{address},{rpc}"),
                ("cinema.Bookings", PeerSource::RpcService),
            ),
            (
                format!("{rpc},{address},{dei}"),
                ("cinema.Bookings", PeerSource::RpcService),
            ),
            (format!("{dei},{address}"), ("127.0.0.1", PeerSource::ServerAddress)),
            (
                format!("{dei},{address},{rpc},{peer}"),
                ("bookings", PeerSource::PeerService),
            ),
            (format!("{address},{rpc}"), ("127.0.0.1", PeerSource::ServerAddress)),
            (
                format!("{dei},{address},{rpc},{db}"),
                ("127.0.0.1", PeerSource::ServerAddress),
            ),
        ] {
            let (spans, issues) = one(&attrs, "");
            assert_eq!(issues, vec![]);
            assert_eq!(spans[0].peer, Some((expected.0.into(), expected.1)), "{attrs}");
        }
    }

    #[test]
    fn reads_every_dei_attribute() {
        let digest = "ab".repeat(32);
        let (spans, issues) = one(
            &format!(
                r#"{{"key":"dei.index","value":{{"stringValue":"1.AQEBAQEBAQE2"}}}},
                {{"key":"dei.signature","value":{{"stringValue":"a.B/C"}}}},
                {{"key":"dei.payload.digest","value":{{"stringValue":"{digest}"}}}},
                {{"key":"dei.stack.digest","value":{{"stringValue":"{digest}"}}}},
                {{"key":"dei.stack","value":{{"stringValue":"src/a.rs:1:2\nsrc/b.rs:3:4"}}}},
                {{"key":"dei.count","value":{{"intValue":"2"}}}},
                {{"key":"dei.depth","value":{{"intValue":1}}}},
                {{"key":"dei.instantiation","value":{{"stringValue":"dei"}}}},
                {{"key":"dei.ambiguous","value":{{"boolValue":true}}}},
                {{"key":"dei.fault","value":{{"stringValue":"h503"}}}},
                {{"key":"peer.service","value":{{"stringValue":"billing"}}}}"#
            ),
            "",
        );
        assert_eq!(issues, vec![]);
        let s = &spans[0];
        assert_eq!(s.kind, Kind::Client);
        assert!(s.error);
        assert_eq!(&*s.service, "svc");
        assert_eq!(s.parent_span_id, Some([8, 7, 6, 5, 4, 3, 2, 1]));
        assert_eq!(s.peer, Some(("billing".into(), PeerSource::PeerService)));
        let d = &s.dei;
        assert_eq!(d.index.as_ref().unwrap().encode(), "1.AQEBAQEBAQE2");
        assert_eq!(d.signature.as_deref(), Some("a.B/C"));
        assert_eq!(d.payload_digest.unwrap().to_hex(), digest);
        assert_eq!(
            d.stack.as_ref().unwrap(),
            &vec!["src/a.rs:1:2".to_string(), "src/b.rs:3:4".to_string()]
        );
        assert_eq!((d.count, d.depth), (Some(2), Some(1)));
        assert!(d.ambiguous && !d.preliminary);
        assert_eq!(d.fault.as_deref(), Some("h503"));
    }

    #[test]
    fn wrong_types_are_reported_per_attribute() {
        let (spans, issues) = one(
            r#"{"key":"dei.index","value":{"intValue":"5"}},
               {"key":"dei.count","value":{"intValue":"0"}},
               {"key":"dei.depth","value":{"intValue":"-1"}},
               {"key":"dei.preliminary","value":{"stringValue":"yes"}},
               {"key":"dei.stack.digest","value":{"stringValue":"ABCD"}},
               {"key":"dei.signature","value":{"stringValue":"ok"}}"#,
            r#"{"name":"dei.stream.message","attributes":[{"key":"dei.preliminary_index","value":{"stringValue":"1.AQEBAQEBAQE1"}},
                {"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}}]}"#,
        );
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            vec![
                "dei.index",
                "dei.count",
                "dei.depth",
                "dei.preliminary",
                "dei.stack.digest",
                "dei.stream.message"
            ]
        );
        assert!(issues[0].problem.contains("expected a string, got int"));
        assert!(issues[5].problem.contains("preliminary element"));
        // the span's DEI data is skipped as a whole, even its well-formed attributes, and marked skipped (its
        // trace counts it)
        assert_eq!(spans.len(), 1);
        let skipped = DeiAttributes {
            skipped: true,
            ..DeiAttributes::default()
        };
        assert_eq!(spans[0].dei, skipped);
    }

    #[test]
    fn stream_message_events_are_capped_per_span_and_the_rest_counted() {
        let event = r#"{"name":"dei.stream.message","attributes":[
            {"key":"dei.preliminary_index","value":{"stringValue":"1.AQEBAQEBAQE1~"}},
            {"key":"dei.index","value":{"stringValue":"1.AgICAgICAgI1"}},
            {"key":"dei.message","value":{"intValue":"1"}}]}"#;
        let events = vec![event; MAX_STREAM_MESSAGES + 7].join(",");
        let (spans, issues) = one(
            r#"{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1~"}}"#,
            &events,
        );
        assert_eq!(issues, vec![]);
        assert_eq!(spans[0].dei.stream_messages.len(), MAX_STREAM_MESSAGES);
        assert_eq!(spans[0].dei.stream_messages_dropped, 7);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_attribute_values_never_panic(key in "dei\\.[a-z._]{0,20}", s in ".{0,80}", i in proptest::num::i64::ANY, b: bool) {
            for v in [format!("{{\"stringValue\":{}}}", serde_json::to_string(&s).unwrap()), format!("{{\"intValue\":\"{i}\"}}"), format!("{{\"boolValue\":{b}}}")] {
                let (spans, _) = one(&format!(r#"{{"key":{},"value":{v}}}"#, serde_json::to_string(&key).unwrap()), "");
                proptest::prop_assert_eq!(spans.len(), 1);
            }
        }

        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = crate::otlp::decode_protobuf(&body);
            let arena = bumpalo::Bump::new();
            let _ = crate::otlp::decode_json_lite(&body, &arena);
            let _ = crate::otlp::gunzip_limited(&body, 1024);
            if let Ok(req) = crate::otlp::decode_lite(&body)
                && crate::otlp::validate_lite_ids(&req).is_ok()
            {
                let mut issues = Vec::new();
                let spans = extract_lite(&req, &mut issues);
                let mut a = crate::state::CollectorState::new(Default::default(), Default::default());
                a.ingest(spans, std::time::Instant::now());
            }
        }
    }

    #[test]
    fn a_recorded_payload_is_kept_as_a_bounded_preview() {
        let long = "x".repeat(70);
        for (payload, preview) in [
            ("{\"user\":\"ann\"}", "{\"user\":\"ann\"}".to_string()),
            (long.as_str(), format!("{}…", "x".repeat(64))),
        ] {
            let mut dei = DeiAttributes::default();
            let kv = KeyValue {
                key: b"dei.payload",
                value: Some(AnyValue {
                    value: Some(Value::StringValue(payload.as_bytes())),
                }),
            };
            apply_attribute(&mut dei, &kv).unwrap();
            assert_eq!(dei.payload_preview.as_deref(), Some(preview.as_str()));
        }
    }
}
