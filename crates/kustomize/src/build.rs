//! The build: kustomizations read depth first (resources, generators, components, then the
//! kustomization's transformers), then, once, hashes added to generated names, references
//! fixed and local configuration dropped.

use std::collections::HashSet;

use serde_json::Value;

use crate::generators::{self, Behavior};
use crate::kustomization::{self, Kind};
use crate::resource::{Id, Resource};
use crate::{Bounds, Error, Files, KUSTOMIZATION_FILES};

/// What marks an object as a kustomization's own configuration, not for the cluster.
const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";

/// Builds the kustomization in `dir` (`""` or `.` for the files' root) from `files`, as
/// `kustomize build dir` does; the objects in kustomize's output order (depth first, as
/// listed).
pub fn build(files: &Files, dir: &str, bounds: Bounds) -> Result<Vec<Value>, Error> {
    let dir = join("", dir)?;
    let mut loader = Loader {
        files,
        bounds,
        bytes: 0,
        kustomizations: 0,
        stack: Vec::new(),
    };
    let mut set = loader.accumulate(&dir, Kind::Kustomization, Vec::new())?;
    for resource in set.iter_mut().filter(|r| r.needs_hash) {
        let hash = generators::name_hash(&resource.object);
        let name = format!("{}-{hash}", resource.name());
        resource.set_name(name);
    }
    crate::names::fix_references(&mut set)?;
    Ok(set
        .into_iter()
        .filter(|r| r.object["metadata"]["annotations"][LOCAL_CONFIG] != "true")
        .map(|r| r.object)
        .collect())
}

/// Labels and annotations are text: `8080` and `true` in YAML are read as `"8080"` and
/// `"true"`, as kustomize (and the API server, which would refuse them otherwise) reads them.
fn stringify_metadata(object: &mut Value) {
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(map)) = object["metadata"].get_mut(field) {
            for value in map.values_mut() {
                if let Value::Number(_) | Value::Bool(_) = value {
                    *value = Value::String(value.to_string());
                }
            }
        }
    }
}

/// Reads files for a build, within its bounds.
pub(crate) struct Loader<'a> {
    files: &'a Files,
    bounds: Bounds,
    bytes: usize,
    kustomizations: usize,
    /// The kustomizations being read, outermost first: a cycle is refused.
    stack: Vec<String>,
}

/// `path` relative to `dir`, normalized; refused if it leaves the bundle or is absolute.
pub(crate) fn join(dir: &str, path: &str) -> Result<String, Error> {
    if path.starts_with('/') {
        return Err(Error::new(
            path,
            "an absolute path; paths in a kustomization are relative to it",
        ));
    }
    let mut parts: Vec<&str> = dir
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(Error::new(
                        path,
                        format!("leaves the bundle (from {})", display(dir)),
                    ));
                }
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

fn display(dir: &str) -> &str {
    if dir.is_empty() { "." } else { dir }
}

fn within(path: &str, dir: &str) -> bool {
    dir.is_empty() || path.starts_with(&format!("{dir}/"))
}

impl Loader<'_> {
    /// Counts `bytes` of work against the build's budget.
    pub fn charge(&mut self, file: &str, bytes: usize) -> Result<(), Error> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.bounds.max_bytes {
            return Err(Error::new(
                file,
                format!(
                    "the build reads, generates and patches more than {} bytes (files included many times over count each time)",
                    self.bounds.max_bytes
                ),
            ));
        }
        Ok(())
    }

    pub fn is_file(&self, dir: &str, path: &str) -> bool {
        join(dir, path).is_ok_and(|p| self.files.contains_key(&p))
    }

    fn is_dir(&self, path: &str) -> bool {
        let prefix = format!("{path}/");
        path.is_empty()
            || self
                .files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// A file named by a kustomization in `dir`, which must be in that directory or below
    /// it (kustomize's `LoadRestrictionsRootOnly`, as Fleet builds).
    pub fn read_within(&mut self, dir: &str, path: &str) -> Result<Vec<u8>, Error> {
        let full = join(dir, path)?;
        if !within(&full, dir) {
            return Err(Error::new(
                full,
                format!(
                    "is not in or below {}; a kustomization reads files only from its own directory (kustomize's rootOnly load restrictions)",
                    display(dir)
                ),
            ));
        }
        let content = self
            .files
            .get(&full)
            .ok_or_else(|| Error::new(&full, "no such file in the bundle"))?;
        self.charge(&full, content.len())?;
        Ok(content.clone())
    }

    fn kustomization_file(&mut self, dir: &str) -> Result<(String, Vec<u8>), Error> {
        let found: Vec<String> = KUSTOMIZATION_FILES
            .iter()
            .map(|name| join(dir, name))
            .collect::<Result<_, _>>()?;
        let found: Vec<String> = found
            .into_iter()
            .filter(|f| self.files.contains_key(f))
            .collect();
        match found.as_slice() {
            [one] => {
                let content = self.files[one].clone();
                self.charge(one, content.len())?;
                Ok((one.clone(), content))
            }
            [] => Err(Error::new(
                display(dir),
                "has no kustomization.yaml, kustomization.yml or Kustomization",
            )),
            _ => Err(Error::new(
                display(dir),
                "has more than one kustomization file",
            )),
        }
    }

    /// The objects of the kustomization in `dir` (a component adds to and transforms
    /// `set`, its parent's objects; a kustomization starts from none).
    fn accumulate(
        &mut self,
        dir: &str,
        expected: Kind,
        mut set: Vec<Resource>,
    ) -> Result<Vec<Resource>, Error> {
        self.kustomizations += 1;
        if self.kustomizations > self.bounds.max_kustomizations {
            return Err(Error::new(
                display(dir),
                format!(
                    "the build includes more than {} kustomizations",
                    self.bounds.max_kustomizations
                ),
            ));
        }
        if self.stack.len() >= self.bounds.max_depth {
            return Err(Error::new(
                display(dir),
                format!(
                    "kustomizations nest more than {} deep",
                    self.bounds.max_depth
                ),
            ));
        }
        if self.stack.iter().any(|d| d == dir) {
            return Err(Error::new(
                display(dir),
                format!(
                    "includes itself: {} -> {}",
                    self.stack.join(" -> "),
                    display(dir)
                ),
            ));
        }
        let (file, content) = self.kustomization_file(dir)?;
        let (kind, k) = kustomization::parse(&file, &content)?;
        match (expected, kind) {
            (Kind::Kustomization, Kind::Component) => {
                return Err(Error::new(
                    &file,
                    "is a Component: list its directory under components, not resources",
                ));
            }
            (Kind::Component, Kind::Kustomization) => {
                return Err(Error::new(
                    &file,
                    "is a Kustomization: list its directory under resources, not components",
                ));
            }
            _ => {}
        }
        self.stack.push(dir.to_string());
        let mut added = Vec::new();
        for entry in k.resources.iter().chain(&k.bases) {
            // An entry costs something even when its file is empty.
            self.charge(&file, 256)?;
            added.extend(self.resource_entry(&file, dir, entry)?);
            self.check_count(&file, set.len() + added.len())?;
        }
        self.add(&file, &mut set, added)?;
        let generated = k
            .config_map_generator
            .iter()
            .map(|args| (args, false))
            .chain(k.secret_generator.iter().map(|args| (args, true)));
        for (args, secret) in generated {
            // Each costs a pass over the build (to merge, or to check it is new).
            self.charge(&file, 1024 + set.len() * 64)?;
            let (behavior, resource) =
                generators::generate(self, &file, dir, args, k.generator_options.as_ref(), secret)?;
            self.absorb(&file, &mut set, behavior, resource)?;
        }
        for component in &k.components {
            let path = join(dir, component)?;
            set = self.accumulate(&path, Kind::Component, set)?;
        }
        crate::transform::apply(self, &file, dir, &k, &mut set)?;
        self.stack.pop();
        Ok(set)
    }

    /// The objects one entry of `resources` stands for: a file's, or a directory's build.
    fn resource_entry(
        &mut self,
        file: &str,
        dir: &str,
        entry: &str,
    ) -> Result<Vec<Resource>, Error> {
        if entry.contains("://")
            || entry.starts_with("git@")
            || entry.starts_with("github.com/")
            || entry.starts_with("gitlab.com/")
        {
            return Err(Error::new(
                file,
                format!(
                    "{entry}: remote resources are not fetched; put them in the repository and list them by path"
                ),
            ));
        }
        let path = join(dir, entry)?;
        if self.files.contains_key(&path) {
            let content = self.read_within(dir, entry)?;
            return self.objects(&path, &content);
        }
        if self.is_dir(&path) {
            return self.accumulate(&path, Kind::Kustomization, Vec::new());
        }
        Err(Error::new(
            file,
            format!("resource {entry}: no such file or directory in the bundle"),
        ))
    }

    /// The objects of a YAML (or JSON) file; a `List`'s items are objects of their own.
    fn objects(&mut self, path: &str, content: &[u8]) -> Result<Vec<Resource>, Error> {
        let text =
            std::str::from_utf8(content).map_err(|_| Error::new(path, "is not UTF-8 text"))?;
        let mut objects = Vec::new();
        for (index, document) in lariat_yaml::documents(text).into_iter().enumerate() {
            let value = document.map_err(|e| Error::new(path, format!("is not YAML: {e}")))?;
            let mut pending = vec![value];
            while let Some(value) = pending.pop() {
                match value {
                    Value::Null => {}
                    Value::Object(mut map) => {
                        let is_list = map
                            .get("kind")
                            .and_then(Value::as_str)
                            .is_some_and(|k| k.ends_with("List"));
                        if is_list && let Some(Value::Array(items)) = map.remove("items") {
                            pending.extend(items.into_iter().rev());
                            continue;
                        }
                        let mut object = Value::Object(map);
                        stringify_metadata(&mut object);
                        let id = Id::of(&object);
                        if id.kind.is_empty() {
                            return Err(Error::new(
                                path,
                                format!("document {} has no kind", index + 1),
                            ));
                        }
                        if id.name.is_empty() {
                            return Err(Error::new(
                                path,
                                format!(
                                    "document {} ({}) has no metadata.name",
                                    index + 1,
                                    id.kind
                                ),
                            ));
                        }
                        if !object["metadata"].is_object() {
                            return Err(Error::new(
                                path,
                                format!("document {}: metadata is not a mapping", index + 1),
                            ));
                        }
                        objects.push(Resource::new(object));
                    }
                    _ => {
                        return Err(Error::new(
                            path,
                            format!(
                                "document {} is not a Kubernetes object (a mapping with apiVersion and kind)",
                                index + 1
                            ),
                        ));
                    }
                }
            }
        }
        Ok(objects)
    }

    /// Adds objects to the build, refusing one whose id is already there.
    fn add(
        &mut self,
        file: &str,
        set: &mut Vec<Resource>,
        added: Vec<Resource>,
    ) -> Result<(), Error> {
        let key = |id: &Id| {
            (
                id.group.clone(),
                id.version.clone(),
                id.kind.clone(),
                id.effective_namespace().to_string(),
                id.name.clone(),
            )
        };
        let mut known: HashSet<_> = set.iter().map(|r| key(&r.id())).collect();
        for resource in added {
            let id = resource.id();
            if !known.insert(key(&id)) {
                return Err(Error::new(
                    file,
                    format!(
                        "{id} is in the build twice (may not add an object with an id already there)"
                    ),
                ));
            }
            set.push(resource);
        }
        self.check_count(file, set.len())
    }

    fn check_count(&self, file: &str, count: usize) -> Result<(), Error> {
        if count > self.bounds.max_resources {
            return Err(Error::new(
                file,
                format!(
                    "the build holds more than {} objects",
                    self.bounds.max_resources
                ),
            ));
        }
        Ok(())
    }

    /// Adds a generated object, or merges it into (or has it replace) the base's.
    fn absorb(
        &mut self,
        file: &str,
        set: &mut Vec<Resource>,
        behavior: Behavior,
        resource: Resource,
    ) -> Result<(), Error> {
        if behavior == Behavior::Create {
            return self.add(file, set, vec![resource]);
        }
        let id = resource.id();
        let matching: Vec<usize> = (0..set.len()).filter(|&i| set[i].had_id(&id)).collect();
        match matching.as_slice() {
            [one] => {
                generators::absorb(&mut set[*one], resource, behavior);
                Ok(())
            }
            [] => Err(Error::new(
                file,
                format!(
                    "{id}: no such object from a base to merge into or replace (behavior {behavior:?})"
                ),
            )),
            _ => Err(Error::new(
                file,
                format!("{id}: more than one object from the bases has this id"),
            )),
        }
    }
}
