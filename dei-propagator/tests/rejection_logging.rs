//! A flood of bad input is counted in full but logged rarely. (Its own test binary: the log limiter is
//! process-wide.)

use dei_propagator::DeiPropagator;
use dei_propagator::rejection::{self, Source};
use opentelemetry::propagation::TextMapPropagator;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

struct CountWarnings(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _cx: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN && event.metadata().target().starts_with("dei_propagator")
        {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_flood_of_bad_headers_is_counted_in_full_and_logged_once() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(CountWarnings(warnings.clone())));
    let headers: HashMap<String, String> = [("dei".to_string(), "not an index".to_string())].into();
    let before = rejection::rejected_total(Source::Header);
    for _ in 0..1000 {
        let _ = DeiPropagator::new().extract(&headers);
    }
    assert_eq!(rejection::rejected_total(Source::Header) - before, 1000);
    assert_eq!(
        warnings.load(Ordering::Relaxed),
        1,
        "one line for the flood, not one per request"
    );
}

/// The messages of the warnings logged for one event.
struct EventMessages(&'static str, Arc<std::sync::Mutex<Vec<String>>>);

impl<S: Subscriber> Layer<S> for EventMessages {
    fn on_event(&self, event: &tracing::Event<'_>, _cx: Context<'_, S>) {
        struct Fields(Option<String>, Option<String>);
        impl tracing::field::Visit for Fields {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "event" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.1 = Some(format!("{value:?}"));
                }
            }
        }
        let mut fields = Fields(None, None);
        event.record(&mut fields);
        if let Fields(Some(name), Some(message)) = fields
            && name == self.0
        {
            self.1.lock().unwrap_or_else(|p| p.into_inner()).push(message);
        }
    }
}

/// A plan the propagator does not send stays in the context, where a process's layers that apply plans still
/// match its own calls against it: the warning says that those entries, and those alone, are carried out, not
/// that none of the plan is.
#[test]
fn a_plan_not_sent_is_logged_as_carried_out_in_process_alone() {
    use dei_propagator::rejection::Event;
    use dei_propagator::{DeiContextExt, Element, ElementDigest, Fault, FaultPlan, Index};
    let messages = Arc::new(std::sync::Mutex::new(Vec::new()));
    let _default = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(EventMessages(Event::FaultPlanNotSent.name(), messages.clone())),
    );
    let entry = |count: u32| {
        (
            Index::root().child(Element::new(ElementDigest([1; 8]), count)),
            Fault::UNAVAILABLE,
        )
    };
    let plan = FaultPlan::new((1..=65).map(entry).collect());
    let mut headers: HashMap<String, String> = HashMap::new();
    DeiPropagator::new().inject_context(&opentelemetry::Context::new().with_fault_plan(plan), &mut headers);
    assert_eq!(headers.get("dei-faults"), None);
    let messages = messages.lock().unwrap_or_else(|p| p.into_inner());
    let [message] = &messages[..] else {
        panic!("one warning: {messages:?}")
    };
    assert!(message.contains("no callee carries out any of its faults"), "{message}");
    assert!(
        message.contains("the entries naming this process's own calls are still carried out"),
        "{message}"
    );
}
