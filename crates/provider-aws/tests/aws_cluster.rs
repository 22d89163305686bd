//! An AWSCluster (a control plane on EC2, Cluster API AWS's default flavour) against moto: the
//! network, the security groups with Cluster API AWS's rules and the classic load balancer are
//! made, the endpoint is the load balancer's; rules that drift are put back when the spec
//! next changes; deleting the Cluster deletes all of it, checked through AWS's API.

mod common;

use std::time::Duration;

use aws_sdk_ec2::types::{IpPermission, UserIdGroupPair};
use aws_sdk_elasticloadbalancing::error::ProvideErrorMetadata;
use common::{NS, Setup, eventually, tagged};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use lariat_provider_aws::Aws;
use lariat_provider_aws::moto::Moto;
use serde_json::json;

fn filter(name: &str, value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder()
        .name(name)
        .values(value)
        .build()
}

/// A group's rules as (protocol, from port, source group) triples.
fn rules_from_groups(permissions: &[IpPermission]) -> Vec<(String, i32, String)> {
    let mut rules: Vec<(String, i32, String)> = permissions
        .iter()
        .flat_map(|p| {
            p.user_id_group_pairs().iter().map(|pair| {
                (
                    p.ip_protocol().unwrap_or_default().to_owned(),
                    p.from_port().unwrap_or(-1),
                    pair.group_id().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    rules.sort();
    rules
}

/// Waits until two more passes of the AWSCluster's controller have begun, counted by their
/// read of the load balancer: a steady pass makes that one call, a walk makes it once too.
async fn two_more_passes(aws: &Aws) {
    let reads = || -> u64 {
        aws.calls()
            .iter()
            .filter(|((_, op), _)| op == "DescribeLoadBalancers")
            .map(|(_, n)| n)
            .sum()
    };
    let from = reads();
    eventually("two more passes begin", Duration::from_secs(30), || {
        let begun = reads() >= from + 2;
        async move { begun }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aws_cluster_gets_its_network_groups_and_load_balancer_and_deleting_it_leaves_nothing() {
    let moto = Moto::start();
    let endpoint = moto.endpoint.clone();
    // Settled objects are looked at again every 2 s, to see what a steady pass costs.
    let setup = Setup::start_with(moto, &endpoint, Duration::from_secs(2)).await;
    for manifest in common::aws_cluster("prod") {
        setup.lariat.apply(manifest).await;
    }
    let aws_clusters = setup.api(&lariat_provider_aws::cluster::resource());
    eventually("the AWSCluster is ready", Duration::from_secs(60), || {
        let api = aws_clusters.clone();
        async move {
            api.get("prod")
                .await
                .is_ok_and(|c| c.data["status"]["ready"] == true)
        }
    })
    .await;
    let aws_cluster = aws_clusters.get("prod").await.unwrap();
    let (spec, status) = (&aws_cluster.data["spec"], &aws_cluster.data["status"]);
    // moto names every classic load balancer in us-east-1.
    assert_eq!(
        spec["controlPlaneEndpoint"],
        json!({"host": "prod-apiserver.us-east-1.elb.amazonaws.com", "port": 6443})
    );
    assert_eq!(spec["network"]["subnets"].as_array().unwrap().len(), 6);
    let domains = status["failureDomains"].as_object().unwrap();
    assert_eq!(domains.len(), 3, "{status}");
    assert!(domains.values().all(|d| d["controlPlane"] == true));
    let groups = &status["networkStatus"]["securityGroups"];
    let group_id = |role: &str| groups[role]["id"].as_str().unwrap().to_owned();
    for role in ["apiserver-lb", "lb", "controlplane", "node"] {
        assert_eq!(groups[role]["name"], format!("prod-{role}"), "{groups}");
    }
    let elb_status = &status["networkStatus"]["apiServerElb"];
    assert_eq!(elb_status["name"], "prod-apiserver");
    assert_eq!(elb_status["healthChecks"]["target"], "TCP:6443");
    assert_eq!(elb_status["availabilityZones"].as_array().unwrap().len(), 3);

    // Core's Cluster takes the endpoint and sees its infrastructure provisioned.
    let clusters: Api<lariat_api::capi::Cluster> = Api::namespaced(setup.lariat.client.clone(), NS);
    eventually(
        "the Cluster has the load balancer's endpoint",
        Duration::from_secs(30),
        || {
            let api = clusters.clone();
            async move {
                api.get("prod").await.is_ok_and(|c| {
                    c.spec.control_plane_endpoint.is_some_and(|e| {
                        e.host.as_deref() == Some("prod-apiserver.us-east-1.elb.amazonaws.com")
                    })
                })
            }
        },
    )
    .await;

    // Once the walk is recorded, a pass reads the load balancer and nothing else.
    eventually("the walk is recorded", Duration::from_secs(30), || {
        let api = aws_clusters.clone();
        async move {
            api.get("prod").await.is_ok_and(|c| {
                c.metadata
                    .annotations
                    .unwrap_or_default()
                    .get("lariat.dev/observed-generation")
                    == c.metadata.generation.map(|g| g.to_string()).as_ref()
            })
        }
    })
    .await;
    // A pass its own last writes woke may still walk, finding nothing to change: once two
    // more passes have begun, it has ended (one pass at a time), and the two after those are
    // steady ones.
    two_more_passes(&setup.aws).await;
    let before = setup.aws.calls();
    two_more_passes(&setup.aws).await;
    let after = setup.aws.calls();
    let made: Vec<(&(String, String), u64)> = after
        .iter()
        .map(|(call, n)| (call, n - before.get(call).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(
        !made.is_empty()
            && made
                .iter()
                .all(|((_, op), _)| op == "DescribeLoadBalancers"),
        "steady passes: {made:?}"
    );

    // As AWS has them.
    let admin = setup.moto.admin().await;
    let elb = aws_sdk_elasticloadbalancing::Client::new(&admin);
    let ec2 = aws_sdk_ec2::Client::new(&admin);
    let described = elb
        .describe_load_balancers()
        .load_balancer_names("prod-apiserver")
        .send()
        .await
        .unwrap();
    let balancer = &described.load_balancer_descriptions()[0];
    assert_eq!(balancer.scheme(), Some("internet-facing"));
    assert_eq!(balancer.security_groups(), [group_id("apiserver-lb")]);
    let public: Vec<String> = spec["network"]["subnets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["isPublic"] == true)
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    let mut subnets = balancer.subnets().to_vec();
    subnets.sort();
    let mut expected = public.clone();
    expected.sort();
    assert_eq!(subnets, expected, "one public subnet per zone");
    let listener = balancer.listener_descriptions()[0].listener().unwrap();
    assert_eq!(
        (listener.load_balancer_port(), listener.instance_port()),
        (6443, 6443)
    );
    assert_eq!(
        balancer.health_check().map(|h| h.target()),
        Some("TCP:6443")
    );
    let attributes = elb
        .describe_load_balancer_attributes()
        .load_balancer_name("prod-apiserver")
        .send()
        .await
        .unwrap();
    let attributes = attributes.load_balancer_attributes().unwrap();
    assert_eq!(
        attributes.connection_settings().map(|c| c.idle_timeout()),
        Some(600)
    );
    let tags = elb
        .describe_tags()
        .load_balancer_names("prod-apiserver")
        .send()
        .await
        .unwrap();
    assert!(tags.tag_descriptions()[0].tags().iter().any(|t| t.key()
        == "sigs.k8s.io/cluster-api-provider-aws/cluster/prod"
        && t.value() == Some("owned")));

    let group = |id: String| {
        let ec2 = ec2.clone();
        async move {
            ec2.describe_security_groups()
                .group_ids(id)
                .send()
                .await
                .unwrap()
                .security_groups()[0]
                .clone()
        }
    };
    let control_plane = group(group_id("controlplane")).await;
    let (cp, node, lb) = (
        group_id("controlplane"),
        group_id("node"),
        group_id("apiserver-lb"),
    );
    let expected_control_plane = {
        let mut rules = vec![
            ("tcp".to_owned(), 6443, lb.clone()),
            ("tcp".to_owned(), 6443, cp.clone()),
            ("tcp".to_owned(), 6443, node.clone()),
            ("tcp".to_owned(), 2379, cp.clone()),
            ("tcp".to_owned(), 2380, cp.clone()),
            ("tcp".to_owned(), 179, cp.clone()),
            ("tcp".to_owned(), 179, node.clone()),
            ("4".to_owned(), -1, cp.clone()),
            ("4".to_owned(), -1, node.clone()),
        ];
        rules.sort();
        rules
    };
    let normalised = |permissions: &[IpPermission]| {
        // EC2 may list a protocol-4 rule with or without ports.
        rules_from_groups(permissions)
            .into_iter()
            .map(|(p, port, g)| (p.clone(), if p == "4" { -1 } else { port }, g))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        normalised(control_plane.ip_permissions()),
        expected_control_plane
    );
    let node_group = group(node.clone()).await;
    assert!(node_group.ip_permissions().iter().any(|p| {
        p.from_port() == Some(30000)
            && p.to_port() == Some(32767)
            && p.ip_ranges()
                .iter()
                .any(|r| r.cidr_ip() == Some("0.0.0.0/0"))
    }));
    // The Services' group carries the cluster tag the cloud provider looks for, and lariat
    // leaves its rules to it.
    let services = group(group_id("lb")).await;
    assert!(
        services
            .tags()
            .iter()
            .any(|t| t.key() == Some("kubernetes.io/cluster/prod") && t.value() == Some("owned"))
    );
    assert!(services.ip_permissions().is_empty());
    assert!(
        groups["lb"]["ingressRule"]
            .as_array()
            .is_none_or(|r| r.is_empty())
    );
    let api_lb = group(lb.clone()).await;
    assert!(api_lb.ip_permissions().iter().any(|p| {
        p.from_port() == Some(6443)
            && p.ip_ranges()
                .iter()
                .any(|r| r.cidr_ip() == Some("0.0.0.0/0"))
    }));

    // Someone removes the etcd rule and opens SSH to the nodes; the next walk (a change of
    // the spec) puts Cluster API AWS's rules back.
    let pair = |id: &str| UserIdGroupPair::builder().group_id(id).build();
    ec2.revoke_security_group_ingress()
        .group_id(&cp)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(2379)
                .to_port(2379)
                // moto revokes a rule only with its description.
                .user_id_group_pairs(
                    UserIdGroupPair::builder()
                        .group_id(&cp)
                        .description("etcd")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    ec2.authorize_security_group_ingress()
        .group_id(&cp)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(22)
                .to_port(22)
                .user_id_group_pairs(pair(&node))
                .build(),
        )
        .send()
        .await
        .unwrap();
    aws_clusters
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"additionalTags": {"team": "a"}}})),
        )
        .await
        .unwrap();
    eventually(
        "the control plane's rules are Cluster API AWS's again",
        Duration::from_secs(30),
        || {
            let cp = cp.clone();
            let expected = expected_control_plane.clone();
            async move { normalised(group(cp).await.ip_permissions()) == expected }
        },
    )
    .await;

    // A control-plane machine: an instance in a private subnet, in the control plane's
    // groups, registered with the load balancer; deregistered and terminated with its
    // Machine.
    // The AMI image-builder would publish for v1.31.0, in this account (Cluster API AWS looks
    // in the CNCF's unless imageLookupOrg says otherwise), and one for another version.
    let source = ec2
        .describe_images()
        .owners("amazon")
        .filters(filter("architecture", "x86_64"))
        .send()
        .await
        .unwrap()
        .images()[0]
        .image_id()
        .unwrap()
        .to_owned();
    let builder = ec2
        .run_instances()
        .image_id(source)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap()
        .instances()[0]
        .instance_id()
        .unwrap()
        .to_owned();
    let mut images = vec![];
    for name in [
        "capa-ami-ubuntu-24.04-v1.30.2-1700000000",
        "capa-ami-ubuntu-24.04-v1.31.0-1700000000",
    ] {
        images.push(
            ec2.create_image()
                .instance_id(&builder)
                .name(name)
                .send()
                .await
                .unwrap()
                .image_id
                .unwrap(),
        );
    }
    ec2.terminate_instances()
        .instance_ids(&builder)
        .send()
        .await
        .unwrap();
    // The instance profile `clusterawsadm bootstrap iam` makes.
    aws_sdk_iam::Client::new(&admin)
        .create_instance_profile()
        .instance_profile_name("control-plane.cluster-api-provider-aws.sigs.k8s.io")
        .send()
        .await
        .unwrap();
    for manifest in [
        // The bootstrap data KubeadmConfig would write (`#cloud-config`, `kubeadm init`).
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "prod-control-plane-0", "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
            "data": {"value": "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtrdWJlYWRtIGluaXRdCg=="},
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": "prod-control-plane-0", "namespace": NS,
                "labels": {"cluster.x-k8s.io/control-plane": ""}},
            "spec": {
                "clusterName": "prod",
                "version": "v1.31.0",
                "failureDomain": domains.keys().next().unwrap(),
                "bootstrap": {"dataSecretName": "prod-control-plane-0"},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine", "name": "prod-control-plane-0"},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachine",
            "metadata": {"name": "prod-control-plane-0", "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": "prod", "cluster.x-k8s.io/control-plane": ""}},
            "spec": {
                "imageLookupOrg": "123456789012",
                "cloudInit": {"insecureSkipSecretsManager": true},
                "instanceType": "t3.large",
                "iamInstanceProfile": "control-plane.cluster-api-provider-aws.sigs.k8s.io",
            },
        }),
    ] {
        setup.lariat.apply(manifest).await;
    }
    let aws_machines = setup.api(&lariat_provider_aws::machine::resource());
    eventually(
        "the control-plane instance runs behind the load balancer",
        Duration::from_secs(60),
        || {
            let api = aws_machines.clone();
            async move {
                api.get("prod-control-plane-0").await.is_ok_and(|m| {
                    m.data["status"]["ready"] == true
                        && common::condition(&m, "ELBAttached").as_deref() == Some("True")
                })
            }
        },
    )
    .await;
    let aws_machine = aws_machines.get("prod-control-plane-0").await.unwrap();
    let instance_id = aws_machine.data["spec"]["instanceID"]
        .as_str()
        .unwrap()
        .to_owned();
    let registered = || {
        let elb = elb.clone();
        async move {
            elb.describe_load_balancers()
                .load_balancer_names("prod-apiserver")
                .send()
                .await
                .unwrap()
                .load_balancer_descriptions()[0]
                .instances()
                .iter()
                .filter_map(|i| i.instance_id().map(str::to_owned))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(registered().await, vec![instance_id.clone()]);
    let described = ec2
        .describe_instances()
        .instance_ids(&instance_id)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    let private: Vec<&str> = spec["network"]["subnets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["isPublic"] != true)
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(private.contains(&instance.subnet_id().unwrap()));
    assert_eq!(
        instance.image_id(),
        Some(images[1].as_str()),
        "v1.31.0's AMI"
    );
    let mut instance_groups: Vec<String> = instance
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id().map(str::to_owned))
        .collect();
    instance_groups.sort();
    let mut expected_groups = vec![cp.clone(), node.clone(), group_id("lb")];
    expected_groups.sort();
    assert_eq!(instance_groups, expected_groups);
    let tag = |key: &str| {
        instance
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
            .map(str::to_owned)
    };
    assert_eq!(
        tag("sigs.k8s.io/cluster-api-provider-aws/role").as_deref(),
        Some("control-plane")
    );
    assert_eq!(tag("kubernetes.io/cluster/prod").as_deref(), Some("owned"));
    Api::<lariat_api::capi::Machine>::namespaced(setup.lariat.client.clone(), NS)
        .delete("prod-control-plane-0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the AWSMachine is gone", Duration::from_secs(60), || {
        let api = aws_machines.clone();
        async move { api.get_opt("prod-control-plane-0").await.unwrap().is_none() }
    })
    .await;
    assert!(registered().await.is_empty(), "deregistered");
    let state = ec2
        .describe_instances()
        .instance_ids(&instance_id)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_owned());
    assert_eq!(state.as_deref(), Some("terminated"));

    // Deleting the Cluster deletes everything lariat made in AWS.
    clusters
        .delete("prod", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the AWSCluster is gone", Duration::from_secs(90), || {
        let api = aws_clusters.clone();
        async move { api.get_opt("prod").await.unwrap().is_none() }
    })
    .await;
    let owned = || {
        Some(vec![tagged(
            "sigs.k8s.io/cluster-api-provider-aws/cluster/prod",
            "owned",
        )])
    };
    let gone = elb
        .describe_load_balancers()
        .load_balancer_names("prod-apiserver")
        .send()
        .await;
    let code = gone.err().and_then(|e| e.code().map(str::to_owned));
    assert_eq!(
        code.as_deref(),
        Some("LoadBalancerNotFound"),
        "the load balancer is deleted"
    );
    assert!(
        ec2.describe_security_groups()
            .set_filters(owned())
            .send()
            .await
            .unwrap()
            .security_groups()
            .is_empty()
    );
    assert!(
        ec2.describe_subnets()
            .set_filters(owned())
            .send()
            .await
            .unwrap()
            .subnets()
            .is_empty()
    );
    assert!(
        ec2.describe_vpcs()
            .set_filters(owned())
            .send()
            .await
            .unwrap()
            .vpcs()
            .is_empty()
    );
}
