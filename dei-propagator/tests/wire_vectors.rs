//! The test vectors of docs/wire-format.md, checked from the page itself: every table row is parsed and
//! recomputed, so the spec and the code cannot drift apart.

use dei_propagator::{
    Element, ElementDigest, Fault, FaultPlan, Instantiation, InvocationSignature, PathMode, PayloadDigest, Signature,
    StackDigest,
};
use dei_propagator::{Index, WireError};
use sha2::{Digest, Sha256};

const SPEC: &str = include_str!("../../docs/wire-format.md");

/// The rows of the table under the `### title` heading, as cells with backticks removed, `*(…)*` cells
/// turned to the empty string and `\n` turned into newlines.
fn table(title: &str) -> Vec<Vec<String>> {
    let heading = format!("### {title}\n");
    let start = SPEC.find(&heading).unwrap_or_else(|| panic!("no section {title}")) + heading.len();
    let section = &SPEC[start..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("| "))
        .skip(2) // header and separator
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| {
                    let cell = cell.trim();
                    if cell.starts_with("*(") {
                        String::new()
                    } else {
                        cell.replace('`', "").replace("\\n", "\n")
                    }
                })
                .collect()
        })
        .collect();
    assert!(rows.len() >= 4, "table {title} has rows");
    rows
}

fn hex8(text: &str) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex");
    }
    out
}

fn instantiation(components: &str) -> Instantiation {
    let bits: u8 = components[..1].parse().expect("components digit");
    Instantiation {
        name: "vector".into(),
        payload: bits & 1 == 1,
        stack: bits & 2 == 2,
        count: true,
        path: PathMode::Path,
    }
}

#[test]
fn component_digests() {
    for row in table("Component digests") {
        let [kind, bytes, hex] = &row[..] else {
            panic!("{row:?}")
        };
        let computed = match kind.as_str() {
            "signature" => Signature::from_name(bytes.clone()).digest(),
            "payload" => PayloadDigest::of(bytes.as_bytes()).0,
            "stack" => {
                // the stack text is frames `file:line:column\n`: rebuild the frames and hash through the model
                let frames = bytes
                    .lines()
                    .map(|f| {
                        let mut parts = f.rsplitn(3, ':');
                        let column = parts.next().and_then(|c| c.parse().ok()).expect("column");
                        let line = parts.next().and_then(|c| c.parse().ok()).expect("line");
                        dei_propagator::Frame::new(parts.next().expect("file"), line, column)
                    })
                    .collect();
                let digest = dei_propagator::CallStack::new(frames).digest();
                assert_eq!(digest.0, <[u8; 32]>::from(Sha256::digest(bytes.as_bytes())));
                digest.0
            }
            other => panic!("unknown component {other}"),
        };
        let expected: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        assert_eq!(computed.to_vec(), expected, "{kind} {bytes:?}");
    }
}

#[test]
fn element_digests() {
    for row in table("Element digests") {
        let [signature, payload, stack, components, hex, wire] = &row[..] else {
            panic!("{row:?}")
        };
        let invocation = InvocationSignature::new(
            Signature::from_name(signature.clone()),
            PayloadDigest::of(payload.as_bytes()),
            StackDigest(Sha256::digest(stack.as_bytes()).into()),
        );
        let digest = invocation.element_digest(&instantiation(components));
        assert_eq!(digest, ElementDigest(hex8(hex)), "{row:?}");
        assert_eq!(&digest.to_string(), wire, "{row:?}");
    }
    // the presets map onto the components byte as the page says
    assert_eq!(Instantiation::dei().components_byte(), 3);
    assert_eq!(Instantiation::filibuster().components_byte(), 2);
    assert_eq!(Instantiation::three_mile_beach().components_byte(), 0);
    assert_eq!(Instantiation::signature_only().components_byte(), 0);
}

#[test]
fn index_values() {
    for row in table("Index values") {
        let [elements, wire, bytes] = &row[..] else {
            panic!("{row:?}")
        };
        let elements: Vec<Element> = elements
            .split(", ")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (hex, count) = e.split_once('#').expect("digest#count");
                let (count, preliminary) = match count.strip_suffix('~') {
                    Some(c) => (c, true),
                    None => (count, false),
                };
                let element = Element::new(ElementDigest(hex8(hex)), count.parse().expect("count"));
                if preliminary { element.preliminary() } else { element }
            })
            .collect();
        let index = Index::from_elements(elements);
        assert_eq!(&index.encode(), wire);
        assert_eq!(Index::decode(wire), Ok(index));
        assert_eq!(wire.len(), bytes.parse::<usize>().expect("bytes"));
    }
}

#[test]
fn rejected_index_values() {
    for row in table("Rejected index values") {
        let [value, why] = &row[..] else { panic!("{row:?}") };
        let value = match value.split_once(" then 65 times ") {
            Some((head, element)) => format!("{head}{}", element.repeat(65)),
            None => value.clone(),
        };
        let error = Index::decode(&value).expect_err(&value);
        let kind = why.split(':').next().expect("kind");
        let expected = match kind {
            "empty" => "empty",
            "version" => "version",
            "digest" => "digest",
            "count" => "count",
            "too deep (default limit 64)" => "too_deep",
            other => panic!("unknown reason {other}"),
        };
        assert_eq!(error.kind(), expected, "{value:?}: {error}");
    }
    assert!(matches!(
        Index::decode(&"1.chSN83lZIds1".repeat(200)),
        Err(WireError::TooLong { .. })
    ));
}

#[test]
fn fault_plans() {
    for row in table("Fault plans") {
        let [value, entries] = &row[..] else { panic!("{row:?}") };
        match entries.strip_prefix("rejected") {
            Some(_) => assert!(FaultPlan::decode(value).is_err(), "{value}"),
            None => {
                let plan = FaultPlan::decode(value).expect(value);
                assert_eq!(&plan.encode(), value);
                let described: Vec<String> = plan
                    .entries()
                    .iter()
                    .map(|(index, fault)| {
                        let what = match fault {
                            Fault::Grpc(c) => {
                                format!("gRPC {c} {}", fault.grpc_code_name().unwrap_or("?"))
                            }
                            Fault::Http(s) => format!("HTTP {s}"),
                            Fault::Connection => "connection error".to_string(),
                            Fault::Latency(d) => format!("{} ms latency", d.as_millis()),
                        };
                        format!("{index} {what}")
                    })
                    .collect();
                assert_eq!(&described.join("; "), entries);
            }
        }
    }
}

/// Encoded bytes per hop, for BENCHMARKS.md: printed with `--nocapture`.
#[test]
fn encoded_bytes_per_hop() {
    let typical = |depth: u32, count: u32| {
        Index::from_elements(
            (0..depth)
                .map(|i| Element::new(ElementDigest([i as u8; 8]), count))
                .collect(),
        )
    };
    for (depth, count) in [(1, 1), (8, 1), (8, 9), (8, 12), (64, 1)] {
        let text = typical(depth, count).encode();
        let per_hop = (text.len() - 1) as f64 / f64::from(depth);
        println!(
            "depth {depth:2}, counts {count:2}: {:4} bytes, {per_hop:.2} bytes per hop",
            text.len()
        );
        assert!(per_hop <= 16.0, "at most 16 bytes per hop on average");
    }
    assert_eq!(typical(8, 1).encode().len(), 1 + 8 * 13);
}

/// Header fields in order, as `(name, value)`: a carrier that, unlike a map, keeps repeated fields.
struct Fields(Vec<(String, String)>);

impl opentelemetry::propagation::Extractor for Fields {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn get_all(&self, key: &str) -> Option<Vec<&str>> {
        let all: Vec<&str> = (self.0.iter())
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
            .collect();
        (!all.is_empty()).then_some(all)
    }
}

/// `{N×text}` written out: `text` N times.
fn expand(cell: &str) -> String {
    let mut out = String::new();
    let mut rest = cell;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("closing brace") + start;
        let (n, text) = rest[start + 1..end].split_once('×').expect("{N×text}");
        out.push_str(&text.repeat(n.parse().expect("N")));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn reading_the_carriers() {
    use dei_propagator::rejection::{self, Source};
    use dei_propagator::{DeiContextExt, DeiPropagator};
    use opentelemetry::propagation::TextMapPropagator;
    let sources = [Source::Header, Source::Baggage, Source::FaultPlan];
    for row in table("Reading the carriers") {
        let [headers, index, plan, counted] = &row[..] else {
            panic!("{row:?}")
        };
        let fields = Fields(
            headers
                .split(" + ")
                .map(|field| {
                    let (name, value) = field.split_once(": ").expect("name: value");
                    (name.to_string(), expand(value))
                })
                .collect(),
        );
        let before = sources.map(rejection::rejected_total);
        let cx = DeiPropagator::new().extract(&fields);
        let after = sources.map(rejection::rejected_total);
        assert_eq!(
            cx.dei_index().map(|i| i.encode()).unwrap_or_default(),
            *index,
            "{headers}: the index read"
        );
        assert_eq!(
            cx.fault_plan().map(|p| p.encode()).unwrap_or_default(),
            *plan,
            "{headers}: the plan read"
        );
        let expected = sources.map(|s| counted.split(", ").filter(|c| *c == s.name()).count() as u64);
        let grew = [0, 1, 2].map(|i| after[i] - before[i]);
        assert_eq!(grew, expected, "{headers}: counted (header, baggage, fault_plan)");
    }
}

/// Held by the tests that count [`Event::DepthLimited`](dei_propagator::rejection::Event::DepthLimited) (a
/// process-wide counter), so that each sees its own counts.
static DEPTH_LIMITED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn extending_at_the_depth_limit() {
    use dei_propagator::{MAX_DEPTH, RequestScope};
    let _counting = DEPTH_LIMITED.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(MAX_DEPTH, 64);
    let element = Index::decode("1.chSN83lZIds1").expect("element").elements()[0];
    let call = InvocationSignature::new(
        Signature::from_name("B/echo".to_string()),
        PayloadDigest::of(b"Hello"),
        StackDigest([0; 32]),
    );
    for row in table("Extending at the depth limit") {
        let [incoming, issued, what] = &row[..] else {
            panic!("{row:?}")
        };
        let incoming = Index::from_elements(vec![element; incoming.parse().expect("depth")]);
        let scope = RequestScope::enter(incoming.clone(), Instantiation::dei());
        let index = scope.issue(&call);
        assert_eq!(
            index.index().depth(),
            issued.parse::<usize>().expect("depth"),
            "{row:?}"
        );
        if what.starts_with("extended") {
            assert!(!index.depth_limited(), "{row:?}");
            assert_eq!(index.index().parent().as_ref(), Some(&incoming), "{row:?}");
        } else {
            assert!(index.depth_limited(), "{row:?}");
            assert_eq!(index.index(), &incoming, "{row:?}");
        }
    }
}

#[test]
fn injecting_an_index_beyond_the_limit() {
    use dei_propagator::rejection::{self, Event};
    use dei_propagator::{DeiContextExt, DeiPropagator, inject_with_index};
    use opentelemetry::Context;
    use opentelemetry::propagation::TextMapPropagator;
    use std::collections::HashMap;
    let _counting = DEPTH_LIMITED.lock().unwrap_or_else(|p| p.into_inner());
    let element = Index::decode("1.chSN83lZIds1").expect("element").elements()[0];
    for row in table("Injecting an index beyond the limit") {
        let [given, written, what, counted] = &row[..] else {
            panic!("{row:?}")
        };
        let given = Index::from_elements(vec![element; given.parse().expect("depth")]);
        let written = Index::from_elements(vec![element; written.parse().expect("depth")]);
        match what.as_str() {
            "as given" => assert_eq!(written, given, "{row:?}"),
            _ => assert!(what.starts_with("its first") && given.starts_with(&written), "{row:?}"),
        }
        let before = rejection::event_total(Event::DepthLimited);
        // through a context value, and as an outgoing call's index: both carriers
        let mut by_context = HashMap::new();
        DeiPropagator::new().inject_context(&Context::new().with_dei_index(given.clone()), &mut by_context);
        let mut by_call = HashMap::new();
        inject_with_index(&DeiPropagator::new(), &Context::new(), &given, &mut by_call);
        let grew = rejection::event_total(Event::DepthLimited) - before;
        for headers in [&by_context, &by_call] {
            assert_eq!(headers.get("dei"), Some(&written.encode()), "{row:?}");
            assert_eq!(
                headers.get("baggage"),
                Some(&format!("dei={}", written.encode())),
                "{row:?}"
            );
            assert_eq!(Index::decode(&written.encode()), Ok(written.clone()), "{row:?}");
        }
        let expected = if counted == "depth_limited" {
            2
        } else {
            assert!(counted.is_empty(), "{row:?}");
            0
        };
        assert_eq!(grew, expected, "{row:?}: counted once per call injected");
    }
}

/// An index in the index grammar, except that a count may be 0 (which [`Index::decode`] rejects).
fn index_by_hand(text: &str) -> Index {
    let elements = text.strip_prefix('1').unwrap_or_else(|| panic!("{text}"));
    (elements.split('.').skip(1))
        .map(|part| {
            let (digest, count) = part.split_at(11);
            let digest = Index::decode(&format!("1.{digest}1"))
                .unwrap_or_else(|e| panic!("{part}: {e}"))
                .elements()[0]
                .digest;
            let (count, preliminary) = count.strip_suffix('~').map_or((count, false), |c| (c, true));
            let element = Element::new(digest, count.parse().unwrap_or_else(|_| panic!("{part}")));
            if preliminary { element.preliminary() } else { element }
        })
        .collect()
}

#[test]
fn injecting_an_index_with_a_count_of_0() {
    use dei_propagator::rejection::{self, Event};
    use dei_propagator::{DeiContextExt, DeiPropagator, inject_with_index, inject_with_index_wire};
    use opentelemetry::Context;
    use opentelemetry::propagation::TextMapPropagator;
    use std::collections::HashMap;
    let _counting = DEPTH_LIMITED.lock().unwrap_or_else(|p| p.into_inner());
    for row in table("Injecting an index with a count of 0") {
        let [given, written, counted] = &row[..] else {
            panic!("{row:?}")
        };
        let (given, written) = (expand(given), expand(written));
        let index = index_by_hand(&given);
        assert_eq!(index.encode(), given, "{row:?}");
        let read = Index::decode(&written).unwrap_or_else(|e| panic!("{row:?}: a receiver reads what is written: {e}"));
        assert!(index.starts_with(&read), "{row:?}: a prefix of the index given");
        let zero = |index: &Index| index.elements().iter().any(|e| e.count == 0);
        assert_eq!(
            Index::decode(&given).is_ok(),
            !zero(&index) && index.depth() <= 64,
            "{row:?}"
        );
        let before = [Event::ZeroCount, Event::DepthLimited].map(rejection::event_total);
        // through a context value, as an outgoing call's index, and with its wire form: both carriers
        let mut by_context = HashMap::new();
        DeiPropagator::new().inject_context(&Context::new().with_dei_index(index.clone()), &mut by_context);
        let mut by_call = HashMap::new();
        inject_with_index(&DeiPropagator::new(), &Context::new(), &index, &mut by_call);
        let mut by_wire = HashMap::new();
        inject_with_index_wire(&DeiPropagator::new(), &Context::new(), &index, &given, &mut by_wire);
        let after = [Event::ZeroCount, Event::DepthLimited].map(rejection::event_total);
        for headers in [&by_context, &by_call, &by_wire] {
            assert_eq!(headers.get("dei"), Some(&written), "{row:?}");
            assert_eq!(headers.get("baggage"), Some(&format!("dei={written}")), "{row:?}");
        }
        let expected = match counted.as_str() {
            "zero_count" => [3, 0],
            "depth_limited" => [0, 3],
            "" => {
                assert_eq!(written, given, "{row:?}");
                [0, 0]
            }
            _ => panic!("{row:?}"),
        };
        assert_eq!(
            [0, 1].map(|i| after[i] - before[i]),
            expected,
            "{row:?}: counted once per call injected"
        );
    }
}

/// A fault as the table writes it, in the fault grammar but unchecked: `g17` is gRPC code 17.
fn fault_by_hand(text: &str) -> Fault {
    let number = |digits: &str| digits.parse::<u64>().unwrap_or_else(|_| panic!("{text}"));
    match text.split_at(1) {
        ("g", n) => Fault::Grpc(number(n) as u8),
        ("h", n) => Fault::Http(number(n) as u16),
        ("c", "") => Fault::Connection,
        ("l", n) => Fault::Latency(std::time::Duration::from_millis(number(n))),
        _ => panic!("{text}"),
    }
}

#[test]
fn injecting_a_fault_plan_beyond_the_limits() {
    use dei_propagator::rejection::{self, Event};
    use dei_propagator::{DeiContextExt, DeiPropagator, PlanLimits, inject_with_index};
    use opentelemetry::Context;
    use opentelemetry::propagation::TextMapPropagator;
    use std::collections::HashMap;
    let call = Index::decode("1.chSN83lZIds1").expect("index");
    let element = call.elements()[0];
    for row in table("Injecting a fault plan beyond the limits") {
        let [entries, depth, fault, bytes, written, counted] = &row[..] else {
            panic!("{row:?}")
        };
        let (entries, depth): (u32, usize) = (entries.parse().expect("entries"), depth.parse().expect("depth"));
        let fault = fault_by_hand(fault);
        let plan = FaultPlan::new(
            (1..=entries)
                .map(|k| {
                    let mut elements = vec![element; depth];
                    if let Some(last) = elements.last_mut() {
                        last.count = k;
                    }
                    (Index::from_elements(elements), fault)
                })
                .collect(),
        );
        assert_eq!(plan.encode().len().to_string(), *bytes, "{row:?}");
        let before = rejection::event_total(Event::FaultPlanNotSent);
        // through a context value, and as an outgoing call's index: both carriers
        let mut by_context = HashMap::new();
        let cx = Context::new().with_fault_plan(plan.clone());
        DeiPropagator::new().inject_context(&cx.with_dei_index(call.clone()), &mut by_context);
        let mut by_call = HashMap::new();
        inject_with_index(&DeiPropagator::new(), &cx, &call, &mut by_call);
        let grew = rejection::event_total(Event::FaultPlanNotSent) - before;
        for headers in [&by_context, &by_call] {
            assert_eq!(headers.get("dei"), Some(&call.encode()), "{row:?}");
            match written.as_str() {
                "as given" => {
                    assert_eq!(headers.get("dei-faults"), Some(&plan.encode()), "{row:?}");
                    assert_eq!(
                        headers.get("baggage"),
                        Some(&format!("dei={},dei-faults={}", call.encode(), plan.encode())),
                        "{row:?}"
                    );
                    assert_eq!(FaultPlan::decode(&plan.encode()), Ok(plan.clone()), "{row:?}");
                }
                _ => {
                    assert!(written.is_empty(), "{row:?}");
                    assert_eq!(headers.get("dei-faults"), None, "{row:?}");
                    assert_eq!(
                        headers.get("baggage"),
                        Some(&format!("dei={}", call.encode())),
                        "{row:?}"
                    );
                    assert!(
                        FaultPlan::decode(&plan.encode()).is_err(),
                        "{row:?}: a receiver rejects it"
                    );
                    assert!(plan.check_with(&PlanLimits::default()).is_err(), "{row:?}");
                }
            }
        }
        let expected = if counted == "fault_plan_not_sent" {
            2
        } else {
            assert!(counted.is_empty(), "{row:?}");
            0
        };
        assert_eq!(grew, expected, "{row:?}: counted once per call injected");
    }
}

#[test]
fn injecting_a_latency_the_wire_does_not_carry() {
    use dei_propagator::rejection::{self, Event};
    use dei_propagator::{DeiContextExt, DeiPropagator, inject_with_index};
    use opentelemetry::Context;
    use opentelemetry::propagation::TextMapPropagator;
    use std::collections::HashMap;
    use std::time::Duration;
    let call = Index::decode("1.chSN83lZIds1").expect("index");
    for row in table("Injecting a latency the wire does not carry") {
        let [given, written, counted] = &row[..] else {
            panic!("{row:?}")
        };
        let latency = match given.split_once(' ') {
            Some((ms, "ms")) => Duration::from_millis(ms.parse().expect("ms")),
            Some((us, "µs")) => Duration::from_micros(us.parse().expect("µs")),
            _ => panic!("{row:?}"),
        };
        let plan = FaultPlan::new(vec![(call.clone(), Fault::Latency(latency))]);
        let before = rejection::event_total(Event::LatencyClamped);
        let mut by_context = HashMap::new();
        let cx = Context::new().with_fault_plan(plan.clone());
        DeiPropagator::new().inject_context(&cx.with_dei_index(call.clone()), &mut by_context);
        let mut by_call = HashMap::new();
        inject_with_index(&DeiPropagator::new(), &cx, &call, &mut by_call);
        let grew = rejection::event_total(Event::LatencyClamped) - before;
        for headers in [&by_context, &by_call] {
            assert_eq!(headers.get("dei-faults"), Some(written), "{row:?}");
            assert!(FaultPlan::decode(written).is_ok(), "{row:?}: a receiver reads it");
        }
        // a record of the plan (`encode`) is its text, counted; `Display` (a log line's) is the same text, uncounted
        let before = rejection::event_total(Event::LatencyClamped);
        let record = plan.encode();
        let recorded = rejection::event_total(Event::LatencyClamped) - before;
        assert_eq!(&record, written, "{row:?}");
        let before = rejection::event_total(Event::LatencyClamped);
        assert_eq!(&format!("{plan} {plan}"), &format!("{written} {written}"), "{row:?}");
        assert_eq!(
            rejection::event_total(Event::LatencyClamped),
            before,
            "{row:?}: formatting counts nothing"
        );
        let expected = if counted == "latency_clamped" {
            assert!(!Fault::Latency(latency).is_valid(), "{row:?}");
            2
        } else {
            assert!(counted.is_empty() && Fault::Latency(latency).is_valid(), "{row:?}");
            0
        };
        assert_eq!(grew, expected, "{row:?}: counted once per call injected");
        assert_eq!(recorded, expected / 2, "{row:?}: counted once per record written");
    }
}

#[test]
fn faults_as_a_caller_sees_them_are_valid_faults() {
    // The outcomes are checked against real clients in dei-instrumentation/tests/hostile.rs; here, that every
    // fault of the table is one a plan can carry.
    for row in table("Faults as a caller sees them") {
        let fault: Fault = row[0].parse().unwrap_or_else(|()| panic!("{row:?}"));
        assert!(fault.is_valid(), "{row:?}");
        let plan = FaultPlan::new(vec![(Index::root(), fault)]);
        assert_eq!(FaultPlan::decode(&plan.encode()), Ok(plan));
    }
}
