//! A kustomization's transformers, in kustomize's order: strategic merge patches, patches,
//! namespace, name prefix and suffix, labels, annotations, JSON 6902 patches, replicas,
//! images.

use serde_json::{Map, Value, json};

use crate::Error;
use crate::build::Loader;
use crate::fieldspec::{
    CLAIM_TEMPLATE_METADATA, FieldSpec, METADATA, SELECTOR_FIELDS, TEMPLATE_METADATA, add_pairs,
    visit,
};
use crate::kustomization::{Image, Kustomization, Patch, PatchOptions, pairs};
use crate::patch::{self, Body};
use crate::resource::{Id, Resource};

pub(crate) fn apply(
    loader: &mut Loader,
    file: &str,
    dir: &str,
    k: &Kustomization,
    set: &mut Vec<Resource>,
) -> Result<(), Error> {
    for entry in &k.patches_strategic_merge {
        loader.charge(file, 4096 + set.len() * 64)?;
        let text = patch_text(loader, dir, entry)?;
        let Body::Strategic(patches) = patch::parse_body(file, &text)? else {
            return Err(Error::new(
                file,
                format!(
                    "patchesStrategicMerge {entry:?} is a JSON 6902 patch; list it under patches with a target"
                ),
            ));
        };
        for one in &patches {
            strategic_by_id(loader, file, set, one, PatchOptions::default())?;
        }
    }
    for entry in &k.patches {
        patch_entry(loader, file, dir, set, entry, false)?;
    }
    if let Some(namespace) = k.namespace.as_deref().filter(|n| !n.is_empty()) {
        loader.charge(file, set.len() * (namespace.len() + 64))?;
        set_namespace(set, namespace);
    }
    for (affixed, prefix) in [(&k.name_prefix, true), (&k.name_suffix, false)] {
        if let Some(affixed) = affixed.as_deref().filter(|a| !a.is_empty()) {
            // Each object's new name, and the old one it keeps.
            let names: usize = set.iter().map(|r| 2 * r.name().len() + affixed.len()).sum();
            loader.charge(file, names)?;
            affix(set, affixed, prefix);
        }
    }
    label(loader, file, set, k)?;
    let annotations = pairs(&k.common_annotations);
    if !annotations.is_empty() {
        // At most the object's and its template's.
        loader.charge(file, 2 * set.len() * weight_of(&annotations))?;
        for resource in set.iter_mut() {
            let id = resource.id();
            for specs in [METADATA, TEMPLATE_METADATA] {
                add_pairs(
                    &mut resource.object,
                    &id,
                    specs,
                    Some("annotations"),
                    &annotations,
                );
            }
        }
    }
    for entry in &k.patches_json6902 {
        patch_entry(loader, file, dir, set, entry, true)?;
    }
    for replica in &k.replicas {
        let mut found = false;
        for resource in set.iter_mut() {
            let counted = matches!(
                resource.kind(),
                "Deployment" | "ReplicationController" | "ReplicaSet" | "StatefulSet"
            );
            if counted && resource.ids().any(|id| id.name == replica.name) {
                found = true;
                let object = resource
                    .object
                    .as_object_mut()
                    .expect("resources are objects");
                let spec = object.entry("spec").or_insert_with(|| json!({}));
                if let Value::Object(spec) = spec {
                    spec.insert("replicas".into(), json!(replica.count));
                }
            }
        }
        if !found {
            return Err(Error::new(
                file,
                format!(
                    "replicas: no Deployment, ReplicaSet, ReplicationController or StatefulSet named {:?}",
                    replica.name
                ),
            ));
        }
    }
    for image in k.images.iter().chain(&k.image_tags) {
        for resource in set
            .iter_mut()
            .filter(|r| r.kind() != "CustomResourceDefinition")
        {
            set_images(&mut resource.object, image);
        }
    }
    Ok(())
}

/// A patch's text: the file it names (within the kustomization's directory), or itself.
fn patch_text(loader: &mut Loader, dir: &str, entry: &str) -> Result<String, Error> {
    let text = if !entry.contains('\n') && loader.is_file(dir, entry) {
        let content = loader.read_within(dir, entry)?;
        String::from_utf8(content).map_err(|_| Error::new(entry, "is not UTF-8 text"))?
    } else if entry.contains('\n') || entry.contains(": ") || entry.trim_start().starts_with('[') {
        loader.charge(entry, entry.len())?;
        entry.to_string()
    } else {
        return Err(Error::new(
            crate::build::join(dir, entry).unwrap_or_else(|_| entry.to_string()),
            "no such file in the bundle (a patch names a file within the kustomization's directory, or is written inline)",
        ));
    };
    Ok(text)
}

fn patch_entry(
    loader: &mut Loader,
    file: &str,
    dir: &str,
    set: &mut Vec<Resource>,
    entry: &Patch,
    json6902: bool,
) -> Result<(), Error> {
    let field = if json6902 {
        "patchesJson6902"
    } else {
        "patches"
    };
    let text = match (&entry.path, &entry.patch) {
        (Some(path), None) => patch_text(loader, dir, path)?,
        (None, Some(inline)) => {
            loader.charge(file, inline.len())?;
            inline.clone()
        }
        _ => {
            return Err(Error::new(
                file,
                format!("each of {field} has either path or patch"),
            ));
        }
    };
    let options = entry.options.unwrap_or_default();
    // Each entry costs its selectors' compilation and a pass over the build, matching or not.
    loader.charge(file, 4096 + set.len() * 64)?;
    match (patch::parse_body(file, &text)?, &entry.target) {
        (Body::Json6902(operations), Some(target)) => {
            for index in patch::select(file, set, target)? {
                patch::apply_json6902(loader, file, &mut set[index], &operations)?;
            }
        }
        (Body::Json6902(_), None) => {
            return Err(Error::new(
                file,
                format!("a JSON 6902 patch in {field} needs a target"),
            ));
        }
        (Body::Strategic(_), _) if json6902 => {
            return Err(Error::new(
                file,
                "patchesJson6902 holds JSON 6902 patches (lists of operations)",
            ));
        }
        (Body::Strategic(patches), Some(target)) => {
            let chosen = patch::select(file, set, target)?;
            let mut deleted = Vec::new();
            for one in &patches {
                for &index in &chosen {
                    loader.charge(file, text.len())?;
                    if patch::apply_strategic(&mut set[index], one, options)
                        .map_err(|e| Error::new(file, e))?
                    {
                        deleted.push(index);
                    }
                }
            }
            remove(set, deleted);
        }
        (Body::Strategic(patches), None) => {
            for one in &patches {
                strategic_by_id(loader, file, set, one, options)?;
            }
        }
    }
    Ok(())
}

/// A strategic merge patch applied to the objects that have had the id it names.
fn strategic_by_id(
    loader: &mut Loader,
    file: &str,
    set: &mut Vec<Resource>,
    one: &Value,
    options: PatchOptions,
) -> Result<(), Error> {
    let id = Id::of(one);
    let chosen: Vec<usize> = (0..set.len()).filter(|&i| set[i].had_id(&id)).collect();
    if chosen.is_empty() {
        return Err(Error::new(
            file,
            format!("no object {id} to patch (failed to find a target for the patch)"),
        ));
    }
    let mut deleted = Vec::new();
    for index in chosen {
        loader.charge(
            file,
            serde_json::to_string(one).map(|s| s.len()).unwrap_or(0),
        )?;
        if patch::apply_strategic(&mut set[index], one, options).map_err(|e| Error::new(file, e))? {
            deleted.push(index);
        }
    }
    remove(set, deleted);
    Ok(())
}

fn remove(set: &mut Vec<Resource>, mut indices: Vec<usize>) {
    indices.sort_unstable();
    indices.dedup();
    for index in indices.into_iter().rev() {
        set.remove(index);
    }
}

/// `namespace`: every namespaced object moves there (a Namespace object is renamed to it),
/// and RoleBindings' subjects named `default` follow.
fn set_namespace(set: &mut [Resource], namespace: &str) {
    for resource in set.iter_mut() {
        let id = resource.id();
        if id.kind == "Namespace" && id.group.is_empty() && id.version == "v1" {
            resource.set_name(namespace.to_string());
            continue;
        }
        if !id.is_cluster_scoped() {
            resource.set_namespace(namespace);
        }
        if matches!(id.kind.as_str(), "RoleBinding" | "ClusterRoleBinding") {
            visit(&mut resource.object, &["subjects"], false, &mut |subject| {
                if subject.get("name").and_then(Value::as_str) == Some("default") {
                    subject["namespace"] = json!(namespace);
                }
            });
        }
        let service_namespace: &[&str] = match (id.kind.as_str(), id.group.as_str()) {
            ("APIService", "apiregistration.k8s.io") => &["spec", "service"],
            ("CustomResourceDefinition", _) => {
                &["spec", "conversion", "webhook", "clientConfig", "service"]
            }
            _ => continue,
        };
        visit(
            &mut resource.object,
            service_namespace,
            false,
            &mut |service| {
                if let Value::Object(map) = service {
                    map.insert("namespace".into(), json!(namespace));
                }
            },
        );
    }
}

/// `namePrefix` or `nameSuffix`, on every object but CRDs, APIServices and Namespaces.
fn affix(set: &mut [Resource], affix: &str, prefix: bool) {
    for resource in set.iter_mut() {
        let id = resource.id();
        let skipped = matches!(id.kind.as_str(), "CustomResourceDefinition" | "Namespace")
            || (id.kind == "APIService" && id.group == "apiregistration.k8s.io");
        if skipped {
            continue;
        }
        if prefix {
            resource.set_name(format!("{affix}{}", id.name));
            resource.prefixes.push(affix.to_string());
        } else {
            resource.set_name(format!("{}{affix}", id.name));
            resource.suffixes.push(affix.to_string());
        }
    }
}

/// `labels` (the object, and what each entry includes), then `commonLabels` (the object,
/// its templates and its selectors), which so win where both set a key, as in kustomize.
fn label(
    loader: &mut Loader,
    file: &str,
    set: &mut [Resource],
    k: &Kustomization,
) -> Result<(), Error> {
    // Each layer: its labels, and where they go: metadata's `labels` field, or a selector.
    type Layer = (
        Map<String, Value>,
        Vec<(&'static [FieldSpec], Option<&'static str>)>,
    );
    const LABELS: Option<&str> = Some("labels");
    let everywhere = || {
        vec![
            (METADATA, LABELS),
            (TEMPLATE_METADATA, LABELS),
            (CLAIM_TEMPLATE_METADATA, LABELS),
            (SELECTOR_FIELDS.as_slice(), None),
        ]
    };
    let mut layers: Vec<Layer> = Vec::new();
    for entry in &k.labels {
        let specs = if entry.include_selectors {
            everywhere()
        } else {
            let mut specs = vec![(METADATA, LABELS)];
            if entry.include_templates {
                specs.push((TEMPLATE_METADATA, LABELS));
            }
            if entry.include_volume_claim_templates {
                specs.push((CLAIM_TEMPLATE_METADATA, LABELS));
            }
            specs
        };
        layers.push((pairs(&entry.pairs), specs));
    }
    if !k.common_labels.is_empty() {
        layers.push((pairs(&k.common_labels), everywhere()));
    }
    for (labels, specs) in &layers {
        // The object, a template or two, a selector or two: four places at most, about.
        loader.charge(file, 4 * set.len() * weight_of(labels))?;
        for resource in set.iter_mut() {
            let id = resource.id();
            for (spec, leaf) in specs {
                add_pairs(&mut resource.object, &id, spec, *leaf, labels);
            }
        }
    }
    Ok(())
}

/// What a set of labels or annotations weighs, written once.
fn weight_of(pairs: &Map<String, Value>) -> usize {
    pairs
        .iter()
        .map(|(k, v)| 64 + k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

/// An image reference's name, tag and digest.
fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[slash..].rfind(':') {
        Some(colon) => (
            &rest[..slash + colon],
            Some(&rest[slash + colon + 1..]),
            digest,
        ),
        None => (rest, None, digest),
    }
}

fn new_image(current: &str, image: &Image) -> Option<String> {
    let (name, tag, digest) = split_image(current);
    if name != image.name {
        return None;
    }
    let name = image
        .new_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    let mut tag = tag.map(str::to_string);
    let mut digest = digest.map(str::to_string);
    if let Some(new_tag) = image
        .new_tag
        .as_ref()
        .map(|t| t.text())
        .filter(|t| !t.is_empty())
    {
        tag = Some(new_tag);
        digest = None;
    }
    let replaced =
        image.new_tag.is_some() || image.digest.as_deref().is_some_and(|d| !d.is_empty());
    if let Some(suffix) = image
        .tag_suffix
        .as_deref()
        .filter(|s| !s.is_empty() && !replaced)
    {
        tag = Some(format!("{}{suffix}", tag.unwrap_or_default()));
    }
    if let Some(new_digest) = image.digest.as_deref().filter(|d| !d.is_empty()) {
        digest = Some(new_digest.to_string());
        if image.new_tag.is_none() {
            tag = None;
        }
    }
    let mut out = name.to_string();
    if let Some(tag) = tag {
        out.push(':');
        out.push_str(&tag);
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(&digest);
    }
    Some(out)
}

/// `images`: every container's (and init container's) image, wherever in the object a
/// list of containers is, as kustomize's image transformer finds them.
fn set_images(value: &mut Value, image: &Image) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if matches!(key.as_str(), "containers" | "initContainers")
                    && let Value::Array(containers) = inner
                {
                    for container in containers.iter_mut() {
                        let current = container.get("image").and_then(Value::as_str);
                        if let Some(new) = current.and_then(|c| new_image(c, image)) {
                            container["image"] = json!(new);
                        }
                    }
                }
                set_images(inner, image);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| set_images(item, image)),
        _ => {}
    }
}
