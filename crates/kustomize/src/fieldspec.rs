//! Where in an object a transformer writes, as kustomize's default configuration says: a
//! path of field names (a list on the way is entered element by element), for every kind
//! or one group and kind, creating missing fields or not.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::resource::Id;

#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldSpec {
    /// `None` for every group; `Some("")` for the core group.
    pub group: Option<&'static str>,
    /// `None` for every kind.
    pub kind: Option<&'static str>,
    pub path: &'static [&'static str],
    /// Missing maps on the path are created.
    pub create: bool,
}

impl FieldSpec {
    pub fn selects(&self, id: &Id) -> bool {
        self.group.is_none_or(|g| g == id.group) && self.kind.is_none_or(|k| k == id.kind)
    }
}

const fn any(path: &'static [&'static str]) -> FieldSpec {
    FieldSpec {
        group: None,
        kind: None,
        path,
        create: true,
    }
}

const fn of(
    kind: &'static str,
    group: Option<&'static str>,
    path: &'static [&'static str],
    create: bool,
) -> FieldSpec {
    FieldSpec {
        group,
        kind: Some(kind),
        path,
        create,
    }
}

const TEMPLATE_METADATA_PATH: &[&str] = &["spec", "template", "metadata"];
const MATCH_LABELS: &[&str] = &["spec", "selector", "matchLabels"];
const APPS: Option<&str> = Some("apps");
const BATCH: Option<&str> = Some("batch");

/// An object's own metadata: where its labels and annotations are.
pub(crate) const METADATA: &[FieldSpec] = &[any(&["metadata"])];

/// The metadata of the pods (and jobs) a kind makes: where `commonLabels`,
/// `labels[].includeTemplates` and `commonAnnotations` also go.
pub(crate) const TEMPLATE_METADATA: &[FieldSpec] = &[
    of(
        "ReplicationController",
        Some(""),
        TEMPLATE_METADATA_PATH,
        true,
    ),
    of("Deployment", None, TEMPLATE_METADATA_PATH, true),
    of("ReplicaSet", None, TEMPLATE_METADATA_PATH, true),
    of("DaemonSet", None, TEMPLATE_METADATA_PATH, true),
    of("StatefulSet", None, TEMPLATE_METADATA_PATH, true),
    of("Job", BATCH, TEMPLATE_METADATA_PATH, true),
    of("CronJob", BATCH, &["spec", "jobTemplate", "metadata"], true),
    of(
        "CronJob",
        BATCH,
        &["spec", "jobTemplate", "spec", "template", "metadata"],
        true,
    ),
];

/// The metadata of a StatefulSet's volume claim templates: where `commonLabels` and
/// `labels[].includeVolumeClaimTemplates` also go.
pub(crate) const CLAIM_TEMPLATE_METADATA: &[FieldSpec] = &[of(
    "StatefulSet",
    APPS,
    &["spec", "volumeClaimTemplates[]", "metadata"],
    true,
)];

/// The label selectors of workloads and policies themselves.
const SELECTORS: &[FieldSpec] = &[
    of("Service", Some(""), &["spec", "selector"], true),
    of(
        "ReplicationController",
        Some(""),
        &["spec", "selector"],
        true,
    ),
    of("Deployment", None, MATCH_LABELS, true),
    of("ReplicaSet", None, MATCH_LABELS, true),
    of("DaemonSet", None, MATCH_LABELS, true),
    of("StatefulSet", APPS, MATCH_LABELS, true),
    of("Job", BATCH, MATCH_LABELS, false),
    of(
        "CronJob",
        BATCH,
        &["spec", "jobTemplate", "spec", "selector", "matchLabels"],
        false,
    ),
    of("PodDisruptionBudget", Some("policy"), MATCH_LABELS, false),
    of(
        "NetworkPolicy",
        Some("networking.k8s.io"),
        &["spec", "podSelector", "matchLabels"],
        false,
    ),
    of(
        "NetworkPolicy",
        Some("networking.k8s.io"),
        &["spec", "ingress", "from", "podSelector", "matchLabels"],
        false,
    ),
    of(
        "NetworkPolicy",
        Some("networking.k8s.io"),
        &["spec", "egress", "to", "podSelector", "matchLabels"],
        false,
    ),
];

/// Where a Deployment's or StatefulSet's pods select other pods by label (affinity terms,
/// spread constraints): where `commonLabels` go too, if there, so the terms still select
/// the pods they did.
const POD_SELECTOR_PATHS: &[&[&str]] = &[
    &[
        "spec",
        "template",
        "spec",
        "affinity",
        "podAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
        "podAffinityTerm",
        "labelSelector",
        "matchLabels",
    ],
    &[
        "spec",
        "template",
        "spec",
        "affinity",
        "podAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "labelSelector",
        "matchLabels",
    ],
    &[
        "spec",
        "template",
        "spec",
        "affinity",
        "podAntiAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
        "podAffinityTerm",
        "labelSelector",
        "matchLabels",
    ],
    &[
        "spec",
        "template",
        "spec",
        "affinity",
        "podAntiAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "labelSelector",
        "matchLabels",
    ],
    &[
        "spec",
        "template",
        "spec",
        "topologySpreadConstraints",
        "labelSelector",
        "matchLabels",
    ],
];

/// Label selectors: where `commonLabels` and `labels[].includeSelectors` also go, so that
/// what selects pods still selects the pods it labelled.
pub(crate) static SELECTOR_FIELDS: LazyLock<Vec<FieldSpec>> = LazyLock::new(|| {
    let mut fields = SELECTORS.to_vec();
    for kind in ["Deployment", "StatefulSet"] {
        fields.extend(
            POD_SELECTOR_PATHS
                .iter()
                .map(|path| of(kind, APPS, path, false)),
        );
    }
    fields
});

/// Where a kind keeps its pod spec.
pub(crate) fn pod_spec_path(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "Pod" => &["spec"],
        "PodTemplate" => &["template", "spec"],
        "Deployment"
        | "ReplicaSet"
        | "DaemonSet"
        | "StatefulSet"
        | "Job"
        | "ReplicationController" => &["spec", "template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => return None,
    })
}

/// Calls `f` on every value at `path` below `value`, entering each element of a list on
/// the way; with `create`, missing fields on the way (and at the end) are made empty maps,
/// except a list's (a field written `name[]`), which is never made up.
pub(crate) fn visit(value: &mut Value, path: &[&str], create: bool, f: &mut dyn FnMut(&mut Value)) {
    if let Value::Array(items) = value {
        for item in items {
            visit(item, path, create, f);
        }
        return;
    }
    let Some((first, rest)) = path.split_first() else {
        f(value);
        return;
    };
    let Value::Object(map) = value else {
        return;
    };
    let (first, create_here) = match first.strip_suffix("[]") {
        Some(list) => (list, false),
        None => (*first, create),
    };
    if !map.contains_key(first) {
        if !create_here {
            return;
        }
        map.insert(first.to_string(), Value::Object(Map::new()));
    }
    if let Some(next) = map.get_mut(first) {
        if next.is_null() && create_here {
            *next = Value::Object(Map::new());
        }
        visit(next, rest, create, f);
    }
}

/// Sets each of `pairs` in the map at each of `specs`' places in `object` (at their `leaf`
/// field, `labels` or `annotations`, when given).
pub(crate) fn add_pairs(
    object: &mut Value,
    id: &Id,
    specs: &[FieldSpec],
    leaf: Option<&str>,
    pairs: &Map<String, Value>,
) {
    for spec in specs.iter().filter(|s| s.selects(id)) {
        let path: Vec<&str> = spec.path.iter().copied().chain(leaf).collect();
        visit(object, &path, spec.create, &mut |place| {
            if let Value::Object(map) = place {
                for (key, value) in pairs {
                    map.insert(key.clone(), value.clone());
                }
            }
        });
    }
}
