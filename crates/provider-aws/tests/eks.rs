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

use common::{NS, Setup, condition, eventually, tagged};
use kube::api::{Api, DeleteParams, DynamicObject};
use lariat_provider_aws::Settings;
use lariat_provider_aws::moto::Moto;
use serde_json::{Value, json};

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
                    "version": "v1.31.0",
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

/// Waits until the controller of `prod-control-plane` has ended a pass that began after this
/// call, every AWS call of it made. A pass ends by writing the status it worked out, so a
/// `status.version` taken out is back once one has ended; a pass under way already may be the
/// one that puts it back, so it is taken out twice: the second time, one that began after the
/// first does.
async fn after_a_whole_pass(control_planes: &Api<DynamicObject>) {
    for _ in 0..2 {
        control_planes
            .patch_status(
                "prod-control-plane",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"version": null}})),
            )
            .await
            .unwrap();
        eventually(
            "a pass of the control plane ends",
            Duration::from_secs(30),
            || {
                let api = control_planes.clone();
                async move {
                    api.get("prod-control-plane")
                        .await
                        .is_ok_and(|cp| !cp.data["status"]["version"].is_null())
                }
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eks_cluster_is_made_with_its_network_and_deleted_leaving_nothing() {
    let moto = Moto::start();
    let endpoint = moto.endpoint.clone();
    let Setup {
        moto,
        lariat,
        aws,
        secret,
        stop,
    } = Setup::start(moto, &endpoint).await;
    // Someone else's OIDC provider in the same account, which deletion must leave.
    let admin = moto.admin().await;
    let iam = aws_sdk_iam::Client::new(&admin);
    let foreign = iam
        .create_open_id_connect_provider()
        .url("https://oidc.eks.us-east-1.amazonaws.com/id/SOMEONEELSE")
        .client_id_list("sts.amazonaws.com")
        .send()
        .await
        .unwrap()
        .open_id_connect_provider_arn
        .unwrap();
    for mut manifest in manifests("capa") {
        if manifest["kind"] == "AWSManagedControlPlane" {
            manifest["spec"]["associateOIDCProvider"] = json!(true);
        }
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
    // The IAM OIDC provider of the cluster's issuer (IAM roles for service accounts), with
    // the trust policy such roles need.
    let issuer = aws_sdk_eks::Client::new(&admin)
        .describe_cluster()
        .name("team-a_prod-control-plane")
        .send()
        .await
        .unwrap()
        .cluster
        .unwrap()
        .identity
        .unwrap()
        .oidc
        .unwrap()
        .issuer
        .unwrap();
    let provider_arn = status["oidcProvider"]["arn"].as_str().unwrap();
    assert!(
        provider_arn.ends_with(&format!(
            ":oidc-provider/{}",
            issuer.trim_start_matches("https://")
        )),
        "{provider_arn} {issuer}"
    );
    let provider = iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(provider_arn)
        .send()
        .await
        .unwrap();
    assert_eq!(provider.client_id_list(), ["sts.amazonaws.com"]);
    assert!(
        provider.tags().iter().any(|t| t.key()
            == "sigs.k8s.io/cluster-api-provider-aws/cluster/prod"
            && t.value() == "owned"),
        "{:?}",
        provider.tags()
    );
    let trust: Value =
        serde_json::from_str(status["oidcProvider"]["trustPolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        trust["Statement"][0]["Principal"]["Federated"][0],
        provider_arn
    );
    assert_eq!(
        condition(&control_plane, "OIDCProviderReady").as_deref(),
        Some("True")
    );
    assert_eq!(
        condition(&control_plane, "Ready").as_deref(),
        Some("True"),
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
    after_a_whole_pass(&control_planes).await;
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
    let providers: Vec<String> = iam
        .list_open_id_connect_providers()
        .send()
        .await
        .unwrap()
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn().map(str::to_owned))
        .collect();
    assert_eq!(
        providers,
        [foreign],
        "the OIDC provider lariat made is deleted, someone else's is not"
    );
    let _ = stop.send(true);
}

/// Seed 000's upgrade: the version moves on the control plane and the pool together; EKS
/// upgrades the control plane first, then the node group, each visible in conditions while
/// it runs, and the cluster keeps serving. The control plane's first attempt fails after EKS
/// took it (DescribeUpdate says why): that is reported, and asked again once the sync period
/// has passed, not at every poll. moto lacks the update calls: the double in front of it
/// answers them (`common::eks_double`), everything else is moto's.
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_goes_control_plane_first_then_node_groups() {
    let moto = Moto::start();
    let double = common::eks_double::EksDouble::start(&moto.endpoint).await;
    let setup = Setup::start_with(moto, &double.endpoint, Duration::from_secs(4)).await;
    double.fail_update(
        "team-a_prod-control-plane",
        "InsufficientFreeAddresses",
        "One or more of the subnets has too few free addresses",
    );
    double.fail_update(
        "team-a_prod-control-plane/team-a_prod-pool-0",
        "PodEvictionFailure",
        "Reached max retries while trying to evict pods from nodes",
    );
    for manifest in manifests("capa") {
        setup.lariat.apply(manifest).await;
    }
    setup.provisioned().await;
    let control_planes = setup.api(&lariat_provider_aws::control_plane::resource());
    let node_pools = setup.api(&lariat_provider_aws::managed_machine_pool::resource());

    // Two minors at once is refused, with what to do instead.
    let skip = control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"version": "v1.33.0"}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(skip) = skip else {
        panic!("{skip}")
    };
    assert_eq!(skip.code, 422, "{skip:?}");
    assert!(skip.message.contains("set v1.32 first"), "{}", skip.message);

    // The user's one change: the version of the control plane and of the pool.
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"version": "v1.32.0"}})),
        )
        .await
        .unwrap();
    let pools: Api<lariat_api::capi::MachinePool> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    pools
        .patch(
            "prod-pool-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"template": {"spec": {"version": "v1.32.0"}}}}),
            ),
        )
        .await
        .unwrap();

    // What the conditions say while it runs.
    let mut seen_control_plane = std::collections::BTreeSet::new();
    let mut seen_pool = std::collections::BTreeSet::new();
    let mut seen_cluster = std::collections::BTreeSet::new();
    let clusters: Api<lariat_api::capi::Cluster> = Api::namespaced(setup.lariat.client.clone(), NS);
    let cluster_ready = |cluster: &lariat_api::capi::Cluster| {
        let ready = cluster
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .find(|c| c.type_ == "Ready")?;
        Some(
            ready
                .reason
                .clone()
                .unwrap_or_else(|| format!("{:?}", ready.status)),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let control_plane = control_planes.get("prod-control-plane").await.unwrap();
        let pool = node_pools.get("prod-pool-0").await.unwrap();
        seen_cluster.extend(cluster_ready(&clusters.get("prod").await.unwrap()));
        seen_control_plane.extend(condition(&control_plane, "EKSControlPlaneReady"));
        seen_pool.extend(condition(&pool, "EKSNodegroupReady"));
        assert_eq!(
            control_plane.data["status"]["ready"], true,
            "the control plane serves throughout"
        );
        assert_eq!(
            pool.data["status"]["ready"], true,
            "the nodes run throughout"
        );
        if control_plane.data["status"]["version"] == "v1.32"
            && condition(&control_plane, "EKSControlPlaneReady").as_deref() == Some("True")
            && condition(&pool, "EKSNodegroupReady").as_deref() == Some("True")
            && double.requested().len() == 4
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upgrade did not finish: {seen_control_plane:?} {seen_pool:?} {:?}",
            double.requested()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        double.requested(),
        [
            "team-a_prod-control-plane 1.32",
            "team-a_prod-control-plane 1.32",
            "team-a_prod-control-plane/team-a_prod-pool-0 1.32",
            "team-a_prod-control-plane/team-a_prod-pool-0 1.32"
        ],
        "the control plane first, then the group, each asked again once after its failure"
    );
    assert!(
        seen_pool.contains("EKSNodegroupUpgradeFailed"),
        "{seen_pool:?}"
    );
    assert!(
        seen_control_plane.contains("EKSControlPlaneUpgrading"),
        "{seen_control_plane:?}"
    );
    assert!(
        seen_control_plane.contains("EKSControlPlaneUpgradeFailed"),
        "{seen_control_plane:?}"
    );
    // The Cluster is not Ready while its control plane's upgrade failed, and says why; it is
    // again once the upgrade is through.
    assert!(
        seen_cluster.contains("EKSControlPlaneUpgradeFailed"),
        "{seen_cluster:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster_ready(&clusters.get("prod").await.unwrap()).as_deref() != Some("True") {
        assert!(Instant::now() < deadline, "the Cluster is Ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    let events = events.list(&Default::default()).await.unwrap().items;
    assert!(
        events.iter().any(|e| {
            e.reason.as_deref() == Some("EKSControlPlaneUpgradeFailed")
                && e.message.as_deref().is_some_and(|m| {
                    m.contains("InsufficientFreeAddresses: One or more of the subnets")
                })
        }),
        "{:?}",
        events
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    assert!(
        seen_pool.contains("WaitingForControlPlaneUpgrade"),
        "{seen_pool:?}"
    );
    assert!(
        seen_pool.contains("EKSNodegroupUpgrading") || seen_pool.contains("EKSNodegroupUpdating"),
        "{seen_pool:?}"
    );
    let _ = setup.stop.send(true);
}

/// Seed 000's last step: once EKS has the cluster ACTIVE, lariat installs its agent through
/// `<cluster>-kubeconfig` (the import manifests of `lariat cluster import`, applied with the
/// EKS token) and the agent registers the cluster: Connected. No EKS cluster runs here: the
/// EKS double points the cluster's endpoint at `EksEndpoint`, which authenticates the token
/// with moto's STS as EKS does with AWS's and serves a simulated workload cluster; the test
/// then plays the kubelet, running the agent the applied Deployment describes with the
/// Secret the manifests put beside it.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_is_installed_into_the_new_cluster_and_registers_it() {
    use common::eks_double::{EksDouble, EksEndpoint};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Secret;
    let moto = Moto::start();
    let double = EksDouble::start(&moto.endpoint).await;
    let setup = Setup::start(moto, &double.endpoint).await;
    let lariat = &setup.lariat;
    let (_stand_in, workload) = common::stand_in_cluster().await;
    let endpoint = EksEndpoint::start(
        &setup.moto.endpoint,
        "team-a_prod-control-plane",
        workload.clone(),
    )
    .await;
    double.point("team-a_prod-control-plane", &endpoint.url, &endpoint.ca);
    let (stop_installer, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(lariat_controllers::agent_install::run(
        lariat.caches.clone(),
        lariat.import_manifests.clone(),
        async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    // An agent someone left in the cluster (another server's, or one installed for an earlier
    // Cluster of this name): it must not be trusted to register this Cluster.
    let post = kube::api::PostParams::default();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(workload.clone())
        .create(
            &post,
            &serde_json::from_value(json!({"metadata": {"name": "lariat-system"}})).unwrap(),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(workload.clone(), "lariat-system");
    deployments
        .create(
            &post,
            &serde_json::from_value(json!({
                "metadata": {"name": "lariat-agent"},
                "spec": {
                    "selector": {"matchLabels": {"app": "stale"}},
                    "template": {
                        "metadata": {"labels": {"app": "stale"}},
                        "spec": {"containers": [{"name": "agent", "image": "stale"}]},
                    },
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    for manifest in manifests("capa") {
        lariat.apply(manifest).await;
    }

    let cluster_uid = Api::<lariat_api::capi::Cluster>::namespaced(lariat.client.clone(), NS)
        .get("prod")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    eventually(
        "the agent's Deployment is in the new cluster, installed for this Cluster",
        Duration::from_secs(60),
        || {
            let (api, uid) = (deployments.clone(), cluster_uid.clone());
            async move {
                api.get_opt("lariat-agent").await.unwrap().is_some_and(|d| {
                    d.metadata
                        .annotations
                        .is_some_and(|a| a.get("lariat.dev/installed-for-cluster") == Some(&uid))
                })
            }
        },
    )
    .await;
    assert_eq!(
        endpoint.refused.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every request carried a token EKS accepts"
    );
    // The stand-in does check tokens: the kubeconfig with another token is refused.
    let kubeconfig = Api::<Secret>::namespaced(lariat.client.clone(), NS)
        .get("prod-kubeconfig")
        .await
        .unwrap();
    let kubeconfig = String::from_utf8(kubeconfig.data.unwrap()["value"].0.clone()).unwrap();
    let token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .to_owned();
    let forged = kubeconfig.replace(&token, "k8s-aws-v1.aHR0cHM6Ly9ldmlsLmV4YW1wbGUv");
    let forged = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&forged).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let refused =
        Api::<k8s_openapi::api::core::v1::Namespace>::all(kube::Client::try_from(forged).unwrap())
            .list(&Default::default())
            .await
            .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref e) if e.code == 401),
        "{refused}"
    );
    let agent_secret = Api::<Secret>::namespaced(workload.clone(), "lariat-system")
        .get("lariat-agent")
        .await
        .unwrap();
    let field =
        |key: &str| String::from_utf8(agent_secret.data.clone().unwrap()[key].0.clone()).unwrap();
    assert_eq!(
        field("server"),
        lariat.url,
        "the agent dials the advertised URL"
    );
    assert_eq!(field("ca-checksum"), lariat.ca_checksum);
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(lariat.client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("AgentInstalled")
                && e.involved_object.name.as_deref() == Some("prod")),
        "{:?}",
        events.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("AgentReplaced")),
        "the stale agent's replacement is said"
    );

    // The kubelet's part: the agent runs with what the Deployment's pod would read.
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(lariat_agent::run(
        lariat_agent::Config::new(
            field("server"),
            field("token"),
            field("ca-checksum"),
            workload.clone(),
        ),
        async move {
            let mut stopped = agent_stopped;
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    let clusters: Api<lariat_api::capi::Cluster> = Api::namespaced(lariat.client.clone(), NS);
    eventually("the Cluster is Connected", Duration::from_secs(60), || {
        let api = clusters.clone();
        async move {
            api.get("prod").await.is_ok_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.is_true("Connected")))
            })
        }
    })
    .await;
    // Through the tunnel, the new cluster's API answers as itself.
    let proxied = lariat
        .client
        .request_text(
            http::Request::get("/k8s/clusters/team-a/prod/api/v1/namespaces/lariat-system")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(proxied.contains("\"name\":\"lariat-system\""), "{proxied}");
    let _ = stop_agent.send(true);
    let _ = stop_installer.send(true);
    let _ = setup.stop.send(true);
}

/// Seed 000's workers as Cluster API AWS's eks-machinepool flavour makes them, exactly: a
/// MachinePool of self-managed instances on a launch template and an auto-scaling group, its
/// AMI the EKS-optimized one AWS publishes in SSM (here published in moto the same way),
/// booted with a NodeadmConfig's user data; scaled 3 to 5 with the instances appearing in the
/// pool's status; deleted with the cluster, leaving no group, template or instance.
#[tokio::test(flavor = "multi_thread")]
async fn a_self_managed_pool_of_the_eks_machinepool_flavour_runs_and_scales() {
    self_managed_pool(
        json!({"kind": "NodeadmConfig", "spec": {}}),
        |_| json!({"ami": {"eksLookupType": "AmazonLinux2023"}, "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io", "instanceType": "t3.large", "sshKeyName": "default"}),
        "Content-Type: application/node.eks.aws",
    )
    .await;
}

/// The same with Amazon Linux 2's bootstrap.sh (EKSConfig) and an AMI named by ID.
#[tokio::test(flavor = "multi_thread")]
async fn a_self_managed_pool_boots_with_bootstrap_sh() {
    self_managed_pool(
        json!({"kind": "EKSConfig", "spec": {"kubeletExtraArgs": {"node-labels": "pool=mp-0"}}}),
        |image| json!({"ami": {"id": image}, "instanceType": "t3.large", "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io"}),
        "/etc/eks/bootstrap.sh 'team-a_prod-control-plane' --kubelet-extra-args '--node-labels=pool=mp-0'",
    )
    .await;
}

/// What self-managed workers need around the cluster `prod`: moto behind the EKS double, the
/// nodes' instance profile as `clusterawsadm bootstrap iam` makes it, the cluster's API (a
/// simulated cluster behind the EKS endpoint double), the AMI AWS publishes for v1.31 on
/// Amazon Linux 2023, and the Cluster with its control plane applied.
struct Workers {
    setup: Setup,
    _double: common::eks_double::EksDouble,
    _endpoint: common::eks_double::EksEndpoint,
    admin: aws_config::SdkConfig,
    ec2: aws_sdk_ec2::Client,
    /// An AMI moto knows.
    image: String,
    /// The role of the nodes' instance profile.
    role_arn: String,
    /// The workload cluster's API.
    workload: kube::Client,
}

impl Workers {
    async fn start(sync_period: Duration) -> Workers {
        let moto = Moto::start();
        let double = common::eks_double::EksDouble::start(&moto.endpoint).await;
        let setup = Setup::start_with(moto, &double.endpoint, sync_period).await;
        let admin = setup.moto.admin().await;
        let ec2 = aws_sdk_ec2::Client::new(&admin);
        let image = ec2
            .describe_images()
            .owners("amazon")
            .send()
            .await
            .unwrap()
            .images()[0]
            .image_id()
            .unwrap()
            .to_owned();
        let iam = aws_sdk_iam::Client::new(&admin);
        let role_arn = iam
            .create_role()
            .role_name("nodes.cluster-api-provider-aws.sigs.k8s.io")
            .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#)
            .send()
            .await
            .unwrap()
            .role
            .unwrap()
            .arn;
        iam.create_instance_profile()
            .instance_profile_name("nodes.cluster-api-provider-aws.sigs.k8s.io")
            .send()
            .await
            .unwrap();
        iam.add_role_to_instance_profile()
            .instance_profile_name("nodes.cluster-api-provider-aws.sigs.k8s.io")
            .role_name("nodes.cluster-api-provider-aws.sigs.k8s.io")
            .send()
            .await
            .unwrap();
        let (_stand_in, workload) = common::stand_in_cluster().await;
        let endpoint = common::eks_double::EksEndpoint::start(
            &setup.moto.endpoint,
            "team-a_prod-control-plane",
            workload.clone(),
        )
        .await;
        double.point("team-a_prod-control-plane", &endpoint.url, &endpoint.ca);
        double.publish(
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
            &image,
        );
        for manifest in manifests("capa").into_iter().take(3) {
            setup.lariat.apply(manifest).await;
        }
        Workers {
            setup,
            _double: double,
            _endpoint: endpoint,
            admin,
            ec2,
            image,
            role_arn,
            workload,
        }
    }
}

async fn self_managed_pool(
    bootstrap: Value,
    launch_template: impl Fn(&str) -> Value,
    expected_user_data: &str,
) {
    let Workers {
        setup,
        _double,
        _endpoint,
        admin,
        ec2,
        image,
        role_arn,
        workload,
    } = Workers::start(Settings::default().sync_period).await;
    let bootstrap_kind = bootstrap["kind"].as_str().unwrap().to_owned();
    for manifest in [
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachinePool",
            "metadata": {"name": "prod-mp-0", "namespace": NS},
            "spec": {"clusterName": "prod", "replicas": 3, "template": {"spec": {
                "clusterName": "prod",
                "version": "v1.31.0",
                "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": bootstrap_kind, "name": "prod-mp-0"}},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachinePool", "name": "prod-mp-0"},
            }}},
        }),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": bootstrap_kind,
            "metadata": {"name": "prod-mp-0", "namespace": NS},
            "spec": bootstrap["spec"],
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachinePool",
            "metadata": {"name": "prod-mp-0", "namespace": NS},
            "spec": {
                "minSize": 1,
                "maxSize": 10,
                "awsLaunchTemplate": launch_template(&image),
            },
        }),
    ] {
        setup.lariat.apply(manifest).await;
    }
    let pools: Api<lariat_api::capi::MachinePool> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    let provider_ids = |count: usize| {
        let pools = pools.clone();
        move || {
            let pools = pools.clone();
            async move {
                pools.get("prod-mp-0").await.is_ok_and(|p| {
                    let status = p.status.clone().unwrap_or_default();
                    status.replicas == Some(count as i32)
                        && status.phase
                            == Some(lariat_api::capi::machine_pool::MachinePoolPhase::Running)
                        && p.spec.provider_id_list.as_ref().map(Vec::len) == Some(count)
                })
            }
        }
    };
    eventually(
        "the pool runs 3 instances",
        Duration::from_secs(90),
        provider_ids(3),
    )
    .await;
    let running = || {
        let (pools, ec2) = (pools.clone(), ec2.clone());
        async move {
            let pool = pools.get("prod-mp-0").await.unwrap();
            let ids: Vec<String> = pool
                .spec
                .provider_id_list
                .unwrap_or_default()
                .iter()
                .map(|id| id.rsplit('/').next().unwrap().to_owned())
                .collect();
            let found = ec2
                .describe_instances()
                .set_instance_ids(Some(ids.clone()))
                .send()
                .await
                .unwrap();
            let states: Vec<String> = found
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter_map(|i| i.state()?.name().map(|n| n.as_str().to_owned()))
                .collect();
            (ids, states)
        }
    };
    // The instances' role may join: mapped in the cluster's aws-auth.
    let aws_auth =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(workload.clone(), "kube-system")
            .get("aws-auth")
            .await
            .unwrap();
    let map_roles = &aws_auth.data.unwrap()["mapRoles"];
    assert!(
        map_roles.contains(&format!("rolearn: {role_arn}"))
            && map_roles.contains("system:bootstrappers"),
        "{map_roles}"
    );
    let (ids, states) = running().await;
    assert_eq!(states, ["running", "running", "running"]);
    // Each instance boots with the EKSConfig's script, from the launch template.
    let user_data = user_data(&ec2, &ids[0]).await;
    assert!(user_data.contains(expected_user_data), "{user_data}");

    // kubectl scale machinepool prod-mp-0 --replicas=5
    pools
        .patch_scale(
            "prod-mp-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    eventually(
        "the pool runs 5 instances",
        Duration::from_secs(60),
        provider_ids(5),
    )
    .await;
    assert_eq!(running().await.1.len(), 5);

    // Deleting the Cluster deletes the group, its instances and the template.
    let clusters: Api<lariat_api::capi::Cluster> = Api::namespaced(setup.lariat.client.clone(), NS);
    clusters
        .delete("prod", &DeleteParams::default())
        .await
        .unwrap();
    let control_planes = setup.api(&lariat_provider_aws::control_plane::resource());
    eventually("the control plane is gone", Duration::from_secs(90), || {
        let api = control_planes.clone();
        async move { api.get_opt("prod-control-plane").await.unwrap().is_none() }
    })
    .await;
    let autoscaling = aws_sdk_autoscaling::Client::new(&admin);
    assert!(
        autoscaling
            .describe_auto_scaling_groups()
            .send()
            .await
            .unwrap()
            .auto_scaling_groups()
            .is_empty(),
        "no auto-scaling group"
    );
    assert!(
        ec2.describe_launch_templates()
            .send()
            .await
            .unwrap()
            .launch_templates()
            .is_empty(),
        "no launch template"
    );
    let found = ec2
        .describe_instances()
        .set_instance_ids(Some(ids))
        .send()
        .await
        .unwrap();
    assert!(
        found
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .all(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("terminated")),
        "every instance terminated"
    );
    let _ = setup.stop.send(true);
}

/// The user data an instance boots with, as text.
async fn user_data(ec2: &aws_sdk_ec2::Client, instance: &str) -> String {
    use base64::Engine;
    let found = ec2
        .describe_instance_attribute()
        .instance_id(instance)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = found
        .user_data()
        .and_then(|v| v.value())
        .unwrap_or_default();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap()
}

/// The instances behind the AWSMachines of cluster `prod`, by AWSMachine name: (instance ID,
/// state) as EC2 says.
async fn instances_by_machine(ec2: &aws_sdk_ec2::Client) -> Vec<(String, String, String)> {
    let found = ec2
        .describe_instances()
        .filters(tagged(
            "sigs.k8s.io/cluster-api-provider-aws/cluster/prod",
            "owned",
        ))
        .send()
        .await
        .unwrap();
    let mut instances: Vec<(String, String, String)> = found
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            let name = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("Name"))
                .and_then(|t| t.value())
                .unwrap_or_default()
                .to_owned();
            let state = i
                .state()
                .and_then(|s| s.name())
                .unwrap()
                .as_str()
                .to_owned();
            (name, i.instance_id().unwrap().to_owned(), state)
        })
        .collect();
    instances.sort();
    instances
}

/// How often the AWSMachine test looks again at settled machines: an instance terminated
/// behind lariat's back is noticed at the next look, without waiting ten minutes.
const SYNC_PERIOD: Duration = Duration::from_secs(3);

/// Cluster API AWS's `eks` flavour: a MachineDeployment of single EC2 instances
/// (AWSMachineTemplate, NodeadmConfigTemplate). Each Machine gets one instance, in a private
/// subnet, in the node security groups, booting nodeadm's user data; a Node joining with its
/// provider ID makes the Machine Running. A lost record finds the same instance again rather
/// than a second one; scaling down terminates one; an instance terminated behind lariat's
/// back fails its Machine; deleting the Cluster terminates the rest.
#[tokio::test(flavor = "multi_thread")]
async fn single_ec2_machines_of_the_eks_flavour_boot_join_and_are_terminated() {
    let Workers {
        setup,
        _double,
        _endpoint,
        ec2,
        workload,
        ..
    } = Workers::start(SYNC_PERIOD).await;
    for manifest in [
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineDeployment",
            "metadata": {"name": "prod-md-0", "namespace": NS},
            "spec": {"clusterName": "prod", "replicas": 2, "selector": {"matchLabels": {}},
                "template": {"spec": {
                    "clusterName": "prod",
                    "version": "v1.31.0",
                    "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "NodeadmConfigTemplate", "name": "prod-md-0"}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachineTemplate", "name": "prod-md-0"},
                }}},
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachineTemplate",
            "metadata": {"name": "prod-md-0", "namespace": NS},
            "spec": {"template": {"spec": {
                "ami": {"eksLookupType": "AmazonLinux2023"},
                "cloudInit": {"insecureSkipSecretsManager": true},
                "instanceType": "t3.large",
                "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
            }}},
        }),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "NodeadmConfigTemplate",
            "metadata": {"name": "prod-md-0", "namespace": NS},
            "spec": {"template": {}},
        }),
    ] {
        setup.lariat.apply(manifest).await;
    }
    let aws_machines = setup.api(&lariat_provider_aws::machine::resource());
    let ready_machines = || {
        let api = aws_machines.clone();
        async move {
            api.list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|m| {
                    m.data["status"]["ready"] == true
                        && m.data["status"]["instanceState"] == "running"
                        && m.data["spec"]["providerID"]
                            .as_str()
                            .is_some_and(|id| id.starts_with("aws:///us-east-1"))
                })
                .collect::<Vec<_>>()
        }
    };
    eventually(
        "two AWSMachines run their instance",
        Duration::from_secs(90),
        || async { ready_machines().await.len() == 2 },
    )
    .await;
    let machines = ready_machines().await;
    let instances = instances_by_machine(&ec2).await;
    assert_eq!(
        instances.len(),
        2,
        "one instance per machine: {instances:?}"
    );
    for machine in &machines {
        let id = machine.data["spec"]["instanceID"].as_str().unwrap();
        assert!(
            instances.iter().any(|(name, i, state)| name
                == &machine.metadata.name.clone().unwrap()
                && i == id
                && state == "running"),
            "{id} in {instances:?}"
        );
        assert_eq!(condition(machine, "InstanceReady").as_deref(), Some("True"));
        assert!(
            machine.data["status"]["addresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["type"] == "InternalIP")),
            "{:?}",
            machine.data["status"]
        );
    }
    // Where and how each instance runs: a private subnet of the cluster, the node security
    // groups, nodeadm's user data, EKS's node tag.
    let control_plane = setup
        .api(&lariat_provider_aws::control_plane::resource())
        .get("prod-control-plane")
        .await
        .unwrap();
    let private: Vec<&str> = control_plane.data["spec"]["network"]["subnets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["isPublic"] != true)
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let node_group = control_plane.data["status"]["networkStatus"]["securityGroups"]
        ["node-eks-additional"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = machines[0].data["spec"]["instanceID"]
        .as_str()
        .unwrap()
        .to_owned();
    let described = ec2
        .describe_instances()
        .instance_ids(&first)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    assert!(private.contains(&instance.subnet_id().unwrap()));
    assert!(
        instance
            .security_groups()
            .iter()
            .any(|g| g.group_id() == Some(node_group.as_str()))
    );
    assert_eq!(instance.instance_type().unwrap().as_str(), "t3.large");
    assert!(instance.tags().iter().any(|t| t.key()
        == Some("kubernetes.io/cluster/team-a_prod-control-plane")
        && t.value() == Some("owned")));
    let user_data = user_data(&ec2, &first).await;
    assert!(
        user_data.contains("Content-Type: application/node.eks.aws"),
        "{user_data}"
    );

    // Each kubelet joins (here: its Node is made in the cluster, with the provider ID the
    // instance's kubelet would report), and each Machine turns Running with its Node.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(workload.clone());
    for (n, machine) in machines.iter().enumerate() {
        nodes
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("ip-10-0-0-{n}.ec2.internal")},
                    "spec": {"providerID": machine.data["spec"]["providerID"]},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let capi_machines: Api<lariat_api::capi::Machine> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    eventually(
        "both Machines run with their Node",
        Duration::from_secs(60),
        || {
            let api = capi_machines.clone();
            async move {
                let list = api.list(&Default::default()).await.unwrap().items;
                list.len() == 2
                    && list.iter().all(|m| {
                        m.status.as_ref().is_some_and(|s| {
                            s.node_ref.is_some()
                                && s.phase == Some(lariat_api::capi::machine::MachinePhase::Running)
                        })
                    })
            }
        },
    )
    .await;

    // Another machine's instance named by hand is refused, not adopted.
    let lost = machines[1].metadata.name.clone().unwrap();
    let recorded = machines[1].data["spec"]["instanceID"].clone();
    aws_machines
        .patch(
            &lost,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"instanceID": first}})),
        )
        .await
        .unwrap();
    eventually(
        "another machine's instance is refused",
        Duration::from_secs(30),
        || {
            let (api, lost) = (aws_machines.clone(), lost.clone());
            async move {
                condition(&api.get(&lost).await.unwrap(), "InstanceReady").as_deref()
                    == Some("InvalidSpec")
            }
        },
    )
    .await;
    // A record lost (a crash between the launch and the write): the instance is found again
    // by its tags, not launched twice.
    aws_machines
        .patch(
            &lost,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"instanceID": null, "providerID": null}})),
        )
        .await
        .unwrap();
    eventually(
        "the same instance is recorded again",
        Duration::from_secs(30),
        || {
            let (api, lost, recorded) = (aws_machines.clone(), lost.clone(), recorded.clone());
            async move { api.get(&lost).await.unwrap().data["spec"]["instanceID"] == recorded }
        },
    )
    .await;
    assert_eq!(
        instances_by_machine(&ec2).await.len(),
        2,
        "no second launch"
    );

    // Scaled to one: one Machine goes, and its instance is terminated.
    let deployments: Api<lariat_api::capi::MachineDeployment> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    deployments
        .patch(
            "prod-md-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually(
        "one AWSMachine is left and one instance terminated",
        Duration::from_secs(60),
        || {
            let (api, ec2) = (aws_machines.clone(), ec2.clone());
            async move {
                let states: Vec<String> = instances_by_machine(&ec2)
                    .await
                    .into_iter()
                    .map(|(_, _, state)| state)
                    .collect();
                api.list(&Default::default()).await.unwrap().items.len() == 1
                    && states.iter().filter(|s| *s == "terminated").count() == 1
                    && states.iter().filter(|s| *s == "running").count() == 1
            }
        },
    )
    .await;

    // Terminated behind lariat's back: the AWSMachine says so, and its Machine fails.
    let left = aws_machines.list(&Default::default()).await.unwrap().items[0].clone();
    let left_name = left.metadata.name.clone().unwrap();
    ec2.terminate_instances()
        .instance_ids(left.data["spec"]["instanceID"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    eventually(
        "the AWSMachine reports its instance terminated",
        Duration::from_secs(30),
        || {
            let (api, name) = (aws_machines.clone(), left_name.clone());
            async move {
                let machine = api.get(&name).await.unwrap();
                machine.data["status"]["failureReason"] == "UpdateError"
                    && condition(&machine, "Ready").as_deref() == Some("InstanceTerminated")
            }
        },
    )
    .await;
    eventually("its Machine fails", Duration::from_secs(30), || {
        let api = capi_machines.clone();
        async move {
            api.list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|m| {
                    m.status.as_ref().and_then(|s| s.phase)
                        == Some(lariat_api::capi::machine::MachinePhase::Failed)
                })
        }
    })
    .await;

    // Scaled back to two: a new instance, which deleting the Cluster must terminate.
    deployments
        .patch(
            "prod-md-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    eventually("a new instance runs", Duration::from_secs(60), || async {
        !ready_machines().await.is_empty()
    })
    .await;
    let last = ready_machines().await[0].data["spec"]["instanceID"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        instances_by_machine(&ec2)
            .await
            .iter()
            .any(|(_, id, state)| *id == last && state == "running")
    );

    // The control plane's iamAuthenticatorConfig goes into aws-auth beside the nodes' role,
    // and out again when the spec drops it; an entry someone else wrote stays.
    let config_maps =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(workload.clone(), "kube-system");
    let mut theirs = config_maps.get("aws-auth").await.unwrap();
    theirs.data.get_or_insert_default().insert(
        "mapUsers".into(),
        "- userarn: arn:aws:iam::123456789012:user/theirs\n  username: theirs\n  groups: []\n"
            .into(),
    );
    config_maps
        .replace("aws-auth", &Default::default(), &theirs)
        .await
        .unwrap();
    let control_planes = setup.api(&lariat_provider_aws::control_plane::resource());
    let map = |config: Value| {
        let control_planes = control_planes.clone();
        async move {
            control_planes
                .patch(
                    "prod-control-plane",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"iamAuthenticatorConfig": config}})),
                )
                .await
                .unwrap();
        }
    };
    map(json!({
        "mapRoles": [{"rolearn": "arn:aws:iam::123456789012:role/admins", "username": "admin", "groups": ["system:masters"]}],
        "mapUsers": [{"userarn": "arn:aws:iam::123456789012:user/alice", "username": "alice", "groups": ["view"]}],
    }))
    .await;
    let aws_auth = || {
        let config_maps = config_maps.clone();
        async move {
            let data = config_maps.get("aws-auth").await.unwrap().data.unwrap();
            (data["mapRoles"].clone(), data["mapUsers"].clone())
        }
    };
    eventually(
        "aws-auth maps the admins and alice",
        Duration::from_secs(30),
        || async {
            let (roles, users) = aws_auth().await;
            roles.contains("role/admins") && users.contains("user/alice")
        },
    )
    .await;
    let (roles, users) = aws_auth().await;
    assert!(
        roles.contains("system:masters") && roles.contains("system:bootstrappers"),
        "{roles}"
    );
    assert!(users.contains("user/theirs"), "{users}");
    eventually(
        "the control plane says aws-auth is configured",
        Duration::from_secs(30),
        || async {
            control_planes
                .get("prod-control-plane")
                .await
                .is_ok_and(|cp| {
                    condition(&cp, "IAMAuthenticatorConfigured").as_deref() == Some("True")
                })
        },
    )
    .await;
    map(json!({"mapRoles": [], "mapUsers": []})).await;
    eventually(
        "aws-auth no longer maps the admins and alice",
        Duration::from_secs(30),
        || async {
            let (roles, users) = aws_auth().await;
            !roles.contains("role/admins") && !users.contains("user/alice")
        },
    )
    .await;
    let (roles, users) = aws_auth().await;
    assert!(
        roles.contains("system:bootstrappers"),
        "the nodes' role stays: {roles}"
    );
    assert!(users.contains("user/theirs"), "{users}");

    // Deleting the Cluster leaves no instance running and no AWSMachine.
    let clusters: Api<lariat_api::capi::Cluster> = Api::namespaced(setup.lariat.client.clone(), NS);
    clusters
        .delete("prod", &DeleteParams::default())
        .await
        .unwrap();
    let control_planes = setup.api(&lariat_provider_aws::control_plane::resource());
    eventually("the control plane is gone", Duration::from_secs(90), || {
        let api = control_planes.clone();
        async move { api.get_opt("prod-control-plane").await.unwrap().is_none() }
    })
    .await;
    assert!(
        aws_machines
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        instances_by_machine(&ec2)
            .await
            .iter()
            .all(|(_, _, state)| state == "terminated"),
        "every instance terminated"
    );
    let _ = setup.stop.send(true);
}

/// AWS's refusals reach the conditions with AWS's code, and nothing is launched: an instance
/// type AWS does not have, and an AMI that does not exist. (The codes asserted are moto's:
/// AWS itself may answer an unknown instance type with `InvalidParameterValue`.)
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_instance_type_or_ami_is_reported_with_aws_s_code() {
    let Workers {
        setup,
        _double,
        _endpoint,
        ec2,
        ..
    } = Workers::start(Settings::default().sync_period).await;
    for (name, spec) in [
        (
            "bad-type",
            json!({"ami": {"eksLookupType": "AmazonLinux2023"}, "instanceType": "t3.humongous",
                   "cloudInit": {"insecureSkipSecretsManager": true}}),
        ),
        (
            "bad-ami",
            json!({"ami": {"id": "ami-00000000000000000"}, "instanceType": "t3.large",
                   "cloudInit": {"insecureSkipSecretsManager": true}}),
        ),
        (
            "unsupported",
            json!({"ami": {"eksLookupType": "AmazonLinux2023"}, "instanceType": "t3.large",
                   "cloudInit": {"insecureSkipSecretsManager": true}, "spotMarketOptions": {}}),
        ),
    ] {
        for manifest in [
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Machine",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"clusterName": "prod", "version": "v1.31.0",
                    "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "NodeadmConfig", "name": name}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine", "name": name}},
            }),
            json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "NodeadmConfig",
                "metadata": {"name": name, "namespace": NS},
                "spec": {},
            }),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "AWSMachine",
                "metadata": {"name": name, "namespace": NS},
                "spec": spec,
            }),
        ] {
            setup.lariat.apply(manifest).await;
        }
    }
    let aws_machines = setup.api(&lariat_provider_aws::machine::resource());
    for (name, reason, says) in [
        ("bad-type", "InvalidInstanceType.NotFound", "t3.humongous"),
        ("bad-ami", "InvalidAMIID.NotFound", "ami-00000000000000000"),
        (
            "unsupported",
            "InvalidSpec",
            "spec.spotMarketOptions is not supported",
        ),
    ] {
        eventually(
            &format!("{name} reports {reason}"),
            Duration::from_secs(60),
            || {
                let api = aws_machines.clone();
                async move {
                    let machine = api.get(name).await.unwrap();
                    let found = machine.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|c| c["type"] == "InstanceReady")
                        .cloned();
                    found.is_some_and(|c| {
                        c["status"] == "False"
                            && c["severity"] == "Error"
                            && c["reason"] == reason
                            && c["message"].as_str().is_some_and(|m| m.contains(says))
                    })
                }
            },
        )
        .await;
    }
    assert!(
        instances_by_machine(&ec2).await.is_empty(),
        "nothing launched"
    );
    // The failure is an Event too, for `kubectl describe awsmachine`.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    let events = events.list(&Default::default()).await.unwrap().items;
    assert!(
        events.iter().any(
            |e| e.reason.as_deref() == Some("InvalidInstanceType.NotFound")
                && e.type_.as_deref() == Some("Warning")
        ),
        "{:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    let _ = setup.stop.send(true);
}

/// The condition `type_` of an object's status, whole.
fn condition_of(object: &DynamicObject, type_: &str) -> Value {
    object.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or_default()
}

/// What EKS is given beside the cluster itself. Settings EKS takes at creation (encryption,
/// access, upgrade policy, self-managed addons) are sent as Cluster API AWS names them, and
/// control-plane logs follow the spec afterwards too.
/// Then `spec.addons`, through EKS's addon API. moto has no addons at all: the double in
/// front of it keeps them (`common::eks_double`), everything else is moto's. Addons are
/// created, updated when the spec changes, removed when the spec drops them (only those
/// lariat made), and EKS's refusals and health issues reach the condition.
#[tokio::test(flavor = "multi_thread")]
async fn eks_settings_logs_and_addons_follow_the_spec_and_failures_are_reported() {
    let moto = Moto::start();
    let double = common::eks_double::EksDouble::start(&moto.endpoint).await;
    let setup = Setup::start(moto, &double.endpoint).await;
    let eks_cluster = "team-a_prod-control-plane";
    for mut manifest in manifests("capa") {
        if manifest["kind"] == "AWSManagedControlPlane" {
            manifest["spec"]["addons"] = json!([
                {"name": "vpc-cni", "version": "v1.19.0-eksbuild.1"},
                {"name": "coredns", "version": "v1.11.3-eksbuild.1",
                 "configuration": "{\"replicaCount\": 3}", "preserveOnDelete": true},
            ]);
            manifest["spec"]["logging"] = json!({"apiServer": true, "audit": true});
            manifest["spec"]["encryptionConfig"] = json!({"provider": "arn:aws:kms:us-east-1:123456789012:key/prod", "resources": ["secrets"]});
            manifest["spec"]["accessConfig"] = json!({"authenticationMode": "api_and_config_map"});
            manifest["spec"]["upgradePolicy"] = "extended".into();
            manifest["spec"]["bootstrapSelfManagedAddons"] = false.into();
        }
        setup.lariat.apply(manifest).await;
    }
    setup.provisioned().await;
    let control_planes = setup.api(&lariat_provider_aws::control_plane::resource());
    let requests = double.cluster_requests();
    assert_eq!(requests.len(), 1, "one CreateCluster");
    let created = &requests[0];
    assert_eq!(
        created["encryptionConfig"],
        json!([{"provider": {"keyArn": "arn:aws:kms:us-east-1:123456789012:key/prod"}}])
    );
    assert_eq!(
        created["accessConfig"],
        json!({"authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": true}),
        "with Cluster API AWS's default"
    );
    assert_eq!(created["upgradePolicy"], json!({"supportType": "EXTENDED"}));
    assert_eq!(created["bootstrapSelfManagedAddons"], false);
    let admin = setup.moto.admin().await;
    let moto_eks = aws_sdk_eks::Client::new(&admin);
    let enabled_logs = || {
        let eks = moto_eks.clone();
        async move {
            let cluster = eks
                .describe_cluster()
                .name(eks_cluster)
                .send()
                .await
                .unwrap()
                .cluster
                .unwrap();
            let mut on: Vec<String> = cluster
                .logging()
                .map(|l| l.cluster_logging())
                .unwrap_or_default()
                .iter()
                .filter(|s| s.enabled() == Some(true))
                .flat_map(|s| s.types().iter().map(|t| t.as_str().to_owned()))
                .collect();
            on.sort();
            on
        }
    };
    assert_eq!(enabled_logs().await, ["api", "audit"]);
    // Logs change on a running cluster (UpdateClusterConfig, which moto has).
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"logging": {"audit": false, "scheduler": true}}}),
            ),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while enabled_logs().await != ["api", "scheduler"] {
        assert!(Instant::now() < deadline, "{:?}", enabled_logs().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let addons_are = |want: &'static [(&'static str, &'static str)]| {
        let api = control_planes.clone();
        move || {
            let api = api.clone();
            async move {
                let Ok(control_plane) = api.get("prod-control-plane").await else {
                    return false;
                };
                let mut shown: Vec<(String, String, String)> =
                    control_plane.data["status"]["addons"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let field = |f: &str| a[f].as_str().unwrap_or_default().to_owned();
                            (field("name"), field("version"), field("status"))
                        })
                        .collect();
                shown.sort();
                let mut want: Vec<(String, String, String)> = want
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string(), "ACTIVE".to_owned()))
                    .collect();
                want.sort();
                condition(&control_plane, "EKSAddonsConfigured").as_deref() == Some("True")
                    && shown == want
            }
        }
    };
    eventually(
        "both addons are ACTIVE",
        Duration::from_secs(60),
        addons_are(&[
            ("vpc-cni", "v1.19.0-eksbuild.1"),
            ("coredns", "v1.11.3-eksbuild.1"),
        ]),
    )
    .await;
    assert_eq!(
        double.addon_calls(),
        [
            format!("create {eks_cluster}/vpc-cni v1.19.0-eksbuild.1"),
            format!("create {eks_cluster}/coredns v1.11.3-eksbuild.1"),
        ],
        "each addon created once"
    );
    // Made with the cluster's ownership tags and its configuration.
    let eks = aws_sdk_eks::Client::from_conf(
        aws_sdk_eks::config::Builder::from(&admin)
            .endpoint_url(&double.endpoint)
            .build(),
    );
    let coredns = eks
        .describe_addon()
        .cluster_name(eks_cluster)
        .addon_name("coredns")
        .send()
        .await
        .unwrap()
        .addon
        .unwrap();
    let tags = coredns.tags().cloned().unwrap_or_default();
    assert_eq!(
        tags.get("sigs.k8s.io/cluster-api-provider-aws/cluster/prod")
            .map(String::as_str),
        Some("owned"),
        "{tags:?}"
    );
    assert_eq!(tags.get("team").map(String::as_str), Some("a"), "{tags:?}");
    assert_eq!(
        coredns.configuration_values(),
        Some("{\"replicaCount\": 3}")
    );

    // Someone installs an addon with the console; the spec then bumps vpc-cni and drops
    // coredns. The console's addon stays: lariat did not make it.
    double.install_addon(eks_cluster, "eks-pod-identity-agent", "v1.3.4-eksbuild.1");
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"addons": [
                {"name": "vpc-cni", "version": "v1.19.2-eksbuild.1"},
            ]}})),
        )
        .await
        .unwrap();
    eventually(
        "vpc-cni is updated and coredns deleted",
        Duration::from_secs(60),
        addons_are(&[
            ("vpc-cni", "v1.19.2-eksbuild.1"),
            ("eks-pod-identity-agent", "v1.3.4-eksbuild.1"),
        ]),
    )
    .await;
    let calls = double.addon_calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(
        calls[2].starts_with(&format!(
            "update {eks_cluster}/vpc-cni addonVersion=v1.19.2-eksbuild.1"
        )),
        "{calls:?}"
    );
    assert_eq!(
        calls[3],
        format!("delete {eks_cluster}/coredns preserve=true"),
        "preserveOnDelete is remembered after the spec dropped the addon"
    );

    // EKS refuses a version it does not publish: its code and message reach the condition.
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"addons": [
                {"name": "vpc-cni", "version": "latest"},
            ]}})),
        )
        .await
        .unwrap();
    let refused = |reason: &'static str| {
        let api = control_planes.clone();
        move || {
            let api = api.clone();
            async move {
                api.get("prod-control-plane").await.is_ok_and(|cp| {
                    condition(&cp, "EKSAddonsConfigured").as_deref() == Some(reason)
                })
            }
        }
    };
    eventually(
        "the refused version is reported",
        Duration::from_secs(30),
        refused("InvalidParameterException"),
    )
    .await;
    let control_plane = control_planes.get("prod-control-plane").await.unwrap();
    let said = condition_of(&control_plane, "EKSAddonsConfigured");
    assert!(
        said["message"]
            .as_str()
            .unwrap()
            .contains("addon vpc-cni: Addon version specified is not supported: latest"),
        "{said}"
    );
    assert_eq!(said["severity"], "Error");
    assert_eq!(
        control_plane.data["status"]["ready"], true,
        "the control plane still serves"
    );

    // An update EKS accepts but that ends UPDATE_FAILED, with its health issue.
    double.fail_addon(
        "vpc-cni",
        "InsufficientNumberOfReplicas",
        "The add-on is unhealthy because it doesn't have the desired number of replicas.",
    );
    control_planes
        .patch(
            "prod-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"addons": [
                {"name": "vpc-cni", "version": "v1.19.3-eksbuild.1"},
            ]}})),
        )
        .await
        .unwrap();
    eventually(
        "the failed update is reported",
        Duration::from_secs(30),
        refused("EKSAddonsConfiguredFailed"),
    )
    .await;
    let control_plane = control_planes.get("prod-control-plane").await.unwrap();
    let said = condition_of(&control_plane, "EKSAddonsConfigured");
    let message = said["message"].as_str().unwrap();
    assert!(
        message.contains("addon vpc-cni is UPDATE_FAILED")
            && message.contains("InsufficientNumberOfReplicas"),
        "{said}"
    );
    assert_eq!(
        condition(&control_plane, "Ready").as_deref(),
        Some("EKSAddonsConfiguredFailed")
    );
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(setup.lariat.client.clone(), NS);
    let events = events.list(&Default::default()).await.unwrap().items;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("EKSAddonsConfiguredFailed")
                && e.type_.as_deref() == Some("Warning")),
        "{:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    // A failed update is not asked again at the next poll while the spec stays (EKS shows the
    // old version after it, so the spec still differs).
    let calls = double.addon_calls().len();
    after_a_whole_pass(&control_planes).await;
    assert_eq!(
        double.addon_calls().len(),
        calls,
        "{:?}",
        double.addon_calls()
    );

    // Another namespace's control plane naming this EKS cluster does not adopt it: its addons
    // and logs would follow that spec.
    setup.lariat.namespace("team-b", json!({})).await;
    for mut manifest in manifests("capa").into_iter().take(3) {
        manifest["metadata"]["namespace"] = json!("team-b");
        if manifest["kind"] == "AWSManagedControlPlane" {
            manifest["spec"]["eksClusterName"] = json!(eks_cluster);
            // Its own role (the default one, named after the EKS cluster, is team-a's, and is
            // refused as such before the EKS cluster is looked at).
            manifest["spec"]["roleName"] = json!("team-b-prod-control-plane");
            manifest["spec"]["addons"] = json!([]);
            manifest["spec"]["logging"] = json!({"audit": true});
        }
        setup.lariat.apply(manifest).await;
    }
    let other_planes: Api<DynamicObject> = Api::namespaced_with(
        setup.lariat.client.clone(),
        "team-b",
        &lariat_provider_aws::control_plane::resource(),
    );
    eventually(
        "the other namespace's control plane is refused",
        Duration::from_secs(30),
        || {
            let api = other_planes.clone();
            async move {
                api.get("prod-control-plane").await.is_ok_and(|cp| {
                    condition(&cp, "EKSControlPlaneReady").as_deref()
                        == Some("EKSClusterOwnedByAnother")
                })
            }
        },
    )
    .await;
    let refused = other_planes.get("prod-control-plane").await.unwrap();
    let said = condition_of(&refused, "EKSControlPlaneReady");
    assert!(
        said["message"]
            .as_str()
            .unwrap()
            .contains("belongs to Cluster team-a/prod"),
        "{said}"
    );
    assert_eq!(double.addon_calls().len(), calls, "its addons untouched");
    assert_eq!(
        enabled_logs().await,
        ["api", "scheduler"],
        "its logs untouched"
    );
    let _ = setup.stop.send(true);
}
