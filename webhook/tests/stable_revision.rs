//! Admission through the revision cache, on the AdmissionReview kube-apiserver 1.36 sent for a
//! ReplicaSet's pod: while the rollout is held with `newPods: Stable`, the pod comes in on the
//! stable revision and carries its hash, so the rollout counts it as any outdated pod; in the
//! canary group, and once the hold is released, on the current spec.

use std::sync::Arc;

use k8s_openapi::ByteString;
use serde_json::{Value, json};
use watcher_admission::InjectOptions;
use watcher_api::Watcher;
use watcher_api::revision::desired_revision;
use watcher_cache::RevisionCache;
use watcher_webhook::Reviewer;

const REVIEW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../admission/fixtures/admission-review/pod-create-from-replicaset-generatename.json"
);

fn watcher(image: &str, update_policy: Value, stable: Option<&str>) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a", "uid": "w-uid"},
        "spec": {"container": {"name": "log-watcher", "image": image}, "selector": {"matchLabels": {"app": "web"}},
                 "updatePolicy": update_policy},
        "status": {"stableRevision": stable},
    }))
    .expect("valid Watcher")
}

/// The sidecar's image, the hash the pod carries, and the warnings.
fn admit(watcher: Watcher, cache: &RevisionCache, body: &str) -> (String, String, Vec<String>) {
    let options = InjectOptions { native_sidecars: true, ..InjectOptions::default() };
    let reviewer = Reviewer::new(vec![Arc::new(watcher)], options).with_revisions(Arc::new(cache.clone()));
    let (answer, _) = reviewer.review(body.as_bytes()).expect("a review");
    let review: Value = serde_json::from_slice(&answer.to_json().expect("JSON")).expect("JSON");
    let patch: ByteString = serde_json::from_value(review["response"]["patch"].clone()).expect("a patch");
    let patch: json_patch::Patch = serde_json::from_slice(&patch.0).expect("JSON patch");
    let request: Value = serde_json::from_str(body).expect("JSON");
    let mut pod = request["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("applies to the real pod");
    let sidecar = pod["spec"]["initContainers"].as_array().expect("sidecar").last().expect("sidecar").clone();
    let injected = pod["metadata"]["annotations"]["watcher.dev/injected"].as_str().unwrap_or_default().to_owned();
    let warnings = review["response"]["warnings"].as_array().cloned().unwrap_or_default();
    let warnings = warnings.iter().map(|w| w.as_str().unwrap_or_default().to_owned()).collect();
    (sidecar["image"].as_str().unwrap_or_default().to_owned(), injected, warnings)
}

#[test]
fn a_pod_created_during_a_held_rollout_gets_the_stable_revision() {
    let body = std::fs::read_to_string(REVIEW).expect("fixture");
    let stable = watcher("busybox:1.36", json!({}), None);
    let mut revision = desired_revision(&stable, "team-a", 1).expect("revision");
    revision.metadata.uid = Some("rev-1".into());
    let name = revision.metadata.name.clone().expect("name");
    let cache = RevisionCache::holding(vec![revision], "watcher-system");
    let stable_hash = format!("log-watcher@{}", stable.spec.spec_hash());

    let held = json!({"type": "Recreate", "partition": 2, "newPods": "Stable"});
    let (image, injected, warnings) = admit(watcher("busybox:1.37", held, Some(&name)), &cache, &body);
    assert_eq!((image.as_str(), injected.as_str()), ("busybox:1.36", stable_hash.as_str()));
    assert!(warnings.is_empty(), "{warnings:?}");

    // The pod is `app: web`: in a canary group of that label, it gets the current spec.
    let group = json!({"newPods": "Stable", "selector": {"matchLabels": {"app": "web"}}});
    let current = watcher("busybox:1.37", group.clone(), Some(&name));
    let current_hash = format!("log-watcher@{}", current.spec.spec_hash());
    assert_eq!(admit(current, &cache, &body).0, "busybox:1.37");

    // Released: the current spec again.
    let released = json!({"type": "Recreate", "newPods": "Stable"});
    let (image, injected, _) = admit(watcher("busybox:1.37", released, Some(&name)), &cache, &body);
    assert_eq!((image.as_str(), injected.as_str()), ("busybox:1.37", current_hash.as_str()));

    // A stable revision the cache does not hold: the current spec, and a warning; never refused.
    let required = json!({"partition": 1, "newPods": "Stable"});
    let mut missing = watcher("busybox:1.37", required, Some("log-watcher-gone"));
    missing.spec.failure_policy = watcher_api::FailurePolicy::Fail;
    let (image, _, warnings) = admit(missing, &cache, &body);
    assert_eq!(image, "busybox:1.37");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(warning.contains("log-watcher-gone") && warning.contains("not in the operator's cache"), "{warning}");
}
