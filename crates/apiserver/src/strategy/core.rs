//! Core kinds: Secrets (stringData, base64, 1 MiB), ConfigMaps (keys, 1 MiB), Namespaces
//! (the `kubernetes` finalizer and phase).

use base64::Engine;
use serde_json::{Value, json};

use crate::objects;
use crate::objects::NAMESPACE_FINALIZER;
use crate::status::Cause;
use lariat_api::admission::Strategy;

pub struct Secrets;

impl Strategy for Secrets {
    fn admit(&self, object: &mut Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = vec![];
        if let Some(Value::Object(string_data)) =
            object.as_object_mut().and_then(|o| o.remove("stringData"))
        {
            for (key, value) in string_data {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(value.as_str().unwrap_or_default());
                object["data"][key] = json!(encoded);
            }
        }
        let mut size = 0;
        if let Some(data) = object["data"].as_object() {
            for (key, value) in data {
                causes.extend(objects::data_key_causes("data", key));
                // A value that is not base64 is refused by the schema (`format: byte`).
                if let Some(decoded) = value
                    .as_str()
                    .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
                {
                    size += key.len() + decoded.len();
                }
            }
        }
        causes.extend(objects::data_size_causes("data", size));
        if object["type"].is_null() {
            object["type"] = json!("Opaque");
        }
        causes
    }
}

pub struct ConfigMaps;

impl Strategy for ConfigMaps {
    fn admit(&self, object: &mut Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = vec![];
        let mut size = 0;
        if let Some(data) = object["data"].as_object() {
            for (key, value) in data {
                causes.extend(objects::data_key_causes("data", key));
                size += key.len() + value.as_str().map_or(0, str::len);
            }
        }
        if let Some(binary) = object["binaryData"].as_object() {
            for (key, value) in binary {
                causes.extend(objects::data_key_causes("binaryData", key));
                if object["data"].get(key).is_some() {
                    causes.push(Cause::invalid(
                        format!("data[{key}]"),
                        &json!(key),
                        "duplicate of key present in binaryData",
                    ));
                }
                size += key.len()
                    + value
                        .as_str()
                        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
                        .map_or(0, |d| d.len());
            }
        }
        causes.extend(objects::data_size_causes("data", size));
        causes
    }
}

pub struct Namespaces;

impl Strategy for Namespaces {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        // A `spec` that is not an object is refused here, before it is written into (indexing
        // into a string would panic; the probe saw 14 such 500s).
        for field in ["spec", "status"] {
            if !object[field].is_object() && !object[field].is_null() {
                return vec![Cause::type_invalid(field, &object[field], "object")];
            }
        }
        if old.is_none() {
            object["spec"]["finalizers"] = json!([NAMESPACE_FINALIZER]);
            object["status"] = json!({"phase": "Active"});
        }
        vec![]
    }
}
