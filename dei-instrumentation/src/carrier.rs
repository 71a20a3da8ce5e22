//! HTTP headers as OpenTelemetry carriers: the [`Injector`] and [`Extractor`] over an [`http::HeaderMap`] that
//! every integration hands to the global propagator.
//!
//! The names the crate's composite propagator reads and writes (`traceparent`, `tracestate`, `baggage`, `dei`,
//! `dei-faults`) are made once, so that neither side parses or allocates a header name per call. An empty
//! `tracestate` is not sent (see [`HeaderInjector`]).

use http::header::{HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};

/// `tracestate`, made at compile time.
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The header names the crate's composite propagator uses, made at compile time. `None` for any other key.
fn known_name(key: &str) -> Option<&'static HeaderName> {
    static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
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

    /// Every visible-ASCII value of the header, in order; `None` when it has none (no allocation then).
    fn get_all(&self, key: &str) -> Option<Vec<&str>> {
        let values = match known_name(key) {
            Some(name) => self.0.get_all(name),
            None => self.0.get_all(key),
        };
        let mut readable = values.iter().filter_map(|v| v.to_str().ok()).peekable();
        readable.peek()?;
        Some(readable.collect())
    }
}

/// An [`Extractor`] for a server at a trust boundary ([`crate::config::Incoming::Restart`]): the request's
/// headers without the `dei` and `dei-faults` headers and without the `dei` and `dei-faults` baggage entries.
/// The trace context and the other baggage entries read as they are.
pub(crate) struct EdgeExtractor<'a> {
    headers: HeaderExtractor<'a>,
    /// The readable `baggage` values, with our entries removed where they had any.
    baggage: Vec<std::borrow::Cow<'a, str>>,
    /// How many `dei` and `dei-faults` values (headers, of any form, and baggage entries) were dropped.
    pub(crate) dropped: usize,
}

impl<'a> EdgeExtractor<'a> {
    pub(crate) fn new(map: &'a http::HeaderMap) -> Self {
        let headers = HeaderExtractor(map);
        let mut dropped = headers.all(dei_propagator::INDEX_KEY).iter().count()
            + headers.all(dei_propagator::FAULT_PLAN_KEY).iter().count();
        let baggage = (map.get_all("baggage").iter())
            .filter_map(|v| v.to_str().ok())
            .map(|v| match dei_propagator::baggage_without_dei(v) {
                Some(rest) => {
                    dropped += 1;
                    std::borrow::Cow::Owned(rest)
                }
                None => std::borrow::Cow::Borrowed(v),
            })
            .collect();
        EdgeExtractor {
            headers,
            baggage,
            dropped,
        }
    }

    fn hidden(key: &str) -> bool {
        key.eq_ignore_ascii_case(dei_propagator::INDEX_KEY) || key.eq_ignore_ascii_case(dei_propagator::FAULT_PLAN_KEY)
    }
}

impl Extractor for EdgeExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if Self::hidden(key) {
            None
        } else if key.eq_ignore_ascii_case("baggage") {
            self.baggage.first().map(|v| &**v)
        } else {
            self.headers.get(key)
        }
    }

    fn keys(&self) -> Vec<&str> {
        let mut keys = self.headers.keys();
        keys.retain(|k| !Self::hidden(k));
        keys
    }

    fn get_all(&self, key: &str) -> Option<Vec<&str>> {
        if Self::hidden(key) {
            None
        } else if key.eq_ignore_ascii_case("baggage") {
            (!self.baggage.is_empty()).then(|| self.baggage.iter().map(|v| &**v).collect())
        } else {
            self.headers.get_all(key)
        }
    }
}

/// An [`Injector`] over an HTTP header map; values that are not valid header values are skipped, and an empty
/// `tracestate` is left out (W3C Trace Context treats it as absent).
pub(crate) struct HeaderInjector<'a>(pub(crate) &'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing that its absence does not (W3C Trace Context), and OpenTelemetry's
        // Go and Java propagators leave it out. Sending it anyway costs a header on every call, and an entry in
        // the peer's HPACK table that pushes out entries worth keeping. One already in the map is removed:
        // the value to send is empty.
        if value.is_empty() && key == "tracestate" {
            self.0.remove(&TRACESTATE);
            return;
        }
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
    use super::{EdgeExtractor, HeaderExtractor, HeaderInjector};
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
                ) && !(key == "tracestate" && value.is_empty())
                {
                    expected.insert(k, v);
                }
                assert_eq!(headers, expected, "{key:?} = {value:?}");
            }
        }
    }

    #[test]
    fn an_empty_tracestate_is_left_out_and_replaces_an_earlier_one() {
        let mut headers = http::HeaderMap::new();
        HeaderInjector(&mut headers).set("tracestate", String::new());
        assert!(headers.is_empty(), "{headers:?}");
        HeaderInjector(&mut headers).set("tracestate", "a=b".to_string());
        assert_eq!(headers.get("tracestate").map(|v| v.as_bytes()), Some(&b"a=b"[..]));
        HeaderInjector(&mut headers).set("tracestate", String::new());
        assert!(headers.is_empty(), "the earlier value is not sent: {headers:?}");
        // Other keys keep an empty value as they always did.
        HeaderInjector(&mut headers).set("x-other", String::new());
        assert_eq!(headers.get("x-other").map(|v| v.as_bytes()), Some(&b""[..]));
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

    #[test]
    fn get_all_reads_every_visible_ascii_value_and_the_edge_hides_ours() {
        let mut headers = http::HeaderMap::new();
        headers.append("dei", "1.AQEBAQEBAQE1".parse().unwrap());
        headers.append("dei", http::HeaderValue::from_bytes(b"\xff").unwrap());
        headers.append("dei", "1.AgICAgICAgI1".parse().unwrap());
        headers.append("dei-faults", "1*1:c".parse().unwrap());
        headers.append("baggage", "a=1,dei=1.AQEBAQEBAQE1".parse().unwrap());
        headers.append("baggage", "b=2".parse().unwrap());
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        let all = HeaderExtractor(&headers);
        assert_eq!(all.get_all("dei"), Some(vec!["1.AQEBAQEBAQE1", "1.AgICAgICAgI1"]));
        assert_eq!(all.get_all("absent"), None);
        let edge = EdgeExtractor::new(&headers);
        assert_eq!(
            edge.dropped, 5,
            "three dei headers, one dei-faults header, one baggage entry"
        );
        assert_eq!(
            (edge.get("dei"), edge.get_all("dei"), edge.get("dei-faults")),
            (None, None, None)
        );
        assert_eq!(edge.get_all("baggage"), Some(vec!["a=1", "b=2"]));
        assert_eq!(edge.get("baggage"), Some("a=1"));
        assert_eq!(edge.get("traceparent"), all.get("traceparent"));
        let mut keys = edge.keys();
        keys.sort_unstable();
        assert_eq!(keys, ["baggage", "traceparent"]);
    }
}
