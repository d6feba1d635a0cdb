//! `stepshim-forward`: the node-local image forwarder. containerd pulls a step's image from
//! `127.0.0.1:7779/<source pod IP>/<name>@sha256:<hex>` over plain HTTP (loopback needs no
//! registry configuration); the forwarder checks the source lies in the pod network, takes the
//! pull secret's Basic credentials (`plain` or `tls-<pin>`, the password a grant token), and
//! streams the request to the source pod's shim (`/v2/<name>/...`, the token as a Bearer) and its
//! answer back, over TLS 1.3 pinned to the source's key when the username says so. It holds no
//! secret and no Kubernetes credentials of its own.
//!
//! Why hyper and not an own HTTP/1: both sides of the forwarder speak HTTP/1.1 with keep-alive,
//! chunked or sized bodies, and HEAD answers whose `Content-Length` describes no body; hyper (which
//! the shim and the client already link) does all of it with backpressure, so a blob of GiBs moves
//! with a bounded buffer (hyper's, a connection's [`config::Config::max_header_bytes`] and
//! 128 KiB of read-ahead from the source) and a body that breaks off midway is cut on the client
//! side too. The forwarder is not ConfigMap-sized: it ships only in the shim image, so the
//! kilobytes an own reader would save count for little.
//!
//! Why a binary apart from the shim: the plain shim must fit a ConfigMap (under 1 MiB), and a
//! forwarder mode would add an HTTP client, the listener's checks and TLS on the client side to
//! every step pod's PID 1, for a job that runs once per node.
//!
//! # Layout
//! - [`config`]: `STEPSHIM_FORWARD_*` settings into a [`Config`].
//! - [`server`]: the listener, keep-alive, the first request's and the idle deadlines, the drain.
//! - `slots`: the connection cap, which evicts idle connections before it turns one away.
//! - `service`: one request: checks, the source's answer streamed back.
//! - `route`: the pull routes, the source address and the credentials, checked (no I/O).
//! - `upstream`: one request to a source shim, plain or TLS-pinned, its body streaming.
//! - `wire`: how a source is reached and the token presented there (the pull secret's credentials).
//! - `answer`: the forwarder's own answers, each refusal mapped once to status, code and message.
//! - `idle`: the clock of a connection's last byte.
//! - `sys`: the one `unsafe` call, the node's interface addresses (`getifaddrs`).

pub mod config;
pub mod server;

mod answer;
mod idle;
mod route;
mod service;
mod slots;
mod sys;
mod upstream;
mod wire;

pub use config::{Config, ConfigError};
pub use server::{run, write_ready};
