//! The shim's carrier certificate: a minimal self-signed X.509 v3 certificate (no extensions) of an Ed25519 key, in
//! DER, and the key's PKCS #8 form. The certificate only carries the key through the handshake
//! (clients pin the key, not the certificate), so it names no host and is valid from 1970 to 9999:
//! nothing in it can expire or mismatch.

/// `AlgorithmIdentifier` of Ed25519 (OID 1.3.101.112, no parameters).
const ED25519_ALG: [u8; 7] = [0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];

/// A DER element: tag, definite length, contents.
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len <= 0xff {
        out.extend([0x81, len as u8]);
    } else {
        out.extend([0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(contents);
    out
}

/// The `Name` CN=stepshim.
fn name() -> Vec<u8> {
    let cn = [tlv(0x06, &[0x55, 0x04, 0x03]), tlv(0x0c, b"stepshim")].concat();
    tlv(0x30, &tlv(0x31, &tlv(0x30, &cn)))
}

/// `SubjectPublicKeyInfo` of an Ed25519 public key: the 12 bytes before the key are fixed.
pub(crate) fn spki(public: &[u8; 32]) -> Vec<u8> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(public);
    tlv(0x30, &[&ED25519_ALG[..], &tlv(0x03, &bits)].concat())
}

/// The to-be-signed part of the certificate of `public`.
pub(crate) fn tbs(public: &[u8; 32]) -> Vec<u8> {
    let validity = [tlv(0x17, b"700101000000Z"), tlv(0x18, b"99991231235959Z")].concat();
    let body = [
        tlv(0xa0, &tlv(0x02, &[0x02])),
        tlv(0x02, &[0x01]),
        ED25519_ALG.to_vec(),
        name(),
        tlv(0x30, &validity),
        name(),
        spki(public),
    ]
    .concat();
    tlv(0x30, &body)
}

/// The whole certificate: `tbs` and its Ed25519 signature (64 bytes).
pub(crate) fn certificate(tbs: &[u8], signature: &[u8]) -> Vec<u8> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(signature);
    tlv(0x30, &[tbs, &ED25519_ALG[..], &tlv(0x03, &bits)].concat())
}

/// PKCS #8 v1 `PrivateKeyInfo` of an Ed25519 seed (RFC 8410).
pub(crate) fn pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    let key = tlv(0x04, &tlv(0x04, seed));
    tlv(
        0x30,
        &[&tlv(0x02, &[0x00])[..], &ED25519_ALG[..], &key].concat(),
    )
}
