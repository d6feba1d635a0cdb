//! What the cluster benchmarks share about the cluster itself: the admin configuration from a
//! kubeconfig (or inferred), and waiting until a fresh namespace can take pods.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client};

/// The configuration of `kubeconfig`, else the inferred one (`KUBECONFIG`, `~/.kube/config`,
/// in-cluster).
pub async fn admin_config(kubeconfig: Option<&Path>) -> Result<kube::Config> {
    Ok(match kubeconfig {
        Some(p) => {
            kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(p)?,
                &Default::default(),
            )
            .await?
        }
        None => kube::Config::infer().await?,
    })
}

/// Waits up to two minutes for `namespace`'s default ServiceAccount: pods are refused until the
/// controller-manager has made it, which takes a while after an apiserver restart.
pub async fn wait_default_service_account(client: &Client, namespace: &str) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(120);
    while accounts.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("namespace {namespace} has no default ServiceAccount after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
