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
