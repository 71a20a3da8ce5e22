//! A tonic codec that passes message bytes through untouched, so that the gRPC receiver gets a request's
//! bytes to forward byte for byte and reports decode errors as `INVALID_ARGUMENT` itself.

use bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Encodes and decodes [`Bytes`] as the raw protobuf message.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

/// [`RawCodec`]'s encoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

/// [`RawCodec`]'s decoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}
