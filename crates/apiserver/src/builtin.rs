//! The kinds every lariat server serves from its first start: core v1 Namespace, ConfigMap,
//! Secret, Event and the workload kinds imports and `deploy/` apply (ServiceAccount,
//! Deployment, StatefulSet, Service, NetworkPolicy), RBAC's four kinds, apiextensions'
//! CustomResourceDefinition, and lariat's own kinds.
//!
//! Each is described as a CustomResourceDefinition, so built-in and user kinds share one
//! code path. Core schemas are generated from k8s-openapi's Rust types.

use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::registry::{Origin, Printer, Registry, ResourceType, StoredAs};

/// A structural schema for `T`, generated the way kube-derive does for custom resources, with
/// `metadata` left to the API server.
fn schema_of<T: JsonSchema>() -> Value {
    generate::<T>(false)
}

/// `T`'s schema, with kube-derive's structural rewriting or without. k8s-openapi's types need
/// none (a test checks that it would change nothing), and it costs: it parses each subschema
/// again at every level above it, half of a fresh server's start (0.35 of 0.7 s) for these
/// kinds' deep schemas (a Deployment's holds a whole Pod's).
fn generate<T: JsonSchema>(structural_rewrite: bool) -> Value {
    let mut settings = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default());
    if structural_rewrite {
        settings = settings.with_transform(kube::core::schema::StructuralSchemaRewriter);
    }
    let generator = settings.into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<T>()).expect("schemas serialize");
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("title");
        obj.remove("$defs");
        obj.remove("definitions");
    }
    schema["properties"]["metadata"] = json!({"type": "object"});
    schema
}

#[allow(clippy::too_many_arguments)]
fn definition(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short_names: &[&str],
    schema: Value,
    columns: Value,
    status: bool,
) -> Value {
    let mut version_spec = json!({
        "name": version,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    });
    if status {
        version_spec["subresources"] = json!({"status": {}});
    }
    json!({
        "metadata": {"name": if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }},
        "spec": {
            "group": group,
            "names": {"plural": plural, "kind": kind, "shortNames": short_names, "singular": kind.to_lowercase()},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [version_spec],
        }
    })
}

fn age() -> Value {
    json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
}

/// A field's default, by its path of property names from the kind's root.
type Default = (&'static [&'static str], fn() -> Value);

const DEPLOYMENT_DEFAULTS: &[Default] = &[
    (&["spec", "replicas"], || json!(1)),
    (&["spec", "revisionHistoryLimit"], || json!(10)),
    (&["spec", "progressDeadlineSeconds"], || json!(600)),
    (
        &["spec", "strategy"],
        || json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    ),
    (&["spec", "strategy", "type"], || json!("RollingUpdate")),
];
const STATEFUL_SET_DEFAULTS: &[Default] = &[
    (&["spec", "replicas"], || json!(1)),
    (&["spec", "revisionHistoryLimit"], || json!(10)),
    (&["spec", "podManagementPolicy"], || json!("OrderedReady")),
    (
        &["spec", "updateStrategy"],
        || json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    ),
    (&["spec", "updateStrategy", "type"], || {
        json!("RollingUpdate")
    }),
    (
        &["spec", "persistentVolumeClaimRetentionPolicy"],
        || json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    ),
];
const DAEMON_SET_DEFAULTS: &[Default] = &[
    (&["spec", "revisionHistoryLimit"], || json!(10)),
    (
        &["spec", "updateStrategy"],
        || json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
    ),
    (&["spec", "updateStrategy", "type"], || {
        json!("RollingUpdate")
    }),
];
const REPLICA_SET_DEFAULTS: &[Default] = &[(&["spec", "replicas"], || json!(1))];
const JOB_DEFAULTS: &[Default] = &[
    (&["spec", "parallelism"], || json!(1)),
    (&["spec", "backoffLimit"], || json!(6)),
    (&["spec", "completionMode"], || json!("NonIndexed")),
    (&["spec", "suspend"], || json!(false)),
];
const CRON_JOB_DEFAULTS: &[Default] = &[
    (&["spec", "concurrencyPolicy"], || json!("Allow")),
    (&["spec", "suspend"], || json!(false)),
    (&["spec", "successfulJobsHistoryLimit"], || json!(3)),
    (&["spec", "failedJobsHistoryLimit"], || json!(1)),
];
const CLAIM_DEFAULTS: &[Default] = &[(&["spec", "volumeMode"], || json!("Filesystem"))];
const VOLUME_DEFAULTS: &[Default] = &[
    (&["spec", "volumeMode"], || json!("Filesystem")),
    (&["spec", "persistentVolumeReclaimPolicy"], || {
        json!("Retain")
    }),
];
const STORAGE_CLASS_DEFAULTS: &[Default] = &[
    (&["reclaimPolicy"], || json!("Delete")),
    (&["volumeBindingMode"], || json!("Immediate")),
];
const SERVICE_DEFAULTS: &[Default] = &[
    (&["spec", "type"], || json!("ClusterIP")),
    (&["spec", "sessionAffinity"], || json!("None")),
    (&["spec", "internalTrafficPolicy"], || json!("Cluster")),
];

/// `schema` with the defaults kube-apiserver gives a built-in workload kind's spec where they
/// do not depend on other fields (its `SetDefaults_*` functions), as schema defaults: kubectl
/// reads them (`rollout status` refuses a StatefulSet without an update strategy type), and
/// so do the simulated clusters' controllers. A Pod template's own defaults
/// (`terminationMessagePath`, ...) are left out: the schema has no list-map keys for its
/// containers, so a defaulted container would differ from every applier's and conflict.
fn defaulted(mut schema: Value, defaults: &[Default]) -> Value {
    for (path, value) in defaults {
        let mut node = &mut schema;
        for key in *path {
            node = &mut node["properties"][*key];
        }
        node["default"] = value();
    }
    schema
}

/// A definition with the `scale` subresource over `spec.replicas`, as Deployments,
/// StatefulSets and ReplicaSets have it (`kubectl scale`).
fn scalable(mut definition: Value) -> Value {
    for version in definition["spec"]["versions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        version["subresources"]["scale"] = json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        });
    }
    definition
}

/// The schema of a CustomResourceDefinition as stored: the spec's deep shape is checked by
/// `ResourceType::from_crd`, which gives better errors than a schema could.
fn crd_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
        "required": ["spec"],
    })
}

/// A registry of the core Kubernetes kinds every instance serves ([`core_types`]).
pub fn core_kinds() -> Registry {
    let registry = Registry::default();
    for rt in core_types() {
        registry.insert(rt);
    }
    registry
}

// Long: one entry per core kind, a table read down rather than a procedure to follow.
/// Resource types for the core and apiextensions kinds.
pub fn core_types() -> Vec<ResourceType> {
    use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Secret};
    let mut events = ResourceType::from_crd(
        &definition(
            "",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            schema_of::<Event>(),
            json!([
                {"name": "Last Seen", "type": "date", "jsonPath": ".lastTimestamp"},
                {"name": "Type", "type": "string", "jsonPath": ".type"},
                {"name": "Reason", "type": "string", "jsonPath": ".reason"},
                {"name": "Object", "type": "string", "jsonPath": ".involvedObject.name"},
                {"name": "Message", "type": "string", "jsonPath": ".message"},
            ]),
            false,
        ),
        Origin::Core,
    )
    .expect("event definition is valid");
    print_events(&mut events);
    events.field_label_paths = vec![("source".into(), "source.component".into())];
    events.selectable_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]
    .map(String::from)
    .to_vec();
    let mut secrets = ResourceType::from_crd(
        &definition(
            "",
            "v1",
            "Secret",
            "secrets",
            true,
            &[],
            schema_of::<Secret>(),
            json!([
                {"name": "Type", "type": "string", "jsonPath": ".type"},
                {"name": "Data", "type": "integer", "jsonPath": ".data"},
                age(),
            ]),
            false,
        ),
        Origin::Core,
    )
    .expect("secret definition is valid");
    secrets.selectable_fields = vec!["type".into()];
    let mut others = [
        definition(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            schema_of::<Namespace>(),
            json!([{"name": "Status", "type": "string", "jsonPath": ".status.phase"}, age()]),
            true,
        ),
        // Nodes: a workload cluster's machines as Kubernetes sees them. lariat serves them so
        // its simulated workload clusters (and tests standing in for real ones) can.
        definition(
            "",
            "v1",
            "Node",
            "nodes",
            false,
            &["no"],
            schema_of::<Node>(),
            json!([
                {"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                {"name": "Roles", "type": "string", "jsonPath": ".metadata.labels"},
                age(),
                {"name": "Version", "type": "string", "jsonPath": ".status.nodeInfo.kubeletVersion"},
            ]),
            true,
        ),
        definition(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            schema_of::<ConfigMap>(),
            json!([{"name": "Data", "type": "integer", "jsonPath": ".data"}, age()]),
            false,
        ),
        // What an agent's import manifest installs, so simulated workload clusters accept it
        // as real ones do (and later hold what Fleet deploys).
        definition(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            schema_of::<k8s_openapi::api::core::v1::ServiceAccount>(),
            json!([age()]),
            false,
        ),
        // RBAC, enforced by `rbac.rs` on the management plane.
        definition(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            &[],
            schema_of::<k8s_openapi::api::rbac::v1::Role>(),
            json!([{"name": "Created At", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]),
            false,
        ),
        definition(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
            schema_of::<k8s_openapi::api::rbac::v1::ClusterRole>(),
            json!([{"name": "Created At", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]),
            false,
        ),
        definition(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            &[],
            schema_of::<k8s_openapi::api::rbac::v1::RoleBinding>(),
            json!([
                {"name": "Role", "type": "string", "jsonPath": ".roleRef.name"},
                age(),
            ]),
            false,
        ),
        definition(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
            schema_of::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(),
            json!([
                {"name": "Role", "type": "string", "jsonPath": ".roleRef.name"},
                age(),
            ]),
            false,
        ),
        scalable(definition(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            &["deploy"],
            defaulted(schema_of::<k8s_openapi::api::apps::v1::Deployment>(), DEPLOYMENT_DEFAULTS),
            json!([
                {"name": "Ready", "type": "string", "jsonPath": ".status.readyReplicas"},
                {"name": "Up-to-date", "type": "integer", "jsonPath": ".status.updatedReplicas"},
                {"name": "Available", "type": "integer", "jsonPath": ".status.availableReplicas"},
                age(),
            ]),
            true,
        )),
        // What `deploy/` runs lariat itself with, so its manifests can be checked against a
        // lariat server (`kubectl apply --dry-run=server`) and applied to simulated clusters.
        scalable(definition(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            &["sts"],
            defaulted(schema_of::<k8s_openapi::api::apps::v1::StatefulSet>(), STATEFUL_SET_DEFAULTS),
            json!([
                {"name": "Ready", "type": "string", "jsonPath": ".status.readyReplicas"},
                age(),
            ]),
            true,
        )),
        definition(
            "",
            "v1",
            "Service",
            "services",
            true,
            &["svc"],
            defaulted(schema_of::<k8s_openapi::api::core::v1::Service>(), SERVICE_DEFAULTS),
            json!([
                {"name": "Type", "type": "string", "jsonPath": ".spec.type"},
                {"name": "Cluster-IP", "type": "string", "jsonPath": ".spec.clusterIP"},
                age(),
            ]),
            true,
        ),
        // Leader election among replicas sharing a datastore (`leader.rs`), as
        // kube-controller-manager's: `kubectl get leases -n lariat-system` shows the holder.
        definition(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            schema_of::<k8s_openapi::api::coordination::v1::Lease>(),
            json!([
                {"name": "Holder", "type": "string", "jsonPath": ".spec.holderIdentity"},
                age(),
            ]),
            false,
        ),
        definition(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
            schema_of::<k8s_openapi::api::networking::v1::NetworkPolicy>(),
            json!([age()]),
            false,
        ),
        definition(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            crd_schema(),
            json!([{"name": "Created At", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]),
            true,
        ),
    ]
    .map(|d| ResourceType::from_crd(&d, Origin::Core).expect("core definitions are valid"));
    for rt in others
        .iter_mut()
        .filter(|rt| rt.kind == "Deployment" || rt.kind == "StatefulSet")
    {
        for version in &mut rt.versions {
            for column in &mut version.printer_columns {
                if column.name == "Ready" {
                    column.printer = Some(Printer::ReadyReplicas);
                }
            }
        }
    }
    for rt in others.iter_mut().filter(|rt| rt.kind == "Node") {
        for version in &mut rt.versions {
            for column in &mut version.printer_columns {
                column.printer = match column.name.as_str() {
                    "Status" => Some(Printer::NodeStatus),
                    "Roles" => Some(Printer::NodeRoles),
                    _ => None,
                };
            }
        }
    }
    let mut types = vec![events, events_k8s_io(), secrets];
    types.extend(others);
    types
}

fn print_events(events: &mut ResourceType) {
    for version in &mut events.versions {
        for column in &mut version.printer_columns {
            column.printer = match column.name.as_str() {
                "Object" => Some(Printer::EventObject),
                "Last Seen" => Some(Printer::EventLastSeen),
                _ => None,
            };
        }
    }
}

/// Core v1 Event fields and their events.k8s.io/v1 names; the others are named alike.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename_fields(mut event: Value, to_events_k8s_io: bool) -> Value {
    if let Some(fields) = event.as_object_mut() {
        for (core, events) in EVENT_FIELDS {
            let (from, to) = if to_events_k8s_io {
                (core, events)
            } else {
                (events, core)
            };
            match fields.remove(from) {
                Some(value) => {
                    fields.insert(to.to_string(), value);
                }
                None => {
                    fields.remove(to);
                }
            }
        }
        fields.insert("kind".into(), json!("Event"));
        if !to_events_k8s_io {
            fields.insert("apiVersion".into(), json!("v1"));
        }
    }
    event
}

/// events.k8s.io/v1 Event: the newer shape of the same Events, served from the core v1
/// objects as Kubernetes serves it (kube-rs's and client-go's new event recorders write it;
/// `kubectl describe` reads core v1).
fn events_k8s_io() -> ResourceType {
    let mut events = ResourceType::from_crd(
        &definition(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            schema_of::<k8s_openapi::api::events::v1::Event>(),
            json!([
                {"name": "Last Seen", "type": "date", "jsonPath": ".deprecatedLastTimestamp"},
                {"name": "Type", "type": "string", "jsonPath": ".type"},
                {"name": "Reason", "type": "string", "jsonPath": ".reason"},
                {"name": "Object", "type": "string", "jsonPath": ".regarding.name"},
                {"name": "Message", "type": "string", "jsonPath": ".note"},
            ]),
            false,
        ),
        Origin::Core,
    )
    .expect("events.k8s.io definition is valid");
    print_events(&mut events);
    events.selectable_fields = [
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ]
    .map(String::from)
    .to_vec();
    events.stored_as = Some(StoredAs {
        group: "",
        plural: "events",
        from_storage: |event| rename_fields(event, true),
        to_storage: |event| rename_fields(event, false),
    });
    events
}

/// A cluster that runs workloads: [`core_kinds`] and the kinds its controllers, scheduler and
/// kubelets act on (Pods, ReplicaSets, DaemonSets, Jobs, CronJobs, EndpointSlices). What a
/// simulated workload cluster serves; the management plane runs no Pods, so it serves none.
pub fn workload_kinds() -> Registry {
    let registry = core_kinds();
    for rt in workload_types() {
        registry.insert(rt);
    }
    registry
}

// Long: one entry per workload kind, a table read down rather than a procedure to follow.
/// Resource types for the kinds only a cluster that runs workloads serves.
pub fn workload_types() -> Vec<ResourceType> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    let mut types = [
        definition(
            "",
            "v1",
            "Pod",
            "pods",
            true,
            &["po"],
            schema_of::<core::Pod>(),
            json!([
                {"name": "Ready", "type": "string", "jsonPath": ".status.containerStatuses"},
                {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Restarts", "type": "string", "jsonPath": ".status.containerStatuses"},
                age(),
                {"name": "IP", "type": "string", "jsonPath": ".status.podIP", "priority": 1},
                {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName", "priority": 1},
            ]),
            true,
        ),
        scalable(definition(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            &["rs"],
            defaulted(schema_of::<apps::ReplicaSet>(), REPLICA_SET_DEFAULTS),
            json!([
                {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Current", "type": "integer", "jsonPath": ".status.replicas"},
                {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                age(),
            ]),
            true,
        )),
        definition(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            true,
            &["ds"],
            defaulted(schema_of::<apps::DaemonSet>(), DAEMON_SET_DEFAULTS),
            json!([
                {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredNumberScheduled"},
                {"name": "Current", "type": "integer", "jsonPath": ".status.currentNumberScheduled"},
                {"name": "Ready", "type": "integer", "jsonPath": ".status.numberReady"},
                {"name": "Up-to-date", "type": "integer", "jsonPath": ".status.updatedNumberScheduled"},
                {"name": "Available", "type": "integer", "jsonPath": ".status.numberAvailable"},
                age(),
            ]),
            true,
        ),
        definition(
            "batch",
            "v1",
            "Job",
            "jobs",
            true,
            &[],
            defaulted(schema_of::<batch::Job>(), JOB_DEFAULTS),
            json!([
                {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeeded"},
                {"name": "Completions", "type": "integer", "jsonPath": ".spec.completions"},
                age(),
            ]),
            true,
        ),
        definition(
            "batch",
            "v1",
            "CronJob",
            "cronjobs",
            true,
            &["cj"],
            defaulted(schema_of::<batch::CronJob>(), CRON_JOB_DEFAULTS),
            json!([
                {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
                {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
                {"name": "Last Schedule", "type": "date", "jsonPath": ".status.lastScheduleTime"},
                age(),
            ]),
            true,
        ),
        definition(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            &["pvc"],
            defaulted(schema_of::<core::PersistentVolumeClaim>(), CLAIM_DEFAULTS),
            json!([
                {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Volume", "type": "string", "jsonPath": ".spec.volumeName"},
                {"name": "Capacity", "type": "string", "jsonPath": ".status.capacity.storage"},
                {"name": "StorageClass", "type": "string", "jsonPath": ".spec.storageClassName"},
                age(),
                {"name": "VolumeMode", "type": "string", "jsonPath": ".spec.volumeMode", "priority": 1},
            ]),
            true,
        ),
        definition(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            &["pv"],
            defaulted(schema_of::<core::PersistentVolume>(), VOLUME_DEFAULTS),
            json!([
                {"name": "Capacity", "type": "string", "jsonPath": ".spec.capacity.storage"},
                {"name": "Reclaim Policy", "type": "string", "jsonPath": ".spec.persistentVolumeReclaimPolicy"},
                {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Claim", "type": "string", "jsonPath": ".spec.claimRef.name"},
                {"name": "StorageClass", "type": "string", "jsonPath": ".spec.storageClassName"},
                age(),
            ]),
            true,
        ),
        definition(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            &["sc"],
            defaulted(
                schema_of::<k8s_openapi::api::storage::v1::StorageClass>(),
                STORAGE_CLASS_DEFAULTS,
            ),
            json!([
                {"name": "Provisioner", "type": "string", "jsonPath": ".provisioner"},
                {"name": "ReclaimPolicy", "type": "string", "jsonPath": ".reclaimPolicy"},
                {"name": "VolumeBindingMode", "type": "string", "jsonPath": ".volumeBindingMode"},
                {"name": "AllowVolumeExpansion", "type": "boolean", "jsonPath": ".allowVolumeExpansion"},
                age(),
            ]),
            false,
        ),
        definition(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            true,
            &["ing"],
            schema_of::<k8s_openapi::api::networking::v1::Ingress>(),
            json!([
                {"name": "Class", "type": "string", "jsonPath": ".spec.ingressClassName"},
                {"name": "Hosts", "type": "string", "jsonPath": ".spec.rules[*].host"},
                {"name": "Address", "type": "string", "jsonPath": ".status.loadBalancer.ingress[*].ip"},
                age(),
            ]),
            true,
        ),
        definition(
            "networking.k8s.io",
            "v1",
            "IngressClass",
            "ingressclasses",
            false,
            &[],
            schema_of::<k8s_openapi::api::networking::v1::IngressClass>(),
            json!([
                {"name": "Controller", "type": "string", "jsonPath": ".spec.controller"},
                {"name": "Parameters", "type": "string", "jsonPath": ".spec.parameters.name"},
                age(),
            ]),
            false,
        ),
        definition(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            schema_of::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(),
            json!([
                {"name": "Min Available", "type": "string", "jsonPath": ".spec.minAvailable"},
                {"name": "Max Unavailable", "type": "string", "jsonPath": ".spec.maxUnavailable"},
                {"name": "Allowed Disruptions", "type": "integer", "jsonPath": ".status.disruptionsAllowed"},
                age(),
            ]),
            true,
        ),
        definition(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
            &["hpa"],
            schema_of::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(),
            json!([
                {"name": "Reference", "type": "string", "jsonPath": ".spec.scaleTargetRef.name"},
                {"name": "MinPods", "type": "integer", "jsonPath": ".spec.minReplicas"},
                {"name": "MaxPods", "type": "integer", "jsonPath": ".spec.maxReplicas"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".status.currentReplicas"},
                age(),
            ]),
            true,
        ),
        definition(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
            &[],
            schema_of::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>(),
            json!([
                {"name": "Webhooks", "type": "string", "jsonPath": ".webhooks[*].name"},
                age(),
            ]),
            false,
        ),
        definition(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            false,
            &[],
            schema_of::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>(),
            json!([
                {"name": "Webhooks", "type": "string", "jsonPath": ".webhooks[*].name"},
                age(),
            ]),
            false,
        ),
        definition(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            &[],
            schema_of::<k8s_openapi::api::discovery::v1::EndpointSlice>(),
            json!([
                {"name": "AddressType", "type": "string", "jsonPath": ".addressType"},
                age(),
            ]),
            false,
        ),
    ]
    .map(|d| ResourceType::from_crd(&d, Origin::Core).expect("workload definitions are valid"));
    for rt in types.iter_mut().filter(|rt| rt.kind == "Pod") {
        for version in &mut rt.versions {
            for column in &mut version.printer_columns {
                column.printer = match column.name.as_str() {
                    "Ready" => Some(Printer::PodReady),
                    "Status" => Some(Printer::PodStatus),
                    "Restarts" => Some(Printer::PodRestarts),
                    _ => None,
                };
            }
        }
    }
    types.into()
}

/// Resource types for the kinds a configuration serves beyond the core ones (`Config::kinds`),
/// from their CRDs.
pub fn lariat_types(
    crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> Vec<ResourceType> {
    crds.iter()
        .map(|crd| {
            let value = serde_json::to_value(crd).expect("CRDs serialize");
            ResourceType::from_crd(&value, Origin::Lariat).unwrap_or_else(|causes| {
                panic!(
                    "built-in CRD {} is invalid: {causes:?}",
                    crd.metadata.name.clone().unwrap_or_default()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "dev.1", "namespace": "default"},
            "involvedObject": {"kind": "Cluster", "name": "dev"},
            "message": "Provisioned", "reason": "Provisioned", "type": "Normal",
            "source": {"component": "cluster-controller"}, "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "reportingComponent": "cluster-controller", "reportingInstance": "lariat",
        });
        let new = rename_fields(core.clone(), true);
        assert_eq!(new["regarding"]["name"], "dev");
        assert_eq!(new["note"], "Provisioned");
        assert_eq!(new["deprecatedCount"], 3);
        assert_eq!(new["reportingController"], "cluster-controller");
        assert!(new.get("involvedObject").is_none() && new.get("message").is_none());
        assert_eq!(rename_fields(new, false), core);
    }

    /// [`schema_of`] skips kube-derive's structural rewriting: it must have nothing to do.
    #[test]
    fn core_schemas_need_no_structural_rewriting() {
        use k8s_openapi::api::{apps, coordination, core::v1 as core, events, networking, rbac};
        fn same<T: JsonSchema>() {
            assert_eq!(
                generate::<T>(false),
                generate::<T>(true),
                "{}",
                std::any::type_name::<T>()
            );
        }
        same::<core::Event>();
        same::<core::Secret>();
        same::<core::Namespace>();
        same::<core::Node>();
        same::<core::ConfigMap>();
        same::<core::ServiceAccount>();
        same::<core::Service>();
        same::<rbac::v1::Role>();
        same::<rbac::v1::ClusterRole>();
        same::<rbac::v1::RoleBinding>();
        same::<rbac::v1::ClusterRoleBinding>();
        same::<apps::v1::Deployment>();
        same::<apps::v1::StatefulSet>();
        same::<coordination::v1::Lease>();
        same::<networking::v1::NetworkPolicy>();
        same::<events::v1::Event>();
        same::<core::Pod>();
        same::<apps::v1::ReplicaSet>();
        same::<apps::v1::DaemonSet>();
        same::<k8s_openapi::api::batch::v1::Job>();
        same::<k8s_openapi::api::batch::v1::CronJob>();
        same::<k8s_openapi::api::discovery::v1::EndpointSlice>();
    }

    #[test]
    fn core_schemas_are_structural_and_typed() {
        for rt in core_types().into_iter().chain(workload_types()) {
            let schema = rt.storage_version().schema.as_ref().expect("schema");
            let mut causes = vec![];
            crate::schema::check_structural(schema, &rt.kind, &mut causes);
            assert!(causes.is_empty(), "{}: {causes:?}", rt.kind);
        }
        let configmaps = core_types()
            .into_iter()
            .find(|r| r.plural == "configmaps")
            .unwrap();
        let schema = configmaps.storage_version().schema.clone().unwrap();
        assert_eq!(schema["properties"]["data"]["type"], "object");
        assert_eq!(
            schema["properties"]["data"]["additionalProperties"]["type"],
            "string"
        );
    }
}
