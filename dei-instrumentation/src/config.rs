//! Configuration shared by every layer and middleware of a service.

use crate::grpc::methods::{MethodKind, MethodKinds};
use crate::stack::{StackCapturer, StackConfig, StackMode};
use dei_propagator::Instantiation;
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that chooses [`Faults`] when the code does not: `1`, `true` or `accept` for
/// [`Faults::Accept`], `relay` for [`Faults::Relay`], `0`, `false`, `refuse`, empty or unset for
/// [`Faults::Refuse`] (case and surrounding spaces ignored). For test deployments; any other value is refused
/// with a warning.
pub const ACCEPT_FAULTS_ENV: &str = "DEI_ACCEPT_FAULTS";

/// What a service's layers do with fault plans (`dei-faults`). A caller that can reach a service can send a
/// plan; only a service whose operator enabled it acts on one. GUIDE.md, "Production", has the three roles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Faults {
    /// The default: a plan that comes with a request is dropped (counted as
    /// [`Event::FaultPlanDropped`](dei_propagator::rejection::Event::FaultPlanDropped) and logged, rate-limited;
    /// the request is served). A plan set by the service's own code is relayed to its callees but not applied
    /// here.
    #[default]
    Refuse,
    /// A middle service: plans from callers are passed on to callees, so that a test can reach a deeper
    /// service that accepts them, but are not applied here (a plan entry naming one of this service's calls is
    /// counted as [`Event::FaultNotApplied`](dei_propagator::rejection::Event::FaultNotApplied)).
    Relay,
    /// A target: plans are applied to this service's calls (latency up to
    /// [`DeiConfig::max_latency`]) and relayed to its callees.
    Accept,
}

impl Faults {
    /// The setting an [`ACCEPT_FAULTS_ENV`] value asks for; `None` for a value it does not know. It takes `1`,
    /// `true`, `accept`; `relay`; `0`, `false`, `refuse` and the empty string, in any case, with surrounding
    /// spaces trimmed.
    ///
    /// ```
    /// use dei_instrumentation::config::Faults;
    /// assert_eq!(Faults::from_env_value("1"), Some(Faults::Accept));
    /// assert_eq!(Faults::from_env_value("relay"), Some(Faults::Relay));
    /// assert_eq!(Faults::from_env_value("0"), Some(Faults::Refuse));
    /// assert_eq!(Faults::from_env_value(" True "), Some(Faults::Accept));
    /// assert_eq!(Faults::from_env_value(""), Some(Faults::Refuse));
    /// assert_eq!(Faults::from_env_value("yes please"), None);
    /// ```
    pub fn from_env_value(value: &str) -> Option<Faults> {
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "accept" => Some(Faults::Accept),
            "relay" => Some(Faults::Relay),
            "" | "0" | "false" | "refuse" => Some(Faults::Refuse),
            _ => None,
        }
    }

    /// The setting [`ACCEPT_FAULTS_ENV`] asks for: [`Faults::Refuse`] when it is unset or unknown (the latter
    /// with a warning).
    pub fn from_env() -> Faults {
        let Ok(value) = std::env::var(ACCEPT_FAULTS_ENV) else {
            return Faults::Refuse;
        };
        Faults::from_env_value(&value).unwrap_or_else(|| {
            tracing::warn!(
                "dei: {ACCEPT_FAULTS_ENV}={value:?} is not 1, true, accept, relay, 0, false, refuse or empty (in \
                 any case); fault plans are refused"
            );
            Faults::Refuse
        })
    }

    /// True when this service applies plans to its own calls.
    pub fn applies(self) -> bool {
        self == Faults::Accept
    }

    /// A short stable name: `refuse`, `relay` or `accept`.
    pub fn as_str(self) -> &'static str {
        match self {
            Faults::Refuse => "refuse",
            Faults::Relay => "relay",
            Faults::Accept => "accept",
        }
    }
}

/// What a server layer does with the `dei` and `dei-faults` values a request arrives with. Set per layer
/// (`DeiServerLayer::incoming`, feature `tonic`; `DeiHttpServerLayer::incoming`, feature `axum`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Incoming {
    /// The default, for services whose callers are other services of the system: the incoming index is the
    /// prefix of the request's scope, and the fault plan is handled as [`Faults`] says.
    #[default]
    Trust,
    /// A trust boundary (a service that receives traffic from outside): incoming `dei` and `dei-faults`
    /// values, in headers and in baggage, are dropped (counted as
    /// [`Event::DroppedAtEdge`](dei_propagator::rejection::Event::DroppedAtEdge)) and every request starts a
    /// fresh root scope. The trace context and the other baggage entries are kept. The service's own calls
    /// still get indexes, under that root.
    Restart,
}

/// What the layers do for an RPC whose trace is not sampled: its span (the layer's client or server span) is
/// neither sampled nor recording. Sampled traces, and requests that carry a fault plan, always get the full
/// path. Set with [`DeiConfigBuilder::unsampled`]; GUIDE.md, "Sampling", compares the two.
///
/// A layer with no OpenTelemetry span at all (no tracing-opentelemetry layer in the subscriber) takes the
/// [`Unsampled::Lean`] path whatever the setting: nothing could be recorded, and the index is still propagated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Unsampled {
    /// The default: the index is computed and propagated exactly as on a sampled trace (stack, payload
    /// digest, scope counts: the index is the same whether or not the trace is sampled), and no span work is
    /// done — no hex strings, readable frames, attribute values or stream message events. A downstream
    /// service that samples on its own (a different sampler, a new root) still gets the right prefix.
    #[default]
    Lean,
    /// Nothing at all when the trace is not sampled and the request carries no fault plan: no stack capture,
    /// no payload digest, no index, no `dei` header, no request scope on servers. The span and the trace
    /// context are handled as by plain OpenTelemetry layers. What it gives up: a downstream service that
    /// samples on its own sees no prefix (its calls start new roots), and the indexes under an unsampled
    /// request are not issued, so a fault plan made from them cannot be recreated by sampling alone.
    Off,
}

impl Unsampled {
    /// A short stable name: `lean` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unsampled::Lean => "lean",
            Unsampled::Off => "off",
        }
    }
}

/// Where the readable frames of a call stack (`dei.stack`) are recorded. The digest, `dei.stack.digest`, is
/// on every client span whatever the setting. Set with [`DeiConfigBuilder::stack_frames`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StackFrames {
    /// The default: on the first sampled client span that carries a stack digest, once per distinct digest
    /// per process. A backend keeps the digest→frames dictionary (dei-collector does).
    #[default]
    OncePerStack,
    /// On every sampled client span: for backends that sample spans away after export (tail sampling), where
    /// the one span with the frames may be dropped.
    EverySpan,
    /// Never (`dei.stack.digest` only).
    Never,
}

/// Why a configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A protobuf descriptor set could not be decoded.
    #[error("malformed file descriptor set: {0}")]
    DescriptorSet(#[from] prost::DecodeError),
}

/// What the layers do: which instantiation they compute indexes under, how they capture stacks, what they
/// record on spans, which gRPC methods stream. Cheap to clone: one configuration is shared by all layers.
///
/// ```
/// use dei_instrumentation::{DeiConfig, Faults, MethodKind};
/// use std::time::Duration;
/// let config = DeiConfig::builder()
///     .record_stack(false)
///     .payload_digest_cap(16 * 1024)
///     .streaming_method("/deitest.Leaf/Chat", MethodKind::Bidi)
///     .faults(Faults::Accept) // a test deployment: apply fault plans (off by default)
///     .max_latency(Duration::from_secs(5))
///     .build();
/// assert_eq!(config.payload_digest_cap(), 16 * 1024);
/// assert_eq!(config.method_kind("/deitest.Leaf/Chat"), Some(MethodKind::Bidi));
/// assert_eq!((config.faults(), config.max_latency()), (Faults::Accept, Duration::from_secs(5)));
/// ```
#[derive(Clone, Debug)]
pub struct DeiConfig {
    inner: Arc<ConfigInner>,
}

#[derive(Debug)]
struct ConfigInner {
    instantiation: Instantiation,
    stack: StackCapturer,
    stack_frames: StackFrames,
    unsampled: Unsampled,
    record_payloads: bool,
    payload_digest_cap: usize,
    methods: MethodKinds,
    faults: Faults,
    max_latency: Duration,
}

impl Default for DeiConfig {
    fn default() -> Self {
        DeiConfig::builder().build()
    }
}

impl DeiConfig {
    /// A builder with the defaults: the full DEI, detected stack mode, `dei.stack` recorded once per distinct
    /// stack, unsampled traces indexed without span work ([`Unsampled::Lean`]), raw payloads never recorded, 64 KiB of an HTTP body digested, no declared streaming methods, fault plans refused
    /// (unless [`ACCEPT_FAULTS_ENV`] says otherwise) and latency faults capped at 30 s.
    pub fn builder() -> DeiConfigBuilder {
        DeiConfigBuilder::default()
    }

    /// The instantiation of root scopes and of the scopes servers open.
    pub fn instantiation(&self) -> &Instantiation {
        &self.inner.instantiation
    }

    /// The stack capturer (its cache is shared by every clone of this configuration).
    pub fn stack_capturer(&self) -> &StackCapturer {
        &self.inner.stack
    }

    /// The stack mode in use.
    pub fn stack_mode(&self) -> StackMode {
        self.inner.stack.mode()
    }

    /// Whether the readable stack goes on spans as `dei.stack` at all (see [`DeiConfig::stack_frames`]).
    pub fn record_stack(&self) -> bool {
        self.inner.stack_frames != StackFrames::Never
    }

    /// Where the readable stack goes on spans.
    pub fn stack_frames(&self) -> StackFrames {
        self.inner.stack_frames
    }

    /// What the layers do for traces that are not sampled.
    pub fn unsampled(&self) -> Unsampled {
        self.inner.unsampled
    }

    /// Whether raw payloads go on spans as `dei.payload` (off unless turned on).
    pub fn record_payloads(&self) -> bool {
        self.inner.record_payloads
    }

    /// How many bytes of an HTTP body are digested at most.
    pub fn payload_digest_cap(&self) -> usize {
        self.inner.payload_digest_cap
    }

    /// The declared kind of a gRPC method, by path (`/pkg.Service/Method`, leading `/` optional).
    pub fn method_kind(&self, path: &str) -> Option<MethodKind> {
        self.inner.methods.get(path)
    }

    /// What the layers do with fault plans.
    pub fn faults(&self) -> Faults {
        self.inner.faults
    }

    /// The longest latency fault applied; longer ones are shortened to it (and counted as
    /// [`Event::LatencyClamped`](dei_propagator::rejection::Event::LatencyClamped)).
    pub fn max_latency(&self) -> Duration {
        self.inner.max_latency
    }

    /// The gRPC method at `path` (its signature, service and method names), made once per method.
    #[cfg(feature = "tonic")]
    pub(crate) fn grpc_method(&self, path: &str) -> crate::grpc::signatures::GrpcMethod {
        crate::grpc::signatures::GrpcMethod::at(path, &self.inner.methods)
    }
}

/// Builds a [`DeiConfig`].
#[derive(Debug)]
pub struct DeiConfigBuilder {
    instantiation: Instantiation,
    stack: StackConfig,
    stack_frames: StackFrames,
    unsampled: Unsampled,
    record_payloads: bool,
    payload_digest_cap: usize,
    methods: MethodKinds,
    faults: Option<Faults>,
    max_latency: Duration,
}

/// The default cap on latency faults.
pub const DEFAULT_MAX_LATENCY: Duration = Duration::from_secs(30);

impl Default for DeiConfigBuilder {
    fn default() -> Self {
        DeiConfigBuilder {
            instantiation: Instantiation::dei(),
            stack: StackConfig::default(),
            stack_frames: StackFrames::default(),
            unsampled: Unsampled::default(),
            record_payloads: false,
            payload_digest_cap: 64 * 1024,
            methods: MethodKinds::default(),
            faults: None,
            max_latency: DEFAULT_MAX_LATENCY,
        }
    }
}

impl DeiConfigBuilder {
    /// The instantiation (default: the full DEI).
    pub fn instantiation(mut self, instantiation: Instantiation) -> Self {
        self.instantiation = instantiation;
        self
    }

    /// Stack capture settings: allow and deny lists, maximum depth, workspace root, forced mode.
    pub fn stack(mut self, stack: StackConfig) -> Self {
        self.stack = stack;
        self
    }

    /// Whether to record `dei.stack` (readable frames) on spans: `true` is [`StackFrames::OncePerStack`] (the
    /// default), `false` is [`StackFrames::Never`]; `dei.stack.digest` is always recorded.
    pub fn record_stack(mut self, on: bool) -> Self {
        self.stack_frames = if on {
            StackFrames::OncePerStack
        } else {
            StackFrames::Never
        };
        self
    }

    /// Where `dei.stack` (readable frames) is recorded: once per distinct stack (the default), on every span,
    /// or never.
    pub fn stack_frames(mut self, frames: StackFrames) -> Self {
        self.stack_frames = frames;
        self
    }

    /// What the layers do for traces that are not sampled: [`Unsampled::Lean`] (the default) or
    /// [`Unsampled::Off`].
    pub fn unsampled(mut self, unsampled: Unsampled) -> Self {
        self.unsampled = unsampled;
        self
    }

    /// Whether to record raw payloads (`dei.payload`, lossy UTF-8, at most 1 KiB) on spans. Off by default:
    /// payloads may hold personal data.
    pub fn record_payloads(mut self, on: bool) -> Self {
        self.record_payloads = on;
        self
    }

    /// How many bytes of an HTTP body are digested at most (default 64 KiB). The body itself always passes
    /// on untouched.
    pub fn payload_digest_cap(mut self, bytes: usize) -> Self {
        self.payload_digest_cap = bytes;
        self
    }

    /// Declares the kind of a gRPC method by path (`/pkg.Service/Method`).
    pub fn streaming_method(mut self, path: &str, kind: MethodKind) -> Self {
        self.methods.insert(path, kind);
        self
    }

    /// Declares every method of every service in an encoded `FileDescriptorSet` (as written by
    /// `tonic_prost_build::configure().file_descriptor_set_path(..)` or by `protox`).
    pub fn methods_from_descriptor_set(mut self, encoded: &[u8]) -> Result<Self, ConfigError> {
        self.methods.extend_from_descriptor_set(encoded)?;
        Ok(self)
    }

    /// What the layers do with fault plans: [`Faults::Refuse`] unless set here or through
    /// [`ACCEPT_FAULTS_ENV`] (a setting here wins over the environment). Tests, demos and test deployments
    /// enable plans with `.faults(Faults::Accept)`; GUIDE.md, "Production", says what each setting exposes.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// The longest latency fault applied (default 30 s). A plan may ask for up to 999,999 ms (the wire
    /// limit); longer than this cap, the call waits the cap and the clamp is counted.
    pub fn max_latency(mut self, cap: Duration) -> Self {
        self.max_latency = cap;
        self
    }

    /// The configuration.
    pub fn build(self) -> DeiConfig {
        DeiConfig {
            inner: Arc::new(ConfigInner {
                instantiation: self.instantiation,
                stack: StackCapturer::new(self.stack),
                stack_frames: self.stack_frames,
                unsampled: self.unsampled,
                record_payloads: self.record_payloads,
                payload_digest_cap: self.payload_digest_cap,
                methods: self.methods,
                faults: self.faults.unwrap_or_else(Faults::from_env),
                max_latency: self.max_latency,
            }),
        }
    }
}
