//! Query parameter names of protocol v1 (PROTOCOL.md section 4), spelled once for the shim that
//! reads them and the clients that write them.

/// Output and stdin: a byte offset into the log or the stdin stream.
pub const OFFSET: &str = "offset";
/// Output: keep the response open until the exit frame.
pub const FOLLOW: &str = "follow";
/// Stdin: close the process's stdin after these bytes.
pub const EOF: &str = "eof";
/// Delete: kill a running process first.
pub const FORCE: &str = "force";
/// Process status: wait up to this many seconds for the exit.
pub const WAIT: &str = "wait";
/// Files: the directory or path.
pub const PATH: &str = "path";
/// Files: the owner (`UID:GID`) an upload gives every entry it writes.
pub const OWNER: &str = "owner";
/// Files: the ETag a resumed `GET` must match (the query form of `If-Match`).
pub const ETAG: &str = "etag";
/// The value of a flag that is on.
pub const ON: &str = "1";

/// A decimal number of seconds (`10`, `0.5`, `2.125`; at most nine fractional digits), read without
/// floating point. `None` for anything else (signs, exponents, `inf`, junk).
pub fn parse_seconds(s: &str) -> Option<std::time::Duration> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    // Digits only by now: a number too large for u64 saturates (callers cap it anyway).
    let secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().unwrap_or(u64::MAX)
    };
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32)
    };
    Some(std::time::Duration::new(secs, nanos))
}

/// `?name=value` pairs joined into a query string (with its `?`), values percent-encoded; empty
/// when there are none.
pub fn build(pairs: &[(&str, &str)]) -> String {
    let mut q = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        q.push(if i == 0 { '?' } else { '&' });
        q.push_str(k);
        q.push('=');
        q.push_str(&crate::routes::percent_encode(v));
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_decimal_without_floats() {
        use std::time::Duration;
        assert_eq!(parse_seconds("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_seconds("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_seconds(".25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_seconds("3."), Some(Duration::from_secs(3)));
        assert_eq!(parse_seconds("1.000000001"), Some(Duration::new(1, 1)));
        assert_eq!(
            parse_seconds("99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "inf",
            "NaN",
            "1.0000000001",
            "1,5",
            " 1",
        ] {
            assert_eq!(parse_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn builds_what_routes_parse() {
        assert_eq!(build(&[]), "");
        let q = build(&[(OFFSET, "8"), (PATH, "/a b")]);
        assert_eq!(q, "?offset=8&path=/a%20b");
        let pairs: Vec<_> = crate::routes::query_pairs(&q[1..]).collect();
        assert_eq!(pairs[1], (PATH, Some("/a b".to_owned())));
    }
}
