//! Reads Cluster API manifests into the typed kinds, writes them back, and checks them against
//! lariat's generated schemas.

mod support;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResourceExt, Resource};
use lariat_api::capi::cluster::ClusterPhase;
use lariat_api::capi::machine_deployment::MachineDeploymentStrategyType;
use lariat_api::capi::machine_set::MachineSetDeletePolicy;
use lariat_api::capi::{
    Cluster, ClusterSpec, Machine, MachineDeployment, MachineHealthCheck, MachineSet,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The Cluster manifest in the seed document, between `kubectl apply -f - <<EOF` and `EOF`.
fn seed_cluster_manifest() -> Value {
    let path = support::seeds_dir().join("003_ac129f6fefdd5708.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let start = text
        .find("apiVersion: cluster.x-k8s.io/v1beta1")
        .expect("the seed holds a cluster.x-k8s.io/v1beta1 manifest");
    let end = start
        + text[start..]
            .find("\nEOF")
            .expect("the heredoc ends with EOF");
    serde_yaml_ng::from_str(&text[start..end]).expect("the seed manifest is YAML")
}

/// Reads `manifest` as `K`, writes it back, and returns the typed object; the written form must
/// equal the input, so nothing was lost or invented on the way.
fn round_trip<K: Serialize + DeserializeOwned>(manifest: &Value) -> K {
    let typed: K = serde_json::from_value(manifest.clone())
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest["kind"]));
    let written = serde_json::to_value(&typed).expect("a typed object serializes");
    assert_eq!(&written, manifest, "round trip of {}", manifest["kind"]);
    typed
}

/// The problems lariat's API server would find with `manifest`, given the kind's CRD.
fn schema_problems<K: CustomResourceExt>(manifest: &Value) -> Vec<String> {
    let crd = support::to_json(&K::crd());
    let schema = &support::version(&crd, "v1beta1")["schema"]["openAPIV3Schema"];
    // apiVersion, kind and metadata are the API server's own business; see OMITTED in the
    // compatibility test.
    let mut body = manifest.clone();
    for key in ["apiVersion", "kind", "metadata"] {
        body.as_object_mut().unwrap().remove(key);
    }
    support::validate(&body, schema)
}

#[test]
fn seed_cluster_reads_round_trips_and_validates() {
    let manifest = seed_cluster_manifest();
    let cluster: Cluster = round_trip(&manifest);

    assert_eq!(cluster.metadata.name.as_deref(), Some("prod-us-east"));
    let pods = cluster
        .spec
        .cluster_network
        .as_ref()
        .and_then(|n| n.pods.as_ref());
    assert_eq!(
        pods.map(|p| p.cidr_blocks.clone()),
        Some(vec!["192.168.0.0/16".to_owned()])
    );
    let infra = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .expect("infrastructureRef");
    assert_eq!(
        infra.api_version.as_deref(),
        Some("infrastructure.cluster.x-k8s.io/v1beta2")
    );
    assert_eq!(infra.kind.as_deref(), Some("AWSCluster"));
    assert_eq!(infra.name.as_deref(), Some("prod-us-east"));
    assert_eq!(Cluster::api_version(&()), "cluster.x-k8s.io/v1beta1");

    assert_eq!(schema_problems::<Cluster>(&manifest), Vec::<String>::new());
}

#[test]
fn unset_fields_are_left_out() {
    let cluster = Cluster::new("empty", ClusterSpec::default());
    assert_eq!(
        serde_json::to_value(&cluster).unwrap(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": "empty"},
            "spec": {},
        })
    );
}

/// Manifests in the shape `clusterctl generate cluster` and the Cluster API controllers write,
/// with a status as the controllers report it. Durations are in the canonical form both Go and
/// `kube::core::Duration` write, so they round-trip unchanged.
fn manifests() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": "dev", "namespace": "default"},
            "spec": {
                "clusterNetwork": {
                    "apiServerPort": 6443,
                    "pods": {"cidrBlocks": ["192.168.0.0/16"]},
                    "services": {"cidrBlocks": ["10.128.0.0/12"]},
                    "serviceDomain": "cluster.local"
                },
                "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
                "controlPlaneRef": {
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
                    "kind": "KubeadmControlPlane",
                    "name": "dev-control-plane"
                },
                "infrastructureRef": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                    "kind": "DockerCluster",
                    "name": "dev"
                },
                "topology": {
                    "class": "quick-start",
                    "version": "v1.30.0",
                    "controlPlane": {
                        "replicas": 3,
                        "nodeDrainTimeout": "300s",
                        "machineHealthCheck": {"enable": true, "maxUnhealthy": "40%"}
                    },
                    "workers": {"machineDeployments": [{
                        "class": "default-worker",
                        "name": "md-0",
                        "replicas": 2,
                        "strategy": {
                            "type": "RollingUpdate",
                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "0", "deletePolicy": "Oldest"}
                        },
                        "variables": {"overrides": [{"name": "imageRepository", "value": "registry.local"}]}
                    }]},
                    "variables": [
                        {"name": "podSecurityStandard", "value": {"enabled": true, "enforce": "baseline"}},
                        {"name": "replicas", "value": 3}
                    ]
                }
            },
            "status": {
                "phase": "Provisioned",
                "infrastructureReady": true,
                "controlPlaneReady": true,
                "observedGeneration": 4,
                "failureDomains": {"fd1": {"controlPlane": true, "attributes": {"zone": "a"}}},
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"},
                    {
                        "type": "TopologyReconciled",
                        "status": "False",
                        "severity": "Warning",
                        "reason": "TopologyReconcileFailed",
                        "message": "patching failed",
                        "lastTransitionTime": "2024-05-01T10:05:00Z"
                    }
                ],
                "v1beta2": {
                    "conditions": [{
                        "type": "Available",
                        "status": "True",
                        "observedGeneration": 4,
                        "reason": "Available",
                        "message": "",
                        "lastTransitionTime": "2024-05-01T10:00:00Z"
                    }],
                    "controlPlane": {"desiredReplicas": 3, "replicas": 3, "readyReplicas": 3},
                    "workers": {"desiredReplicas": 2, "versions": [{"version": "v1.30.0", "replicas": 2}]}
                }
            }
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineDeployment",
            "metadata": {"name": "dev-md-0", "namespace": "default"},
            "spec": {
                "clusterName": "dev",
                "replicas": 2,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "dev"}},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0, "deletePolicy": "Random"},
                    "remediation": {"maxInFlight": 1}
                },
                "template": {
                    "metadata": {"labels": {"nodepool": "md-0"}},
                    "spec": {
                        "clusterName": "dev",
                        "version": "v1.30.0",
                        "bootstrap": {"configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfigTemplate",
                            "name": "dev-md-0"
                        }},
                        "infrastructureRef": {
                            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                            "kind": "DockerMachineTemplate",
                            "name": "dev-md-0"
                        },
                        "nodeDrainTimeout": "600s",
                        "failureDomain": "fd1"
                    }
                }
            },
            "status": {
                "selector": "cluster.x-k8s.io/cluster-name=dev",
                "replicas": 2,
                "readyReplicas": 2,
                "updatedReplicas": 2,
                "availableReplicas": 2,
                "unavailableReplicas": 0,
                "phase": "Running",
                "observedGeneration": 1
            }
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineSet",
            "metadata": {"name": "dev-md-0-abcde", "namespace": "default"},
            "spec": {
                "clusterName": "dev",
                "replicas": 2,
                "deletePolicy": "Newest",
                "selector": {"matchExpressions": [
                    {"key": "cluster.x-k8s.io/deployment-name", "operator": "In", "values": ["dev-md-0"]}
                ]},
                "template": {"spec": {
                    "clusterName": "dev",
                    "bootstrap": {"dataSecretName": "dev-md-0-bootstrap"},
                    "infrastructureRef": {"kind": "DockerMachine", "name": "dev-md-0-abcde"}
                }}
            },
            "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": "prod-us-east-cp-x7k2l", "namespace": "default"},
            "spec": {
                "clusterName": "prod-us-east",
                "version": "v1.28.5",
                "bootstrap": {"configRef": {"kind": "KubeadmConfig", "name": "prod-us-east-cp-x7k2l"}},
                "infrastructureRef": {"kind": "AWSMachine", "name": "prod-us-east-cp-x7k2l"},
                "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
                "readinessGates": [{"conditionType": "APIServerPodHealthy"}],
                "taints": [{"key": "example.com/gpu", "effect": "NoSchedule", "propagation": "Always"}]
            },
            "status": {
                "phase": "Running",
                "bootstrapReady": true,
                "infrastructureReady": true,
                "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-0-1", "uid": "2a7d"},
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": "ip-10-0-0-1"}
                ],
                "nodeInfo": {
                    "machineID": "m", "systemUUID": "s", "bootID": "b",
                    "kernelVersion": "6.1", "osImage": "Ubuntu", "containerRuntimeVersion": "containerd://1.7",
                    "kubeletVersion": "v1.28.5", "kubeProxyVersion": "v1.28.5",
                    "operatingSystem": "linux", "architecture": "amd64"
                },
                "lastUpdated": "2024-05-01T10:00:00Z",
                "deletion": {"nodeDrainStartTime": "2024-05-02T10:00:00Z"},
                "conditions": [{"type": "NodeHealthy", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}]
            }
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineHealthCheck",
            "metadata": {"name": "dev-md-0-unhealthy", "namespace": "default"},
            "spec": {
                "clusterName": "dev",
                "maxUnhealthy": "40%",
                "nodeStartupTimeout": "600s",
                "selector": {"matchLabels": {"nodepool": "md-0"}},
                "unhealthyConditions": [
                    {"type": "Ready", "status": "Unknown", "timeout": "300s"},
                    {"type": "Ready", "status": "False", "timeout": "300s"}
                ],
                "remediationTemplate": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                    "kind": "DockerMachineRemediationTemplate",
                    "name": "dev"
                }
            },
            "status": {"expectedMachines": 2, "currentHealthy": 2, "remediationsAllowed": 1, "targets": ["dev-md-0-abcde-1"]}
        }),
    ]
}

#[test]
fn manifests_round_trip_and_validate() {
    for manifest in manifests() {
        let problems = match manifest["kind"].as_str().unwrap() {
            "Cluster" => {
                let cluster: Cluster = round_trip(&manifest);
                let status = cluster.status.as_ref().unwrap();
                assert_eq!(status.phase, Some(ClusterPhase::Provisioned));
                schema_problems::<Cluster>(&manifest)
            }
            "MachineDeployment" => {
                let md: MachineDeployment = round_trip(&manifest);
                let strategy = md.spec.strategy.as_ref().unwrap();
                assert_eq!(
                    strategy.type_,
                    Some(MachineDeploymentStrategyType::RollingUpdate)
                );
                let rolling = strategy.rolling_update.as_ref().unwrap();
                assert_eq!(rolling.max_surge, Some(IntOrString::String("25%".into())));
                assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
                let drain = md.spec.template.spec.as_ref().unwrap().node_drain_timeout;
                assert_eq!(drain, Some(std::time::Duration::from_secs(600).into()));
                schema_problems::<MachineDeployment>(&manifest)
            }
            "MachineSet" => {
                let ms: MachineSet = round_trip(&manifest);
                assert_eq!(ms.spec.delete_policy, Some(MachineSetDeletePolicy::Newest));
                schema_problems::<MachineSet>(&manifest)
            }
            "Machine" => {
                let machine: Machine = round_trip(&manifest);
                assert_eq!(machine.spec.version.as_deref(), Some("v1.28.5"));
                schema_problems::<Machine>(&manifest)
            }
            "MachineHealthCheck" => {
                let mhc: MachineHealthCheck = round_trip(&manifest);
                assert_eq!(
                    mhc.spec.max_unhealthy,
                    Some(IntOrString::String("40%".into()))
                );
                schema_problems::<MachineHealthCheck>(&manifest)
            }
            other => panic!("no case for {other}"),
        };
        assert_eq!(problems, Vec::<String>::new(), "{}", manifest["kind"]);
    }
}

/// The validator the tests rely on must reject what the API server would reject.
#[test]
fn schema_check_rejects_bad_manifests() {
    let check = |manifest: Value, expect: &str| {
        let problems = schema_problems::<Machine>(&manifest);
        assert!(
            problems.iter().any(|p| p.contains(expect)),
            "expected {expect:?} in {problems:#?}"
        );
    };
    let spec = json!({"clusterName": "c", "bootstrap": {}, "infrastructureRef": {}});
    let with = |path: &str, value: Value| {
        let mut manifest = json!({"spec": spec.clone()});
        let mut node = &mut manifest;
        let parts: Vec<&str> = path.split('.').collect();
        for part in &parts[..parts.len() - 1] {
            node = &mut node[*part];
        }
        node[parts[parts.len() - 1]] = value;
        manifest
    };
    check(
        with("spec.clusterName", json!(7)),
        ".spec.clusterName: 7 is not of type",
    );
    check(
        with("spec.surprise", json!("x")),
        ".spec.surprise: unknown field",
    );
    check(
        with("status.phase", json!("Exploded")),
        ".status.phase: \"Exploded\" is not one of",
    );
    check(
        json!({"spec": {"clusterName": "c"}}),
        ".spec.bootstrap: required but missing",
    );
}

#[test]
fn typed_reads_reject_values_outside_the_enums() {
    let mut manifest = manifests().remove(3);
    manifest["status"]["phase"] = json!("Exploded");
    assert!(serde_json::from_value::<Machine>(manifest).is_err());
}
