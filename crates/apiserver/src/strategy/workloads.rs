//! Workload kinds as kube-apiserver admits them: their selectors immutable, and completed at
//! create: a Job's selector and its Pods' labels,
//! generated from its UID unless `manualSelector` says the user chose them, and its
//! completions and parallelism when neither is given (a Job of one Pod). Served by the
//! simulated clusters only; their Job controller relies on the selector as a real one does,
//! and `kubectl logs job/NAME` finds the Job's Pods by it.

use serde_json::{Value, json};

use crate::status::Cause;
use lariat_api::admission::{Strategy, immutable};

const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

pub struct Jobs;

/// The selector kube-apiserver generates for the Job with `uid`.
fn generated_selector(uid: &Value) -> Value {
    json!({"matchLabels": {CONTROLLER_UID: uid}})
}

impl Strategy for Jobs {
    fn default_fields(&self, object: &mut Value, old: Option<&Value>) {
        let uid = object["metadata"]["uid"].clone();
        let name = object["metadata"]["name"].clone();
        let spec = &mut object["spec"];
        if !spec.is_object() {
            return;
        }
        if old.is_none() && spec["completions"].is_null() && spec["parallelism"].is_null() {
            spec["completions"] = json!(1);
            spec["parallelism"] = json!(1);
        }
        if spec["manualSelector"] == true {
            return;
        }
        if spec["selector"].is_null() {
            // An update that leaves the selector out keeps it (it is immutable).
            spec["selector"] = match old {
                Some(old) => old["spec"]["selector"].clone(),
                None => generated_selector(&uid),
            };
        }
        let template = &mut spec["template"];
        if !template.is_object() {
            return;
        }
        let metadata = &mut template["metadata"];
        if !metadata.is_object() {
            *metadata = json!({});
        }
        let labels = &mut metadata["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        for (key, value) in [
            (CONTROLLER_UID, &uid),
            (JOB_NAME, &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            if labels[key].is_null() {
                labels[key] = value.clone();
            }
        }
    }

    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        if let Some(old) = old {
            // As kube-apiserver: a Job's Pods are the ones its template made.
            let mut causes = immutable(object, Some(old), &["spec", "selector"], "spec.selector");
            causes.extend(immutable(
                object,
                Some(old),
                &["spec", "template", "spec"],
                "spec.template",
            ));
            return causes;
        }
        if spec["manualSelector"] == true {
            return Vec::new();
        }
        let generated = generated_selector(&object["metadata"]["uid"]);
        if spec["selector"] != generated {
            return vec![Cause::invalid(
                "spec.selector",
                &spec["selector"],
                "`selector` not auto-generated",
            )];
        }
        Vec::new()
    }
}

/// Deployments, StatefulSets, DaemonSets and ReplicaSets: their selector chooses their Pods
/// for good, as kube-apiserver's apps/v1 has it (a chart that changes it needs `force`).
pub struct Selectors;

impl Strategy for Selectors {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        immutable(object, old, &["spec", "selector"], "spec.selector")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value) -> Value {
        json!({"metadata": {"name": "once", "uid": "u-1"}, "spec": spec})
    }

    #[test]
    fn a_jobs_selector_and_labels_come_from_its_uid() {
        let mut created = job(json!({"template": {"spec": {"containers": []}}}));
        Jobs.default_fields(&mut created, None);
        assert!(Jobs.admit(&mut created, None).is_empty());
        assert_eq!(
            created["spec"]["selector"],
            json!({"matchLabels": {CONTROLLER_UID: "u-1"}})
        );
        assert_eq!(
            created["spec"]["template"]["metadata"]["labels"][JOB_NAME],
            "once"
        );
        assert_eq!(
            created["spec"]["template"]["metadata"]["labels"]["controller-uid"],
            "u-1"
        );
        assert_eq!(
            (
                created["spec"]["completions"].clone(),
                created["spec"]["parallelism"].clone()
            ),
            (json!(1), json!(1))
        );

        // An update without the selector keeps it.
        let mut updated = job(json!({"template": {"spec": {"containers": []}}}));
        Jobs.default_fields(&mut updated, Some(&created));
        assert_eq!(updated["spec"]["selector"], created["spec"]["selector"]);
        assert!(
            updated["spec"]["completions"].is_null(),
            "not defaulted on update"
        );

        // A selector of one's own needs manualSelector.
        let mut chosen = job(json!({"selector": {"matchLabels": {"app": "x"}},
                                    "template": {"metadata": {"labels": {"app": "x"}}}}));
        Jobs.default_fields(&mut chosen, None);
        let causes = Jobs.admit(&mut chosen, None);
        assert_eq!(causes[0].field, "spec.selector");
        let mut manual = job(
            json!({"manualSelector": true, "selector": {"matchLabels": {"app": "x"}},
                                    "template": {"metadata": {"labels": {"app": "x"}}}}),
        );
        Jobs.default_fields(&mut manual, None);
        assert!(Jobs.admit(&mut manual, None).is_empty());
        assert!(manual["spec"]["template"]["metadata"]["labels"]["job-name"].is_null());
    }
}
