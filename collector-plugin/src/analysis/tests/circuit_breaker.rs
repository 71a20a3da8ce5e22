//! Circuit breakers on golden data (`testdata/circuit_breaker/`, its own folder so that its outputs can be
//! regenerated alone: `DEI_UPDATE_GOLDEN=1 cargo test -p dei-collector --lib circuit_breaker`).

use super::golden;
use crate::analysis::circuit_breaker;
use dei_propagator::Index;

fn episodes(case: &str) -> (crate::state::CollectorState, Vec<crate::views::Episode>) {
    let (state, view) = golden::check(
        case,
        |a| serde_json::json!({ "episodes": circuit_breaker::detect(a, &circuit_breaker::Params::default()) }),
    );
    let episodes = serde_json::from_value(view["episodes"].clone()).expect("episodes read back");
    (state, episodes)
}

/// The shop's traces 1–6: healthy; users.GetUser failed (`g14`) twice; the call absent from two traces; back.
#[test]
fn open_then_reclosed() {
    let (a, eps) = episodes("circuit_breaker/open_then_reclosed");
    assert_eq!(eps.len(), 1, "{eps:?}");
    let e = &eps[0];
    assert_eq!(e.node.signature.as_deref(), Some("users.Users/GetUser"));
    assert_eq!(
        (e.fault_traces, e.absent_traces, e.state),
        (2, 2, crate::views::EpisodeState::Reclosed)
    );
    assert_eq!(e.reclosed_trace.as_deref(), Some(hex::encode([6u8; 16]).as_str()));
    assert_eq!(e.faults.iter().collect::<Vec<_>>(), vec!["g14"]);
    let users = Index::decode(&e.node.index).expect("the episode's index");
    let (_, n) = a.tree.get(&users).expect("the node");
    assert_eq!(n.stats.faults.get("g14"), Some(&2));
    assert_eq!(n.stats.errors, 2);
}

/// The same fault, but the call is never absent afterwards.
#[test]
fn index_stays() {
    let (_, eps) = episodes("circuit_breaker/index_stays");
    assert!(eps.is_empty(), "{eps:?}");
}
