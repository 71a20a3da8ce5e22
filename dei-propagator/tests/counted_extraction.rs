//! `extract_with_index_counted` reads what `extract_with_index` reads, and counts the same rejections, for
//! every carrier: no `dei` value, one (valid, malformed, not readable), two or three (duplicates, readable or
//! not), beside baggage entries that the reading falls back to. One test in its own binary, so that the
//! process's rejection counters move only with it.

use dei_propagator::rejection::{self, Source};
use dei_propagator::{composite_propagator, extract_with_index, extract_with_index_counted};
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt as _;

/// A carrier with any number of values per key, some of them unreadable (not visible ASCII), as an HTTP
/// header map is: `get` gives the first value when it is readable, `get_all` every readable one.
struct Fields(Vec<(&'static str, Result<String, ()>)>);

impl Fields {
    fn values(&self, key: &str) -> impl Iterator<Item = &Result<String, ()>> {
        self.0
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }

    fn count(&self, key: &str) -> usize {
        self.values(key).count()
    }
}

impl Extractor for Fields {
    fn get(&self, key: &str) -> Option<&str> {
        self.values(key).next()?.as_deref().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| *k).collect()
    }

    fn get_all(&self, key: &str) -> Option<Vec<&str>> {
        let all: Vec<&str> = self.values(key).filter_map(|v| v.as_deref().ok()).collect();
        (!all.is_empty()).then_some(all)
    }
}

/// What one extraction gave: the index's wire form, the fault plan's, whether a trace context came, and how
/// far each rejection counter moved.
fn outcome(extract: impl FnOnce() -> (opentelemetry::Context, Option<dei_propagator::Index>)) -> String {
    use dei_propagator::DeiContextExt as _;
    let before: Vec<u64> = [Source::Header, Source::Baggage, Source::FaultPlan]
        .into_iter()
        .map(rejection::rejected_total)
        .collect();
    let (cx, index) = extract();
    let moved: Vec<u64> = [Source::Header, Source::Baggage, Source::FaultPlan]
        .into_iter()
        .zip(before)
        .map(|(s, b)| rejection::rejected_total(s) - b)
        .collect();
    format!(
        "index {:?}, plan {:?}, traced {}, rejections {moved:?}",
        index.map(|i| i.encode()),
        cx.fault_plan().map(|p| p.encode()),
        cx.span().span_context().is_valid()
    )
}

#[test]
fn a_counted_carrier_reads_and_rejects_exactly_as_an_uncounted_one() {
    let valid = || Ok("1.AQEBAQEBAQE1".to_string());
    let other = || Ok("1.AgICAgICAgI1".to_string());
    let malformed = || Ok("1.AQEB".to_string());
    let unreadable = || Err(());
    let dei_sets: Vec<Vec<Result<String, ()>>> = vec![
        vec![],
        vec![valid()],
        vec![malformed()],
        vec![unreadable()],
        vec![valid(), other()],
        vec![valid(), valid()],
        vec![unreadable(), valid()],
        vec![valid(), unreadable()],
        vec![unreadable(), unreadable()],
        vec![malformed(), valid(), other()],
    ];
    let baggages: Vec<Vec<Result<String, ()>>> = vec![
        vec![],
        vec![Ok("dei=1.AwMDAwMDAwM1".to_string())],
        vec![Ok("a=1,dei=1.AwMDAwMDAwM1,dei=1.AwMDAwMDAwM2".to_string())],
        vec![Ok("dei=bad".to_string())],
    ];
    let propagator = composite_propagator();
    let mut compared = 0;
    for dei in &dei_sets {
        for baggage in &baggages {
            let mut fields = vec![(
                "traceparent",
                Ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()),
            )];
            fields.extend(dei.iter().map(|v| ("dei", v.clone())));
            fields.extend(baggage.iter().map(|v| ("baggage", v.clone())));
            fields.push(("dei-faults", Ok("1*1.AQEBAQEBAQE1:c".to_string())));
            let carrier = Fields(fields);
            let plain = outcome(|| extract_with_index(&propagator, &carrier));
            let counted = outcome(|| extract_with_index_counted(&propagator, &carrier, carrier.count("dei")));
            assert_eq!(counted, plain, "dei {dei:?}, baggage {baggage:?}");
            compared += 1;
        }
    }
    assert_eq!(compared, dei_sets.len() * baggages.len());
    // The cases cover a value taken from the header, from the baggage, and rejected duplicates.
    let one = Fields(vec![("dei", valid())]);
    assert_eq!(
        outcome(|| extract_with_index_counted(&propagator, &one, 1)),
        "index Some(\"1.AQEBAQEBAQE1\"), plan None, traced false, rejections [0, 0, 0]"
    );
    let two = Fields(vec![("dei", valid()), ("dei", other())]);
    assert_eq!(
        outcome(|| extract_with_index_counted(&propagator, &two, 2)),
        "index None, plan None, traced false, rejections [1, 0, 0]"
    );
    // The count is for the extractor it was given: another extractor read during the call (or after it) is
    // read as usual.
    let (_, index) = extract_with_index_counted(&propagator, &one, 0);
    assert!(index.is_none(), "told it holds no dei value: not read");
    let (_, index) = extract_with_index(&propagator, &one);
    assert!(index.is_some(), "the count is gone with the call");
}
