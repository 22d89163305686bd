//! Checks lariat's in-memory infrastructure kinds, which have no upstream CRD: their schemas,
//! names and columns, their behaviour fields, and a whole in-memory cluster manifest as
//! `clusterctl generate cluster` would write it.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use kube::{CustomResourceExt, Resource};
use lariat_api::bootstrap::KubeadmConfigTemplate;
use lariat_api::capi::machine::MachineAddressType;
use lariat_api::capi::{Cluster, MachineDeployment};
use lariat_api::controlplane::KubeadmControlPlane;
use lariat_api::infrastructure::in_memory::provider_id;
use lariat_api::infrastructure::{
    self, InMemoryCluster, InMemoryMachine, InMemoryMachineBehavior, InMemoryMachineTemplate,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[test]
fn schemas_are_structural() {
    for crd in infrastructure::crds() {
        let crd = support::to_json(&crd);
        let mut problems = Vec::new();
        support::structural_problems("", support::only_schema(&crd), &mut problems);
        assert!(
            problems.is_empty(),
            "{}: {problems:#?}",
            crd["metadata"]["name"]
        );
    }
}

#[test]
fn names_versions_and_subresources() {
    let check = |crd: Value, short_name: &str| {
        let name = &crd["metadata"]["name"];
        assert_eq!(
            crd["spec"]["group"], "infrastructure.cluster.x-k8s.io",
            "{name}"
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced", "{name}");
        let names = &crd["spec"]["names"];
        assert_eq!(names["shortNames"], json!([short_name]), "{name}");
        assert_eq!(
            names["categories"],
            json!(["cluster-api", "inmemory"]),
            "{name}"
        );
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1", "{name}");
        assert_eq!(version["subresources"], json!({"status": {}}), "{name}");
    };
    check(support::to_json(&InMemoryCluster::crd()), "imc");
    check(support::to_json(&InMemoryMachine::crd()), "imm");
    check(support::to_json(&InMemoryMachineTemplate::crd()), "immt");
}

/// `kubectl get inmemorymachines` shows which Cluster and Machine each belongs to, whether it
/// booted and its provider ID; the failure domain only with `-o wide`.
#[test]
fn machine_columns_make_kubectl_get_useful() {
    let crd = support::to_json(&InMemoryMachine::crd());
    let columns: Vec<Value> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!([c["name"], c["jsonPath"], c["type"], c["priority"]]))
        .collect();
    assert_eq!(
        columns,
        [
            json!([
                "Cluster",
                ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                "string",
                null
            ]),
            json!([
                "Machine",
                ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
                "string",
                null
            ]),
            json!(["Ready", ".status.ready", "boolean", null]),
            json!(["ProviderID", ".spec.providerID", "string", null]),
            json!(["FailureDomain", ".spec.failureDomain", "string", 10]),
            json!(["Age", ".metadata.creationTimestamp", "date", null]),
        ]
    );
}

/// Every printer column must point at a field the schema defines, or it would always be empty.
#[test]
fn printer_columns_point_at_schema_fields() {
    for crd in infrastructure::crds() {
        let crd = support::to_json(&crd);
        let schema = support::only_schema(&crd);
        for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
        {
            let path = column["jsonPath"].as_str().unwrap();
            if path.starts_with(".metadata.") {
                continue;
            }
            let mut node = schema;
            for part in path.trim_start_matches('.').split('.') {
                node = &node["properties"][part];
            }
            assert!(
                node.is_object(),
                "{}: column {path}",
                crd["metadata"]["name"]
            );
        }
    }
}

fn machine(behavior: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryMachine",
        "metadata": {"name": "dev-md-0-x7k2l", "namespace": "default"},
        "spec": {
            "providerID": "in-memory:///default/dev-md-0-x7k2l",
            "failureDomain": "fd1",
            "behavior": behavior,
        },
    })
}

/// One behaviour to simulate and what the typed accessors make of it.
struct Case {
    behavior: Value,
    provisioning_delay: Duration,
    never_boots: bool,
    node_not_ready_after: Option<Duration>,
}

#[test]
fn each_behavior_field_round_trips_and_validates() {
    let cases = [
        Case {
            behavior: json!({}),
            provisioning_delay: Duration::ZERO,
            never_boots: false,
            node_not_ready_after: None,
        },
        Case {
            behavior: json!({"provisioningDelay": "2s"}),
            provisioning_delay: Duration::from_secs(2),
            never_boots: false,
            node_not_ready_after: None,
        },
        Case {
            behavior: json!({"provisioningDelay": "1.5s"}),
            provisioning_delay: Duration::from_millis(1500),
            never_boots: false,
            node_not_ready_after: None,
        },
        Case {
            behavior: json!({"neverBoots": true}),
            provisioning_delay: Duration::ZERO,
            never_boots: true,
            node_not_ready_after: None,
        },
        Case {
            behavior: json!({"neverBoots": false}),
            provisioning_delay: Duration::ZERO,
            never_boots: false,
            node_not_ready_after: None,
        },
        Case {
            behavior: json!({"nodeNotReadyAfter": "30s"}),
            provisioning_delay: Duration::ZERO,
            never_boots: false,
            node_not_ready_after: Some(Duration::from_secs(30)),
        },
        Case {
            behavior: json!({"provisioningDelay": "500ms", "nodeNotReadyAfter": "90s", "neverBoots": false}),
            provisioning_delay: Duration::from_millis(500),
            never_boots: false,
            node_not_ready_after: Some(Duration::from_secs(90)),
        },
    ];
    for case in cases {
        let manifest = machine(case.behavior.clone());
        let typed: InMemoryMachine = support::round_trip(&manifest);
        let behavior = typed.spec.behavior();
        let input = &case.behavior;
        assert_eq!(
            behavior.provisioning_delay(),
            case.provisioning_delay,
            "{input}"
        );
        assert_eq!(behavior.never_boots(), case.never_boots, "{input}");
        assert_eq!(
            behavior.node_not_ready_after(),
            case.node_not_ready_after,
            "{input}"
        );
        assert_eq!(
            support::schema_problems::<InMemoryMachine>(&manifest),
            Vec::<String>::new(),
            "{input}"
        );
    }
}

#[test]
fn unset_behavior_means_a_healthy_machine_that_boots_at_once() {
    let spec = InMemoryMachine::new("m", Default::default()).spec;
    assert_eq!(spec.behavior(), InMemoryMachineBehavior::default());
    assert_eq!(spec.behavior().provisioning_delay(), Duration::ZERO);
    assert!(!spec.behavior().never_boots());
    assert_eq!(spec.behavior().node_not_ready_after(), None);

    // The API server writes the same defaults into stored objects.
    let crd = support::to_json(&InMemoryMachine::crd());
    let behavior = &support::only_schema(&crd)["properties"]["spec"]["properties"]["behavior"];
    assert_eq!(behavior["properties"]["provisioningDelay"]["default"], "0s");
    assert_eq!(behavior["properties"]["neverBoots"]["default"], false);
    assert_eq!(
        behavior["properties"]["nodeNotReadyAfter"].get("default"),
        None
    );
}

#[test]
fn behavior_values_of_the_wrong_shape_are_refused() {
    let check = |behavior: Value, expect: &str| {
        let manifest = machine(behavior.clone());
        let problems = support::schema_problems::<InMemoryMachine>(&manifest);
        assert!(
            problems.iter().any(|p| p.contains(expect)),
            "expected {expect:?} in {problems:#?}"
        );
        manifest
    };
    for (behavior, expect) in [
        (
            json!({"neverBoots": "yes"}),
            ".spec.behavior.neverBoots: \"yes\" is not of type",
        ),
        (
            json!({"provisioningDelay": 2}),
            ".spec.behavior.provisioningDelay: 2 is not of type",
        ),
    ] {
        let manifest = check(behavior, expect);
        assert!(
            serde_json::from_value::<InMemoryMachine>(manifest).is_err(),
            "{expect}"
        );
    }
    // Typed reads ignore unknown fields like every kube-rs client; the API server prunes them.
    check(
        json!({"nodeNotReady": "30s"}),
        ".spec.behavior.nodeNotReady: unknown field",
    );
}

#[test]
fn durations_are_checked_by_pattern() {
    // The validator the tests share does not evaluate patterns; the API server does. This pins
    // the pattern so a change to it is deliberate.
    let crd = support::to_json(&InMemoryMachine::crd());
    let behavior = &support::only_schema(&crd)["properties"]["spec"]["properties"]["behavior"];
    for field in ["provisioningDelay", "nodeNotReadyAfter"] {
        assert_eq!(
            behavior["properties"][field]["pattern"],
            r"^(0|([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+)$",
            "{field}"
        );
    }
}

#[test]
fn statuses_round_trip_and_validate() {
    let mut manifest = machine(json!({"neverBoots": true}));
    manifest["status"] = json!({
        "ready": false,
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.7"},
            {"type": "Hostname", "address": "dev-md-0-x7k2l"}
        ],
        "failureReason": "CreateError",
        "failureMessage": "the machine never booted",
        "observedGeneration": 3,
        "conditions": [{
            "type": "Provisioned",
            "status": "False",
            "severity": "Error",
            "reason": "NeverBoots",
            "lastTransitionTime": "2024-05-01T10:00:00Z"
        }]
    });
    let typed: InMemoryMachine = support::round_trip(&manifest);
    let status = typed.status.unwrap();
    assert_eq!(
        status.addresses.unwrap()[0].type_,
        MachineAddressType::InternalIp
    );
    let condition = &status.conditions.unwrap()[0];
    assert_eq!(condition.type_, infrastructure::conditions::PROVISIONED);
    assert_eq!(
        condition.reason.as_deref(),
        Some(infrastructure::conditions::NEVER_BOOTS_REASON)
    );
    assert_eq!(
        support::schema_problems::<InMemoryMachine>(&manifest),
        Vec::<String>::new()
    );

    let cluster = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryCluster",
        "metadata": {"name": "dev", "namespace": "default"},
        "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 20001}},
        "status": {
            "ready": true,
            "failureDomains": {"fd1": {"controlPlane": true}, "fd2": {"attributes": {"rack": "b"}}},
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}]
        }
    });
    let typed: InMemoryCluster = support::round_trip(&cluster);
    assert_eq!(typed.status.unwrap().failure_domains.unwrap().len(), 2);
    assert_eq!(
        support::schema_problems::<InMemoryCluster>(&cluster),
        Vec::<String>::new()
    );

    let template = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "InMemoryMachineTemplate",
        "metadata": {"name": "dev-md-0", "namespace": "default"},
        "spec": {"template": {
            "metadata": {"labels": {"pool": "a"}},
            "spec": {"behavior": {"provisioningDelay": "2s", "nodeNotReadyAfter": "600s"}}
        }},
        "status": {"capacity": {"cpu": "2", "memory": "4Gi"}}
    });
    support::round_trip::<InMemoryMachineTemplate>(&template);
    assert_eq!(
        support::schema_problems::<InMemoryMachineTemplate>(&template),
        Vec::<String>::new()
    );
}

#[test]
fn provider_ids_name_namespace_and_machine() {
    assert_eq!(
        provider_id("default", "dev-md-0-x7k2l"),
        "in-memory:///default/dev-md-0-x7k2l"
    );
}

/// The documents of the in-memory cluster manifest, in file order.
fn cluster_manifest() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/in-memory-cluster.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("parsing {path}: {e}")))
        .collect()
}

/// Reads a document as `K` (checking its apiVersion), writes it back, and validates it.
fn check<K>(doc: &Value) -> Vec<String>
where
    K: Resource<DynamicType = ()> + CustomResourceExt + Serialize + DeserializeOwned,
{
    assert_eq!(
        doc["apiVersion"],
        K::api_version(&()).as_ref(),
        "{}",
        doc["kind"]
    );
    support::round_trip::<K>(doc);
    support::schema_problems::<K>(doc)
}

#[test]
fn clusterctl_in_memory_manifest_reads_and_validates() {
    let docs = cluster_manifest();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Cluster",
            "InMemoryCluster",
            "KubeadmControlPlane",
            "InMemoryMachineTemplate",
            "MachineDeployment",
            "InMemoryMachineTemplate",
            "KubeadmConfigTemplate",
        ]
    );
    for doc in &docs {
        let problems = match doc["kind"].as_str().unwrap() {
            "Cluster" => check::<Cluster>(doc),
            "InMemoryCluster" => check::<InMemoryCluster>(doc),
            "KubeadmControlPlane" => check::<KubeadmControlPlane>(doc),
            "InMemoryMachineTemplate" => check::<InMemoryMachineTemplate>(doc),
            "MachineDeployment" => check::<MachineDeployment>(doc),
            "KubeadmConfigTemplate" => check::<KubeadmConfigTemplate>(doc),
            other => panic!("no case for {other}"),
        };
        assert_eq!(problems, Vec::<String>::new(), "{}", doc["kind"]);
    }
}

/// Every reference in the manifest names an object of the manifest, by apiVersion, kind and
/// name, so applying the file gives the controllers a complete cluster.
#[test]
fn clusterctl_in_memory_manifest_references_resolve() {
    let docs = cluster_manifest();
    let present: BTreeSet<(String, String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["apiVersion"].as_str().unwrap().to_owned(),
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let find = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap().clone();
    let cluster: Cluster = serde_json::from_value(find("Cluster")).unwrap();
    let kcp: KubeadmControlPlane = serde_json::from_value(find("KubeadmControlPlane")).unwrap();
    let md: MachineDeployment = serde_json::from_value(find("MachineDeployment")).unwrap();
    let md_spec = md.spec.template.spec.as_ref().unwrap();
    let references = [
        cluster.spec.control_plane_ref.clone().unwrap(),
        cluster.spec.infrastructure_ref.clone().unwrap(),
        kcp.spec.machine_template.infrastructure_ref.clone(),
        md_spec.bootstrap.config_ref.clone().unwrap(),
        md_spec.infrastructure_ref.clone(),
    ];
    for reference in references {
        let key = (
            reference.api_version.clone().unwrap(),
            reference.kind.clone().unwrap(),
            reference.name.clone().unwrap(),
        );
        assert!(present.contains(&key), "{key:?} is not in the manifest");
    }
    assert_eq!(md.spec.cluster_name, cluster.metadata.name.clone().unwrap());
    assert_eq!(md_spec.version.as_deref(), Some(kcp.spec.version.as_str()));
}
