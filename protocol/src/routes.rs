//! Route paths, the process id syntax and query strings of protocol v1.
//!
//! The shim matches requests with [`Route::parse`]; clients build paths with the `*_path` functions, so
//! both sides spell every route the same way.

/// `GET`: liveness, no auth.
pub const HEALTHZ: &str = "/healthz";
/// `GET`: Prometheus metrics.
pub const METRICS: &str = "/metrics";
/// `GET`: protocol version, shim version, boot id.
pub const INFO: &str = "/v1/info";
/// `GET`: every process.
pub const PROCESSES: &str = "/v1/processes";
/// `PUT` (tar in) and `GET` (tar out), with `?path=`.
pub const FILES: &str = "/v1/files";
/// `GET`: every property of the pod; `/v1/properties/{name}` sets (`PUT`) and deletes one.
pub const PROPERTIES: &str = "/v1/properties";

/// Longest process id.
pub const MAX_ID_LEN: usize = 128;

/// A matched route. Process routes carry the (already validated) id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/healthz`
    Healthz,
    /// `/metrics`
    Metrics,
    /// `/v1/info`
    Info,
    /// `/v1/processes`
    Processes,
    /// `/v1/processes/{id}`
    Process(&'a str),
    /// `/v1/processes/{id}/output`
    Output(&'a str),
    /// `/v1/processes/{id}/stdin`
    Stdin(&'a str),
    /// `/v1/processes/{id}/signal`
    Signal(&'a str),
    /// `/v1/processes/{id}/resize`
    Resize(&'a str),
    /// `/v1/files`
    Files,
    /// `/v1/grants`
    Grants,
    /// `/v1/grants/{id}`
    Grant(&'a str),
    /// `/v1/pulls`
    Pulls,
    /// `/v1/pulls/{id}`
    Pull(&'a str),
    /// `/v1/properties`
    Properties,
    /// `/v1/properties/{name}` (the name's characters already checked, its length not)
    Property(&'a str),
    /// `/v2/` and below: images (the path is parsed by [`crate::registry::parse`]).
    Registry,
}

/// Why a path did not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No route has this shape.
    NotFound,
    /// A process route whose id is not `[A-Za-z0-9._-]{1,128}`.
    InvalidId,
    /// A property route whose name is not `[A-Za-z0-9._:-]+` (or is `.` or `..`).
    InvalidName,
}

impl<'a> Route<'a> {
    /// Matches a request path (without query string).
    pub fn parse(path: &'a str) -> Result<Self, RouteError> {
        match path {
            HEALTHZ => return Ok(Route::Healthz),
            METRICS => return Ok(Route::Metrics),
            INFO => return Ok(Route::Info),
            PROCESSES => return Ok(Route::Processes),
            FILES => return Ok(Route::Files),
            crate::artifacts::GRANTS => return Ok(Route::Grants),
            crate::artifacts::PULLS => return Ok(Route::Pulls),
            PROPERTIES => return Ok(Route::Properties),
            _ => {}
        }
        if let Some(name) = path.strip_prefix("/v1/properties/") {
            return if valid_property_name(name) {
                Ok(Route::Property(name))
            } else {
                Err(RouteError::InvalidName)
            };
        }
        if path == "/v2" || path.starts_with(crate::registry::PREFIX) {
            return Ok(Route::Registry);
        }
        for (prefix, make) in [
            ("/v1/grants/", Route::Grant as fn(&'a str) -> Route<'a>),
            ("/v1/pulls/", Route::Pull),
        ] {
            if let Some(id) = path.strip_prefix(prefix) {
                return if valid_id(id) {
                    Ok(make(id))
                } else {
                    Err(RouteError::InvalidId)
                };
            }
        }
        let rest = path
            .strip_prefix("/v1/processes/")
            .ok_or(RouteError::NotFound)?;
        let (id, tail) = match rest.split_once('/') {
            Some((id, tail)) => (id, Some(tail)),
            None => (rest, None),
        };
        let route = match tail {
            None => Route::Process(id),
            Some("output") => Route::Output(id),
            Some("stdin") => Route::Stdin(id),
            Some("signal") => Route::Signal(id),
            Some("resize") => Route::Resize(id),
            Some(_) => return Err(RouteError::NotFound),
        };
        if valid_id(id) {
            Ok(route)
        } else {
            Err(RouteError::InvalidId)
        }
    }

    /// A short, bounded label for metrics (never the id).
    pub fn label(&self) -> &'static str {
        match self {
            Route::Healthz => "healthz",
            Route::Metrics => "metrics",
            Route::Info => "info",
            Route::Processes => "processes",
            Route::Process(_) => "process",
            Route::Output(_) => "output",
            Route::Stdin(_) => "stdin",
            Route::Signal(_) => "signal",
            Route::Resize(_) => "resize",
            Route::Files => "files",
            Route::Grants | Route::Grant(_) => "grants",
            Route::Pulls | Route::Pull(_) => "pulls",
            Route::Properties | Route::Property(_) => "properties",
            Route::Registry => "registry",
        }
    }
}

/// Whether `id` is a valid process id: `[A-Za-z0-9._-]{1,128}`, and not `.` or `..`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `name` is a property name as far as its characters go: `[A-Za-z0-9._:-]+`, not `.` or
/// `..` (none needs escaping in a path). Its length is a setting of the shim
/// (`STEPSHIM_PROPERTIES_MAX_NAME_BYTES`), checked there.
pub fn valid_property_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

/// `/v1/properties/{name}`
pub fn property_path(name: &str) -> String {
    format!("{PROPERTIES}/{name}")
}

/// `/v1/processes/{id}`
pub fn process_path(id: &str) -> String {
    format!("{PROCESSES}/{id}")
}

/// `/v1/processes/{id}/{sub}` for `output`, `stdin`, `signal`, `resize`.
pub fn process_sub_path(id: &str, sub: &str) -> String {
    format!("{PROCESSES}/{id}/{sub}")
}

/// Iterates `name=value` pairs of a query string, percent-decoded (`+` is a space). Pairs whose
/// encoding is broken decode to `None` values so the caller can reject them.
pub fn query_pairs(query: &str) -> impl Iterator<Item = (&str, Option<String>)> {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k, percent_decode(v))
    })
}

/// Decodes `%XX` escapes and `+`; `None` on a broken escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Encodes a query value: everything but unreserved characters and `/` is `%XX`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match() {
        assert_eq!(
            Route::parse("/v1/processes/a.b-c_1"),
            Ok(Route::Process("a.b-c_1"))
        );
        assert_eq!(
            Route::parse("/v1/processes/x/output"),
            Ok(Route::Output("x"))
        );
        assert_eq!(
            Route::parse("/v1/processes/x/nope"),
            Err(RouteError::NotFound)
        );
        assert_eq!(Route::parse("/v1/processes/"), Err(RouteError::InvalidId));
        assert_eq!(
            Route::parse("/v1/processes/a%20b"),
            Err(RouteError::InvalidId)
        );
        assert_eq!(Route::parse("/v1/processes/.."), Err(RouteError::InvalidId));
        // Everything under /v2/ is the image routes' (4.12), which answer 404 themselves.
        assert_eq!(Route::parse("/v2/info"), Ok(Route::Registry));
        assert_eq!(Route::parse("/v3/info"), Err(RouteError::NotFound));
        assert_eq!(Route::parse("/v1/properties"), Ok(Route::Properties));
        assert_eq!(
            Route::parse("/v1/properties/concourse:resource-result"),
            Ok(Route::Property("concourse:resource-result"))
        );
        for bad in ["", ".", "..", "a/b", "a%3Ab", "a b", "ü", "a?"] {
            assert_eq!(
                Route::parse(&format!("/v1/properties/{bad}")),
                Err(RouteError::InvalidName),
                "{bad:?}"
            );
        }
        let long = "a".repeat(129);
        assert_eq!(
            Route::parse(&format!("/v1/processes/{long}")),
            Err(RouteError::InvalidId)
        );
    }

    #[test]
    fn query_roundtrip() {
        let path = "/tmp/a b/ü&x=y";
        let q = format!("path={}&follow=1", percent_encode(path));
        let pairs: Vec<_> = query_pairs(&q).collect();
        assert_eq!(pairs[0], ("path", Some(path.to_owned())));
        assert_eq!(pairs[1], ("follow", Some("1".to_owned())));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%4"), None);
    }
}
