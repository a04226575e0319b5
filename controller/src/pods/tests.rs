use std::sync::Arc;

use http::Method;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::{PodCounts, Watcher};

use super::{CountedPod, PodIndex, PodMeta, context_for_tests, count, eviction_choice, reconcile};
use crate::Context;

fn watcher(policy: &str, max_unavailable: i32, status: Option<Value>) -> Watcher {
    let mut object = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a", "uid": "w-uid"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"},
                 "selector": {"matchLabels": {"app": "web"}},
                 "updatePolicy": {"type": policy, "maxUnavailable": max_unavailable}}});
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid Watcher")
}

/// A pod's metadata: `namespace`, `labels`, `annotations`, controlled by `owner` (a kind),
/// created at second `created`, terminating or not.
fn meta(
    name: &str,
    namespace: &str,
    labels: Value,
    annotations: Value,
    owner: Option<&str>,
    created: u32,
    terminating: bool,
) -> PodMeta {
    let mut metadata = json!({"name": name, "namespace": namespace, "labels": labels, "annotations": annotations,
                              "creationTimestamp": format!("2026-11-21T10:00:{created:02}Z")});
    if let Some(kind) = owner {
        metadata["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "o", "controller": true}]);
    }
    if terminating {
        metadata["deletionTimestamp"] = json!("2026-11-21T10:05:00Z");
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata})).expect("valid metadata")
}

/// The same pod as the reconciler keeps it.
fn pod(
    name: &str,
    namespace: &str,
    labels: Value,
    annotations: Value,
    owner: Option<&str>,
    created: u32,
    terminating: bool,
) -> Arc<CountedPod> {
    Arc::new(CountedPod::from(&meta(name, namespace, labels, annotations, owner, created, terminating)))
}

fn current(watcher: &Watcher) -> Value {
    json!({"watcher.dev/injected": format!("log-watcher@{}", watcher.spec.spec_hash())})
}

#[test]
fn counts_annotation_selector_both_other_namespaces_outdated_and_terminating() {
    let w = watcher("Report", 1, None);
    let pods = [
        pod("asked", "team-a", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None, 1, false),
        pod("selected", "team-a", json!({"app": "web"}), current(&w), None, 2, false),
        pod(
            "both",
            "team-a",
            json!({"app": "web"}),
            json!({"watcher.dev/inject": "log-watcher", "watcher.dev/injected": "log-watcher@old"}),
            None,
            3,
            false,
        ),
        pod("elsewhere", "team-b", json!({"app": "web"}), json!({}), None, 4, false),
        pod("unrelated", "team-a", json!({"app": "db"}), json!({}), None, 5, false),
        pod("leaving", "team-a", json!({"app": "web"}), json!({}), None, 6, true),
    ];
    assert_eq!(count(&w, &pods), PodCounts { matched: 3, injected: 2, up_to_date: 1, missing: 1 });
}

#[test]
fn eviction_takes_controller_owned_missing_or_outdated_pods_within_the_budget() {
    let w = watcher("Recreate", 2, None);
    let pods = [
        pod("bare", "team-a", json!({"app": "web"}), json!({}), None, 1, false),
        pod("job", "team-a", json!({"app": "web"}), json!({}), Some("Job"), 2, false),
        pod("rs-new", "team-a", json!({"app": "web"}), json!({}), Some("ReplicaSet"), 9, false),
        pod(
            "sts",
            "team-a",
            json!({"app": "web"}),
            json!({"watcher.dev/injected": "log-watcher@old"}),
            Some("StatefulSet"),
            4,
            false,
        ),
        pod("ds", "team-a", json!({"app": "web"}), json!({}), Some("DaemonSet"), 5, false),
        pod("fine", "team-a", json!({"app": "web"}), current(&w), Some("ReplicaSet"), 3, false),
    ];
    assert_eq!(eviction_choice(&w, &pods), ["sts", "ds"], "oldest first, two at most, never bare or Job pods");

    let mut with_terminating = pods.to_vec();
    with_terminating.push(pod("going", "team-a", json!({"app": "web"}), json!({}), Some("ReplicaSet"), 1, true));
    assert_eq!(eviction_choice(&w, &with_terminating), ["sts"], "a terminating pod uses the budget");

    assert!(eviction_choice(&watcher("Report", 2, None), &pods).is_empty(), "Report only counts");
}

#[test]
fn cached_pods_keep_only_what_counts() {
    let mut full = meta(
        "p",
        "team-a",
        json!({"app": "web"}),
        json!({"watcher.dev/inject": "a", "kubectl.kubernetes.io/last-applied-configuration": "{...}"}),
        Some("ReplicaSet"),
        1,
        false,
    );
    full.metadata.managed_fields = Some(vec![Default::default()]);
    let counted = CountedPod::from(&full);
    assert_eq!(counted.annotations.len(), 1, "only the injection annotations");
    assert_eq!(counted.labels.len(), 1);
    assert!(counted.recreated_when_evicted && !counted.terminating);
    assert!(
        !CountedPod::from(&meta("j", "team-a", json!({}), json!({}), Some("Job"), 1, false)).recreated_when_evicted
    );
}

fn store(pods: &[(&str, Value, Value, Option<&str>)]) -> PodIndex {
    PodIndex::with_pods(pods.iter().enumerate().map(|(i, (name, labels, annotations, owner))| {
        meta(name, "team-a", labels.clone(), annotations.clone(), *owner, i as u32, false)
    }))
}

#[test]
fn the_index_swaps_in_the_initial_list_and_follows_changes() {
    let index = PodIndex::default();
    let a = meta("a", "team-a", json!({}), json!({}), None, 1, false);
    index.apply(Event::Init);
    assert!(index.apply(Event::InitApply(a)).is_none(), "the initial list triggers nothing");
    assert!(!index.is_synced() && index.in_namespace("team-a").is_empty());
    index.apply(Event::InitDone);
    assert!(index.is_synced());
    assert_eq!(index.in_namespace("team-a").len(), 1);
    let b = meta("b", "team-b", json!({}), json!({}), None, 1, false);
    assert!(index.apply(Event::Apply(b.clone())).is_some());
    assert_eq!(index.in_namespace("team-b").len(), 1);
    assert!(index.apply(Event::Delete(b)).is_some());
    assert!(index.in_namespace("team-b").is_empty());
}

const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/watchers/log-watcher/status";

#[tokio::test]
async fn changed_counts_are_written_with_one_event() {
    let w = watcher("Report", 1, None);
    let pods = [("asked", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None)];
    let (ctx, mut api) = Context::test();
    let shared = context_for_tests(ctx, store(&pods));
    let server = tokio::spawn(async move {
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(
            status.body,
            json!({"status": {"pods": {"matched": 1, "injected": 0, "upToDate": 0, "missing": 1}}})
        );
        status
            .ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
                          "spec": {"container": {"name": "x"}}}));
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        assert_eq!(event.body["reason"], "InjectionDrift");
        assert_eq!(event.body["regarding"]["name"], "log-watcher");
        event.created();
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(w), shared.clone()).await.expect("reconciled");
    assert_eq!(action, Action::await_change());
    drop(shared);
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn unchanged_counts_write_nothing() {
    let w = watcher("Report", 1, Some(json!({"pods": {"matched": 1, "injected": 0, "upToDate": 0, "missing": 1}})));
    let pods = [("asked", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None)];
    let (ctx, api) = Context::test();
    let shared = context_for_tests(ctx, store(&pods));
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(w), shared.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("no request at all");
}

#[tokio::test]
async fn recreate_evicts_through_the_eviction_api_and_waits_on_a_budget() {
    let w = watcher("Recreate", 2, Some(json!({"pods": {"matched": 2, "injected": 0, "upToDate": 0, "missing": 2}})));
    let pods = [
        ("a", json!({"app": "web"}), json!({}), Some("ReplicaSet")),
        ("b", json!({"app": "web"}), json!({}), Some("ReplicaSet")),
    ];
    let (ctx, mut api) = Context::test();
    let shared = context_for_tests(ctx, store(&pods));
    let server = tokio::spawn(async move {
        let eviction = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods/a/eviction").await;
        assert_eq!(eviction.body["metadata"]["name"], "a");
        eviction.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        // A PodDisruptionBudget refuses the second one: try again later.
        api.expect(Method::POST, "/api/v1/namespaces/team-a/pods/b/eviction").await.fail(429, "TooManyRequests");
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(w), shared.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    drop(shared);
    server.await.expect("scenario passed");
}

// updatePolicy: InPlace, against the mocked API server.

use super::in_place::tests::{counted as counted_in_place, injected_pod, log_watcher};

fn in_place_index(pods: &[Value], watcher: &Watcher) -> PodIndex {
    PodIndex::with_pods_of(
        pods.iter().map(|p| serde_json::from_value::<PodMeta>(p.clone()).expect("pod")),
        std::slice::from_ref(watcher),
    )
}

/// Two pods carry the old image, `maxUnavailable: 1`: exactly one JSON patch (the container's
/// image, the annotations, the resourceVersion precondition), a `SidecarUpdated` Event, and
/// the counts with the patched pod up to date.
#[tokio::test]
async fn in_place_patches_one_container_image_within_the_cap() {
    let old = log_watcher("busybox:1.36");
    let mut new = log_watcher("busybox:1.37");
    new.metadata.uid = Some("w-uid".into());
    let pods = [injected_pod("web-1", &[&old], false, true, 1), injected_pod("web-2", &[&old], false, true, 2)];
    assert_eq!(counted_in_place(&pods[0], &[&new]).name.as_ref(), "web-1");
    let (ctx, mut api) = Context::test();
    let metrics = ctx.metrics.clone();
    let shared = context_for_tests(ctx, in_place_index(&pods, &new));
    let hash = new.spec.spec_hash();
    let server = tokio::spawn(async move {
        let patch = api.expect(Method::PATCH, "/api/v1/namespaces/team-a/pods/web-1").await;
        let ops = patch.body.as_array().expect("a JSON patch").clone();
        assert_eq!(ops[0], json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "100"}));
        assert_eq!(ops[2], json!({"op": "replace", "path": "/spec/containers/1/image", "value": "busybox:1.37"}));
        assert_eq!(ops[3]["value"], format!("log-watcher@{hash}"));
        assert_eq!(ops.len(), 5, "{ops:?}");
        patch.ok(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}));
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        assert_eq!(event.body["reason"], "SidecarUpdated");
        assert_eq!(event.body["note"], "sidecar image updated in place to busybox:1.37 in 1 pod(s): web-1");
        event.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["pods"], json!({"matched": 2, "injected": 2, "upToDate": 1, "missing": 0}));
        status
            .ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
                          "spec": {"container": {"name": "x"}}}));
        let drift = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        drift.created();
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(new), shared.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    assert_eq!(metrics.in_place_updates(), 1);
    drop(shared);
    server.await.expect("scenario passed");
}

/// A pod updated in place that has not come back after the deadline stops the rollout: no
/// patch, a `SidecarUpdateStuck` Event and `SidecarsUpdated=False` (reason `Stuck`).
#[tokio::test]
async fn a_stuck_pod_halts_the_rollout() {
    let old = log_watcher("busybox:1.36");
    let mut new = log_watcher("busybox:1.37");
    new.spec.update_policy.max_unavailable = 5;
    new.status = Some(
        serde_json::from_value(json!({"pods": {"matched": 2, "injected": 2, "upToDate": 1, "missing": 0},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "",
                        "lastTransitionTime": "2026-11-21T10:00:00Z"}]}))
        .expect("status"),
    );
    let mut stuck = injected_pod("web-1", &[&new], false, false, 1);
    stuck["metadata"]["annotations"]["watcher.dev/sidecar-updated"] = json!("2026-11-21T10:00:00Z");
    stuck["status"]["containerStatuses"][1]["image"] = json!("docker.io/library/busybox:1.36");
    let pods = [stuck, injected_pod("web-2", &[&old], false, true, 2)];
    let (ctx, mut api) = Context::test();
    let shared = context_for_tests(ctx, in_place_index(&pods, &new));
    let server = tokio::spawn(async move {
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        assert_eq!(event.body["reason"], "SidecarUpdateStuck");
        assert_eq!(event.body["type"], "Warning");
        event.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let conditions = status.body["status"]["conditions"].as_array().expect("conditions").clone();
        assert_eq!(conditions.len(), 2, "Ready is kept: {conditions:?}");
        assert_eq!(
            (conditions[1]["type"].as_str(), conditions[1]["status"].as_str(), conditions[1]["reason"].as_str()),
            (Some("SidecarsUpdated"), Some("False"), Some("Stuck"))
        );
        assert!(
            conditions[1]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("pod web-1 has not run the new sidecar image"))
        );
        status
            .ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
                          "spec": {"container": {"name": "x"}}}));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(new), shared.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("scenario passed: no pod patched");
}
