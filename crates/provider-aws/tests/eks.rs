//! An EKS cluster from Cluster API AWS's manifests, against moto: the network, the IAM role and
//! the EKS cluster are made, the status says ready with the endpoint, the kubeconfig carries an
//! EKS token; deleting the Cluster deletes every AWS resource lariat made, checked through
//! AWS's API.
//!
//! moto's authentication stays off here: with it on, moto refuses the signature of every EKS
//! request the AWS SDK for Rust makes (its REST-JSON check differs from AWS's), so which
//! credentials reach AWS is tested in `identity.rs`, on STS, where moto checks them.

mod common;

use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use common::Lariat;
use kube::api::{Api, DeleteParams, DynamicObject};
use lariat_provider_aws::moto::Moto;
use lariat_provider_aws::{Aws, Settings};
use serde_json::{Value, json};

const NS: &str = "team-a";

fn manifests(identity: &str) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": NS},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedCluster", "name": "prod"},
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedControlPlane", "name": "prod-control-plane"},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSManagedCluster",
            "metadata": {"name": "prod", "namespace": NS},
            "spec": {},
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "AWSManagedControlPlane",
            "metadata": {"name": "prod-control-plane", "namespace": NS},
            "spec": {
                "region": "us-east-1",
                "version": "v1.31.0",
                "identityRef": {"kind": "AWSClusterStaticIdentity", "name": identity},
                "additionalTags": {"team": "a"},
            },
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachinePool",
            "metadata": {"name": "prod-pool-0", "namespace": NS},
            "spec": {
                "clusterName": "prod",
                "replicas": 3,
                "template": {"spec": {
                    "clusterName": "prod",
                    "bootstrap": {"dataSecretName": ""},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedMachinePool", "name": "prod-pool-0"},
                }},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSManagedMachinePool",
            "metadata": {"name": "prod-pool-0", "namespace": NS},
            "spec": {
                "amiType": "AL2023_x86_64_STANDARD",
                "instanceType": "t3.large",
                "scaling": {"minSize": 1, "maxSize": 10},
                "labels": {"pool": "0"},
            },
        }),
    ]
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn tagged(key: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eks_cluster_is_made_with_its_network_and_deleted_leaving_nothing() {
    let moto = Moto::start();
    let (key, secret) = moto.user("capa", &["*"]).await;
    let lariat = Lariat::start().await;
    lariat.namespace(NS, json!({})).await;
    lariat
        .secret(
            "capa",
            &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
        )
        .await;
    lariat
        .apply(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSClusterStaticIdentity",
            "metadata": {"name": "capa"},
            "spec": {"secretRef": "capa", "allowedNamespaces": {}},
        }))
        .await;
    let aws = Aws::new(Settings {
        endpoint_url: Some(moto.endpoint.clone()),
        // moto makes and deletes at once; AWS takes minutes.
        poll_while_changing: Duration::from_secs(1),
        ..Settings::default()
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::spawn(lariat_controllers::run(
        lariat.caches.clone(),
        until_stopped(stopped.clone()),
    ));
    tokio::spawn(lariat_provider_aws::run(
        lariat.caches.clone(),
        aws.clone(),
        until_stopped(stopped.clone()),
    ));
    for manifest in manifests("capa") {
        lariat.apply(manifest).await;
    }

    let control_planes: Api<DynamicObject> = Api::namespaced_with(
        lariat.client.clone(),
        NS,
        &lariat_provider_aws::control_plane::resource(),
    );
    eventually(
        "the control plane is ready",
        Duration::from_secs(60),
        || {
            let api = control_planes.clone();
            async move {
                api.get("prod-control-plane")
                    .await
                    .is_ok_and(|cp| cp.data["status"]["ready"] == true)
            }
        },
    )
    .await;
    let control_plane = control_planes.get("prod-control-plane").await.unwrap();
    let spec = &control_plane.data["spec"];
    let status = &control_plane.data["status"];
    assert_eq!(spec["eksClusterName"], "team-a_prod-control-plane");
    assert_eq!(
        spec["network"]["subnets"].as_array().unwrap().len(),
        6,
        "{spec}"
    );
    assert!(
        spec["controlPlaneEndpoint"]["host"]
            .as_str()
            .unwrap()
            .ends_with(".eks.amazonaws.com")
    );
    assert_eq!(spec["controlPlaneEndpoint"]["port"], 443);
    assert_eq!(status["initialized"], true);
    assert_eq!(status["version"], "v1.31");
    assert_eq!(
        status["failureDomains"].as_object().unwrap().len(),
        3,
        "{status}"
    );

    // The infrastructure cluster follows, and with both the Cluster is provisioned.
    let managed_clusters: Api<DynamicObject> = Api::namespaced_with(
        lariat.client.clone(),
        NS,
        &lariat_provider_aws::managed_cluster::resource(),
    );
    eventually(
        "the AWSManagedCluster is ready",
        Duration::from_secs(30),
        || {
            let api = managed_clusters.clone();
            async move {
                api.get("prod")
                    .await
                    .is_ok_and(|c| c.data["status"]["ready"] == true)
            }
        },
    )
    .await;
    let managed = managed_clusters.get("prod").await.unwrap();
    assert_eq!(
        managed.data["spec"]["controlPlaneEndpoint"],
        spec["controlPlaneEndpoint"]
    );
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        lariat.client.clone(),
        NS,
        &kube::core::ApiResource::erase::<lariat_api::capi::Cluster>(&()),
    );
    eventually(
        "the Cluster is Provisioned",
        Duration::from_secs(30),
        || {
            let api = clusters.clone();
            async move {
                api.get("prod")
                    .await
                    .is_ok_and(|c| c.data["status"]["phase"] == "Provisioned")
            }
        },
    )
    .await;

    // The node group: three nodes, then five (seed 000's desired capacity change), through
    // the MachinePool's scale subresource as `kubectl scale machinepool` uses it.
    let pools: Api<lariat_api::capi::MachinePool> = Api::namespaced(lariat.client.clone(), NS);
    eventually(
        "the MachinePool runs 3 nodes",
        Duration::from_secs(60),
        || {
            let api = pools.clone();
            async move {
                api.get("prod-pool-0").await.is_ok_and(|p| {
                    let status = p.status.unwrap_or_default();
                    status.replicas == Some(3)
                        && status.phase
                            == Some(lariat_api::capi::machine_pool::MachinePoolPhase::Running)
                })
            }
        },
    )
    .await;
    let eks = aws_sdk_eks::Client::new(&moto.admin().await);
    let desired_size = || {
        let eks = eks.clone();
        async move {
            eks.describe_nodegroup()
                .cluster_name("team-a_prod-control-plane")
                .nodegroup_name("team-a_prod-pool-0")
                .send()
                .await
                .ok()
                .and_then(|g| g.nodegroup?.scaling_config?.desired_size)
        }
    };
    assert_eq!(desired_size().await, Some(3));
    pools
        .patch_scale(
            "prod-pool-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    eventually(
        "the node group's desired size is 5",
        Duration::from_secs(30),
        || {
            let size = desired_size();
            async move { size.await == Some(5) }
        },
    )
    .await;
    eventually("the MachinePool reports 5", Duration::from_secs(30), || {
        let api = pools.clone();
        async move {
            api.get("prod-pool-0")
                .await
                .is_ok_and(|p| p.status.unwrap_or_default().replicas == Some(5))
        }
    })
    .await;
    // Beyond the pool's bounds: refused with what to change, and the group stays at 5.
    pools
        .patch_scale(
            "prod-pool-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 20}})),
        )
        .await
        .unwrap();
    let node_pools: Api<DynamicObject> = Api::namespaced_with(
        lariat.client.clone(),
        NS,
        &lariat_provider_aws::managed_machine_pool::resource(),
    );
    eventually(
        "the pool says the scaling is refused",
        Duration::from_secs(30),
        || {
            let api = node_pools.clone();
            async move {
                api.get("prod-pool-0").await.is_ok_and(|p| {
                    p.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| {
                            c["reason"] == "InvalidScaling"
                                && c["message"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .contains("wants 20 replicas, outside spec.scaling [1, 10]")
                        })
                })
            }
        },
    )
    .await;
    assert_eq!(desired_size().await, Some(5));

    // What AWS holds, asked with the administrator's keys.
    let admin = moto.admin().await;
    let cluster = eks
        .describe_cluster()
        .name("team-a_prod-control-plane")
        .send()
        .await
        .unwrap()
        .cluster
        .unwrap();
    assert_eq!(cluster.version(), Some("1.31"));
    let tags = cluster.tags().unwrap();
    assert_eq!(
        tags["sigs.k8s.io/cluster-api-provider-aws/cluster/prod"],
        "owned"
    );
    assert_eq!(tags["team"], "a");
    assert_eq!(
        cluster.role_arn(),
        Some("arn:aws:iam::123456789012:role/team-a-prod-control-plane-iam-service-role")
    );
    let ec2 = aws_sdk_ec2::Client::new(&admin);
    let owned = || {
        vec![tagged(
            "sigs.k8s.io/cluster-api-provider-aws/cluster/prod",
            "owned",
        )]
    };
    let vpcs = ec2
        .describe_vpcs()
        .set_filters(Some(owned()))
        .send()
        .await
        .unwrap();
    assert_eq!(vpcs.vpcs().len(), 1);
    assert_eq!(
        vpcs.vpcs()[0].vpc_id(),
        spec["network"]["vpc"]["id"].as_str()
    );
    let nats = ec2
        .describe_nat_gateways()
        .set_filter(Some(owned()))
        .send()
        .await
        .unwrap();
    assert_eq!(nats.nat_gateways().len(), 3);

    // The kubeconfig: EKS's endpoint and CA, and a token as `aws eks get-token` makes it.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(lariat.client.clone(), NS);
    let kubeconfig = secrets.get("prod-kubeconfig").await.unwrap();
    let value = String::from_utf8(kubeconfig.data.unwrap()["value"].0.clone()).unwrap();
    assert!(
        value.contains(&format!(
            "server: https://{}",
            spec["controlPlaneEndpoint"]["host"].as_str().unwrap()
        )),
        "{value}"
    );
    assert!(value.contains("token: k8s-aws-v1."), "{value}");
    assert!(
        !value.contains(&secret),
        "the secret key never leaves lariat"
    );

    // A second look changes nothing: no create is repeated.
    let calls_before = aws.calls();
    let creates = |calls: &std::collections::BTreeMap<(String, String), u64>| -> u64 {
        calls
            .iter()
            .filter(|((_, op), _)| op.starts_with("Create") || op.starts_with("Allocate"))
            .map(|(_, n)| n)
            .sum()
    };
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"poke": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        creates(&aws.calls()),
        creates(&calls_before),
        "{:?}",
        aws.calls()
    );

    // Deleting the Cluster deletes everything lariat made in AWS.
    clusters
        .delete("prod", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the control plane is gone", Duration::from_secs(90), || {
        let api = control_planes.clone();
        async move { api.get_opt("prod-control-plane").await.unwrap().is_none() }
    })
    .await;
    assert!(
        eks.list_clusters()
            .send()
            .await
            .unwrap()
            .clusters()
            .is_empty(),
        "no EKS cluster"
    );
    assert!(
        ec2.describe_vpcs()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .vpcs()
            .is_empty()
    );
    assert!(
        ec2.describe_subnets()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .subnets()
            .is_empty()
    );
    assert!(
        ec2.describe_internet_gateways()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .internet_gateways()
            .is_empty()
    );
    assert!(
        ec2.describe_route_tables()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .route_tables()
            .is_empty()
    );
    assert!(
        ec2.describe_security_groups()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .security_groups()
            .is_empty()
    );
    assert!(
        ec2.describe_addresses()
            .set_filters(Some(owned()))
            .send()
            .await
            .unwrap()
            .addresses()
            .is_empty()
    );
    assert!(
        ec2.describe_nat_gateways()
            .set_filter(Some(owned()))
            .send()
            .await
            .unwrap()
            .nat_gateways()
            .iter()
            .all(|n| n.state().map(|s| s.as_str()) == Some("deleted")),
        "NAT gateways deleted"
    );
    assert!(desired_size().await.is_none(), "no node group");
    let iam = aws_sdk_iam::Client::new(&admin);
    assert!(
        iam.get_role()
            .role_name("team-a-prod-pool-0-nodegroup-iam-service-role")
            .send()
            .await
            .is_err(),
        "the node role lariat made is deleted"
    );
    assert!(
        iam.get_role()
            .role_name("team-a-prod-control-plane-iam-service-role")
            .send()
            .await
            .is_err(),
        "the role lariat made is deleted"
    );
    let _ = stop.send(true);
}
