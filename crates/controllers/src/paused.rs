//! Cluster API's `Paused` condition (`status.v1beta2.conditions`): what says, on the object
//! itself, that no controller is acting on it and why. Every core reconciler asks [`check`]
//! first; while the object or its Cluster is paused it sets `Paused` True at the object's
//! generation and returns, so `kubectl get -o yaml` (and a test) can tell "seen and left
//! alone" from "not yet seen".
//!
//! One choice differs from Cluster API: it writes `Paused` False on every object, which costs
//! a status write per object and per generation at fleet scale. Here an object never paused
//! carries no `Paused` condition; one that was gets False (reason `NotPaused`) when it resumes,
//! at the generation it resumed at, and keeps it (`lariat move --to-directory` pauses a
//! namespace's Clusters while it reads them, so their objects carry it after a backup).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use lariat_api::capi::{Cluster, ConditionStatus, MetaCondition, annotations};
use serde_json::json;

use crate::Error;

/// The condition's type and reasons, as Cluster API names them.
pub const PAUSED: &str = "Paused";
const PAUSED_REASON: &str = "Paused";
const NOT_PAUSED_REASON: &str = "NotPaused";

/// Why `object` (a `kind`) is paused, as Cluster API words it, or None if it is not: its
/// Cluster's `spec.paused`, the paused annotation on the Cluster (which lariat, unlike Cluster
/// API, takes to pause all of the Cluster's objects: `lariat move` relies on it), or on the
/// object itself.
pub fn why(cluster: Option<&Cluster>, kind: &str, object: &ObjectMeta) -> Option<String> {
    let annotated = |meta: &ObjectMeta| {
        (meta.annotations.as_ref()).is_some_and(|a| a.contains_key(annotations::PAUSED))
    };
    let mut reasons = vec![];
    if let Some(cluster) = cluster {
        if cluster.spec.paused == Some(true) {
            reasons.push("Cluster spec.paused is set to true".to_string());
        }
        if annotated(&cluster.metadata) {
            reasons.push(format!(
                "Cluster has the {} annotation",
                annotations::PAUSED
            ));
        }
    }
    if annotated(object) && !(kind == "Cluster" && cluster.is_some()) {
        reasons.push(format!("{kind} has the {} annotation", annotations::PAUSED));
    }
    (!reasons.is_empty()).then(|| reasons.join(", "))
}

/// The kinds that keep Cluster API's `status.v1beta2.conditions`.
pub trait V1Beta2Conditions {
    fn v1beta2_conditions(&self) -> &[MetaCondition];
}

macro_rules! v1beta2_conditions {
    ($($kind:ty),*) => {$(
        impl V1Beta2Conditions for $kind {
            fn v1beta2_conditions(&self) -> &[MetaCondition] {
                (self.status.as_ref())
                    .and_then(|s| s.v1beta2.as_ref())
                    .and_then(|s| s.conditions.as_deref())
                    .unwrap_or_default()
            }
        }
    )*};
}

v1beta2_conditions!(
    Cluster,
    lariat_api::capi::Machine,
    lariat_api::capi::MachineSet,
    lariat_api::capi::MachineDeployment,
    lariat_api::capi::MachinePool,
    lariat_api::capi::MachineHealthCheck,
    lariat_api::controlplane::KubeadmControlPlane,
    lariat_api::bootstrap::KubeadmConfig
);

/// Cluster API's paused contract for one reconcile of the object `meta` names (its v1beta2
/// `conditions` as read): writes `Paused` when what it says changed, and returns whether the
/// reconcile stops here (the object is paused, or the write's own watch event brings it back).
pub async fn check<K>(
    api: &Api<K>,
    meta: &ObjectMeta,
    conditions: &[MetaCondition],
    cluster: Option<&Cluster>,
) -> Result<bool, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let why = why(cluster, &K::kind(&()), meta);
    let before = conditions.iter().find(|c| c.type_ == PAUSED);
    let (status, reason, message) = match (&why, before) {
        (Some(why), _) => (ConditionStatus::True, PAUSED_REASON, why.as_str()),
        (None, Some(was)) if was.status == ConditionStatus::True => {
            (ConditionStatus::False, NOT_PAUSED_REASON, "")
        }
        // Never paused, or already said to have resumed: nothing to write.
        (None, _) => return Ok(false),
    };
    let generation = meta.generation;
    let same = before.is_some_and(|c| {
        c.status == status
            && c.reason == reason
            && c.message == message
            && c.observed_generation == generation
    });
    if same {
        return Ok(why.is_some());
    }
    let condition = MetaCondition {
        type_: PAUSED.to_string(),
        status,
        observed_generation: generation,
        last_transition_time: match before {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => crate::object::now_time(),
        },
        reason: reason.to_string(),
        message: message.to_string(),
    };
    let list: Vec<&MetaCondition> = conditions
        .iter()
        .filter(|c| c.type_ != PAUSED)
        .chain([&condition])
        .collect();
    // The whole list replaces the stored one (a merge patch's rule for lists), so it is
    // written only over the version it was read from.
    let patch = json!({
        "metadata": {"resourceVersion": meta.resource_version},
        "status": {"v1beta2": {"conditions": list}},
    });
    let name = meta.name.as_deref().unwrap_or_default();
    let written = api
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await;
    match written {
        // What was read is stale: the newer version's watch event brings the object back.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(true),
        written => written.map(|_| true).map_err(Error::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(annotated: bool) -> ObjectMeta {
        ObjectMeta {
            annotations: annotated
                .then(|| [(annotations::PAUSED.to_string(), String::new())].into()),
            ..ObjectMeta::default()
        }
    }

    fn cluster(paused: bool, annotated: bool) -> Cluster {
        let mut cluster = Cluster::new("c", Default::default());
        cluster.spec.paused = paused.then_some(true);
        cluster.metadata = meta(annotated);
        cluster
    }

    #[test]
    fn says_every_reason_an_object_is_paused() {
        assert_eq!(
            why(Some(&cluster(false, false)), "Machine", &meta(false)),
            None
        );
        assert_eq!(
            why(Some(&cluster(true, false)), "Machine", &meta(true)).as_deref(),
            Some(
                "Cluster spec.paused is set to true, \
                 Machine has the cluster.x-k8s.io/paused annotation"
            )
        );
        assert_eq!(
            why(Some(&cluster(false, true)), "MachineSet", &meta(false)).as_deref(),
            Some("Cluster has the cluster.x-k8s.io/paused annotation")
        );
        // The Cluster itself: its annotation said once.
        let annotated = cluster(false, true);
        assert_eq!(
            why(Some(&annotated), "Cluster", &annotated.metadata).as_deref(),
            Some("Cluster has the cluster.x-k8s.io/paused annotation")
        );
        assert!(why(None, "KubeadmConfig", &meta(true)).is_some());
    }
}
