//! Malformed `dei`, `baggage` and `dei-faults` values from raw clients: the request is still served, nothing
//! panics, and each rejection is counted.

mod common;

use common::*;
use dei_propagator::rejection::{Source, rejected_total};
use dei_propagator::{Index, wire};
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::Endpoint;

/// Headers to send, the sources whose rejection counters must grow, and the index the request is served under.
type Case<V, E> = (Vec<(&'static str, V)>, Vec<Source>, E);

fn served(reply: &str) -> String {
    reply.rsplit_once('@').map(|(_, i)| i.to_string()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_headers_are_counted_and_the_request_is_served() {
    let sys = System::start().await;
    let valid = Index::decode("1.AQEBAQEBAQE1").expect("valid");

    // HTTP, with a plain reqwest client (no DEI middleware).
    let raw = reqwest::Client::new();
    let url = format!("http://{}/items/1", sys.leaf_http);
    let cases: Vec<Case<Vec<u8>, &str>> = vec![
        (vec![("dei", b"garbage!".to_vec())], vec![Source::Header], "1"),
        (vec![("dei", b"2.AQEBAQEBAQE1".to_vec())], vec![Source::Header], "1"),
        (vec![("dei", b"1.AQEBAQEBAQE0".to_vec())], vec![Source::Header], "1"),
        (
            vec![("dei", format!("1{}", ".AQEBAQEBAQE1".repeat(100)).into_bytes())],
            vec![Source::Header],
            "1",
        ),
        // A bad header falls back to the baggage entry, which is bad too.
        (
            vec![("dei", b"1.%%".to_vec()), ("baggage", b"dei=1.AQEBAQEBAQF1".to_vec())],
            vec![Source::Header, Source::Baggage],
            "1",
        ),
        // A bad header falls back to a good baggage entry.
        (
            vec![("dei", b"x".to_vec()), ("baggage", b"dei=1.AQEBAQEBAQE1".to_vec())],
            vec![Source::Header],
            "1.AQEBAQEBAQE1",
        ),
        // The entry's value is taken as written (`;;;==`): rejected and counted like any other.
        (vec![("baggage", b"dei=;;;==,,".to_vec())], vec![Source::Baggage], "1"),
        (
            vec![("dei-faults", b"1*1.AQEBAQEBAQE1:g99".to_vec())],
            vec![Source::FaultPlan],
            "1",
        ),
        (
            vec![("dei-faults", b"7".to_vec()), ("dei", b"1.AQEBAQEBAQE1".to_vec())],
            vec![Source::FaultPlan],
            "1.AQEBAQEBAQE1",
        ),
        (
            vec![("baggage", b"dei-faults=1*zz".to_vec())],
            vec![Source::FaultPlan],
            "1",
        ),
        // Not visible ASCII at all: counted, and treated as absent.
        (
            vec![("dei", vec![0xff, 0xfe, 0x80]), ("baggage", vec![0xc3, 0x28])],
            vec![Source::Header, Source::Baggage],
            "1",
        ),
        (
            vec![("dei-faults", vec![0x80]), ("dei", b"1.AQEBAQEBAQE1".to_vec())],
            vec![Source::FaultPlan],
            "1.AQEBAQEBAQE1",
        ),
    ];
    for (headers, sources, expected) in &cases {
        let before: Vec<u64> = sources.iter().map(|s| rejected_total(*s)).collect();
        let mut request = raw.get(&url);
        for (name, value) in headers {
            request = request.header(*name, http::HeaderValue::from_bytes(value).expect("header bytes"));
        }
        let response = request.send().await.expect("served");
        assert_eq!(response.status(), 200, "{headers:?}");
        let body = response.text().await.expect("body");
        assert_eq!(served(&body), *expected, "{headers:?}: {body}");
        for (s, b) in sources.iter().zip(before) {
            assert!(rejected_total(*s) > b, "{headers:?}: rejection from {s:?} counted");
        }
    }

    // gRPC, with a plain tonic client (no DEI layer).
    let channel = Endpoint::from_shared(format!("http://{}", sys.leaf))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = pb::leaf_client::LeafClient::new(channel);
    let grpc_cases: Vec<Case<&'static str, String>> = vec![
        (vec![("dei", "1.!!!")], vec![Source::Header], "1".into()),
        (
            vec![("dei", "1.AQEBAQEBAQE1"), ("dei-faults", "1*x:g14")],
            vec![Source::FaultPlan],
            valid.encode(),
        ),
        (
            vec![("baggage", "dei=1.AQEBAQEBAQE")],
            vec![Source::Baggage],
            "1".into(),
        ),
        (vec![("baggage", "dei=1.AQEBAQEBAQE1")], vec![], valid.encode()),
    ];
    for (headers, sources, expected) in &grpc_cases {
        let before: Vec<u64> = sources.iter().map(|s| rejected_total(*s)).collect();
        let mut request = tonic::Request::new(msg("raw"));
        for (name, value) in headers {
            let v: AsciiMetadataValue = MetadataValue::try_from(*value).expect("ascii");
            request.metadata_mut().insert(*name, v);
        }
        let reply = client.get(request).await.expect("served").into_inner().text;
        assert_eq!(served(&reply), *expected, "{headers:?}");
        for (s, b) in sources.iter().zip(before) {
            assert!(rejected_total(*s) > b, "{headers:?}: rejection from {s:?} counted");
        }
    }
    // Decoding limits apply before any other work.
    assert!(wire::decode(&"1".repeat(5000), &wire::Limits::default()).is_err());
}
