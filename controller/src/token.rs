//! Per-pod bearer tokens with no extra API objects: the token of a pod is
//! HMAC-SHA256(controller key, "namespace/pod-name") in hex. The pod spec carries only the token's
//! SHA-256, so reading the pod reveals nothing usable, and a restarted controller re-derives every
//! token from its key alone.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

/// Shortest key accepted: 32 bytes, the HMAC-SHA256 block strength.
pub const MIN_KEY_LEN: usize = 32;

/// Errors loading the controller key.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The key file could not be read.
    #[error("cannot read key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key is too short to be a secret.
    #[error(
        "key file {path} holds {len} bytes; at least {MIN_KEY_LEN} are needed (e.g. `head -c 32 /dev/urandom > {path}`)"
    )]
    TooShort {
        /// The file.
        path: String,
        /// Its length.
        len: usize,
    },
}

/// The controller's secret key.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl Key {
    /// Reads the key from a file (raw bytes; a trailing newline is part of it).
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: p.clone(),
            source,
        })?;
        Self::from_bytes(bytes).map_err(|len| KeyError::TooShort { path: p, len })
    }

    /// A key from bytes; `Err(len)` when shorter than [`MIN_KEY_LEN`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, usize> {
        if bytes.len() < MIN_KEY_LEN {
            Err(bytes.len())
        } else {
            Ok(Key(bytes))
        }
    }

    /// The bearer token of pod `name` in `namespace`.
    pub fn token(&self, namespace: &str, name: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(namespace.as_bytes());
        mac.update(b"/");
        mac.update(name.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_per_pod_stable_and_hash_as_the_shim_expects() {
        let k = Key::from_bytes(vec![7; 32]).unwrap();
        let a = k.token("ns", "pod-a");
        assert_eq!(a, k.token("ns", "pod-a"), "re-derivable after a restart");
        assert_ne!(a, k.token("ns", "pod-b"));
        assert_ne!(a, k.token("ns2", "pod-a"));
        assert_eq!(a.len(), 64);
        assert_eq!(protocol::token::sha256_hex(&a).len(), 64);
        assert!(Key::from_bytes(vec![1; 31]).is_err());
        assert_eq!(format!("{k:?}"), "Key(<secret>)");
    }
}
