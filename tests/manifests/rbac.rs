//! The chart's RBAC: least privilege for every set of controllers, and the ClusterRoles
//! aggregated into Kubernetes' own.

use std::path::Path;

use serde_json::Value;

use super::{ROOT, documents, find, get, render};

fn cluster_role_resources(chart: &[Value]) -> Vec<String> {
    let rules = get(chart, "ClusterRole")["rules"].as_array().expect("rules").clone();
    rules
        .iter()
        .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect()
}

/// Every `(apiGroup, resource, verb)` the ClusterRole grants.
pub(crate) fn cluster_role_grants(chart: &[Value]) -> std::collections::BTreeSet<(String, String, String)> {
    let mut grants = std::collections::BTreeSet::new();
    for rule in get(chart, "ClusterRole")["rules"].as_array().expect("rules") {
        let strings = |key: &str| -> Vec<String> {
            rule[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    grants.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    grants
}

/// The cluster-wide API calls of the operator, by who makes them (`""`: every replica), as the
/// code makes them: `(who, apiGroup, resources, verbs)`.
const CALLS: &[(&str, &str, &[&str], &[&str])] = &[
    // The webhook's caches (cache/src/watchers.rs, policies.rs), in every replica.
    ("", "watcher.dev", &["watchers", "clusterwatchers", "imagepolicies"], &["get", "list", "watch"]),
    ("", "", &["namespaces"], &["list", "watch"]),
    // The namespaces' resource rules (cache/src/resource_rules.rs).
    ("", "", &["limitranges", "resourcequotas"], &["list", "watch"]),
    // The Pod Security defaults (controller/src/pod_security_probe.rs): dry-run pods.
    ("", "", &["pods"], &["create"]),
    // The revision cache (cache/src/revisions.rs): a held rollout's stable revision.
    ("", "apps", &["controllerrevisions"], &["get", "list", "watch"]),
    // Events (controller/src/context.rs), the self-managed registration (certs/src/registration.rs)
    // and the admission scope (controller/src/scope.rs: get, update).
    ("", "events.k8s.io", &["events"], &["create", "patch"]),
    // Who reads /metrics (src/metrics_auth.rs), with metrics.secure (the default).
    ("", "authentication.k8s.io", &["tokenreviews"], &["create"]),
    ("", "authorization.k8s.io", &["subjectaccessreviews"], &["create"]),
    ("", "admissionregistration.k8s.io", &["mutatingwebhookconfigurations"], &["get", "patch", "update"]),
    // A run by URL creates the configuration, and deletes it when it stops.
    ("", "admissionregistration.k8s.io", &["mutatingwebhookconfigurations"], &["create", "delete"]),
    // watcher.rs and cluster_watcher.rs: the owned ConfigMaps (a labelled watch, POST, merge
    // patch, delete) and status.
    ("watcher", "", &["configmaps"], &["get", "list", "watch", "create", "patch", "update", "delete"]),
    ("watcher", "watcher.dev", &["watchers/status", "clusterwatchers/status"], &["get", "patch", "update"]),
    // revisions.rs: each spec's revision written when it is first seen.
    ("watcher", "apps", &["controllerrevisions"], &["create"]),
    // pods.rs: the pod index, in-place patches, evictions, the revisions, and the counts.
    ("pods", "", &["pods"], &["get", "list", "watch", "patch"]),
    ("pods", "", &["pods/eviction"], &["create"]),
    ("pods", "apps", &["controllerrevisions"], &["create", "delete"]),
    ("pods", "watcher.dev", &["watchers/status", "clusterwatchers/status"], &["get", "patch", "update"]),
    // at.rs and podset.rs: their resources, status and the pods they own.
    ("at", "watcher.dev", &["ats"], &["get", "list", "watch"]),
    ("at", "watcher.dev", &["ats/status"], &["get", "patch", "update"]),
    ("at", "", &["pods"], &["get", "list", "watch", "create", "delete"]),
    ("podset", "watcher.dev", &["podsets"], &["get", "list", "watch"]),
    ("podset", "watcher.dev", &["podsets/status"], &["get", "patch", "update"]),
    ("podset", "", &["pods"], &["get", "list", "watch", "create", "delete"]),
    // sync.rs: sources, copies by label, server-side apply, recreate and delete.
    ("sync", "", &["configmaps"], &["get", "list", "watch", "create", "patch", "update", "delete"]),
    // Secrets only with sync.secrets (off by default): rbac_grants_only_what_the_enabled_controllers_need.
    // images.rs: workload templates (strategic merge patch, GET after a conflict) and status.
    ("images", "apps", &["deployments", "statefulsets", "daemonsets"], &["get", "list", "watch", "patch"]),
    ("images", "watcher.dev", &["imagepolicies/status"], &["get", "patch", "update"]),
];

const CONTROLLERS: [&str; 6] = ["watcher", "pods", "at", "podset", "sync", "images"];

/// Least privilege follows the values, for every subset of controllers: the ClusterRole grants
/// exactly the calls of the controllers that run (and of every replica), nothing more.
#[test]
fn rbac_grants_exactly_what_the_enabled_controllers_call() {
    for mask in 1u32..(1 << CONTROLLERS.len()) {
        let enabled: Vec<&str> =
            CONTROLLERS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| *c).collect();
        let set = format!("controllers={{{}}}", enabled.join(","));
        let Some(chart) = render("watcher-system", &[&set]) else { return };
        let mut expected = std::collections::BTreeSet::new();
        for (who, group, resources, verbs) in CALLS {
            if who.is_empty() || enabled.contains(who) {
                for resource in *resources {
                    for verb in *verbs {
                        expected.insert(((*group).to_owned(), (*resource).to_owned(), (*verb).to_owned()));
                    }
                }
            }
        }
        let granted = cluster_role_grants(&chart);
        let extra: Vec<_> = granted.difference(&expected).collect();
        let missing: Vec<_> = expected.difference(&granted).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{set}: granted beyond the calls {extra:?}, missing {missing:?}"
        );
    }
}

/// Secrets cluster-wide only when sync copies them (sync.secrets, off by default); the reviews
/// of /metrics only when it is secure; cert-manager leaves only the rights the admission scope
/// needs on the webhook configuration.
#[test]
fn rbac_grants_only_what_the_enabled_controllers_need() {
    let cases: [(&[&str], &[&str], &[&str]); 4] = [
        (&[], &["configmaps", "deployments", "pods", "pods/eviction", "ats/status", "tokenreviews"], &["secrets"]),
        (&["sync.secrets=true"], &["secrets", "configmaps"], &[]),
        (&["metrics.secure=false"], &["configmaps"], &["tokenreviews", "subjectaccessreviews"]),
        (&["certManager.enabled=true"], &["configmaps", "mutatingwebhookconfigurations"], &[]),
    ];
    for (sets, granted, refused) in cases {
        let Some(chart) = render("watcher-system", sets) else { return };
        let resources = cluster_role_resources(&chart);
        for resource in granted {
            assert!(resources.iter().any(|r| r == resource), "{sets:?}: {resource} not granted: {resources:?}");
        }
        for resource in refused {
            assert!(!resources.iter().any(|r| r == resource), "{sets:?}: {resource} granted: {resources:?}");
        }
    }
    // By default, only the tls Secret of its own namespace, and the binary's own default.
    let Some(chart) = render("watcher-system", &[]) else { return };
    let role = get(&chart, "Role");
    let secret_rules: Vec<&Value> =
        role["rules"].as_array().expect("rules").iter().filter(|r| r["resources"][0] == "secrets").collect();
    assert_eq!(secret_rules[0]["resourceNames"], serde_json::json!(["watcher-operator-tls"]));
    let env = |chart: &[Value]| get(chart, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    assert!(!env(&chart).as_array().expect("env").iter().any(|e| e["name"] == "WATCHER_SYNC_SECRETS"));
    let Some(syncing) = render("watcher-system", &["sync.secrets=true"]) else { return };
    assert!(
        env(&syncing)
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "WATCHER_SYNC_SECRETS" && e["value"] == "true")
    );
}

/// The ClusterRoles aggregated into Kubernetes' admin, edit and view: namespace editors manage
/// the namespaced kinds users create (never a ClusterWatcher or an ImagePolicy), viewers read
/// every kind the CRDs serve; `rbac.aggregateClusterRoles=false` leaves them out.
#[test]
fn the_aggregated_cluster_roles_follow_kubernetes_own() {
    let Some(chart) = render("watcher-system", &[]) else { return };
    let role = |name: &str| find(&chart, "ClusterRole", name).unwrap_or_else(|| panic!("no ClusterRole {name}"));
    let aggregates = |name: &str| -> Vec<String> {
        let labels = role(name)["metadata"]["labels"].as_object().expect("labels").clone();
        let mut to: Vec<String> = labels
            .iter()
            .filter(|(_, v)| *v == "true")
            .filter_map(|(k, _)| k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-").map(str::to_owned))
            .collect();
        to.sort();
        to
    };
    assert_eq!(aggregates("watcher-operator-edit"), ["admin", "edit"]);
    assert_eq!(aggregates("watcher-operator-view"), ["admin", "edit", "view"]);

    let grants = |name: &str| -> std::collections::BTreeSet<(String, String)> {
        let mut grants = std::collections::BTreeSet::new();
        for rule in role(name)["rules"].as_array().expect("rules") {
            assert_eq!(rule["apiGroups"], serde_json::json!(["watcher.dev"]), "{name}: the operator's group only");
            for resource in rule["resources"].as_array().expect("resources") {
                for verb in rule["verbs"].as_array().expect("verbs") {
                    grants.insert((
                        resource.as_str().expect("resource").to_owned(),
                        verb.as_str().expect("verb").to_owned(),
                    ));
                }
            }
        }
        grants
    };
    let edit = grants("watcher-operator-edit");
    let managed: std::collections::BTreeSet<String> = edit.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(managed.into_iter().collect::<Vec<_>>(), ["ats", "podsets", "watchers"]);
    for resource in ["watchers", "ats", "podsets"] {
        for verb in ["create", "delete", "get", "list", "patch", "update", "watch"] {
            assert!(edit.contains(&(resource.to_owned(), verb.to_owned())), "edit: {verb} {resource}");
        }
    }

    // view reads every kind the CRDs serve, and writes nothing.
    let crds = std::fs::read_to_string(Path::new(ROOT).join("deploy/crds/crds.yaml")).expect("crds");
    let served: Vec<String> = documents(&crds)
        .iter()
        .map(|crd| crd["spec"]["names"]["plural"].as_str().expect("plural").to_owned())
        .collect();
    assert!(served.len() >= 5, "{served:?}");
    let view = grants("watcher-operator-view");
    for plural in &served {
        for verb in ["get", "list", "watch"] {
            assert!(view.contains(&(plural.clone(), verb.to_owned())), "view: {verb} {plural}");
        }
    }
    assert!(view.iter().all(|(_, verb)| matches!(verb.as_str(), "get" | "list" | "watch")), "{view:?}");

    let Some(off) = render("watcher-system", &["rbac.aggregateClusterRoles=false"]) else { return };
    let roles: Vec<&str> =
        off.iter().filter(|o| o["kind"] == "ClusterRole").filter_map(|o| o["metadata"]["name"].as_str()).collect();
    assert_eq!(roles, ["watcher-operator", "watcher-operator-metrics-reader"], "the operator's own roles only");
}
