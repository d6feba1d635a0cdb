//! Garbage collection, retirement and the health check of a target.
//!
//! GC reads the shared pod cache (no list per tick) and deletes the worker's pods that are not in the
//! desired set once they are older than a grace period, so a pod being created right now by another
//! request is never collected. Retire deletes everything the worker created. The health check
//! confirms the apiserver answers and, with SelfSubjectAccessReview, that the worker's credentials
//! hold the pod verbs it needs and none of the exec family it must not need, the rights images of
//! step pods (secrets) and hermetic pods (networkpolicies) need, and which ways to the shims they
//! allow: the pod IP needs no Kubernetes right (only a route), the apiserver's proxy
//! needs the `pods/proxy` verbs.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde::Serialize;

use crate::hermetic::select_policies;
use crate::manifests::{POD_VERBS, POLICY_VERBS, PROXY_VERBS, SECRET_VERBS, UNNEEDED};
use crate::podspec::{HERMETIC_LABEL, WORKER_LABEL, label_value};
use crate::runtime::{Runtime, RuntimeError, policy};
use crate::via::Via;

/// The pods to collect at `now`: not in `desired`, not already being deleted, and older than
/// `grace` (a pod without a creation time counts as new). Pure, so the rule is tested apart.
pub fn select<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    desired: &HashSet<String>,
    grace: Duration,
    now: Timestamp,
) -> Vec<String> {
    crate::selection::select_objects(
        pods.into_iter().map(|p| &p.metadata),
        |m| m.name.as_ref(),
        desired,
        grace,
        now,
    )
}

/// Deletes the worker's hermetic pods' policies whose pod is gone, once at least `grace` old;
/// returns their names. Credentials without rights on networkpolicies (a Role from before hermetic
/// pods) make it a no-op.
pub async fn collect_policies(rt: &Runtime, grace: Duration) -> Result<Vec<String>, RuntimeError> {
    let selector = format!(
        "{WORKER_LABEL}={},{HERMETIC_LABEL}",
        label_value(&rt.worker)
    );
    let list = match policy::api(rt)
        .list(&ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 403 => return Ok(Vec::new()),
        Err(source) => {
            return Err(RuntimeError::Policy {
                name: format!("list {selector}"),
                source,
            });
        }
    };
    let pods = rt.pod_names();
    let chosen = select_policies(&list.items, &pods, grace, Timestamp::now());
    for name in &chosen {
        policy::delete(rt, name)
            .await
            .map_err(|source| RuntimeError::Policy {
                name: name.clone(),
                source,
            })?;
    }
    Ok(chosen)
}

/// Deletes the worker's pods not in `desired` that are older than `grace`; returns their names.
pub async fn collect(
    rt: &Runtime,
    desired: &HashSet<String>,
    grace: Duration,
) -> Result<Vec<String>, RuntimeError> {
    let pods = rt.pods();
    let chosen = select(pods.iter().map(|p| &**p), desired, grace, Timestamp::now());
    for name in &chosen {
        rt.delete(name).await?;
    }
    Ok(chosen)
}

/// Deletes every pod of the worker; returns their names.
pub async fn retire(rt: &Runtime) -> Result<Vec<String>, RuntimeError> {
    collect(rt, &HashSet::new(), Duration::ZERO).await
}

/// One access check.
#[derive(Debug, Clone, Serialize)]
pub struct Access {
    /// Resource (`pods`, `pods/exec`, ...).
    pub resource: String,
    /// Verb.
    pub verb: String,
    /// Whether the credentials hold it.
    pub allowed: bool,
}

/// The health of a target.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// The apiserver's version.
    pub server_version: String,
    /// Namespace checked.
    pub namespace: String,
    /// Verbs needed, with their answers.
    pub needed: Vec<Access>,
    /// Verbs not needed, with their answers (allowed ones are a warning).
    pub unneeded: Vec<Access>,
    /// The `pods/proxy` verbs reaching shims through the apiserver needs, with their answers.
    pub proxy: Vec<Access>,
    /// The verbs on secrets that images from step pods (`run --image-from`) need, with their
    /// answers; they do not count in `ok` (steps without such images never need them).
    pub secrets: Vec<Access>,
    /// The verbs on networkpolicies (networking.k8s.io) that hermetic pods (`run --hermetic`)
    /// need, with their answers; they do not count in `ok`.
    pub network_policies: Vec<Access>,
    /// The ways to the shims these credentials allow: `direct` always (it needs a route to pod
    /// IPs, which an access review cannot tell), `proxy` when every `pods/proxy` verb is allowed.
    pub transports: Vec<String>,
    /// Every needed verb is allowed, the `pods/proxy` ones too when the runtime reaches shims
    /// only through the apiserver.
    pub ok: bool,
}

/// Checks the apiserver and the credentials' rights in the target's namespace.
pub async fn check(rt: &Runtime) -> Result<Health, RuntimeError> {
    let version = rt.client.apiserver_version().await?;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(rt.client.clone());
    let ask = async |list: &[(&str, &str)]| -> Result<Vec<Access>, RuntimeError> {
        let mut out = Vec::new();
        for (resource, verb) in list {
            // `resource[.group][/subresource]` as kubectl names them; no group: the core group.
            let (res, sub) = resource
                .split_once('/')
                .map_or((*resource, None), |(r, s)| (r, Some(s.to_owned())));
            let (res, group) = res
                .split_once('.')
                .map_or((res, None), |(r, g)| (r, Some(g.to_owned())));
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(rt.namespace.clone()),
                        resource: Some(res.to_owned()),
                        group,
                        subresource: sub,
                        verb: Some((*verb).to_owned()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await?;
            let allowed = answer.status.is_some_and(|s| s.allowed);
            out.push(Access {
                resource: (*resource).to_owned(),
                verb: (*verb).to_owned(),
                allowed,
            });
        }
        Ok(out)
    };
    let needed: Vec<_> = POD_VERBS.iter().map(|v| ("pods", *v)).collect();
    let needed = ask(&needed).await?;
    let unneeded = ask(UNNEEDED).await?;
    let proxy: Vec<_> = PROXY_VERBS.iter().map(|v| ("pods/proxy", *v)).collect();
    let proxy = ask(&proxy).await?;
    let secrets: Vec<_> = SECRET_VERBS.iter().map(|v| ("secrets", *v)).collect();
    let secrets = ask(&secrets).await?;
    let policies: Vec<_> = POLICY_VERBS
        .iter()
        .map(|v| ("networkpolicies.networking.k8s.io", *v))
        .collect();
    let network_policies = ask(&policies).await?;
    let proxy_ok = proxy.iter().all(|a| a.allowed);
    let mut transports = vec!["direct".to_owned()];
    if proxy_ok {
        transports.push("proxy".to_owned());
    }
    let ok = needed.iter().all(|a| a.allowed) && (proxy_ok || rt.via() != Via::Proxy);
    Ok(Health {
        server_version: version.git_version,
        namespace: rt.namespace.clone(),
        needed,
        unneeded,
        proxy,
        secrets,
        network_policies,
        transports,
        ok,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(name: &str, created: &str, deleting: bool) -> Pod {
        let mut meta = serde_json::json!({"name": name, "creationTimestamp": created});
        if deleting {
            meta["deletionTimestamp"] = "2026-01-01T00:10:00Z".into();
        }
        serde_json::from_value(serde_json::json!({ "metadata": meta })).unwrap()
    }

    #[test]
    fn collects_only_old_undesired_pods_not_already_going() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let pods = [
            pod("kept", "2026-01-01T00:00:00Z", false),
            pod("old", "2026-01-01T00:00:00Z", false),
            pod("young", "2026-01-01T00:09:30Z", false),
            pod("going", "2026-01-01T00:00:00Z", true),
            pod("edge", "2026-01-01T00:09:00Z", false),
        ];
        let desired = HashSet::from(["kept".to_owned()]);
        let chosen = select(&pods, &desired, Duration::from_secs(60), now);
        assert_eq!(chosen, ["old", "edge"]);
        // Retirement: no desired set, no grace.
        let all = select(&pods, &HashSet::new(), Duration::ZERO, now);
        assert_eq!(all, ["kept", "old", "young", "edge"]);
    }
}
