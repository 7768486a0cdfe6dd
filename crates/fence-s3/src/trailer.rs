//! The nonce trailer of fence's earlier S3 bodies (`\n#fence-nonce:<32 hex>\n`), stripped on
//! read so objects written that way stay readable. Nothing writes it any more: every body
//! fence writes is already unique (records carry a per-write nonce, payload blobs live under
//! unique names), and S3's content-hash versions are declared as a capability instead.

use bytes::Bytes;

const TAG: &[u8] = b"\n#fence-nonce:";
const HEX_LEN: usize = 32;

/// Bytes the trailer took.
const TRAILER_LEN: usize = TAG.len() + HEX_LEN + 1;

/// The body without a trailing legacy trailer; any other body is returned unchanged.
pub(crate) fn strip(stored: Bytes) -> Bytes {
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

    /// What earlier versions of fence stored.
    fn legacy(body: &[u8], nonce: u128) -> Bytes {
        let mut out = body.to_vec();
        out.extend_from_slice(TAG);
        out.extend_from_slice(format!("{nonce:032x}\n").as_bytes());
        Bytes::from(out)
    }

    #[test]
    fn legacy_bodies_lose_their_trailer() {
        for body in [&b""[..], b"x", b"{\"a\":1}", &[0u8; 100]] {
            let stored = legacy(body, 0x0123_4567_89ab_cdef_0011_2233_4455_6677);
            assert_eq!(stored.len(), body.len() + TRAILER_LEN);
            assert_eq!(strip(stored), Bytes::copy_from_slice(body));
        }
    }

    #[test]
    fn other_bodies_pass_unchanged() {
        for body in [
            &b""[..],
            b"short",
            b"{\"epoch\":1}\n",
            b"\n#fence-nonce:not-hex-not-hex-not-hex-not-hex\n",
            b"\n#fence-nonce:0123456789abcdef0123456789abcdef",
        ] {
            let stored = Bytes::copy_from_slice(body);
            assert_eq!(strip(stored.clone()), stored);
        }
    }
}
