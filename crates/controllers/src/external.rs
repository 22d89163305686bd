//! Provider objects as core sees them: references resolved to objects, contract fields read
//! from them, and templates cloned into new objects (docs/contracts/).

use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use std::sync::Arc;

use lariat_api::capi::{Cluster, Condition, ObjectReference};

use crate::cache::Caches;
use crate::kind::Cached;
use crate::object::{api_for, str_at};
use crate::{Context, Error};

/// A reference as Cluster API objects write it (`apiVersion`, `kind`, `name`).
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl Reference {
    pub fn from_json(value: &Value) -> Option<Reference> {
        Some(Reference {
            api_version: value.get("apiVersion")?.as_str()?.to_string(),
            kind: value.get("kind")?.as_str()?.to_string(),
            name: value.get("name")?.as_str()?.to_string(),
        })
    }

    /// A typed reference of a Cluster API object; `None` unless it names all three.
    pub fn from_object_reference(reference: &ObjectReference) -> Option<Reference> {
        Some(Reference {
            api_version: reference.api_version.clone()?,
            kind: reference.kind.clone()?,
            name: reference.name.clone()?,
        })
    }

    pub fn to_json(&self) -> Value {
        json!({"apiVersion": self.api_version, "kind": self.kind, "name": self.name})
    }

    pub fn to_object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.clone()),
            name: Some(self.name.clone()),
            ..Default::default()
        }
    }

    pub async fn api(&self, client: &Client, namespace: &str) -> Result<Api<DynamicObject>, Error> {
        api_for(client, namespace, &self.api_version, &self.kind).await
    }

    /// Why `object`, which `field` of an `owner_kind` (a Cluster, a Machine; uid `owner_uid`)
    /// names by this reference, is not that owner's to adopt: the message of the condition
    /// that refuses it, when another object of the same kind already owns it.
    pub fn claimed_elsewhere(
        &self,
        object: &DynamicObject,
        field: &str,
        owner_kind: &str,
        owner_uid: &str,
    ) -> Option<String> {
        let other = claimed_by_another(object, owner_kind, owner_uid)?;
        Some(format!(
            "{field}: {} {} belongs to {owner_kind} {other}",
            self.kind, self.name
        ))
    }

    /// The object, from the shared cache of its kind.
    pub async fn get(
        &self,
        caches: &Caches,
        namespace: &str,
    ) -> Result<Option<Arc<DynamicObject>>, Error> {
        caches
            .of_kind(&self.api_version, &self.kind)
            .await?
            .get(namespace, &self.name)
            .await
    }
}

/// Makes `cluster` an owner of the template `reference` names (if it exists), as Cluster
/// API's MachineDeployment and KubeadmControlPlane controllers do: a template outlives no
/// cluster that uses it, and deleting the last such cluster deletes it.
pub async fn adopt_template(
    caches: &Caches,
    namespace: &str,
    reference: Option<Reference>,
    cluster: &Cluster,
) -> Result<(), Error> {
    let Some(reference) = reference else {
        return Ok(());
    };
    let client = caches.client();
    let template = match reference.get(caches, namespace).await {
        Ok(Some(template)) => template,
        Ok(None) | Err(Error::UnknownKind { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let api = reference.api(client, namespace).await?;
    crate::object::ensure_owner(
        &api,
        &template,
        crate::object::owner_reference(cluster, false),
    )
    .await
}

/// The provider object of `kind` (served as `resource`) that a core object's reference names,
/// in `namespace`: how a Cluster's, a Machine's or a MachinePool's change wakes the
/// infrastructure, control plane or bootstrap object it references. `None` when the
/// reference is to another kind or names nothing.
pub fn refers_to(
    reference: &ObjectReference,
    kind: &str,
    resource: kube::core::ApiResource,
    namespace: &str,
) -> Option<kube::runtime::reflector::ObjectRef<DynamicObject>> {
    let name = reference.name.as_deref()?;
    (reference.kind.as_deref() == Some(kind))
        .then(|| kube::runtime::reflector::ObjectRef::new_with(name, resource).within(namespace))
}

/// The other object of `owner_kind` (a Cluster, a Machine) that already claims `object`, if
/// any: a provider object another Cluster or Machine owns is not this one's to adopt, nor
/// to delete with it.
pub fn claimed_by_another(
    object: &DynamicObject,
    owner_kind: &str,
    owner_uid: &str,
) -> Option<String> {
    object
        .owner_references()
        .iter()
        .find(|o| {
            o.kind == owner_kind
                && o.api_version.starts_with("cluster.x-k8s.io/")
                && o.uid != owner_uid
        })
        .map(|o| o.name.clone())
}

/// The contract fields core reads from a provider object.
pub fn ready(object: &DynamicObject) -> bool {
    crate::object::bool_at(&object.data, &["status", "ready"])
}

/// A provider object's `Ready` condition when it is False.
fn ready_false(object: &DynamicObject) -> Option<&serde_json::Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "False")
}

/// A provider object's `Ready` condition when it reports a failure a person should look at
/// (False, severity Warning or Error), though the object may still serve: its reason,
/// message and severity, as Cluster API mirrors them onto the Cluster.
pub fn failing(
    object: &DynamicObject,
) -> Option<(String, String, lariat_api::capi::ConditionSeverity)> {
    use lariat_api::capi::ConditionSeverity;
    let ready = ready_false(object)?;
    let severity = match ready["severity"].as_str()? {
        "Error" => ConditionSeverity::Error,
        "Warning" => ConditionSeverity::Warning,
        _ => return None,
    };
    Some((
        ready["reason"].as_str().unwrap_or_default().to_string(),
        ready["message"].as_str().unwrap_or_default().to_string(),
        severity,
    ))
}

pub fn failure(object: &DynamicObject) -> Option<(String, String)> {
    let reason = str_at(&object.data, &["status", "failureReason"])?;
    let message = str_at(&object.data, &["status", "failureMessage"]).unwrap_or_default();
    Some((reason.to_string(), message.to_string()))
}

/// The object a template is cloned into: the same apiVersion, the kind without `Template`.
pub fn clone_target(template: &Reference, name: &str) -> Result<Reference, Error> {
    let kind = template.kind.strip_suffix("Template").ok_or_else(|| {
        Error::Invalid(format!(
            "{} is not a template kind (it must end in Template)",
            template.kind
        ))
    })?;
    Ok(Reference {
        api_version: template.api_version.clone(),
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// Reads an infrastructure object's readiness into the `InfrastructureReady` condition, as
/// core does for clusters and machines; returns it, and the failure the object reports.
pub fn read_infrastructure(
    infra: &DynamicObject,
    reference: &Reference,
    conditions: &mut Vec<Condition>,
) -> (bool, Option<(String, String)>) {
    let ready = ready(infra);
    let (reason, message) = why_not_ready(infra, reference);
    crate::conditions::set(conditions, "InfrastructureReady", ready, &reason, &message);
    (ready, failure(infra))
}

/// Why a provider object is not ready, for the condition that waits on it: its own `Ready`
/// condition's reason and words when it gives them (as Cluster API mirrors them), else
/// "not ready".
fn why_not_ready(object: &DynamicObject, reference: &Reference) -> (String, String) {
    let not_ready = format!("{} {} is not ready", reference.kind, reference.name);
    let said = ready_false(object).and_then(|c| {
        let reason = c["reason"].as_str().filter(|r| !r.is_empty())?;
        Some((
            reason.to_string(),
            c["message"].as_str().unwrap_or_default(),
        ))
    });
    match said {
        Some((reason, "")) => (reason, not_ready),
        Some((reason, message)) => (
            reason,
            format!("{} {}: {message}", reference.kind, reference.name),
        ),
        None => ("WaitingForInfrastructure".to_string(), not_ready),
    }
}

/// Marks `InfrastructureReady` False because the referenced kind is not served at all.
pub fn kind_unknown(conditions: &mut Vec<Condition>, kind: &str) {
    crate::conditions::set(
        conditions,
        "InfrastructureReady",
        false,
        "InfrastructureKindUnknown",
        &format!(
            "{kind} is not served by this lariat, and no provider it can enable serves it: create the provider's CRD and run its controllers, or use an infrastructure this build has (see `lariat init --help`)"
        ),
    );
}

/// Says so when `reference` names a kind of a built-in provider that `lariat init` has not
/// enabled: nothing would ever reconcile that object, and "not ready" alone would hide why.
pub async fn provider_not_enabled(caches: &Caches, reference: &Reference) -> Option<String> {
    static OWNERS: std::sync::LazyLock<Vec<(String, String, String)>> =
        std::sync::LazyLock::new(|| {
            lariat_api::builtin_crds()
                .into_iter()
                .filter_map(|crd| {
                    let provider = crd
                        .metadata
                        .labels
                        .as_ref()?
                        .get(lariat_api::capi::labels::PROVIDER_NAME)?
                        .clone();
                    Some((crd.spec.group, crd.spec.names.kind, provider))
                })
                .collect()
        });
    let group = reference.api_version.split('/').next()?;
    let (_, _, provider) = OWNERS
        .iter()
        .find(|(g, k, _)| g == group && *k == reference.kind)?;
    let inventory = caches.of(&lariat_api::clusterctl::api_resource());
    match inventory
        .get(lariat_api::clusterctl::NAMESPACE, provider)
        .await
    {
        Ok(None) => Some(format!(
            "{} {} waits for provider {provider}, which is not enabled: run `{}`",
            reference.kind,
            reference.name,
            lariat_api::clusterctl::init_command(provider)
        )),
        _ => None,
    }
}

/// Creates a new object from a template (`spec.template.spec` of a `FooTemplate` becomes the
/// `spec` of a `Foo`), named `name`, labelled and owned as given, recording where it came from.
pub async fn clone_template(
    caches: &Caches,
    namespace: &str,
    template: &Reference,
    name: &str,
    labels: &Value,
    owner: Value,
) -> Result<Reference, Error> {
    let client = caches.client();
    let source = template.get(caches, namespace).await?.ok_or_else(|| {
        Error::Invalid(format!(
            "template {} {} not found",
            template.kind, template.name
        ))
    })?;
    let kind = template
        .kind
        .strip_suffix("Template")
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{} is not a template kind (it must end in Template)",
                template.kind
            ))
        })?
        .to_string();
    let group = template
        .api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    let template_meta = &source.data["spec"]["template"]["metadata"];
    let mut all_labels = template_meta["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(extra) = labels.as_object() {
        all_labels.extend(extra.clone());
    }
    let mut annotations = template_meta["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        "cluster.x-k8s.io/cloned-from-name".into(),
        json!(source.name_any()),
    );
    annotations.insert(
        "cluster.x-k8s.io/cloned-from-groupkind".into(),
        json!(format!("{}.{group}", template.kind)),
    );
    let object = json!({
        "apiVersion": template.api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels, "annotations": annotations, "ownerReferences": [owner]},
        // A template may leave its spec out (Cluster API AWS's `NodeadmConfigTemplate` is
        // `template: {}`): the clone's spec is then empty, not null.
        "spec": match &source.data["spec"]["template"]["spec"] {
            Value::Null => json!({}),
            spec => spec.clone(),
        },
    });
    let target = Reference {
        api_version: template.api_version.clone(),
        kind,
        name: name.to_string(),
    };
    let api = target.api(client, namespace).await?;
    let object: DynamicObject =
        serde_json::from_value(object).map_err(|e| Error::Invalid(e.to_string()))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(target)
}

/// Deletes the provider object a reference of `owner` (a Cluster or Machine) names, if it is
/// `owner`'s: an object it does not own, or that another Cluster or Machine claims, is left
/// alone (a reference alone gives no right to delete). Returns whether nothing is left to wait
/// for (a kind no longer served has nothing left to delete).
pub(crate) async fn delete_referenced(
    ctx: &Context,
    owner: &impl Cached,
    reference: Option<&lariat_api::capi::ObjectReference>,
) -> Result<bool, Error> {
    let Some(reference) = reference.and_then(Reference::from_object_reference) else {
        return Ok(true);
    };
    let namespace = owner.namespace().unwrap_or_default();
    let api = match reference.api(&ctx.client, &namespace).await {
        Ok(api) => api,
        Err(Error::UnknownKind { .. }) => return Ok(true),
        Err(e) => return Err(e),
    };
    let Some(object) = api.get_opt(&reference.name).await? else {
        return Ok(true);
    };
    let (_, kind) = owner.type_names();
    let uid = owner.uid().unwrap_or_default();
    let ours = object.owner_references().iter().any(|o| o.uid == uid);
    if !ours || claimed_by_another(&object, &kind, &uid).is_some() {
        tracing::info!(object = %format!("{namespace}/{}", owner.name_any()), kind = %reference.kind, name = %reference.name, "not deleting a referenced object that is not this {kind}'s");
        return Ok(true);
    }
    crate::object::delete_if_present(&api, &reference.name).await
}
