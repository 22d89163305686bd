//! Reads Cluster API manifests into the typed kinds, writes them back, and checks them against
//! lariat's generated schemas.

mod support;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use lariat_api::bootstrap::KubeadmConfig;
use lariat_api::bootstrap::kubeadm_config::{Format, PartitionTableType};
use lariat_api::capi::cluster::ClusterPhase;
use lariat_api::capi::machine_deployment::MachineDeploymentStrategyType;
use lariat_api::capi::machine_set::MachineSetDeletePolicy;
use lariat_api::capi::{
    Cluster, ClusterSpec, Machine, MachineDeployment, MachineHealthCheck, MachineSet,
};
use lariat_api::controlplane::{KubeadmControlPlane, KubeadmControlPlaneTemplate};
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

#[test]
fn seed_cluster_reads_round_trips_and_validates() {
    let manifest = seed_cluster_manifest();
    let cluster: Cluster = support::round_trip(&manifest);

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

    assert_eq!(
        support::schema_problems::<Cluster>(&manifest),
        Vec::<String>::new()
    );
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
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmControlPlane",
            "metadata": {"name": "dev-control-plane", "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": "dev"}},
            "spec": {
                "replicas": 3,
                "version": "v1.30.0",
                "machineTemplate": {
                    "metadata": {"labels": {"tier": "control-plane"}},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                        "kind": "InMemoryMachineTemplate",
                        "name": "dev-control-plane"
                    },
                    "readinessGates": [{"conditionType": "APIServerPodHealthy"}],
                    "nodeDrainTimeout": "300s",
                    "nodeDeletionTimeout": "10s",
                    "taints": [{"key": "example.com/cp", "effect": "NoSchedule", "propagation": "OnInitialization"}]
                },
                "kubeadmConfigSpec": {
                    "clusterConfiguration": {
                        "apiServer": {
                            "certSANs": ["localhost", "127.0.0.1"],
                            "extraArgs": {"audit-log-maxage": "30"},
                            "extraEnvs": [
                                {"name": "GOGC", "value": "50"},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "audit", "key": "token", "optional": true}}}
                            ],
                            "extraVolumes": [{"name": "audit", "hostPath": "/var/log/audit", "mountPath": "/var/log/audit", "pathType": "DirectoryOrCreate"}],
                            "timeoutForControlPlane": "20s"
                        },
                        "controllerManager": {"extraArgs": {"enable-hostpath-provisioner": "true"}},
                        "etcd": {"local": {"dataDir": "/var/lib/etcd", "extraArgs": {"quota-backend-bytes": "8589934592"}}},
                        "networking": {"podSubnet": "192.168.0.0/16", "serviceSubnet": "10.128.0.0/12"},
                        "featureGates": {"EtcdLearnerMode": true},
                        "encryptionAlgorithm": "ECDSA-P256",
                        "certificateValidityPeriodDays": 365
                    },
                    "initConfiguration": {
                        "nodeRegistration": {
                            "criSocket": "unix:///var/run/containerd/containerd.sock",
                            "kubeletExtraArgs": {"eviction-hard": "nodefs.available<0%"},
                            "taints": [],
                            "imagePullPolicy": "IfNotPresent"
                        },
                        "localAPIEndpoint": {"advertiseAddress": "10.0.0.10", "bindPort": 6443},
                        "bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttl": "86400s", "usages": ["signing", "authentication"]}]
                    },
                    "joinConfiguration": {
                        "nodeRegistration": {
                            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
                        },
                        "controlPlane": {"localAPIEndpoint": {"bindPort": 6443}},
                        "discovery": {
                            "file": {
                                "kubeConfigPath": "/etc/kubernetes/discovery.conf",
                                "kubeConfig": {
                                    "cluster": {"server": "https://10.0.0.10:6443", "certificateAuthorityData": "LS0tLS1CRUdJTi0tLS0t"},
                                    "user": {"exec": {"command": "token-helper", "args": ["--cluster", "dev"], "env": [{"name": "MODE", "value": "join"}]}}
                                }
                            },
                            "timeout": "300s"
                        }
                    },
                    "preKubeadmCommands": ["systemctl restart containerd"],
                    "postKubeadmCommands": ["echo done"],
                    "format": "cloud-config",
                    "verbosity": 5
                },
                "rolloutBefore": {"certificatesExpiryDays": 21},
                "rolloutAfter": "2024-06-01T00:00:00Z",
                "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}},
                "remediationStrategy": {"maxRetry": 5, "retryPeriod": "120s", "minHealthyPeriod": "3600s"},
                "machineNamingStrategy": {"template": "{{ .kubeadmControlPlane.name }}-{{ .random }}"}
            },
            "status": {
                "selector": "cluster.x-k8s.io/cluster-name=dev,cluster.x-k8s.io/control-plane",
                "replicas": 3,
                "version": "v1.30.0",
                "updatedReplicas": 3,
                "readyReplicas": 2,
                "unavailableReplicas": 1,
                "initialized": true,
                "ready": true,
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Available", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"},
                    {"type": "MachinesReady", "status": "False", "severity": "Warning", "reason": "NodeStartupTimeout", "lastTransitionTime": "2024-05-01T10:05:00Z"}
                ],
                "lastRemediation": {"machine": "dev-control-plane-x7k2l", "timestamp": "2024-05-01T10:10:00Z", "retryCount": 1},
                "versions": [{"version": "v1.30.0", "replicas": 3}],
                "v1beta2": {"readyReplicas": 2, "availableReplicas": 2, "upToDateReplicas": 3}
            }
        }),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {"name": "dev-md-0-x7k2l", "namespace": "default"},
            "spec": {
                "joinConfiguration": {
                    "nodeRegistration": {"name": "node-1", "ignorePreflightErrors": ["Swap"], "imagePullSerial": true},
                    "discovery": {"bootstrapToken": {
                        "apiServerEndpoint": "10.0.0.10:6443",
                        "token": "abcdef.0123456789abcdef",
                        "caCertHashes": ["sha256:0123"],
                        "unsafeSkipCAVerification": false
                    }},
                    "skipPhases": ["preflight"],
                    "patches": {"directory": "/etc/kubeadm/patches"}
                },
                "files": [
                    {"path": "/etc/motd", "content": "hello", "owner": "root:root", "permissions": "0644"},
                    {"path": "/etc/secret", "contentFrom": {"secret": {"name": "extra", "key": "value"}}, "encoding": "base64", "append": true},
                    {"path": "/etc/templated", "content": "{{ ds.meta_data.hostname }}", "contentFormat": "Template"}
                ],
                "users": [{
                    "name": "capi",
                    "sudo": "ALL=(ALL) NOPASSWD:ALL",
                    "sshAuthorizedKeys": ["ssh-ed25519 AAAA capi"],
                    "passwdFrom": {"secret": {"name": "capi-password", "key": "hash"}},
                    "lockPassword": false,
                    "groups": "docker,wheel"
                }],
                "ntp": {"enabled": true, "servers": ["time.example.com"]},
                "diskSetup": {
                    "partitions": [{"device": "/dev/sdb", "layout": true, "tableType": "gpt",
                        "diskLayout": [{"percentage": 70}, {"percentage": 30, "partitionType": "LinuxSwap"}]}],
                    "filesystems": [{"device": "/dev/sdb1", "filesystem": "ext4", "label": "data", "extraOpts": ["-F"], "replaceFS": "ntfs"}]
                },
                "mounts": [["LABEL=data", "/var/lib/data"]],
                "bootCommands": ["echo boot"],
                "format": "ignition",
                "ignition": {"containerLinuxConfig": {"additionalConfig": "systemd: {}", "strict": true}},
                "useExperimentalRetryJoin": true
            },
            "status": {
                "ready": true,
                "dataSecretName": "dev-md-0-x7k2l",
                "observedGeneration": 1,
                "conditions": [{"type": "DataSecretAvailable", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}],
                "v1beta2": {"conditions": [{
                    "type": "DataSecretAvailable",
                    "status": "True",
                    "reason": "Available",
                    "message": "",
                    "lastTransitionTime": "2024-05-01T10:00:00Z"
                }]}
            }
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmControlPlaneTemplate",
            "metadata": {"name": "quick-start-control-plane", "namespace": "default"},
            "spec": {"template": {
                "metadata": {"labels": {"tier": "control-plane"}},
                "spec": {
                    "machineTemplate": {"nodeDrainTimeout": "60s"},
                    "kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"certSANs": ["localhost"]}}},
                    "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
                }
            }}
        }),
    ]
}

#[test]
fn manifests_round_trip_and_validate() {
    for manifest in manifests() {
        let problems = match manifest["kind"].as_str().unwrap() {
            "Cluster" => {
                let cluster: Cluster = support::round_trip(&manifest);
                let status = cluster.status.as_ref().unwrap();
                assert_eq!(status.phase, Some(ClusterPhase::Provisioned));
                support::schema_problems::<Cluster>(&manifest)
            }
            "MachineDeployment" => {
                let md: MachineDeployment = support::round_trip(&manifest);
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
                support::schema_problems::<MachineDeployment>(&manifest)
            }
            "MachineSet" => {
                let ms: MachineSet = support::round_trip(&manifest);
                assert_eq!(ms.spec.delete_policy, Some(MachineSetDeletePolicy::Newest));
                support::schema_problems::<MachineSet>(&manifest)
            }
            "Machine" => {
                let machine: Machine = support::round_trip(&manifest);
                assert_eq!(machine.spec.version.as_deref(), Some("v1.28.5"));
                support::schema_problems::<Machine>(&manifest)
            }
            "KubeadmControlPlane" => {
                let kcp: KubeadmControlPlane = support::round_trip(&manifest);
                let spec = &kcp.spec.kubeadm_config_spec;
                let init = spec.init_configuration.as_ref().unwrap();
                // An empty taint list means "no taints", unlike an absent one; it must survive.
                let registration = init.node_registration.as_ref().unwrap();
                assert_eq!(registration.taints, Some(vec![]));
                let rolling = kcp.spec.rollout_strategy.as_ref().unwrap();
                assert_eq!(
                    rolling.rolling_update.as_ref().unwrap().max_surge,
                    Some(IntOrString::Int(0))
                );
                let status = kcp.status.as_ref().unwrap();
                assert_eq!(status.last_remediation.as_ref().unwrap().retry_count, 1);
                support::schema_problems::<KubeadmControlPlane>(&manifest)
            }
            "KubeadmControlPlaneTemplate" => {
                let template: KubeadmControlPlaneTemplate = support::round_trip(&manifest);
                assert!(template.spec.template.spec.machine_template.is_some());
                support::schema_problems::<KubeadmControlPlaneTemplate>(&manifest)
            }
            "KubeadmConfig" => {
                let config: KubeadmConfig = support::round_trip(&manifest);
                assert_eq!(config.spec.format, Some(Format::Ignition));
                let disks = config.spec.disk_setup.as_ref().unwrap();
                let partition = &disks.partitions.as_ref().unwrap()[0];
                assert_eq!(partition.table_type, Some(PartitionTableType::Gpt));
                let status = config.status.as_ref().unwrap();
                assert_eq!(status.data_secret_name.as_deref(), Some("dev-md-0-x7k2l"));
                support::schema_problems::<KubeadmConfig>(&manifest)
            }
            "MachineHealthCheck" => {
                let mhc: MachineHealthCheck = support::round_trip(&manifest);
                assert_eq!(
                    mhc.spec.max_unhealthy,
                    Some(IntOrString::String("40%".into()))
                );
                support::schema_problems::<MachineHealthCheck>(&manifest)
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
        let problems = support::schema_problems::<Machine>(&manifest);
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
