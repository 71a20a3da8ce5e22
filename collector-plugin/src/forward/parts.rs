//! A request body sent as the buffers it is made of: the combined export request's parts go to the
//! connection as they are, one data frame each, instead of being copied into one buffer first (a copy of
//! every forwarded byte, and a large block allocated and freed per request).

use bytes::Bytes;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The gRPC message prefix of an uncompressed message of `len` bytes: flag 0, then the length, big endian.
/// `None` when the message is too long for gRPC's 32-bit length.
pub fn grpc_prefix(len: usize) -> Option<Bytes> {
    let len = u32::try_from(len).ok()?;
    let mut prefix = [0u8; 5];
    prefix[1..].copy_from_slice(&len.to_be_bytes());
    Some(Bytes::copy_from_slice(&prefix))
}

/// An HTTP body of buffers sent in order, with its exact length known up front.
#[derive(Debug, Default)]
pub struct PartsBody {
    parts: VecDeque<Bytes>,
    remaining: u64,
}

impl PartsBody {
    /// A body of these buffers, in order (empty ones are skipped).
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Self {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        PartsBody { parts, remaining }
    }
}

impl http_body::Body for PartsBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        Poll::Ready(this.parts.pop_front().map(|part| {
            this.remaining -= part.len() as u64;
            Ok(http_body::Frame::data(part))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_body_is_its_parts_in_order() {
        let body = PartsBody::new([Bytes::from_static(b"ab"), Bytes::new(), Bytes::from_static(b"cde")]);
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(5));
        let mut frames = Vec::new();
        let mut body = body;
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames, [Bytes::from_static(b"ab"), Bytes::from_static(b"cde")]);
        assert!(http_body::Body::is_end_stream(&body));
    }

    #[test]
    fn the_grpc_prefix_is_an_uncompressed_flag_and_a_big_endian_length() {
        assert_eq!(&grpc_prefix(0x0102_0304).unwrap()[..], [0, 1, 2, 3, 4]);
        assert_eq!(&grpc_prefix(0).unwrap()[..], [0, 0, 0, 0, 0]);
        assert!(grpc_prefix(u32::MAX as usize + 1).is_none());
    }
}
