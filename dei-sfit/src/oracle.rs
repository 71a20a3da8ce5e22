//! The brute-force oracle: run every combination of faults on every observed index, until no new index
//! appears, and collect the distinct effective fault sets. A correct search reaches each of them exactly once.

use crate::observation::FaultSet;
use crate::search::{Search, SearchError, SearchOptions};
use crate::source::SpanSource;
use crate::test::{FunctionalTest, PlannedFault};
use dei_propagator::{Fault, Index};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

/// Why the oracle gave up.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// Too many indexes to enumerate.
    #[error("{0} observed indexes: too many for brute force (limit {1})")]
    TooLarge(usize, usize),
    /// An execution failed to run.
    #[error(transparent)]
    Search(#[from] SearchError),
}

/// What brute force found.
#[derive(Clone, Debug, Default)]
pub struct OracleResult {
    /// How many executions it ran.
    pub executions: usize,
    /// Every index observed (and targetable).
    pub indexes: BTreeSet<Index>,
    /// The distinct effective fault sets, by index under the oracle's instantiation.
    pub effective: BTreeSet<FaultSet>,
    /// The distinct effective fault sets, by reference index.
    pub reference: BTreeSet<FaultSet>,
}

/// The brute-force oracle.
pub struct Oracle {
    search: Search,
    max_indexes: usize,
}

impl Oracle {
    /// An oracle running executions with these options (instantiation and catalog matter) through `source`.
    /// It refuses examples with more than `max_indexes` observed indexes.
    pub fn new(options: SearchOptions, source: Arc<dyn SpanSource>, max_indexes: usize) -> Self {
        Oracle {
            search: Search::with_shared_source(options, source),
            max_indexes,
        }
    }

    /// Runs every combination until the set of observed indexes stops growing.
    pub async fn run(&self, test: &dyn FunctionalTest) -> Result<OracleResult, OracleError> {
        let catalog = &self.search.options().catalog;
        let mut known: BTreeMap<Index, (Vec<Fault>, String)> = BTreeMap::new();
        let mut ran: HashSet<FaultSet> = HashSet::new();
        let mut result = OracleResult::default();
        loop {
            let before = known.len();
            if before > self.max_indexes {
                return Err(OracleError::TooLarge(before, self.max_indexes));
            }
            let keys: Vec<(Index, Vec<Fault>, String)> = known
                .iter()
                .map(|(i, (f, s))| (i.clone(), f.clone(), s.clone()))
                .collect();
            // mixed-radix counter over "no fault or one of the catalog's faults" per index
            let radix: Vec<usize> = keys.iter().map(|(_, f, _)| f.len() + 1).collect();
            let mut digits = vec![0usize; keys.len()];
            loop {
                let planned: Vec<PlannedFault> = keys
                    .iter()
                    .zip(&digits)
                    .filter(|(_, d)| **d > 0)
                    .map(|((i, f, s), d)| PlannedFault {
                        index: i.clone(),
                        fault: f[d - 1],
                        signature: s.clone(),
                    })
                    .collect();
                let set: FaultSet = planned.iter().map(|p| (p.index.clone(), p.fault)).collect();
                if ran.insert(set) {
                    result.executions += 1;
                    let record = self.search.execute(test, result.executions, planned).await?;
                    result
                        .effective
                        .insert(record.effective.iter().map(|p| (p.index.clone(), p.fault)).collect());
                    if let Some(r) = record.reference_set() {
                        result.reference.insert(r);
                    }
                    for rpc in &record.rpcs {
                        if !rpc.targetable() {
                            continue;
                        }
                        result.indexes.insert(rpc.index.clone());
                        known
                            .entry(rpc.index.clone())
                            .or_insert_with(|| (catalog.faults_for(&rpc.signature), rpc.signature.clone()));
                    }
                }
                // next combination
                let mut k = 0;
                while k < digits.len() {
                    digits[k] += 1;
                    if digits[k] < radix[k] {
                        break;
                    }
                    digits[k] = 0;
                    k += 1;
                }
                if k == digits.len() {
                    break;
                }
            }
            if known.len() == before {
                return Ok(result);
            }
        }
    }
}
