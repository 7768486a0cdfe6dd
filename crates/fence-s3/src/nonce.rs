//! The write nonce: S3 ETags are content hashes, so rewriting identical bytes would repeat a
//! version (ABA: a stale `If-Match` would succeed). Every body is stored with a fixed-length
//! trailer carrying 128 random bits, which makes every write's ETag unique; `get` strips it.

use bytes::{Bytes, BytesMut};
use fence_core::Entropy;

const TAG: &[u8] = b"\n#fence-nonce:";
const HEX_LEN: usize = 32;

/// Bytes the trailer adds to every stored body.
pub(crate) const TRAILER_LEN: usize = TAG.len() + HEX_LEN + 1;

/// `body` followed by a fresh nonce trailer.
pub(crate) fn seal(body: &[u8], entropy: &Entropy) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + TRAILER_LEN);
    out.extend_from_slice(body);
    out.extend_from_slice(TAG);
    let hex = format!("{:016x}{:016x}\n", entropy.next_u64(), entropy.next_u64());
    out.extend_from_slice(hex.as_bytes());
    out.freeze()
}

/// The body without its trailer; a body without one (written by another tool) is returned
/// unchanged.
pub(crate) fn open(stored: Bytes) -> Bytes {
    if !has_trailer(&stored) {
        return stored;
    }
    stored.slice(..stored.len() - TRAILER_LEN)
}

fn has_trailer(stored: &[u8]) -> bool {
    let Some(start) = stored.len().checked_sub(TRAILER_LEN) else {
        return false;
    };
    let trailer = &stored[start..];
    let hex = &trailer[TAG.len()..TAG.len() + HEX_LEN];
    trailer.starts_with(TAG)
        && trailer.ends_with(b"\n")
        && hex.iter().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_differs_per_write() {
        let entropy = Entropy::seeded(1);
        for body in [&b""[..], b"x", b"{\"a\":1}", &[0u8; 100]] {
            let a = seal(body, &entropy);
            let b = seal(body, &entropy);
            assert_ne!(a, b);
            assert_eq!(a.len(), body.len() + TRAILER_LEN);
            assert_eq!(open(a), Bytes::copy_from_slice(body));
        }
    }

    #[test]
    fn foreign_bodies_pass_unchanged() {
        for body in [
            &b""[..],
            b"short",
            b"\n#fence-nonce:not-hex-not-hex-not-hex-not-hex\n",
        ] {
            assert_eq!(
                open(Bytes::copy_from_slice(body)),
                Bytes::copy_from_slice(body)
            );
        }
    }
}
