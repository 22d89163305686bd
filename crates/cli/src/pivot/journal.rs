//! The move's journal: a ConfigMap in the namespace being moved, on the source, so it
//! outlives the CLI. It names the target, the objects (in creation order, with their source
//! uids) and the Clusters that were paused before the move, and says how far the move got:
//! copying (the source is whole: rerun to finish, or `--abort` to undo) or deleting (the
//! target holds everything, verified: rerun to finish).

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};

use super::graph::{JOURNAL_LABEL, Object};

pub const NAME: &str = "lariat-move";
const FIELD_MANAGER: &str = "lariat-move";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Copying,
    Deleting,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Entry {
    pub fn of(object: &Object) -> Entry {
        Entry {
            api_version: object.api_version(),
            kind: object.kind.clone(),
            namespace: object.namespace().to_string(),
            name: object.name().to_string(),
            uid: object.uid().to_string(),
        }
    }

    pub fn gvk(&self) -> kube::core::GroupVersionKind {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", &self.api_version));
        kube::core::GroupVersionKind::gvk(group, version, &self.kind)
    }

    pub fn is_cluster(&self) -> bool {
        self.kind == "Cluster" && self.api_version.starts_with("cluster.x-k8s.io/")
    }

    pub fn display(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }
}

#[derive(Clone, Debug)]
pub struct Journal {
    /// The target's API server URL, for messages.
    pub target: String,
    /// The target's identity (`copy::Server::identity`), which a resume must match.
    pub target_identity: String,
    pub phase: Phase,
    pub objects: Vec<Entry>,
    /// Clusters that were paused before the move (and stay so after it).
    pub paused: Vec<String>,
}

impl Journal {
    pub async fn load(client: &kube::Client, namespace: &str) -> anyhow::Result<Option<Journal>> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let Some(map) = api
            .get_opt(NAME)
            .await
            .map_err(|e| crate::connect::refused(e, "read the move's journal"))?
        else {
            return Ok(None);
        };
        let data = map.data.unwrap_or_default();
        let field = |key: &str| {
            data.get(key)
                .with_context(|| format!("the move's journal (ConfigMap {namespace}/{NAME}) has no {key}: delete it if no move is under way"))
        };
        let parse = |key: &str| -> anyhow::Result<serde_json::Value> {
            serde_json::from_str(field(key)?)
                .with_context(|| format!("the move's journal has an unreadable {key}"))
        };
        Ok(Some(Journal {
            target: field("target")?.clone(),
            target_identity: field("targetIdentity")?.clone(),
            phase: serde_json::from_value(parse("phase")?)?,
            objects: serde_json::from_value(parse("objects")?)?,
            paused: serde_json::from_value(parse("paused")?)?,
        }))
    }

    pub async fn save(&self, client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
        let data: BTreeMap<String, String> = [
            ("target".to_string(), self.target.clone()),
            ("targetIdentity".to_string(), self.target_identity.clone()),
            ("phase".to_string(), serde_json::to_string(&self.phase)?),
            ("objects".to_string(), serde_json::to_string(&self.objects)?),
            ("paused".to_string(), serde_json::to_string(&self.paused)?),
        ]
        .into();
        let map = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "labels": {JOURNAL_LABEL: "true"}},
            "data": data,
        });
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .patch(
                NAME,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(map),
            )
            .await
            .map_err(|e| crate::connect::refused(e, "write the move's journal"))?;
        Ok(())
    }

    /// Writes a new journal, failing if there is one already: of two moves of a namespace
    /// started at once, one goes on.
    pub async fn create(&self, client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
        let placeholder = serde_json::from_value(serde_json::json!({
            "metadata": {"name": NAME, "namespace": namespace, "labels": {JOURNAL_LABEL: "true"}},
        }))?;
        match Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .create(&kube::api::PostParams::default(), &placeholder)
            .await
        {
            Ok(_) => self.save(client, namespace).await,
            Err(kube::Error::Api(status)) if status.code == 409 => anyhow::bail!(
                "another move of namespace {namespace} has just started: let it finish (or rerun it to resume it)"
            ),
            Err(e) => Err(crate::connect::refused(e, "write the move's journal")),
        }
    }

    /// A journal is a ConfigMap, which anyone who may edit the namespace may write: it may
    /// name only objects of that namespace and Cluster API's cluster-wide kinds, and a resume
    /// still moves only what discovery finds (see `run`).
    pub fn check_confined(&self, namespace: &str) -> anyhow::Result<()> {
        for entry in &self.objects {
            let group = entry.gvk().group;
            let confined = if entry.namespace.is_empty() {
                group.ends_with("cluster.x-k8s.io")
            } else {
                entry.namespace == namespace
            };
            if !confined {
                anyhow::bail!(
                    "the move's journal (ConfigMap {namespace}/{NAME}) names {} {}/{}, outside the namespace: it was not written by lariat move; delete it",
                    entry.kind,
                    entry.namespace,
                    entry.name
                );
            }
        }
        Ok(())
    }

    pub async fn remove(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
        match Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .delete(NAME, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(crate::connect::refused(e, "delete the move's journal")),
        }
    }
}

/// Records in the source's namespace where its moved Clusters went (the proxy tells their
/// users), and takes them out of the target's record, where they are again.
pub async fn record_moved(
    source: &kube::Client,
    target: &kube::Client,
    target_url: &str,
    namespace: &str,
    moved: &[Entry],
) -> anyhow::Result<()> {
    use lariat_api::management::{MovedTo, moved_record};
    let (record_namespace, record_name) = moved_record(namespace);
    let moved_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (users, groups) = bound_subjects(target, moved).await;
    let clusters: Vec<&str> = moved
        .iter()
        .filter(|e| e.is_cluster())
        .map(|e| e.name.as_str())
        .collect();
    let mut went = BTreeMap::new();
    let mut here = BTreeMap::new();
    for name in clusters {
        let to = MovedTo {
            server: target_url.to_string(),
            moved_at: moved_at.clone(),
            users: users.clone(),
            groups: groups.clone(),
        };
        went.insert(
            name.to_string(),
            serde_json::Value::String(serde_json::to_string(&to)?),
        );
        here.insert(name.to_string(), serde_json::Value::Null);
    }
    let source_api: Api<ConfigMap> = Api::namespaced(source.clone(), record_namespace);
    let patch = serde_json::json!({"data": went});
    let params = PatchParams::apply(FIELD_MANAGER);
    match source_api
        .patch(&record_name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let map: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": record_name, "namespace": record_namespace},
                "data": went,
            }))?;
            source_api
                .create(&Default::default(), &map)
                .await
                .map_err(|e| crate::connect::refused(e, "record where the clusters went"))?;
        }
        Err(e) => return Err(crate::connect::refused(e, "record where the clusters went")),
    }
    let target_api: Api<ConfigMap> = Api::namespaced(target.clone(), record_namespace);
    match target_api
        .patch(
            &record_name,
            &params,
            &Patch::Merge(&serde_json::json!({"data": here})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(crate::connect::refused(
            e,
            "take the clusters out of the target's record of moved clusters",
        )),
    }
}

/// The users and groups the moved bindings name (Rancher's role template bindings and
/// RoleBindings), as the target holds them now: whose access left with the clusters.
async fn bound_subjects(target: &kube::Client, moved: &[Entry]) -> (Vec<String>, Vec<String>) {
    use std::collections::BTreeSet;
    let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
    for entry in moved {
        let gvk = entry.gvk();
        let rancher = gvk.group == lariat_api::rancher::GROUP
            && matches!(
                entry.kind.as_str(),
                "ClusterRoleTemplateBinding" | "ProjectRoleTemplateBinding"
            );
        let rbac = gvk.group == "rbac.authorization.k8s.io" && entry.kind == "RoleBinding";
        if !(rancher || rbac) {
            continue;
        }
        let resource = kube::core::ApiResource::from_gvk(&gvk);
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(target.clone(), &entry.namespace, &resource);
        let Ok(object) = api.get(&entry.name).await else {
            continue;
        };
        let subjects: Vec<(String, String)> = if rbac {
            object.data["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s["kind"].as_str()?.into(), s["name"].as_str()?.into())))
                .collect()
        } else {
            serde_json::from_value::<lariat_api::rancher::Subjects>(object.data.clone())
                .ok()
                .and_then(|s| s.subject())
                .map(|s| (s.kind, s.name))
                .into_iter()
                .collect()
        };
        for (kind, name) in subjects {
            match kind.as_str() {
                "User" => users.insert(name),
                "Group" => groups.insert(name),
                _ => false,
            };
        }
    }
    (users.into_iter().collect(), groups.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(api_version: &str, kind: &str, namespace: &str) -> Entry {
        Entry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: "x".into(),
            uid: "u".into(),
        }
    }

    #[test]
    fn a_journal_names_only_its_namespace_and_cluster_api_kinds() {
        let journal = |objects| Journal {
            target: "https://t".into(),
            target_identity: "id".into(),
            phase: Phase::Copying,
            objects,
            paused: vec![],
        };
        let fine = journal(vec![
            entry("cluster.x-k8s.io/v1beta1", "Cluster", "prod"),
            entry("v1", "Secret", "prod"),
            entry(
                "infrastructure.cluster.x-k8s.io/v1beta2",
                "AWSClusterStaticIdentity",
                "",
            ),
        ]);
        assert!(fine.check_confined("prod").is_ok());
        let other = journal(vec![entry("v1", "Secret", "other")]);
        let error = other.check_confined("prod").unwrap_err().to_string();
        assert!(
            error.contains("Secret other/x, outside the namespace"),
            "{error}"
        );
        let global = journal(vec![entry(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "",
        )]);
        assert!(global.check_confined("prod").is_err());
    }
}
