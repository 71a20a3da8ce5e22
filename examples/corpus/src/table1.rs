//! Table 1 of the paper, reproduced: the search under each instantiation on the real cinema services,
//! judged against the brute-force oracle run under the full DEI.

use crate::cinema::{self, Variant};
use dei_instrumentation::DeiConfig;
use dei_propagator::Instantiation;
use dei_sfit::{FaultSet, Oracle, Report, Search, SearchOptions, SpanSource};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The table's columns: the paper's heading and the instantiation.
pub fn columns() -> [(&'static str, Instantiation); 5] {
    [
        ("All", Instantiation::dei()),
        ("No IC", Instantiation::no_count()),
        ("No Stk", Instantiation::no_stack()),
        ("No IC,Stk", Instantiation::no_count_no_stack()),
        ("No Path,IC&Stk", Instantiation::no_path_count_stack()),
    ]
}

/// One cell: our search under one instantiation, against the oracle.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Executions our search ran (ancestor pruning on).
    pub executions: usize,
    /// Executions under Filibuster's scheduling (no ancestor pruning).
    pub filibuster_executions: usize,
    /// The paper's count (`None` for "-").
    pub paper: Option<usize>,
    /// Oracle sets the search reached.
    pub reached: usize,
    /// Oracle sets it never reached.
    pub missed: Vec<FaultSet>,
    /// Executions where one planned fault landed on several RPCs.
    pub multi_hit: usize,
    /// Executions whose effective set repeated an earlier one (ours, Filibuster's scheduling).
    pub redundant: (usize, usize),
    /// Failing executions of the functional test.
    pub failing: usize,
}

/// One row: a cinema program.
#[derive(Clone, Debug)]
pub struct Row {
    /// The program.
    pub variant: Variant,
    /// The oracle's number of distinct effective fault sets.
    pub oracle: usize,
    /// The cells, in [`columns`] order.
    pub cells: Vec<Cell>,
}

async fn search(variant: Variant, instantiation: &Instantiation, prune: bool, source: Arc<dyn SpanSource>) -> Report {
    let config = DeiConfig::builder()
        .instantiation(instantiation.clone())
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let cinema = cinema::start(variant, &config).await;
    let test = cinema::functional_test(cinema);
    let options = SearchOptions {
        catalog: cinema::catalog(),
        instantiation: instantiation.clone(),
        prune_ancestors: prune,
        ..SearchOptions::default()
    };
    Search::with_shared_source(options, source)
        .run(&test)
        .await
        .expect("search")
}

/// Runs the whole table (one search at a time: the span source is process-wide).
pub async fn run(source: Arc<dyn SpanSource>) -> Vec<Row> {
    let mut rows = Vec::new();
    for variant in Variant::ALL {
        let config = DeiConfig::builder().faults(dei_instrumentation::Faults::Accept).build();
        let cinema = cinema::start(variant, &config).await;
        let test = cinema::functional_test(cinema);
        let options = SearchOptions {
            catalog: cinema::catalog(),
            ..SearchOptions::default()
        };
        let truth: BTreeSet<FaultSet> = Oracle::new(options, source.clone(), 12)
            .run(&test)
            .await
            .expect("oracle")
            .reference;
        let mut cells = Vec::new();
        for (i, (_, inst)) in columns().iter().enumerate() {
            let ours = search(variant, inst, true, source.clone()).await;
            let filibuster = search(variant, inst, false, source.clone()).await;
            let reached = ours.reference_sets();
            cells.push(Cell {
                executions: ours.executions.len(),
                filibuster_executions: filibuster.executions.len(),
                paper: variant.paper()[i],
                reached: truth.intersection(&reached).count(),
                missed: truth.difference(&reached).cloned().collect(),
                multi_hit: ours
                    .executions
                    .iter()
                    .filter(|e| !e.multiply_injected.is_empty())
                    .count(),
                redundant: (ours.redundant().len(), filibuster.redundant().len()),
                failing: ours.failing().len(),
            });
        }
        rows.push(Row {
            variant,
            oracle: truth.len(),
            cells,
        });
    }
    rows
}

/// The table as text: ours next to the paper's, then the losses.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("Table 1: executions of the exhaustive search per instantiation, ours vs the paper's\n");
    out.push_str(
        "(ours = our search; (n*) = under Filibuster's scheduling, which does not prune faults on ancestors)\n\n",
    );
    out.push_str(&format!("{:<10}|{:>7} |", "Cinema", "oracle"));
    for (h, _) in columns() {
        out.push_str(&format!(" {h:^19} |"));
    }
    out.push('\n');
    out.push_str(&format!("{:<10}|{:>7} |", "", "sets"));
    for _ in columns() {
        out.push_str(&format!(" {:^19} |", "ours (n*) / paper"));
    }
    out.push('\n');
    out.push_str(&"-".repeat(10 + 9 + 5 * 22));
    out.push('\n');
    for row in rows {
        out.push_str(&format!("{:<10}|{:>7} |", row.variant.name(), row.oracle));
        for c in &row.cells {
            let paper = c.paper.map_or("-".to_string(), |p| p.to_string());
            let star = if c.filibuster_executions != c.executions {
                format!(" ({}*)", c.filibuster_executions)
            } else {
                String::new()
            };
            let mark = match c.paper {
                Some(p) if p != c.executions && p != c.filibuster_executions => "!",
                _ => " ",
            };
            out.push_str(&format!(
                " {:>9} / {:<5}{mark} |",
                format!("{}{star}", c.executions),
                paper
            ));
        }
        out.push('\n');
    }
    out.push_str(
        "\nLoss against the brute-force oracle (full DEI): sets reached / oracle sets; executions where one\n",
    );
    out.push_str(
        "planned fault landed on several RPCs; executions repeating an earlier effective set (ours, Filibuster's):\n",
    );
    for row in rows {
        for ((h, _), c) in columns().iter().zip(&row.cells) {
            out.push_str(&format!(
                "  {:<10} {:<15} reached {}/{}  never reached {}  multi-RPC faults in {} executions  redundant {}/{}  failing {}\n",
                row.variant.name(),
                h,
                c.reached,
                row.oracle,
                c.missed.len(),
                c.multi_hit,
                c.redundant.0,
                c.redundant.1,
                c.failing
            ));
        }
    }
    out.push_str("\nDerivations of every count: docs/corpus.md\n");
    out
}
