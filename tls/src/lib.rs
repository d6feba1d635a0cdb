//! stepshim's TLS (PROTOCOL.md 1.1): TLS 1.3 only, with the shim's Ed25519 key made from a 32-byte
//! seed that a controller derives from the pod token, so clients pin the key with no certificate
//! authority. This crate makes both sides' `rustls` configurations; it does no I/O.
//!
//! - [`Seed`] is the shim's secret (`STEPSHIM_TLS_SEED`), [`Seed::for_token`] the controller's
//!   derivation, [`Seed::pin`] the public key clients check.
//! - [`server_config`] presents a carrier certificate of the key and signs handshakes with it; no
//!   session tickets, no early data.
//! - [`client_config`] accepts a server only if its handshake signature verifies under the pin.
//!
//! # Layout
//! - `cert`: the carrier certificate of the key (self-signed, no extensions) and its PKCS #8 form.
//! - `verify`: the client's check: the handshake's signature under the pinned key.

mod cert;
mod verify;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use ring::signature::{Ed25519KeyPair, KeyPair};
use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::{cipher_suite, kx_group};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

pub use rustls;

/// The message a controller's HMAC of the pod token signs to make the pod's seed.
const SEED_LABEL: &[u8] = b"stepshim tls seed v1";

/// The protocol every connection negotiates when the client offers ALPN.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Errors building a configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not 64 hex digits.
    #[error("not 64 hex digits")]
    NotHex,
    /// `rustls` refused the configuration (not expected for these fixed choices).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// `ring` refused the key (not expected for a 32-byte seed).
    #[error("Ed25519 key: {0}")]
    Key(String),
}

/// The 32-byte RFC 8032 seed of a shim's Ed25519 key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed([u8; 32]);

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(<secret>)")
    }
}

impl Seed {
    /// The seed of the shim whose pod token is `token`: HMAC-SHA256(token, "stepshim tls seed v1").
    pub fn for_token(token: &str) -> Self {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.as_bytes());
        let tag = ring::hmac::sign(&key, SEED_LABEL);
        let mut seed = [0; 32];
        seed.copy_from_slice(tag.as_ref());
        Seed(seed)
    }

    /// A seed from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Seed(bytes)
    }

    /// The seed as 64 lowercase hex digits (what `STEPSHIM_TLS_SEED` carries).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn key_pair(&self) -> Result<Ed25519KeyPair, Error> {
        Ed25519KeyPair::from_seed_unchecked(&self.0).map_err(|e| Error::Key(e.to_string()))
    }

    /// The public key clients pin.
    pub fn pin(&self) -> Pin {
        let pair = self.key_pair().expect("any 32 bytes are an Ed25519 seed");
        let mut public = [0; 32];
        public.copy_from_slice(pair.public_key().as_ref());
        Pin(public)
    }
}

impl FromStr for Seed {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        parse_hex(s).map(Seed)
    }
}

/// A shim's Ed25519 public key, which a client requires the handshake to be signed with.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pin([u8; 32]);

impl Pin {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pin({self})")
    }
}

impl FromStr for Pin {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        parse_hex(s).map(Pin)
    }
}

/// 64 hex digits (either case) as 32 bytes.
fn parse_hex(s: &str) -> Result<[u8; 32], Error> {
    let mut out = [0; 32];
    if s.len() != 64 {
        return Err(Error::NotHex);
    }
    hex::decode_to_slice(s, &mut out).map_err(|_| Error::NotHex)?;
    Ok(out)
}

/// The one provider both sides use: `ring`, TLS 1.3's three suites, X25519 and P-256.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        kx_groups: vec![kx_group::X25519, kx_group::SECP256R1],
        ..rustls::crypto::ring::default_provider()
    })
}

/// The shim's configuration: TLS 1.3, the carrier certificate of `seed`'s key, no client
/// certificates, no session tickets or resumption, no early data, ALPN `http/1.1`.
pub fn server_config(seed: &Seed) -> Result<Arc<rustls::ServerConfig>, Error> {
    let pair = seed.key_pair()?;
    let mut public = [0; 32];
    public.copy_from_slice(pair.public_key().as_ref());
    let tbs = cert::tbs(&public);
    let der = cert::certificate(&tbs, pair.sign(&tbs).as_ref());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert::pkcs8(&seed.0)));
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(der)], key)?;
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.max_early_data_size = 0;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// A client's configuration for the shim pinned by `pin`: TLS 1.3, the handshake's signature
/// checked against `pin` alone (no certificate authority, no host name), no resumption, no SNI.
pub fn client_config(pin: Pin) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verify::Pinned::new(pin)))
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    config.enable_sni = false;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The server name a client passes to `rustls` (never sent: SNI is off, and the pin decides).
pub fn server_name() -> ServerName<'static> {
    ServerName::try_from("stepshim").expect("a valid DNS name")
}

#[cfg(test)]
mod tests;
