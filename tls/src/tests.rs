//! Handshakes between the two configurations over loopback, and the derivations against the
//! vectors other implementations check too.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;

use super::*;

/// Serves one connection with `seed`'s configuration, echoing one line back; returns the address
/// and the thread (its result: whether the handshake and echo worked).
fn serve_once(seed: &Seed) -> (std::net::SocketAddr, thread::JoinHandle<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server_config(seed).unwrap();
    let handle = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(config).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut buf = [0; 5];
        if tls.read_exact(&mut buf).is_err() {
            return false;
        }
        tls.write_all(&buf).is_ok() && tls.flush().is_ok()
    });
    (addr, handle)
}

fn client(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<Vec<u8>> {
    let tcp = TcpStream::connect(addr)?;
    let conn = rustls::ClientConnection::new(config, server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"hello")?;
    let mut buf = vec![0; 5];
    tls.read_exact(&mut buf)?;
    Ok(buf)
}

#[test]
fn the_pinned_key_connects_and_another_is_refused() {
    let seed = Seed::for_token("token-a");
    let (addr, server) = serve_once(&seed);
    let got = client(addr, client_config(seed.pin()).unwrap()).unwrap();
    assert_eq!(got, b"hello");
    assert!(server.join().unwrap());

    let (addr, server) = serve_once(&seed);
    let other = Seed::for_token("token-b").pin();
    let err = client(addr, client_config(other).unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("does not carry the pinned key"),
        "{err}"
    );
    assert!(!server.join().unwrap());
}

#[test]
fn a_certificate_with_the_pinned_key_but_another_signer_is_refused() {
    // The forger copies the genuine certificate (it is public) but holds another private key: the
    // certificate check passes, the handshake signature cannot.
    let genuine = Seed::for_token("token-a");
    let forger = Seed::for_token("forger");
    let pair = genuine.key_pair().unwrap();
    let mut public = [0; 32];
    public.copy_from_slice(pair.public_key().as_ref());
    let tbs = cert::tbs(&public);
    let der = cert::certificate(&tbs, pair.sign(&tbs).as_ref());
    let key = PrivatePkcs8KeyDer::from(cert::pkcs8(&forger.0));
    // rustls checks that key and certificate match when both are given together; hand it a
    // resolver that pairs them anyway, as a forger's own TLS stack would.
    let signing = rustls::crypto::ring::sign::any_eddsa_type(&key).unwrap();
    let certified = Arc::new(rustls::sign::CertifiedKey::new(
        vec![CertificateDer::from(der)],
        signing,
    ));
    let resolver = Arc::new(Fixed(certified));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(resolver),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(config).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut buf = [0; 5];
        tls.read_exact(&mut buf).is_ok()
    });
    let err = client(addr, client_config(genuine.pin()).unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("not signed by the pinned key"),
        "{err}"
    );
    assert!(!server.join().unwrap());
}

#[derive(Debug)]
struct Fixed(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Fixed {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[test]
fn seeds_and_pins_parse_and_print_as_hex() {
    let seed = Seed::for_token("t");
    let again: Seed = seed.to_hex().parse().unwrap();
    assert_eq!(seed, again);
    assert_eq!(format!("{seed:?}"), "Seed(<secret>)");
    let pin = seed.pin();
    assert_eq!(pin.to_string().parse::<Pin>().unwrap(), pin);
    assert!("xyz".parse::<Pin>().is_err());
    assert!("0".repeat(63).parse::<Seed>().is_err());
}

#[test]
fn derivations_match_the_shared_vectors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol/testdata/tls.json");
    let Ok(text) = std::fs::read_to_string(path) else {
        panic!("missing {path}");
    };
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vectors = doc["vectors"].as_array().expect("a vectors array");
    assert!(!vectors.is_empty());
    for v in vectors {
        let seed = Seed::for_token(v["token"].as_str().unwrap());
        assert_eq!(seed.to_hex(), v["seed"].as_str().unwrap());
        assert_eq!(seed.pin().to_string(), v["pin"].as_str().unwrap());
    }
}
