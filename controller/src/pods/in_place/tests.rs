use std::sync::Arc;

use json_patch::PatchOperation;
use serde_json::{Value, json};
use watcher_api::Watcher;
use watcher_webhook::{InjectOptions, PodView};

use super::{Update, in_flight, same_but_defaults, update};
use crate::pods::{CountedPod, PodMeta, plan_in_place};

pub(crate) fn watcher(name: &str, spec: Value) -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
    .expect("Watcher")
}

pub(crate) fn log_watcher(image: &str) -> Watcher {
    watcher(
        "log-watcher",
        json!({"container": {"name": "log-watcher", "image": image, "command": ["sh", "-c", "tail -F /x"],
                             "env": [{"name": "LEVEL", "value": "info"}]},
               "volume": {"name": "logs", "emptyDir": {}},
               "nativeSidecar": "Never",
               "updatePolicy": {"type": "InPlace", "maxUnavailable": 1}}),
    )
}

/// A pod as kube-apiserver stores it after the webhook injected `watchers` (with the defaults
/// the API server fills in), `ready`: the kubelet reports each sidecar running and ready with
/// its image.
pub(crate) fn injected_pod(name: &str, watchers: &[&Watcher], native: bool, ready: bool, created: u32) -> Value {
    let names: Vec<String> = watchers.iter().map(|w| w.metadata.name.clone().unwrap_or_default()).collect();
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": format!("{created}00"),
                     "creationTimestamp": format!("2026-11-21T10:00:{created:02}Z"),
                     "annotations": {"watcher.dev/inject": names.join(",")},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    let view: PodView = serde_json::from_value(pod.clone()).expect("pod");
    let options = InjectOptions { excluded_namespaces: vec![], native_sidecars: native };
    let injection = watcher_webhook::inject(&view, "team-a", watchers, &options);
    json_patch::patch(&mut pod, &injection.patch).expect("patch applies");
    let mut statuses = (Vec::new(), Vec::new());
    for (list, init) in [("containers", false), ("initContainers", true)] {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            // What kube-apiserver fills in.
            container["terminationMessagePath"] = json!("/dev/termination-log");
            container["terminationMessagePolicy"] = json!("File");
            container["imagePullPolicy"] = json!("IfNotPresent");
            container["resources"] = json!({});
            let status = json!({"name": container["name"], "image": format!("docker.io/library/{}", container["image"].as_str().unwrap_or_default()),
                "imageID": "", "restartCount": 0, "ready": ready, "state": {"running": {"startedAt": "2026-11-21T10:01:00Z"}}});
            if init { statuses.1.push(status) } else { statuses.0.push(status) }
        }
    }
    pod["status"] = json!({"phase": "Running", "containerStatuses": statuses.0, "initContainerStatuses": statuses.1});
    pod
}

pub(crate) fn counted(pod: &Value, watchers: &[&Watcher]) -> Arc<CountedPod> {
    let pod: PodMeta = serde_json::from_value(pod.clone()).expect("valid Pod");
    let watchers: Vec<Watcher> = watchers.iter().map(|w| (*w).clone()).collect();
    Arc::new(CountedPod::with_sidecars_of(&pod, &watchers))
}

fn ops(update: &Update) -> Vec<Value> {
    let Update::InPlace(patch) = update else { panic!("not in place: {update:?}") };
    patch.ops.iter().map(|op| serde_json::to_value(op).expect("JSON")).collect()
}

const NOW: &str = "2026-11-21T11:00:00Z";

#[test]
fn an_image_only_difference_is_patched_in_place_with_a_precondition() {
    let old = log_watcher("busybox:1.36");
    let new = log_watcher("busybox:1.37");
    let pod = counted(&injected_pod("web-1", &[&old], false, true, 1), &[&new]);
    let update = update(&new, &pod, &[], NOW);
    assert_eq!(
        ops(&update),
        [
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "100"}),
            json!({"op": "test", "path": "/spec/containers/1/name", "value": "log-watcher"}),
            json!({"op": "replace", "path": "/spec/containers/1/image", "value": "busybox:1.37"}),
            json!({"op": "replace", "path": "/metadata/annotations/watcher.dev~1injected",
                   "value": format!("log-watcher@{}", new.spec.spec_hash())}),
            json!({"op": "add", "path": "/metadata/annotations/watcher.dev~1sidecar-updated", "value": NOW}),
        ]
    );
}

#[test]
fn a_native_sidecar_is_patched_in_init_containers() {
    let native = |image: &str| {
        let mut w = log_watcher(image);
        w.spec.native_sidecar = watcher_api::NativeSidecar::Auto;
        w
    };
    let pod = counted(&injected_pod("web-1", &[&native("busybox:1.36")], true, true, 1), &[&native("busybox:1.37")]);
    let ops = ops(&update(&native("busybox:1.37"), &pod, &[], NOW));
    assert_eq!(ops[2], json!({"op": "replace", "path": "/spec/initContainers/0/image", "value": "busybox:1.37"}));
}

#[test]
fn anything_more_than_the_image_goes_the_recreate_way() {
    let old = log_watcher("busybox:1.36");
    let pod_value = injected_pod("web-1", &[&old], false, true, 1);
    let mut env = log_watcher("busybox:1.37");
    env.spec.container.env =
        Some(vec![serde_json::from_value(json!({"name": "LEVEL", "value": "debug"})).expect("env")]);
    let mut volume = log_watcher("busybox:1.36");
    volume.spec.volume = Some(Box::new(
        serde_json::from_value(json!({"name": "logs", "hostPath": {"path": "/var/log"}})).expect("volume"),
    ));
    let mut secret = log_watcher("busybox:1.36");
    secret.spec.image_pull_secrets = Some(serde_json::from_value(json!({"name": "regcred"})).expect("secret"));
    let mut moved = log_watcher("busybox:1.37");
    moved.spec.native_sidecar = watcher_api::NativeSidecar::Always;
    for (case, new) in [("image and env", env), ("the volume", volume), ("a pull secret", secret), ("native", moved)] {
        let pod = counted(&pod_value, &[&new]);
        assert!(matches!(update(&new, &pod, &[], NOW), Update::Recreate(_)), "{case}");
    }
    // A sidecar edited by hand (its command) is not the Watcher's any more: never patched.
    let mut edited = pod_value.clone();
    edited["spec"]["containers"][1]["command"] = json!(["sleep", "infinity"]);
    let new = log_watcher("busybox:1.37");
    assert!(matches!(update(&new, &counted(&edited, &[&new]), &[], NOW), Update::Recreate(_)));
}

#[test]
fn several_watchers_in_one_pod_only_the_changed_one_moves() {
    let metrics = |image: &str| {
        watcher(
            "metrics",
            json!({"container": {"name": "metrics", "image": image}, "nativeSidecar": "Never",
                                  "updatePolicy": {"type": "InPlace"}}),
        )
    };
    let log = log_watcher("busybox:1.36");
    let pod_value = injected_pod("web-1", &[&log, &metrics("m:1")], false, true, 1);
    let new = metrics("m:2");
    let pod = counted(&pod_value, &[&log, &new]);
    let ops = ops(&update(&new, &pod, &[], NOW));
    assert_eq!(ops[2], json!({"op": "replace", "path": "/spec/containers/2/image", "value": "m:2"}));
    assert_eq!(
        ops[3]["value"],
        format!("log-watcher@{},metrics@{}", log.spec.spec_hash(), new.spec.spec_hash()),
        "the other Watcher's entry is kept"
    );
}

#[test]
fn an_image_policy_rewrites_the_new_image_and_keeps_the_original() {
    let old = log_watcher("busybox:1.36");
    let new = log_watcher("busybox:1.37");
    let mut pod_value = injected_pod("web-1", &[&old], false, true, 1);
    pod_value["spec"]["containers"][1]["image"] = json!("mirror.internal/library/busybox:1.36");
    pod_value["metadata"]["annotations"]["watcher.dev/original-images"] =
        json!("app=nginx:1.27,log-watcher=busybox:1.36");
    let rules = [watcher_api::image::Rule::compile("docker.io/library/", "mirror.internal/library/").expect("rule")];
    let refs: Vec<&watcher_api::image::Rule> = rules.iter().collect();
    let ops = ops(&update(&new, &counted(&pod_value, &[&new]), &refs, NOW));
    assert_eq!(ops[2]["value"], "mirror.internal/library/busybox:1.37");
    assert_eq!(ops[5]["value"], "app=nginx:1.27,log-watcher=busybox:1.37");
}

#[test]
fn at_most_max_unavailable_in_flight_and_a_stuck_pod_stops_the_rollout() {
    let old = log_watcher("busybox:1.36");
    let mut new = log_watcher("busybox:1.37");
    let now: jiff::Timestamp = NOW.parse().expect("time");
    let pods: Vec<Value> = (1..=3).map(|i| injected_pod(&format!("web-{i}"), &[&old], false, true, i)).collect();
    let plan = |pods: &[Value], watcher: &Watcher| {
        let counted: Vec<Arc<CountedPod>> = pods.iter().map(|p| counted(p, &[watcher])).collect();
        plan_in_place(watcher, &counted, &[], now)
    };
    let first = plan(&pods, &new);
    assert_eq!(first.patches.iter().map(|p| p.pod.as_str()).collect::<Vec<_>>(), ["web-1"], "oldest first, one");
    assert!(first.evictions.is_empty() && first.in_flight.is_empty());

    // web-1 patched: the kubelet has not reported the new image yet, so it is in flight.
    let mut after = pods.clone();
    let Update::InPlace(patch) = update(&new, &counted(&pods[0], &[&new]), &[], "2026-11-21T10:58:00Z") else {
        panic!("in place")
    };
    json_patch::patch(&mut after[0], &json_patch::Patch(patch.ops)).expect("applies");
    assert!(in_flight(&counted(&after[0], &[&new]), "log-watcher"));
    let second = plan(&after, &new);
    assert_eq!((second.patches.len(), second.in_flight.as_slice()), (0, &["web-1".to_owned()][..]));
    assert!(second.stuck.is_empty(), "2 minutes: not stuck yet");

    // Ready with the new image: the next pod goes.
    after[0]["status"]["containerStatuses"][1]["image"] = json!("docker.io/library/busybox:1.37");
    let third = plan(&after, &new);
    assert_eq!(third.patches.iter().map(|p| p.pod.as_str()).collect::<Vec<_>>(), ["web-2"]);

    // Not back after the deadline: stuck, and nothing more is patched even with room.
    after[0]["status"]["containerStatuses"][1]["ready"] = json!(false);
    after[0]["metadata"]["annotations"]["watcher.dev/sidecar-updated"] = json!("2026-11-21T10:50:00Z");
    new.spec.update_policy.max_unavailable = 3;
    let stuck = plan(&after, &new);
    assert_eq!(stuck.stuck, ["web-1"]);
    assert!(stuck.patches.is_empty() && stuck.evictions.is_empty());
}

#[test]
fn stored_values_may_only_add_defaults() {
    let want = json!({"name": "a", "ports": [{"containerPort": 80}], "env": [{"name": "X", "value": "1"}]});
    let stored = json!({"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP"}], "env": [{"name": "X", "value": "1"}],
                        "terminationMessagePath": "/dev/termination-log", "resources": {}});
    assert!(same_but_defaults(&want, &stored));
    let extra_env =
        json!({"name": "a", "ports": [{"containerPort": 80}], "env": [{"name": "X", "value": "1"}, {"name": "Y"}]});
    assert!(!same_but_defaults(&want, &extra_env), "an env var more");
    let removed =
        json!({"name": "a", "ports": [{"containerPort": 80}], "env": [{"name": "X", "value": "1"}], "args": ["x"]});
    assert!(!same_but_defaults(&want, &removed), "args the Watcher no longer has");
    assert!(!same_but_defaults(&json!({"name": "a", "args": ["x"]}), &json!({"name": "a"})), "args it now has");
}

#[test]
fn patch_ops_deserialize_as_json_patch() {
    let new = log_watcher("busybox:1.37");
    let pod = counted(&injected_pod("web-1", &[&log_watcher("busybox:1.36")], false, true, 1), &[&new]);
    let Update::InPlace(patch) = update(&new, &pod, &[], NOW) else { panic!("in place") };
    assert!(matches!(patch.ops[1], PatchOperation::Test(_)));
}
