//! Incremental parsing of gRPC length-prefixed messages: a 1-byte compressed flag, a 4-byte big-endian length,
//! then the message. Digests are over the message bytes without the 5-byte header (docs/wire-format.md); a
//! compressed message is digested as sent.

use dei_propagator::{PayloadDigest, PayloadHasher};

/// The gRPC message header length.
pub(crate) const HEADER_LEN: usize = 5;

/// Splits a byte stream into messages and digests each one, without buffering the messages themselves.
#[derive(Debug, Default)]
pub(crate) struct MessageDigester {
    header: [u8; HEADER_LEN],
    header_filled: usize,
    remaining: usize,
    hasher: Option<PayloadHasher>,
    keep: Option<Vec<u8>>,
    keep_cap: usize,
}

/// One complete message.
#[derive(Debug)]
pub(crate) struct Digested {
    pub(crate) digest: PayloadDigest,
    /// The first bytes of the message, when asked for (raw payload recording).
    pub(crate) prefix: Option<Vec<u8>>,
}

impl MessageDigester {
    /// A digester that also keeps the first `keep_cap` bytes of each message (0: none).
    pub(crate) fn new(keep_cap: usize) -> Self {
        MessageDigester {
            keep_cap,
            ..Default::default()
        }
    }

    /// Feeds bytes; calls `done` for each message completed by them.
    pub(crate) fn feed(&mut self, bytes: &[u8], mut done: impl FnMut(Digested)) {
        self.feed_at(bytes, |m, _| done(m));
    }

    /// Feeds bytes; calls `done` for each message completed by them, with the offset in `bytes` just past it.
    pub(crate) fn feed_at(&mut self, mut bytes: &[u8], mut done: impl FnMut(Digested, usize)) {
        let total = bytes.len();
        loop {
            if self.hasher.is_none() {
                if bytes.is_empty() {
                    return;
                }
                let take = (HEADER_LEN - self.header_filled).min(bytes.len());
                self.header[self.header_filled..self.header_filled + take].copy_from_slice(&bytes[..take]);
                self.header_filled += take;
                bytes = &bytes[take..];
                if self.header_filled < HEADER_LEN {
                    return;
                }
                let len = u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]);
                self.remaining = len as usize;
                self.header_filled = 0;
                self.hasher = Some(PayloadHasher::new());
                self.keep = (self.keep_cap > 0).then(Vec::new);
            }
            let take = self.remaining.min(bytes.len());
            if let Some(h) = self.hasher.as_mut() {
                h.update(&bytes[..take]);
            }
            if let Some(k) = self.keep.as_mut() {
                let room = self.keep_cap.saturating_sub(k.len()).min(take);
                k.extend_from_slice(&bytes[..room]);
            }
            self.remaining -= take;
            bytes = &bytes[take..];
            if self.remaining > 0 {
                return; // the input ran out inside this message
            }
            if let Some(h) = self.hasher.take() {
                done(
                    Digested {
                        digest: h.finish(),
                        prefix: self.keep.take(),
                    },
                    total - bytes.len(),
                );
            }
        }
    }

    /// True when no message is partly read.
    #[cfg(test)]
    pub(crate) fn at_boundary(&self) -> bool {
        self.hasher.is_none() && self.header_filled == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn split_anywhere() {
        let mut all = frame(b"hello");
        all.extend(frame(b""));
        all.extend(frame(b"world!"));
        for cut in 0..all.len() {
            let mut d = MessageDigester::new(3);
            let mut out = Vec::new();
            d.feed(&all[..cut], |m| out.push(m));
            d.feed(&all[cut..], |m| out.push(m));
            assert!(d.at_boundary());
            let digests: Vec<_> = out.iter().map(|m| m.digest).collect();
            assert_eq!(
                digests,
                [
                    PayloadDigest::of(b"hello"),
                    PayloadDigest::of(b""),
                    PayloadDigest::of(b"world!")
                ]
            );
            assert_eq!(out[2].prefix.as_deref(), Some(&b"wor"[..]));
        }
    }

    #[test]
    fn offsets_point_past_each_message() {
        let mut all = frame(b"hello");
        all.extend(frame(b"world!"));
        let mut d = MessageDigester::new(0);
        let mut ends = Vec::new();
        d.feed_at(&all[..7], |_, end| ends.push(end));
        assert!(ends.is_empty());
        d.feed_at(&all[7..], |_, end| ends.push(end));
        assert_eq!(ends, [10 - 7, 21 - 7]);
    }
}
