//! The forwarder binary never contacts the node it runs on, even where an allowed network holds
//! the node's addresses (the pod bridge's gateway lies in the pod network): a listener on each of
//! the host's interface addresses, on the shim port, inside the allowed networks, receives
//! nothing, and the request is answered 403 `DENIED`. So are the allowed network's own and
//! broadcast addresses.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Forwarder, basic, oci_error};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A listener that records the first bytes of every connection it is offered.
struct Trap {
    port: u16,
    got: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Trap {
    async fn bind(ip: Ipv4Addr, port: u16) -> std::io::Result<Trap> {
        let listener = TcpListener::bind((ip, port)).await?;
        let port = listener.local_addr()?.port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let record = got.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = vec![0; 4096];
                let read = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf));
                let n = read.await.ok().and_then(Result::ok).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                record.lock().unwrap().push(format!("{ip}: {head:?}"));
            }
        });
        Ok(Trap { port, got, task })
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The IPv4 addresses the host's interfaces hold, from `ip -4 -o addr` (none if `ip` is missing).
fn interface_addresses() -> Vec<Ipv4Addr> {
    let Ok(out) = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace().skip_while(|w| *w != "inet");
            words.nth(1)?.split('/').next()?.parse().ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_address_of_the_node_is_contacted_inside_an_allowed_network() {
    // The loopback address stands for the bridge's gateway: held by an interface (`lo`), inside
    // the allowed 127.0.0.0/8. Every other interface address is allowed as a /32 of its own.
    let first = Trap::bind(Ipv4Addr::LOCALHOST, 0).await.unwrap();
    let port = first.port;
    let mut traps = vec![first];
    let mut allow = vec!["127.0.0.0/8".to_owned()];
    let mut node = vec![Ipv4Addr::LOCALHOST];
    for ip in interface_addresses() {
        if ip.is_loopback() {
            continue;
        }
        match Trap::bind(ip, port).await {
            Ok(t) => traps.push(t),
            Err(e) => eprintln!("{ip}:{port} not bound ({e}): checked without a listener"),
        }
        allow.push(format!("{ip}/32"));
        node.push(ip);
    }
    let fwd = Forwarder::start(
        &allow.join(","),
        port,
        &[("STEPSHIM_FORWARD_IDLE_TIMEOUT", "5")],
    );
    let auth = basic("plain", "a-grant-token");
    for ip in &node {
        let path = format!("/v2/{ip}/app/manifests/latest");
        let (status, head, body) =
            test_support::raw_with(&fwd.addr, "GET", &path, &[("Authorization", &auth)]).await;
        let got: Vec<String> = traps
            .iter()
            .flat_map(|t| t.got.lock().unwrap().clone())
            .collect();
        assert!(got.is_empty(), "the node was contacted: {got:?}");
        let (code, message) = oci_error(&body);
        assert_eq!((status, code.as_str()), (403, "DENIED"), "{ip}: {head}");
        assert!(message.contains("address of this node"), "{message}");
    }
    for edge in ["127.0.0.0", "127.255.255.255"] {
        let path = format!("/v2/{edge}/app/manifests/latest");
        let (status, head, body) =
            test_support::raw_with(&fwd.addr, "GET", &path, &[("Authorization", &auth)]).await;
        let (code, message) = oci_error(&body);
        assert_eq!((status, code.as_str()), (403, "DENIED"), "{edge}: {head}");
        assert!(message.contains("network or broadcast"), "{message}");
    }
}
