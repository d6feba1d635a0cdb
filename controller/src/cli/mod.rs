//! The commands of `stepctl`. Each file holds one command's logic; `args.rs` holds the parsing.

pub mod admin;
pub mod args;
pub mod cp;
pub mod inputs;
pub mod local;
pub mod lost;
pub mod run;
pub mod term;

use anyhow::{Context, Result, bail};
use client::ShimClient;
use controller::runtime::{Runtime, TargetConfig};
use controller::token::Key;

use args::TargetArgs;

/// Where commands act: a cluster target, or a local shim.
#[derive(Debug)]
pub enum Target {
    /// A namespace and worker of a cluster.
    Cluster(Box<Runtime>),
    /// A shim child process.
    Local(Box<client::local::LocalShim>),
}

impl Target {
    /// Connects as the arguments say.
    pub async fn connect(args: &TargetArgs) -> Result<Target> {
        if args.local {
            let bin = local::find_binary(args.shim_bin.clone())?;
            let shim = local::start(&bin)?;
            // Once per shim, before anything else: one of another protocol is refused.
            shim.client.check_protocol().await?;
            return Ok(Target::Local(Box::new(shim)));
        }
        Ok(Target::Cluster(Box::new(connect_cluster(args).await?)))
    }

    /// The shim client of `pod` (the local shim ignores the name), reached as `--via` says.
    pub async fn shim(&self, pod: Option<&str>) -> Result<ShimClient> {
        match self {
            Target::Local(l) => Ok(l.client.clone()),
            Target::Cluster(rt) => {
                let pod = pod.context("name the pod")?;
                Ok(rt.shim(pod).await?)
            }
        }
    }
}

/// Connects to the cluster target.
pub async fn connect_cluster(args: &TargetArgs) -> Result<Runtime> {
    let Some(key_file) = &args.key_file else {
        bail!(
            "no controller key: pass --key-file or set STEPCTL_KEY_FILE (32+ random bytes, e.g. head -c 32 /dev/urandom)"
        );
    };
    let key = Key::from_file(key_file)?;
    let target = TargetConfig {
        kubeconfig: args.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        worker: args.worker.clone(),
    };
    let rt = Runtime::connect(&target, key)
        .await
        .context("connecting to the cluster")?;
    Ok(rt.with_via(
        args.via.into(),
        std::time::Duration::from_millis(args.probe_ms),
    ))
}

/// A short random suffix for names.
pub fn random_suffix() -> String {
    (0..8)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random_range(0..36)]))
        .collect()
}
