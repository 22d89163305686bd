//! References brought up to date once names are final: where one object names another (a
//! Deployment's ConfigMap volume, a RoleBinding's role, an Ingress's Service...) and that
//! other was renamed by a prefix, a suffix, a hash or a patch, the reference is changed to
//! its new name, choosing the referred object as kustomize chooses it.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::Error;
use crate::fieldspec::{pod_spec_path, visit};
use crate::resource::{Affixes, Id, Resource};

/// Where references to one kind are.
struct Reference {
    /// The kind referred to.
    kind: &'static str,
    /// The kind that refers to it; `None` for every kind with a pod spec.
    referrer: Option<&'static str>,
    /// Within the referrer (or its pod spec).
    path: &'static [&'static str],
}

const fn pod(kind: &'static str, path: &'static [&'static str]) -> Reference {
    Reference {
        kind,
        referrer: None,
        path,
    }
}

const fn field(
    kind: &'static str,
    referrer: &'static str,
    path: &'static [&'static str],
) -> Reference {
    Reference {
        kind,
        referrer: Some(referrer),
        path,
    }
}

const REFERENCES: &[Reference] = &[
    field(
        "Deployment",
        "HorizontalPodAutoscaler",
        &["spec", "scaleTargetRef", "name"],
    ),
    field(
        "ReplicationController",
        "HorizontalPodAutoscaler",
        &["spec", "scaleTargetRef", "name"],
    ),
    field(
        "ReplicaSet",
        "HorizontalPodAutoscaler",
        &["spec", "scaleTargetRef", "name"],
    ),
    field(
        "StatefulSet",
        "HorizontalPodAutoscaler",
        &["spec", "scaleTargetRef", "name"],
    ),
    pod("ConfigMap", &["volumes", "configMap", "name"]),
    pod(
        "ConfigMap",
        &["containers", "env", "valueFrom", "configMapKeyRef", "name"],
    ),
    pod(
        "ConfigMap",
        &[
            "initContainers",
            "env",
            "valueFrom",
            "configMapKeyRef",
            "name",
        ],
    ),
    pod(
        "ConfigMap",
        &["containers", "envFrom", "configMapRef", "name"],
    ),
    pod(
        "ConfigMap",
        &["initContainers", "envFrom", "configMapRef", "name"],
    ),
    pod(
        "ConfigMap",
        &["volumes", "projected", "sources", "configMap", "name"],
    ),
    field("ConfigMap", "Role", &["rules", "resourceNames"]),
    field("ConfigMap", "ClusterRole", &["rules", "resourceNames"]),
    field(
        "ConfigMap",
        "Ingress",
        &[
            "metadata",
            "annotations",
            "nginx.ingress.kubernetes.io/fastcgi-params-configmap",
        ],
    ),
    pod("Secret", &["volumes", "secret", "secretName"]),
    pod(
        "Secret",
        &["containers", "env", "valueFrom", "secretKeyRef", "name"],
    ),
    pod(
        "Secret",
        &["initContainers", "env", "valueFrom", "secretKeyRef", "name"],
    ),
    pod("Secret", &["containers", "envFrom", "secretRef", "name"]),
    pod(
        "Secret",
        &["initContainers", "envFrom", "secretRef", "name"],
    ),
    pod("Secret", &["imagePullSecrets", "name"]),
    pod(
        "Secret",
        &["volumes", "projected", "sources", "secret", "name"],
    ),
    field("Secret", "Ingress", &["spec", "tls", "secretName"]),
    field(
        "Secret",
        "Ingress",
        &[
            "metadata",
            "annotations",
            "ingress.kubernetes.io/auth-secret",
        ],
    ),
    field(
        "Secret",
        "Ingress",
        &[
            "metadata",
            "annotations",
            "nginx.ingress.kubernetes.io/auth-secret",
        ],
    ),
    field(
        "Secret",
        "Ingress",
        &[
            "metadata",
            "annotations",
            "nginx.ingress.kubernetes.io/auth-tls-secret",
        ],
    ),
    field("Secret", "ServiceAccount", &["imagePullSecrets", "name"]),
    field("Secret", "StorageClass", &["parameters", "secretName"]),
    field("Secret", "StorageClass", &["parameters", "adminSecretName"]),
    field("Secret", "StorageClass", &["parameters", "userSecretName"]),
    field("Secret", "StorageClass", &["parameters", "secretRef"]),
    field("Secret", "Role", &["rules", "resourceNames"]),
    field("Secret", "ClusterRole", &["rules", "resourceNames"]),
    field(
        "Secret",
        "PersistentVolume",
        &["spec", "azureFile", "secretName"],
    ),
    field("Service", "StatefulSet", &["spec", "serviceName"]),
    field(
        "Service",
        "Ingress",
        &["spec", "rules", "http", "paths", "backend", "serviceName"],
    ),
    field("Service", "Ingress", &["spec", "backend", "serviceName"]),
    field(
        "Service",
        "Ingress",
        &[
            "spec", "rules", "http", "paths", "backend", "service", "name",
        ],
    ),
    field(
        "Service",
        "Ingress",
        &["spec", "defaultBackend", "service", "name"],
    ),
    field("Service", "APIService", &["spec", "service", "name"]),
    field(
        "Service",
        "ValidatingWebhookConfiguration",
        &["webhooks", "clientConfig", "service"],
    ),
    field(
        "Service",
        "MutatingWebhookConfiguration",
        &["webhooks", "clientConfig", "service"],
    ),
    field("Role", "RoleBinding", &["roleRef", "name"]),
    field("ClusterRole", "RoleBinding", &["roleRef", "name"]),
    field("ClusterRole", "ClusterRoleBinding", &["roleRef", "name"]),
    field("ServiceAccount", "RoleBinding", &["subjects"]),
    field("ServiceAccount", "ClusterRoleBinding", &["subjects"]),
    pod("ServiceAccount", &["serviceAccountName"]),
    pod(
        "PersistentVolumeClaim",
        &["volumes", "persistentVolumeClaim", "claimName"],
    ),
    field(
        "PersistentVolume",
        "PersistentVolumeClaim",
        &["spec", "volumeName"],
    ),
    field(
        "PersistentVolume",
        "ClusterRole",
        &["rules", "resourceNames"],
    ),
    field(
        "StorageClass",
        "PersistentVolume",
        &["spec", "storageClassName"],
    ),
    field(
        "StorageClass",
        "PersistentVolumeClaim",
        &["spec", "storageClassName"],
    ),
    field(
        "StorageClass",
        "StatefulSet",
        &["spec", "volumeClaimTemplates", "spec", "storageClassName"],
    ),
    pod("PriorityClass", &["priorityClassName"]),
    field("IngressClass", "Ingress", &["spec", "ingressClassName"]),
    field(
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        &["spec", "policyName"],
    ),
];

/// What is known of each object when references are fixed: its ids and affixes, not its
/// content.
struct Candidate {
    current: Id,
    previous: Vec<Id>,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
}

impl Candidate {
    fn affixes(&self) -> Affixes<'_> {
        Affixes {
            prefixes: &self.prefixes,
            suffixes: &self.suffixes,
        }
    }
}

/// Fixes every reference in `set` to an object renamed during the build.
pub(crate) fn fix_references(set: &mut [Resource]) -> Result<(), Error> {
    if set.iter().all(|r| r.previous.is_empty()) {
        return Ok(());
    }
    // Only renamed objects can be referred to by an old name.
    let candidates: Vec<Candidate> = set
        .iter()
        .filter(|r| !r.previous.is_empty())
        .map(|r| Candidate {
            current: r.id(),
            previous: r.previous.clone(),
            prefixes: r.prefixes.clone(),
            suffixes: r.suffixes.clone(),
        })
        .collect();
    // Old name and kind to the objects that had them: a reference is looked up, not searched.
    let mut by_old_name: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (index, candidate) in candidates.iter().enumerate() {
        for id in &candidate.previous {
            let entry = by_old_name
                .entry((id.kind.as_str(), id.name.as_str()))
                .or_default();
            if entry.last() != Some(&index) {
                entry.push(index);
            }
        }
    }
    let lookup = Lookup {
        candidates: &candidates,
        by_old_name: &by_old_name,
    };
    for referrer in set.iter_mut() {
        let referrer_id = referrer.id();
        let (prefixes, suffixes) = (referrer.prefixes.clone(), referrer.suffixes.clone());
        let affixes = Affixes {
            prefixes: &prefixes,
            suffixes: &suffixes,
        };
        for reference in REFERENCES {
            let base: &[&str] = match reference.referrer {
                Some(kind) if kind == referrer_id.kind => &[],
                Some(_) => continue,
                None => match pod_spec_path(&referrer_id.kind) {
                    Some(path) => path,
                    None => continue,
                },
            };
            if !candidates.iter().any(|c| c.current.kind == reference.kind) {
                continue;
            }
            let path: Vec<&str> = base.iter().chain(reference.path).copied().collect();
            let role_ref = roleref_kind(&referrer.object, reference);
            let mut failure = None;
            let context = Context {
                affixes,
                referrer_id: &referrer_id,
                reference,
                role_ref: role_ref.as_deref(),
            };
            visit(&mut referrer.object, &path, false, &mut |place| {
                if let Err(e) = update(place, &context, &lookup) {
                    failure.get_or_insert(e);
                }
            });
            if let Some(message) = failure {
                return Err(Error::new(referrer_id.to_string(), message));
            }
        }
    }
    Ok(())
}

/// The renamed objects, and where to find them by an old name.
struct Lookup<'a> {
    candidates: &'a [Candidate],
    by_old_name: &'a HashMap<(&'a str, &'a str), Vec<usize>>,
}

struct Context<'a> {
    affixes: Affixes<'a>,
    referrer_id: &'a Id,
    reference: &'a Reference,
    role_ref: Option<&'a str>,
}

/// A RoleBinding's `roleRef.kind`, which says whether its name is a Role's or a ClusterRole's.
fn roleref_kind(object: &Value, reference: &Reference) -> Option<String> {
    (reference.path == ["roleRef", "name"])
        .then(|| object["roleRef"]["kind"].as_str().map(str::to_string))
        .flatten()
}

fn update(place: &mut Value, context: &Context, candidates: &Lookup) -> Result<(), String> {
    match place {
        Value::String(name) => {
            if let Some(referral) = choose(name, None, context, candidates)? {
                *name = referral.current.name.clone();
            }
        }
        Value::Object(map) => {
            // A subject or a webhook's service: name and namespace.
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k != context.reference.kind)
            {
                return Ok(());
            }
            let Some(name) = map.get("name").and_then(Value::as_str).map(str::to_string) else {
                return Ok(());
            };
            let namespace = map
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(referral) = choose(&name, namespace.as_deref(), context, candidates)? {
                map.insert("name".into(), json!(referral.current.name));
                if !referral.current.namespace.is_empty() {
                    map.insert("namespace".into(), json!(referral.current.namespace));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The object an old `name` (in `namespace`, if the reference says) now is, chosen as
/// kustomize chooses: renamed from that name, of the kind referred to, in the referrer's
/// namespace (unless either is cluster-wide, or it is a ServiceAccount), then the one
/// whose name prefixes and suffixes match the referrer's.
fn choose<'c>(
    name: &str,
    namespace: Option<&str>,
    context: &Context,
    lookup: &Lookup<'c>,
) -> Result<Option<&'c Candidate>, String> {
    let kind = context.role_ref.unwrap_or(context.reference.kind);
    let Some(indices) = lookup.by_old_name.get(&(kind, name)) else {
        return Ok(None);
    };
    let mut chosen: Vec<&Candidate> = indices
        .iter()
        .map(|&i| &lookup.candidates[i])
        .filter(|c| {
            namespace.is_none_or(|ns| {
                let effective = if ns.is_empty() { "default" } else { ns };
                c.previous
                    .iter()
                    .chain([&c.current])
                    .any(|id| id.effective_namespace() == effective)
            })
        })
        .filter(|c| {
            context.referrer_id.is_cluster_scoped()
                || c.current.is_cluster_scoped()
                || c.current.kind == "ServiceAccount"
                || c.current.same_namespace(context.referrer_id)
        })
        .collect();
    if chosen.len() > 1 {
        chosen.retain(|c| c.affixes().matches(context.affixes, true));
        if chosen.len() > 1 {
            chosen.retain(|c| c.affixes().matches(context.affixes, false));
        }
    }
    match chosen.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        [first, rest @ ..]
            if rest.iter().all(|c| {
                c.current.name == first.current.name
                    && c.current.namespace == first.current.namespace
            }) =>
        {
            Ok(Some(first))
        }
        several => Err(format!(
            "{name:?} may be any of {}; name references must be unambiguous",
            several
                .iter()
                .map(|c| c.current.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
