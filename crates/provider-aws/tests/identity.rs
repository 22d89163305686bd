//! Identities against a real moto with AWS's authentication enforced: a static identity's keys
//! are its IAM user's, a role identity's session is the role's, chained from its source,
//! renewed before it expires; `allowedNamespaces` is enforced on every identity of a chain;
//! what is refused says why, with AWS's own error code.

mod common;

use std::time::Duration;

use common::Lariat;
use lariat_api::aws::{AWSIdentityKind, AWSIdentityReference};
use lariat_provider_aws::moto::Moto;
use lariat_provider_aws::{Aws, Identities, IdentityError, Settings};
use serde_json::json;

fn reference(kind: AWSIdentityKind, name: &str) -> AWSIdentityReference {
    AWSIdentityReference {
        kind,
        name: name.to_owned(),
    }
}

fn static_ref(name: &str) -> AWSIdentityReference {
    reference(AWSIdentityKind::AWSClusterStaticIdentity, name)
}

fn role_ref(name: &str) -> AWSIdentityReference {
    reference(AWSIdentityKind::AWSClusterRoleIdentity, name)
}

fn static_identity(name: &str, secret: &str, allowed: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSClusterStaticIdentity",
        "metadata": {"name": name},
        "spec": {"secretRef": secret, "allowedNamespaces": allowed},
    })
}

fn role_identity(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSClusterRoleIdentity",
        "metadata": {"name": name},
        "spec": spec,
    })
}

struct World {
    moto: Moto,
    lariat: Lariat,
    identities: std::sync::Arc<Identities>,
}

async fn world(settings: Settings) -> World {
    let moto = Moto::start();
    let lariat = Lariat::start().await;
    let aws = Aws::new(Settings {
        endpoint_url: Some(moto.endpoint.clone()),
        ..settings
    });
    let identities = Identities::new(aws, lariat.caches.clone()).await;
    for (name, labels) in [
        ("team-a", json!({"team": "a"})),
        ("team-b", json!({"team": "b"})),
    ] {
        lariat.namespace(name, labels).await;
    }
    World {
        moto,
        lariat,
        identities,
    }
}

impl World {
    async fn settled(&self) {
        self.lariat.caches.catch_up().await.unwrap();
    }

    async fn caller_arn(&self, namespace: &str, identity: &AWSIdentityReference) -> String {
        self.settled().await;
        let session = self
            .identities
            .session(namespace, "us-east-1", Some(identity))
            .await
            .unwrap_or_else(|e| panic!("session for {namespace}: {e}"));
        session.caller().await.unwrap().arn
    }

    async fn refused(&self, namespace: &str, identity: &AWSIdentityReference) -> IdentityError {
        self.settled().await;
        match self
            .identities
            .session(namespace, "us-east-1", Some(identity))
            .await
        {
            Ok(_) => panic!("{namespace} may use {identity:?}"),
            Err(error) => error,
        }
    }

    fn calls(&self, operation: &str) -> u64 {
        self.identities
            .aws()
            .calls()
            .iter()
            .filter(|((_, op), _)| op == operation)
            .map(|(_, n)| n)
            .sum()
    }
}

#[tokio::test]
async fn a_static_identity_is_its_iam_user_in_the_namespaces_it_allows() {
    let w = world(Settings::default()).await;
    let (key, secret) = w.moto.user("capa", &["sts:*"]).await;
    w.moto.enforce_auth();
    w.lariat
        .secret(
            "capa-keys",
            &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
        )
        .await;
    w.lariat
        .apply(static_identity(
            "capa",
            "capa-keys",
            json!({"list": ["team-a"]}),
        ))
        .await;

    assert_eq!(
        w.caller_arn("team-a", &static_ref("capa")).await,
        "arn:aws:iam::123456789012:user/capa"
    );
    let refused = w.refused("team-b", &static_ref("capa")).await;
    assert_eq!(refused.reason(), "PrincipalUsageUnauthorized");
    assert_eq!(
        refused.to_string(),
        "Namespace is not permitted to use AWSClusterStaticIdentity: capa"
    );

    // A wrong secret key reaches AWS, which refuses it with its own code.
    w.lariat
        .secret(
            "capa-keys",
            &[("AccessKeyID", &key), ("SecretAccessKey", "not-the-key")],
        )
        .await;
    w.settled().await;
    let session = w
        .identities
        .session("team-a", "us-east-1", Some(&static_ref("capa")))
        .await
        .unwrap();
    let error = session.caller().await.unwrap_err();
    assert_eq!(error.code, "SignatureDoesNotMatch", "{error}");

    // An unknown key, also AWS's answer.
    w.lariat
        .secret(
            "capa-keys",
            &[("AccessKeyID", "AKIANOSUCHKEY"), ("SecretAccessKey", "x")],
        )
        .await;
    w.settled().await;
    let session = w
        .identities
        .session("team-a", "us-east-1", Some(&static_ref("capa")))
        .await
        .unwrap();
    assert_eq!(
        session.caller().await.unwrap_err().code,
        "InvalidClientTokenId"
    );

    // What lariat can tell without asking AWS.
    w.lariat.secret("half", &[("AccessKeyID", &key)]).await;
    w.lariat
        .apply(static_identity("half", "half", json!({})))
        .await;
    assert_eq!(
        w.refused("team-b", &static_ref("half")).await.to_string(),
        "AWSClusterStaticIdentity half: Secret lariat-system/half has no SecretAccessKey key"
    );
    w.lariat
        .apply(static_identity("nokeys", "nosuchsecret", json!({})))
        .await;
    let missing = w.refused("team-a", &static_ref("nokeys")).await;
    assert_eq!(
        missing.to_string(),
        "AWSClusterStaticIdentity nokeys: Secret lariat-system/nosuchsecret does not exist"
    );
    assert_eq!(missing.reason(), "CredentialProviderBuildFailed");
    assert_eq!(
        w.refused("team-a", &static_ref("nobody")).await.to_string(),
        "AWSClusterStaticIdentity \"nobody\" does not exist"
    );
}

#[tokio::test]
async fn a_rotated_secret_is_used_at_once() {
    let w = world(Settings::default()).await;
    let (old_key, old_secret) = w.moto.user("old", &["sts:*"]).await;
    let (new_key, new_secret) = w.moto.user("new", &["sts:*"]).await;
    w.moto.enforce_auth();
    w.lariat
        .secret(
            "keys",
            &[("AccessKeyID", &old_key), ("SecretAccessKey", &old_secret)],
        )
        .await;
    w.lariat
        .apply(static_identity("rotating", "keys", json!({})))
        .await;
    assert!(
        w.caller_arn("team-a", &static_ref("rotating"))
            .await
            .ends_with("user/old")
    );
    w.lariat
        .secret(
            "keys",
            &[("AccessKeyID", &new_key), ("SecretAccessKey", &new_secret)],
        )
        .await;
    assert!(
        w.caller_arn("team-a", &static_ref("rotating"))
            .await
            .ends_with("user/new")
    );
}

#[tokio::test]
async fn a_role_identity_is_assumed_from_its_source_and_kept_until_near_expiry() {
    let w = world(Settings::default()).await;
    let (key, secret) = w
        .moto
        .user("source", &["sts:AssumeRole", "sts:GetCallerIdentity"])
        .await;
    let role = w.moto.role("deployer", &["ec2:Describe*"]).await;
    w.moto.enforce_auth();
    w.lariat
        .secret(
            "source-keys",
            &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
        )
        .await;
    w.lariat
        .apply(static_identity(
            "source",
            "source-keys",
            json!({"selector": {"matchLabels": {"team": "a"}}}),
        ))
        .await;
    w.lariat
        .apply(role_identity(
            "deployer",
            json!({
                "roleARN": role,
                "externalID": "lariat-test",
                "durationSeconds": 900,
                "sourceIdentityRef": {"kind": "AWSClusterStaticIdentity", "name": "source"},
                "allowedNamespaces": {},
            }),
        ))
        .await;

    // The session is the role's, named after the namespace.
    assert_eq!(
        w.caller_arn("team-a", &role_ref("deployer")).await,
        "arn:aws:sts::123456789012:assumed-role/deployer/lariat-team-a"
    );
    // Fifteen-minute credentials, renewed five to ten minutes before they expire: a second
    // request now reuses them.
    w.caller_arn("team-a", &role_ref("deployer")).await;
    assert_eq!(w.calls("AssumeRole"), 1, "{:?}", w.identities.aws().calls());
    assert_eq!(w.calls("GetCallerIdentity"), 2);

    // The role allows every namespace, but its source only team a's: team b is refused, and
    // the condition says it is the source.
    let refused = w.refused("team-b", &role_ref("deployer")).await;
    assert_eq!(refused.reason(), "SourcePrincipalUsageUnauthorized");
    assert_eq!(
        refused.to_string(),
        "Namespace is not permitted to use AWSClusterStaticIdentity: source"
    );
}

#[tokio::test]
async fn assumed_credentials_are_renewed_before_they_expire() {
    // The SDK renews between half and all of `renew_before_expiry` before the end (jitter);
    // 1798 s before a 900 s session ends makes them stale within a second.
    let w = world(Settings {
        renew_before_expiry: Duration::from_secs(1798),
        ..Settings::default()
    })
    .await;
    let (key, secret) = w.moto.user("source", &["sts:*"]).await;
    let role = w.moto.role("short", &[]).await;
    w.moto.enforce_auth();
    w.lariat
        .secret(
            "keys",
            &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
        )
        .await;
    w.lariat
        .apply(static_identity("source", "keys", json!({})))
        .await;
    w.lariat
        .apply(role_identity(
            "short",
            json!({
                "roleARN": role,
                "sessionName": "renewal",
                "durationSeconds": 900,
                "sourceIdentityRef": {"kind": "AWSClusterStaticIdentity", "name": "source"},
                "allowedNamespaces": {},
            }),
        ))
        .await;
    assert!(
        w.caller_arn("team-a", &role_ref("short"))
            .await
            .ends_with("assumed-role/short/renewal")
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        w.caller_arn("team-a", &role_ref("short"))
            .await
            .ends_with("assumed-role/short/renewal")
    );
    assert_eq!(w.calls("AssumeRole"), 2, "{:?}", w.identities.aws().calls());
}

#[tokio::test]
async fn a_source_that_may_not_assume_the_role_surfaces_aws_s_refusal() {
    let w = world(Settings::default()).await;
    // The user may only ask who it is, not assume roles.
    let (key, secret) = w.moto.user("weak", &["sts:GetCallerIdentity"]).await;
    let role = w.moto.role("target", &[]).await;
    w.moto.enforce_auth();
    w.lariat
        .secret(
            "weak",
            &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
        )
        .await;
    w.lariat
        .apply(static_identity("weak", "weak", json!({})))
        .await;
    w.lariat
        .apply(role_identity(
            "target",
            json!({
                "roleARN": role,
                "sourceIdentityRef": {"kind": "AWSClusterStaticIdentity", "name": "weak"},
                "allowedNamespaces": {},
            }),
        ))
        .await;
    w.settled().await;
    let session = w
        .identities
        .session("team-a", "us-east-1", Some(&role_ref("target")))
        .await
        .unwrap();
    let error = session.caller().await.unwrap_err();
    assert_eq!(error.code, "AccessDenied", "{error}");
    assert!(
        error.message.contains(&format!("assuming role {role}")),
        "{error}"
    );
}

#[tokio::test]
async fn identities_that_chain_in_a_loop_or_name_no_such_controller_are_refused() {
    let w = world(Settings::default()).await;
    for (name, source) in [("a", "b"), ("b", "a")] {
        w.lariat
            .apply(role_identity(
                name,
                json!({
                    "roleARN": "arn:aws:iam::123456789012:role/x",
                    "sourceIdentityRef": {"kind": "AWSClusterRoleIdentity", "name": source},
                    "allowedNamespaces": {},
                }),
            ))
            .await;
    }
    let looped = w.refused("team-a", &role_ref("a")).await;
    assert_eq!(
        looped.to_string(),
        "the identities chain in a loop or past 8 roles: AWSClusterRoleIdentity/a -> AWSClusterRoleIdentity/b -> AWSClusterRoleIdentity/a"
    );

    let controller = |name: &str| reference(AWSIdentityKind::AWSClusterControllerIdentity, name);
    assert_eq!(
        w.refused("team-a", &controller("mine")).await.to_string(),
        "an AWSClusterControllerIdentity is always named \"default\"; the reference names \"mine\""
    );
    // No identity named: the controller's, which must exist and allow the namespace.
    assert_eq!(
        w.refused("team-a", &controller("default"))
            .await
            .to_string(),
        "AWSClusterControllerIdentity \"default\" does not exist"
    );
    w.lariat
        .apply(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSClusterControllerIdentity",
            "metadata": {"name": "default"},
            "spec": {"allowedNamespaces": {"list": ["team-b"]}},
        }))
        .await;
    w.settled().await;
    let refused = w
        .identities
        .session("team-a", "us-east-1", None)
        .await
        .err()
        .expect("team-a may not use the controller's identity");
    assert_eq!(
        refused.to_string(),
        "Namespace is not permitted to use AWSClusterControllerIdentity: default"
    );
    assert!(
        w.identities
            .session("team-b", "us-east-1", None)
            .await
            .is_ok()
    );
}
