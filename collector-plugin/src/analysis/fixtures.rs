//! Span fixtures for the unit tests of the analyzer and the analyses.

use crate::span_record::{DeiAttributes, Kind, SpanRecord, StreamMapping};
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use std::sync::Arc;

/// Builds the spans of traces RPC by RPC, with indexes computed the way instrumentation computes them.
pub struct TraceBuilder {
    pub trace_id: [u8; 16],
    pub spans: Vec<SpanRecord>,
    next: u8,
    pub t0: u64,
}

/// One built RPC: its index and the server span id (the parent of nested calls).
#[derive(Clone)]
pub struct Rpc {
    pub index: Index,
    pub server_span: [u8; 8],
}

pub fn invocation(sig: &str, payload: &str) -> InvocationSignature {
    InvocationSignature::new(
        Signature::from_name(sig),
        PayloadDigest::of(payload.as_bytes()),
        StackDigest([3; 32]),
    )
}

impl TraceBuilder {
    pub fn new(trace: u8, t0: u64) -> Self {
        TraceBuilder {
            trace_id: [trace; 16],
            spans: Vec::new(),
            next: 1,
            t0,
        }
    }

    fn id(&mut self) -> [u8; 8] {
        self.next += 1;
        [self.next, 0, 0, 0, 0, 0, 0, 9]
    }

    /// The root server span of `service`; returns its span id.
    pub fn root(&mut self, service: &str) -> [u8; 8] {
        let id = self.id();
        self.spans.push(span(
            self.trace_id,
            id,
            None,
            service,
            Kind::Server,
            self.t0,
            self.t0 + 100_000_000,
            DeiAttributes::default(),
        ));
        id
    }

    /// An RPC `from → to` issued under `parent` (index and caller span) with count `count`, at
    /// `start_ms..end_ms` after t0.
    #[allow(clippy::too_many_arguments)]
    pub fn rpc(
        &mut self,
        parent: (&Index, [u8; 8]),
        from: &str,
        to: &str,
        sig: &str,
        payload: &str,
        count: u32,
        start_ms: u64,
        end_ms: u64,
        fault: Option<&str>,
    ) -> Rpc {
        let el = Element::new(invocation(sig, payload).element_digest(&Instantiation::dei()), count);
        let index = parent.0.child(el);
        let dei = DeiAttributes {
            index: Some(index.clone()),
            signature: Some(Arc::from(sig)),
            payload_digest: Some(PayloadDigest::of(payload.as_bytes())),
            stack_digest: Some(StackDigest([3; 32])),
            count: Some(count),
            depth: Some(index.depth() as u32),
            instantiation: Some(Arc::from("dei")),
            fault: fault.map(str::to_string),
            ..Default::default()
        };
        let c = self.id();
        let (s0, s1) = (self.t0 + start_ms * 1_000_000, self.t0 + end_ms * 1_000_000);
        let mut client = span(
            self.trace_id,
            c,
            Some(parent.1),
            from,
            Kind::Client,
            s0,
            s1,
            dei.clone(),
        );
        client.error = fault.is_some();
        self.spans.push(client);
        let sv = self.id();
        if fault.is_none() {
            self.spans.push(span(
                self.trace_id,
                sv,
                Some(c),
                to,
                Kind::Server,
                s0 + 100_000,
                s1 - 100_000,
                dei,
            ));
        }
        Rpc { index, server_span: sv }
    }

    /// A stream opened under `parent` with preliminary element count `x`, carrying `messages` as
    /// (payload, final count) with their mapping events. Returns (preliminary index, server span id,
    /// final indexes).
    pub fn stream(
        &mut self,
        parent: (&Index, [u8; 8]),
        from: &str,
        to: &str,
        sig: &str,
        messages: &[&str],
    ) -> (Index, [u8; 8], Vec<Index>) {
        let prelim_el = Element::new(
            InvocationSignature::new(Signature::from_name(sig), PayloadDigest::empty(), StackDigest([4; 32]))
                .element_digest(&Instantiation::dei()),
            1,
        )
        .preliminary();
        let prelim = parent.0.child(prelim_el);
        let mut finals = Vec::new();
        let mut mappings = Vec::new();
        for (k, m) in messages.iter().enumerate() {
            let f = parent.0.child(Element::new(
                invocation(sig, m).element_digest(&Instantiation::dei()),
                1,
            ));
            mappings.push(StreamMapping {
                preliminary: prelim.stream_message(k as u32 + 1),
                final_index: f.clone(),
                k: Some(k as u32 + 1),
                fault: None,
                time_ns: self.t0,
            });
            finals.push(f);
        }
        let dei = DeiAttributes {
            index: Some(prelim.clone()),
            signature: Some(Arc::from(sig)),
            preliminary: true,
            ..Default::default()
        };
        let c = self.id();
        let mut client = span(
            self.trace_id,
            c,
            Some(parent.1),
            from,
            Kind::Client,
            self.t0,
            self.t0 + 50_000_000,
            dei.clone(),
        );
        client.dei.stream_messages = mappings;
        let sv = self.id();
        let server = span(
            self.trace_id,
            sv,
            Some(c),
            to,
            Kind::Server,
            self.t0 + 1,
            self.t0 + 49_000_000,
            dei,
        );
        // the server span arrives first; the client span (with the mappings) last
        self.spans.push(server);
        self.spans.push(client);
        (prelim, sv, finals)
    }
}

#[allow(clippy::too_many_arguments)]
pub fn span(
    trace_id: [u8; 16],
    id: [u8; 8],
    parent: Option<[u8; 8]>,
    service: &str,
    kind: Kind,
    start: u64,
    end: u64,
    dei: DeiAttributes,
) -> SpanRecord {
    SpanRecord {
        trace_id,
        span_id: id,
        parent_span_id: parent,
        service: Arc::from(service),
        name: "span".into(),
        kind,
        start_ns: start,
        end_ns: end,
        error: false,
        status: Default::default(),
        peer: None,
        database: false,
        dei,
    }
}
