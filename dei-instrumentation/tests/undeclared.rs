//! gRPC methods whose kind was not declared: the client layer classifies them from the request body without
//! ever waiting for it.

mod common;

use common::*;
use dei_instrumentation::DeiConfig;
use dei_instrumentation::grpc::stream::channel;
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_methods_are_classified_without_blocking() {
    let sys = System::start_with(DeiConfig::default()).await;
    let leaf = sys.leaf_client().await;
    let config = sys.config.clone();
    let (_, trace) = in_root(&sys.config.clone(), |cx| cx, async move {
        // Unary: one ready message, then the end.
        let mut client = leaf.clone();
        client.get(msg("u")).await.expect("Get");
        // Bidi with three ready messages: more than one message, a stream.
        let mut client = leaf.clone();
        let replies: Vec<_> = client
            .chat(futures::stream::iter(vec![msg("a"), msg("b"), msg("c")]))
            .await
            .expect("Chat")
            .into_inner()
            .collect()
            .await;
        assert_eq!(replies.len(), 3);
        // Client streaming whose first message comes later: the body is pending, a stream; the call does not
        // wait for the message to be sent (it is sent only once the server is serving the call).
        let (tx, request) = channel::<pb::Msg>(&config, 1);
        let mut client = leaf.clone();
        let call = dei_propagator::spawn(async move { client.collect(request).await });
        tokio::time::timeout(std::time::Duration::from_secs(30), collect_started().notified())
            .await
            .expect("the call reaches the server before its first message is sent");
        tx.send(msg("late")).await.expect("open");
        drop(tx);
        call.await.expect("task").expect("Collect");
    })
    .await;
    // test.run, 3 × (client + server), 4 per-message HTTP calls × (client + server).
    let spans = spans_of(trace, 15).await;
    let preliminary = |sig: &str| {
        let span = spans
            .iter()
            .find(|s| is_client(s) && attr(s, "dei.signature").as_deref() == Some(sig))
            .unwrap_or_else(|| panic!("{sig}"));
        attr(span, "dei.preliminary").as_deref() == Some("true")
    };
    assert!(!preliminary("deitest.Leaf/Get"));
    assert!(preliminary("deitest.Leaf/Chat"));
    assert!(preliminary("deitest.Leaf/Collect"));
}
