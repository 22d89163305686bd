//! YAML documents decoded within a budget. An alias (`*name`) repeats the node it names, and
//! serde_yaml_ng bounds how many times aliases are followed (100 per event of the text), not
//! what they add up to: a 300 KB file of 100,000 aliases to a 5 KB string decodes to 500 MB.
//! Here every node and string is counted as it is built, and a document that would weigh more
//! than [`MAX_DECODED_BYTES`] stops decoding there, so a manifest in a GitRepo or a Bundle
//! costs what its decoded objects weigh at most, aliases or not.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What the documents of one YAML file may weigh once decoded: 64 MiB, counting each node as
/// 64 bytes and each string by its length. A file within `--fleet-max-file-bytes` (10 MiB)
/// and without aliases stays well within it. Fixed.
pub const MAX_DECODED_BYTES: usize = 64 * 1024 * 1024;

/// What one node costs beyond its strings: about a `serde_json::Value` and its place in
/// its parent.
const NODE_BYTES: usize = 64;

/// The documents of a YAML (or JSON) text, decoded within [`MAX_DECODED_BYTES`] together;
/// an empty document is `Null`.
pub fn documents(text: &str) -> Vec<Result<Value, String>> {
    let left = Cell::new(MAX_DECODED_BYTES);
    let mut decoded = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Budget { left: &left }
            .deserialize(document)
            .map_err(|e| e.to_string());
        let failed = value.is_err();
        decoded.push(value);
        if failed {
            break;
        }
    }
    decoded
}

/// Builds a value, taking what each node weighs from what is left.
#[derive(Clone, Copy)]
struct Budget<'a> {
    left: &'a Cell<usize>,
}

impl Budget<'_> {
    fn take<E: de::Error>(self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "decodes to more than {MAX_DECODED_BYTES} bytes (YAML aliases repeat what they name); expand fewer aliases or split the file"
            ))),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Budget<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Budget<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.take(NODE_BYTES)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.take(NODE_BYTES)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.take(NODE_BYTES)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.take(NODE_BYTES)?;
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.take(NODE_BYTES + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take(NODE_BYTES)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take(NODE_BYTES)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take(NODE_BYTES)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key_seed(Key(self))? {
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A mapping's key, as text whatever its scalar type (`1: x` has the key `"1"`), as
/// Kubernetes' YAML decoding makes it.
struct Key<'a>(Budget<'a>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key that is a scalar")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.0.take(v.len())?;
        Ok(v.to_owned())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn documents_decode_as_kubernetes_reads_them() {
        let text = "a: 1\nb: [x, true, 2.5, null]\n3: three\n---\n---\nkind: X\nanchored: &s hi\nalias: *s\n";
        let decoded: Vec<Value> = documents(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            decoded,
            vec![
                json!({"a": 1, "b": ["x", true, 2.5, null], "3": "three"}),
                Value::Null,
                json!({"kind": "X", "anchored": "hi", "alias": "hi"}),
            ]
        );
    }

    #[test]
    fn aliases_that_add_up_past_the_budget_stop_decoding() {
        // 300 KB of text that serde_yaml_ng alone decodes to 500 MB.
        let text = format!(
            "a: &a \"{}\"\nb: [{}]\n",
            "x".repeat(5_000),
            vec!["*a"; 100_000].join(",")
        );
        let decoded = documents(&text);
        let error = decoded.last().unwrap().as_ref().unwrap_err();
        assert!(error.contains("aliases repeat what they name"), "{error}");
        // The same count of small aliases is fine.
        let text = format!("a: &a x\nb: [{}]\n", vec!["*a"; 100_000].join(","));
        assert!(documents(&text)[0].is_ok());
    }
}
