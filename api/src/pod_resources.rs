//! The `resources` of the pods At and PodSet create: requests and limits, each a Kubernetes
//! quantity (`100m`, `64Mi`, `1`), checked at apply time. A namespace with a ResourceQuota on cpu
//! or memory refuses a pod whose containers do not state them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Kubernetes quantity as written: a string, or a number (`cpu: 1`), kept as its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct QuantityText(pub String);

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => Ok(Self(text)),
            serde_json::Value::Number(number) => Ok(Self(number.to_string())),
            other => Err(serde::de::Error::custom(format!("a quantity is a string or a number, not {other}"))),
        }
    }
}

/// The pattern kube-apiserver's quantities follow.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Requests and limits of the container of an At's or a PodSet's pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodResources {
    /// What the container requests, e.g. `{cpu: 10m, memory: 16Mi}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantities_schema")]
    pub requests: BTreeMap<String, QuantityText>,
    /// What the container may use at most, e.g. `{cpu: 100m, memory: 32Mi}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "quantities_schema")]
    pub limits: BTreeMap<String, QuantityText>,
}

impl PodResources {
    /// As a container's `resources`; `None` when it states nothing.
    pub fn requirements(&self) -> Option<ResourceRequirements> {
        let list = |values: &BTreeMap<String, QuantityText>| {
            (!values.is_empty()).then(|| values.iter().map(|(k, v)| (k.clone(), Quantity(v.0.clone()))).collect())
        };
        let requirements =
            ResourceRequirements { claims: None, limits: list(&self.limits), requests: list(&self.requests) };
        (requirements.limits.is_some() || requirements.requests.is_some()).then_some(requirements)
    }
}

/// `{resource: quantity}`: a string of kube-apiserver's quantity pattern, or a number.
fn quantities_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 16,
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": 64
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_strings_are_quantities() {
        let read: PodResources =
            serde_json::from_value(serde_json::json!({"requests": {"cpu": 1, "memory": "16Mi"}})).expect("resources");
        let requirements = read.requirements().expect("stated");
        let requests = requirements.requests.expect("requests");
        assert_eq!(requests["cpu"], Quantity("1".into()));
        assert_eq!(requests["memory"], Quantity("16Mi".into()));
        assert!(requirements.limits.is_none());
        assert_eq!(PodResources::default().requirements(), None);
        assert!(serde_json::from_value::<PodResources>(serde_json::json!({"limits": {"cpu": true}})).is_err());
    }
}
