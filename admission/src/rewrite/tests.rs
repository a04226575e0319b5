//! The rewrite step on the pods of the real AdmissionReview fixtures: alone, with injection in
//! the same patch, and again on its own result (reinvocation).

use std::sync::Arc;

use serde_json::{Value, json};
use watcher_api::{CompiledPolicy, ImagePolicy, Watcher};

use crate::{InjectOptions, Injection, PodView, inject, rewrite_images};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission-review/");

fn fixture_pod(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}{name}")).expect("fixture exists");
    let review: Value = serde_json::from_str(&text).expect("JSON");
    review["request"]["object"].clone()
}

fn policy(name: &str, rewrites: Value) -> Arc<CompiledPolicy> {
    let policy: ImagePolicy =
        serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": name}, "spec": {"rewrites": rewrites}}))
        .expect("valid ImagePolicy");
    Arc::new(policy.compile())
}

fn mirror() -> Vec<Arc<CompiledPolicy>> {
    vec![policy("mirror", json!([{"from": "docker.io/library/", "to": "mirror.internal/library/"}]))]
}

fn log_watcher() -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"}}}))
    .expect("valid Watcher")
}

fn options() -> InjectOptions {
    InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    }
}

/// Both steps of the admission pass, and the pod with the patch applied.
fn admit(pod: &Value, watchers: &[Watcher], policies: &[Arc<CompiledPolicy>], namespace: &str) -> (Injection, Value) {
    let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
    let refs: Vec<&Watcher> = watchers.iter().collect();
    let mut injection = inject(&view, namespace, &refs, &options());
    rewrite_images(&view, namespace, policies, &options(), &mut injection);
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &injection.patch).expect("the patch applies to the real pod");
    (injection, patched)
}

#[test]
fn rewrite_alone_records_the_original() {
    let pod = fixture_pod("pod-create-from-replicaset-generatename.json");
    let (injection, patched) = admit(&pod, &[], &mirror(), "team-a");
    assert!(injection.injected.is_empty());
    assert_eq!(injection.rewritten, ["nginx"]);
    assert_eq!(patched["spec"]["containers"][0]["image"], "mirror.internal/library/nginx:1.27");
    assert_eq!(patched["metadata"]["annotations"]["watcher.dev/original-images"], "nginx=nginx:1.27");
    let mut expected = pod.clone();
    expected["spec"]["containers"][0]["image"] = json!("mirror.internal/library/nginx:1.27");
    expected["metadata"]["annotations"] = json!({"watcher.dev/original-images": "nginx=nginx:1.27"});
    assert_eq!(patched, expected, "nothing else changes");
}

#[test]
fn injection_and_rewrite_make_one_patch() {
    let pod = fixture_pod("pod-create-named-annotated.json");
    let (injection, patched) = admit(&pod, &[log_watcher()], &mirror(), "team-a");
    assert_eq!(injection.injected, ["log-watcher"]);
    assert_eq!(patched["spec"]["initContainers"][0]["name"], "log-watcher");
    assert_eq!(
        patched["spec"]["initContainers"][0]["image"], "mirror.internal/library/busybox:1.36",
        "the sidecar too"
    );
    assert_eq!(patched["spec"]["containers"][0]["image"], "mirror.internal/library/nginx:1.27");
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(annotations["watcher.dev/original-images"], "app=nginx:1.27,log-watcher=busybox:1.36");
    assert!(annotations["watcher.dev/injected"].as_str().is_some_and(|v| v.starts_with("log-watcher@")));
    assert_eq!(annotations["watcher.dev/inject"], "log-watcher", "the pod's own annotations stay");

    // Reinvocation: the same pass over its own result changes nothing.
    let (again, _) = admit(&patched, &[log_watcher()], &mirror(), "team-a");
    assert!(again.patch.is_empty(), "{:?}", again.patch);
}

#[test]
fn init_containers_are_rewritten_and_an_unmatched_image_is_kept() {
    let pod = fixture_pod("pod-create-init-and-existing-watcher-container.json");
    let busybox = vec![policy("pin", json!([{"from": "busybox:latest", "to": "busybox:1.36.1"}]))];
    let (injection, patched) = admit(&pod, &[], &busybox, "team-a");
    assert_eq!(injection.rewritten, ["watcher", "setup"]);
    assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:1.27", "no rule matches nginx");
    assert_eq!(patched["spec"]["containers"][1]["image"], "busybox:1.36.1");
    assert_eq!(patched["spec"]["initContainers"][0]["image"], "busybox:1.36.1");
    assert_eq!(patched["metadata"]["annotations"]["watcher.dev/original-images"], "watcher=busybox,setup=busybox");
    assert!(patched["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string());
}

#[test]
fn policies_apply_in_order_first_match_once() {
    let pod = fixture_pod("pod-create-from-replicaset-generatename.json");
    let policies = vec![
        policy("a-pin", json!([{"from": "nginx:1.27", "to": "nginx:1.27.3"}])),
        policy("b-mirror", json!([{"from": "docker.io/library/", "to": "mirror.internal/library/"}])),
    ];
    let (_, patched) = admit(&pod, &[], &policies, "team-a");
    assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:1.27.3", "pinned, not then mirrored");
}

#[test]
fn never_injected_namespaces_and_no_rules_mean_no_patch() {
    let pod = fixture_pod("pod-create-from-replicaset-generatename.json");
    for namespace in ["kube-system", "watcher-system"] {
        let (injection, _) = admit(&pod, &[], &mirror(), namespace);
        assert!(injection.patch.is_empty(), "{namespace}");
    }
    let (injection, _) = admit(&pod, &[], &[], "team-a");
    assert!(injection.patch.is_empty() && injection.rewritten.is_empty());
    let invalid = vec![policy("broken", json!([{"from": "alpine:", "to": "x"}]))];
    let (injection, _) = admit(&pod, &[], &invalid, "team-a");
    assert!(injection.patch.is_empty(), "an invalid policy is never applied");
}
