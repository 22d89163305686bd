//! `lariat init --infrastructure aws` checks the credentials of `lariat server` itself (the AWS
//! SDK's default chain, as Cluster API AWS's controller uses them) and refuses, in one line,
//! with what is missing or with AWS's own refusal; with good keys the provider runs and
//! Cluster API AWS's controller identity exists. AWS is moto, with its authentication on.

mod common;

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
