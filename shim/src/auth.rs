//! Bearer-token check: the shim holds only the SHA-256 of its token and compares digests in constant
//! time, so neither the token nor a timing side channel leaks from it.

/// Whether an `Authorization` header value carries a token whose SHA-256 is `want`.
pub fn check(header: Option<&[u8]>, want: &[u8; 32]) -> bool {
    let Some(value) = header else { return false };
    let Some(token) = value
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case(b"bearer "))
        .map(|_| &value[7..])
    else {
        return false;
    };
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
        assert!(check(Some(b"Bearer s3cret"), &want));
        assert!(check(Some(b"bearer s3cret"), &want));
        assert!(!check(Some(b"Bearer s3cret2"), &want));
        assert!(!check(Some(b"Basic s3cret"), &want));
        assert!(!check(Some(b"Bearer "), &want));
        assert!(!check(Some(b"Bear"), &want));
        assert!(!check(None, &want));
    }
}
