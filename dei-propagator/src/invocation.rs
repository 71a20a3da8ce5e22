//! Invocation signatures `s(p)^t` (paper definition 3) and their digests under an instantiation.

use crate::digest::{PayloadDigest, StackDigest};
use crate::index::ElementDigest;
use crate::instantiation::Instantiation;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Domain separation for element digests (see docs/wire-format.md).
const ELEMENT_DOMAIN: &[u8] = b"dei/v1\0";

/// An invocation signature: the RPC's signature, the digest of its payload and the digest of its call stack.
///
/// ```
/// use dei_propagator::{InvocationSignature, Instantiation, PayloadDigest, Signature, StackDigest};
/// let hello = InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(b"Hello"), StackDigest([0; 32]));
/// let world = InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(b"World"), StackDigest([0; 32]));
/// // the payload tells them apart under the full DEI, not under Filibuster's instantiation
/// assert_ne!(hello.element_digest(&Instantiation::dei()), world.element_digest(&Instantiation::dei()));
/// assert_eq!(hello.element_digest(&Instantiation::filibuster()), world.element_digest(&Instantiation::filibuster()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InvocationSignature {
    /// The RPC signature `s`.
    pub signature: Signature,
    /// The digest of the invocation payload `p`.
    pub payload: PayloadDigest,
    /// The digest of the call stack `t`.
    pub stack: StackDigest,
}

impl InvocationSignature {
    /// An invocation signature from its three components.
    pub fn new(signature: Signature, payload: PayloadDigest, stack: StackDigest) -> Self {
        InvocationSignature {
            signature,
            payload,
            stack,
        }
    }

    /// The 64-bit element digest of this invocation signature under `instantiation`:
    /// the first 8 bytes of SHA-256 over the domain tag, the components byte, the signature digest and the
    /// payload and stack digests that the instantiation includes.
    pub fn element_digest(&self, instantiation: &Instantiation) -> ElementDigest {
        let mut h = Sha256::new();
        h.update(ELEMENT_DOMAIN);
        h.update([instantiation.components_byte()]);
        h.update(self.signature.digest());
        if instantiation.payload {
            h.update(self.payload.0);
        }
        if instantiation.stack {
            h.update(self.stack.0);
        }
        let full = h.finalize();
        let mut out = [0u8; 8];
        out.copy_from_slice(&full[..8]);
        ElementDigest(out)
    }
}
