//! One object of a build, with what kustomize remembers of it: every name and namespace it
//! has had (patches and references may use any of them), the prefixes and suffixes applied
//! to it, and whether its name is still to get a content hash.

use serde_json::{Map, Value};

/// An object's identity as kustomize compares them: group, version, kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Id {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Id {
    /// The id an object names in its `apiVersion`, `kind` and `metadata`.
    pub fn of(object: &Value) -> Id {
        let (group, version) = group_version(str_at(object, &["apiVersion"]));
        Id {
            group: group.to_string(),
            version: version.to_string(),
            kind: str_at(object, &["kind"]).to_string(),
            namespace: str_at(object, &["metadata", "namespace"]).to_string(),
            name: str_at(object, &["metadata", "name"]).to_string(),
        }
    }

    /// Kubernetes' `default` namespace is what no namespace means.
    pub fn effective_namespace(&self) -> &str {
        if self.namespace.is_empty() || self.is_cluster_scoped() {
            "default"
        } else {
            &self.namespace
        }
    }

    pub fn is_cluster_scoped(&self) -> bool {
        is_cluster_scoped(&self.group, &self.kind)
    }

    pub fn same_namespace(&self, other: &Id) -> bool {
        self.effective_namespace() == other.effective_namespace()
    }

    /// Equal as kustomize's `ResId.Equals`: same group, version, kind, name and namespace.
    pub fn equals(&self, other: &Id) -> bool {
        self.group == other.group
            && self.version == other.version
            && self.kind == other.kind
            && self.name == other.name
            && self.same_namespace(other)
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        write!(f, "{version} {}", self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, " {}/", self.namespace)?;
        } else {
            f.write_str(" ")?;
        }
        f.write_str(&self.name)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub object: Value,
    /// Every id it has had, the first as it was read, the current one not included.
    pub previous: Vec<Id>,
    pub prefixes: Vec<String>,
    pub suffixes: Vec<String>,
    /// Generated, its name to end in a hash of its content when the build is done.
    pub needs_hash: bool,
}

impl Resource {
    pub fn new(object: Value) -> Resource {
        Resource {
            object,
            previous: Vec::new(),
            prefixes: Vec::new(),
            suffixes: Vec::new(),
            needs_hash: false,
        }
    }

    pub fn id(&self) -> Id {
        Id::of(&self.object)
    }

    pub fn kind(&self) -> &str {
        str_at(&self.object, &["kind"])
    }

    pub fn name(&self) -> &str {
        str_at(&self.object, &["metadata", "name"])
    }

    pub fn namespace(&self) -> &str {
        str_at(&self.object, &["metadata", "namespace"])
    }

    /// Its current id and every one before it.
    pub fn ids(&self) -> impl Iterator<Item = Id> + '_ {
        self.previous
            .iter()
            .cloned()
            .chain(std::iter::once(self.id()))
    }

    /// Whether any id it has had equals `id`.
    pub fn had_id(&self, id: &Id) -> bool {
        self.ids().any(|mine| mine.equals(id))
    }

    pub fn metadata(&mut self) -> &mut Map<String, Value> {
        let object = self.object.as_object_mut().expect("resources are objects");
        object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .expect("checked when read")
    }

    /// Renames it, remembering the name it had.
    pub fn set_name(&mut self, name: String) {
        if name != self.name() {
            self.previous.push(self.id());
            self.metadata().insert("name".into(), Value::String(name));
        }
    }

    /// Moves it to `namespace`, remembering where it was.
    pub fn set_namespace(&mut self, namespace: &str) {
        if namespace != self.namespace() {
            self.previous.push(self.id());
            self.metadata()
                .insert("namespace".into(), Value::String(namespace.into()));
        }
    }
}

/// The name prefixes and suffixes an object was given, layer by layer.
#[derive(Clone, Copy)]
pub(crate) struct Affixes<'a> {
    pub prefixes: &'a [String],
    pub suffixes: &'a [String],
}

impl Affixes<'_> {
    /// The same prefixes and suffixes, as kustomize decides whether a reference made in one
    /// overlay means an object of that overlay.
    pub fn matches(self, other: Affixes, allow_empty: bool) -> bool {
        let fits = |a: &[String], b: &[String]| {
            (allow_empty && (a.is_empty() || b.is_empty())) || same_ending(a, b)
        };
        fits(self.prefixes, other.prefixes) && fits(self.suffixes, other.suffixes)
    }
}

/// Whether the shorter list is the end of the longer (two empty lists are; one empty is not).
fn same_ending(a: &[String], b: &[String]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return long.is_empty();
    }
    long.ends_with(short)
}

/// The string at `path`, or `""`.
pub(crate) fn str_at<'v>(value: &'v Value, path: &[&str]) -> &'v str {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `apps/v1` as `("apps", "v1")`, `v1` as `("", "v1")`.
pub(crate) fn group_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// Kinds Kubernetes serves without a namespace, by group and kind (a kind of another
/// group is taken as namespaced, as kustomize takes kinds its OpenAPI data does not know).
pub(crate) fn is_cluster_scoped(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "ComponentStatus" | "Namespace" | "Node" | "PersistentVolume"
        ) | (
            "admissionregistration.k8s.io",
            "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "ValidatingWebhookConfiguration"
        ) | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("apiregistration.k8s.io", "APIService")
            | ("authentication.k8s.io", "SelfSubjectReview" | "TokenReview")
            | (
                "authorization.k8s.io",
                "SelfSubjectAccessReview" | "SelfSubjectRulesReview" | "SubjectAccessReview"
            )
            | (
                "certificates.k8s.io",
                "CertificateSigningRequest" | "ClusterTrustBundle"
            )
            | (
                "flowcontrol.apiserver.k8s.io",
                "FlowSchema" | "PriorityLevelConfiguration"
            )
            | (
                "networking.k8s.io",
                "IngressClass" | "IPAddress" | "ServiceCIDR"
            )
            | ("node.k8s.io", "RuntimeClass")
            | ("policy", "PodSecurityPolicy")
            | (
                "rbac.authorization.k8s.io",
                "ClusterRole" | "ClusterRoleBinding"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | (
                "storage.k8s.io",
                "CSIDriver" | "CSINode" | "StorageClass" | "VolumeAttachment"
            )
    )
}
