//! The I/O of hermetic step pods' NetworkPolicies (the policy itself is `crate::hermetic`): created
//! before the pod, owned by it once it exists, deleted when its creation fails (gc collects those
//! a controller that died in between left: `crate::gc::collect_policies`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use super::{Runtime, RuntimeError};
use crate::hermetic::{check, policy, policy_name};
use crate::podspec::StepSpec;

pub(crate) fn api(rt: &Runtime) -> Api<NetworkPolicy> {
    Api::namespaced(rt.client.clone(), &rt.namespace)
}

/// Deletes policy `name`; one already gone is not an error.
pub(crate) async fn delete(rt: &Runtime, name: &str) -> Result<(), kube::Error> {
    match api(rt).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the policy of hermetic `spec`, replacing one an earlier attempt left unless its pod is
/// still there (then nothing changes, and the pod's create answers 409).
pub(crate) async fn create(
    rt: &Runtime,
    spec: &StepSpec,
    pods: &Api<Pod>,
) -> Result<(), RuntimeError> {
    check(&spec.name).map_err(RuntimeError::BadSpec)?;
    let policies = api(rt);
    let policy = policy(&rt.worker, &spec.name);
    let name = policy_name(&spec.name);
    let failed = |source| RuntimeError::Policy {
        name: name.clone(),
        source,
    };
    match policies.create(&PostParams::default(), &policy).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            if pods.get_opt(&spec.name).await?.is_some() {
                // The pod's own create answers 409, and the policy stays.
                return Ok(());
            }
            delete(rt, &name).await.map_err(failed)?;
            policies
                .create(&PostParams::default(), &policy)
                .await
                .map_err(failed)?;
        }
        other => {
            other.map_err(failed)?;
        }
    }
    Ok(())
}

/// Makes pod `pod` (of `uid`) the owner of its policy; a failure is logged (gc deletes the
/// policy once the pod is gone).
pub(crate) async fn own(rt: &Runtime, pod: &str, uid: &str) {
    let patch = Patch::Merge(crate::image::owner_patch(pod, uid));
    let name = policy_name(pod);
    if let Err(e) = api(rt).patch(&name, &PatchParams::default(), &patch).await {
        tracing::warn!(policy = name, "cannot make pod {pod} its owner: {e}");
    }
}
