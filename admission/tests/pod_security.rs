//! Pod Security holds after the patch, over real pods: the pods of two public projects as
//! kube-apiserver 1.36 stores them (`fixtures/real-workloads/`), placed in `restricted` and
//! `baseline` namespaces, injected with Watchers of every kind of security context, volume,
//! init container and annotation. A pod that passes the level by itself passes it patched, or
//! the Watcher is left out and the patch has none of it; a Watcher that asks for nothing the
//! level forbids is never left out.

use proptest::prelude::*;
use serde_json::{Value, json};
use watcher_admission::pod_security::{Level, NamespaceLevels, Policy, evaluate};
use watcher_admission::{InjectOptions, PodView, inject_at_level};
use watcher_api::Watcher;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/real-workloads/");

/// The pods of the plain captures (no operator ran).
fn pods() -> Vec<Value> {
    ["argo-cd-1.36-plain.json", "microservices-demo-1.36-plain.json"]
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(format!("{FIXTURES}{file}")).expect("fixture");
            let list: Value = serde_json::from_str(&text).expect("JSON");
            list["items"].as_array().expect("items").clone()
        })
        .collect()
}

/// The securityContexts a Watcher's container may have, and whether each asks for something a
/// level forbids (`restricted` and `baseline`).
const CONTEXTS: [(&str, bool, bool); 11] = [
    ("unset", false, false),
    ("empty", false, false),
    ("hardened", false, false),
    ("read-only-root", false, false),
    ("privileged", true, true),
    ("net-admin", true, true),
    ("root", true, false),
    ("seccomp-unconfined", true, true),
    ("escalation", true, false),
    ("host-port", true, true),
    ("bind-service", false, false),
];

fn context(kind: &str) -> Option<Value> {
    match kind {
        "unset" => None,
        "empty" => Some(json!({})),
        "hardened" => Some(json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}})),
        "read-only-root" => Some(json!({"readOnlyRootFilesystem": true, "runAsUser": 65534})),
        "privileged" => Some(json!({"privileged": true})),
        "net-admin" => Some(json!({"capabilities": {"add": ["NET_ADMIN"]}})),
        "root" => Some(json!({"runAsUser": 0})),
        "seccomp-unconfined" => Some(json!({"seccompProfile": {"type": "Unconfined"}})),
        "escalation" => Some(json!({"allowPrivilegeEscalation": true})),
        "bind-service" => Some(json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}})),
        _ => None, // host-port: the port, not the context
    }
}

fn container(name: &str, kind: &str) -> Value {
    let mut container = json!({"name": name, "image": "busybox:1.36", "command": ["sleep", "infinity"]});
    if let Some(context) = context(kind) {
        container["securityContext"] = context;
    }
    if kind == "host-port" {
        container["ports"] = json!([{"containerPort": 9102, "hostPort": 9102}]);
    }
    container
}

/// The volumes a Watcher may add: (JSON, forbidden at restricted, forbidden at baseline).
fn volume(kind: &str) -> (Option<Value>, bool, bool) {
    match kind {
        "emptyDir" => (Some(json!({"name": "watch", "emptyDir": {}})), false, false),
        "configMap" => (Some(json!({"name": "watch", "configMap": {"name": "cfg"}})), false, false),
        "hostPath" => (Some(json!({"name": "watch", "hostPath": {"path": "/var/log"}})), true, true),
        "nfs" => (Some(json!({"name": "watch", "nfs": {"server": "nfs.example", "path": "/"}})), true, false),
        _ => (None, false, false),
    }
}

fn watcher(spec: Value) -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "viewer", "namespace": "team-a"}, "spec": spec}))
    .expect("valid Watcher")
}

fn levels(level: Level) -> NamespaceLevels {
    NamespaceLevels { enforce: Some(Policy { level, version: None }), ..NamespaceLevels::default() }
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_pod_that_passes_its_level_passes_it_patched(
        pod in 0..pods().len(),
        restricted in any::<bool>(),
        sidecar in 0..CONTEXTS.len(),
        init in proptest::option::of(0..CONTEXTS.len()),
        volume_kind in prop::sample::select(vec!["none", "emptyDir", "configMap", "hostPath", "nfs"]),
        apparmor in prop::sample::select(vec!["none", "runtime/default", "unconfined"]),
        share in prop::sample::select(vec!["None", "ReadOnly"]),
        native in any::<bool>(),
        no_token in any::<bool>(),
        server in prop::sample::select(vec![24_u32, 36]),
    ) {
        let pod = pods().swap_remove(pod);
        let level = if restricted { Level::Restricted } else { Level::Baseline };
        let forbidden = |entry: (&str, bool, bool)| if restricted { entry.1 } else { entry.2 };
        let (sidecar_kind, init_kind) = (CONTEXTS[sidecar], init.map(|i| CONTEXTS[i]));
        let (volume, volume_restricted, volume_baseline) = volume(volume_kind);
        let every_pod = json!({"matchExpressions": [{"key": "corpus.example/never", "operator": "DoesNotExist"}]});
        let mut spec = json!({"container": container("viewer", sidecar_kind.0), "shareVolumes": share,
            "nativeSidecar": if native { "Always" } else { "Never" }, "selector": every_pod});
        if let Some(volume) = volume {
            spec["volume"] = volume;
        }
        if let Some(init) = init_kind {
            spec["initContainers"] = json!([container("viewer-init", init.0)]);
        }
        if no_token {
            spec["automountServiceAccountToken"] = json!(false);
        }
        if apparmor != "none" {
            spec["podAnnotations"] = json!({"container.apparmor.security.beta.kubernetes.io/viewer": apparmor});
        }
        let cannot_comply = forbidden(sidecar_kind)
            || init_kind.is_some_and(forbidden)
            || (if restricted { volume_restricted } else { volume_baseline })
            || apparmor == "unconfined";

        // Asking for root where the pod requires non-root: the kubelet would not start it.
        let pod_non_root = pod["spec"]["securityContext"]["runAsNonRoot"] == json!(true);
        let cannot_start = pod_non_root && (sidecar_kind.0 == "root" || init_kind.is_some_and(|i| i.0 == "root"));
        let watchers = [watcher(spec)];
        let options = InjectOptions { excluded_namespaces: vec![], native_sidecars: native, server_minor: Some(server), ..Default::default() };
        let policy = Policy { level, version: None };
        let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
        let passes = evaluate(&view.security_facts(), policy, server).passed();
        let injection = inject_at_level(&view, "team-a", &watchers, &options, &levels(level));
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &injection.patch).expect("the patch applies");
        let mut written = Vec::new();
        injection.patch.write(&mut written);
        prop_assert_eq!(written, serde_json::to_vec(&*injection.patch).expect("serialises"), "as the webhook writes it");
        let after: PodView = serde_json::from_value(patched.clone()).expect("a pod");
        let verdict = evaluate(&after.security_facts(), policy, server);
        let injected = injection.injected.iter().any(|w| w == "viewer");

        if !passes {
            // Nothing changes for a pod that fails by itself: injected as in an unlabelled namespace.
            let plain = inject_at_level(&view, "team-a", &watchers, &options, &NamespaceLevels::default());
            prop_assert_eq!(&injection.patch, &plain.patch);
            return Ok(());
        }
        prop_assert!(verdict.passed(), "patched, the pod fails {}: {}", policy, verdict);
        prop_assert_eq!(injected, !cannot_comply && !cannot_start, "{:?}", injection.warnings);
        let names: Vec<&Value> = items(&patched["spec"]["containers"]).chain(items(&patched["spec"]["initContainers"]))
            .map(|c| &c["name"]).collect();
        if injected {
            prop_assert!(names.contains(&&json!("viewer")));
        } else {
            prop_assert!(!names.contains(&&json!("viewer")) && !names.contains(&&json!("viewer-init")), "left out whole");
            prop_assert!(items(&patched["spec"]["volumes"]).all(|v| v["name"] != "watch"), "its volume too");
            prop_assert!(items(&patched["spec"]["volumes"]).all(|v| v["name"] != "watcher-dev-no-token"), "and the token's");
            let warning = injection.warnings.iter().find(|w| w.starts_with("Watcher viewer not injected"));
            let said = |w: &String| w.contains(&format!("violate PodSecurity \"{policy}\""))
                || (cannot_start && w.contains("the kubelet would not start"));
            prop_assert!(warning.is_some_and(said), "{:?}", injection.warnings);
        }
        // What the Watcher adds can start: where it must run as non-root, it says as which user
        // (the kubelet refuses an image that runs as root, as most do unless told).
        let pod_context = &patched["spec"]["securityContext"];
        for added in names.iter().filter(|n| ***n == json!("viewer") || ***n == json!("viewer-init")) {
            let container = items(&patched["spec"]["containers"]).chain(items(&patched["spec"]["initContainers"]))
                .find(|c| &c["name"] == *added).expect("the container");
            let own = &container["securityContext"];
            let non_root = own["runAsNonRoot"].as_bool().or(pod_context["runAsNonRoot"].as_bool());
            let user = own["runAsUser"].as_i64().or(pod_context["runAsUser"].as_i64());
            if non_root == Some(true) {
                prop_assert!(user.is_some_and(|u| u != 0), "{added} must run as non-root as user {user:?}");
            }
        }
        // The app's containers and the pod's own securityContext are never changed.
        prop_assert_eq!(&patched["spec"]["securityContext"], &pod["spec"]["securityContext"]);
        for (before, after) in items(&pod["spec"]["containers"]).zip(items(&patched["spec"]["containers"])) {
            prop_assert_eq!(&before["securityContext"], &after["securityContext"]);
        }
    }
}

/// The pods of the captures that pass each level by themselves: the property above is about them.
#[test]
fn some_real_pods_pass_each_level() {
    let passing = |level| {
        pods()
            .into_iter()
            .filter(|pod| {
                let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
                evaluate(&view.security_facts(), Policy { level, version: None }, 36).passed()
            })
            .count()
    };
    let (restricted, baseline) = (passing(Level::Restricted), passing(Level::Baseline));
    assert!(restricted >= 7, "{restricted} pods pass restricted");
    assert_eq!(baseline, pods().len(), "every pod passes baseline");
}
