//! The in-place decision over pods as kube-apiserver 1.24 and 1.36 really store them
//! (`controller/fixtures/stored-pods/`: the ServiceAccount token mounted into every container,
//! LimitRange resources, defaults), decided from the hashes the pod carries, or, for a pod
//! injected before it carried the hash without image, between its revision and the current spec.

use json_patch::PatchOperation;
use serde_json::{Value, json};
use watcher_api::{InjectionSpec, Watcher};

use super::{Update, in_flight, update};
use crate::pods::{CountedPod, PodMeta};

pub(crate) const FIXTURES: [&str; 4] =
    ["pod-1.24-plain.json", "pod-1.24-limits.json", "pod-1.36-plain.json", "pod-1.36-limits.json"];

/// A stored pod of the fixtures.
pub(crate) fn stored(name: &str) -> Value {
    let path = format!("{}/fixtures/stored-pods/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// The Watcher the fixtures were injected with (`watcher.yaml`), in `namespace`, with `image`
/// and `updatePolicy: InPlace`.
pub(crate) fn fixture_watcher(namespace: &str, image: &str) -> Watcher {
    let path = format!("{}/fixtures/stored-pods/watcher.yaml", env!("CARGO_MANIFEST_DIR"));
    let mut value: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).expect("watcher.yaml")).expect("YAML");
    value["metadata"]["namespace"] = json!(namespace);
    value["metadata"]["uid"] = json!("w-uid");
    value["spec"]["container"]["image"] = json!(image);
    value["spec"]["updatePolicy"] = json!({"type": "InPlace", "maxUnavailable": 1});
    serde_json::from_value(value).expect("Watcher")
}

/// A stored pod as the reconciler keeps it, knowing `watcher`.
pub(crate) fn counted(pod: &Value, watcher: &Watcher) -> CountedPod {
    let pod: PodMeta = serde_json::from_value(pod.clone()).expect("pod");
    CountedPod::with_sidecars_of(&pod, std::slice::from_ref(watcher))
}

/// Pod `web-N` of a ReplicaSet, as kube-apiserver 1.36 stored it in a namespace with a
/// LimitRange (`pod-1.36-limits.json`), created N seconds after the first, injected with the
/// fixture Watcher (busybox:1.36); the kubelet reports its sidecar running and ready.
pub(crate) fn stored_replica(n: u32) -> Value {
    let mut pod = stored("pod-1.36-limits.json");
    pod["metadata"]["name"] = json!(format!("web-{n}"));
    pod["metadata"]["creationTimestamp"] = json!(format!("2026-11-21T10:00:{n:02}Z"));
    pod["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]);
    pod["status"]["initContainerStatuses"] = json!([{"name": "log-watcher", "image": "docker.io/library/busybox:1.36",
        "imageID": "", "restartCount": 0, "ready": true, "started": true, "state": {"running": {"startedAt": NOW}}}]);
    pod
}

/// Where the sidecar is in a fixture: `(list, index)`.
fn sidecar_path(pod: &Value) -> (&'static str, usize) {
    for list in ["initContainers", "containers"] {
        if let Some(i) = pod["spec"][list].as_array().and_then(|l| l.iter().position(|c| c["name"] == "log-watcher")) {
            return (list, i);
        }
    }
    panic!("no sidecar")
}

const NOW: &str = "2026-11-21T11:00:00Z";

/// `pod` as the webhook injects it today: beside `watcher.dev/injected` (which the fixtures
/// carry), `watcher.dev/injected-without-image` with the hash of the fixture Watcher's spec
/// without its image (the webhook's tests show it writes exactly that).
pub(crate) fn as_injected_today(mut pod: Value) -> Value {
    let hash = carried(&pod).hash_without_image();
    pod["metadata"]["annotations"]["watcher.dev/injected-without-image"] = json!(format!("log-watcher@{hash}"));
    pod
}

fn carried(pod: &Value) -> InjectionSpec {
    fixture_watcher(pod["metadata"]["namespace"].as_str().expect("ns"), "busybox:1.36").spec.injection()
}

/// The fixtures carry the hash of `watcher.yaml`: the revision a pod carries is found by it.
#[test]
fn the_fixtures_carry_the_fixture_watchers_hash() {
    for name in FIXTURES {
        let pod = stored(name);
        let hash = carried(&pod).hash();
        assert_eq!(pod["metadata"]["annotations"]["watcher.dev/injected"], format!("log-watcher@{hash}"), "{name}");
    }
}

/// Only the image differs between the revisions: one patch of that container's image, found
/// where kube-apiserver stored it (1.24: a regular container; 1.36: a native sidecar), whatever
/// the ServiceAccount plugin and LimitRanger added to it.
#[test]
fn an_image_only_change_between_revisions_is_in_place() {
    for name in FIXTURES {
        let pod = stored(name);
        let (list, index) = sidecar_path(&pod);
        let new = fixture_watcher(pod["metadata"]["namespace"].as_str().expect("ns"), "busybox:1.37");
        let Update::InPlace(patch) = update(&new, Some(&carried(&pod)), &counted(&pod, &new), &[], NOW) else {
            panic!("{name}: not in place")
        };
        let ops: Vec<Value> = patch.ops.iter().map(|op| serde_json::to_value(op).expect("JSON")).collect();
        assert_eq!(
            ops,
            [
                json!({"op": "replace", "path": "/metadata/resourceVersion", "value": pod["metadata"]["resourceVersion"]}),
                json!({"op": "test", "path": format!("/spec/{list}/{index}/name"), "value": "log-watcher"}),
                json!({"op": "replace", "path": format!("/spec/{list}/{index}/image"), "value": "busybox:1.37"}),
                json!({"op": "replace", "path": "/metadata/annotations/watcher.dev~1injected",
                       "value": format!("log-watcher@{}", new.spec.spec_hash())}),
                json!({"op": "add", "path": "/metadata/annotations/watcher.dev~1injected-without-image",
                       "value": format!("log-watcher@{}", new.spec.spec_hash_without_image())}),
                json!({"op": "add", "path": "/metadata/annotations/watcher.dev~1sidecar-updated", "value": NOW}),
            ],
            "{name}"
        );
        // The patch applies to the pod as stored.
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &json_patch::Patch(patch.ops)).expect("applies");
        assert_eq!(patched["spec"][list][index]["image"], "busybox:1.37");
        assert!(matches!(
            serde_json::from_value::<json_patch::Patch>(json!(ops)).expect("JSON patch").0[1],
            PatchOperation::Test(_)
        ));
    }
}

/// Another webhook's container added before the sidecar (as Istio or Vault add theirs): the
/// sidecar is found by name, at its new index.
#[test]
fn another_webhooks_container_moves_nothing_but_the_index() {
    let mut pod = stored("pod-1.36-plain.json");
    let init = pod["spec"]["initContainers"].as_array_mut().expect("init containers");
    init.insert(0, json!({"name": "istio-init", "image": "istio/proxyv2:1.24", "resources": {}}));
    let new = fixture_watcher("fx-plain", "busybox:1.37");
    let Update::InPlace(patch) = update(&new, Some(&carried(&pod)), &counted(&pod, &new), &[], NOW) else {
        panic!("not in place")
    };
    assert_eq!(serde_json::to_value(&patch.ops[2]).expect("JSON")["path"], "/spec/initContainers/1/image");
}

#[test]
fn more_than_the_image_or_a_lost_revision_goes_the_recreate_way() {
    for name in FIXTURES {
        let pod = stored(name);
        let namespace = pod["metadata"]["namespace"].as_str().expect("ns");
        let mut env = fixture_watcher(namespace, "busybox:1.37");
        env.spec.container.env =
            Some(vec![serde_json::from_value(json!({"name": "LEVEL", "value": "x"})).expect("env")]);
        let mut volume = fixture_watcher(namespace, "busybox:1.36");
        volume.spec.volume = Some(Box::new(
            serde_json::from_value(json!({"name": "logs", "hostPath": {"path": "/l"}})).expect("volume"),
        ));
        let mut native = fixture_watcher(namespace, "busybox:1.37");
        native.spec.native_sidecar = watcher_api::NativeSidecar::Never;
        for (case, new) in [("image and env", &env), ("the volume", &volume), ("native sidecar mode", &native)] {
            let update = update(new, Some(&carried(&pod)), &counted(&pod, new), &[], NOW);
            assert!(matches!(update, Update::Recreate(_)), "{name}, {case}: {update:?}");
        }
        let new = fixture_watcher(namespace, "busybox:1.37");
        assert_eq!(
            update(&new, None, &counted(&pod, &new), &[], NOW),
            Update::Recreate("the pod carries no hash of its spec without image, and its revision is not kept".into()),
            "{name}: injected before the hash without image, no revision"
        );
    }
}

/// A sidecar whose image someone changed by hand is not the revision's any more: left alone,
/// and said why.
#[test]
fn an_image_edited_by_hand_is_left_alone() {
    for name in FIXTURES {
        let mut pod = stored(name);
        let (list, index) = sidecar_path(&pod);
        pod["spec"][list][index]["image"] = json!("busybox:1.35-debug");
        let new = fixture_watcher(pod["metadata"]["namespace"].as_str().expect("ns"), "busybox:1.37");
        let update = update(&new, Some(&carried(&pod)), &counted(&pod, &new), &[], NOW);
        let Update::LeftAlone(why) = update else { panic!("{name}: {update:?}") };
        assert_eq!(
            why,
            "pod app: sidecar log-watcher runs busybox:1.35-debug, not the image it was injected with (changed by \
             hand): left alone"
        );
    }
}

/// An ImagePolicy rewrote the sidecar's image at admission (the original on record): that is
/// not a change by hand, and the new image is rewritten the same way.
#[test]
fn an_image_policy_rewrite_is_followed() {
    let mut pod = stored("pod-1.36-limits.json");
    pod["spec"]["initContainers"][0]["image"] = json!("mirror.internal/library/busybox:1.36");
    pod["metadata"]["annotations"]["watcher.dev/original-images"] = json!("app=busybox:1.36,log-watcher=busybox:1.36");
    let rules = [watcher_api::image::Rule::compile("docker.io/library/", "mirror.internal/library/").expect("rule")];
    let refs: Vec<&watcher_api::image::Rule> = rules.iter().collect();
    let new = fixture_watcher("fx-limits", "busybox:1.37");
    let Update::InPlace(patch) = update(&new, Some(&carried(&pod)), &counted(&pod, &new), &refs, NOW) else {
        panic!("not in place")
    };
    let ops: Vec<Value> = patch.ops.iter().map(|op| serde_json::to_value(op).expect("JSON")).collect();
    assert_eq!(ops[2]["value"], "mirror.internal/library/busybox:1.37");
    assert_eq!(ops[6]["value"], "app=busybox:1.36,log-watcher=busybox:1.37");
}

/// No revision kept at all (the spec changed before the operator looked, or while it was
/// down): the pod's own hashes decide, over every stored fixture.
#[test]
fn the_pod_decides_with_no_revision_kept() {
    for name in FIXTURES {
        let pod = as_injected_today(stored(name));
        let namespace = pod["metadata"]["namespace"].as_str().expect("ns");
        let (list, index) = sidecar_path(&pod);

        let image_only = fixture_watcher(namespace, "busybox:1.37");
        let Update::InPlace(patch) = update(&image_only, None, &counted(&pod, &image_only), &[], NOW) else {
            panic!("{name}: an image-only change is in place")
        };
        assert_eq!(serde_json::to_value(&patch.ops[2]).expect("JSON")["path"], format!("/spec/{list}/{index}/image"));
        assert_eq!(patch.image, "busybox:1.37");

        let mut image_and_env = fixture_watcher(namespace, "busybox:1.37");
        image_and_env.spec.container.env =
            Some(vec![serde_json::from_value(json!({"name": "LEVEL", "value": "x"})).expect("env")]);
        assert_eq!(
            update(&image_and_env, None, &counted(&pod, &image_and_env), &[], NOW),
            Update::Recreate("the spec differs by more than the sidecar's image".into()),
            "{name}"
        );

        let mut edited = pod.clone();
        edited["spec"][list][index]["image"] = json!("busybox:1.35-debug");
        let update = update(&image_only, None, &counted(&edited, &image_only), &[], NOW);
        assert!(matches!(update, Update::LeftAlone(_)), "{name}: {update:?}");
    }
}

/// In flight: the spec names an image the kubelet does not report running and ready yet.
#[test]
fn in_flight_until_the_kubelet_reports_the_new_image_ready() {
    let mut pod = stored("pod-1.36-plain.json");
    let watcher = fixture_watcher("fx-plain", "busybox:1.36");
    assert!(in_flight(&counted(&pod, &watcher), "log-watcher"), "no kubelet report at all");
    pod["status"]["initContainerStatuses"] = json!([{"name": "log-watcher", "image": "docker.io/library/busybox:1.36",
        "imageID": "", "restartCount": 0, "ready": true, "started": true, "state": {"running": {"startedAt": NOW}}}]);
    assert!(!in_flight(&counted(&pod, &watcher), "log-watcher"));
}
