//! Streams (paper §4.2): preliminary indexes, final indexes per message and their mapping, implicit counting
//! at the callee.

mod common;

use common::*;
use dei_instrumentation::grpc::stream::channel;
use dei_propagator::{DeiContextExt, Fault, FaultPlan, Index, PayloadDigest};
use futures::StreamExt;
use opentelemetry_sdk::trace::SpanData;

/// The `dei.fault` attribute of each `dei.stream.message` event, by k.
fn event_faults(span: &SpanData) -> Vec<(u32, Option<String>)> {
    let mut v: Vec<(u32, Option<String>)> = span
        .events
        .iter()
        .filter(|e| e.name == "dei.stream.message")
        .map(|e| {
            let get = |k: &str| {
                e.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == k)
                    .map(|kv| kv.value.to_string())
            };
            (
                get("dei.message").and_then(|k| k.parse().ok()).unwrap_or(0),
                get("dei.fault"),
            )
        })
        .collect();
    v.sort();
    v
}

/// (k, final index, preliminary index) of each `dei.stream.message` event, in k order.
fn stream_events(span: &SpanData) -> Vec<(u32, Index, Index)> {
    let mut v: Vec<(u32, Index, Index)> = span
        .events
        .iter()
        .filter(|e| e.name == "dei.stream.message")
        .map(|e| {
            let get = |k: &str| {
                e.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == k)
                    .map(|kv| kv.value.to_string())
                    .unwrap_or_default()
            };
            (
                get("dei.message").parse().expect("k"),
                Index::decode(&get("dei.index")).expect("final index"),
                Index::decode(&get("dei.preliminary_index")).expect("preliminary index"),
            )
        })
        .collect();
    v.sort_by_key(|(k, _, _)| *k);
    v
}

fn client_span<'a>(spans: &'a [SpanData], signature: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| is_client(s) && attr(s, "dei.signature").as_deref() == Some(signature))
        .unwrap_or_else(|| panic!("client span of {signature}"))
}

/// The index each reply part was served under by C's `/echo` (the part after `@`), by message position.
fn echo_indexes(reply: &str) -> Vec<(u32, Index)> {
    reply
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(|part| {
            let (k, rest) = part.split_once(':').expect("k:echo");
            let (_, index) = rest.rsplit_once('@').expect("echo@index");
            (k.parse().expect("k"), Index::decode(index).expect("index"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_streaming_bidi_and_server_streaming_map_preliminary_to_final_indexes() {
    let sys = System::start().await;
    let leaf = sys.leaf_client().await;
    let config = sys.config.clone();
    let mut previous: Option<Vec<Vec<(u32, Index, Index)>>> = None;
    for _run in 0..3 {
        let (leaf, config) = (leaf.clone(), config.clone());
        let ((collected, chatted, watched), trace) = in_root(&sys.config.clone(), |cx| cx, async move {
            // Client streaming through the channel helper: each message gets its own send site.
            let (tx, request) = channel::<pb::Msg>(&config, 4);
            let mut client = leaf.clone();
            let call = dei_propagator::spawn(async move { client.collect(request).await });
            tx.send(msg("Hello")).await.expect("open stream");
            tx.send(msg("World")).await.expect("open stream");
            drop(tx);
            let collected = call.await.expect("task").expect("Collect").into_inner().text;
            // Bidi with a plain stream: messages get the stream's creation site. Messages 1 and 3 are equal.
            let mut client = leaf.clone();
            let out = futures::stream::iter(vec![msg("Hello"), msg("World"), msg("Hello")]);
            let replies: Vec<String> = client
                .chat(out)
                .await
                .expect("Chat")
                .into_inner()
                .map(|m| m.expect("reply").text)
                .collect()
                .await;
            // Server streaming: one request message, a stream of replies.
            let mut client = leaf.clone();
            let watched: Vec<String> = client
                .watch(msg("w"))
                .await
                .expect("Watch")
                .into_inner()
                .map(|m| m.expect("reply").text)
                .collect()
                .await;
            (collected, replies.join(" "), watched)
        })
        .await;
        // test.run, 3 calls × (client + server), 5 per-message HTTP calls × (client + server).
        let spans = spans_of(trace, 17).await;
        assert_eq!(spans.len(), 17);

        let mut all_events = Vec::new();
        for (signature, reply, messages) in [
            ("deitest.Leaf/Collect", collected.as_str(), 2),
            ("deitest.Leaf/Chat", chatted.as_str(), 3),
        ] {
            let span = client_span(&spans, signature);
            let preliminary = Index::decode(&attr(span, "dei.index").expect("index")).expect("valid");
            assert!(
                preliminary.last().expect("element").preliminary,
                "{signature}: `~` flag"
            );
            assert!(attr(span, "dei.index").expect("index").ends_with('~'));
            assert_eq!(attr(span, "dei.preliminary").as_deref(), Some("true"));
            assert_eq!(attr(span, "dei.payload.digest"), Some(PayloadDigest::empty().to_hex()));
            // The mapping preliminary → final, one event per message.
            let events = stream_events(span);
            assert_eq!(events.len(), messages, "{signature}");
            for (i, (k, final_index, prelim)) in events.iter().enumerate() {
                assert_eq!(*k as usize, i + 1);
                assert_eq!(prelim, &preliminary);
                assert!(!final_index.is_preliminary());
                assert_eq!(final_index.parent(), preliminary.parent(), "final indexes are siblings");
                assert_ne!(final_index, &preliminary);
            }
            let finals: std::collections::BTreeSet<_> = events.iter().map(|(_, f, _)| f.clone()).collect();
            assert_eq!(
                finals.len(),
                messages,
                "{signature}: every message has its own final index"
            );
            // The callee counted messages implicitly: message k was served under `…r|(x+k)~`, so the RPC
            // it issued for message k extends that prefix.
            let served = echo_indexes(reply);
            assert_eq!(served.len(), messages, "{reply}");
            for (k, echo_index) in served {
                assert_eq!(
                    echo_index.parent(),
                    Some(preliminary.stream_message(k)),
                    "{signature} message {k}"
                );
            }
            // The server span carries the preliminary index.
            let server = spans
                .iter()
                .find(|s| is_server(s) && s.parent_span_id == span.span_context.span_id())
                .expect("server span");
            assert_eq!(attr(server, "dei.index"), attr(span, "dei.index"));
            assert_eq!(attr(server, "dei.preliminary").as_deref(), Some("true"));
            all_events.push(events);
        }
        // Chat: messages 1 and 3 share payload and site: counts 1 and 2.
        let chat = &all_events[1];
        assert_eq!(chat[0].1.last().map(|e| e.digest), chat[2].1.last().map(|e| e.digest));
        assert_eq!(
            (chat[0].1.last().map(|e| e.count), chat[2].1.last().map(|e| e.count)),
            (Some(1), Some(2))
        );
        // Collect: the two sends are two sites; the digests differ.
        let collect = &all_events[0];
        assert_ne!(
            collect[0].1.last().map(|e| e.digest),
            collect[1].1.last().map(|e| e.digest)
        );

        // Server streaming: the single request is served as message 1, its final index is its payload's.
        let watch = client_span(&spans, "deitest.Leaf/Watch");
        let preliminary = Index::decode(&attr(watch, "dei.index").expect("index")).expect("valid");
        assert!(preliminary.is_preliminary());
        let events = stream_events(watch);
        assert_eq!(events.len(), 1);
        assert_eq!(watched.len(), 3);
        let served = watched[0].rsplit_once('@').map(|(_, i)| i.to_string()).expect("index");
        assert_eq!(served, preliminary.stream_message(1).encode());

        // The same program gives the same indexes and mappings in every run.
        if let Some(p) = &previous {
            assert_eq!(p, &all_events);
        }
        previous = Some(all_events);
    }
}

/// What one client-streaming `Collect` of "Hello", "World", "Again" under `plan` gave: the call's result, the
/// sender's injected fault, the client span's attributes and events, and the indexes C's `/echo` served under.
struct CollectRun {
    result: Result<String, tonic::Status>,
    injected: Option<Fault>,
    spans: Vec<SpanData>,
}

async fn collect_three(sys: &System, plan: Option<FaultPlan>, min_spans: usize) -> CollectRun {
    let faulted = plan
        .as_ref()
        .is_some_and(|p| p.entries().iter().any(|(_, f)| !matches!(f, Fault::Latency(_))));
    let leaf = sys.leaf_client().await;
    let config = sys.config.clone();
    let extra = move |cx: opentelemetry::Context| match plan {
        Some(p) => cx.with_fault_plan(p),
        None => cx,
    };
    let ((result, injected), trace) = in_root(&sys.config.clone(), extra, async move {
        let (tx, request) = channel::<pb::Msg>(&config, 4);
        let mut client = leaf.clone();
        let call = dei_propagator::spawn(async move { client.collect(request).await });
        tx.send(msg("Hello")).await.expect("message 1 is queued");
        // Message 2 is queued before the client layer sees its final index; message 3 may find the stream
        // already ended by a fault on message 2.
        tx.send(msg("World")).await.expect("message 2 is queued");
        let _ = tx.send(msg("Again")).await;
        if !faulted {
            drop(tx);
            return (call.await.expect("task").map(|r| r.into_inner().text), None);
        }
        // A failing fault ends the request stream although the sender is still open; later sends fail.
        let result = call.await.expect("task").map(|r| r.into_inner().text);
        let after = tx.send(msg("Later")).await;
        assert_eq!(after, Err(dei_instrumentation::grpc::stream::StreamClosed));
        (result, tx.injected_fault())
    })
    .await;
    CollectRun {
        result,
        injected,
        spans: spans_of(trace, min_spans).await,
    }
}

/// Indexes C's `/echo` was served under, as the k of the stream message they extend.
fn echoed_messages(spans: &[SpanData], preliminary: &Index) -> Vec<u32> {
    let mut ks: Vec<u32> = spans
        .iter()
        .filter(|s| is_server(s) && attr(s, "dei.signature").as_deref() == Some("POST /echo"))
        .filter_map(|s| Index::decode(&attr(s, "dei.index")?).ok())
        .filter_map(|i| (1..=3).find(|k| i.parent() == Some(preliminary.stream_message(*k))))
        .collect();
    ks.sort();
    ks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_planned_on_a_stream_message_fails_exactly_that_message() {
    let sys = System::start().await;
    // The three runs call `collect_three` from one site: the stacks, hence the indexes, are the same.
    let mut runs: Vec<CollectRun> = Vec::new();
    for step in 0..3 {
        // Fault-free: test.run, Collect client + server, 3 × /echo client + server. Then INTERNAL on message
        // 2's final index (1 × /echo), then latency on it.
        let finals = runs.first().map(|base| {
            let span = client_span(&base.spans, "deitest.Leaf/Collect");
            stream_events(span)
                .into_iter()
                .map(|(_, f, _)| f)
                .collect::<Vec<Index>>()
        });
        let (plan, min) = match (step, finals) {
            (1, Some(f)) => (Some(FaultPlan::new(vec![(f[1].clone(), Fault::INTERNAL)])), 5),
            (2, Some(f)) => (
                Some(FaultPlan::new(vec![(
                    f[1].clone(),
                    Fault::Latency(std::time::Duration::from_millis(40)),
                )])),
                9,
            ),
            _ => (None, 9),
        };
        runs.push(collect_three(&sys, plan, min).await);
    }
    let (base, run, delayed) = (&runs[0], &runs[1], &runs[2]);
    assert_eq!(base.result.as_deref().map(|t| t.split(' ').count()).ok(), Some(3));
    assert_eq!(base.injected, None);
    let span = client_span(&base.spans, "deitest.Leaf/Collect");
    let preliminary = Index::decode(&attr(span, "dei.index").expect("index")).expect("valid");
    let finals: Vec<Index> = stream_events(span).into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(finals.len(), 3);
    assert_eq!(echoed_messages(&base.spans, &preliminary), [1, 2, 3]);
    assert_eq!(attr(span, "dei.fault"), None);

    // INTERNAL on message 2: message 1 is served, messages 2 and 3 never leave, the call ends with INTERNAL.
    let status = run.result.as_ref().expect_err("the faulted message fails the call");
    assert_eq!(status.code(), tonic::Code::Internal);
    assert_eq!(status.message(), "dei: injected fault");
    assert_eq!(run.injected, Some(Fault::INTERNAL));
    let span = client_span(&run.spans, "deitest.Leaf/Collect");
    // The fault is the message's: on its event, not on the stream's span (the stream itself was not failed).
    assert_eq!(attr(span, "dei.fault"), None);
    // The preliminary index (the stream's opening) is unaffected: same index, the stream opened and was served.
    assert_eq!(attr(span, "dei.index"), Some(preliminary.encode()));
    assert!(
        run.spans
            .iter()
            .any(|s| is_server(s) && attr(s, "dei.signature").as_deref() == Some("deitest.Leaf/Collect"))
    );
    // Message 1 kept its final index and was served; message 2 got the fault; message 3 was never issued.
    let events = stream_events(span);
    assert_eq!(
        events.iter().map(|(_, f, _)| f.clone()).collect::<Vec<_>>(),
        finals[..2]
    );
    assert_eq!(
        event_faults(span),
        [(1, None), (2, Some("g13".to_string()))],
        "only message 2 carries the fault"
    );
    assert_eq!(
        echoed_messages(&run.spans, &preliminary),
        [1],
        "only message 1 reached the callee"
    );

    // Latency on message 2: every message is served, and only message 2's event names the fault.
    assert_eq!(delayed.result.as_deref().map(|t| t.split(' ').count()).ok(), Some(3));
    assert_eq!(delayed.injected, None);
    let span = client_span(&delayed.spans, "deitest.Leaf/Collect");
    assert_eq!(attr(span, "dei.fault"), None);
    assert_eq!(event_faults(span), [(1, None), (2, Some("l40".to_string())), (3, None)]);
    let events: Vec<Index> = stream_events(span).into_iter().map(|(_, f, _)| f).collect();
    assert_eq!(events, finals);
    assert_eq!(echoed_messages(&delayed.spans, &preliminary), [1, 2, 3]);
}

/// Opens `streams` client streams one after another from one site, each sending `messages` messages, and
/// returns each stream's `dei.ambiguous`, in order.
async fn sequential_streams(sys: &System, streams: usize, messages: usize) -> Vec<Option<String>> {
    let leaf = sys.leaf_client().await;
    let config = sys.config.clone();
    let (_, trace) = in_root(&sys.config.clone(), |cx| cx, async move {
        for _ in 0..streams {
            let (tx, request) = channel::<pb::Msg>(&config, 4);
            let mut client = leaf.clone();
            let call = dei_propagator::spawn(async move { client.collect(request).await });
            for m in 0..messages {
                tx.send(msg(&format!("m{m}"))).await.expect("queued");
            }
            drop(tx);
            call.await.expect("task").expect("Collect");
        }
    })
    .await;
    // test.run, per stream a client and a server span, per message C's /echo client and server spans.
    let spans = spans_of(trace, 1 + streams * (2 + 2 * messages)).await;
    let mut collects: Vec<&SpanData> = spans
        .iter()
        .filter(|s| is_client(s) && attr(s, "dei.signature").as_deref() == Some("deitest.Leaf/Collect"))
        .collect();
    collects.sort_by_key(|s| s.start_time);
    assert_eq!(collects.len(), streams);
    collects.iter().map(|s| attr(s, "dei.ambiguous")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_opened_where_an_earlier_streams_messages_were_served_is_ambiguous() {
    let sys = System::start().await;
    // One message each: message 1 of the stream opened with x is served under x + 1, the next stream opens
    // with x + 1 and serves under x + 2: nothing overlaps.
    let single = sequential_streams(&sys, 2, 1).await;
    assert_eq!(single, vec![Some("false".into()), Some("false".into())]);
    // Two messages each: the first stream's message 2 is served under x + 2, where the second's message 1 is.
    let double = sequential_streams(&sys, 2, 2).await;
    assert_eq!(double, vec![Some("false".into()), Some("true".into())]);
}
