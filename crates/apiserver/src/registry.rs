//! The served kinds: every resource type, built-in or user-defined, is described by the same
//! `ResourceType`, built from a CustomResourceDefinition.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::status::{ApiError, ApiResult, Cause};

/// One served version of a resource type.
#[derive(Clone, Debug)]
pub struct VersionInfo {
    pub name: String,
    pub storage: bool,
    /// The structural `openAPIV3Schema`; `None` accepts any object.
    pub schema: Option<Value>,
    pub printer_columns: Vec<PrinterColumn>,
    pub status_subresource: bool,
    pub scale: Option<ScaleSubresource>,
    pub deprecated: bool,
}

#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
    /// A cell no JSONPath can compute, printed as kube-apiserver's own printers do for the
    /// core kinds (a Node's STATUS and ROLES). Never set from a CRD.
    pub printer: Option<Printer>,
}

/// Cells of core kinds that kube-apiserver computes in code rather than by JSONPath.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Printer {
    /// `Ready`, `NotReady` or `Unknown`, with `,SchedulingDisabled` when cordoned.
    NodeStatus,
    /// The `node-role.kubernetes.io/<role>` labels, or `<none>`.
    NodeRoles,
    /// An Event's object as `kind/name` (`machineset/dev-md-0-x7k2q`), core v1 or
    /// events.k8s.io/v1.
    EventObject,
    /// When an Event was last seen: its series' last observation, its last timestamp, or
    /// else when it first happened, as kube-apiserver's event printer picks.
    EventLastSeen,
    /// A Deployment's or StatefulSet's ready replicas out of those wanted, `2/3`.
    ReadyReplicas,
    /// A Pod's ready containers out of all, `1/2`.
    PodReady,
    /// A Pod's status as kubectl words it: a container's waiting or terminated reason
    /// (`ImagePullBackOff`, `CrashLoopBackOff`, `Completed`), `Init:1/2`, `Terminating`, or the
    /// phase.
    PodStatus,
    /// A Pod's restarts, with how long ago the last one was: `3 (42s ago)`.
    PodRestarts,
}

/// A kind served from another kind's objects, as Kubernetes serves events.k8s.io/v1 Events
/// from the core v1 Events it stores: one object, two shapes, converted on every read and
/// write.
#[derive(Clone, Debug)]
pub struct StoredAs {
    pub group: &'static str,
    pub plural: &'static str,
    /// The stored shape to this kind's.
    pub from_storage: fn(Value) -> Value,
    /// This kind's shape to the stored one.
    pub to_storage: fn(Value) -> Value,
}

#[derive(Clone, Debug)]
pub struct ScaleSubresource {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// How a kind came to be served, which decides a few API behaviours (strategic merge patch is
/// only defined for core kinds, as in Kubernetes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Core Kubernetes kinds (`v1` Namespace, Secret, ...) and apiextensions' own kind.
    Core,
    /// lariat's own kinds (Cluster API, Fleet, providers): served like custom resources.
    Lariat,
    /// A user's CustomResourceDefinition.
    Custom,
}

#[derive(Clone, Debug)]
pub struct ResourceType {
    pub group: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub versions: Vec<VersionInfo>,
    pub origin: Origin,
    /// Field paths (without the leading dot) usable in `fieldSelector`, besides
    /// `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// Field labels that read another path, as Kubernetes' field label conversions
    /// (core Events' `source` is `source.component`).
    pub field_label_paths: Vec<(String, String)>,
    /// Set when this kind's objects are another kind's, converted (events.k8s.io/v1 Event).
    pub stored_as: Option<StoredAs>,
}

impl ResourceType {
    pub fn version(&self, name: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub fn storage_version(&self) -> &VersionInfo {
        self.versions
            .iter()
            .find(|v| v.storage)
            .unwrap_or(&self.versions[0])
    }

    /// Whether this is the core Secret kind: encrypted at rest, never kept decrypted longer
    /// than a request needs.
    pub fn is_secret(&self) -> bool {
        self.origin == Origin::Core && self.plural == "secrets"
    }

    /// Whether this is apiextensions' CustomResourceDefinition, whose objects define kinds.
    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// `deployments.apps`, or `configmaps` for the core group.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Store key prefix of all objects of this type (all namespaces).
    pub fn key_prefix(&self) -> String {
        let (group, plural) = match &self.stored_as {
            Some(stored) => (stored.group, stored.plural),
            None => (self.group.as_str(), self.plural.as_str()),
        };
        let group = if group.is_empty() { "core" } else { group };
        format!("/registry/{group}/{plural}/")
    }

    /// Store key prefix of one namespace (or of all, for `None`).
    pub fn list_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }

    /// Builds a resource type from a CustomResourceDefinition object, or lists what is wrong
    /// with it (the causes of a 422 on CRD create).
    pub fn from_crd(crd: &Value, origin: Origin) -> Result<ResourceType, Vec<Cause>> {
        let mut causes = Vec::new();
        let spec = &crd["spec"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let group = text(&spec["group"]);
        let names = &spec["names"];
        let plural = text(&names["plural"]);
        let kind = text(&names["kind"]);
        if origin == Origin::Custom {
            if group.is_empty() {
                causes.push(Cause::required("spec.group"));
            } else if !group.contains('.') || !crate::objects::is_dns1123_subdomain(&group) {
                causes.push(Cause::invalid(
                    "spec.group",
                    &spec["group"],
                    "should be a domain with at least one dot",
                ));
            }
            let expected = format!("{plural}.{group}");
            if crd["metadata"]["name"].as_str() != Some(expected.as_str()) {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &crd["metadata"]["name"],
                    format!("must be spec.names.plural+\".\"+spec.group ({expected})"),
                ));
            }
        }
        if plural.is_empty() {
            causes.push(Cause::required("spec.names.plural"));
        } else if !crate::objects::is_dns1035_label(&plural) {
            causes.push(Cause::invalid(
                "spec.names.plural",
                &names["plural"],
                "a lowercase RFC 1035 label is required",
            ));
        }
        if kind.is_empty() {
            causes.push(Cause::required("spec.names.kind"));
        }
        let scope = text(&spec["scope"]);
        if scope != "Namespaced" && scope != "Cluster" {
            causes.push(Cause::not_supported(
                "spec.scope",
                &spec["scope"],
                &["Cluster".into(), "Namespaced".into()],
            ));
        }
        let mut versions = Vec::new();
        match spec["versions"].as_array() {
            Some(list) if !list.is_empty() => {
                for (i, v) in list.iter().enumerate() {
                    versions.extend(served_version(i, v, &mut causes));
                }
                if list
                    .iter()
                    .filter(|v| v["storage"].as_bool() == Some(true))
                    .count()
                    != 1
                {
                    causes.push(Cause::invalid(
                        "spec.versions",
                        &Value::Null,
                        "must have exactly one version marked as storage version",
                    ));
                }
            }
            _ => causes.push(Cause::required("spec.versions")),
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        let singular = match text(&names["singular"]) {
            s if s.is_empty() => kind.to_lowercase(),
            s => s,
        };
        let list_kind = match text(&names["listKind"]) {
            s if s.is_empty() => format!("{kind}List"),
            s => s,
        };
        let selectable_fields = spec["selectableFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["jsonPath"].as_str())
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default();
        Ok(ResourceType {
            group,
            kind,
            list_kind,
            plural,
            singular,
            namespaced: scope == "Namespaced",
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            versions,
            origin,
            selectable_fields,
            field_label_paths: vec![],
            stored_as: None,
        })
    }
}

/// One version of a CRD as served, or `None` when it is not served; what is wrong with it
/// goes into `causes`.
fn served_version(i: usize, v: &Value, causes: &mut Vec<Cause>) -> Option<VersionInfo> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let name = text(&v["name"]);
    if name.is_empty() {
        causes.push(Cause::required(format!("spec.versions[{i}].name")));
    }
    if v["served"].as_bool() == Some(false) {
        return None;
    }
    let schema = v["schema"]["openAPIV3Schema"].clone();
    if !schema.is_null() {
        crate::schema::check_structural(
            &schema,
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
            causes,
        );
    }
    let printer_columns = v["additionalPrinterColumns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: text(&c["name"]),
                    type_: text(&c["type"]),
                    format: text(&c["format"]),
                    description: text(&c["description"]),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    json_path: text(&c["jsonPath"]),
                    printer: None,
                })
                .collect()
        })
        .unwrap_or_default();
    let scale = v["subresources"]["scale"]
        .as_object()
        .map(|s| ScaleSubresource {
            spec_replicas_path: s.get("specReplicasPath").map(&text).unwrap_or_default(),
            status_replicas_path: s.get("statusReplicasPath").map(&text).unwrap_or_default(),
            label_selector_path: s.get("labelSelectorPath").map(&text),
        });
    Some(VersionInfo {
        name,
        storage: v["storage"].as_bool().unwrap_or(false),
        schema: if schema.is_null() { None } else { Some(schema) },
        printer_columns,
        status_subresource: v["subresources"]["status"].is_object(),
        scale,
        deprecated: v["deprecated"].as_bool().unwrap_or(false),
    })
}

/// All served resource types, keyed by (group, plural). Cheap to clone; readers take a
/// snapshot so a CRD change never tears a request.
/// Resource types by (group, plural).
type TypeMap = BTreeMap<(String, String), Arc<ResourceType>>;

#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<RwLock<TypeMap>>,
}

impl Registry {
    pub fn insert(&self, rt: ResourceType) {
        let key = (rt.group.clone(), rt.plural.clone());
        self.inner
            .write()
            .expect("registry lock")
            .insert(key, Arc::new(rt));
    }

    /// A new registry serving the same kinds (sharing their definitions), that then changes
    /// independently: how embedded instances get the built-in kinds without rebuilding schemas.
    pub fn fork(&self) -> Registry {
        let map = self.inner.read().expect("registry lock").clone();
        Registry {
            inner: Arc::new(RwLock::new(map)),
        }
    }

    pub fn remove(&self, group: &str, plural: &str) {
        self.inner
            .write()
            .expect("registry lock")
            .remove(&(group.to_string(), plural.to_string()));
    }

    pub fn get(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.inner
            .read()
            .expect("registry lock")
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.inner
            .read()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }

    /// Finds a served resource for a request path, or a 404 that names what is missing.
    pub fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> ApiResult<Arc<ResourceType>> {
        match self.get(group, plural) {
            Some(rt) if rt.version(version).is_some() => Ok(rt),
            _ => Err(ApiError::NotFound {
                message: format!(
                    "the server could not find the requested resource ({} {plural}{})",
                    if group.is_empty() {
                        version.to_string()
                    } else {
                        format!("{group}/{version}")
                    },
                    ""
                ),
                target: None,
            }),
        }
    }

    /// The resource type that serves `apiVersion` + `kind`, as objects name their owners.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.all()
            .into_iter()
            .find(|rt| rt.group == group && rt.kind == kind && rt.version(version).is_some())
    }
}
