//! `lariat init --infrastructure aws` checks the credentials of `lariat server` itself (the AWS
//! SDK's default chain, as Cluster API AWS's controller uses them) and refuses, in one line,
//! with what is missing or with AWS's own refusal; with good keys the provider runs and
//! Cluster API AWS's controller identity exists. AWS is moto, with its authentication on.

mod common;

use std::time::Duration;

use common::TestServer;
use lariat_provider_aws::moto::Moto;

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}

fn init_aws(server: &TestServer) -> std::process::Output {
    server.lariat(&["init", "--infrastructure", "aws", "--wait-seconds", "30"])
}

#[test]
fn init_names_the_missing_credential() {
    let server = TestServer::start_with_env(&[], &[]);
    let refused = init_aws(&server);
    assert!(!refused.status.success());
    assert_eq!(
        stderr(&refused)
            .lines()
            .filter(|l| !l.starts_with("Installing"))
            .collect::<Vec<_>>(),
        [
            "error: provider infrastructure-aws cannot run: no AWS credentials where lariat server runs: none of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or an instance role is set; set them in lariat server's environment and restart it"
        ]
    );

    let half = TestServer::start_with_env(&[], &[("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")]);
    let refused = init_aws(&half);
    assert!(
        stderr(&refused).contains(
            "no AWS credentials where lariat server runs: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not;"
        ),
        "{}",
        stderr(&refused)
    );
    // The server keeps saying so on the inventory entry, as clusterctl users look for it.
    assert_eq!(
        half.kubectl_ok(&[
            "get",
            "provider",
            "-n",
            "lariat-system",
            "infrastructure-aws",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].reason}"#,
        ]),
        "CredentialsNotFound"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn init_checks_the_keys_with_aws_and_creates_the_controller_identity() {
    let moto = Moto::start();
    let (key, secret) = moto.user("lariat", &["sts:GetCallerIdentity"]).await;
    moto.enforce_auth();

    // Keys AWS does not know: AWS's refusal, with its code.
    let unknown = TestServer::start_with_env(
        &[],
        &[
            ("AWS_ENDPOINT_URL", &moto.endpoint),
            ("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
        ],
    );
    let refused = tokio::task::spawn_blocking(move || (init_aws(&unknown), unknown))
        .await
        .unwrap()
        .0;
    assert!(
        stderr(&refused).ends_with(
            "error: provider infrastructure-aws cannot run: the AWS credentials where lariat server runs were refused: InvalidClientTokenId: The security token included in the request is invalid."
        ),
        "{}",
        stderr(&refused)
    );

    let server = TestServer::start_with_env(
        &[],
        &[
            ("AWS_ENDPOINT_URL", &moto.endpoint),
            ("AWS_ACCESS_KEY_ID", &key),
            ("AWS_SECRET_ACCESS_KEY", &secret),
        ],
    );
    let server = tokio::task::spawn_blocking(move || {
        let output = init_aws(&server);
        assert!(output.status.success(), "{}", stderr(&output));
        server
    })
    .await
    .unwrap();
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "provider",
            "-n",
            "lariat-system",
            "infrastructure-aws",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ]),
        "True"
    );
    // Whose credentials they are, in the server's log.
    let log = server.log();
    assert!(
        log.contains("account=123456789012 arn=arn:aws:iam::123456789012:user/lariat"),
        "{log}"
    );
    common::eventually("the controller identity exists", || {
        server
            .kubectl(&["get", "awsclustercontrolleridentity", "default"])
            .status
            .success()
    });
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "awsci",
            "default",
            "-o",
            "jsonpath={.spec.allowedNamespaces}"
        ]),
        "{}"
    );
    // Nothing secret in the server's log.
    assert!(!server.log().contains(&secret));
}

/// `kill -9` while lariat is making a cluster in AWS, then a restart: the reconcile resumes
/// from what AWS holds (each resource found by its ownership tags before anything is made,
/// EKS's creates carrying client request tokens), so nothing is made twice.
#[test]
fn a_kill_9_midway_through_creation_makes_nothing_twice() {
    use aws_sdk_ec2::types::Filter;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let moto = Moto::start();
    let admin = runtime.block_on(moto.admin());
    let mut server = TestServer::start_with_env(
        &[],
        &[
            ("AWS_ENDPOINT_URL", &moto.endpoint),
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "not-checked-by-moto-here"),
        ],
    );
    let init = init_aws(&server);
    assert!(init.status.success(), "{}", stderr(&init));
    let manifests = common::generate_cluster(&[
        "prod",
        "--infrastructure",
        "aws",
        "--region",
        "us-east-1",
        "--kubernetes-version",
        "v1.31.0",
        "--worker-machine-count",
        "3",
    ]);
    server.apply_ok(&["apply", "-f", "-"], &manifests);

    let ec2 = aws_sdk_ec2::Client::new(&admin);
    let owned = || {
        Filter::builder()
            .name("tag:sigs.k8s.io/cluster-api-provider-aws/cluster/prod")
            .values("owned")
            .build()
    };
    let count = |what: &str| -> usize {
        runtime.block_on(async {
            match what {
                "vpcs" => ec2
                    .describe_vpcs()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .vpcs()
                    .len(),
                "subnets" => ec2
                    .describe_subnets()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .subnets()
                    .len(),
                "internet gateways" => ec2
                    .describe_internet_gateways()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .internet_gateways()
                    .len(),
                "NAT gateways" => ec2
                    .describe_nat_gateways()
                    .filter(owned())
                    .send()
                    .await
                    .unwrap()
                    .nat_gateways()
                    .iter()
                    .filter(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
                    .count(),
                "elastic IPs" => ec2
                    .describe_addresses()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .addresses()
                    .len(),
                "route tables" => ec2
                    .describe_route_tables()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .route_tables()
                    .len(),
                "security groups" => ec2
                    .describe_security_groups()
                    .filters(owned())
                    .send()
                    .await
                    .unwrap()
                    .security_groups()
                    .len(),
                _ => unreachable!(),
            }
        })
    };
    // Killed as soon as AWS holds the cluster's VPC: the rest of its network, its role, the
    // EKS cluster and the node group are still to come.
    common::eventually_within(Duration::from_secs(60), "lariat makes the VPC", || {
        count("vpcs") > 0
    });
    server.kill9();
    let subnets_at_kill = count("subnets");
    eprintln!("killed with {subnets_at_kill} of 6 subnets made");
    server.launch();

    common::eventually_within(Duration::from_secs(120), "the pool runs 3 nodes", || {
        server
            .kubectl(&[
                "get",
                "machinepool",
                "prod-pool-0",
                "-o",
                "jsonpath={.status.phase}/{.status.replicas}",
            ])
            .stdout
            == b"Running/3"
    });
    let kinds = [
        ("vpcs", 1),
        ("subnets", 6),
        ("internet gateways", 1),
        ("NAT gateways", 3),
        ("elastic IPs", 3),
        ("route tables", 6),
        ("security groups", 1),
    ];
    for (what, expected) in kinds {
        assert_eq!(
            count(what),
            expected,
            "{what} (the kill came with {subnets_at_kill} subnets made)"
        );
    }
    let eks = aws_sdk_eks::Client::new(&admin);
    let clusters = runtime
        .block_on(eks.list_clusters().send())
        .unwrap()
        .clusters()
        .to_vec();
    assert_eq!(clusters, ["default_prod-control-plane"]);
    let groups = runtime
        .block_on(eks.list_nodegroups().cluster_name(&clusters[0]).send())
        .unwrap()
        .nodegroups()
        .to_vec();
    assert_eq!(groups.len(), 1, "{groups:?}");

    // clusterctl's tree, with the AWS objects in it.
    let described = server.lariat(&["describe", "cluster", "prod"]);
    let described = String::from_utf8_lossy(&described.stdout).to_string();
    for row in [
        "├─ClusterInfrastructure - AWSManagedCluster/prod",
        "├─ControlPlane - AWSManagedControlPlane/prod-control-plane",
        "  └─MachinePool/prod-pool-0",
        "    └─AWSManagedMachinePool/prod-pool-0",
    ] {
        let line = described
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{row} in:\n{described}"));
        assert!(line.contains("True"), "{line}");
    }
}
