//! Storage: the PersistentVolume controller and a provisioner for the cluster's storage
//! classes, as a real cluster's kube-controller-manager and CSI provisioner act. A claim with
//! no class gets the default class (the controller's retroactive assignment); a claim of a
//! class that exists gets a new volume of the size it asks (`pvc-<claim uid>`, a host path
//! no container ever writes to), bound both ways, at once for `Immediate` classes and once a
//! Pod uses it for `WaitForFirstConsumer` ones; a volume whose claim is gone is deleted or
//! released as its reclaim policy says. Each simulated cluster starts with one default class,
//! `standard`, as kind's clusters do.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::world::{World, deleting};
use super::{Action, Kind, Note, Plan};

/// The provisioner of the class every simulated cluster starts with.
pub const PROVISIONER: &str = "lariat.dev/in-memory";
const COMPONENT: &str = "persistentvolume-controller";
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The default StorageClass each simulated cluster starts with.
pub fn default_storage_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    })
}

pub fn plan(world: &World, _now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let default_class = world
        .storage_classes
        .iter()
        .filter(|c| c.annotations().get(DEFAULT_CLASS).map(String::as_str) == Some("true"))
        .map(ResourceExt::name_any)
        .max();
    for claim in world.claims.iter().filter(|c| !deleting(*c)) {
        bind(world, claim, default_class.as_deref(), &mut plan);
    }
    for volume in world.volumes.iter().filter(|v| !deleting(*v)) {
        reclaim(world, volume, &mut plan);
    }
    plan
}

fn event(
    plan: &mut Plan,
    claim: &DynamicObject,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    plan.actions.push(Action::Event {
        kind: Kind::PersistentVolumeClaim,
        object: claim.clone(),
        note: Note {
            component: COMPONENT,
            type_,
            reason,
            message,
            once: true,
        },
    });
}

// Long: the class, then waiting for a consumer, then the volume and both bindings.
fn bind(world: &World, claim: &DynamicObject, default_class: Option<&str>, plan: &mut Plan) {
    let spec = &claim.data["spec"];
    if claim.data["status"]["phase"] == "Bound" {
        return;
    }
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let class = match spec["storageClassName"].as_str() {
        // No class, on purpose: only a volume made by hand may bind it.
        Some("") => {
            event(
                plan,
                claim,
                EventType::Normal,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            );
            return;
        }
        Some(class) => class,
        None => {
            match default_class {
                Some(class) => plan.actions.push(Action::Patch {
                    kind: Kind::PersistentVolumeClaim,
                    object: claim.clone(),
                    status: false,
                    patch: json!({"spec": {"storageClassName": class}}),
                }),
                None => event(
                    plan,
                    claim,
                    EventType::Normal,
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set"
                        .into(),
                ),
            }
            return;
        }
    };
    // A volume made for it earlier, or one it names: bound once both say so.
    let volume_name = spec["volumeName"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(String::from)
        .unwrap_or_else(|| format!("pvc-{}", claim.uid().unwrap_or_default()));
    if let Some(volume) = world.volumes.get("", &volume_name) {
        let claimed = volume.data["spec"]["claimRef"]["uid"].as_str() == claim.uid().as_deref();
        if !claimed {
            return;
        }
        if spec["volumeName"].as_str() != Some(&volume_name) {
            plan.actions.push(Action::Patch {
                kind: Kind::PersistentVolumeClaim,
                object: claim.clone(),
                status: false,
                patch: json!({"spec": {"volumeName": volume_name}}),
            });
        }
        plan.actions.push(Action::Patch {
            kind: Kind::PersistentVolumeClaim,
            object: claim.clone(),
            status: true,
            patch: json!({"status": {
                "phase": "Bound",
                "accessModes": volume.data["spec"]["accessModes"],
                "capacity": volume.data["spec"]["capacity"],
            }}),
        });
        if volume.data["status"]["phase"] != "Bound" {
            plan.actions.push(Action::Patch {
                kind: Kind::PersistentVolume,
                object: volume.clone(),
                status: true,
                patch: json!({"status": {"phase": "Bound"}}),
            });
        }
        return;
    }
    if spec["volumeName"].as_str().is_some_and(|v| !v.is_empty()) {
        // A volume it names that does not exist: a real cluster waits for it too.
        return;
    }
    let Some(storage_class) = world.storage_classes.get("", class) else {
        event(
            plan,
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io {class:?} not found"),
        );
        return;
    };
    let provisioner = storage_class.data["provisioner"]
        .as_str()
        .unwrap_or_default();
    if provisioner != PROVISIONER {
        event(
            plan,
            claim,
            EventType::Normal,
            "ExternalProvisioning",
            format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        return;
    }
    // A Pod that uses it, scheduled or waiting for it (the scheduler holds Pods back until
    // their claims are bound).
    let used = world.pods.iter().any(|pod| {
        pod.namespace().as_deref() == Some(&namespace) && claims_of(pod).any(|c| c == name)
    });
    if storage_class.data["volumeBindingMode"] == "WaitForFirstConsumer" && !used {
        event(
            plan,
            claim,
            EventType::Normal,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".into(),
        );
        return;
    }
    let size = spec["resources"]["requests"]["storage"].clone();
    let modes = match &spec["accessModes"] {
        Value::Array(modes) if !modes.is_empty() => spec["accessModes"].clone(),
        _ => json!(["ReadWriteOnce"]),
    };
    let volume: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume_name,
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": if size.is_null() { json!("1Gi") } else { size }},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": storage_class.data["reclaimPolicy"].as_str().unwrap_or("Delete"),
            "storageClassName": class,
            "volumeMode": spec["volumeMode"].as_str().unwrap_or("Filesystem"),
            "hostPath": {"path": format!("/var/lib/lariat/volumes/{volume_name}"), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace,
                         "name": name, "uid": claim.uid(), "resourceVersion": claim.resource_version()},
        },
    }))
    .expect("a well-formed PersistentVolume");
    event(
        plan,
        claim,
        EventType::Normal,
        "Provisioning",
        format!("External provisioner is provisioning volume for claim \"{namespace}/{name}\""),
    );
    plan.actions.push(Action::Create {
        kind: Kind::PersistentVolume,
        object: volume,
        announce: Some(Box::new((
            claim.clone(),
            Kind::PersistentVolumeClaim,
            Note {
                component: COMPONENT,
                type_: EventType::Normal,
                reason: "ProvisioningSucceeded",
                message: "Successfully provisioned volume {name}".into(),
                once: true,
            },
        ))),
    });
}

/// The claims a Pod's volumes name.
pub fn claims_of(pod: &DynamicObject) -> impl Iterator<Item = &str> {
    pod.data["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
}

/// A volume whose claim is gone: deleted (`Delete`) or `Released` (`Retain`).
fn reclaim(world: &World, volume: &DynamicObject, plan: &mut Plan) {
    let claim_ref = &volume.data["spec"]["claimRef"];
    // A volume reserved for a claim by name only (no uid yet) is not an orphan.
    let (Some(namespace), Some(name), Some(_)) = (
        claim_ref["namespace"].as_str(),
        claim_ref["name"].as_str(),
        claim_ref["uid"].as_str(),
    ) else {
        return;
    };
    let claim = world.claims.get(namespace, name);
    let same = claim.is_some_and(|c| c.uid().as_deref() == claim_ref["uid"].as_str());
    if same || volume.data["status"]["phase"] == "Released" {
        return;
    }
    if volume.data["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
        plan.actions.push(Action::Delete {
            kind: Kind::PersistentVolume,
            object: volume.clone(),
        });
    } else if volume.data["status"]["phase"] == "Bound" {
        plan.actions.push(Action::Patch {
            kind: Kind::PersistentVolume,
            object: volume.clone(),
            status: true,
            patch: json!({"status": {"phase": "Released"}}),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn claim(class: Option<&str>) -> DynamicObject {
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-db-0", "namespace": "a", "uid": "c1", "resourceVersion": "1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}},
        });
        if let Some(class) = class {
            claim["spec"]["storageClassName"] = class.into();
        }
        object(claim)
    }

    fn class_world() -> World {
        let mut world = World::default();
        let mut class = default_storage_class();
        class["metadata"]["resourceVersion"] = "1".into();
        world.storage_classes.record(object(class));
        world
    }

    #[test]
    fn a_claim_gets_the_default_class_then_a_volume_then_is_bound() {
        let mut world = class_world();
        world.claims.record(claim(None));
        let first = plan(&world, Utc::now());
        assert!(
            matches!(&first.actions[..], [Action::Patch { patch, .. }] if patch["spec"]["storageClassName"] == "standard")
        );

        let mut world = class_world();
        world.claims.record(claim(Some("standard")));
        let second = plan(&world, Utc::now());
        let made = second.actions.iter().find_map(|a| match a {
            Action::Create { object, .. } => Some(object.clone()),
            _ => None,
        });
        let volume = made.expect("a volume");
        assert_eq!(volume.name_any(), "pvc-c1");
        assert_eq!(volume.data["spec"]["capacity"]["storage"], "5Gi");
        assert_eq!(volume.data["spec"]["claimRef"]["uid"], "c1");

        let mut volume = volume;
        volume.metadata.resource_version = Some("2".into());
        world.volumes.record(volume);
        let third = plan(&world, Utc::now());
        let bound = third.actions.iter().any(|a| matches!(a,
            Action::Patch { kind: Kind::PersistentVolumeClaim, status: true, patch, .. }
                if patch["status"]["phase"] == "Bound" && patch["status"]["capacity"]["storage"] == "5Gi"));
        assert!(bound, "{:?}", third.actions);

        // The claim gone, the volume goes with it (the class's reclaim policy is Delete).
        let mut gone = World::default();
        std::mem::swap(&mut gone.volumes, &mut world.volumes);
        let fourth = plan(&gone, Utc::now());
        assert!(matches!(
            &fourth.actions[..],
            [Action::Delete {
                kind: Kind::PersistentVolume,
                ..
            }]
        ));
    }

    #[test]
    fn a_claim_of_a_missing_class_says_so() {
        let mut world = class_world();
        world.claims.record(claim(Some("fast")));
        let planned = plan(&world, Utc::now());
        assert!(matches!(&planned.actions[..], [Action::Event { note, .. }]
            if note.reason == "ProvisioningFailed" && note.message.contains("\"fast\" not found")));
    }
}
