//! Which gRPC methods stream.
//!
//! A tower layer sees an HTTP/2 request whose body is a stream of gRPC frames; neither the path, the headers
//! nor tonic's `GrpcMethod` extension (service and method names only) say whether the call is unary. tonic's
//! `Grpc::unary` wraps the message in a one-item stream and goes through the same `Grpc::streaming` as every
//! other kind. So the kinds are declared — one by one, or all at once from the protobuf descriptor set — and
//! undeclared methods are classified from their request body without ever waiting for it (see
//! `grpc::client`, feature `tonic`).

use prost::Message;
use std::collections::HashMap;

/// The kind of a gRPC method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MethodKind {
    /// One request, one response.
    Unary,
    /// A stream of requests, one response.
    ClientStreaming,
    /// One request, a stream of responses.
    ServerStreaming,
    /// Streams both ways.
    Bidi,
}

impl MethodKind {
    /// The kind from the descriptor flags.
    pub fn from_flags(client_streaming: bool, server_streaming: bool) -> Self {
        match (client_streaming, server_streaming) {
            (false, false) => MethodKind::Unary,
            (true, false) => MethodKind::ClientStreaming,
            (false, true) => MethodKind::ServerStreaming,
            (true, true) => MethodKind::Bidi,
        }
    }

    /// True for every kind but unary: the call gets a preliminary index (paper §4.2).
    pub fn is_streaming(self) -> bool {
        self != MethodKind::Unary
    }

    /// True when the caller sends a stream of messages.
    pub fn client_streams(self) -> bool {
        matches!(self, MethodKind::ClientStreaming | MethodKind::Bidi)
    }
}

/// Method kinds by path, without the leading `/`.
#[derive(Clone, Debug, Default)]
pub(crate) struct MethodKinds(HashMap<String, MethodKind>);

impl MethodKinds {
    pub(crate) fn insert(&mut self, path: &str, kind: MethodKind) {
        self.0.insert(path.trim_start_matches('/').to_string(), kind);
    }

    pub(crate) fn get(&self, path: &str) -> Option<MethodKind> {
        self.0.get(path.trim_start_matches('/')).copied()
    }

    pub(crate) fn extend_from_descriptor_set(&mut self, encoded: &[u8]) -> Result<(), prost::DecodeError> {
        let set = prost_types::FileDescriptorSet::decode(encoded)?;
        for file in &set.file {
            let package = file.package();
            for service in &file.service {
                let service_name = if package.is_empty() {
                    service.name().to_string()
                } else {
                    format!("{package}.{}", service.name())
                };
                for method in &service.method {
                    let kind = MethodKind::from_flags(method.client_streaming(), method.server_streaming());
                    self.insert(&format!("{service_name}/{}", method.name()), kind);
                }
            }
        }
        Ok(())
    }
}
