//! AWSManagedCluster (`infrastructure.cluster.x-k8s.io/v1beta2`): the infrastructure cluster of
//! an EKS cluster, which only mirrors its AWSManagedControlPlane (endpoint, readiness, failure
//! domains), as Cluster API AWS's.

use kube::CustomResource;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSManagedCluster",
    plural = "awsmanagedclusters",
    namespaced,
    status = "AWSManagedClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsmc",
    category = "cluster-api",
    doc = "The infrastructure cluster of an EKS cluster: it follows its AWSManagedControlPlane.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "The Cluster it belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the control plane is ready for worker nodes"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "The API server endpoint",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedClusterSpec {
    /// Where the API server is reached, copied from the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<crate::capi::cluster::ApiEndpoint>,
}

/// The observed state of an AWSManagedCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedClusterStatus {
    /// What holds of the cluster's infrastructure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    /// The availability zones, copied from the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, crate::capi::cluster::FailureDomainSpec>>,
    /// Whether the control plane is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}
