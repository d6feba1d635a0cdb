//! The node-local forwarder's contract (`stepshim-forward`): what the forwarder, the DaemonSet that
//! runs it (`stepctl manifests --forwarder`) and the controller that writes a consuming pod's pull
//! credentials agree on. Its settings are `STEPSHIM_FORWARD_*` variables, documented in
//! docs/operator-guide.md; a test of the forwarder holds that table and [`ALL`] to each other.
//! [`Cidr`] is the one reader of the pod networks both the forwarder and `stepctl` check.

mod cidr;

pub use cidr::{Cidr, CidrError};

/// The port the forwarder listens on, on the node's loopback address: image references on a node
/// read `127.0.0.1:7779/<source pod IP>/<name>@sha256:<hex>`.
pub const PORT: u16 = 7779;
/// The realm of the forwarder's (and the shim's) Basic challenge.
pub const REALM: &str = "stepshim";
/// The pull secret's username for a source serving plain HTTP.
pub const USER_PLAIN: &str = "plain";
/// The pull secret's username for a source serving TLS: this prefix, then the 64 hex digits of
/// the source's key pin (PROTOCOL.md 1.1).
pub const USER_TLS_PREFIX: &str = "tls-";
/// The readiness route (no credentials, reaches nothing).
pub const PROBE_PATH: &str = "/healthz";

/// One setting: its environment variable and its default as text (empty: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable.
    pub var: &'static str,
    /// The default, as the forwarder parses it; empty when there is none.
    pub default: &'static str,
}

macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident = $var:literal, $default:literal;)*) => {
        $($(#[$doc])* pub const $name: &str = $var;)*
        /// Every setting, in the operator guide's order.
        pub const ALL: &[Setting] = &[$(Setting { var: $var, default: $default }),*];
    };
}

settings! {
    /// Listen address (`host:port`); loopback only, so nothing off the node reaches it.
    LISTEN = "STEPSHIM_FORWARD_LISTEN", "127.0.0.1:7779";
    /// Comma-separated IPv4 CIDRs of the pod network: the only sources a request may name.
    ALLOW = "STEPSHIM_FORWARD_ALLOW", "";
    /// The port of the source shims.
    SHIM_PORT = "STEPSHIM_FORWARD_SHIM_PORT", "7777";
    /// Client connections open at once; at the cap an idle one is closed for a new one, which is
    /// answered 503 and closed only when every open connection has a request in flight.
    MAX_CONNECTIONS = "STEPSHIM_FORWARD_MAX_CONNECTIONS", "256";
    /// Seconds to open a connection to a source, TLS handshake included.
    CONNECT_TIMEOUT = "STEPSHIM_FORWARD_CONNECT_TIMEOUT", "10";
    /// Seconds a connection may go without a byte moving, either way, before it is closed.
    IDLE_TIMEOUT = "STEPSHIM_FORWARD_IDLE_TIMEOUT", "60";
    /// Seconds a new connection has to send its first complete request head before it is closed.
    FIRST_REQUEST_TIMEOUT = "STEPSHIM_FORWARD_FIRST_REQUEST_TIMEOUT", "10";
    /// Bytes of a request line and its headers together.
    MAX_HEADER_BYTES = "STEPSHIM_FORWARD_MAX_HEADER_BYTES", "16384";
    /// Log level: error, warn, info, debug, trace.
    LOG = "STEPSHIM_FORWARD_LOG", "info";
    /// A path the forwarder writes its listen address to once it serves.
    READY_FILE = "STEPSHIM_FORWARD_READY_FILE", "";
}

/// The setting of a variable name.
pub fn by_var(var: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.var == var)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_found_by_its_name_and_the_listen_default_is_the_port() {
        for s in ALL {
            assert_eq!(by_var(s.var), Some(s));
            assert!(s.var.starts_with("STEPSHIM_FORWARD_"), "{}", s.var);
        }
        assert_eq!(by_var(LISTEN).unwrap().default, format!("127.0.0.1:{PORT}"));
        assert_eq!(by_var("STEPSHIM_LISTEN"), None);
    }
}
