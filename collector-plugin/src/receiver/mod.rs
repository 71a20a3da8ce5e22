//! OTLP receivers: gRPC ([`grpc`]) and HTTP ([`http`]).

pub mod grpc;
pub mod http;
