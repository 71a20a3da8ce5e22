//! Projection to a coarser instantiation (paper §6): replay each retained trace's RPCs, in issue order,
//! through [`dei_propagator::projection::project`] and count how many distinct RPCs would share one name
//! under Filibuster's or 3MileBeach's scheme — RPCs that such a tool cannot tell apart, so cannot target
//! with a fault separately.
//!
//! Occurrences without a signature are skipped; missing payload or stack digests are replayed as empty
//! (counted in `missing_components`), which only matters for instantiations that include them.

use super::trace_hex;
use crate::state::CollectorState;
pub use crate::views::{Collapse, Projection, UnstableName};
use dei_propagator::projection::{RecordedRpc, project};
use dei_propagator::{Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Most full indexes remembered per projected name.
const MAX_FULL_PER_NAME: usize = 64;

/// Projects every retained trace to `target`.
pub fn project_tree(a: &CollectorState, target: &Instantiation, limit: usize) -> Projection {
    let mut rpcs_total = 0u64;
    let mut missing = 0u64;
    let mut reproduced = 0u64;
    let mut full_set: BTreeSet<Index> = BTreeSet::new();
    let mut projected_set: BTreeSet<Index> = BTreeSet::new();
    let mut collapses: BTreeMap<Index, (BTreeSet<Index>, usize, u64, [u8; 16])> = BTreeMap::new();
    let mut meanings: BTreeMap<Index, BTreeSet<Index>> = BTreeMap::new();
    for t in a.traces.ordered() {
        // the occurrences with a signature, each with it
        let mut occ: Vec<(usize, &str)> = t
            .occurrences
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.signature.as_deref().map(|s| (i, s)))
            .collect();
        occ.sort_by_key(|&(i, _)| (t.occurrences[i].start_ns(), t.occurrences[i].index.depth(), i));
        let mut pos: HashMap<&Index, usize> = HashMap::new();
        let mut rpcs = Vec::with_capacity(occ.len());
        let mut recorded = Vec::with_capacity(occ.len());
        for &(i, signature) in &occ {
            let o = &t.occurrences[i];
            if o.payload.is_none() || o.stack_digest.is_none() {
                missing += 1;
            }
            let invocation = InvocationSignature::new(
                Signature::from_name(signature),
                o.payload.unwrap_or_else(PayloadDigest::empty),
                o.stack_digest.as_deref().copied().unwrap_or(StackDigest([0; 32])),
            );
            let parent = o.index.parent().and_then(|p| pos.get(&p).copied());
            pos.entry(&o.index).or_insert(rpcs.len());
            rpcs.push(RecordedRpc { parent, invocation });
            recorded.push(o.index.clone());
        }
        rpcs_total += rpcs.len() as u64;
        let projected = project(&rpcs, target);
        let replayed = project(&rpcs, &Instantiation::dei());
        reproduced += replayed.iter().zip(&recorded).filter(|(a, b)| a == b).count() as u64;
        let mut groups: HashMap<&Index, BTreeSet<&Index>> = HashMap::new();
        for (p, f) in projected.iter().zip(&recorded) {
            groups.entry(p).or_default().insert(f);
            let m = meanings.entry(p.clone()).or_default();
            if m.len() < MAX_FULL_PER_NAME {
                m.insert(f.clone());
            }
            full_set.insert(f.clone());
            projected_set.insert(p.clone());
        }
        for (p, fulls) in groups {
            if fulls.len() > 1 {
                let e = collapses
                    .entry(p.clone())
                    .or_insert_with(|| (BTreeSet::new(), 0, 0, t.trace_id));
                e.0.extend(fulls.iter().map(|f| (*f).clone()));
                e.1 = e.1.max(fulls.len());
                e.2 += 1;
            }
        }
    }
    let collapsed_names = collapses.len();
    let mut list: Vec<Collapse> = collapses
        .into_iter()
        .map(|(p, (fulls, max, traces, ex))| Collapse {
            projected: p.encode(),
            full: fulls.iter().take(16).map(|f| crate::analysis::named(a, f)).collect(),
            max_in_one_trace: max,
            traces,
            example_trace: trace_hex(&ex),
        })
        .collect();
    list.sort_by(|a, b| {
        b.max_in_one_trace
            .cmp(&a.max_in_one_trace)
            .then(b.traces.cmp(&a.traces))
    });
    list.truncate(limit);
    let mut unstable: Vec<UnstableName> = meanings
        .into_iter()
        .filter(|(_, fulls)| fulls.len() > 1)
        .map(|(p, fulls)| UnstableName {
            projected: p.encode(),
            distinct_full: fulls.len(),
            full: fulls.iter().take(16).map(|f| crate::analysis::named(a, f)).collect(),
        })
        .collect();
    let unstable_names = unstable.len();
    unstable.sort_by_key(|u| std::cmp::Reverse(u.distinct_full));
    unstable.truncate(limit);
    Projection {
        instantiation: target.name.to_string(),
        rpcs: rpcs_total,
        distinct_full: full_set.len(),
        distinct_projected: projected_set.len(),
        missing_components: missing,
        reproduced_recorded: reproduced,
        collapses: list,
        collapsed_names,
        unstable,
        unstable_names,
    }
}
