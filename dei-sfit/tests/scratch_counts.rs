use dei_propagator::Instantiation;
use dei_sfit::model::programs;
use dei_sfit::*;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_counts() {
    for p in programs::all() {
        let rec = Recorder::new();
        let src: Arc<dyn SpanSource> = Arc::new(rec.clone());
        let test = p.test(&rec);
        let oracle = Oracle::new(SearchOptions { catalog: p.catalog(), ..Default::default() }, src.clone(), 12)
            .run(&test).await.unwrap();
        let mut line = format!("{:<14} oracle {:>3} sets ({} runs)", p.name, oracle.reference.len(), oracle.executions);
        for inst in [Instantiation::dei(), Instantiation::no_count(), Instantiation::no_stack(), Instantiation::no_count_no_stack(), Instantiation::no_path_count_stack(), Instantiation::filibuster()] {
            for prune in [true, false] {
                let opts = SearchOptions { catalog: p.catalog(), instantiation: inst.clone(), prune_ancestors: prune, ..Default::default() };
                let r = Search::with_shared_source(opts, src.clone()).run(&test).await.unwrap();
                let reached = r.reference_sets().intersection(&oracle.reference).count();
                line += &format!(" | {}{} {} ({}/{} red {} fail {})", inst.name, if prune {""} else {"*"}, r.executions.len(), reached, oracle.reference.len(), r.redundant().len(), r.failing().len());
            }
        }
        println!("{line}");
    }
}
