//! How the forwarder reaches a source and what it presents there, as the pull secret's credentials
//! say (`route::credentials` reads them): plain data, shared by the checks (`route`) and the
//! request upstream (`upstream`).

use stepshim_tls::Pin;

/// How the forwarder reaches the source, from the pull secret's username.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Plain HTTP (`plain`).
    Plain,
    /// TLS 1.3, the source's key pinned (`tls-<64 hex>`).
    Tls(Pin),
}

/// The pull secret's credentials: how to reach the source, and the grant token to present.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// How to reach the source.
    pub wire: Wire,
    /// The grant token, sent upstream as `Authorization: Bearer`.
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}
