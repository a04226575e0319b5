//! Which pods go next: oldest first, the partition's newest kept, paused, at most
//! `maxUnavailable` in flight; and the `SidecarsUpdated` condition. Over copies of a pod
//! kube-apiserver 1.36 stored in a namespace with a LimitRange.

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::{Value, json};
use watcher_api::Watcher;

use super::{condition, plan};
use crate::pods::CountedPod;
use crate::pods::in_place::tests::{counted, fixture_watcher, stored_replica};
use crate::revisions::desired_revision;

const NOW: &str = "2026-11-21T11:00:00Z";

fn pod(n: u32) -> Value {
    stored_replica(n)
}

fn watcher(image: &str, policy: Value) -> Watcher {
    let mut watcher = fixture_watcher("fx-limits", image);
    watcher.spec.update_policy = serde_json::from_value(policy).expect("policy");
    watcher
}

/// The revision of the spec the fixture pods carry.
fn old_revision() -> ControllerRevision {
    desired_revision(&watcher("busybox:1.36", json!({"type": "InPlace"})), "team-a", 1).expect("revision")
}

fn names(list: &[impl AsRef<str>]) -> Vec<&str> {
    list.iter().map(AsRef::as_ref).collect()
}

fn run(watcher: &Watcher, pods: &[Value]) -> super::Rollout {
    let counted: Vec<CountedPod> = pods.iter().map(|p| counted(p, watcher)).collect();
    let counted: Vec<&CountedPod> = counted.iter().collect();
    let revision = old_revision();
    plan(watcher, &counted, &[&revision], &super::Rules::new(), NOW.parse().expect("time"))
}

#[test]
fn partition_keeps_the_newest_and_updates_the_oldest_first() {
    let pods: Vec<Value> = [3, 1, 4, 2].into_iter().map(pod).collect();
    let new = watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 4, "partition": 2}));
    let rollout = run(&new, &pods);
    assert_eq!(names(&rollout.patches.iter().map(|p| p.pod.clone()).collect::<Vec<_>>()), ["web-1", "web-2"]);
    assert_eq!((rollout.total, rollout.updated, rollout.outdated, rollout.held), (4, 0, 2, 2));
    assert_eq!(
        condition(&new, &rollout),
        (false, "Progressing", "0 of 4 pods on the current spec, 2 to update, 2 kept by partition 2".into())
    );

    // web-1 and web-2 patched and ready with the new image: partitioned, done for now.
    let mut after = pods.clone();
    for patch in &rollout.patches {
        let pod = after.iter_mut().find(|p| p["metadata"]["name"] == patch.pod.as_str()).expect("pod");
        json_patch::patch(pod, &json_patch::Patch(patch.ops.clone())).expect("applies");
        pod["status"]["initContainerStatuses"][0]["image"] = json!("docker.io/library/busybox:1.37");
    }
    let partitioned = run(&new, &after);
    assert!(partitioned.patches.is_empty());
    assert_eq!(condition(&new, &partitioned).1, "Partitioned");

    // Partition 0: the two newest follow, oldest first; then complete.
    let all = watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 4}));
    let rest = run(&all, &after);
    assert_eq!(names(&rest.patches.iter().map(|p| p.pod.clone()).collect::<Vec<_>>()), ["web-3", "web-4"]);
    for patch in &rest.patches {
        let pod = after.iter_mut().find(|p| p["metadata"]["name"] == patch.pod.as_str()).expect("pod");
        json_patch::patch(pod, &json_patch::Patch(patch.ops.clone())).expect("applies");
        pod["status"]["initContainerStatuses"][0]["image"] = json!("docker.io/library/busybox:1.37");
    }
    let done = run(&all, &after);
    assert_eq!(condition(&all, &done), (true, "Complete", "4 of 4 pods on the current spec".into()));
}

#[test]
fn paused_starts_nothing_new_and_in_flight_pods_use_the_budget() {
    let pods: Vec<Value> = (1..=3).map(pod).collect();
    let paused = watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 3, "paused": true}));
    let rollout = run(&paused, &pods);
    assert!(rollout.patches.is_empty() && rollout.evictions.is_empty());
    assert_eq!(
        condition(&paused, &rollout),
        (false, "Paused", "0 of 3 pods on the current spec, 3 to update; paused".into())
    );

    // One pod patched, its new image not yet running: with maxUnavailable 1 nothing else moves.
    let one = watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 1}));
    let first = run(&one, &pods);
    assert_eq!(first.patches.len(), 1);
    let mut after = pods.clone();
    json_patch::patch(&mut after[0], &json_patch::Patch(first.patches[0].ops.clone())).expect("applies");
    let second = run(&one, &after);
    assert_eq!((second.patches.len(), names(&second.in_flight)), (0, vec!["web-1"]));
    assert_eq!(condition(&one, &second).1, "Progressing");
}

#[test]
fn a_stuck_pod_or_a_hand_edit_stops_the_rollout() {
    let mut pods: Vec<Value> = (1..=3).map(pod).collect();
    let new = watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 3}));
    let first = run(&new, &pods[..1]);
    json_patch::patch(&mut pods[0], &json_patch::Patch(first.patches[0].ops.clone())).expect("applies");
    pods[0]["metadata"]["annotations"]["watcher.dev/sidecar-updated"] = json!("2026-11-21T10:50:00Z");
    let stuck = run(&new, &pods);
    assert!(stuck.patches.is_empty() && stuck.evictions.is_empty(), "never a wave of broken pods");
    let (status, reason, message) = condition(&new, &stuck);
    assert_eq!((status, reason), (false, "Stuck"));
    assert!(
        message.ends_with("pod web-1 has not run the new sidecar image within 5 minutes of its update"),
        "{message}"
    );

    let mut edited: Vec<Value> = (1..=2).map(pod).collect();
    edited[0]["spec"]["initContainers"][0]["image"] = json!("busybox:latest");
    let rollout = run(&new, &edited);
    assert_eq!(
        names(&rollout.patches.iter().map(|p| p.pod.clone()).collect::<Vec<_>>()),
        ["web-2"],
        "the other goes on"
    );
    assert!(condition(&new, &rollout).2.contains("(changed by hand): left alone"));
}

#[test]
fn recreate_evicts_oldest_first_within_partition_and_budget() {
    let mut pods: Vec<Value> = (1..=4).map(pod).collect();
    pods[3]["metadata"].as_object_mut().expect("metadata").remove("ownerReferences"); // a bare pod
    let new = watcher("busybox:1.37", json!({"type": "Recreate", "maxUnavailable": 2, "partition": 1}));
    let rollout = run(&new, &pods);
    assert_eq!(names(&rollout.evictions), ["web-1", "web-2"]);
    assert!(rollout.patches.is_empty());
    let paused = watcher("busybox:1.37", json!({"type": "Recreate", "maxUnavailable": 2, "paused": true}));
    assert!(run(&paused, &pods).evictions.is_empty());
    // The bare pod, outside the partition: nothing recreates it, and the rollout says so.
    let all = watcher("busybox:1.37", json!({"type": "Recreate", "maxUnavailable": 4}));
    let rollout = run(&all, &pods);
    assert_eq!(names(&rollout.evictions), ["web-1", "web-2", "web-3"]);
    let (_, reason, message) = condition(&all, &rollout);
    assert_eq!(reason, "Stuck");
    assert!(message.contains("pod web-4 (an older spec) is not controlled by a ReplicaSet"), "{message}");
}

#[test]
fn report_rolls_nothing() {
    let pods: Vec<Value> = (1..=2).map(pod).collect();
    let report = watcher("busybox:1.37", json!({"type": "Report"}));
    assert_eq!(run(&report, &pods), super::Rollout::default());
}

/// A canary `selector`: only the pods it matches are updated (the budget within the group);
/// the others are kept, and the condition says how many.
#[test]
fn a_canary_selector_updates_only_the_group() {
    let mut pods: Vec<Value> = (1..=4).map(pod).collect();
    for canary in [1, 3] {
        pods[canary]["metadata"]["labels"]["track"] = json!("canary");
    }
    let policy = json!({"type": "InPlace", "maxUnavailable": 4, "newPods": "Stable",
                        "selector": {"matchLabels": {"track": "canary"}}});
    let canary = watcher("busybox:1.37", policy);
    let rollout = run(&canary, &pods);
    assert_eq!(names(&rollout.patches.iter().map(|p| p.pod.clone()).collect::<Vec<_>>()), ["web-2", "web-4"]);
    assert_eq!((rollout.total, rollout.outdated, rollout.outside), (4, 2, 2));
    assert_eq!(
        condition(&canary, &rollout),
        (false, "Progressing", "0 of 4 pods on the current spec, 2 to update, 2 outside the canary selector".into())
    );
    // A partition within the group keeps the group's newest.
    let mut partitioned = canary.clone();
    partitioned.spec.update_policy.partition = 1;
    let rollout = run(&partitioned, &pods);
    assert_eq!(names(&rollout.patches.iter().map(|p| p.pod.clone()).collect::<Vec<_>>()), ["web-2"]);
    assert_eq!((rollout.held, rollout.outside), (1, 2));
}

/// `newPods: Stable` without a selector: a pod recreated during the hold would come back on the
/// stable revision, so only in-place updates go on; the recreations wait for the hold to end.
#[test]
fn while_new_pods_are_held_on_stable_recreations_wait() {
    let pods: Vec<Value> = (1..=3).map(pod).collect();
    let held =
        watcher("busybox:1.37", json!({"type": "Recreate", "maxUnavailable": 3, "partition": 1, "newPods": "Stable"}));
    let rollout = run(&held, &pods);
    assert!(rollout.evictions.is_empty());
    assert_eq!((rollout.outdated, rollout.waiting, rollout.held), (0, 2, 1));
    let (done, reason, message) = condition(&held, &rollout);
    assert_eq!((done, reason), (false, "Partitioned"));
    assert!(message.contains("2 to recreate once the hold ends"), "{message}");
    // Image-only changes still go in place.
    let in_place =
        watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 3, "partition": 1, "newPods": "Stable"}));
    assert_eq!(run(&in_place, &pods).patches.len(), 2);
    // The hold released: recreated like any outdated pod.
    let released = watcher("busybox:1.37", json!({"type": "Recreate", "maxUnavailable": 3, "newPods": "Stable"}));
    assert_eq!(names(&run(&released, &pods).evictions), ["web-1", "web-2", "web-3"]);
}
