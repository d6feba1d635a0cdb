//! Who a request is, decided once for every route: the credentials are parsed here and nowhere
//! else, and each route applies its own rule to the answer (the API takes the pod's token or a
//! grant's; the image routes take only a grant's).
//!
//! The shim holds only the SHA-256 of its token and compares digests in constant time, so neither
//! the token nor a timing side channel leaks from it. The token comes in `Authorization: Bearer`
//! or, through the apiserver's `pods/proxy` (which strips `Authorization`), in `X-Stepshim-Token`
//! (PROTOCOL.md section 2); on the image routes also as the password of `Authorization: Basic`,
//! which is what a kubelet sends from an image pull secret (4.12).

use http::{HeaderMap, header};

use crate::error::Error;
use crate::grants::{Granted, Grants};

/// The tokens a request carries, each as it came.
#[derive(Debug, Default)]
pub(crate) struct Credentials<'a> {
    bearer: Option<&'a [u8]>,
    basic: Option<Vec<u8>>,
    proxy: Option<&'a [u8]>,
}

/// Who presented a request's credentials.
#[derive(Debug)]
pub(crate) enum Caller {
    /// The pod's own token.
    Pod,
    /// A live grant's token.
    Grant(Granted),
    /// A grant's token, but the grant expired or is used up (its [`Error`] says which).
    Lapsed(Error),
    /// No token this shim knows.
    Nobody,
}

impl<'a> Credentials<'a> {
    /// The tokens in `headers`: the Bearer of `Authorization`, `X-Stepshim-Token`, and with
    /// `basic` the password of `Authorization: Basic`.
    pub(crate) fn of(headers: &'a HeaderMap, basic: bool) -> Self {
        let auth = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        Credentials {
            bearer: auth.and_then(|v| {
                v.get(..7)
                    .filter(|s| s.eq_ignore_ascii_case(b"bearer "))
                    .map(|_| &v[7..])
            }),
            basic: auth
                .filter(|_| basic)
                .and_then(protocol::registry::basic_password),
            proxy: headers
                .get(protocol::token::PROXY_HEADER)
                .map(|v| v.as_bytes()),
        }
    }

    /// The tokens, in the order grants are looked up.
    fn tokens(&self) -> impl Iterator<Item = &[u8]> {
        [self.bearer, self.basic.as_deref(), self.proxy]
            .into_iter()
            .flatten()
    }

    /// Whether one of the tokens is the one whose SHA-256 is `want`. Every token is compared,
    /// whatever the first gave, so timing does not tell which one was tried.
    pub(crate) fn carry(&self, want: &[u8; 32]) -> bool {
        self.tokens()
            .fold(false, |found, t| found | matches(t, want))
    }

    /// Who they are: the pod (its token's SHA-256 is `want`), a grant's holder, or nobody known.
    pub(crate) fn caller(&self, want: Option<&[u8; 32]>, grants: &Grants) -> Caller {
        if want.is_some_and(|w| self.carry(w)) {
            return Caller::Pod;
        }
        for token in self.tokens() {
            match grants.authenticate(token) {
                Some(Ok(g)) => return Caller::Grant(g),
                Some(Err(e)) => return Caller::Lapsed(e),
                None => {}
            }
        }
        Caller::Nobody
    }
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

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn carries(pairs: &[(&str, &str)], basic: bool) -> bool {
        let h = headers(pairs);
        Credentials::of(&h, basic).carry(&protocol::token::sha256(b"s3cret"))
    }

    #[test]
    fn accepts_only_the_right_bearer_token() {
        let auth = |v: &str| carries(&[("authorization", v)], false);
        assert!(auth("Bearer s3cret"));
        assert!(auth("bearer s3cret"));
        assert!(!auth("Bearer s3cret2"));
        assert!(!auth("Basic s3cret"));
        assert!(!auth("Bearer "));
        assert!(!auth("Bear"));
        assert!(!carries(&[], false));
    }

    #[test]
    fn the_proxy_header_carries_the_bare_token() {
        let proxy = protocol::token::PROXY_HEADER;
        assert!(carries(&[(proxy, "s3cret")], false));
        assert!(carries(
            &[
                ("authorization", "Bearer kube-credentials"),
                (proxy, "s3cret")
            ],
            false
        ));
        assert!(!carries(&[(proxy, "Bearer s3cret")], false));
        assert!(!carries(&[(proxy, "")], false));
        assert!(!carries(
            &[("authorization", "Bearer nope"), (proxy, "nope")],
            false
        ));
    }

    #[test]
    fn a_basic_password_counts_only_where_it_is_taken() {
        let basic = protocol::registry::basic_credentials("anyone", "s3cret");
        assert!(carries(&[("authorization", &basic)], true));
        assert!(!carries(&[("authorization", &basic)], false));
    }

    #[test]
    fn the_caller_is_the_pod_a_grant_or_nobody() {
        let grants = Grants::new(4);
        let req = |token: &str, ttl| protocol::artifacts::GrantRequest {
            path: "/nonexistent-grant-path".into(),
            token_sha256: protocol::token::sha256_hex(token),
            ttl_seconds: ttl,
            uses: Some(1),
        };
        grants.add(req("g-token", 60)).unwrap();
        let want = protocol::token::sha256(b"s3cret");
        let who = |v: &str| {
            let h = headers(&[("authorization", v)]);
            Credentials::of(&h, false).caller(Some(&want), &grants)
        };
        assert!(matches!(who("Bearer s3cret"), Caller::Pod));
        assert!(matches!(who("Bearer g-token"), Caller::Grant(_)));
        assert!(matches!(who("Bearer other"), Caller::Nobody));
        let g = match who("Bearer g-token") {
            Caller::Grant(g) => g,
            other => panic!("{other:?}"),
        };
        grants.use_for(&g, "/nonexistent-grant-path").unwrap();
        assert!(matches!(who("Bearer g-token"), Caller::Lapsed(_)));
    }
}
