//! Many dei-collectors sharded by trace, and one view over all of them.
//!
//! A large deployment shards spans by trace id in front of N dei-collectors, with the OpenTelemetry
//! Collector's loadbalancing exporter (`docs/deploy/otelcol-loadbalancing.yaml`). Each shard is exact for its
//! share: every span of a trace, so both halves of every edge and every index of the trace, reach it.
//!
//! A *query node* (`dei-collector query --peers URL,…`) answers the same JSON API and web view over the
//! union. It **pulls**: every interval it fetches each shard's [`Snapshot`] (`GET /api/v1/snapshot`), whole
//! the first time and then what changed since the [`Cursor`](snapshot::Cursor) of the shard's last answer,
//! keeps a copy of each shard, merges again what changed (counts add up, histograms merge bucket by bucket,
//! traces are disjoint) and serves the merged state, so the analyses run on the merged data and dei-sfit's
//! `CollectorSpans` works against it unchanged.
//!
//! Why pull and not push: the shards stay what they are alone (no state per query node: change stamps and a
//! bounded list of recent removals serve any cursor; nothing to buffer when a query node is down); any
//! number of query nodes can read the same shards; a shard that does not answer makes the view *partial*
//! ([`crate::views::PeersView`]) instead of holding anything up, and its share returns with its next answer;
//! the query node holds nothing that a restart would lose. The cost is staleness up to one interval, a copy of
//! every shard on the query node, and a whole pull at start, measured in BENCHMARKS.md.

pub(crate) mod peers;
pub mod snapshot;
