//! A tonic codec that passes message bytes through untouched, so that a batch is forwarded byte for byte
//! and decode errors can be reported as `INVALID_ARGUMENT` by the receiver itself.

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

/// Encodes a combined export request given as its parts: the concatenation of encoded
/// `ExportTraceServiceRequest`s is one (protobuf appends repeated fields), so the parts are written one after
/// another straight into the gRPC frame, with no copy into a combined buffer first.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConcatCodec;

/// [`ConcatCodec`]'s encoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConcatEncoder;

impl Codec for ConcatCodec {
    type Encode = Vec<Bytes>;
    type Decode = Bytes;
    type Encoder = ConcatEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> ConcatEncoder {
        ConcatEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for ConcatEncoder {
    type Item = Vec<Bytes>;
    type Error = Status;

    fn encode(&mut self, parts: Vec<Bytes>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(parts.iter().map(Bytes::len).sum());
        for part in parts {
            dst.put(part);
        }
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
