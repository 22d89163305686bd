//! Checks lariat's generated Cluster API CRDs (core, kubeadm control plane, kubeadm bootstrap)
//! against the upstream `v1beta1` CRDs, and Cluster API AWS's against its `v1beta2` ones, kind
//! by kind.

mod support;

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use lariat_api::aws::{
    AWSCluster, AWSClusterRoleIdentity, AWSClusterStaticIdentity, AWSMachine, AWSMachinePool,
    AWSMachineTemplate, AWSManagedCluster, AWSManagedControlPlane, AWSManagedMachinePool,
    EKSConfig, EKSConfigTemplate, NodeadmConfig, NodeadmConfigTemplate,
};
use lariat_api::bootstrap::{KubeadmConfig, KubeadmConfigTemplate};
use lariat_api::capi::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};
use lariat_api::controlplane::{KubeadmControlPlane, KubeadmControlPlaneTemplate};
use serde_json::{Value, json};

/// Where an upstream CRD comes from.
#[derive(Clone, Copy)]
enum Upstream {
    ClusterApi,
    ClusterApiAws,
}

impl Upstream {
    fn dir(self) -> std::path::PathBuf {
        match self {
            Upstream::ClusterApi => support::reference_dir(),
            Upstream::ClusterApiAws => support::reference_dir().join("../cluster-api-provider-aws"),
        }
    }

    /// The version lariat serves, and stores, of the project's kinds.
    fn version(self) -> &'static str {
        match self {
            Upstream::ClusterApi => "v1beta1",
            Upstream::ClusterApiAws => "v1beta2",
        }
    }
}

/// One kind to compare: the upstream file and lariat's generated CRD.
struct Kind {
    upstream: Upstream,
    upstream_file: &'static str,
    crd: fn() -> CustomResourceDefinition,
}

const KINDS: &[Kind] = &[
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_clusters.yaml",
        crd: Cluster::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_machinedeployments.yaml",
        crd: MachineDeployment::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_machinesets.yaml",
        crd: MachineSet::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_machines.yaml",
        crd: Machine::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_machinehealthchecks.yaml",
        crd: MachineHealthCheck::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "cluster.x-k8s.io_machinepools.yaml",
        crd: MachinePool::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
        crd: KubeadmControlPlane::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
        crd: KubeadmConfig::crd,
    },
    Kind {
        upstream: Upstream::ClusterApi,
        upstream_file: "bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
        crd: KubeadmConfigTemplate::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsclusterstaticidentities.yaml",
        crd: AWSClusterStaticIdentity::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsclusterroleidentities.yaml",
        crd: AWSClusterRoleIdentity::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "controlplane.cluster.x-k8s.io_awsmanagedcontrolplanes.yaml",
        crd: AWSManagedControlPlane::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsmanagedclusters.yaml",
        crd: AWSManagedCluster::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsmanagedmachinepools.yaml",
        crd: AWSManagedMachinePool::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsclusters.yaml",
        crd: AWSCluster::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsmachines.yaml",
        crd: AWSMachine::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml",
        crd: AWSMachineTemplate::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "infrastructure.cluster.x-k8s.io_awsmachinepools.yaml",
        crd: AWSMachinePool::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "bootstrap.cluster.x-k8s.io_eksconfigs.yaml",
        crd: EKSConfig::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "bootstrap.cluster.x-k8s.io_eksconfigtemplates.yaml",
        crd: EKSConfigTemplate::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "bootstrap.cluster.x-k8s.io_nodeadmconfigs.yaml",
        crd: NodeadmConfig::crd,
    },
    Kind {
        upstream: Upstream::ClusterApiAws,
        upstream_file: "bootstrap.cluster.x-k8s.io_nodeadmconfigtemplates.yaml",
        crd: NodeadmConfigTemplate::crd,
    },
];

/// Upstream properties lariat deliberately leaves out of its schemas, by path from the root.
const OMITTED: &[&str] = &[
    // kube-derive leaves these three out of every generated schema: the API server checks
    // apiVersion, kind and metadata itself for every kind, so a schema for them adds nothing.
    ".apiVersion",
    ".kind",
    ".metadata",
];

/// Validation and list/map keywords; each must be absent on both sides or equal.
const VALIDATIONS: &[&str] = &[
    "default",
    "minProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// Keywords that decide what a value may be; they must be the same on both sides.
const SHAPE: &[&str] = &[
    "type",
    "format",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
];

fn upstream(kind: &Kind) -> Value {
    support::read_yaml(&kind.upstream.dir().join(kind.upstream_file))
}

fn schema<'a>(crd: &'a Value, kind: &Kind) -> &'a Value {
    &support::version(crd, kind.upstream.version())["schema"]["openAPIV3Schema"]
}

/// Enum values as a set; kube-derive adds `null` to the enum of an optional field (it is
/// nullable), which says nothing about the allowed strings, so it is left out.
fn enum_values(node: &Value) -> Option<BTreeSet<String>> {
    node.get("enum").map(|values| {
        values
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| !v.is_null())
            .map(Value::to_string)
            .collect()
    })
}

fn string_set(node: &Value, key: &str) -> BTreeSet<String> {
    node[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// JSON equality, except that numbers compare by value: the CRD type stores `minimum` as a
/// float, so lariat's `0.0` is upstream's `0`.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Walks lariat's schema (`ours`) and upstream's (`theirs`) side by side from `path`, and
/// records every difference that matters for what the API server accepts and keeps.
fn compare(path: &str, ours: &Value, theirs: &Value, problems: &mut Vec<String>) {
    for key in SHAPE {
        if ours.get(key) != theirs.get(key) {
            problems.push(format!(
                "{path}: {key} is {} upstream but {} in lariat",
                theirs.get(key).unwrap_or(&Value::Null),
                ours.get(key).unwrap_or(&Value::Null)
            ));
        }
    }
    let (our_enum, their_enum) = (enum_values(ours), enum_values(theirs));
    if our_enum != their_enum {
        problems.push(format!(
            "{path}: enum is {their_enum:?} upstream but {our_enum:?} in lariat"
        ));
    }
    let (our_required, their_required) =
        (string_set(ours, "required"), string_set(theirs, "required"));
    if our_required != their_required {
        problems.push(format!(
            "{path}: required is {their_required:?} upstream but {our_required:?} in lariat"
        ));
    }
    for key in VALIDATIONS {
        let agree = match (ours.get(key), theirs.get(key)) {
            (Some(o), Some(t)) => same(o, t),
            (o, t) => o == t,
        };
        if !agree {
            problems.push(format!(
                "{path}: {key} is {} upstream but {} in lariat",
                theirs.get(key).unwrap_or(&Value::Null),
                ours.get(key).unwrap_or(&Value::Null)
            ));
        }
    }

    // CEL rules compare by their expressions; the messages are lariat's own words.
    let rules = |node: &Value| -> Vec<Value> {
        node["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["rule"].clone())
            .collect()
    };
    if rules(ours) != rules(theirs) {
        problems.push(format!(
            "{path}: CEL rules are {:?} upstream but {:?} in lariat",
            rules(theirs),
            rules(ours)
        ));
    }

    let empty = serde_json::Map::new();
    let our_props = ours["properties"].as_object().unwrap_or(&empty);
    let their_props = theirs["properties"].as_object().unwrap_or(&empty);
    for (name, our_prop) in our_props {
        let child = format!("{path}.{name}");
        match their_props.get(name) {
            Some(their_prop) => compare(&child, our_prop, their_prop, problems),
            None => problems.push(format!("{child}: lariat defines it, upstream does not")),
        }
    }
    for name in their_props.keys() {
        let child = format!("{path}.{name}");
        if !our_props.contains_key(name) && !OMITTED.contains(&child.as_str()) {
            problems.push(format!("{child}: upstream defines it, lariat does not"));
        }
    }

    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        match (ours.get(key), theirs.get(key)) {
            (Some(o), Some(t)) if o.is_object() && t.is_object() => {
                compare(&format!("{path}{suffix}"), o, t, problems);
            }
            (o, t) if o != t => problems.push(format!(
                "{path}: {key} is {} upstream but {} in lariat",
                t.unwrap_or(&Value::Null),
                o.unwrap_or(&Value::Null)
            )),
            _ => {}
        }
    }
}

/// Compares a whole generated schema with upstream's: the root by hand, `spec` and `status`
/// recursively.
fn compare_roots(ours: &Value, theirs: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let our_top = ours["properties"]
        .as_object()
        .expect("lariat root has properties");
    let their_top = theirs["properties"]
        .as_object()
        .expect("upstream root has properties");
    for name in our_top.keys() {
        if !their_top.contains_key(name) {
            problems.push(format!(".{name}: lariat defines it, upstream does not"));
        }
    }
    for name in their_top.keys() {
        let path = format!(".{name}");
        if !our_top.contains_key(name) && !OMITTED.contains(&path.as_str()) {
            problems.push(format!("{path}: upstream defines it, lariat does not"));
        }
    }
    // kube-derive makes `spec` required at the root (its root type always has one); upstream
    // requires nothing there. Every object Cluster API or clusterctl writes has a spec.
    let our_required = string_set(ours, "required");
    if !our_required.is_subset(&BTreeSet::from(["spec".to_owned()])) {
        problems.push(format!(".: lariat requires {our_required:?} at the root"));
    }
    for name in ["spec", "status"] {
        if let (Some(o), Some(t)) = (our_top.get(name), their_top.get(name)) {
            compare(&format!(".{name}"), o, t, &mut problems);
        }
    }
    problems
}

#[test]
fn schemas_match_upstream() {
    let mut report = Vec::new();
    for kind in KINDS {
        let theirs = upstream(kind);
        let ours = support::to_json(&(kind.crd)());
        for problem in compare_roots(schema(&ours, kind), schema(&theirs, kind)) {
            report.push(format!("{}: {problem}", kind.upstream_file));
        }
    }
    assert!(
        report.is_empty(),
        "{} differences:\n{}",
        report.len(),
        report.join("\n")
    );
}

#[test]
fn printer_columns_match_upstream() {
    let columns = |crd: &Value, kind: &Kind| -> Vec<Value> {
        support::version(crd, kind.upstream.version())["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["name"], c["jsonPath"], c["type"], c["priority"]]))
            .collect()
    };
    for kind in KINDS {
        let ours = support::to_json(&(kind.crd)());
        assert_eq!(
            columns(&ours, kind),
            columns(&upstream(kind), kind),
            "{}: printer columns [name, jsonPath, type, priority]",
            kind.upstream_file
        );
    }
}

#[test]
fn names_scope_and_subresources_match_upstream() {
    for kind in KINDS {
        let (ours, theirs) = (support::to_json(&(kind.crd)()), upstream(kind));
        let file = kind.upstream_file;
        assert_eq!(
            ours["metadata"]["name"], theirs["metadata"]["name"],
            "{file}: name"
        );
        assert_eq!(
            ours["spec"]["group"], theirs["spec"]["group"],
            "{file}: group"
        );
        assert_eq!(
            ours["spec"]["scope"], theirs["spec"]["scope"],
            "{file}: scope"
        );
        let (our_names, their_names) = (&ours["spec"]["names"], &theirs["spec"]["names"]);
        for key in ["kind", "plural", "singular", "shortNames", "categories"] {
            assert_eq!(our_names[key], their_names[key], "{file}: names.{key}");
        }
        // The API server defaults listKind to `<kind>List`, which is what upstream spells out.
        let list_kind = our_names
            .get("listKind")
            .cloned()
            .unwrap_or_else(|| json!(format!("{}List", our_names["kind"].as_str().unwrap())));
        assert_eq!(list_kind, their_names["listKind"], "{file}: names.listKind");
        // A kind without subresources has either no `subresources` or an empty one; upstream
        // writes `{}` for KubeadmConfigTemplate, kube-derive leaves the key out.
        let subresources = |crd: &Value| -> Value {
            match &support::version(crd, kind.upstream.version())["subresources"] {
                Value::Object(map) if map.is_empty() => Value::Null,
                other => other.clone(),
            }
        };
        assert_eq!(
            subresources(&ours),
            subresources(&theirs),
            "{file}: subresources"
        );
        // lariat serves one version of each kind, so it must be the stored version.
        assert_eq!(
            support::version(&ours, kind.upstream.version())["storage"],
            true,
            "{file}: storage"
        );
        assert_eq!(
            support::version(&ours, kind.upstream.version())["served"],
            true,
            "{file}: served"
        );
    }
}

#[test]
fn builtin_crds_are_the_served_kinds_in_order() {
    let names: Vec<_> = lariat_api::builtin_crds()
        .into_iter()
        .map(|crd| crd.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "clusters.cluster.x-k8s.io",
            "machinedeployments.cluster.x-k8s.io",
            "machinesets.cluster.x-k8s.io",
            "machines.cluster.x-k8s.io",
            "machinehealthchecks.cluster.x-k8s.io",
            "machinepools.cluster.x-k8s.io",
            "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
            "kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
            "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
            "inmemoryclusters.infrastructure.cluster.x-k8s.io",
            "inmemorymachines.infrastructure.cluster.x-k8s.io",
            "inmemorymachinetemplates.infrastructure.cluster.x-k8s.io",
            "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
            "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
            "awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
            "awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io",
            "awsmanagedclusters.infrastructure.cluster.x-k8s.io",
            "awsmanagedmachinepools.infrastructure.cluster.x-k8s.io",
            "awsclusters.infrastructure.cluster.x-k8s.io",
            "awsmachines.infrastructure.cluster.x-k8s.io",
            "awsmachinetemplates.infrastructure.cluster.x-k8s.io",
            "awsmachinepools.infrastructure.cluster.x-k8s.io",
            "eksconfigs.bootstrap.cluster.x-k8s.io",
            "eksconfigtemplates.bootstrap.cluster.x-k8s.io",
            "nodeadmconfigs.bootstrap.cluster.x-k8s.io",
            "nodeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
            "providers.clusterctl.cluster.x-k8s.io",
            "clusterregistrationtokens.management.lariat.dev",
            "clusterconnections.management.lariat.dev",
            "tokens.management.lariat.dev",
            "clusteraccesses.management.lariat.dev",
            "gitrepos.fleet.cattle.io",
            "bundles.fleet.cattle.io",
            "bundledeployments.fleet.cattle.io",
            "clusters.fleet.cattle.io",
            "clustergroups.fleet.cattle.io",
            "contents.fleet.cattle.io",
            "globalroles.management.cattle.io",
            "globalrolebindings.management.cattle.io",
            "roletemplates.management.cattle.io",
            "clusterroletemplatebindings.management.cattle.io",
            "projects.management.cattle.io",
            "projectroletemplatebindings.management.cattle.io",
        ]
    );
}

/// Provider CRDs carry the contract label core reads to pick the version of a referenced kind,
/// and the provider label `lariat init` checks ownership by; core's own CRDs carry neither.
#[test]
fn provider_crds_carry_contract_labels() {
    for crd in lariat_api::builtin_crds() {
        let crd = support::to_json(&crd);
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        let cluster_api_aws = kind.starts_with("AWS")
            || kind.starts_with("EKSConfig")
            || kind.starts_with("NodeadmConfig");
        let expect = match crd["spec"]["group"].as_str().unwrap() {
            // Cluster API AWS's kinds, whatever their group, are one provider's.
            _ if cluster_api_aws => json!({
                "cluster.x-k8s.io/provider": "infrastructure-aws",
                "cluster.x-k8s.io/v1beta1": "v1beta2",
            }),
            "cluster.x-k8s.io"
            | "clusterctl.cluster.x-k8s.io"
            | "management.lariat.dev"
            | "management.cattle.io"
            | "fleet.cattle.io" => Value::Null,
            "controlplane.cluster.x-k8s.io" => json!({
                "cluster.x-k8s.io/provider": "control-plane-kubeadm",
                "cluster.x-k8s.io/v1beta1": "v1beta1",
            }),
            "bootstrap.cluster.x-k8s.io" => json!({
                "cluster.x-k8s.io/provider": "bootstrap-kubeadm",
                "cluster.x-k8s.io/v1beta1": "v1beta1",
            }),
            "infrastructure.cluster.x-k8s.io" => json!({
                "cluster.x-k8s.io/provider": "infrastructure-inmemory",
                "cluster.x-k8s.io/v1beta1": "v1alpha1",
            }),
            other => panic!("no expectation for group {other}"),
        };
        assert_eq!(
            crd["metadata"]["labels"], expect,
            "{}",
            crd["metadata"]["name"]
        );
    }
}

#[test]
fn omissions_are_still_upstream() {
    // An entry for a property upstream no longer has would hide nothing and mislead readers.
    for path in OMITTED {
        let name = path.trim_start_matches('.');
        for kind in KINDS {
            let theirs = upstream(kind);
            assert!(
                schema(&theirs, kind)["properties"].get(name).is_some(),
                "{}: omitted {path} is not upstream",
                kind.upstream_file
            );
        }
    }
}

/// Every kind lariat serves, including those without an upstream CRD to compare with, must
/// have a structural schema, or the API server could neither prune nor default its objects.
#[test]
fn generated_schemas_are_structural() {
    for crd in lariat_api::builtin_crds() {
        let ours = support::to_json(&crd);
        let mut problems = Vec::new();
        support::structural_problems("", support::only_schema(&ours), &mut problems);
        assert!(
            problems.is_empty(),
            "{}: {problems:#?}",
            ours["metadata"]["name"]
        );
    }
}

/// The reference holds no KubeadmControlPlaneTemplate CRD, so its template spec is compared
/// with upstream's KubeadmControlPlane spec instead: it must differ exactly by the fields the
/// topology controller fills in per Cluster, and invent nothing.
#[test]
fn kcp_template_spec_is_the_kcp_spec_without_per_cluster_fields() {
    let kcp = KINDS
        .iter()
        .find(|k| k.upstream_file.contains("kubeadmcontrolplanes"))
        .unwrap();
    let theirs = upstream(kcp);
    let ours = support::to_json(&KubeadmControlPlaneTemplate::crd());
    let template = &support::only_schema(&ours)["properties"]["spec"]["properties"]["template"];
    assert_eq!(template["required"], json!(["spec"]));
    let mut problems = Vec::new();
    compare(
        ".spec",
        &template["properties"]["spec"],
        &schema(&theirs, kcp)["properties"]["spec"],
        &mut problems,
    );
    assert_eq!(
        problems,
        [
            r#".spec: required is {"kubeadmConfigSpec", "machineTemplate", "version"} upstream but {"kubeadmConfigSpec"} in lariat"#,
            r#".spec.machineTemplate: required is {"infrastructureRef"} upstream but {} in lariat"#,
            ".spec.machineTemplate.infrastructureRef: upstream defines it, lariat does not",
            ".spec.machineTemplate.readinessGates: upstream defines it, lariat does not",
            ".spec.replicas: upstream defines it, lariat does not",
            ".spec.version: upstream defines it, lariat does not",
        ]
    );
}

/// Applies `mutate` to lariat's Machine schema and returns what the comparison then reports.
fn mutated_machine(mutate: fn(&mut Value)) -> Vec<String> {
    let kind = KINDS
        .iter()
        .find(|k| k.upstream_file.contains("machines."))
        .unwrap();
    let theirs = upstream(kind);
    let mut ours = support::to_json(&(kind.crd)());
    let versions = ours["spec"]["versions"].as_array_mut().unwrap();
    let root = &mut versions[0]["schema"]["openAPIV3Schema"];
    mutate(root);
    compare_roots(root, schema(&theirs, kind))
}

fn check(mutate: fn(&mut Value), expect: &str) {
    let problems = mutated_machine(mutate);
    assert!(
        problems.iter().any(|p| p.contains(expect)),
        "expected a problem containing {expect:?}, got {problems:#?}"
    );
}

#[test]
fn the_walker_notices_differences() {
    assert_eq!(
        mutated_machine(|_| {}),
        Vec::<String>::new(),
        "unchanged schema"
    );
    check(
        |s| s["properties"]["spec"]["properties"]["clusterName"]["type"] = json!("integer"),
        ".spec.clusterName: type is \"string\" upstream but \"integer\" in lariat",
    );
    check(
        |s| {
            s["properties"]["status"]["properties"]["observedGeneration"]["format"] = json!("int32")
        },
        ".status.observedGeneration: format is \"int64\" upstream",
    );
    check(
        |s| s["properties"]["spec"]["properties"]["invented"] = json!({"type": "string"}),
        ".spec.invented: lariat defines it, upstream does not",
    );
    check(
        |s| {
            s["properties"]["status"]["properties"]["nodeRef"]["properties"]
                .as_object_mut()
                .unwrap()
                .remove("uid");
        },
        ".status.nodeRef.uid: upstream defines it, lariat does not",
    );
    check(
        |s| s["properties"]["status"]["properties"]["phase"]["enum"] = json!(["Running", "Gone"]),
        ".status.phase: enum",
    );
    check(
        |s| s["properties"]["spec"]["required"] = json!(["clusterName"]),
        ".spec: required",
    );
    check(
        |s| {
            s["properties"]["status"]["properties"]["addresses"]["items"]["properties"]["address"]
                ["maxLength"] = json!(5)
        },
        ".status.addresses[].address: maxLength is 256 upstream but 5 in lariat",
    );
    check(
        |s| {
            let name = &mut s["properties"]["spec"]["properties"]["clusterName"];
            name.as_object_mut().unwrap().remove("maxLength");
        },
        ".spec.clusterName: maxLength is 63 upstream but null in lariat",
    );
    check(
        |s| s["properties"]["spec"]["properties"]["version"]["default"] = json!("v1.30.0"),
        ".spec.version: default is null upstream",
    );
    check(
        |s| {
            let timeout = &mut s["properties"]["spec"]["properties"]["nodeDrainTimeout"];
            timeout.as_object_mut().unwrap().remove("type");
            timeout["x-kubernetes-int-or-string"] = json!(true);
        },
        ".spec.nodeDrainTimeout: x-kubernetes-int-or-string",
    );
}
