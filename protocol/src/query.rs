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
/// Files: the ETag a resumed `GET` must match (the query form of `If-Match`).
pub const ETAG: &str = "etag";
/// The value of a flag that is on.
pub const ON: &str = "1";

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
    fn builds_what_routes_parse() {
        assert_eq!(build(&[]), "");
        let q = build(&[(OFFSET, "8"), (PATH, "/a b")]);
        assert_eq!(q, "?offset=8&path=/a%20b");
        let pairs: Vec<_> = crate::routes::query_pairs(&q[1..]).collect();
        assert_eq!(pairs[1], (PATH, Some("/a b".to_owned())));
    }
}
