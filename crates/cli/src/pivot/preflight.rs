//! Before anything is written: what the move would break. Objects left outside the graph that
//! point into it (or that it points to), which the user includes or leaves by name; and what
//! no flag can fix (a target lacking a kind or a provider, objects already there), or only
//! `--force` overrides (a cluster mid-provisioning or mid-rollout).

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject};

use lariat_api::capi::labels::PROVIDER_NAME;
use lariat_api::clusterctl;
use lariat_controllers::conditions::json as conditions;

use super::copy::MOVED_FROM;
use super::graph::{Graph, Index, Inventory, Object, Selector, Served, Target, references};

/// An object outside the graph tied to one inside it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The object that would be left behind.
    pub left: String,
    /// `KIND/NAME` for `--include` or `--leave`.
    pub selector: String,
    /// In another namespace: it can only be left.
    pub elsewhere: bool,
    pub why: String,
}

/// References across the graph's edge, both ways, except from or to what `leave` names.
pub fn scan(
    inventory: &Inventory,
    graph: &Graph,
    namespace: &str,
    leave: &[Selector],
) -> Vec<Finding> {
    let members = graph.uids();
    let index = Index::new(&inventory.objects);
    let selector = |o: &Object| format!("{}/{}", o.kind, o.name());
    let mut findings = BTreeSet::new();
    for object in &inventory.objects {
        let inside = members.contains(object.uid());
        for reference in references(object) {
            for target in index.resolve(&reference.target) {
                let other = &inventory.objects[target];
                if other.uid() == object.uid() || members.contains(other.uid()) == inside {
                    continue;
                }
                let (left, member) = if inside {
                    (other, object)
                } else {
                    (object, other)
                };
                if leave.iter().any(|s| s.matches(left)) {
                    continue;
                }
                let how = match &reference.target {
                    Target::Uid(_) => "is owned by",
                    Target::ClusterLabel { .. } => "is labelled with the cluster of",
                    _ => "references",
                };
                let why = if inside {
                    format!(
                        "{} {} {} at {}, which would stay in the source",
                        member.display(namespace),
                        how,
                        left.display(namespace),
                        reference.path
                    )
                } else {
                    format!(
                        "{} {} {} at {}",
                        left.display(namespace),
                        how,
                        member.display(namespace),
                        reference.path
                    )
                };
                findings.insert(Finding {
                    elsewhere: left.namespaced && left.namespace() != namespace,
                    left: left.display(namespace),
                    selector: selector(left),
                    why,
                });
            }
        }
    }
    findings.into_iter().collect()
}

/// Cluster API's core provider, which every Cluster needs (its CRDs carry no provider label).
const CORE_PROVIDER: &str = "cluster-api";

/// What the target must have before the move starts.
pub async fn target(
    graph: &Graph,
    source: &Inventory,
    served: &Served,
    client: &kube::Client,
) -> anyhow::Result<Vec<String>> {
    let mut refusals = Vec::new();
    let mut missing = BTreeSet::new();
    for object in &graph.objects {
        if served.resolve(object).is_none() {
            missing.insert(format!("{} {}", object.api_version(), object.kind));
        }
    }
    for kind in &missing {
        refusals.push(format!(
            "the target does not serve {kind}: install the provider or CRD that defines it there first"
        ));
    }
    // The providers the moved objects need (Cluster API's core, and the provider of each
    // moved object's kind, by its CRD's `cluster.x-k8s.io/provider` label, as clusterctl
    // tells them): the target's controllers must take the clusters over. A provider the
    // source runs for other namespaces is not asked for.
    let needed: BTreeSet<&str> = graph
        .objects
        .iter()
        .filter_map(|o| source.crd_label_value(o, PROVIDER_NAME))
        .chain([CORE_PROVIDER])
        .collect();
    let source_providers: BTreeSet<(String, String)> = source
        .objects
        .iter()
        .filter(|o| o.group == clusterctl::GROUP && o.kind == "Provider")
        .filter_map(|o| provider_of(&o.object))
        .filter(|(kind, name)| needed.contains(clusterctl::inventory_name(kind, name).as_str()))
        .collect();
    if !source_providers.is_empty() {
        let mut target_providers = BTreeSet::new();
        if let Some((resource, _)) =
            served
                .discovery()
                .resolve_gvk(&kube::core::GroupVersionKind::gvk(
                    clusterctl::GROUP,
                    "v1alpha3",
                    "Provider",
                ))
        {
            let listed = super::graph::list_all(client, &resource).await?;
            target_providers = listed.iter().filter_map(provider_of).collect();
        }
        for (kind, name) in source_providers.difference(&target_providers) {
            refusals.push(format!(
                "the target runs no {kind} {name:?}, which the moved objects need: enable it there first ({})",
                init_hint(kind, name)
            ));
        }
    }
    // What the target's user may do: create each kind (and write its status), asked as
    // `kubectl auth can-i` asks, so a move does not stop halfway on a 403.
    let mut asked = BTreeSet::new();
    for object in &graph.objects {
        let Some((resource, capabilities)) = served.resolve(object) else {
            continue;
        };
        let status = capabilities
            .subresources
            .iter()
            .any(|(r, _)| r.plural == "status")
            && !object.object.data["status"].is_null();
        let namespace = object.namespaced.then(|| object.namespace().to_string());
        for (verb, subresource) in [("create", None), ("update", status.then_some("status"))] {
            if verb == "update" && subresource.is_none() {
                continue;
            }
            let key = (
                resource.group.clone(),
                resource.plural.clone(),
                namespace.clone(),
                verb,
            );
            if !asked.insert(key) {
                continue;
            }
            if !can(client, verb, &resource, subresource, namespace.as_deref()).await? {
                let what = match subresource {
                    Some(sub) => format!("{}/{sub}", resource.plural),
                    None => resource.plural.clone(),
                };
                refusals.push(format!(
                    "the target's user may not {verb} {what}{}: use a kubeconfig with those rights there",
                    namespace.as_deref().map(|n| format!(" in namespace {n}")).unwrap_or_default()
                ));
            }
        }
    }
    // Objects already there, not from this move.
    let mut present = Vec::new();
    for object in graph.objects.iter().filter(|o| o.namespaced) {
        let Some((resource, _)) = served.resolve(object) else {
            continue;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), object.namespace(), &resource);
        let existing = match api.get_opt(object.name()).await {
            Ok(existing) => existing,
            // Refused above already, with what the user lacks.
            Err(kube::Error::Api(status)) if status.code == 403 => continue,
            Err(e) => return Err(crate::connect::refused(e, "read the target")),
        };
        if let Some(existing) = existing {
            let ours = existing
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MOVED_FROM))
                .is_some_and(|uid| uid == object.uid());
            if !ours {
                present.push(object.display(""));
            }
        }
    }
    if !present.is_empty() {
        let shown = present
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = present.len().saturating_sub(10);
        refusals.push(format!(
            "the target already has {} of these objects ({shown}{}): delete them there, or move into another server",
            present.len(),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    Ok(refusals)
}

/// A SelfSubjectAccessReview: may the client's user do this?
async fn can(
    client: &kube::Client,
    verb: &str,
    resource: &kube::core::ApiResource,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> anyhow::Result<bool> {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {"resourceAttributes": {
            "verb": verb, "group": resource.group, "resource": resource.plural,
            "subresource": subresource, "namespace": namespace,
        }},
    }))?;
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await
        .map_err(|e| crate::connect::refused(e, "ask the target what its user may do"))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The `lariat init` that enables one provider in the target.
fn init_hint(kind: &str, name: &str) -> String {
    let flag = match kind {
        clusterctl::BOOTSTRAP => "--bootstrap",
        clusterctl::CONTROL_PLANE => "--control-plane",
        clusterctl::INFRASTRUCTURE => "--infrastructure",
        _ => return "lariat init --kubeconfig TARGET".to_string(),
    };
    format!("lariat init --kubeconfig TARGET {flag} {name}")
}

fn provider_of(object: &DynamicObject) -> Option<(String, String)> {
    Some((
        object.data["type"].as_str()?.to_string(),
        object.data["providerName"].as_str()?.to_string(),
    ))
}

/// Objects in a state a move would freeze halfway: being deleted (always refused), or, as
/// clusterctl's own check has it, a cluster whose infrastructure or control plane is still
/// being provisioned, or a machine with no node yet (refused unless `--force`). A rollout or
/// a scale that is under way is not refused: its Machines without nodes are, and the
/// target's controllers carry on with the rest.
pub fn settled(graph: &Graph, force: bool) -> Vec<String> {
    let mut refusals = Vec::new();
    for object in &graph.objects {
        let name = object.display("");
        if object.object.metadata.deletion_timestamp.is_some() {
            refusals.push(format!(
                "{name} is being deleted: wait until it is gone, or until its deletion is undone"
            ));
            continue;
        }
        if force || object.group != "cluster.x-k8s.io" {
            continue;
        }
        let data = &object.object.data;
        let status = &data["status"];
        let unsettled = match object.kind.as_str() {
            "Cluster" if imported(object) => None,
            "Cluster" if status["infrastructureReady"] != true => {
                Some("is still provisioning its infrastructure")
            }
            "Cluster"
                if data["spec"]["controlPlaneRef"].is_object()
                    && (status["controlPlaneReady"] != true
                        || !status["conditions"].as_array().is_some_and(|list| {
                            conditions::is_true(list, "ControlPlaneInitialized")
                        })) =>
            {
                Some("is still provisioning its control plane")
            }
            "Machine" if status["nodeRef"].is_null() => Some("is still provisioning its node"),
            _ => None,
        };
        if let Some(state) = unsettled {
            refusals.push(format!(
                "{name} {state}: wait until it is provisioned, or pass --force to move it as it is"
            ));
        }
    }
    refusals
}

fn imported(object: &Object) -> bool {
    object
        .object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(lariat_api::management::IMPORTED_ANNOTATION))
}
