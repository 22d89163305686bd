//! What a move takes: every object a server serves, read once (the [`Inventory`]), and the
//! objects of one namespace's Clusters found in it as clusterctl finds them (the [`Graph`]).
//! References are read from the objects themselves ([`references`]), so the same reading
//! decides what joins the graph and what, left outside it, would point into it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use anyhow::Context as _;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Discovery, Scope, verbs};
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;
use serde_json::Value;

/// clusterctl's labels on a CRD: its objects move (`move`), or move with everything they own
/// (`move-hierarchy`), even outside Cluster API's groups.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";
pub const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";
/// Marks the move's journal, which is never part of what moves.
pub const JOURNAL_LABEL: &str = "lariat.dev/move-journal";

/// Kinds whose objects a server keeps for itself about the clusters it manages: a target
/// makes its own, so they neither move nor count as references left behind.
const SERVERS_OWN: &[(&str, &str, &str)] = &[
    ("", "Event", "a server's record of what happened"),
    (
        "events.k8s.io",
        "Event",
        "a server's record of what happened",
    ),
    (
        "management.lariat.dev",
        "ClusterConnection",
        "the target records its own when the agent connects",
    ),
    (
        "management.lariat.dev",
        "ClusterRegistrationToken",
        "a registration with the source only",
    ),
    (
        "management.lariat.dev",
        "ClusterAccess",
        "the target computes its own from its bindings",
    ),
    (
        "fleet.cattle.io",
        "Cluster",
        "the target's Fleet makes one per Cluster",
    ),
    (
        "fleet.cattle.io",
        "BundleDeployment",
        "the target's Fleet makes its own per Cluster",
    ),
    (
        "coordination.k8s.io",
        "Lease",
        "a server's own leader elections",
    ),
];

/// One object as read, with what is needed to write it elsewhere.
#[derive(Clone, Debug)]
pub struct Object {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The kind's resource name (`machines`).
    pub plural: String,
    pub namespaced: bool,
    pub object: DynamicObject,
}

impl Object {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }

    pub fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default()
    }

    pub fn uid(&self) -> &str {
        self.object.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `Kind/name`, or `Kind/namespace/name` outside `namespace`: how the CLI names it.
    pub fn display(&self, namespace: &str) -> String {
        if self.namespace().is_empty() || self.namespace() == namespace {
            format!("{}/{}", self.kind, self.name())
        } else {
            format!("{}/{}/{}", self.kind, self.namespace(), self.name())
        }
    }

    pub fn is_cluster(&self) -> bool {
        self.kind == "Cluster" && self.group == "cluster.x-k8s.io"
    }

    /// An object from a file (`--from-directory`), its kind from its own apiVersion.
    pub fn from_json(value: Value) -> anyhow::Result<Object> {
        let object: DynamicObject = serde_json::from_value(value)?;
        let types = object
            .types
            .clone()
            .context("an object without apiVersion and kind")?;
        let (group, version) = match types.api_version.split_once('/') {
            Some((group, version)) => (group.to_string(), version.to_string()),
            None => (String::new(), types.api_version.clone()),
        };
        let plural =
            ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &types.kind)).plural;
        Ok(Object {
            group,
            version,
            kind: types.kind,
            plural,
            namespaced: object.metadata.namespace.is_some(),
            object,
        })
    }
}

/// Everything a server serves that can be listed, read once.
pub struct Inventory {
    pub objects: Vec<Object>,
    /// Labels of each kind's CRD, by (group, kind).
    crd_labels: HashMap<(String, String), BTreeMap<String, String>>,
}

impl Inventory {
    /// Nothing read (a restore from a directory has no source to scan).
    pub fn empty() -> Inventory {
        Inventory {
            objects: Vec::new(),
            crd_labels: HashMap::new(),
        }
    }

    pub async fn read(client: &kube::Client, discovery: &Discovery) -> anyhow::Result<Inventory> {
        let mut objects = Vec::new();
        for group in discovery.groups() {
            for (resource, capabilities) in group.recommended_resources() {
                if !capabilities.supports_operation(verbs::LIST)
                    || servers_own(&resource.group, &resource.kind).is_some()
                {
                    continue;
                }
                for object in list_all(client, &resource).await? {
                    objects.push(Object {
                        group: resource.group.clone(),
                        version: resource.version.clone(),
                        kind: resource.kind.clone(),
                        plural: resource.plural.clone(),
                        namespaced: capabilities.scope == Scope::Namespaced,
                        object,
                    });
                }
            }
        }
        let mut crd_labels = HashMap::new();
        for crd in objects
            .iter()
            .filter(|o| o.kind == "CustomResourceDefinition" && o.group == "apiextensions.k8s.io")
        {
            let spec = &crd.object.data["spec"];
            if let (Some(group), Some(kind)) =
                (spec["group"].as_str(), spec["names"]["kind"].as_str())
            {
                crd_labels.insert(
                    (group.to_string(), kind.to_string()),
                    crd.object.metadata.labels.clone().unwrap_or_default(),
                );
            }
        }
        Ok(Inventory {
            objects,
            crd_labels,
        })
    }

    /// The value of a label of an object's CRD (none for the server's own kinds).
    pub fn crd_label_value(&self, object: &Object, label: &str) -> Option<&str> {
        self.crd_labels
            .get(&(object.group.clone(), object.kind.clone()))?
            .get(label)
            .map(String::as_str)
    }

    fn crd_label(&self, object: &Object, label: &str) -> bool {
        self.crd_labels
            .get(&(object.group.clone(), object.kind.clone()))
            .is_some_and(|labels| labels.contains_key(label))
    }

    /// How an object's kind moves: Cluster API's groups and CRDs labelled for move, with all
    /// of a namespace; Secrets, ConfigMaps and cluster-wide kinds labelled for move only when
    /// something moving owns, labels or names them.
    fn moves(&self, object: &Object) -> Option<Moves> {
        let cluster_api = object.group.ends_with("cluster.x-k8s.io")
            && object.group != "clusterctl.cluster.x-k8s.io";
        let labelled =
            self.crd_label(object, MOVE_LABEL) || self.crd_label(object, MOVE_HIERARCHY_LABEL);
        if (cluster_api || labelled) && object.namespaced {
            Some(Moves::WithNamespace)
        } else if (cluster_api || labelled)
            || (object.group.is_empty() && matches!(object.kind.as_str(), "Secret" | "ConfigMap"))
        {
            Some(Moves::IfLinked)
        } else {
            None
        }
    }
}

/// Why a kind's objects are not moved and not counted as left behind, if they are not.
pub fn servers_own(group: &str, kind: &str) -> Option<&'static str> {
    SERVERS_OWN
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, why)| *why)
}

enum Moves {
    WithNamespace,
    IfLinked,
}

/// Lists every object of a kind, a page at a time.
pub async fn list_all(
    client: &kube::Client,
    resource: &ApiResource,
) -> anyhow::Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .with_context(|| format!("cannot list {}", resource.plural))?;
        objects.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(objects),
        }
    }
}

/// `--include`/`--leave`: `KIND[/NAME]`, KIND as a kind, a resource name, or either with its
/// group (`widgets.example.com`).
#[derive(Clone, Debug)]
pub struct Selector {
    pub kind: String,
    pub name: Option<String>,
}

impl std::str::FromStr for Selector {
    type Err = String;
    fn from_str(text: &str) -> Result<Selector, String> {
        let (kind, name) = match text.split_once('/') {
            Some((kind, name)) => (kind, Some(name.to_string())),
            None => (text, None),
        };
        if kind.is_empty()
            || name
                .as_deref()
                .is_some_and(|n| n.is_empty() || n.contains('/'))
        {
            return Err(format!(
                "{text:?}: expected KIND or KIND/NAME, e.g. Widget/w1"
            ));
        }
        Ok(Selector {
            kind: kind.to_lowercase(),
            name,
        })
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}/{name}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl Selector {
    pub fn matches(&self, object: &Object) -> bool {
        let kind = object.kind.to_lowercase();
        let plural = object.plural.clone();
        let with_group = |k: &str| format!("{k}.{}", object.group);
        let kind_matches = [
            kind.clone(),
            plural.clone(),
            with_group(&kind),
            with_group(&plural),
        ]
        .contains(&self.kind);
        kind_matches && self.name.as_deref().is_none_or(|n| n == object.name())
    }
}

/// What a reference points at.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// An ownerReference's uid.
    Uid(String),
    /// `{apiVersion?, kind, name, namespace?}`.
    Kind {
        group: Option<String>,
        kind: String,
        namespace: String,
        name: String,
    },
    /// A `fooName`/`fooRef` field: an object named so whose kind ends the field's prefix
    /// (`clusterName` a Cluster, `dataSecretName` a Secret).
    Field {
        prefix: String,
        namespace: String,
        name: String,
    },
    /// The `cluster.x-k8s.io/cluster-name` label.
    ClusterLabel { namespace: String, name: String },
}

#[derive(Clone, Debug)]
pub struct Reference {
    /// Where in the referring object, e.g. `spec.targets[0].clusterName`.
    pub path: String,
    pub target: Target,
}

/// Every reference an object makes, outside its status (observed, not intended) and its
/// own identity.
pub fn references(object: &Object) -> Vec<Reference> {
    let namespace = object.namespace().to_string();
    let mut found = Vec::new();
    for (i, owner) in object
        .object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .enumerate()
    {
        found.push(Reference {
            path: format!("metadata.ownerReferences[{i}]"),
            target: Target::Uid(owner.uid.clone()),
        });
    }
    if let Some(cluster) = object
        .object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
    {
        found.push(Reference {
            path: format!("metadata.labels[{CLUSTER_NAME_LABEL}]"),
            target: Target::ClusterLabel {
                namespace: namespace.clone(),
                name: cluster.clone(),
            },
        });
    }
    if let Value::Object(fields) = &object.object.data {
        for (key, value) in fields {
            if key != "status" {
                walk(value, key, &namespace, &mut found);
            }
        }
    }
    found
}

fn walk(value: &Value, path: &str, namespace: &str, found: &mut Vec<Reference>) {
    match value {
        Value::Object(fields) => {
            if let (Some(kind), Some(name)) = (
                fields.get("kind").and_then(Value::as_str),
                fields.get("name").and_then(Value::as_str),
            ) {
                let group = fields
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .map(|v| v.rsplit_once('/').map_or("", |(g, _)| g).to_string())
                    .or_else(|| {
                        fields
                            .get("apiGroup")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    });
                found.push(Reference {
                    path: path.to_string(),
                    target: Target::Kind {
                        group,
                        kind: kind.to_string(),
                        namespace: fields
                            .get("namespace")
                            .and_then(Value::as_str)
                            .unwrap_or(namespace)
                            .to_string(),
                        name: name.to_string(),
                    },
                });
            }
            for (key, value) in fields {
                let here = format!("{path}.{key}");
                let prefix = key
                    .strip_suffix("Name")
                    .or_else(|| key.strip_suffix("Ref"))
                    .filter(|p| !p.is_empty());
                let named = match value {
                    Value::String(name) => Some(name.as_str()),
                    // `secretRef: {name: x}`: a local reference, its kind in its key.
                    Value::Object(inner) if key.ends_with("Ref") && !inner.contains_key("kind") => {
                        inner.get("name").and_then(Value::as_str)
                    }
                    _ => None,
                };
                if let (Some(prefix), Some(name)) = (prefix, named) {
                    found.push(Reference {
                        path: here.clone(),
                        target: Target::Field {
                            prefix: prefix.to_lowercase(),
                            namespace: namespace.to_string(),
                            name: name.to_string(),
                        },
                    });
                }
                walk(value, &here, namespace, found);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{i}]"), namespace, found);
            }
        }
        _ => {}
    }
}

/// Finds the objects a reference names, by uid or by name.
pub struct Index<'a> {
    objects: &'a [Object],
    by_uid: HashMap<&'a str, usize>,
    by_name: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Index<'a> {
    pub fn new(objects: &'a [Object]) -> Index<'a> {
        let mut by_uid = HashMap::new();
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, object) in objects.iter().enumerate() {
            if !object.uid().is_empty() {
                by_uid.insert(object.uid(), i);
            }
            by_name.entry(object.name()).or_default().push(i);
        }
        Index {
            objects,
            by_uid,
            by_name,
        }
    }

    /// The objects `target` names.
    pub fn resolve(&self, target: &Target) -> Vec<usize> {
        let named = |name: &str, namespace: &str, fits: &dyn Fn(&Object) -> bool| -> Vec<usize> {
            self.by_name
                .get(name)
                .into_iter()
                .flatten()
                .copied()
                .filter(|&i| {
                    let o = &self.objects[i];
                    (!o.namespaced || o.namespace() == namespace) && fits(o)
                })
                .collect()
        };
        match target {
            Target::Uid(uid) => self.by_uid.get(uid.as_str()).copied().into_iter().collect(),
            Target::Kind {
                group,
                kind,
                namespace,
                name,
            } => named(name, namespace, &|o| {
                o.kind == *kind && group.as_ref().is_none_or(|g| *g == o.group)
            }),
            Target::Field {
                prefix,
                namespace,
                name,
            } => named(name, namespace, &|o| {
                prefix.ends_with(&o.kind.to_lowercase())
            }),
            Target::ClusterLabel { namespace, name } => {
                named(name, namespace, &|o| o.is_cluster() && o.namespaced)
            }
        }
    }
}

/// The objects a move takes, in the order they are created: owners before what they own.
pub struct Graph {
    pub objects: Vec<Object>,
}

impl Graph {
    /// clusterctl's graph: every object of Cluster API's kinds (and kinds labelled for move)
    /// in `namespace`, what `include` names, and, until nothing more joins, every Secret,
    /// ConfigMap or cluster-wide movable object that one of them owns, labels with its
    /// cluster's name, or references.
    pub fn discover(inventory: &Inventory, namespace: &str, include: &[Selector]) -> Graph {
        let objects = &inventory.objects;
        let index = Index::new(objects);
        let in_scope = |o: &Object| !o.namespaced || o.namespace() == namespace;
        let journal = |o: &Object| {
            o.object
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(JOURNAL_LABEL))
        };
        let mut members: BTreeSet<usize> = objects
            .iter()
            .enumerate()
            .filter(|(_, o)| in_scope(o) && !journal(o))
            .filter(|(_, o)| {
                matches!(inventory.moves(o), Some(Moves::WithNamespace))
                    || include.iter().any(|s| s.matches(o))
            })
            .map(|(i, _)| i)
            .collect();
        let candidates: Vec<usize> = objects
            .iter()
            .enumerate()
            .filter(|(i, o)| {
                !members.contains(i)
                    && in_scope(o)
                    && !journal(o)
                    && matches!(inventory.moves(o), Some(Moves::IfLinked))
            })
            .map(|(i, _)| i)
            .collect();
        loop {
            let mut linked: HashSet<usize> = HashSet::new();
            // What members reference.
            for &m in &members {
                for reference in references(&objects[m]) {
                    if matches!(
                        reference.target,
                        Target::Uid(_) | Target::ClusterLabel { .. }
                    ) {
                        continue;
                    }
                    linked.extend(index.resolve(&reference.target));
                }
            }
            // What names a member as owner or cluster.
            for &c in &candidates {
                if references(&objects[c]).iter().any(|r| {
                    matches!(r.target, Target::Uid(_) | Target::ClusterLabel { .. })
                        && index.resolve(&r.target).iter().any(|t| members.contains(t))
                }) {
                    linked.insert(c);
                }
            }
            let before = members.len();
            members.extend(linked.into_iter().filter(|i| candidates.contains(i)));
            if members.len() == before {
                break;
            }
        }
        Graph {
            objects: creation_order(members.into_iter().map(|i| objects[i].clone()).collect()),
        }
    }

    pub fn uids(&self) -> HashSet<&str> {
        self.objects.iter().map(Object::uid).collect()
    }

    pub fn clusters(&self) -> impl Iterator<Item = &Object> {
        self.objects.iter().filter(|o| o.is_cluster())
    }

    /// `Cluster=2, Machine=6, ...`, as clusterctl sums up a move, in creation order.
    pub fn summary(&self) -> String {
        count_kinds(self.objects.iter().map(|o| o.kind.as_str()))
    }
}

/// `Cluster=2, Machine=6`: how many of each kind, in the order they first appear.
pub fn count_kinds<'a>(kinds: impl Iterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for kind in kinds {
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .iter()
        .map(|(kind, n)| format!("{kind}={n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Owners before what they own (so the new uids are known when an owned object is
/// written), Clusters first among equals, then by kind and name for a stable order.
pub fn creation_order(mut objects: Vec<Object>) -> Vec<Object> {
    objects.sort_by(|a, b| {
        (!a.is_cluster(), &a.kind, a.namespace(), a.name()).cmp(&(
            !b.is_cluster(),
            &b.kind,
            b.namespace(),
            b.name(),
        ))
    });
    let uids: HashMap<String, usize> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| (o.uid().to_string(), i))
        .collect();
    let owners: Vec<Vec<usize>> = objects
        .iter()
        .map(|o| {
            o.object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter_map(|r| uids.get(&r.uid).copied())
                .collect()
        })
        .collect();
    let mut placed = vec![false; objects.len()];
    let mut order = Vec::with_capacity(objects.len());
    while order.len() < objects.len() {
        let before = order.len();
        for i in 0..objects.len() {
            if !placed[i] && owners[i].iter().all(|&o| placed[o]) {
                placed[i] = true;
                order.push(i);
            }
        }
        if order.len() == before {
            // An ownership cycle (not something Kubernetes makes): the rest as they come.
            order.extend((0..objects.len()).filter(|&i| !placed[i]));
            break;
        }
    }
    let mut slots: Vec<Option<Object>> = objects.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Kinds by what a server serves, to read or write objects of a graph there.
pub struct Served {
    discovery: Discovery,
}

impl Served {
    pub async fn discover(client: &kube::Client, what: &str) -> anyhow::Result<Served> {
        let discovery = Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| crate::connect::refused(e, &format!("read what {what} serves")))?;
        Ok(Served { discovery })
    }

    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    pub fn resolve(&self, object: &Object) -> Option<(ApiResource, ApiCapabilities)> {
        self.discovery.resolve_gvk(&object.gvk())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(api_version: &str, kind: &str, namespace: &str, name: &str, rest: Value) -> Object {
        let mut value = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")}});
        if let (Value::Object(to), Value::Object(from)) = (&mut value, rest) {
            for (k, v) in from {
                if k == "metadata" {
                    for (mk, mv) in v.as_object().unwrap() {
                        to["metadata"][mk] = mv.clone();
                    }
                } else {
                    to.insert(k, v);
                }
            }
        }
        Object::from_json(value).unwrap()
    }

    #[test]
    fn references_are_read_from_owners_labels_kinds_and_named_fields() {
        let widget = object(
            "example.com/v1",
            "Widget",
            "ns",
            "w",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u1"}],
                                "labels": {CLUSTER_NAME_LABEL: "dev"}},
                   "spec": {"clusterName": "dev", "target": {"kind": "Machine", "name": "m", "apiVersion": "cluster.x-k8s.io/v1beta1"},
                            "credentials": {"secretRef": {"name": "s"}}, "items": [{"machineName": "m2"}], "name": "self"},
                   "status": {"clusterName": "ignored"}}),
        );
        let paths: Vec<(String, Target)> = references(&widget)
            .into_iter()
            .map(|r| (r.path, r.target))
            .collect();
        let field = |prefix: &str, name: &str| Target::Field {
            prefix: prefix.into(),
            namespace: "ns".into(),
            name: name.into(),
        };
        assert!(paths.contains(&(
            "metadata.ownerReferences[0]".into(),
            Target::Uid("u1".into())
        )));
        assert!(paths.contains(&(
            format!("metadata.labels[{CLUSTER_NAME_LABEL}]"),
            Target::ClusterLabel {
                namespace: "ns".into(),
                name: "dev".into()
            }
        )));
        assert!(paths.contains(&("spec.clusterName".into(), field("cluster", "dev"))));
        assert!(paths.contains(&(
            "spec.target".into(),
            Target::Kind {
                group: Some("cluster.x-k8s.io".into()),
                kind: "Machine".into(),
                namespace: "ns".into(),
                name: "m".into()
            }
        )));
        assert!(paths.contains(&("spec.credentials.secretRef".into(), field("secret", "s"))));
        assert!(paths.contains(&("spec.items[0].machineName".into(), field("machine", "m2"))));
        assert!(!paths.iter().any(|(p, _)| p.starts_with("status")));
        assert!(!paths.iter().any(|(p, _)| p == "spec.name"));
    }

    #[test]
    fn a_field_names_an_object_of_the_kind_its_prefix_ends_with() {
        let objects = vec![
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                "ns",
                "dev",
                json!({}),
            ),
            object("v1", "Secret", "ns", "dev", json!({})),
            object(
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                "other",
                "dev",
                json!({}),
            ),
        ];
        let index = Index::new(&objects);
        let field = |prefix: &str| Target::Field {
            prefix: prefix.into(),
            namespace: "ns".into(),
            name: "dev".into(),
        };
        assert_eq!(index.resolve(&field("cluster")), vec![0]);
        assert_eq!(index.resolve(&field("datasecret")), vec![1]);
        assert!(index.resolve(&field("machine")).is_empty());
        assert_eq!(index.resolve(&Target::Uid("uid-dev".into())).len(), 1);
    }

    #[test]
    fn owners_are_created_before_what_they_own() {
        let owned = |name: &str, owner: &str| {
            object(
                "cluster.x-k8s.io/v1beta1",
                "Machine",
                "ns",
                name,
                json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": owner, "uid": format!("uid-{owner}")}]}}),
            )
        };
        let objects = vec![
            owned("a", "b"),
            owned("b", "c"),
            object(
                "cluster.x-k8s.io/v1beta1",
                "MachineSet",
                "ns",
                "c",
                json!({}),
            ),
            object("cluster.x-k8s.io/v1beta1", "Cluster", "ns", "z", json!({})),
        ];
        let names: Vec<String> = creation_order(objects)
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        assert_eq!(names, ["z", "c", "b", "a"]);
    }

    #[test]
    fn selectors_take_kinds_resources_and_groups() {
        let widget = object("example.com/v1", "Widget", "ns", "w1", json!({}));
        for text in [
            "Widget",
            "widgets",
            "widget.example.com",
            "Widgets.example.com",
            "widget/w1",
        ] {
            let selector: Selector = text.parse().unwrap();
            assert!(selector.matches(&widget), "{text}");
        }
        for text in ["widget/w2", "gadget", "widgets.other.com"] {
            let selector: Selector = text.parse().unwrap();
            assert!(!selector.matches(&widget), "{text}");
        }
        assert!("/x".parse::<Selector>().is_err());
        assert!("Widget/".parse::<Selector>().is_err());
    }
}
