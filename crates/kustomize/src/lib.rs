//! `kustomize build`, as Fleet's agent runs it through kustomize's own library (krusty, with
//! plugins disabled and files loaded only from within each kustomization's directory), over
//! a bundle's files held in memory.
//!
//! What is built: `resources` (files, and directories holding a kustomization), legacy
//! `bases`, `components`, `configMapGenerator` and `secretGenerator` (with `behavior` and
//! kustomize's name hash), `generatorOptions`, `patches`, `patchesStrategicMerge`,
//! `patchesJson6902`, `namespace`, `namePrefix`, `nameSuffix`, `commonLabels`, `labels`,
//! `commonAnnotations`, `images` and `replicas`, in kustomize's order; then, once for the
//! whole build, hashes added to generated names and every reference to a renamed object
//! (a ConfigMap in a Deployment's volumes, a ServiceAccount in a RoleBinding, ...) brought
//! up to date. Anything else a kustomization may say (`vars`, `replacements`, `helmCharts`,
//! plugins, remote bases, ...) is refused by name rather than ignored.
//!
//! Every build is bounded: see [`Bounds`].

mod build;
mod fieldspec;
mod generators;
mod kustomization;
mod names;
mod patch;
mod resource;
mod transform;

use std::collections::BTreeMap;

pub use build::build;

/// A bundle's files: path (relative, `/`-separated) to content.
pub type Files = BTreeMap<String, Vec<u8>>;

/// The file names kustomize recognizes as a directory's kustomization.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Why a build failed: the file at fault (a kustomization, a resource or a patch) and what
/// is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct Error {
    pub file: String,
    pub message: String,
}

impl Error {
    pub(crate) fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            file: file.into(),
            message: message.into(),
        }
    }
}

/// What one build may cost. Kustomizations can include one another many times over (a base
/// used by several overlays, each used twice...), so what is bounded is the work done, not
/// only the files given.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Objects in the build at any point: 10,000.
    pub max_resources: usize,
    /// Kustomizations (and components) loaded, counting each time one is included: 1,000.
    pub max_kustomizations: usize,
    /// Kustomizations within kustomizations: 32 deep.
    pub max_depth: usize,
    /// Bytes read from files (each time they are read), generated and patched in: 64 MiB.
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_resources: 10_000,
            max_kustomizations: 1_000,
            max_depth: 32,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}
