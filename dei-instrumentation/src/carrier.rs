//! HTTP headers as OpenTelemetry carriers: the [`Injector`] and [`Extractor`] over an [`http::HeaderMap`] that
//! every integration hands to the global propagator.
//!
//! The names the crate's composite propagator reads and writes (`traceparent`, `tracestate`, `baggage`, `dei`,
//! `dei-faults`) are made once, so that neither side parses or allocates a header name per call.

use http::header::{HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};

/// The header names the crate's composite propagator uses, made at compile time. `None` for any other key.
fn known_name(key: &str) -> Option<&'static HeaderName> {
    static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    static BAGGAGE: HeaderName = HeaderName::from_static("baggage");
    static INDEX: HeaderName = HeaderName::from_static(dei_propagator::INDEX_KEY);
    static FAULT_PLAN: HeaderName = HeaderName::from_static(dei_propagator::FAULT_PLAN_KEY);
    match key {
        "traceparent" => Some(&TRACEPARENT),
        "tracestate" => Some(&TRACESTATE),
        "baggage" => Some(&BAGGAGE),
        dei_propagator::INDEX_KEY => Some(&INDEX),
        dei_propagator::FAULT_PLAN_KEY => Some(&FAULT_PLAN),
        _ => None,
    }
}

/// An [`Extractor`] over HTTP headers; values that are not visible ASCII are treated as absent.
pub(crate) struct HeaderExtractor<'a>(pub(crate) &'a http::HeaderMap);

impl HeaderExtractor<'_> {
    /// Every value of header `name` (a known name: no parsing).
    pub(crate) fn all(&self, name: &'static str) -> http::header::GetAll<'_, HeaderValue> {
        match known_name(name) {
            Some(known) => self.0.get_all(known),
            None => self.0.get_all(name),
        }
    }
}

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = match known_name(key) {
            Some(name) => self.0.get(name),
            None => self.0.get(key),
        };
        value.and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// An [`Injector`] over an HTTP header map; values that are not valid header values are skipped.
pub(crate) struct HeaderInjector<'a>(pub(crate) &'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // `from_bytes` lowercases. The value's buffer becomes the header value without a copy.
        let name = known_name(key).map_or_else(|| HeaderName::from_bytes(key.as_bytes()), |name| Ok(name.clone()));
        let value = HeaderValue::from_maybe_shared(bytes::Bytes::from(value));
        if let (Ok(name), Ok(value)) = (name, value) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HeaderExtractor, HeaderInjector};
    use opentelemetry::propagation::{Extractor, Injector};

    #[test]
    fn the_injector_writes_what_from_bytes_and_from_str_would() {
        let keys = [
            "traceparent",
            "tracestate",
            "baggage",
            "dei",
            "dei-faults",
            "X-Other",
            "bad key",
        ];
        let values = [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "a=b",
            "bad\nvalue",
            "é",
            "",
        ];
        for key in keys {
            for value in values {
                let value = value.to_string();
                let mut headers = http::HeaderMap::new();
                HeaderInjector(&mut headers).set(key, value.clone());
                let mut expected = http::HeaderMap::new();
                if let (Ok(k), Ok(v)) = (
                    http::header::HeaderName::from_bytes(key.as_bytes()),
                    http::header::HeaderValue::from_str(&value),
                ) {
                    expected.insert(k, v);
                }
                assert_eq!(headers, expected, "{key:?} = {value:?}");
            }
        }
    }

    #[test]
    fn the_extractor_reads_what_a_lookup_by_string_would() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        headers.insert("dei", "1.AQEBAQEBAQE1".parse().unwrap());
        headers.insert("dei-faults", http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        headers.insert("x-other", "v".parse().unwrap());
        headers.append("baggage", "a=1".parse().unwrap());
        headers.append("baggage", "b=2".parse().unwrap());
        let extractor = HeaderExtractor(&headers);
        for key in [
            "traceparent",
            "tracestate",
            "baggage",
            "dei",
            "dei-faults",
            "x-other",
            "X-Other",
            "absent",
            "bad key",
        ] {
            let expected = headers.get(key).and_then(|v| v.to_str().ok());
            assert_eq!(extractor.get(key), expected, "{key}");
        }
        let mut keys = extractor.keys();
        keys.sort_unstable();
        assert_eq!(keys, ["baggage", "dei", "dei-faults", "traceparent", "x-other"]);
    }
}
