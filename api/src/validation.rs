//! What kube-apiserver would refuse, said once: the syntax of names, label keys and values and
//! selectors, as the CRD schemas declare it (patterns and CEL rules, enforced at `kubectl apply`)
//! and as plain functions (for objects stored before the schema had a rule, and on Kubernetes
//! 1.24, which does not run CEL rules). The webhook never injects a Watcher these functions
//! find a problem with, and the Watcher's `Ready` condition says why.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::json;

/// A DNS-1123 label: what container, volume and port names must be.
pub const DNS1123_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters (letters, digits, `-`, `_`, `.`; alphanumeric at both ends).
pub const LABEL_KEY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or at most 63 characters of the name syntax.
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
/// The longest label key: a 253-character prefix, `/` and a 63-character name.
pub const LABEL_KEY_MAX: usize = 253 + 1 + 63;
/// The most `matchLabels` entries of a selector. kube-apiserver (1.25+) estimates the cost of a
/// CEL rule from the largest object the schema allows, and refuses the CRD when the estimate
/// exceeds its budget: every list, map and string a rule reads is bounded, well beyond what a
/// selector ever holds.
pub const MAX_MATCH_LABELS: usize = 64;
/// The most `matchExpressions` of a selector.
pub const MAX_MATCH_EXPRESSIONS: usize = 64;
/// The most values of one `matchExpressions` requirement.
pub const MAX_EXPRESSION_VALUES: usize = 256;
/// The most rewrite rules of an ImagePolicy.
pub const MAX_REWRITES: usize = 256;
/// The longest `from` or `to` of an ImagePolicy rule: an image reference is at most 255
/// characters of name, a 128-character tag and a digest.
pub const MAX_IMAGE_LENGTH: usize = 1024;
/// The most init containers a Watcher adds.
pub const MAX_INIT_CONTAINERS: usize = 16;
/// The most `appVolumeMounts` of a Watcher.
pub const MAX_APP_VOLUME_MOUNTS: usize = 16;
/// The most `appContainers` of a Watcher.
pub const MAX_APP_CONTAINERS: usize = 64;
/// The most `transferEnv` entries of a Watcher.
pub const MAX_TRANSFER_ENV: usize = 16;
/// The most names of one `transferEnv` entry.
pub const MAX_TRANSFER_ENV_NAMES: usize = 64;
/// The most `podAnnotations` of a Watcher.
pub const MAX_POD_ANNOTATIONS: usize = 64;
/// The longest value of a Watcher's `podAnnotations` (a pod's annotations hold 256 KiB in all).
pub const MAX_POD_ANNOTATION_VALUE: usize = 32 * 1024;
/// The longest mountPath or subPath (Linux's `PATH_MAX`).
pub const MAX_PATH_LENGTH: usize = 4096;
/// The selector operators of a label selector.
pub const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

pub use watcher_base::is_dns1123_label;

/// Whether `name` is the name part of a label key (or a label value, non-empty).
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    (1..=63).contains(&bytes.len())
        && alnum(bytes.first())
        && alnum(bytes.last())
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `key` is a label key.
pub fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => prefix.len() <= 253 && prefix.split('.').all(is_dns1123_label) && is_label_name(name),
        None => is_label_name(key),
    }
}

/// Whether `value` is a label value (empty is one).
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// What is wrong with a label selector, each problem naming its field under `field`.
pub fn selector_problems(selector: &LabelSelector, field: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        if !is_label_key(key) {
            problems.push(format!("{field}.matchLabels: {key:?} is not a label key"));
        }
        if !is_label_value(value) {
            problems.push(format!("{field}.matchLabels[{key:?}]: {value:?} is not a label value"));
        }
    }
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        // A closure, not a string: the webhook checks every Watcher it injects, and a valid
        // selector should cost no allocation.
        let at = || format!("{field}.matchExpressions[{i}]");
        if !is_label_key(&requirement.key) {
            problems.push(format!("{}.key: {:?} is not a label key", at(), requirement.key));
        }
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                problems.push(format!("{}.values: required with operator {}", at(), requirement.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                problems.push(format!("{}.values: must be empty with operator {}", at(), requirement.operator));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                problems.push(format!("{}.operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist", at()))
            }
        }
        for value in values.iter().filter(|v| !is_label_value(v)) {
            problems.push(format!("{}.values: {value:?} is not a label value", at()));
        }
    }
    problems
}

/// What in a container of a Watcher (its sidecar or an init container, at `field`) a pod would
/// refuse, besides its name and image: env names, empty mountPaths.
pub fn container_problems(container: &k8s_openapi::api::core::v1::Container, field: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, env) in container.env.iter().flatten().enumerate() {
        if env.name.is_empty() || env.name.contains('=') {
            problems.push(format!("{field}.env[{i}].name: {:?} is not an environment variable name", env.name));
        }
    }
    for (i, mount) in container.volume_mounts.iter().flatten().enumerate() {
        if mount.mount_path.is_empty() {
            problems.push(format!("{field}.volumeMounts[{i}].mountPath: required"));
        }
    }
    problems
}

/// The schema of a label selector with the rules kube-apiserver applies to one: label syntax
/// for keys and values, the four operators, values with `In`/`NotIn` only. Every list, map and
/// string is bounded ([`MAX_MATCH_LABELS`], [`MAX_MATCH_EXPRESSIONS`], [`MAX_EXPRESSION_VALUES`],
/// label lengths), so the CEL rules' estimated cost stays within kube-apiserver's budget.
pub fn label_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let operator_max = OPERATORS.iter().map(|o| o.len()).max().unwrap_or_default();
    schemars::json_schema!({
        "description": "A label selector: matchLabels and matchExpressions, ANDed. An empty selector selects every pod.",
        "type": "object",
        "nullable": true,
        "properties": {
            "matchLabels": {
                "description": "Labels that must be present with these values.",
                "type": "object",
                "maxProperties": MAX_MATCH_LABELS,
                "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
                "x-kubernetes-validations": [{
                    "rule": format!("self.all(k, size(k) <= {LABEL_KEY_MAX} && k.matches('{}'))", LABEL_KEY.replace('\\', "\\\\")),
                    "message": "every key must be a label key: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                }],
            },
            "matchExpressions": {
                "description": "Requirements on labels.",
                "type": "array",
                "maxItems": MAX_MATCH_EXPRESSIONS,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"description": "The label key.", "type": "string", "maxLength": LABEL_KEY_MAX, "pattern": LABEL_KEY},
                        "operator": {"description": "In, NotIn, Exists or DoesNotExist.", "type": "string", "maxLength": operator_max, "enum": OPERATORS},
                        "values": {
                            "description": "Label values: required with In and NotIn, empty with Exists and DoesNotExist.",
                            "type": "array",
                            "maxItems": MAX_EXPRESSION_VALUES,
                            "items": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
                        },
                    },
                    "x-kubernetes-validations": [
                        {
                            "rule": "!(self.operator == 'In' || self.operator == 'NotIn') || (has(self.values) && size(self.values) > 0)",
                            "message": "values are required with operator In or NotIn",
                        },
                        {
                            "rule": "!(self.operator == 'Exists' || self.operator == 'DoesNotExist') || !has(self.values) || size(self.values) == 0",
                            "message": "values must be empty with operator Exists or DoesNotExist",
                        },
                    ],
                },
            },
        },
    })
}

/// The bound of a list under a Watcher's spec that has none of its own (a container's `args`,
/// `env`, `ports`, ...): far beyond any pod, there only so a spec-wide CEL rule has a cost.
pub const MAX_ANY_LIST: usize = 4096;
/// The bound of a map under a Watcher's spec that has none of its own (`resources.limits`, ...).
pub const MAX_ANY_MAP: usize = 4096;
/// The bound of a string under a Watcher's spec that has none of its own: a pod is at most
/// 3 MiB as kube-apiserver takes it.
pub const MAX_ANY_STRING: usize = 3 * 1024 * 1024;

/// The rules of a Watcher's spec that read two fields: init container names differ from the
/// sidecar's, and `appVolumeMounts` needs `volume`. kube-apiserver (1.25+) estimates each rule's
/// cost from the largest object the schema allows, so every list, map and string under the
/// spec gets a bound ([`MAX_ANY_LIST`], [`MAX_ANY_MAP`], [`MAX_ANY_STRING`]) where it has none.
pub fn watcher_spec_rules(schema: &mut schemars::Schema) {
    fn bound(node: &mut serde_json::Value) {
        let Some(fields) = node.as_object_mut() else { return };
        // `["object", "null"]` before kube makes it `nullable`.
        let kind = match fields.get("type") {
            Some(serde_json::Value::String(kind)) => Some(kind.clone()),
            Some(serde_json::Value::Array(kinds)) => {
                kinds.iter().filter_map(|k| k.as_str()).find(|k| *k != "null").map(str::to_owned)
            }
            _ => None,
        };
        match kind.as_deref() {
            Some("array") if !fields.contains_key("maxItems") => {
                fields.insert("maxItems".into(), json!(MAX_ANY_LIST));
            }
            Some("string") if !fields.contains_key("maxLength") => {
                fields.insert("maxLength".into(), json!(MAX_ANY_STRING));
            }
            Some("object") if fields.get("additionalProperties").is_some_and(|a| a.is_object()) => {
                fields.entry("maxProperties").or_insert(json!(MAX_ANY_MAP));
            }
            _ => {}
        }
        if let Some(properties) = fields.get_mut("properties").and_then(|p| p.as_object_mut()) {
            properties.values_mut().for_each(bound);
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = fields.get_mut(key) {
                bound(child);
            }
        }
    }
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.values_mut().for_each(bound);
    }
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([
            {
                "rule": "!has(self.initContainers) || self.initContainers.all(c, c.name != self.container.name)",
                "message": "initContainers: a name must differ from container.name",
            },
            {
                "rule": "!has(self.appVolumeMounts) || size(self.appVolumeMounts) == 0 || has(self.volume)",
                "message": "appVolumeMounts needs volume: the Watcher's volume is what they mount",
            },
        ]),
    );
}

/// Adds to `schema` (of an object with a `name` property) that the name is a DNS-1123 label.
pub(crate) fn name_is_dns1123_label(schema: &mut schemars::Schema) {
    if let Some(name) = schema.get_mut("properties").and_then(|p| p.get_mut("name")).and_then(|n| n.as_object_mut()) {
        name.insert("maxLength".into(), json!(63));
        name.insert("pattern".into(), json!(DNS1123_LABEL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        for good in ["a", "log-watcher", "a1", &"x".repeat(63)] {
            assert!(is_dns1123_label(good), "{good}");
        }
        for bad in ["", "Bad_Name", "-a", "a-", "a.b", "A", &"x".repeat(64), "é"] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn label_keys_and_values() {
        let longest_prefix = format!("{0}.{0}.{0}.{1}", "p".repeat(63), "p".repeat(61));
        assert_eq!(longest_prefix.len(), 253);
        for good in ["app", "app.kubernetes.io/name", "a_b.c-d", "x/y", &format!("{longest_prefix}/a")] {
            assert!(is_label_key(good), "{good}");
        }
        let long_label = format!("{}/a", "p".repeat(64));
        let too_long = format!("{longest_prefix}p/a");
        for bad in
            ["", "/a", "a/", "-a", "a b", "x' || true", "A.B/c", "a/b/c", &"k".repeat(64), &long_label, &too_long]
        {
            assert!(!is_label_key(bad), "{bad}");
        }
        for good in ["", "web", "v1.2_3-x", &"v".repeat(63)] {
            assert!(is_label_value(good), "{good}");
        }
        for bad in ["x' || true", "-web", "web-", "a b", "\"", "\\", &"v".repeat(64), "ünï"] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn the_functions_and_the_patterns_agree() {
        // The schema's regular expressions (RE2 in kube-apiserver, the same syntax here) and the
        // functions the webhook uses must refuse the same strings.
        let key = regex::Regex::new(LABEL_KEY).expect("regex");
        let value = regex::Regex::new(LABEL_VALUE).expect("regex");
        let label = regex::Regex::new(DNS1123_LABEL).expect("regex");
        let samples = [
            "",
            "a",
            "A",
            "a/b",
            "a.b/c",
            "x' || true",
            "app.kubernetes.io/name",
            "-a",
            "a-",
            "a_b",
            "a..b/c",
            "1",
            "a/",
            "/a",
            "a b",
            "web-1",
            "Web.1",
            &"k".repeat(63),
            &"k".repeat(64),
            "ä",
        ];
        for s in samples {
            assert_eq!(key.is_match(s) && s.len() <= LABEL_KEY_MAX, is_label_key(s), "key {s:?}");
            assert_eq!(value.is_match(s), is_label_value(s), "value {s:?}");
            assert_eq!(label.is_match(s) && s.len() <= 63, is_dns1123_label(s), "label {s:?}");
        }
    }

    #[test]
    fn every_selector_problem_names_its_field() {
        let selector: LabelSelector = serde_json::from_value(json!({
        "matchLabels": {"app": "web", "bad key": "x' || true"},
        "matchExpressions": [
            {"key": "tier", "operator": "Like", "values": ["a"]},
            {"key": "tier", "operator": "Exists", "values": ["a"]},
            {"key": "tier", "operator": "In"},
            {"key": "tier", "operator": "In", "values": ["front", "b\"ack"]},
        ]}))
        .expect("selector");
        assert_eq!(
            selector_problems(&selector, "spec.selector"),
            [
                "spec.selector.matchLabels: \"bad key\" is not a label key",
                "spec.selector.matchLabels[\"bad key\"]: \"x' || true\" is not a label value",
                "spec.selector.matchExpressions[0].operator: \"Like\" is not one of In, NotIn, Exists, DoesNotExist",
                "spec.selector.matchExpressions[1].values: must be empty with operator Exists",
                "spec.selector.matchExpressions[2].values: required with operator In",
                "spec.selector.matchExpressions[3].values: \"b\\\"ack\" is not a label value",
            ]
        );
        let fine: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "DoesNotExist"}, {"key": "tier", "operator": "NotIn", "values": ["db"]}]}))
        .expect("selector");
        assert!(selector_problems(&fine, "spec.selector").is_empty());
    }
}
