//! The [`TextMapPropagator`] that carries indexes and fault plans between services.

use crate::context::DeiContextExt;
use crate::fault::{FAULT_PLAN_KEY, FaultPlan, PlanLimits};
use crate::rejection::{self, Source};
use crate::wire::{self, Limits};
use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{Extractor, Injector, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

/// The header, gRPC metadata key and baggage entry that carry an index.
pub const INDEX_KEY: &str = "dei";
const BAGGAGE_HEADER: &str = "baggage";

/// Which carriers the propagator writes. It always reads both, preferring the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carriers {
    /// Write the `dei` (and `dei-faults`) header.
    pub header: bool,
    /// Write the `dei` (and `dei-faults`) baggage entries.
    pub baggage: bool,
}

impl Default for Carriers {
    /// Both.
    fn default() -> Self {
        Carriers {
            header: true,
            baggage: true,
        }
    }
}

/// Injects the index of the RPC being sent as the `dei` header and baggage entry, and extracts it on the
/// receiving side; does the same for the fault plan (`dei-faults`).
///
/// Bad input is never an error to the request: a malformed, oversized or too-deep value is rejected, counted
/// and logged ([`crate::rejection`]) and treated as absent. When the header is rejected or missing the baggage
/// entry is tried.
///
/// The propagator writes the `baggage` header itself (the context's baggage plus its entries), so place it
/// *after* [`BaggagePropagator`] in a composite, or use [`composite_propagator`] which does.
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

    /// The limits applied to incoming indexes.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn decode_index(&self, value: &str, source: Source) -> Option<crate::Index> {
        match wire::decode(value, &self.limits) {
            Ok(index) => Some(index),
            Err(e) => {
                rejection::record(source, &e);
                None
            }
        }
    }

    fn decode_plan(&self, value: &str) -> Option<FaultPlan> {
        match FaultPlan::decode_with(value, &self.plan_limits) {
            Ok(plan) => Some(plan),
            Err(e) => {
                rejection::record(Source::FaultPlan, &e);
                None
            }
        }
    }
}

impl TextMapPropagator for DeiPropagator {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let index = cx.dei_index().map(|i| i.encode());
        let plan = cx.fault_plan().filter(|p| !p.is_empty()).map(|p| p.encode());
        if index.is_none() && plan.is_none() {
            return;
        }
        if self.carriers.header {
            if let Some(v) = &index {
                injector.set(INDEX_KEY, v.clone());
            }
            if let Some(v) = &plan {
                injector.set(FAULT_PLAN_KEY, v.clone());
            }
        }
        if self.carriers.baggage {
            let mut entries: Vec<KeyValue> = cx
                .baggage()
                .iter()
                .filter(|(k, _)| k.as_str() != INDEX_KEY && k.as_str() != FAULT_PLAN_KEY)
                .map(|(k, (v, _))| KeyValue::new(k.clone(), v.to_string()))
                .collect();
            if let Some(v) = index {
                entries.push(KeyValue::new(INDEX_KEY, v));
            }
            if let Some(v) = plan {
                entries.push(KeyValue::new(FAULT_PLAN_KEY, v));
            }
            let with_ours = cx.with_baggage(entries);
            BaggagePropagator::new().inject_context(&with_ours, injector);
        }
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        // Baggage extracted by an earlier BaggagePropagator is in `cx`; otherwise read the header here.
        let baggage_cx;
        let baggage = if cx.baggage().is_empty() && extractor.get(BAGGAGE_HEADER).is_some() {
            baggage_cx = BaggagePropagator::new().extract(extractor);
            baggage_cx.baggage()
        } else {
            cx.baggage()
        };
        let mut out = cx.clone();
        let from_header = extractor
            .get(INDEX_KEY)
            .and_then(|v| self.decode_index(v, Source::Header));
        let index = from_header.or_else(|| {
            baggage
                .get(INDEX_KEY)
                .and_then(|v| self.decode_index(v.as_str(), Source::Baggage))
        });
        if let Some(index) = index {
            out = out.with_dei_index(index);
        }
        let plan = match extractor.get(FAULT_PLAN_KEY) {
            Some(v) => self.decode_plan(v),
            None => baggage.get(FAULT_PLAN_KEY).and_then(|v| self.decode_plan(v.as_str())),
        };
        if let Some(plan) = plan {
            out = out.with_fault_plan(plan);
        }
        out
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(&self.fields)
    }
}

/// W3C trace context, W3C baggage and the DEI propagator, composed in the order that works.
pub fn composite_propagator() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
        Box::new(DeiPropagator::new()),
    ])
}

/// Installs [`composite_propagator`] as the global propagator (the default global propagator is a no-op).
pub fn install_global_propagator() {
    opentelemetry::global::set_text_map_propagator(composite_propagator());
}
