//! Cluster API AWS's identities (`infrastructure.cluster.x-k8s.io/v1beta2`): whose AWS
//! credentials a cluster's objects are reconciled with.
//!
//! - AWSClusterControllerIdentity: the controller's own credentials (the SDK's default chain
//!   where `lariat server` runs); a singleton named `default`.
//! - AWSClusterStaticIdentity: an access key in a Secret of `lariat-system`.
//! - AWSClusterRoleIdentity: a role assumed through STS, from another identity's credentials.
//!
//! All three are cluster-scoped, and `allowedNamespaces` says which namespaces' clusters may
//! use them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only name an AWSClusterControllerIdentity may have, as in Cluster API AWS.
pub const CONTROLLER_IDENTITY_NAME: &str = "default";

/// The keys of a static identity's Secret, as Cluster API AWS names them.
pub mod secret_keys {
    pub const ACCESS_KEY_ID: &str = "AccessKeyID";
    pub const SECRET_ACCESS_KEY: &str = "SecretAccessKey";
    pub const SESSION_TOKEN: &str = "SessionToken";
}

/// Which namespaces may use an identity.
///
/// Cluster API AWS's rules: no `allowedNamespaces` allows none; an empty one (`{}`) allows
/// every namespace; otherwise a namespace must be in `list` or match `selector`, and an empty
/// selector matches nothing (so `{list: []}` allows none: Cluster API AWS compares with the
/// zero value, where a nil list and an empty one differ).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AllowedNamespaces {
    /// Namespaces allowed by name; nil or empty allows none by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<Vec<String>>,
    /// Namespaces allowed by their labels; an empty selector allows none.
    #[serde(default, skip_serializing_if = "is_empty_selector")]
    #[schemars(with = "crate::schema::LabelSelector")]
    pub selector: LabelSelector,
}

fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector == &LabelSelector::default()
}

impl AllowedNamespaces {
    /// Whether a namespace named `name` with `labels` may use the identity.
    pub fn allow(allowed: Option<&Self>, name: &str, labels: &BTreeMap<String, String>) -> bool {
        let Some(allowed) = allowed else {
            return false;
        };
        if allowed.list.is_none() && is_empty_selector(&allowed.selector) {
            return true;
        }
        allowed.list.iter().flatten().any(|n| n == name)
            || (!is_empty_selector(&allowed.selector)
                && crate::names::selects(&allowed.selector, labels))
    }
}

/// The kinds of identity a reference may name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AWSIdentityKind {
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
}

impl AWSIdentityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AWSClusterControllerIdentity => "AWSClusterControllerIdentity",
            Self::AWSClusterRoleIdentity => "AWSClusterRoleIdentity",
            Self::AWSClusterStaticIdentity => "AWSClusterStaticIdentity",
        }
    }
}

impl std::fmt::Display for AWSIdentityKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reference to an identity (`identityRef`, `sourceIdentityRef`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct AWSIdentityReference {
    /// Kind of the identity.
    pub kind: AWSIdentityKind,
    /// Name of the identity.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The controller's own credentials, and which namespaces may use them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSClusterControllerIdentity",
    plural = "awsclustercontrolleridentities",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsci",
    category = "cluster-api",
    doc = "Grants namespaces the use of the AWS provider's own credentials (the SDK's default chain where lariat server runs)."
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterControllerIdentitySpec {
    /// Namespaces allowed to use the identity: none when absent, all when `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

/// An access key kept in a Secret of `lariat-system`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSClusterStaticIdentity",
    plural = "awsclusterstaticidentities",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awssi",
    category = "cluster-api",
    doc = "An AWS access key ID and secret access key, kept in a Secret of lariat-system."
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterStaticIdentitySpec {
    /// Namespaces allowed to use the identity: none when absent, all when `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// The Secret in `lariat-system` with keys `AccessKeyID`, `SecretAccessKey` and optionally
    /// `SessionToken`.
    pub secret_ref: String,
}

/// A role assumed through STS with another identity's credentials.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSClusterRoleIdentity",
    plural = "awsclusterroleidentities",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsri",
    category = "cluster-api",
    doc = "An AWS role assumed through STS, from the credentials of sourceIdentityRef (the controller's own when absent)."
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterRoleIdentitySpec {
    /// Namespaces allowed to use the identity: none when absent, all when `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// The ARN of the role to assume.
    #[serde(rename = "roleARN")]
    pub role_arn: String,
    /// The role session's name (default: the cluster's namespace and name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// The session's length in seconds; credentials are renewed before it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 900, max = 43200))]
    pub duration_seconds: Option<i32>,
    /// An inline session policy (IAM policy JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_policy: Option<String>,
    /// Managed policies applied to the session.
    #[serde(
        default,
        rename = "policyARNs",
        skip_serializing_if = "Option::is_none"
    )]
    pub policy_arns: Option<Vec<String>>,
    /// The external ID the role's trust policy may require.
    #[serde(
        default,
        rename = "externalID",
        skip_serializing_if = "Option::is_none"
    )]
    pub external_id: Option<String>,
    /// The identity whose credentials assume the role; any kind, chained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity_ref: Option<AWSIdentityReference>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn allowed_namespaces_follow_cluster_api_aws() {
        let none = labels(&[]);
        let team = labels(&[("team", "a")]);
        // Absent: nobody.
        assert!(!AllowedNamespaces::allow(None, "default", &none));
        // `{}`: everybody.
        let all = AllowedNamespaces::default();
        assert!(AllowedNamespaces::allow(Some(&all), "default", &none));
        // A list: those named.
        let list = AllowedNamespaces {
            list: Some(vec!["prod".into()]),
            ..Default::default()
        };
        assert!(AllowedNamespaces::allow(Some(&list), "prod", &none));
        assert!(!AllowedNamespaces::allow(Some(&list), "dev", &team));
        // A selector: those labelled; with a list, either.
        let selector = AllowedNamespaces {
            list: Some(vec!["prod".into()]),
            selector: LabelSelector {
                match_labels: Some(labels(&[("team", "a")])),
                ..Default::default()
            },
        };
        assert!(AllowedNamespaces::allow(Some(&selector), "dev", &team));
        assert!(AllowedNamespaces::allow(Some(&selector), "prod", &none));
        assert!(!AllowedNamespaces::allow(Some(&selector), "dev", &none));
        let expression = AllowedNamespaces {
            list: Some(vec![]),
            selector: LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "team".into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                ..Default::default()
            },
        };
        assert!(AllowedNamespaces::allow(Some(&expression), "x", &team));
        assert!(!AllowedNamespaces::allow(Some(&expression), "x", &none));
    }

    #[test]
    fn an_empty_list_allows_nobody_as_upstream_compares_it() {
        // Upstream compares with the zero value, where a nil list and an empty one differ:
        // `{list: []}` is not `{}`.
        let empty_list = AllowedNamespaces {
            list: Some(vec![]),
            ..Default::default()
        };
        assert!(!AllowedNamespaces::allow(
            Some(&empty_list),
            "x",
            &BTreeMap::new()
        ));
    }
}
