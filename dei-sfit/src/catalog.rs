//! The fault catalog: which faults each RPC is tested for, keyed by signature pattern (paper §2, "static
//! analysis").
//!
//! Rules are tried in order; the first whose pattern matches the RPC's signature gives its faults. Without a
//! matching rule, the protocol's defaults apply, as in Filibuster: gRPC `UNAVAILABLE` and
//! `DEADLINE_EXCEEDED`, HTTP 500, 502 and 503, and a connection error for both.
//!
//! **The test's own entry call is an RPC like any other**, and by default it is faulted too: the functional
//! test's first request runs through a DEI client layer, gets an index and is tested for the catalog's faults,
//! so the search includes executions where the test's own call fails before reaching the system. This is kept
//! on purpose: a test whose entry call fails must say so (return `Err`, or accept the failure when
//! [`TestRun::planned_on`](crate::TestRun::planned_on) says it was planned), and the entry call's fault sets
//! are part of the fault space the [`Oracle`](crate::Oracle) enumerates. To leave it out, exempt its method with
//! [`FaultCatalog::without`], which takes precedence over every other rule:
//!
//! ```
//! use dei_sfit::FaultCatalog;
//! let catalog = FaultCatalog::protocol_defaults().without("routeguide.RouteGuide/GetFeature");
//! assert!(catalog.faults_for("routeguide.RouteGuide/GetFeature").is_empty());
//! assert_eq!(catalog.faults_for("routeguide.RouteGuide/ListFeatures").len(), 3);
//! ```

use dei_propagator::Fault;
use serde::{Deserialize, Serialize};

/// A signature pattern: `*` matches any run of characters (including none); everything else matches itself.
///
/// ```
/// use dei_sfit::catalog::Pattern;
/// assert!(Pattern::new("cinema.Movies/*").matches("cinema.Movies/Get"));
/// assert!(Pattern::new("GET */bookings/*").matches("GET bookings.internal/bookings/7"));
/// assert!(!Pattern::new("cinema.Movies/*").matches("cinema.Users/Get"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(String);

impl Pattern {
    /// A pattern from its text.
    pub fn new(text: impl Into<String>) -> Self {
        Pattern(text.into())
    }

    /// The pattern's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when the whole of `signature` matches.
    pub fn matches(&self, signature: &str) -> bool {
        glob_match(self.0.as_bytes(), signature.as_bytes())
    }
}

/// Iterative wildcard match with single-star backtracking: linear in practice, never exponential.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The protocol of an RPC, told from its signature's form (`METHOD route` is HTTP, `pkg.Service/Method` gRPC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC.
    Grpc,
    /// HTTP.
    Http,
}

impl Protocol {
    /// The protocol of a `dei.signature`.
    ///
    /// ```
    /// use dei_sfit::catalog::Protocol;
    /// assert_eq!(Protocol::of("GET /users/{id}"), Protocol::Http);
    /// assert_eq!(Protocol::of("cinema.Users/Get"), Protocol::Grpc);
    /// ```
    pub fn of(signature: &str) -> Protocol {
        const METHODS: [&str; 9] = [
            "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT",
        ];
        match signature.split_once(' ') {
            Some((m, _)) if METHODS.contains(&m) => Protocol::Http,
            _ => Protocol::Grpc,
        }
    }

    /// Filibuster's default faults for the protocol.
    pub fn default_faults(self) -> Vec<Fault> {
        match self {
            Protocol::Grpc => vec![Fault::UNAVAILABLE, Fault::DEADLINE_EXCEEDED, Fault::Connection],
            Protocol::Http => vec![Fault::Http(500), Fault::Http(502), Fault::Http(503), Fault::Connection],
        }
    }
}

/// One catalog rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Which signatures it applies to.
    pub pattern: Pattern,
    /// The faults to test them for (empty: never fail them).
    pub faults: Vec<Fault>,
}

/// Which faults each RPC is tested for.
///
/// Every fault must be one a service carries out ([`Fault::is_valid`]): a gRPC code 1–16, an HTTP status
/// 200–599, a connection error, or a latency of whole milliseconds up to
/// [`MAX_LATENCY_MS`](dei_propagator::fault::MAX_LATENCY_MS). The constructors take any [`Fault`] (the fields are
/// public and a catalog can be read from JSON, whose fault text is already refused when out of range), and
/// [`Search::run`](crate::Search::run) refuses a catalog holding another one, such as `Fault::Grpc(17)`,
/// `Fault::Grpc(0)` or `Fault::Http(100)`, with [`SearchError::InvalidFault`](crate::SearchError::InvalidFault)
/// naming it before any execution runs ([`invalid_fault`](Self::invalid_fault) finds it): a search with it
/// would inject nothing.
///
/// ```
/// use dei_propagator::Fault;
/// use dei_sfit::FaultCatalog;
/// let catalog = FaultCatalog::protocol_defaults().with_rule("cinema.Movies/*", vec![Fault::Connection]);
/// assert_eq!(catalog.faults_for("cinema.Movies/Get"), vec![Fault::Connection]);
/// assert_eq!(catalog.faults_for("cinema.Users/Get").len(), 3);
/// assert_eq!(catalog.faults_for("GET /users").len(), 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCatalog {
    /// Rules, tried in order.
    pub rules: Vec<Rule>,
    /// Fall back to the protocol defaults when no rule matches (otherwise: no faults).
    pub protocol_defaults: bool,
}

impl FaultCatalog {
    /// No faults for any RPC: the start for a catalog built only from rules.
    ///
    /// ```
    /// use dei_propagator::Fault;
    /// use dei_sfit::FaultCatalog;
    /// let catalog = FaultCatalog::none().with_rule("cinema.Movies/*", vec![Fault::UNAVAILABLE]);
    /// assert_eq!(catalog.faults_for("cinema.Movies/Get"), vec![Fault::UNAVAILABLE]);
    /// assert!(catalog.faults_for("cinema.Users/Get").is_empty());
    /// ```
    pub fn none() -> Self {
        FaultCatalog {
            rules: Vec::new(),
            protocol_defaults: false,
        }
    }

    /// The protocol defaults and no rules.
    pub fn protocol_defaults() -> Self {
        FaultCatalog {
            rules: Vec::new(),
            protocol_defaults: true,
        }
    }

    /// One fault for every RPC (the paper's §5.1 setting: "a single connection error exception per RPC").
    pub fn single(fault: Fault) -> Self {
        FaultCatalog {
            rules: vec![Rule {
                pattern: Pattern::new("*"),
                faults: vec![fault],
            }],
            protocol_defaults: false,
        }
    }

    /// This catalog with one more rule, tried after the existing ones.
    pub fn with_rule(mut self, pattern: &str, faults: Vec<Fault>) -> Self {
        self.rules.push(Rule {
            pattern: Pattern::new(pattern),
            faults,
        });
        self
    }

    /// This catalog, never failing RPCs whose signature matches `pattern` (for example the test's own entry
    /// call, `pkg.Service/Method` or `GET */path`). The exemption goes before every existing rule, so it wins
    /// over them and over the protocol defaults.
    pub fn without(mut self, pattern: &str) -> Self {
        self.rules.insert(
            0,
            Rule {
                pattern: Pattern::new(pattern),
                faults: Vec::new(),
            },
        );
        self
    }

    /// The first fault of a rule that is not [`Fault::is_valid`], with the rule's position in
    /// [`rules`](Self::rules): a gRPC code outside 1–16, an HTTP status outside 200–599, or a latency not of
    /// whole milliseconds up to [`MAX_LATENCY_MS`](dei_propagator::fault::MAX_LATENCY_MS). No service carries
    /// such a fault out as planned (the propagator sends no plan holding an out-of-range code or status, and the
    /// layers do not carry one out in process either; a latency goes out shortened), so [`Search::run`](crate::Search::run) refuses a catalog that has one
    /// ([`SearchError::InvalidFault`](crate::SearchError::InvalidFault)) before anything runs. The protocol
    /// defaults are all valid.
    ///
    /// ```
    /// use dei_propagator::Fault;
    /// use dei_sfit::FaultCatalog;
    /// assert_eq!(FaultCatalog::protocol_defaults().invalid_fault(), None);
    /// let catalog = FaultCatalog::none().with_rule("a.B/*", vec![Fault::UNAVAILABLE, Fault::Grpc(17)]);
    /// assert_eq!(catalog.invalid_fault(), Some((0, Fault::Grpc(17))));
    /// assert_eq!(FaultCatalog::single(Fault::Http(100)).invalid_fault(), Some((0, Fault::Http(100))));
    /// ```
    pub fn invalid_fault(&self) -> Option<(usize, Fault)> {
        self.rules
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.faults.iter().find(|f| !f.is_valid()).map(|f| (i, *f)))
    }

    /// The faults for an RPC with this signature.
    pub fn faults_for(&self, signature: &str) -> Vec<Fault> {
        match self.rules.iter().find(|r| r.pattern.matches(signature)) {
            Some(rule) => rule.faults.clone(),
            None if self.protocol_defaults => Protocol::of(signature).default_faults(),
            None => Vec::new(),
        }
    }
}

impl Default for FaultCatalog {
    fn default() -> Self {
        FaultCatalog::protocol_defaults()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_vectors() {
        for (p, t, m) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abbbc", true),
            ("a*c", "abcd", false),
            ("*b*", "abc", true),
            ("a**", "a", true),
            ("", "", true),
            ("", "a", false),
            ("abc", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(Pattern::new(p).matches(t), m, "{p} vs {t}");
        }
    }

    #[test]
    fn first_rule_wins_and_empty_rule_exempts() {
        let c = FaultCatalog::protocol_defaults()
            .with_rule("health.*", vec![])
            .with_rule("*", vec![Fault::INTERNAL]);
        assert!(c.faults_for("health.Check/Get").is_empty());
        assert_eq!(c.faults_for("x.Y/Z"), vec![Fault::INTERNAL]);
    }

    #[test]
    fn a_catalog_read_from_json_cannot_hold_a_fault_no_service_carries_out() {
        let json =
            |fault: &str| format!(r#"{{"rules":[{{"pattern":"*","faults":["{fault}"]}}],"protocol_defaults":false}}"#);
        for bad in ["g17", "g0", "h100", "h600"] {
            assert!(serde_json::from_str::<FaultCatalog>(&json(bad)).is_err(), "{bad}");
        }
        let good: FaultCatalog = serde_json::from_str(&json("l1500")).expect("valid");
        assert_eq!(good.invalid_fault(), None);
    }

    #[test]
    fn without_wins_over_earlier_rules_and_none_has_no_faults() {
        let c = FaultCatalog::single(Fault::Connection).without("a.B/*");
        assert!(c.faults_for("a.B/C").is_empty());
        assert_eq!(c.faults_for("a.D/C"), vec![Fault::Connection]);
        assert!(FaultCatalog::none().faults_for("a.B/C").is_empty());
        assert!(FaultCatalog::none().faults_for("GET /x").is_empty());
    }
}
