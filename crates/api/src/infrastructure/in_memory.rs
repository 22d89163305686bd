//! lariat's in-memory infrastructure kinds: InMemoryCluster, InMemoryMachine and
//! InMemoryMachineTemplate.
//!
//! They follow the Cluster API infrastructure provider contract (`v1beta1` shape: `ready`,
//! `addresses`, `failureReason`/`failureMessage`, `failureDomains`), so the core controllers
//! treat them like any cloud's objects. No machine exists anywhere: the provider simulates
//! one, and `spec.behavior` says how long it takes and how it fails, so lifecycle controllers
//! can be tested against slow boots, boots that never finish and Nodes that go bad.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::capi::cluster::{ApiEndpoint, FailureDomainSpec};
use crate::capi::common::TemplateMetadata;
use crate::capi::conditions::Condition;
use crate::capi::machine::MachineAddress;

/// The finalizer the in-memory provider keeps on an InMemoryCluster until it is torn down.
pub const IN_MEMORY_CLUSTER_FINALIZER: &str = "inmemorycluster.infrastructure.cluster.x-k8s.io";
/// The finalizer the in-memory provider keeps on an InMemoryMachine until it is torn down.
pub const IN_MEMORY_MACHINE_FINALIZER: &str = "inmemorymachine.infrastructure.cluster.x-k8s.io";
/// The scheme of in-memory provider IDs, as in `in-memory:///default/dev-md-0-x7k2l`.
pub const PROVIDER_ID_SCHEME: &str = "in-memory";

/// The provider ID of the in-memory machine `name` in `namespace`.
///
/// Namespace and name together are unique among InMemoryMachines, so the ID is too; Nodes of
/// the simulated workload cluster carry it in `spec.providerID`.
pub fn provider_id(namespace: &str, name: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}:///{namespace}/{name}")
}

/// The desired state of an InMemoryCluster.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "InMemoryCluster",
    plural = "inmemoryclusters",
    namespaced,
    status = "InMemoryClusterStatus",
    derive = "PartialEq",
    shortname = "imc",
    category = "cluster-api",
    category = "inmemory",
    doc = "The simulated infrastructure of a workload cluster: its control-plane endpoint and failure domains.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "The Cluster the InMemoryCluster belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Whether the simulated infrastructure is ready"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "The control-plane endpoint's host"
    ),
    printcolumn(
        name = "Port",
        type_ = "integer",
        json_path = ".spec.controlPlaneEndpoint.port",
        description = "The control-plane endpoint's port",
        priority = 10
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the InMemoryCluster was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterSpec {
    /// Where the workload cluster's API server is reached; the provider fills it when unset,
    /// and Cluster API copies it to the Cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The simulated failure domains to offer, by name; when unset, three zones (`zone-a`,
    /// `zone-b`, `zone-c`) that may all host control-plane machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, FailureDomainSpec>>,
}

/// The observed state of an InMemoryCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterStatus {
    /// The infrastructure is ready for Machines (the contract's `ready`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The failure domains the simulated infrastructure offers, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, FailureDomainSpec>>,
    /// A terminal problem, as a short machine-readable word (the contract's `failureReason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (the contract's `failureMessage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The InMemoryCluster's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// The desired state of an InMemoryMachine.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "InMemoryMachine",
    plural = "inmemorymachines",
    namespaced,
    status = "InMemoryMachineStatus",
    derive = "PartialEq",
    shortname = "imm",
    category = "cluster-api",
    category = "inmemory",
    doc = "A simulated machine backing one Cluster API Machine, with configurable boot time and failures.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "The Cluster the InMemoryMachine belongs to"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
        description = "The Machine that owns the InMemoryMachine"
    ),
    printcolumn(
        name = "Ready",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Whether the simulated machine has booted"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "The provider ID the simulated Node carries"
    ),
    printcolumn(
        name = "FailureDomain",
        type_ = "string",
        json_path = ".spec.failureDomain",
        description = "The failure domain the machine is placed in",
        priority = 10
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the InMemoryMachine was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineSpec {
    /// The machine's provider ID (see [`provider_id`]); set by the provider once it exists,
    /// and copied by Cluster API to the Machine.
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// The failure domain to place the machine in. The in-memory provider places machines by
    /// their Machine's `spec.failureDomain` and leaves this unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// How the simulated machine behaves: how long it takes to boot and how it fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behavior: Option<InMemoryMachineBehavior>,
}

impl InMemoryMachineSpec {
    /// The behaviour to simulate, with every unset field at its default.
    pub fn behavior(&self) -> InMemoryMachineBehavior {
        self.behavior.clone().unwrap_or_default()
    }
}

/// How a simulated machine behaves. Every field is optional; the defaults make a machine that
/// boots at once and stays healthy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineBehavior {
    /// How long provisioning takes before the machine boots, e.g. `2s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::schema::DURATION_PATTERN), extend("default" = "0s"))]
    pub provisioning_delay: Option<Duration>,
    /// Failure injection: the machine stays provisioning forever and never becomes ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub never_boots: Option<bool>,
    /// Failure injection: the machine's Node turns `NotReady` this long after it became
    /// `Ready`, e.g. `30s`; it stays healthy when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::schema::DURATION_PATTERN))]
    pub node_not_ready_after: Option<Duration>,
    /// Failure injection for the Pods that run on the machine's Node, by their containers'
    /// images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<InMemoryPodBehavior>,
}

/// The annotation of a simulated Node that carries its [`InMemoryPodBehavior`] (as JSON), for
/// the simulated kubelet; written when the Node joins, and anyone who may annotate the Node
/// may change it there.
pub const POD_BEHAVIOR_ANNOTATION: &str = "inmemory.infrastructure.cluster.x-k8s.io/pod-behavior";

/// How the Pods on a simulated Node fail, by their containers' images. Each entry is a
/// pattern where `*` stands for any text (`*:broken`, `registry.invalid/*`), matched against
/// the image as the Pod names it and as the runtime names it (`docker.io/library/nginx:1.27`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryPodBehavior {
    /// Images that cannot be pulled: the container waits in `ErrImagePull`, then
    /// `ImagePullBackOff`, and the Pod stays Pending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)))]
    pub image_pull_failures: Vec<String>,
    /// Images whose containers exit with code 1 a second after each start: restarted after
    /// a back-off that doubles from 10 s to 300 s (`CrashLoopBackOff`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)))]
    pub crash_loops: Vec<String>,
    /// Images whose containers run but never pass their readiness probe.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)))]
    pub never_ready: Vec<String>,
}

/// What becomes of a container on a simulated Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerFate {
    Runs,
    PullFails,
    CrashLoops,
    NeverReady,
}

impl InMemoryPodBehavior {
    /// The fate of a container of `image` (as the Pod names it, and as the runtime does).
    pub fn fate(&self, image: &str, normalized: &str) -> ContainerFate {
        let any = |patterns: &[String]| {
            patterns
                .iter()
                .any(|p| glob(p, image) || glob(p, normalized))
        };
        if any(&self.image_pull_failures) {
            ContainerFate::PullFails
        } else if any(&self.crash_loops) {
            ContainerFate::CrashLoops
        } else if any(&self.never_ready) {
            ContainerFate::NeverReady
        } else {
            ContainerFate::Runs
        }
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

impl InMemoryMachineBehavior {
    /// How long provisioning takes; zero when unset. A negative duration, which the schema's
    /// pattern rejects but a typed client could still build, also counts as zero.
    pub fn provisioning_delay(&self) -> std::time::Duration {
        non_negative(self.provisioning_delay)
    }

    /// Whether the machine never boots.
    pub fn never_boots(&self) -> bool {
        self.never_boots.unwrap_or(false)
    }

    /// How long after becoming `Ready` the Node turns `NotReady`, if it ever does.
    pub fn node_not_ready_after(&self) -> Option<std::time::Duration> {
        self.node_not_ready_after.map(|d| non_negative(Some(d)))
    }
}

fn non_negative(duration: Option<Duration>) -> std::time::Duration {
    match duration {
        Some(d) if !d.is_negative() => d.into(),
        _ => std::time::Duration::ZERO,
    }
}

/// The observed state of an InMemoryMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineStatus {
    /// The machine has booted (the contract's `ready`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The machine's addresses, copied by Cluster API to the Machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// A terminal problem, as a short machine-readable word (the contract's `failureReason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (the contract's `failureMessage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The InMemoryMachine's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// The desired state of an InMemoryMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "InMemoryMachineTemplate",
    plural = "inmemorymachinetemplates",
    namespaced,
    status = "InMemoryMachineTemplateStatus",
    derive = "PartialEq",
    shortname = "immt",
    category = "cluster-api",
    category = "inmemory",
    doc = "The InMemoryMachine a MachineDeployment or KubeadmControlPlane gives each of its Machines.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the InMemoryMachineTemplate was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineTemplateSpec {
    /// The InMemoryMachine to create for each Machine.
    pub template: InMemoryMachineTemplateResource,
}

/// The InMemoryMachine a template stamps out: metadata plus a spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineTemplateResource {
    /// Labels and annotations for each InMemoryMachine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each InMemoryMachine.
    pub spec: InMemoryMachineSpec,
}

/// The observed state of an InMemoryMachineTemplate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineTemplateStatus {
    /// The resources a machine made from this template offers, e.g. `cpu: "2"`, so the
    /// cluster autoscaler can scale a MachineDeployment up from zero (the contract's
    /// optional `capacity`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, crate::schema::Quantity>>")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_patterns_match_as_globs() {
        let behavior = InMemoryPodBehavior {
            image_pull_failures: vec!["*:broken".into()],
            crash_loops: vec!["docker.io/library/crashy*".into()],
            never_ready: vec!["ghcr.io/*/slow:*".into()],
        };
        let fate = |image: &str, full: &str| behavior.fate(image, full);
        assert_eq!(
            fate("nginx:broken", "docker.io/library/nginx:broken"),
            ContainerFate::PullFails
        );
        assert_eq!(
            fate("crashy", "docker.io/library/crashy:latest"),
            ContainerFate::CrashLoops
        );
        assert_eq!(
            fate("ghcr.io/org/slow:v1", "ghcr.io/org/slow:v1"),
            ContainerFate::NeverReady
        );
        assert_eq!(
            fate("nginx", "docker.io/library/nginx:latest"),
            ContainerFate::Runs
        );
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxbyy") && glob("*", ""));
        assert!(glob("abc", "abc") && !glob("abc", "abcd"));
    }
}
