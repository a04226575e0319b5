//! The CRD schemas as kube-apiserver applies them at `kubectl apply`: the OpenAPI rules
//! (types, patterns, enums, bounds, formats; unknown fields refused, as kubectl's strict field
//! validation does) checked here by a small validator of that subset, and the CEL
//! `x-kubernetes-validations` evaluated by kube-rs's `kube-cel`, as kube-apiserver would.
//! Every sample of `deploy/samples/` and every example of README is valid; each mistake a
//! user made on a real cluster is refused, naming the field.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn crd(kind: &str) -> CustomResourceDefinition {
    watcher_api::crds().into_iter().find(|c| c.spec.names.kind == kind).unwrap_or_else(|| panic!("no CRD {kind}"))
}

fn schema(kind: &str) -> Value {
    let crd = crd(kind);
    let version = &crd.spec.versions[0];
    let schema = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema");
    serde_json::to_value(schema).expect("serialises")
}

/// The schema node at `path` (property names; `[]` for items, `{}` for additionalProperties).
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(schema, |node, step| match step {
        "[]" => &node["items"],
        "{}" => &node["additionalProperties"],
        name => &node["properties"][name],
    })
}

/// What kube-apiserver's OpenAPI validation (the structural subset CRDs use) says of `value`.
fn openapi_errors(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{path}: null"));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true || schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let typed = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !typed {
        errors.push(format!("{path}: not of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array().filter(|a| !a.contains(value)) {
        errors.push(format!("{path}: Unsupported value {value}: supported values: {allowed:?}"));
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|min| length < min) {
            errors.push(format!("{path}: should be at least {} chars long", schema["minLength"]));
        }
        if schema["maxLength"].as_u64().is_some_and(|max| length > max) {
            errors.push(format!("{path}: Too long"));
        }
        if let Some(pattern) = schema["pattern"].as_str()
            && !regex::Regex::new(pattern).expect("pattern").is_match(text)
        {
            errors.push(format!("{path}: should match '{pattern}'"));
        }
        if schema["format"] == "date-time" {
            let rfc3339 = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
                .expect("regex");
            if !rfc3339.is_match(text) {
                errors.push(format!("{path}: must be a date-time"));
            }
        }
    }
    if let Some(number) = value.as_f64()
        && schema["minimum"].as_f64().is_some_and(|min| number < min)
    {
        errors.push(format!("{path}: should be greater than or equal to {}", schema["minimum"]));
    }
    if let Some(items) = value.as_array() {
        if schema["minItems"].as_u64().is_some_and(|min| (items.len() as u64) < min) {
            errors.push(format!("{path}: should have at least {} items", schema["minItems"]));
        }
        if schema["maxItems"].as_u64().is_some_and(|max| (items.len() as u64) > max) {
            errors.push(format!("{path}: Too many: {}: must have at most {} items", items.len(), schema["maxItems"]));
        }
        for (i, item) in items.iter().enumerate() {
            openapi_errors(&schema["items"], item, &format!("{path}[{i}]"), errors);
        }
        // `x-kubernetes-list-type`: kube-apiserver refuses a repeated item (`set`) or key (`map`).
        let key = |item: &Value| match schema["x-kubernetes-list-type"].as_str() {
            Some("set") => Some(item.clone()),
            Some("map") => Some(json!(
                schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|k| item[k].clone())
                    .collect::<Vec<_>>()
            )),
            _ => None,
        };
        for (i, item) in items.iter().enumerate() {
            if let Some(k) = key(item)
                && items[..i].iter().any(|earlier| key(earlier).as_ref() == Some(&k))
            {
                errors.push(format!("{path}[{i}]: Duplicate value: {k}"));
            }
        }
    }
    if let Some(fields) = value.as_object() {
        if schema["maxProperties"].as_u64().is_some_and(|max| (fields.len() as u64) > max) {
            errors.push(format!(
                "{path}: Too many: {}: must have at most {} items",
                fields.len(),
                schema["maxProperties"]
            ));
        }
        for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if fields.get(required).is_none_or(Value::is_null) {
                errors.push(format!("{path}.{required}: Required value"));
            }
        }
        for (name, field) in fields {
            let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            match (schema["properties"].get(name), schema.get("additionalProperties")) {
                (Some(property), _) => openapi_errors(property, field, &at, errors),
                (None, Some(additional)) if additional.is_object() => openapi_errors(additional, field, &at, errors),
                // ObjectMeta is kube-apiserver's own, not the CRD's.
                _ if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&name.as_str()) => {}
                _ => errors.push(format!("{at}: unknown field")),
            }
        }
    }
}

/// Every error kube-apiserver would give `object` at create: OpenAPI first, then CEL (which
/// runs only on an object the OpenAPI rules accept, as in kube-apiserver).
fn refusals(object: &Value) -> Vec<String> {
    thread_local! {
        /// Each kind's schema and its compiled rules, made once a thread (`validate` would
        /// compile every rule again for each object).
        static SCHEMAS: RefCell<HashMap<String, Rc<(Value, kube_cel::CompiledSchema)>>> = RefCell::default();
    }
    let kind = object["kind"].as_str().expect("kind");
    let compiled = SCHEMAS.with_borrow_mut(|schemas| {
        let entry = schemas.entry(kind.to_owned()).or_insert_with(|| {
            let schema = schema(kind);
            let compiled = kube_cel::compile_schema(&schema);
            Rc::new((schema, compiled))
        });
        Rc::clone(entry)
    });
    let (schema, rules) = &*compiled;
    let mut errors = Vec::new();
    openapi_errors(schema, object, "", &mut errors);
    if errors.is_empty()
        && let Err(failures) = kube_cel::Validator::new().validate_compiled(rules, object, None)
    {
        errors.extend(failures.iter().map(|f| format!("{}: {}", f.field_path, f.message)));
    }
    errors
}

fn watcher(spec: Value) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "w"}, "spec": spec})
}

fn sidecar() -> Value {
    json!({"name": "log-watcher", "image": "busybox:1.36"})
}

/// The objects of a YAML file (several documents allowed).
fn yaml_objects(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn each_rule_is_where_design_says() {
    let watcher = schema("Watcher");
    let spec = node(&watcher, "spec");
    assert_eq!(node(spec, "container.name")["pattern"], watcher_api::validation::DNS1123_LABEL);
    assert_eq!(node(spec, "container.name")["maxLength"], 63);
    assert!(node(spec, "container")["required"].as_array().expect("required").contains(&json!("image")));
    assert_eq!(node(spec, "volume.name")["pattern"], watcher_api::validation::DNS1123_LABEL);
    assert_eq!(node(spec, "updatePolicy.maxUnavailable")["minimum"], 1.0);
    let policy = schema("ImagePolicy");
    let cluster = schema("ClusterWatcher");
    for selector in [
        node(spec, "selector"),
        node(&policy, "spec.namespaceSelector"),
        node(&cluster, "spec.selector"),
        node(&cluster, "spec.namespaceSelector"),
    ] {
        assert_eq!(node(selector, "matchLabels.{}")["pattern"], watcher_api::validation::LABEL_VALUE);
        assert!(
            node(selector, "matchLabels")["x-kubernetes-validations"][0]["rule"]
                .as_str()
                .expect("rule")
                .contains("matches")
        );
        assert_eq!(node(selector, "matchExpressions.[].key")["pattern"], watcher_api::validation::LABEL_KEY);
        assert_eq!(
            node(selector, "matchExpressions.[].operator")["enum"],
            json!(["In", "NotIn", "Exists", "DoesNotExist"])
        );
        assert_eq!(node(selector, "matchExpressions.[]")["x-kubernetes-validations"].as_array().map(Vec::len), Some(2));
        assert_eq!(node(selector, "matchExpressions.[].values.[]")["pattern"], watcher_api::validation::LABEL_VALUE);
    }
    assert_eq!(node(&schema("At"), "spec.schedule")["format"], "date-time");
    assert_eq!(node(&schema("PodSet"), "spec.count")["minimum"], 0.0);
    let policy = schema("ImagePolicy");
    let rewrite = node(&policy, "spec.rewrites.[]");
    assert_eq!(node(rewrite, "from")["minLength"], 1);
    assert!(rewrite["x-kubernetes-validations"][0]["rule"].as_str().expect("rule").contains("endsWith('/')"));
}

/// Only `rule` and `message`: `fieldPath`, `reason`, `messageExpression` and `optionalOldSelf`
/// are refused (strict field validation) or dropped by the older servers the CRDs must install on.
#[test]
fn rules_use_only_what_every_server_from_1_24_reads() {
    fn visit(node: &Value, path: &str, out: &mut Vec<String>) {
        match node {
            Value::Object(fields) => {
                for rule in fields.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
                    let keys: Vec<&str> = rule.as_object().expect("rule").keys().map(String::as_str).collect();
                    if keys != ["message", "rule"] {
                        out.push(format!("{path}: {keys:?}"));
                    }
                }
                for (name, child) in fields {
                    visit(child, &format!("{path}.{name}"), out);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| visit(i, path, out)),
            _ => {}
        }
    }
    let mut problems = Vec::new();
    for kind in ["Watcher", "At", "PodSet", "ImagePolicy"] {
        visit(&schema(kind), kind, &mut problems);
    }
    assert_eq!(problems, Vec::<String>::new());
}

/// The lists, maps and strings of `schema` that a CEL rule's cost depends on and that carry no
/// bound (`maxItems`, `maxProperties`, `maxLength`): everything under a node that carries a rule,
/// and the lists and maps above it (the rule runs once per item). kube-apiserver (1.25+)
/// estimates a rule's cost from the largest object the schema allows and refuses the CRD when
/// the estimate exceeds its budget; a client-side estimate is no proof it fits, a bound is.
fn unbounded(schema: &Value) -> Vec<String> {
    fn problem(node: &Value, path: &str) -> Option<String> {
        let missing = |bound: &str| node.get(bound).is_none().then(|| format!("{path}: no {bound}"));
        match node["type"].as_str() {
            Some("array") => missing("maxItems"),
            Some("string") => missing("maxLength"),
            Some("object") if node["additionalProperties"].is_object() => missing("maxProperties"),
            _ => None,
        }
    }
    fn children(node: &Value, path: &str) -> Vec<(String, Value)> {
        let mut out: Vec<(String, Value)> = node["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, child)| (format!("{path}.{name}"), child.clone()))
            .collect();
        for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
            if node[key].is_object() {
                out.push((format!("{path}{suffix}"), node[key].clone()));
            }
        }
        out
    }
    fn subtree(node: &Value, path: &str, out: &mut Vec<String>) {
        out.extend(problem(node, path));
        for (child_path, child) in children(node, path) {
            subtree(&child, &child_path, out);
        }
    }
    fn walk(node: &Value, path: &str, above: &[String], out: &mut Vec<String>) {
        let mut above = above.to_vec();
        if node["type"] != "string" {
            above.extend(problem(node, path));
        }
        if node.get("x-kubernetes-validations").is_some() {
            out.extend(above.iter().cloned());
            subtree(node, path, out);
        }
        for (child_path, child) in children(node, path) {
            walk(&child, &child_path, &above, out);
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &[], &mut out);
    out.sort();
    out.dedup();
    out
}

/// The walk finds what kube-apiserver would cost without bound, and nothing that is bounded or
/// that no rule reads.
#[test]
fn the_bounds_walk_finds_each_unbounded_list_map_and_string_under_a_rule() {
    let rule = json!([{"rule": "true", "message": "m"}]);
    let cases = [
        (json!({"type": "string", "x-kubernetes-validations": rule}), vec![": no maxLength"]),
        (json!({"type": "string", "maxLength": 8, "x-kubernetes-validations": rule}), vec![]),
        (
            json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 63},
                   "x-kubernetes-validations": rule}),
            vec![": no maxProperties"],
        ),
        (
            json!({"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string"},
                   "x-kubernetes-validations": rule}),
            vec!["{}: no maxLength"],
        ),
        (
            json!({"type": "object", "properties": {"values": {"type": "array", "items": {"type": "string", "maxLength": 63}}},
                   "x-kubernetes-validations": rule}),
            vec![".values: no maxItems"],
        ),
        (
            json!({"type": "array", "items": {"type": "object", "x-kubernetes-validations": rule,
                   "properties": {"from": {"type": "string", "maxLength": 9}}}}),
            vec![": no maxItems"],
        ),
        (
            json!({"type": "object", "properties": {
                "ruled": {"type": "object", "x-kubernetes-validations": rule,
                          "properties": {"name": {"type": "string", "maxLength": 63}}},
                "free": {"type": "array", "items": {"type": "string"}}}}),
            vec![],
        ),
    ];
    for (schema, expected) in cases {
        assert_eq!(unbounded(&schema), expected, "{schema}");
    }
}

/// Every generated CRD bounds what its rules read. The rule kube-apiserver 1.36 refused (its
/// answer, `crd-create-refused-1.36.json`, names the field) is among them.
#[test]
fn every_rule_reads_only_bounded_lists_maps_and_strings() {
    for kind in ["Watcher", "ClusterWatcher", "At", "PodSet", "ImagePolicy"] {
        assert_eq!(unbounded(&schema(kind)), Vec::<String>::new(), "{kind}");
    }
    let refused: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/controller/fixtures/apiserver/crd-create-refused-1.36.json"))
            .expect("fixture"),
    )
    .expect("JSON");
    let field = refused["details"]["causes"][0]["field"].as_str().expect("field");
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("estimated rule cost exceeds budget")));
    // spec.validation.openAPIV3Schema.properties[spec].properties[selector].properties[matchLabels]...
    let path: Vec<&str> =
        field.split(".properties[").skip(1).map(|step| step.split(']').next().expect("name")).collect();
    assert_eq!(path, ["spec", "selector", "matchLabels"]);
    let watcher = schema("Watcher");
    let refused_node = node(&watcher, &path.join("."));
    assert!(refused_node.get("x-kubernetes-validations").is_some());
    assert_eq!(refused_node["maxProperties"], watcher_api::validation::MAX_MATCH_LABELS);
}

/// Each CEL rule within kube-apiserver's cost budget by kube-cel's estimate too (a second
/// opinion only: kube-cel's estimate is not kube-apiserver's).
#[test]
fn rules_stay_within_the_cost_budget() {
    fn rules(node: &Value, out: &mut Vec<(String, Value)>) {
        if let Some(fields) = node.as_object() {
            for rule in fields.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
                out.push((rule["rule"].as_str().expect("rule").to_owned(), node.clone()));
            }
            fields.values().for_each(|child| rules(child, out));
        }
    }
    let mut found = Vec::new();
    for kind in ["Watcher", "ClusterWatcher", "ImagePolicy"] {
        rules(&schema(kind), &mut found);
    }
    assert_eq!(
        found.len(),
        14 + 13,
        "three per selector (the pods' and the canary group's), one per rewrite, two across a Watcher's spec, its \
         podAnnotations and subPath; a ClusterWatcher's as a Watcher's, and three for its namespaceSelector"
    );
    for (rule, node) in found {
        let compiled = kube_cel::compile_schema(&node);
        let warnings = kube_cel::estimate_rule_cost(&rule, &compiled);
        assert!(warnings.is_empty(), "{rule}: {warnings:?}");
    }
}

#[test]
fn samples_and_readme_examples_are_valid() {
    let mut objects = Vec::new();
    for sample in ["watcher", "app-watcher", "clusterwatcher", "at", "podset", "imagepolicy"] {
        let path = format!("{ROOT}/deploy/samples/{sample}.yaml");
        objects.extend(yaml_objects(&std::fs::read_to_string(&path).expect("sample")));
    }
    // README.md and every page of docs/.
    let mut readme = std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README");
    for page in std::fs::read_dir(format!("{ROOT}/docs")).expect("docs/").flatten() {
        readme.push_str(&std::fs::read_to_string(page.path()).expect("page"));
    }
    let mut blocks = 0;
    for block in readme.split("```yaml\n").skip(1).filter_map(|b| b.split("```").next()) {
        if block.contains("apiVersion: watcher.dev/") {
            objects.extend(yaml_objects(block));
            blocks += 1;
        }
    }
    assert!(blocks > 0, "the documentation shows at least one whole object");
    for object in &objects {
        assert_eq!(refusals(object), Vec::<String>::new(), "{object}");
    }
    // The examples of DESIGN's contract, as a user would write them.
    let valid = [
        watcher(json!({"container": sidecar(), "volume": {"name": "logs", "emptyDir": {}},
            "selector": {"matchLabels": {"app": "web", "app.kubernetes.io/part-of": "shop"},
                         "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]},
                                              {"key": "legacy", "operator": "DoesNotExist"},
                                              {"key": "canary", "operator": "Exists", "values": []}]},
            "updatePolicy": {"type": "InPlace", "maxUnavailable": 2}})),
        watcher(json!({"container": sidecar(), "selector": {}})),
        // The sidecar sees the app: every field at once.
        watcher(json!({"container": sidecar(), "volume": {"name": "app-logs", "emptyDir": {}},
            "shareVolumes": "ReadOnly",
            "appVolumeMounts": [{"mountPath": "/var/log/app"}, {"mountPath": "/srv/logs", "subPath": "a/b", "readOnly": true}],
            "appContainers": ["app", "worker"],
            "transferEnv": [{"container": "app", "names": ["SERVICE_NAME", "POD_IP"]}, {"names": ["LEVEL"]}],
            "shareProcessNamespace": true,
            "podAnnotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9102"},
            "initContainers": [{"name": "prepare-watch", "image": "busybox:1.36", "command": ["sh", "-c", "mkdir -p /x"]},
                               {"name": "second", "image": "busybox:1.36"}]})),
        json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher", "metadata": {"name": "log-agent"},
               "spec": {"container": sidecar(), "selector": {"matchLabels": {"app": "web"}},
                        "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["payments"]}]},
                        "updatePolicy": {"type": "Recreate", "partition": 1}}}),
        json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "p"},
               "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"},
                                     {"from": "alpine:latest", "to": "nginx:1.13"}]}}),
    ];
    for object in &valid {
        assert_eq!(refusals(object), Vec::<String>::new(), "{object}");
    }
}

/// What users applied on a real cluster, and much like it: refused at apply time, the field named.
#[test]
fn mistakes_are_refused_naming_the_field() {
    let with_selector = |selector: Value| watcher(json!({"container": sidecar(), "selector": selector}));
    let cases = [
        (watcher(json!({"container": {"name": "Bad_Name", "image": "busybox"}})), "spec.container.name: should match"),
        (watcher(json!({"container": {"name": "log-watcher"}})), "spec.container.image: Required value"),
        (
            watcher(json!({"container": sidecar(), "volume": {"name": "Logs", "emptyDir": {}}})),
            "spec.volume.name: should match",
        ),
        (
            with_selector(json!({"matchExpressions": [{"key": "tier", "operator": "Like", "values": ["a"]}]})),
            "spec.selector.matchExpressions[0].operator: Unsupported value",
        ),
        (
            with_selector(json!({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}]})),
            "values must be empty with operator Exists or DoesNotExist",
        ),
        (
            with_selector(json!({"matchExpressions": [{"key": "tier", "operator": "NotIn"}]})),
            "values are required with operator In or NotIn",
        ),
        (with_selector(json!({"matchLabels": {"app": "x' || true"}})), "spec.selector.matchLabels.app: should match"),
        (with_selector(json!({"matchLabels": {"x' || true": "web"}})), "every key must be a label key"),
        (with_selector(json!({"matchLabels": {"a/b/c": "web"}})), "every key must be a label key"),
        (
            with_selector(
                json!({"matchLabels": (0..65).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            ),
            "spec.selector.matchLabels: Too many: 65: must have at most 64 items",
        ),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "p"},
                "spec": {"rewrites": [{"from": "a", "to": "b".repeat(1025)}]}}),
            "spec.rewrites[0].to: Too long",
        ),
        (
            with_selector(json!({"matchExpressions": [{"key": "bad key", "operator": "Exists"}]})),
            "spec.selector.matchExpressions[0].key: should match",
        ),
        (
            watcher(json!({"container": sidecar(), "updatePolicy": {"maxUnavailable": 0}})),
            "spec.updatePolicy.maxUnavailable: should be greater than or equal to 1",
        ),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "p"},
                "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/alpine:3"}]}}),
            "a prefix (from ending in /) is rewritten to a prefix",
        ),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "p"},
                "spec": {"rewrites": [{"from": "", "to": "x"}]}}),
            "spec.rewrites[0].from: should be at least 1 chars long",
        ),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "p"},
                "spec": {"rewrites": [{"from": "a", "to": "b"}], "namespaceSelector": {"matchLabels": {"mirror": "o n"}}}}),
            "spec.namespaceSelector.matchLabels.mirror: should match",
        ),
        (
            watcher(json!({"container": sidecar(), "appVolumeMounts": [{"mountPath": "/var/log/app"}]})),
            "appVolumeMounts needs volume",
        ),
        (
            watcher(json!({"container": sidecar(), "volume": {"name": "v", "emptyDir": {}},
                "appVolumeMounts": [{"mountPath": "var/log"}]})),
            "spec.appVolumeMounts[0].mountPath: should match '^/'",
        ),
        (
            watcher(json!({"container": sidecar(), "volume": {"name": "v", "emptyDir": {}},
                "appVolumeMounts": [{"mountPath": "/x", "subPath": "a/../../etc"}]})),
            "subPath must be a relative path without '..'",
        ),
        (
            watcher(json!({"container": sidecar(), "initContainers": [{"name": "log-watcher", "image": "busybox"}]})),
            "initContainers: a name must differ from container.name",
        ),
        (
            watcher(json!({"container": sidecar(), "initContainers": [{"name": "a", "image": "busybox"},
                                                                       {"name": "a", "image": "busybox"}]})),
            "spec.initContainers[1]: Duplicate value",
        ),
        (
            watcher(json!({"container": sidecar(), "initContainers": [{"name": "Prepare", "image": "busybox"}]})),
            "spec.initContainers[0].name: should match",
        ),
        (
            watcher(json!({"container": sidecar(), "initContainers": [{"name": "prepare"}]})),
            "spec.initContainers[0].image: Required value",
        ),
        (
            watcher(json!({"container": sidecar(), "podAnnotations": {"watcher.dev/inject": "other"}})),
            "every key must be a qualified name",
        ),
        (
            watcher(json!({"container": sidecar(), "podAnnotations": {"bad key": "x"}})),
            "every key must be a qualified name",
        ),
        (
            watcher(json!({"container": sidecar(), "transferEnv": [{"names": ["A=B"]}]})),
            "spec.transferEnv[0].names[0]: should match",
        ),
        (
            watcher(json!({"container": sidecar(), "transferEnv": [{"container": "App", "names": ["A"]}]})),
            "spec.transferEnv[0].container: should match",
        ),
        (watcher(json!({"container": sidecar(), "appContainers": ["App"]})), "spec.appContainers[0]: should match"),
        (watcher(json!({"container": sidecar(), "shareVolumes": "All"})), "spec.shareVolumes: Unsupported value"),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": "a"},
                "spec": {"schedule": "tomorrow at ten", "command": "echo"}}),
            "spec.schedule: must be a date-time",
        ),
        (
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "p"},
                "spec": {"count": -1, "message": "hi"}}),
            "spec.count: should be greater than or equal to 0",
        ),
    ];
    for (object, expected) in cases {
        let errors = refusals(&object);
        assert!(errors.iter().any(|e| e.contains(expected)), "{object}\nexpected {expected:?}, got {errors:?}");
        // A ClusterWatcher's spec is a Watcher's: refused alike, the same field named.
        if object["kind"] == "Watcher" {
            let mut cluster = object.clone();
            cluster["kind"] = json!("ClusterWatcher");
            let errors = refusals(&cluster);
            assert!(errors.iter().any(|e| e.contains(expected)), "{cluster}\nexpected {expected:?}, got {errors:?}");
        }
    }
    let namespaces = |selector: Value| {
        json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher", "metadata": {"name": "c"},
               "spec": {"container": sidecar(), "namespaceSelector": selector}})
    };
    for (object, expected) in [
        (
            namespaces(json!({"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]})),
            "values must be empty with operator Exists or DoesNotExist",
        ),
        (
            namespaces(json!({"matchLabels": {"team": "x' || true"}})),
            "spec.namespaceSelector.matchLabels.team: should match",
        ),
    ] {
        let errors = refusals(&object);
        assert!(errors.iter().any(|e| e.contains(expected)), "{object}\nexpected {expected:?}, got {errors:?}");
    }
}

/// The schema and the webhook's own check refuse the same Watchers: what a schema without CEL
/// (Kubernetes 1.24) or an object stored before a rule let through, the webhook still refuses.
#[test]
fn the_schema_and_the_webhook_check_agree() {
    let specs = [
        json!({"container": sidecar()}),
        json!({"container": {"name": "Bad_Name", "image": "busybox"}}),
        json!({"container": {"name": "log-watcher"}}),
        json!({"container": sidecar(), "volume": {"name": "Logs", "emptyDir": {}}}),
        json!({"container": sidecar(), "selector": {"matchExpressions": [{"key": "t", "operator": "Like", "values": ["a"]}]}}),
        json!({"container": sidecar(), "selector": {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]}}),
        json!({"container": sidecar(), "selector": {"matchExpressions": [{"key": "t", "operator": "In"}]}}),
        json!({"container": sidecar(), "selector": {"matchLabels": {"app": "x' || true"}}}),
        json!({"container": sidecar(), "selector": {"matchLabels": {"bad key": "web"}}}),
        json!({"container": sidecar(), "selector": {"matchLabels": {"app": "web"}}}),
        json!({"container": sidecar(), "appVolumeMounts": [{"mountPath": "/a"}]}),
        json!({"container": sidecar(), "volume": {"name": "v", "emptyDir": {}}, "appVolumeMounts": [{"mountPath": "a"}]}),
        json!({"container": sidecar(), "volume": {"name": "v", "emptyDir": {}},
               "appVolumeMounts": [{"mountPath": "/a", "subPath": "../b"}]}),
        json!({"container": sidecar(), "volume": {"name": "v", "emptyDir": {}},
               "appVolumeMounts": [{"mountPath": "/a", "subPath": "b/c"}]}),
        json!({"container": sidecar(), "initContainers": [{"name": "log-watcher", "image": "busybox"}]}),
        json!({"container": sidecar(), "initContainers": [{"name": "a", "image": "b"}, {"name": "a", "image": "b"}]}),
        json!({"container": sidecar(), "initContainers": [{"name": "a", "image": "b"}, {"name": "c", "image": "b"}]}),
        json!({"container": sidecar(), "podAnnotations": {"watcher.dev/x": "y"}}),
        json!({"container": sidecar(), "podAnnotations": {"prometheus.io/scrape": "true"}}),
        json!({"container": sidecar(), "transferEnv": [{"names": ["A=B"]}]}),
        json!({"container": sidecar(), "transferEnv": [{"container": "app", "names": ["SERVICE_NAME"]}]}),
        json!({"container": sidecar(), "appContainers": ["App"]}),
    ];
    for spec in specs {
        let object = watcher(spec.clone());
        let parsed: watcher_api::WatcherSpec = serde_json::from_value(spec).expect("spec");
        assert_eq!(refusals(&object).is_empty(), parsed.problems().is_empty(), "{object}: {:?}", parsed.problems());
    }
}
