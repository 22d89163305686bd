//! Cluster API's webhooks for the kinds lariat serves: what `cluster.x-k8s.io` and
//! `controlplane.cluster.x-k8s.io` refuse that a schema cannot say (immutable references and
//! cluster names, version formats and minor-version skips, selectors that do not select
//! their template, and an even number of stacked-etcd control-plane members).

use serde_json::{Value, json};

use crate::KubernetesVersion;
use crate::admission::{Cause, Strategies, Strategy, immutable};
use crate::capi::labels;

/// Cluster API's rules for the kinds lariat serves of `cluster.x-k8s.io` and
/// `controlplane.cluster.x-k8s.io`, for the API server's configuration.
pub fn strategies() -> Strategies {
    const GROUP: &str = "cluster.x-k8s.io";
    Strategies::default()
        .with(GROUP, &["clusters"], Clusters)
        .with(
            GROUP,
            &["machinedeployments", "machinesets", "machines"],
            MachineOwners,
        )
        .with(GROUP, &["machinehealthchecks"], MachineHealthChecks)
        .with(GROUP, &["machinepools"], MachinePools)
        .with(
            "controlplane.cluster.x-k8s.io",
            &["kubeadmcontrolplanes"],
            KubeadmControlPlanes,
        )
}

/// `field` must hold a Kubernetes version, if it holds anything, and one of the support
/// matrix's when it is set or changed (an object already running a version lariat no longer
/// supports can still be scaled, upgraded or deleted).
fn version_causes(object: &Value, old: Option<&Value>, path: &[&str], field: &str) -> Vec<Cause> {
    let at = |mut node: &Value| {
        for key in path {
            node = &node[key];
        }
        node.clone()
    };
    let node = at(object);
    let version = match &node {
        Value::Null => return vec![],
        Value::String(v) => KubernetesVersion::parse(v),
        _ => None,
    };
    let Some(version) = version else {
        return vec![Cause::invalid(
            field,
            &node,
            "must be a valid semantic version, such as v1.30.2",
        )];
    };
    match crate::support::kubernetes_refusal(&version) {
        Some(refusal) if old.is_none_or(|old| at(old) != node) => {
            vec![Cause::invalid(field, &node, &refusal)]
        }
        _ => vec![],
    }
}

/// The object at `path`, made (with its parents) where missing or null; `None` where a value
/// of another type is in the way, which the schema then refuses: defaulting never replaces
/// what a client wrote.
fn object_at<'a>(
    object: &'a mut Value,
    path: &[&str],
) -> Option<&'a mut serde_json::Map<String, Value>> {
    let mut node = object;
    for key in path {
        let child = node.as_object_mut()?.entry(*key).or_insert(Value::Null);
        if child.is_null() {
            *child = json!({});
        }
        node = child;
    }
    node.as_object_mut()
}

/// Whether a label selector names neither labels nor expressions (absent, null or empty).
fn selects_nothing(selector: &Value) -> bool {
    ["matchLabels", "matchExpressions"]
        .iter()
        .all(|field| match &selector[field] {
            Value::Object(o) => o.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => true,
        })
}

/// `1.30.2` becomes `v1.30.2`, as Cluster API's defaulting webhooks write a version.
fn default_version_prefix(object: &mut Value, path: &[&str]) {
    let mut node = object;
    for key in path {
        match node.get_mut(*key) {
            Some(child) => node = child,
            None => return,
        }
    }
    if let Some(version) = node.as_str()
        && !version.starts_with('v')
        && KubernetesVersion::parse(&format!("v{version}")).is_some()
    {
        *node = Value::String(format!("v{version}"));
    }
}

/// The object's own `cluster.x-k8s.io/cluster-name` label, from `spec.clusterName`.
fn default_cluster_label(object: &mut Value) {
    if let Some(cluster) = object["spec"]["clusterName"].as_str().map(str::to_owned)
        && let Some(labels) = object_at(object, &["metadata", "labels"])
    {
        labels.insert(labels::CLUSTER_NAME.into(), json!(cluster));
    }
}

struct Clusters;

impl Strategy for Clusters {
    fn default_fields(&self, object: &mut Value, _old: Option<&Value>) {
        default_version_prefix(object, &["spec", "topology", "version"]);
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = version_causes(
            object,
            old,
            &["spec", "topology", "version"],
            "spec.topology.version",
        );
        let namespace = object["metadata"]["namespace"].clone();
        for reference in ["infrastructureRef", "controlPlaneRef"] {
            let field = format!("spec.{reference}");
            let given = &object["spec"][reference]["namespace"];
            if !given.is_null() && given != &namespace {
                causes.push(Cause::invalid(
                    format!("{field}.namespace"),
                    given,
                    "must match metadata.namespace",
                ));
            }
            // Which object a Cluster is made of cannot change under it (its apiVersion may,
            // as a provider moves to a newer contract).
            for key in ["kind", "name"] {
                causes.extend(immutable(
                    object,
                    old,
                    &["spec", reference, key],
                    &format!("{field}.{key}"),
                ));
            }
        }
        causes
    }
}

/// MachineDeployments, MachineSets and Machines: they belong to one cluster for life, run a
/// valid version, and (for the first two) select the Machines their template makes.
struct MachineOwners;

impl Strategy for MachineOwners {
    /// As Cluster API's webhooks: the cluster-name label; a MachineDeployment or MachineSet
    /// created without a selector selects its own name's label, put on its template too; a
    /// MachineDeployment selects (and labels its template with) its cluster. The selector
    /// and template are completed at creation only: a template's labels are part of its
    /// hash, and completing one stored before would roll its machines over.
    fn default_fields(&self, object: &mut Value, old: Option<&Value>) {
        default_cluster_label(object);
        if object["kind"] == "Machine" {
            default_version_prefix(object, &["spec", "version"]);
            return;
        }
        default_version_prefix(object, &["spec", "template", "spec", "version"]);
        if old.is_some() {
            return;
        }
        let own_label = match object["kind"].as_str() {
            Some("MachineDeployment") => labels::MACHINE_DEPLOYMENT_NAME,
            Some("MachineSet") => labels::MACHINE_SET_NAME,
            _ => return,
        };
        let mut wanted = vec![];
        if selects_nothing(&object["spec"]["selector"]) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            wanted.push((own_label, labels::format_value(name)));
        }
        if own_label == labels::MACHINE_DEPLOYMENT_NAME
            && let Some(cluster) = object["spec"]["clusterName"].as_str()
        {
            wanted.push((labels::CLUSTER_NAME, cluster.to_owned()));
        }
        for (key, value) in wanted {
            for path in [
                &["spec", "selector", "matchLabels"][..],
                &["spec", "template", "metadata", "labels"],
            ] {
                if let Some(labels) = object_at(object, path) {
                    labels.insert(key.into(), json!(value));
                }
            }
        }
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = immutable(object, old, &["spec", "clusterName"], "spec.clusterName");
        if object["kind"] == "Machine" {
            causes.extend(version_causes(
                object,
                old,
                &["spec", "version"],
                "spec.version",
            ));
            return causes;
        }
        causes.extend(version_causes(
            object,
            old,
            &["spec", "template", "spec", "version"],
            "spec.template.spec.version",
        ));
        let template_labels = &object["spec"]["template"]["metadata"]["labels"];
        if let Some(wanted) = object["spec"]["selector"]["matchLabels"].as_object() {
            let selects = wanted
                .iter()
                .all(|(key, value)| template_labels.get(key) == Some(value));
            if !selects {
                causes.push(Cause::invalid(
                    "spec.template.metadata.labels",
                    template_labels,
                    "must match spec.selector",
                ));
            }
        }
        causes
    }
}

/// MachinePools belong to one cluster for life, run a valid version, and want no negative
/// number of machines.
struct MachinePools;

impl Strategy for MachinePools {
    fn default_fields(&self, object: &mut Value, _old: Option<&Value>) {
        default_cluster_label(object);
        default_version_prefix(object, &["spec", "template", "spec", "version"]);
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = immutable(object, old, &["spec", "clusterName"], "spec.clusterName");
        causes.extend(version_causes(
            object,
            old,
            &["spec", "template", "spec", "version"],
            "spec.template.spec.version",
        ));
        let replicas = &object["spec"]["replicas"];
        if replicas.as_i64().is_some_and(|r| r < 0) {
            causes.push(Cause::invalid(
                "spec.replicas",
                replicas,
                "must be 0 or more",
            ));
        }
        causes
    }
}

/// MachineHealthChecks watch one cluster's machines for life, as Cluster API's webhook has it:
/// the cluster is fixed at creation (the selector may change), an empty selector (every
/// machine) is refused, and so is one that selects another cluster's machines.
struct MachineHealthChecks;

impl Strategy for MachineHealthChecks {
    fn default_fields(&self, object: &mut Value, _old: Option<&Value>) {
        default_cluster_label(object);
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = immutable(object, old, &["spec", "clusterName"], "spec.clusterName");
        let selector = &object["spec"]["selector"];
        let selected_cluster = &selector["matchLabels"][labels::CLUSTER_NAME];
        if !selected_cluster.is_null() && selected_cluster != &object["spec"]["clusterName"] {
            causes.push(Cause::invalid(
                format!("spec.selector.matchLabels.{}", labels::CLUSTER_NAME),
                selected_cluster,
                "must match spec.clusterName",
            ));
        }
        if selects_nothing(selector) {
            causes.push(Cause::invalid(
                "spec.selector",
                selector,
                "selector must not be empty",
            ));
        }
        causes
    }
}

struct KubeadmControlPlanes;

impl Strategy for KubeadmControlPlanes {
    fn default_fields(&self, object: &mut Value, _old: Option<&Value>) {
        default_version_prefix(object, &["spec", "version"]);
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = version_causes(object, old, &["spec", "version"], "spec.version");
        let replicas = &object["spec"]["replicas"];
        let stacked_etcd =
            object["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["etcd"]["external"]
                .is_null();
        match replicas.as_i64() {
            Some(n) if n <= 0 => causes.push(Cause::forbidden(
                "spec.replicas",
                "replicas cannot be less than or equal to 0",
            )),
            Some(n) if n % 2 == 0 && stacked_etcd => causes.push(Cause::forbidden(
                "spec.replicas",
                "cannot be an even number when etcd is stacked: an even count keeps quorum no better than one fewer",
            )),
            _ => {}
        }
        // An upgrade goes one minor version at a time, as kubeadm requires.
        if let Some(old) = old
            && let (Some(from), Some(to)) = (
                old["spec"]["version"].as_str(),
                object["spec"]["version"].as_str(),
            )
            && let (Some(parsed_from), Some(parsed_to)) =
                (KubernetesVersion::parse(from), KubernetesVersion::parse(to))
            && parsed_to.minor > parsed_from.minor + 1
        {
            causes.push(Cause::forbidden(
                "spec.version",
                &format!(
                    "cannot update Kubernetes version from {from} to {to}: upgrade one minor version at a time"
                ),
            ));
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn control_planes_as_cluster_api_admits_them() {
        let kcp = |replicas: i64, version: &str| json!({"kind": "KubeadmControlPlane", "spec": {"replicas": replicas, "version": version}});
        for (mut object, old, expect) in [
            (kcp(3, "v1.30.2"), None, vec![]),
            (kcp(2, "v1.30.2"), None, vec!["spec.replicas"]),
            (kcp(0, "v1.30.2"), None, vec!["spec.replicas"]),
            (kcp(1, "1.30"), None, vec!["spec.version"]),
            (kcp(3, "v1.31.0"), Some(kcp(3, "v1.30.2")), vec![]),
            (
                kcp(3, "v1.32.0"),
                Some(kcp(3, "v1.30.2")),
                vec!["spec.version"],
            ),
        ] {
            let causes = KubeadmControlPlanes.admit(&mut object, old.as_ref());
            assert_eq!(fields(&causes), expect, "{object}");
        }
        let mut external = json!({"spec": {"replicas": 2, "kubeadmConfigSpec": {"clusterConfiguration": {"etcd": {"external": {"endpoints": ["https://etcd:2379"]}}}}}});
        assert!(KubeadmControlPlanes.admit(&mut external, None).is_empty());
    }

    #[test]
    fn versions_outside_the_support_matrix_are_refused_when_set() {
        let kcp = |version: &str, replicas: i64| json!({"kind": "KubeadmControlPlane", "spec": {"replicas": replicas, "version": version}});
        let mut old_version = kcp("v1.27.3", 3);
        let causes = KubeadmControlPlanes.admit(&mut old_version, None);
        assert_eq!(fields(&causes), vec!["spec.version"]);
        assert!(causes[0].message.contains("v1.28 to v1.33"), "{causes:?}");
        assert_eq!(
            fields(&KubeadmControlPlanes.admit(&mut kcp("v1.34.0", 3), Some(&kcp("v1.33.1", 3)))),
            vec!["spec.version"]
        );
        // An object already running a version since dropped may still be scaled.
        assert!(
            KubeadmControlPlanes
                .admit(&mut kcp("v1.27.3", 5), Some(&kcp("v1.27.3", 3)))
                .is_empty()
        );
        let mut topology =
            json!({"kind": "Cluster", "spec": {"topology": {"class": "c", "version": "v1.27.0"}}});
        assert_eq!(
            fields(&Clusters.admit(&mut topology, None)),
            vec!["spec.topology.version"]
        );
        let mut machine =
            json!({"kind": "Machine", "spec": {"clusterName": "a", "version": "v1.22.0"}});
        assert_eq!(
            fields(&MachineOwners.admit(&mut machine, None)),
            vec!["spec.version"]
        );
    }

    #[test]
    fn machine_owners_keep_their_cluster_and_select_their_template() {
        let md = |cluster: &str, selector: &str| {
            json!({"kind": "MachineDeployment", "spec": {"clusterName": cluster,
                "selector": {"matchLabels": {"pool": selector}},
                "template": {"metadata": {"labels": {"pool": "a"}}, "spec": {"version": "v1.30.2"}}}})
        };
        for (mut object, old, expect) in [
            (md("dev", "a"), None, vec![]),
            (md("dev", "b"), None, vec!["spec.template.metadata.labels"]),
            (
                md("prod", "a"),
                Some(md("dev", "a")),
                vec!["spec.clusterName"],
            ),
        ] {
            let causes = MachineOwners.admit(&mut object, old.as_ref());
            assert_eq!(fields(&causes), expect, "{object}");
        }
    }

    /// Defaulting fills what is missing or null and never replaces what a client wrote, even
    /// of the wrong type (the schema refuses that afterwards).
    #[test]
    fn defaults_fill_gaps_and_leave_wrong_types_to_the_schema() {
        let mut md = json!({"kind": "MachineDeployment", "metadata": {"name": "md"},
            "spec": {"clusterName": "dev", "selector": null, "template": {"spec": {"version": "1.30.2"}}}});
        MachineOwners.default_fields(&mut md, None);
        assert_eq!(
            md["spec"]["selector"]["matchLabels"]["cluster.x-k8s.io/deployment-name"],
            "md"
        );
        assert_eq!(
            md["spec"]["template"]["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "dev"
        );
        assert_eq!(md["spec"]["template"]["spec"]["version"], "v1.30.2");
        for bad in [
            json!({"kind": "MachineDeployment", "metadata": "x", "spec": "y"}),
            json!({"kind": "MachineDeployment", "metadata": {"labels": 3}, "spec": {"clusterName": "dev", "selector": "all", "template": 7}}),
            json!({"kind": "Machine", "spec": {"clusterName": "dev", "version": 1}}),
            json!({"kind": "MachineSet", "spec": {"template": {"metadata": []}}}),
        ] {
            let mut object = bad.clone();
            MachineOwners.default_fields(&mut object, None);
            for pointer in [
                "/metadata",
                "/metadata/labels",
                "/spec",
                "/spec/selector",
                "/spec/template",
                "/spec/template/metadata",
                "/spec/version",
            ] {
                if let Some(before) = bad
                    .pointer(pointer)
                    .filter(|v| !v.is_null() && !v.is_object())
                {
                    assert_eq!(
                        Some(before),
                        object.pointer(pointer),
                        "{pointer} of {object}"
                    );
                }
            }
        }
    }

    #[test]
    fn health_checks_keep_their_cluster() {
        let mhc = |cluster: &str, selector: Value| json!({"kind": "MachineHealthCheck", "spec": {"clusterName": cluster, "selector": selector}});
        let pool = |name: &str| json!({"matchLabels": {"pool": name}});
        for (mut object, old, expect) in [
            (mhc("dev", pool("a")), None, vec![]),
            (mhc("dev", json!({})), None, vec!["spec.selector"]),
            (
                mhc(
                    "dev",
                    json!({"matchExpressions": [{"key": "pool", "operator": "Exists"}]}),
                ),
                None,
                vec![],
            ),
            (
                mhc("prod", pool("a")),
                Some(mhc("dev", pool("a"))),
                vec!["spec.clusterName"],
            ),
            // The selector may change, but not to another cluster's machines.
            (mhc("dev", pool("b")), Some(mhc("dev", pool("a"))), vec![]),
            (
                mhc(
                    "dev",
                    json!({"matchLabels": {"cluster.x-k8s.io/cluster-name": "prod"}}),
                ),
                None,
                vec!["spec.selector.matchLabels.cluster.x-k8s.io/cluster-name"],
            ),
        ] {
            let causes = MachineHealthChecks.admit(&mut object, old.as_ref());
            assert_eq!(fields(&causes), expect, "{object}");
        }
    }

    #[test]
    fn a_cluster_keeps_what_it_is_made_of() {
        let cluster = |kind: &str, namespace: &str| json!({"metadata": {"namespace": "default"}, "spec": {"infrastructureRef": {"kind": kind, "name": "x", "namespace": namespace}}});
        for (mut object, old, expect) in [
            (cluster("InMemoryCluster", "default"), None, vec![]),
            (
                cluster("InMemoryCluster", "other"),
                None,
                vec!["spec.infrastructureRef.namespace"],
            ),
            (
                cluster("AWSCluster", "default"),
                Some(cluster("InMemoryCluster", "default")),
                vec!["spec.infrastructureRef.kind"],
            ),
        ] {
            let causes = Clusters.admit(&mut object, old.as_ref());
            assert_eq!(fields(&causes), expect, "{object}");
        }
    }

    /// Each strategy answers any JSON type in any field of its kind with causes, never a
    /// panic (which the server would answer with 500).
    #[test]
    fn any_field_of_any_type_is_refused_not_a_panic() {
        let reference = json!({"name": "r", "namespace": "a", "kind": "K", "apiVersion": "v1"});
        let template = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"clusterName": "c", "version": "v1.30.2",
            "bootstrap": {"configRef": reference}, "infrastructureRef": reference}});
        let objects = [
            (
                "clusters",
                json!({"metadata": {"namespace": "a"}, "spec": {"topology": {"version": "v1.30.2", "class": "c"},
                "infrastructureRef": reference, "controlPlaneRef": reference}}),
            ),
            (
                "machinedeployments",
                json!({"kind": "MachineDeployment", "metadata": {"namespace": "a"}, "spec": {"clusterName": "c",
                "replicas": 1, "selector": {"matchLabels": {"app": "a"}}, "template": template}}),
            ),
            (
                "machines",
                json!({"kind": "Machine", "spec": template["spec"].clone()}),
            ),
            (
                "machinehealthchecks",
                json!({"spec": {"clusterName": "c", "selector": {"matchLabels": {"app": "a"}},
                "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "5m"}], "maxUnhealthy": "40%"}}),
            ),
            (
                "machinepools",
                json!({"spec": {"clusterName": "c", "replicas": 1, "template": template}}),
            ),
            (
                "kubeadmcontrolplanes",
                json!({"kind": "KubeadmControlPlane", "spec": {"replicas": 3, "version": "v1.30.2",
                "kubeadmConfigSpec": {"clusterConfiguration": {"etcd": {"external": {"endpoints": ["e"]}}}},
                "machineTemplate": {"infrastructureRef": reference}}}),
            ),
        ];
        let strategies = strategies();
        for (plural, object) in objects {
            let group = if plural == "kubeadmcontrolplanes" {
                "controlplane.cluster.x-k8s.io"
            } else {
                "cluster.x-k8s.io"
            };
            let strategy = strategies.get(group, plural).unwrap();
            for mut variant in crate::admission::retyped(&object) {
                let as_old = variant.clone();
                strategy.admit(&mut variant, Some(&object));
                strategy.admit(&mut object.clone(), Some(&as_old));
                strategy.admit(&mut variant, None);
            }
        }
    }
}
