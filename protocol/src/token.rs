//! The bearer token's hash, the one form in which a token is configured or stored: a shim holds only
//! SHA-256(token) (as 64 lowercase hex digits in `STEPSHIM_TOKEN_SHA256`), so neither a pod spec nor
//! the shim's memory reveals a usable token.

use sha2::{Digest, Sha256};

/// The header that carries the bare token where `Authorization` cannot: the apiserver's
/// `pods/proxy` strips `Authorization` (it holds the caller's Kubernetes credentials) before
/// forwarding, and passes this one on (PROTOCOL.md section 2).
pub const PROXY_HEADER: &str = "x-stepshim-token";

/// SHA-256 of a token.
pub fn sha256(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// SHA-256 of a token, as the lowercase hex `STEPSHIM_TOKEN_SHA256` expects.
pub fn sha256_hex(token: &str) -> String {
    hex::encode(sha256(token.as_bytes()))
}

/// Parses 64 hex digits into a digest.
pub fn parse_sha256_hex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_roundtrip_and_known_value() {
        // SHA-256("abc") from FIPS 180-2, appendix B.1.
        let want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex("abc"), want);
        assert_eq!(parse_sha256_hex(want), Some(sha256(b"abc")));
        assert_eq!(parse_sha256_hex("abc"), None);
        assert_eq!(parse_sha256_hex(&"zz".repeat(32)), None);
    }
}
