//! The two representations the controllers read a kind in: its Rust type (Cluster API's,
//! Fleet's, a provider's, k8s-openapi's), which the crate owning the type lists nowhere, or
//! JSON ([`DynamicObject`]) for a kind known only by its `apiVersion` and `kind`.

use std::any::Any;
use std::fmt::Debug;
use std::hash::Hash;

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::Value;

/// What kube-runtime needs to know of a kind beyond its Rust type: nothing for a kind with a
/// Rust type of its own, the resource for a kind held as JSON.
pub trait KindKey: Clone + Eq + Hash + Debug + Send + Sync + Unpin + Sized + 'static {
    fn of(resource: &ApiResource) -> Self;
    /// An object's `apiVersion` and `kind`.
    fn type_names<K: Resource<DynamicType = Self> + Any>(object: &K) -> (String, String);
}

impl KindKey for () {
    fn of(_: &ApiResource) {}

    fn type_names<K: Resource<DynamicType = ()>>(_: &K) -> (String, String) {
        (K::api_version(&()).into_owned(), K::kind(&()).into_owned())
    }
}

impl KindKey for ApiResource {
    fn of(resource: &ApiResource) -> ApiResource {
        resource.clone()
    }

    fn type_names<K: Resource<DynamicType = ApiResource> + Any>(object: &K) -> (String, String) {
        (object as &dyn Any)
            .downcast_ref::<DynamicObject>()
            .and_then(|object| object.types.as_ref())
            .map(|t| (t.api_version.clone(), t.kind.clone()))
            .unwrap_or_default()
    }
}

/// A kind a cache can hold, in the one representation this process reads it in: any kind
/// with a Rust type (Cluster API's, Fleet's, a provider's, k8s-openapi's) as its struct, which
/// the crate that owns the type needs to list nowhere, or JSON ([`DynamicObject`]).
pub trait Cached: Resource<DynamicType: KindKey> + Clone + Debug + Send + Sync + 'static {
    /// The object, from the JSON the watch delivered.
    fn from_json(object: DynamicObject) -> Result<Self, serde_json::Error>;
    /// What kube-runtime needs to know of the kind beyond the Rust type.
    fn dynamic_type(resource: &ApiResource) -> Self::DynamicType;
    /// The object's `apiVersion` and `kind`.
    fn type_names(&self) -> (String, String);
}

impl<K> Cached for K
where
    K: Resource<DynamicType: KindKey>
        + serde::de::DeserializeOwned
        + Clone
        + Debug
        + Send
        + Sync
        + 'static,
{
    fn from_json(object: DynamicObject) -> Result<Self, serde_json::Error> {
        let object: Box<dyn Any> = Box::new(object);
        match object.downcast::<K>() {
            // Held as JSON: as it came.
            Ok(same) => Ok(*same),
            Err(object) => typed(
                *object
                    .downcast::<DynamicObject>()
                    .expect("the watch's JSON"),
            ),
        }
    }

    fn dynamic_type(resource: &ApiResource) -> K::DynamicType {
        K::DynamicType::of(resource)
    }

    fn type_names(&self) -> (String, String) {
        K::DynamicType::type_names(self)
    }
}

/// Moves a JSON object's fields into its typed struct (no copy of spec or status).
fn typed<K: serde::de::DeserializeOwned>(object: DynamicObject) -> Result<K, serde_json::Error> {
    let mut fields = match object.data {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    fields.insert("metadata".into(), serde_json::to_value(object.metadata)?);
    if let Some(types) = object.types {
        fields.insert("apiVersion".into(), Value::String(types.api_version));
        fields.insert("kind".into(), Value::String(types.kind));
    }
    serde_json::from_value(Value::Object(fields))
}
