//! The collector source's reading of trace views: occurrences, streams and their messages, outcomes, and the
//! API's own JSON.

use super::*;
use dei_collector::views::{MessageOf, SpanStatus, StreamMessage};
use dei_propagator::{Element, ElementDigest, PayloadDigest, StackDigest};

fn idx(elements: &[(u8, u32)]) -> Index {
    Index::from_elements(
        elements
            .iter()
            .map(|&(d, c)| Element::new(ElementDigest([d; 8]), c))
            .collect(),
    )
}

fn status(grpc: Option<i32>) -> Option<Arc<SpanStatus>> {
    Some(Arc::new(SpanStatus {
        code: if grpc.is_some_and(|c| c != 0) {
            StatusCode::Error
        } else {
            StatusCode::Unset
        },
        message: None,
        grpc_status_code: grpc,
        http_status_code: None,
    }))
}

fn occurrence(index: &Index, rpc: u8, time: (u64, u64)) -> Occurrence {
    Occurrence {
        index: index.clone(),
        rpc: [rpc; 8],
        caller_span: None,
        signature: Some(Arc::from(format!("sig{}", index.depth()))),
        payload: Some(PayloadDigest([0xab; 32])),
        payload_preview: None,
        stack_digest: Some(Arc::new(StackDigest([0xcd; 32]))),
        preliminary: false,
        client_status: status(Some(0)),
        server_status: None,
        client_service: None,
        server_service: None,
        client_time: Some(time),
        server_time: Some(time),
        error: false,
        fault: None,
        ambiguous: false,
        messages: Box::default(),
        stream: None,
    }
}

fn node(occurrence: Occurrence, children: Vec<TraceNode>) -> TraceNode {
    TraceNode { occurrence, children }
}

#[test]
fn occurrences_become_rpcs_with_parents_faults_and_streams() {
    let a = idx(&[(1, 1)]);
    let b = idx(&[(1, 1), (2, 1)]);
    let pre = a.child(Element::new(ElementDigest([3; 8]), 1).preliminary());
    let hello = idx(&[(1, 1), (4, 1)]);
    let world = idx(&[(1, 1), (7, 1)]);
    let under_hello = idx(&[(1, 1), (4, 1), (5, 1)]);
    let mut fb = occurrence(&b, 0xbb, (20, 30));
    fb.fault = Some("g14".into());
    fb.error = true;
    let mut unknown = occurrence(&idx(&[(1, 1), (6, 1)]), 0xee, (50, 60));
    unknown.client_time = None;
    unknown.client_status = None;
    // a fault the contract does not read: left out and counted
    let mut odd = occurrence(&idx(&[(1, 1), (8, 1)]), 0xdd, (70, 80));
    odd.fault = Some("not-a-fault".into());
    // the stream: World was sent first and failed (the stream ended there, with UNAVAILABLE); Hello was sent
    // before it and served, and B's call for it was rewritten under Hello's final index
    let mut stream = occurrence(&pre, 0x55, (31, 40));
    stream.preliminary = true;
    stream.error = true;
    stream.client_status = status(Some(14));
    stream.messages = vec![
        StreamMessage {
            k: Some(1),
            preliminary_index: pre.stream_message(1),
            index: hello.clone(),
            fault: None,
            time_unix_nano: 32,
        },
        StreamMessage {
            k: Some(2),
            preliminary_index: pre.stream_message(2),
            index: world.clone(),
            fault: Some("c".into()),
            time_unix_nano: 34,
        },
    ]
    .into();
    let mut hello_node = occurrence(&hello, 0x55, (31, 40));
    hello_node.stream = Some(Box::new(MessageOf {
        index: pre.clone(),
        k: Some(1),
        time_unix_nano: 32,
    }));
    let mut world_node = occurrence(&world, 0x55, (31, 40));
    world_node.fault = Some("c".into());
    world_node.stream = Some(Box::new(MessageOf {
        index: pre.clone(),
        k: Some(2),
        time_unix_nano: 34,
    }));
    let view = TraceView {
        trace_id: "01".repeat(16),
        start_unix_nano: 10,
        rpcs: 8,
        pending_preliminary: 0,
        occurrences_dropped: 0,
        spans_dei_skipped: 0,
        tree: vec![node(
            occurrence(&a, 0xaa, (10, 100)),
            vec![
                node(fb, vec![]),
                node(stream, vec![]),
                node(hello_node, vec![node(occurrence(&under_hello, 0x77, (33, 35)), vec![])]),
                node(world_node, vec![]),
                node(unknown, vec![]),
                node(odd, vec![]),
            ],
        )],
    };
    let obs = observation_from_trace(&view);
    assert_eq!(obs.rpcs.len(), 8, "{:#?}", obs.rpcs);
    assert_eq!(obs.malformed, 1, "the occurrence whose fault does not parse");
    let pos = |i: &Index| obs.rpcs.iter().position(|r| &r.index == i).expect("rpc");
    let (pa, pb, ps, ph, pw, pu) = (pos(&a), pos(&b), pos(&pre), pos(&hello), pos(&world), pos(&under_hello));
    assert_eq!(obs.rpcs[pa].parent, None);
    assert!(
        obs.rpcs[pa].invocation.is_some(),
        "payload and stack digests make the invocation"
    );
    assert_eq!(obs.rpcs[pb].parent, Some(pa));
    assert_eq!(obs.rpcs[pb].fault, Some(Fault::UNAVAILABLE));
    assert_eq!(obs.rpcs[pb].outcome, Outcome::Err { code: "g14".into() });
    // the message's fault is the message's; the stream ended with the status it caused
    assert_eq!(obs.rpcs[pw].fault, Some(Fault::Connection));
    assert_eq!(obs.rpcs[ps].fault, None);
    assert_eq!(obs.rpcs[ps].outcome, Outcome::Err { code: "g14".into() });
    assert_eq!(obs.effective().len(), 2);
    assert!(obs.rpcs[ps].targetable() && obs.rpcs[ps].index.is_preliminary());
    for p in [ph, pw] {
        assert_eq!(obs.rpcs[p].parent, Some(ps), "a message hangs under its stream");
        assert!(obs.rpcs[p].targetable(), "messages are targeted by default");
        assert_eq!(obs.rpcs[p].start, obs.rpcs[p].end, "sent at its event's time");
    }
    assert_eq!(obs.rpcs[ph].outcome, Outcome::ok());
    assert_eq!(obs.rpcs[pu].parent, Some(ph));
    assert!(
        obs.rpcs[pu].rewritten && !obs.rpcs[pu].targetable(),
        "served under a message: ran under the preliminary index"
    );
    assert_eq!(obs.streams.len(), 2);
    let e = obs
        .rpcs
        .iter()
        .find(|r| r.index.depth() == 2 && r.start == 50)
        .expect("e");
    assert_eq!(e.outcome, Outcome::Unknown);
    let odd = &obs.rpcs[pos(&idx(&[(1, 1), (8, 1)]))];
    assert_eq!((odd.fault, &odd.outcome), (None, &Outcome::ok()));
    assert!(!Fingerprint::of(&view).complete, "a client span is missing");
    let observed = observation_from_trace_with(&view, MessageTargeting::Observed);
    assert!(observed.rpcs.iter().filter(|r| !r.targetable()).count() == 3);
}

#[test]
fn the_collectors_json_decodes() {
    let a = idx(&[(1, 1)]);
    let json = format!(
        r#"{{"trace_id":"0102030405060708090a0b0c0d0e0f10","start_unix_nano":5,"rpcs":1,"pending_preliminary":0,
        "tree":[{{"index":"{}","rpc":"0102030405060708","caller_span":null,"signature":"GET /x","payload":null,
        "payload_preview":"{{\"user\":\"ann\"}}","stack_digest":null,"preliminary":false,"client_status":{{"code":"error","message":"Service Unavailable",
        "grpc_status_code":null,"http_status_code":503}},"server_status":null,
        "client_service":"t","server_service":"s","client_time":[5,9],"server_time":null,"error":true,
        "fault":null,"ambiguous":false,"messages":[],"stream":null,"children":[]}}]}}"#,
        a.encode()
    );
    let view: TraceView = serde_json::from_str(&json).expect("decodes");
    let obs = observation_from_trace(&view);
    assert_eq!(obs.rpcs.len(), 1);
    assert_eq!(obs.rpcs[0].fault, None);
    assert_eq!(obs.rpcs[0].outcome, Outcome::Err { code: "h503".into() });
    assert_eq!((obs.rpcs[0].start, obs.rpcs[0].end), (5, 9));
    assert_eq!(obs.rpcs[0].payload_preview.as_deref(), Some(r#"{"user":"ann"}"#));
    assert!(Fingerprint::of(&view).complete);
    // the view's own types: a field the API does not send, or a malformed index, is an error, not a default
    assert!(serde_json::from_str::<TraceView>(r#"{"tree":[{"rpc":"x"}]}"#).is_err());
    let without_messages = json.replace(r#""messages":[],"#, "");
    assert!(serde_json::from_str::<TraceView>(&without_messages).is_err());
    let bad_index = json.replace(&a.encode(), "not an index");
    assert!(serde_json::from_str::<TraceView>(&bad_index).is_err());
}

/// What the collector did not record of a trace is in the observation, not only in the log: the spans it
/// dropped past its cap of RPCs per trace (`spans_dropped`) and those whose DEI data it skipped (counted as
/// malformed), besides the RPCs it did record.
#[test]
fn spans_the_collector_dropped_or_skipped_are_counted_on_the_observation() {
    let a = idx(&[(1, 1)]);
    let view = TraceView {
        trace_id: "0102030405060708090a0b0c0d0e0f10".into(),
        start_unix_nano: 1,
        rpcs: 1,
        tree: vec![node(occurrence(&a, 0xaa, (1, 2)), Vec::new())],
        pending_preliminary: 0,
        occurrences_dropped: 7,
        spans_dei_skipped: 2,
    };
    let obs = observation_from_trace(&view);
    assert_eq!(obs.rpcs.len(), 1);
    assert_eq!((obs.spans_dropped, obs.malformed), (7, 2));
    // and it round-trips through the report's JSON
    let json = serde_json::to_value(&obs).expect("json");
    assert_eq!(
        (json["spans_dropped"].clone(), json["malformed"].clone()),
        (7.into(), 2.into())
    );
    // a complete trace has none, and the JSON leaves the field out
    let whole = TraceView {
        occurrences_dropped: 0,
        spans_dei_skipped: 0,
        ..view
    };
    let obs = observation_from_trace(&whole);
    assert_eq!((obs.spans_dropped, obs.malformed), (0, 0));
    assert!(serde_json::to_value(&obs).expect("json").get("spans_dropped").is_none());
}
