//! The client's check of a shim: the handshake's `CertificateVerify` must verify under the pinned
//! Ed25519 key. The certificate is only looked at to refuse early, with a clear message, one that
//! does not carry the pinned key; the signature check is what a forger cannot pass.

use std::sync::Arc;

use ring::signature::{ED25519, UnparsedPublicKey};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, OtherError, SignatureScheme};

use crate::Pin;

/// Why a shim was refused, in words for the client's error (`rustls` shows it with `Debug`, so
/// that is the sentence too).
#[derive(thiserror::Error)]
enum Refusal {
    #[error("the shim's certificate does not carry the pinned key {0}")]
    WrongKey(Pin),
    #[error("the shim's handshake is not signed by the pinned key {0}")]
    BadSignature(Pin),
}

impl std::fmt::Debug for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn refuse(r: Refusal) -> Error {
    Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(r))))
}

/// Accepts exactly the shim whose key is the pin.
#[derive(Debug)]
pub(crate) struct Pinned {
    pin: Pin,
    spki: Vec<u8>,
}

impl Pinned {
    pub(crate) fn new(pin: Pin) -> Self {
        Pinned {
            spki: crate::cert::spki(pin.as_bytes()),
            pin,
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let der: &[u8] = end_entity.as_ref();
        if der.windows(self.spki.len()).any(|w| w == self.spki) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(refuse(Refusal::WrongKey(self.pin)))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        // Never offered: both sides speak TLS 1.3 only.
        Err(Error::General("TLS 1.2 is not accepted".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        _cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if dss.scheme != SignatureScheme::ED25519 {
            return Err(refuse(Refusal::BadSignature(self.pin)));
        }
        UnparsedPublicKey::new(&ED25519, self.pin.as_bytes())
            .verify(message, dss.signature())
            .map(|()| HandshakeSignatureValid::assertion())
            .map_err(|_| refuse(Refusal::BadSignature(self.pin)))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}
