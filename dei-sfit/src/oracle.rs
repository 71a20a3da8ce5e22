//! The brute-force oracle: run every combination of faults on every observed index, until no new index
//! appears, and collect the distinct effective fault sets. A correct search reaches each of them exactly once.
//!
//! Check a search against it on a small system: run both through one shared source
//! ([`Search::with_shared_source`]; a source resets itself at each execution, so never run the two at once),
//! with the same options, then compare the report's effective fault sets with the oracle's. Compare by
//! *reference* index ([`Report::reference_sets`](crate::Report::reference_sets) and
//! [`OracleResult::reference`]; both are recorded under [`SearchOptions::reference`], full DEI by default) so
//! that the comparison holds under any instantiation, and check that no execution repeats a set
//! ([`Report::redundant`](crate::Report::redundant)):
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use dei_sfit::{model::programs, Oracle, Recorder, Search, SearchOptions, SpanSource};
//! use std::sync::Arc;
//!
//! let program = programs::FIG2; // any FunctionalTest: here a simulated program recording into `recorder`
//! let recorder = Recorder::new();
//! let test = program.test(&recorder);
//! let source: Arc<dyn SpanSource> = Arc::new(recorder);
//! let options = SearchOptions { catalog: program.catalog(), ..SearchOptions::default() };
//!
//! let report = Search::with_shared_source(options.clone(), source.clone()).run(&test).await?;
//! // refuses (OracleError::TooLarge) beyond 12 observed indexes: brute force runs up to 2^12 executions here
//! let oracle = Oracle::new(options, source, 12).run(&test).await?;
//!
//! assert_eq!(report.reference_sets(), oracle.reference);     // complete: every distinct fault set reached
//! assert!(report.redundant().is_empty());                    // non-redundant: none of them twice
//! assert_eq!(report.executions.len(), oracle.reference.len());
//! assert!(oracle.executions >= report.executions.len());      // what brute force paid for the same answer
//! # Ok(())
//! # }
//! ```

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

/// What brute force found: compare [`reference`](OracleResult::reference) with
/// [`Report::reference_sets`](crate::Report::reference_sets) (see the [module](self) example).
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

/// The brute-force oracle (see the [module](self) example).
pub struct Oracle {
    search: Search,
    max_indexes: usize,
}

impl Oracle {
    /// An oracle running executions with these options (instantiation and catalog matter) through `source`,
    /// shared with the search it checks ([`Search::with_shared_source`]). It refuses examples with more than
    /// `max_indexes` observed indexes ([`OracleError::TooLarge`]): with `f` faults per RPC it runs up to
    /// `(f + 1)^n` executions for `n` indexes.
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
