//! Configuration shared by every layer and middleware of a service.

use crate::grpc::methods::{MethodKind, MethodKinds};
use crate::grpc::signatures::GrpcSignatures;
use crate::stack::{StackCapturer, StackConfig, StackMode};
use dei_propagator::Instantiation;
use std::sync::Arc;

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
/// use dei_instrumentation::{DeiConfig, MethodKind};
/// let config = DeiConfig::builder()
///     .record_stack(false)
///     .payload_digest_cap(16 * 1024)
///     .streaming_method("/deitest.Leaf/Chat", MethodKind::Bidi)
///     .build();
/// assert_eq!(config.payload_digest_cap(), 16 * 1024);
/// assert_eq!(config.method_kind("/deitest.Leaf/Chat"), Some(MethodKind::Bidi));
/// ```
#[derive(Clone, Debug)]
pub struct DeiConfig {
    inner: Arc<ConfigInner>,
}

#[derive(Debug)]
struct ConfigInner {
    instantiation: Instantiation,
    stack: StackCapturer,
    record_stack: bool,
    record_payloads: bool,
    payload_digest_cap: usize,
    methods: MethodKinds,
    signatures: GrpcSignatures,
}

impl Default for DeiConfig {
    fn default() -> Self {
        DeiConfig::builder().build()
    }
}

impl DeiConfig {
    /// A builder with the defaults: the full DEI, detected stack mode, `dei.stack` recorded, raw payloads
    /// never recorded, 64 KiB of an HTTP body digested, no declared streaming methods.
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

    /// Whether the readable stack goes on spans as `dei.stack`.
    pub fn record_stack(&self) -> bool {
        self.inner.record_stack
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

    /// The gRPC method at `path` (its signature, service and method names), made once per method.
    pub(crate) fn grpc_method(&self, path: &str) -> crate::grpc::signatures::GrpcMethod {
        self.inner.signatures.get(path, &self.inner.methods)
    }
}

/// Builds a [`DeiConfig`].
#[derive(Debug)]
pub struct DeiConfigBuilder {
    instantiation: Instantiation,
    stack: StackConfig,
    record_stack: bool,
    record_payloads: bool,
    payload_digest_cap: usize,
    methods: MethodKinds,
}

impl Default for DeiConfigBuilder {
    fn default() -> Self {
        DeiConfigBuilder {
            instantiation: Instantiation::dei(),
            stack: StackConfig::default(),
            record_stack: true,
            record_payloads: false,
            payload_digest_cap: 64 * 1024,
            methods: MethodKinds::default(),
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

    /// Whether to record `dei.stack` (readable frames) on spans; `dei.stack.digest` is always recorded.
    pub fn record_stack(mut self, on: bool) -> Self {
        self.record_stack = on;
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

    /// The configuration.
    pub fn build(self) -> DeiConfig {
        DeiConfig {
            inner: Arc::new(ConfigInner {
                instantiation: self.instantiation,
                stack: StackCapturer::new(self.stack),
                record_stack: self.record_stack,
                record_payloads: self.record_payloads,
                payload_digest_cap: self.payload_digest_cap,
                methods: self.methods,
                signatures: GrpcSignatures::default(),
            }),
        }
    }
}
