//! The CRDs: installed, and as this version of the operator has them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{APPLY_CRDS, Report};

/// `--pre`: CRDs installed already (by `watcher-operator crds | kubectl apply`): before 1.25,
/// which stores them without their CEL rules, Helm 4's server-side apply of the chart's `crds/`
/// conflicts with kubectl's, and `helm install` needs `--skip-crds`.
pub(super) async fn installed_crds(
    client: &Client,
    report: &mut Report,
    version: &k8s_openapi::apimachinery::pkg::version::Info,
) {
    const GROUP: &str = "permissions";
    const NAME: &str = "CRDs";
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    match api.get_opt("watchers.watcher.dev").await {
        Ok(None) => {
            report.pass(GROUP, NAME, "not installed yet: `helm install` and `kubectl apply -k deploy/` create them")
        }
        Ok(Some(_)) if stores_validation_rules(version) => report.pass(
            GROUP,
            NAME,
            "installed already: with Helm, `helm install --skip-crds` keeps them as they are (Helm 4 would apply \
             the chart's crds/ over them, a conflict wherever they differ); upgrade them with `watcher-operator crds \
             | kubectl apply --server-side -f -`",
        ),
        Ok(Some(_)) => report.warn(
            GROUP,
            NAME,
            format!(
                "installed already, and Kubernetes {} stores them without their CEL rules: Helm 4's apply of the \
                 chart's crds/ would conflict with the installed ones",
                version.git_version
            ),
            "with Helm, install the chart with `helm install --skip-crds` (`kubectl apply -k deploy/` needs nothing)",
        ),
        Err(error) => report.warn(
            GROUP,
            NAME,
            format!("cannot read the CRDs: {}", crate::causes(&error)),
            "check that you may get customresourcedefinitions",
        ),
    }
}

/// Every CRD of this binary: installed, established, and equal to this binary's as the API
/// server of `version` stores it.
pub(super) async fn crds(
    client: &Client,
    report: &mut Report,
    version: &k8s_openapi::apimachinery::pkg::version::Info,
) {
    let stores_rules = stores_validation_rules(version);
    const GROUP: &str = "crds";
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for wanted in watcher_api::crds() {
        let name = wanted.name_any();
        let installed = match api.get_opt(&name).await {
            Ok(Some(installed)) => installed,
            Ok(None) => {
                report.fail(GROUP, &name, "not installed", &format!("install the CRDs: {APPLY_CRDS}"));
                continue;
            }
            Err(error) => {
                report.fail(GROUP, &name, format!("cannot read it: {error}"), "check your access: `kubectl get crd`");
                continue;
            }
        };
        let established = installed
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if !established {
            report.fail(
                GROUP,
                &name,
                "installed but not established: the API server does not serve it yet",
                &format!("`kubectl describe crd {name}` shows why (a name conflict, a schema error)"),
            );
            continue;
        }
        let wanted = if stores_rules { wanted } else { without_validation_rules(wanted) };
        match crd_difference(&wanted, &installed) {
            None if stores_rules => report.pass(GROUP, &name, "established, as this binary defines it"),
            None => report.pass(
                GROUP,
                &name,
                format!(
                    "established, as this binary defines it (Kubernetes {} stores no CEL rules: the schema checks them \
                     from 1.25)",
                    version.git_version
                ),
            ),
            Some(difference) => report.fail(
                GROUP,
                &name,
                difference,
                &format!("upgrade the CRDs to this binary's (Helm does not): {APPLY_CRDS}"),
            ),
        }
    }
}

/// Whether kube-apiserver of `version` keeps a CRD's `x-kubernetes-validations`: from 1.25 (the
/// CEL feature on by default). 1.24 stores a CRD without them (`crd-watchers-stored-1.24.json`),
/// which is not a difference from this binary's.
pub(crate) fn stores_validation_rules(version: &k8s_openapi::apimachinery::pkg::version::Info) -> bool {
    !watcher_admission::ServerVersion::of(version).is_some_and(|v| v.major == 1 && !v.at_least(25))
}

/// Drops every `x-kubernetes-validations` of `value`, as a server without CEL stores a CRD.
pub(crate) fn strip_validation_rules(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.remove("x-kubernetes-validations");
            fields.values_mut().for_each(strip_validation_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_validation_rules),
        _ => {}
    }
}

/// `crd` as a server without CEL stores it: every `x-kubernetes-validations` dropped.
pub(super) fn without_validation_rules(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).unwrap_or_default();
    strip_validation_rules(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}

/// How an installed CRD differs from this binary's, per served version and schema property.
pub(super) fn crd_difference(
    wanted: &CustomResourceDefinition,
    installed: &CustomResourceDefinition,
) -> Option<String> {
    let version_names =
        |crd: &CustomResourceDefinition| crd.spec.versions.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
    for version in &wanted.spec.versions {
        let Some(theirs) = installed.spec.versions.iter().find(|v| v.name == version.name) else {
            return Some(format!(
                "version {} missing (installed: {}): older than this binary",
                version.name,
                version_names(installed).join(", ")
            ));
        };
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            normalized(serde_json::to_value(&v.schema).unwrap_or_default())
        };
        let (ours, theirs) = (schema(version), schema(theirs));
        if ours == theirs {
            continue;
        }
        let (mut missing, mut extra) = (Vec::new(), Vec::new());
        property_paths(&ours["openAPIV3Schema"], "", &mut missing);
        property_paths(&theirs["openAPIV3Schema"], "", &mut extra);
        let only_ours: Vec<&String> = missing.iter().filter(|p| !extra.contains(p)).collect();
        let only_theirs: Vec<&String> = extra.iter().filter(|p| !missing.contains(p)).collect();
        // A missing object's own properties are missing too: name the object only, and say how
        // many more there are past five.
        let list = |paths: &[&String]| {
            let top: Vec<&str> = paths
                .iter()
                .map(|p| p.as_str())
                .filter(|p| {
                    !paths.iter().any(|q| {
                        p.strip_prefix(q.as_str()).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
                    })
                })
                .collect();
            let more = top.len().saturating_sub(5);
            let shown = top.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            if more == 0 { shown } else { format!("{shown} and {more} more") }
        };
        return Some(match (only_ours.is_empty(), only_theirs.is_empty()) {
            (false, _) => format!("older than this binary: {} lacks {}", version.name, list(&only_ours)),
            (true, false) => format!("newer than this binary: {} has {}", version.name, list(&only_theirs)),
            (true, true) => {
                let mut changed = Vec::new();
                keyword_differences(&ours["openAPIV3Schema"], &theirs["openAPIV3Schema"], "", &mut changed);
                format!(
                    "the {} schema differs from this binary's at {}",
                    version.name,
                    changed.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", ")
                )
            }
        });
    }
    None
}

/// Numbers compared by value (`0` and `0.0` alike), as the API server may return either.
pub(super) fn normalized(value: Value) -> Value {
    match value {
        Value::Number(n) => n.as_f64().map_or(Value::Number(n), |f| json!(f)),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, normalized(v))).collect()),
        other => other,
    }
}

/// Where two schemas with the same properties differ: `path (keyword)` for each keyword whose
/// value differs, as `spec.selector.matchLabels (maxProperties)`.
pub(crate) fn keyword_differences(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<String>) {
    let (Some(ours), Some(theirs)) = (ours.as_object(), theirs.as_object()) else {
        if ours != theirs {
            out.push(format!("{} (type)", if path.is_empty() { "the root" } else { path }));
        }
        return;
    };
    let mut keys: Vec<&String> = ours.keys().chain(theirs.keys()).collect();
    keys.sort();
    keys.dedup();
    let null = Value::Null;
    for key in keys {
        let (a, b) = (ours.get(key).unwrap_or(&null), theirs.get(key).unwrap_or(&null));
        if a == b {
            continue;
        }
        match key.as_str() {
            "properties" => {
                for (name, nested) in a.as_object().into_iter().flatten() {
                    let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                    keyword_differences(nested, &b[name], &at, out);
                }
            }
            "items" | "additionalProperties" if a.is_object() && b.is_object() => {
                let suffix = if key == "items" { "[]" } else { "{}" };
                keyword_differences(a, b, &format!("{path}{suffix}"), out);
            }
            _ => out.push(format!("{} ({key})", if path.is_empty() { "the root" } else { path })),
        }
    }
}

/// The dotted paths of every property of a schema.
pub(super) fn property_paths(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    for (key, nested) in schema["properties"].as_object().into_iter().flatten() {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        property_paths(nested, &path, out);
        property_paths(&nested["items"], &format!("{path}[]"), out);
        out.push(path);
    }
}
