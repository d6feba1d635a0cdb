//! Bearer-token check: the shim holds only the SHA-256 of its token and compares digests in constant
//! time, so neither the token nor a timing side channel leaks from it. The token comes in
//! `Authorization: Bearer` or, through the apiserver's `pods/proxy` (which strips `Authorization`),
//! in `X-Stepshim-Token` (PROTOCOL.md section 2).

/// Whether the request's `Authorization` value (`bearer`) or its `X-Stepshim-Token` value (`proxy`)
/// carries a token whose SHA-256 is `want`.
pub(crate) fn check(bearer: Option<&[u8]>, proxy: Option<&[u8]>, want: &[u8; 32]) -> bool {
    let from_bearer = bearer.and_then(|value| {
        value
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case(b"bearer "))
            .map(|_| &value[7..])
    });
    // Both are checked, whatever the first says, so timing does not tell which one was tried.
    let a = from_bearer.is_some_and(|t| matches(t, want));
    let b = proxy.is_some_and(|t| matches(t, want));
    a | b
}

/// Constant-time comparison of a token's digest with `want`; an empty token never matches.
pub(crate) fn matches(token: &[u8], want: &[u8; 32]) -> bool {
    let token = token.trim_ascii();
    if token.is_empty() {
        return false;
    }
    let got = protocol::token::sha256(token);
    got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_the_right_bearer_token() {
        let want = protocol::token::sha256(b"s3cret");
        let check = |h: Option<&[u8]>, w: &[u8; 32]| check(h, None, w);
        assert!(check(Some(b"Bearer s3cret"), &want));
        assert!(check(Some(b"bearer s3cret"), &want));
        assert!(!check(Some(b"Bearer s3cret2"), &want));
        assert!(!check(Some(b"Basic s3cret"), &want));
        assert!(!check(Some(b"Bearer "), &want));
        assert!(!check(Some(b"Bear"), &want));
        assert!(!check(None, &want));
    }

    #[test]
    fn the_proxy_header_carries_the_bare_token() {
        let want = protocol::token::sha256(b"s3cret");
        assert!(check(None, Some(b"s3cret"), &want));
        assert!(check(
            Some(b"Bearer kube-credentials"),
            Some(b"s3cret"),
            &want
        ));
        assert!(!check(None, Some(b"Bearer s3cret"), &want));
        assert!(!check(None, Some(b""), &want));
        assert!(!check(Some(b"Bearer nope"), Some(b"nope"), &want));
    }
}
