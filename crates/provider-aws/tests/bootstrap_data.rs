//! Where an AWSMachine's bootstrap data waits, against moto: unless the spec says
//! `insecureSkipSecretsManager`, it is kept in Secrets Manager (or SSM Parameter Store),
//! tagged as the cluster's, and the instance's user data is only the script that fetches it.
//! That script is run here as an instance would run it, with the real AWS CLI against moto:
//! it rebuilds the data and deletes the entries. lariat deletes what is left once the
//! Machine has a Node, and with the AWSMachine; a machine pointed at another's entries
//! (`secretPrefix` set by hand) never touches them.

mod common;

use std::time::Duration;

use aws_sdk_ec2::types::InstanceAttributeName;
use base64::Engine;
use common::{NS, Setup, eventually};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use lariat_provider_aws::bootstrap_store::DATA_FILE;
use lariat_provider_aws::moto::Moto;
use serde_json::{Value, json};

/// Bootstrap data as KubeadmConfig writes it, `size` bytes with little to compress: 160 KiB
/// take two secrets, 12 KiB three parameters.
fn bootstrap_data(size: usize) -> Vec<u8> {
    let mut state = 42u64;
    let mut text = String::from("#cloud-config\nruncmd: [kubeadm join]\n");
    while text.len() < size {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&format!("# {:016x}\n", state));
    }
    text.into_bytes()
}

fn machine(name: &str, control_plane: bool, cloud_init: Value, image: &str) -> [Value; 2] {
    let data = if cloud_init.is_null() || cloud_init == json!({}) {
        "prod-bootstrap-large"
    } else {
        "prod-bootstrap-small"
    };
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": "prod"});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    [
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "clusterName": "prod",
                "version": "v1.31.0",
                "bootstrap": {"dataSecretName": data},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine", "name": name},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"ami": {"id": image}, "instanceType": "t3.large", "cloudInit": cloud_init},
        }),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_data_waits_in_secrets_manager_or_parameter_store_and_is_deleted_after_use() {
    let moto = Moto::start();
    let endpoint = moto.endpoint.clone();
    let setup = Setup::start(moto, &endpoint).await;
    let admin = setup.moto.admin().await;
    let ec2 = aws_sdk_ec2::Client::new(&admin);
    let secrets = aws_sdk_secretsmanager::Client::new(&admin);
    let ssm = aws_sdk_ssm::Client::new(&admin);
    for manifest in common::aws_cluster("prod") {
        setup.lariat.apply(manifest).await;
    }
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
    let (data, small) = (bootstrap_data(160 * 1024), bootstrap_data(12 * 1024));
    for (name, data) in [
        ("prod-bootstrap-large", &data),
        ("prod-bootstrap-small", &small),
    ] {
        setup
            .lariat
            .apply(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": NS,
                    "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
                "data": {"value": base64::engine::general_purpose::STANDARD.encode(data)},
            }))
            .await;
    }
    let in_parameters = json!({"secureSecretsBackend": "ssm-parameter-store"});
    secrets
        .create_secret()
        .name("aws.cluster.x-k8s.io/victim-0")
        .secret_string("the victim's")
        .send()
        .await
        .unwrap();
    for manifest in [
        // Cluster API AWS's default: no cloudInit at all.
        machine("fetched-from-secrets", true, json!(null), &image),
        machine(
            "fetched-from-parameters",
            false,
            in_parameters.clone(),
            &image,
        ),
        machine("joined", false, json!({}), &image),
        machine("deleted", false, in_parameters, &image),
        // Pointed at someone else's secret: lariat keeps to the names it derives itself.
        machine(
            "squatter",
            false,
            json!({"secretPrefix": "aws.cluster.x-k8s.io/victim", "secretCount": 1}),
            &image,
        ),
    ]
    .into_iter()
    .flatten()
    {
        setup.lariat.apply(manifest).await;
    }
    // A machine given another cluster's bootstrap data (its join token, its CA keys).
    setup
        .lariat
        .apply(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "other-bootstrap", "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": "other"}},
            "data": {"value": base64::engine::general_purpose::STANDARD.encode(&small)},
        }))
        .await;
    let [mut borrower, borrower_aws] = machine("borrower", false, json!({}), &image);
    borrower["spec"]["bootstrap"]["dataSecretName"] = json!("other-bootstrap");
    for manifest in [borrower, borrower_aws] {
        setup.lariat.apply(manifest).await;
    }
    let aws_machines = setup.api(&lariat_provider_aws::machine::resource());
    for name in [
        "fetched-from-secrets",
        "fetched-from-parameters",
        "joined",
        "deleted",
        "squatter",
    ] {
        eventually(
            &format!("{name}'s instance runs"),
            Duration::from_secs(90),
            || {
                let api = aws_machines.clone();
                async move {
                    api.get(name)
                        .await
                        .is_ok_and(|m| m.data["status"]["ready"] == true)
                }
            },
        )
        .await;
    }
    let recorded = |machine: &kube::api::DynamicObject| {
        let cloud_init = &machine.data["spec"]["cloudInit"];
        (
            cloud_init["secretPrefix"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            cloud_init["secretCount"].as_u64().unwrap_or_default(),
        )
    };

    // Secrets Manager: under the prefix Cluster API AWS's instance profiles may read, named
    // from the AWSMachine's UID and the data; two secrets, tagged as the instance is.
    let machine = aws_machines.get("fetched-from-secrets").await.unwrap();
    let (prefix, count) = recorded(&machine);
    let uid = machine.metadata.uid.clone().unwrap();
    assert!(
        prefix.starts_with(&format!("aws.cluster.x-k8s.io/{uid}-")),
        "{prefix}"
    );
    assert_eq!(count, 2);
    let first = secrets
        .describe_secret()
        .secret_id(format!("{prefix}-0"))
        .send()
        .await
        .unwrap();
    let tag = |key: &str| {
        first
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
            .map(str::to_owned)
    };
    assert_eq!(
        tag("sigs.k8s.io/cluster-api-provider-aws/cluster/prod").as_deref(),
        Some("owned")
    );
    assert_eq!(
        tag("sigs.k8s.io/cluster-api-provider-aws/role").as_deref(),
        Some("control-plane")
    );
    let instance = machine.data["spec"]["instanceID"].as_str().unwrap();
    let booted_with = user_data(&ec2, instance).await;
    assert!(booted_with.len() < 4096, "{} bytes", booted_with.len());
    assert!(
        !booted_with.contains("kubeadm"),
        "no bootstrap data in user data"
    );
    assert!(booted_with.contains(&format!("prefix='{prefix}'\ncount=2\n")));
    let fetched = boot(&booted_with, &endpoint, &setup).await;
    assert!(fetched == data, "the instance rebuilds the bootstrap data");
    for index in 0..2 {
        let gone = secrets
            .describe_secret()
            .secret_id(format!("{prefix}-{index}"))
            .send()
            .await;
        assert!(gone.is_err(), "the instance deleted {prefix}-{index}");
    }

    // Parameter Store: SecureString parameters of 4 KiB at most, as the standard tier holds.
    let machine = aws_machines.get("fetched-from-parameters").await.unwrap();
    let (prefix, count) = recorded(&machine);
    assert!(prefix.starts_with("/cluster.x-k8s.io/"), "{prefix}");
    assert_eq!(count, 3);
    let parameter = ssm
        .get_parameter()
        .name(format!("{prefix}/0"))
        .send()
        .await
        .unwrap()
        .parameter
        .unwrap();
    assert_eq!(
        parameter.r#type(),
        Some(&aws_sdk_ssm::types::ParameterType::SecureString)
    );
    let instance = machine.data["spec"]["instanceID"].as_str().unwrap();
    let fetched = boot(&user_data(&ec2, instance).await, &endpoint, &setup).await;
    assert!(fetched == small, "the instance rebuilds the bootstrap data");
    assert!(
        ssm.get_parameter()
            .name(format!("{prefix}/0"))
            .send()
            .await
            .is_err()
    );

    // A Machine with its Node needs its entries no more: lariat deletes them and forgets them.
    let machine = aws_machines.get("joined").await.unwrap();
    let (prefix, count) = recorded(&machine);
    assert_eq!(count, 2);
    secrets
        .describe_secret()
        .secret_id(format!("{prefix}-1"))
        .send()
        .await
        .expect("the entries wait for the instance");
    Api::<lariat_api::capi::Machine>::namespaced(setup.lariat.client.clone(), NS)
        .patch_status(
            "joined",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-0-7"}}})),
        )
        .await
        .unwrap();
    eventually(
        "the joined machine's entries are forgotten",
        Duration::from_secs(30),
        || {
            let api = aws_machines.clone();
            async move {
                api.get("joined")
                    .await
                    .is_ok_and(|m| m.data["spec"]["cloudInit"]["secretPrefix"].is_null())
            }
        },
    )
    .await;
    for index in 0..count {
        let gone = secrets
            .describe_secret()
            .secret_id(format!("{prefix}-{index}"))
            .send()
            .await;
        assert!(gone.is_err(), "lariat deleted {prefix}-{index}");
    }

    // Deleting the machine deletes its entries with its instance.
    let machine = aws_machines.get("deleted").await.unwrap();
    let (prefix, count) = recorded(&machine);
    assert!(
        ssm.get_parameter()
            .name(format!("{prefix}/{}", count - 1))
            .send()
            .await
            .is_ok()
    );
    Api::<lariat_api::capi::Machine>::namespaced(setup.lariat.client.clone(), NS)
        .delete("deleted", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the AWSMachine is gone", Duration::from_secs(60), || {
        let api = aws_machines.clone();
        async move { api.get_opt("deleted").await.unwrap().is_none() }
    })
    .await;
    for index in 0..count {
        assert!(
            ssm.get_parameter()
                .name(format!("{prefix}/{index}"))
                .send()
                .await
                .is_err(),
            "lariat deleted {prefix}/{index}"
        );
    }

    // The squatter's own entries went where lariat names them; the victim's secret is
    // neither overwritten nor, with the squatter, deleted.
    let squatter = aws_machines.get("squatter").await.unwrap();
    let (prefix, _) = recorded(&squatter);
    assert!(
        prefix.starts_with(&format!(
            "aws.cluster.x-k8s.io/{}-",
            squatter.metadata.uid.clone().unwrap()
        )),
        "{prefix}"
    );
    Api::<lariat_api::capi::Machine>::namespaced(setup.lariat.client.clone(), NS)
        .delete("squatter", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the squatter is gone", Duration::from_secs(60), || {
        let api = aws_machines.clone();
        async move { api.get_opt("squatter").await.unwrap().is_none() }
    })
    .await;
    let victim = secrets
        .get_secret_value()
        .secret_id("aws.cluster.x-k8s.io/victim-0")
        .send()
        .await
        .expect("the victim's secret is still there");
    assert_eq!(victim.secret_string(), Some("the victim's"));

    // Another cluster's bootstrap data boots nothing here.
    let borrower = aws_machines.get("borrower").await.unwrap();
    let message = borrower.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "InstanceReady"))
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    assert!(
        message.contains("bootstrap data Secret other-bootstrap is cluster other's"),
        "{message}"
    );
    assert!(borrower.data["spec"]["instanceID"].is_null());
}

/// An instance's user data, as EC2 returns it.
async fn user_data(ec2: &aws_sdk_ec2::Client, instance: &str) -> String {
    let attribute = ec2
        .describe_instance_attribute()
        .instance_id(instance)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = attribute.user_data().and_then(|u| u.value()).unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap()
}

/// Runs the user data's boothook as cloud-init would, with the real AWS CLI against moto (as
/// the instance's role; moto does not check it), the data file moved into a temporary
/// directory; what it leaves for cloud-init.
async fn boot(user_data: &str, endpoint: &str, setup: &Setup) -> Vec<u8> {
    let script = user_data
        .split("Content-Type: text/cloud-boothook; charset=\"us-ascii\"\n\n")
        .nth(1)
        .and_then(|rest| rest.split("\n--==lariat-bootstrap-data==").next())
        .expect("a boothook part");
    let include = format!("text/x-include-url; charset=\"us-ascii\"\n\nfile://{DATA_FILE}\n");
    assert!(user_data.contains(&include), "{user_data}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bootstrap-data");
    let script = script.replace(DATA_FILE, file.to_str().unwrap());
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "instance-role")
        .env("AWS_SECRET_ACCESS_KEY", &setup.secret)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the boothook ends")
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(&file).unwrap()
}
