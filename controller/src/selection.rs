//! The rule by which garbage collection picks what to delete, pure so it is tested apart: pods,
//! image-pull Secrets and hermetic pods' policies are each collected once their pod is not wanted
//! (or gone) and they are old enough that they cannot be being created right now.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// The names of the objects to delete at `now`: not already being deleted, at least `grace` old
/// (one without a creation time counts as new: it may be being created), and whose pod (`pod_of`:
/// a pod's own name, or the pod a Secret or a policy was made for) is not in `keep`.
pub fn select_objects<'a>(
    metas: impl IntoIterator<Item = &'a ObjectMeta>,
    pod_of: impl Fn(&'a ObjectMeta) -> Option<&'a String>,
    keep: &HashSet<String>,
    grace: Duration,
    now: Timestamp,
) -> Vec<String> {
    metas
        .into_iter()
        .filter(|m| m.deletion_timestamp.is_none())
        .filter_map(|m| {
            let name = m.name.clone()?;
            let pod = pod_of(m)?;
            let age = m
                .creation_timestamp
                .as_ref()
                .and_then(|t| now.duration_since(t.0).try_into().ok())
                .unwrap_or(Duration::ZERO);
            (!keep.contains(pod) && age >= grace).then_some(name)
        })
        .collect()
}
