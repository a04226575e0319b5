use std::sync::Arc;

use http::Method;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::{PodCounts, Watcher};

use super::{CountedPod, PodIndex, PodMeta, count, reconcile, reconciler_for_tests};
use crate::Context;

/// The pods a `Recreate` rollout evicts now.
fn eviction_choice(watcher: &Watcher, pods: &[CountedPod]) -> Vec<String> {
    let now = "2026-11-21T11:00:00Z".parse().expect("time");
    let rollout = super::rollout::plan(watcher, &refs(pods), &[], &super::rollout::Rules::new(), now);
    rollout.evictions.into_iter().map(|pod| pod.name).collect()
}

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
) -> CountedPod {
    CountedPod::from(&meta(name, namespace, labels, annotations, owner, created, terminating))
}

/// The pods as the index hands them to a reconcile.
fn refs(pods: &[CountedPod]) -> Vec<&CountedPod> {
    pods.iter().collect()
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
    assert_eq!(
        count(&w, &refs(&pods)),
        PodCounts { matched: 3, injected: 2, up_to_date: 1, missing: 1, ..PodCounts::default() }
    );
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
    assert_eq!(counted.annotations().len(), 1, "only the injection annotations");
    assert_eq!(counted.labels().len(), 1);
    assert!(counted.recreated_when_evicted() && !counted.terminating());
    assert!(
        !CountedPod::from(&meta("j", "team-a", json!({}), json!({}), Some("Job"), 1, false)).recreated_when_evicted()
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
    assert!(!index.is_synced() && index.with_namespace("team-a", |p| p.is_empty()));
    index.apply(Event::InitDone);
    assert!(index.is_synced());
    assert_eq!(index.with_namespace("team-a", |p| p.len()), 1);
    let b = meta("b", "team-b", json!({}), json!({}), None, 1, false);
    assert!(index.apply(Event::Apply(b.clone())).is_some());
    assert_eq!(index.with_namespace("team-b", |p| p.len()), 1);
    assert!(index.apply(Event::Delete(b)).is_some());
    assert!(index.with_namespace("team-b", |p| p.is_empty()));
}

/// What pods share is kept once, and forgotten with the last pod that had it: a pod whose
/// annotations change (a sidecar updated in place) leaves nothing behind.
#[test]
fn shared_labels_and_annotations_are_forgotten_with_their_last_pod() {
    let index = PodIndex::with_pods([
        meta("a", "team-a", json!({"app": "web"}), json!({}), Some("ReplicaSet"), 1, false),
        meta("b", "team-a", json!({"app": "web"}), json!({}), Some("ReplicaSet"), 2, false),
    ]);
    let interned = || crate::runtime::lock(&index.interner.shared).len();
    assert_eq!(interned(), 1, "two pods of one ReplicaSet, one copy");
    let updated = json!({"watcher.dev/sidecar-updated": "2026-11-21T10:00:00Z"});
    index.apply(Event::Apply(meta(
        "a",
        "team-a",
        json!({"app": "web"}),
        updated.clone(),
        Some("ReplicaSet"),
        1,
        false,
    )));
    assert_eq!(interned(), 2);
    index.apply(Event::Apply(meta("b", "team-a", json!({"app": "web"}), updated, Some("ReplicaSet"), 2, false)));
    assert_eq!(interned(), 1, "the old copy went with the last pod that had it");
    index.apply(Event::Delete(meta("a", "team-a", json!({}), json!({}), None, 1, false)));
    index.apply(Event::Delete(meta("b", "team-a", json!({}), json!({}), None, 2, false)));
    assert_eq!((interned(), crate::runtime::lock(&index.interner.namespaces).len()), (0, 0));
}

const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/watchers/log-watcher/status";

#[tokio::test]
async fn changed_counts_are_written_with_one_event() {
    let w = watcher("Report", 1, None);
    let pods = [("asked", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None)];
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, store(&pods), Vec::new());
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
    let action = reconcile(Arc::new(w), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    assert_eq!(action, Action::await_change());
    drop(shared);
    server.await.expect("scenario passed");
}

/// The exported text of a Watcher collector over `watchers` (as the Watcher cache holds them).
pub(crate) fn exported(watchers: Vec<Watcher>) -> String {
    let (store, mut writer) = kube::runtime::reflector::store();
    for w in watchers {
        writer.apply_watcher_event(&Event::Apply(w));
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let collector = crate::WatcherCollector::new(store, kube::runtime::reflector::store().0, Default::default());
    registry.register_collector(Box::new(collector));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    text
}

/// After a reconcile, `watcher_pods` says what `status.pods` says (read from the Watcher the
/// cache holds once the status is written), one series per state; a rollout's state is 1 and
/// the others 0.
#[tokio::test]
async fn the_pod_counts_are_exported_as_the_status_says_after_a_reconcile() {
    let w = watcher("Report", 1, None);
    let pods = [
        ("asked", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None),
        (
            "done",
            json!({}),
            json!({"watcher.dev/inject": "log-watcher", "watcher.dev/injected": "log-watcher@old"}),
            None,
        ),
    ];
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, store(&pods), Vec::new());
    let server = tokio::spawn(async move {
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let written = status.body["status"].clone();
        status.ok(&watcher_echo());
        api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await.created();
        api.expect_no_more().await;
        written
    });
    reconcile(Arc::new(w.clone()), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    let written = server.await.expect("scenario passed");
    let mut cached = serde_json::to_value(&w).expect("JSON");
    cached["status"] = written;
    cached["status"]["conditions"] = json!([{"type": "SidecarsUpdated", "status": "False", "reason": "Stuck",
        "message": "", "lastTransitionTime": "2026-11-24T10:00:00Z"}]);
    let text = exported(vec![serde_json::from_value(cached).expect("Watcher")]);
    for line in [
        r#"watcher_pods{namespace="team-a",watcher="log-watcher",state="matched"} 2"#,
        r#"watcher_pods{namespace="team-a",watcher="log-watcher",state="injected"} 1"#,
        r#"watcher_pods{namespace="team-a",watcher="log-watcher",state="up_to_date"} 0"#,
        r#"watcher_pods{namespace="team-a",watcher="log-watcher",state="missing"} 1"#,
        r#"watcher_rollout_state{namespace="team-a",watcher="log-watcher",state="stuck"} 1"#,
        r#"watcher_rollout_state{namespace="team-a",watcher="log-watcher",state="complete"} 0"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("watcher_rollout_state{")).count(), 5);
    assert!(!exported(Vec::new()).lines().any(|l| l.starts_with("watcher_pods{")), "a deleted Watcher has no series");
}

#[tokio::test]
async fn unchanged_counts_write_nothing() {
    let w = watcher("Report", 1, Some(json!({"pods": {"matched": 1, "injected": 0, "upToDate": 0, "missing": 1}})));
    let pods = [("asked", json!({}), json!({"watcher.dev/inject": "log-watcher"}), None)];
    let (ctx, api) = Context::test();
    let shared = reconciler_for_tests(ctx, store(&pods), Vec::new());
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(w), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("no request at all");
}

const REVISIONS_PATH: &str = "/apis/apps/v1/namespaces/team-a/controllerrevisions?fieldManager=watcher-operator";

fn watcher_echo() -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
           "spec": {"container": {"name": "x"}}})
}

#[tokio::test]
async fn recreate_evicts_through_the_eviction_api_and_waits_on_a_budget() {
    let w = watcher("Recreate", 2, Some(json!({"pods": {"matched": 2, "injected": 0, "upToDate": 0, "missing": 2}})));
    let pods = [
        ("a", json!({"app": "web"}), json!({}), Some("ReplicaSet")),
        ("b", json!({"app": "web"}), json!({}), Some("ReplicaSet")),
    ];
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, store(&pods), Vec::new());
    let hash = w.spec.spec_hash().to_owned();
    let server = tokio::spawn(async move {
        // The current spec is kept as a revision first.
        let revision = api.expect(Method::POST, REVISIONS_PATH).await;
        assert_eq!(revision.body["revision"], 1);
        let created = revision.body.clone();
        revision.respond(http::StatusCode::CREATED, &created);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let condition = &status.body["status"]["conditions"][0];
        assert_eq!(
            (condition["type"].as_str(), condition["reason"].as_str()),
            (Some("SidecarsUpdated"), Some("Progressing"))
        );
        assert_eq!(condition["message"], "0 of 2 pods on the current spec, 2 to update");
        status.ok(&watcher_echo());
        let eviction = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods/a/eviction").await;
        assert_eq!(eviction.body["metadata"]["name"], "a");
        eviction.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        // A PodDisruptionBudget refuses the second one: try again later.
        api.expect(Method::POST, "/api/v1/namespaces/team-a/pods/b/eviction").await.fail(429, "TooManyRequests");
        // The revisions, in the status: no pod on another spec, so the stable one is the current.
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let current = format!("log-watcher-{hash}");
        assert_eq!(status.body, json!({"status": {"currentRevision": current, "stableRevision": current}}));
        status.ok(&watcher_echo());
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(w), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    drop(shared);
    server.await.expect("scenario passed");
}

// Rollouts against the mocked API server, over pods as kube-apiserver 1.36 stored them.

use super::in_place::tests::{fixture_watcher, stored_replica};
use crate::revisions::desired_revision;
use k8s_openapi::api::apps::v1::ControllerRevision;

const FX_STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/fx-limits/watchers/log-watcher/status";
const FX_REVISIONS: &str = "/apis/apps/v1/namespaces/fx-limits/controllerrevisions";

fn stored_index(pods: &[Value], watcher: &Watcher) -> PodIndex {
    PodIndex::with_pods_of(
        pods.iter().map(|p| serde_json::from_value::<PodMeta>(p.clone()).expect("pod")),
        std::slice::from_ref(watcher),
    )
}

/// The revision of the spec the stored pods carry.
fn old_revision(number: i64) -> ControllerRevision {
    desired_revision(&fixture_watcher("fx-limits", "busybox:1.36"), "fx-limits", number).expect("revision")
}

/// Two pods on the old image, `maxUnavailable: 1`: the new spec kept as a revision, exactly one
/// JSON patch (the container's image where kube-apiserver stored it, the annotations, the
/// resourceVersion precondition), a `SidecarUpdated` Event, `SidecarsUpdated` with the counts,
/// and the counts with the patched pod up to date.
#[tokio::test]
async fn in_place_patches_one_container_image_within_the_cap() {
    let new = fixture_watcher("fx-limits", "busybox:1.37");
    let pods = [stored_replica(1), stored_replica(2)];
    let resource_version = pods[0]["metadata"]["resourceVersion"].clone();
    let (ctx, mut api) = Context::test();
    let metrics = ctx.metrics.clone();
    let shared = reconciler_for_tests(ctx, stored_index(&pods, &new), vec![old_revision(1)]);
    let hash = new.spec.spec_hash().to_owned();
    let server = tokio::spawn(async move {
        let revision = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(revision.body["metadata"]["name"], format!("log-watcher-{hash}"));
        assert_eq!(revision.body["revision"], 2, "numbered after the last");
        assert_eq!(revision.body["data"]["container"]["image"], "busybox:1.37");
        assert_eq!(revision.body["metadata"]["ownerReferences"][0]["uid"], "w-uid");
        let created = revision.body.clone();
        revision.respond(http::StatusCode::CREATED, &created);
        let patch = api.expect(Method::PATCH, "/api/v1/namespaces/fx-limits/pods/web-1").await;
        assert_eq!(
            patch.body,
            json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
                {"op": "test", "path": "/spec/initContainers/0/name", "value": "log-watcher"},
                {"op": "replace", "path": "/spec/initContainers/0/image", "value": "busybox:1.37"},
                {"op": "replace", "path": "/metadata/annotations/watcher.dev~1injected", "value": format!("log-watcher@{hash}")},
                {"op": "add", "path": "/metadata/annotations/watcher.dev~1injected-without-image", "value": patch.body[4]["value"]},
                {"op": "add", "path": "/metadata/annotations/watcher.dev~1sidecar-updated", "value": patch.body[5]["value"]},
            ])
        );
        patch.ok(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}));
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await;
        assert_eq!(event.body["reason"], "SidecarUpdated");
        assert_eq!(event.body["note"], "sidecar image updated in place to busybox:1.37 in 1 pod(s): web-1");
        event.created();
        let condition = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(
            condition.body["status"]["conditions"][0]["message"],
            "1 of 2 pods on the current spec, 1 updating, 1 to update"
        );
        condition.ok(&watcher_echo());
        let status = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(status.body["status"]["pods"], json!({"matched": 2, "injected": 2, "upToDate": 1, "missing": 0}));
        status.ok(&watcher_echo());
        let drift = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await;
        drift.created();
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(new), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    assert_eq!(metrics.in_place_updates(), 1);
    drop(shared);
    server.await.expect("scenario passed");
}

/// The operator starts after the image changed: pods injected (as the webhook does today) with
/// busybox:1.36, the Watcher already at 1.37, and no revision of 1.36 ever kept. The pods' own
/// hashes say only the image differs: one pod is patched in place (the revision of 1.36 is
/// rebuilt from a pod and the current spec kept after it, which the patch does not wait for).
#[tokio::test]
async fn in_place_needs_no_revision_of_the_old_spec() {
    use super::in_place::tests::as_injected_today;
    let new = fixture_watcher("fx-limits", "busybox:1.37");
    let pods = [as_injected_today(stored_replica(1)), as_injected_today(stored_replica(2))];
    let (ctx, mut api) = Context::test();
    let metrics = ctx.metrics.clone();
    let shared = reconciler_for_tests(ctx, stored_index(&pods, &new), vec![]);
    let hash = new.spec.spec_hash().to_owned();
    let stored = pods[0].clone();
    let server = tokio::spawn(async move {
        api.expect(Method::GET, "/api/v1/namespaces/fx-limits/pods/web-1").await.ok(&stored);
        let rebuilt = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(rebuilt.body["data"]["container"]["image"], "busybox:1.36");
        let created = rebuilt.body.clone();
        rebuilt.respond(http::StatusCode::CREATED, &created);
        let revision = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(revision.body["metadata"]["name"], format!("log-watcher-{hash}"));
        assert_eq!(revision.body["revision"], 2, "after the rebuilt one");
        let created = revision.body.clone();
        revision.respond(http::StatusCode::CREATED, &created);
        let patch = api.expect(Method::PATCH, "/api/v1/namespaces/fx-limits/pods/web-1").await;
        assert_eq!(
            patch.body[2],
            json!({"op": "replace", "path": "/spec/initContainers/0/image", "value": "busybox:1.37"})
        );
        assert_eq!(patch.body[3]["value"], format!("log-watcher@{hash}"));
        patch.ok(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}));
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await;
        assert_eq!(event.body["reason"], "SidecarUpdated");
        event.created();
        let condition = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(condition.body["status"]["conditions"][0]["reason"], "Progressing");
        condition.ok(&watcher_echo());
        let status = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(status.body["status"]["pods"]["upToDate"], 1);
        status.ok(&watcher_echo());
        api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await.created();
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(new), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    assert_eq!(metrics.in_place_updates(), 1);
    drop(shared);
    server.await.expect("scenario passed");
}

/// The same pods, the Watcher's image unchanged but `shareVolumes` now set: what the sidecar
/// mounts is not an image, so nothing is patched in place; the oldest pod is evicted (its
/// ReplicaSet recreates it injected with the new spec), within `maxUnavailable`.
#[tokio::test]
async fn a_change_of_share_volumes_is_a_recreate_not_in_place() {
    use super::in_place::tests::as_injected_today;
    let mut new = fixture_watcher("fx-limits", "busybox:1.36");
    new.spec.app.share_volumes = watcher_api::ShareVolumes::ReadOnly;
    let pods = [as_injected_today(stored_replica(1)), as_injected_today(stored_replica(2))];
    let (ctx, mut api) = Context::test();
    let metrics = ctx.metrics.clone();
    let shared = reconciler_for_tests(ctx, stored_index(&pods, &new), vec![old_revision(1)]);
    let hash = new.spec.spec_hash().to_owned();
    let server = tokio::spawn(async move {
        let revision = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(revision.body["metadata"]["name"], format!("log-watcher-{hash}"));
        assert_eq!(revision.body["data"]["shareVolumes"], "ReadOnly", "the revision keeps what the pods will carry");
        let created = revision.body.clone();
        revision.respond(http::StatusCode::CREATED, &created);
        let condition = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(condition.body["status"]["conditions"][0]["reason"], "Progressing");
        condition.ok(&watcher_echo());
        let eviction = api.expect(Method::POST, "/api/v1/namespaces/fx-limits/pods/web-1/eviction").await;
        eviction.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        let status = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(status.body["status"]["pods"], json!({"matched": 2, "injected": 2, "upToDate": 0, "missing": 0}));
        status.ok(&watcher_echo());
        api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await.created();
        api.expect_no_more().await;
    });
    let action = reconcile(Arc::new(new), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    assert_eq!(metrics.in_place_updates(), 0, "nothing patched in place");
    drop(shared);
    server.await.expect("scenario passed");
}

/// The revisions kept: none written in a steady state; beyond the history the oldest no pod
/// carries deleted, the carried one kept.
#[tokio::test]
async fn revisions_are_created_once_and_pruned_beyond_the_history() {
    let current = fixture_watcher("fx-limits", "busybox:1.36");
    let revision = format!("log-watcher-{}", current.spec.spec_hash());
    let status = json!({"pods": {"matched": 1, "injected": 1, "upToDate": 1, "missing": 0},
        "currentRevision": revision, "stableRevision": revision,
        "conditions": [{"type": "SidecarsUpdated", "status": "True", "reason": "Complete",
                        "message": "1 of 1 pods on the current spec", "lastTransitionTime": "2026-11-21T10:00:00Z"}]});
    let mut steady = current.clone();
    steady.status = Some(serde_json::from_value(status.clone()).expect("status"));
    let (ctx, api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&[stored_replica(1)], &steady), vec![old_revision(1)]);
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(steady), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("a steady state writes nothing");

    // Eleven more specs came and went; the pod still carries revision 1.
    let mut revisions = vec![old_revision(1)];
    for i in 0..11 {
        revisions.push(
            desired_revision(&fixture_watcher("fx-limits", &format!("busybox:2.{i}")), "fx-limits", i + 2)
                .expect("revision"),
        );
    }
    let mut newest = fixture_watcher("fx-limits", "busybox:2.10");
    newest.spec.update_policy.paused = true; // nothing else moves: the pass is about revisions
    newest.status = Some(serde_json::from_value(status).expect("status"));
    let doomed: Vec<String> = revisions[1..3].iter().map(|r| r.metadata.name.clone().expect("name")).collect();
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&[stored_replica(1)], &newest), revisions);
    let server = tokio::spawn(async move {
        // 12 revisions, 10 kept: the two oldest that no pod carries go; then the condition
        // (paused), the counts and their Event.
        let seen = api
            .serve(5, |method, _, _| match *method {
                Method::DELETE => (200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
                _ => (200, watcher_echo()),
            })
            .await;
        let deleted: Vec<String> = seen
            .iter()
            .filter(|(method, _, _)| *method == Method::DELETE)
            .map(|(_, path, _)| path.rsplit('/').next().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(deleted, doomed);
        api.expect_no_more().await;
    });
    reconcile(Arc::new(newest), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("scenario passed");
}

/// A spec injected and replaced before any controller saw it (no revision kept): its revision
/// is rebuilt from one pod that carries it (one read), written before the current spec's, and
/// the stable revision is the one the pods carry, never the new spec's. Tried once: the next
/// reconcile reads no pod again.
#[tokio::test]
async fn the_revision_of_a_spec_only_pods_carry_is_rebuilt_from_a_pod() {
    let old = fixture_watcher("fx-limits", "busybox:1.36");
    let mut new = fixture_watcher("fx-limits", "busybox:1.37");
    new.spec.update_policy = serde_json::from_value(json!({"type": "Report", "newPods": "Stable"})).expect("policy");
    let (old_hash, new_hash) = (old.spec.spec_hash().to_owned(), new.spec.spec_hash().to_owned());
    let pods = [stored_replica(1), stored_replica(2)];
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&pods, &new), vec![]);
    let stored = pods[0].clone();
    let server = tokio::spawn(async move {
        api.expect(Method::GET, "/api/v1/namespaces/fx-limits/pods/web-1").await.ok(&stored);
        let rebuilt = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(rebuilt.body["metadata"]["name"], format!("log-watcher-{old_hash}"));
        assert_eq!(rebuilt.body["metadata"]["annotations"]["watcher.dev/rebuilt-from"], "fx-limits/web-1");
        assert_eq!(rebuilt.body["revision"], 1);
        assert_eq!(rebuilt.body["data"]["container"]["image"], "busybox:1.36");
        assert_eq!(rebuilt.body["data"]["volume"]["name"], "logs");
        let body = rebuilt.body.clone();
        rebuilt.respond(http::StatusCode::CREATED, &body);
        let current = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        assert_eq!(current.body["metadata"]["name"], format!("log-watcher-{new_hash}"));
        assert_eq!(current.body["revision"], 2, "after the rebuilt one");
        let body = current.body.clone();
        current.respond(http::StatusCode::CREATED, &body);
        let status = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(status.body["status"]["currentRevision"], format!("log-watcher-{new_hash}"));
        assert_eq!(status.body["status"]["stableRevision"], format!("log-watcher-{old_hash}"), "what the pods carry");
        status.ok(&watcher_echo());
        api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await.created();
        api.expect_no_more().await;
    });
    reconcile(Arc::new(new.clone()), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    let (ctx, api) = Context::test();
    let again = (ctx, shared.1.clone());
    drop(shared);
    server.await.expect("rebuilt once");
    let server = tokio::spawn(async move {
        // The cache never saw the writes (a mocked server): the current spec's revision is
        // written again, no pod is read again.
        let mut api = api;
        let current = api.expect(Method::POST, &format!("{FX_REVISIONS}?fieldManager=watcher-operator")).await;
        current.respond(
            http::StatusCode::CONFLICT,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "AlreadyExists", "code": 409, "message": "exists"}),
        );
        api.expect(Method::PATCH, FX_STATUS_PATH).await.ok(&watcher_echo());
        api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await.created();
        api.expect_no_more().await;
    });
    reconcile(Arc::new(new), again.0.clone(), again.1.clone()).await.expect("reconciled again");
    drop(again);
    server.await.expect("no second read of the pod");
}

/// A pod updated in place that has not come back after the deadline stops the rollout: no
/// patch, a `SidecarUpdateStuck` Event and `SidecarsUpdated=False` (reason `Stuck`).
#[tokio::test]
async fn a_stuck_pod_halts_the_rollout() {
    let mut new = fixture_watcher("fx-limits", "busybox:1.37");
    new.spec.update_policy.max_unavailable = 5;
    new.status = Some(
        serde_json::from_value(json!({"pods": {"matched": 2, "injected": 2, "upToDate": 1, "missing": 0},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "",
                        "lastTransitionTime": "2026-11-21T10:00:00Z"}]}))
        .expect("status"),
    );
    let mut stuck = stored_replica(1);
    stuck["spec"]["initContainers"][0]["image"] = json!("busybox:1.37");
    stuck["metadata"]["annotations"]["watcher.dev/injected"] = json!(format!("log-watcher@{}", new.spec.spec_hash()));
    stuck["metadata"]["annotations"]["watcher.dev/sidecar-updated"] = json!("2026-11-21T10:00:00Z");
    let pods = [stuck, stored_replica(2)];
    let current = desired_revision(&new, "fx-limits", 2).expect("revision");
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&pods, &new), vec![old_revision(1), current]);
    let server = tokio::spawn(async move {
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/fx-limits/events").await;
        assert_eq!(event.body["reason"], "SidecarUpdateStuck");
        assert_eq!(event.body["type"], "Warning");
        event.created();
        let status = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        let conditions = status.body["status"]["conditions"].as_array().expect("conditions").clone();
        assert_eq!(conditions.len(), 2, "Ready is kept: {conditions:?}");
        assert_eq!(
            (conditions[1]["type"].as_str(), conditions[1]["status"].as_str(), conditions[1]["reason"].as_str()),
            (Some("SidecarsUpdated"), Some("False"), Some("Stuck"))
        );
        assert_eq!(
            conditions[1]["message"],
            "1 of 2 pods on the current spec, 1 updating, 1 to update; pod web-1 has not run the new sidecar image \
             within 5 minutes of its update"
        );
        status.ok(&watcher_echo());
        // The revisions: a pod is still on the old spec, the stable one.
        let revisions = api.expect(Method::PATCH, FX_STATUS_PATH).await;
        assert_eq!(revisions.body["status"]["stableRevision"], old_revision(1).metadata.name.expect("name"));
        revisions.ok(&watcher_echo());
        api.expect_no_more().await;
    });
    reconcile(Arc::new(new), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("scenario passed: no pod patched");
}

/// The index holds each pod in its namespace's set: 100,000 pods are 100,000 of these, their
/// names, and a handful of shared label sets.
#[test]
fn a_counted_pod_stays_small() {
    assert!(std::mem::size_of::<CountedPod>() <= 48, "{} bytes", std::mem::size_of::<CountedPod>());
}

/// A body kube-apiserver sent (`controller/fixtures/apiserver/`, copies of `shared/`).
fn captured(name: &str) -> String {
    let path = format!("{}/fixtures/apiserver/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).expect("fixture")
}

const STREAMED_LIST: &str = "/api/v1/pods?watch=true&timeoutSeconds=290&allowWatchBookmarks=true\
                             &sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0";

/// How kube-apiserver answers the streamed initial list.
#[derive(Clone, Copy, Debug)]
enum StreamedList {
    /// Served: the pod, then the `initial-events-end` bookmark.
    Served,
    /// Refused as 1.24 refuses it: HTTP 422 (`watch-initial-events-1.24.json`).
    Refused,
    /// Accepted (HTTP 200), then failed inside the stream as 1.36 on etcd 3.4 fails it: one
    /// `ERROR` event with a Status 500 (`watch-initial-events-1.36-etcd-3.4.json`).
    FailedInStream,
}

/// Where kube-apiserver streams the initial list (WatchList), the pods come one by one from a
/// single watch; where it refuses it (422, as 1.24) or fails it inside the stream (a 500 event,
/// as 1.36 on an etcd without progress notifications), they are listed in pages of 500, once.
/// The index sees the same pods every way, and no error reaches it.
#[tokio::test]
async fn the_initial_list_is_streamed_where_served_and_paged_on_any_failure() {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    let stored = crate::pods::in_place::tests::stored("pod-1.36-plain.json");
    let name = stored["metadata"]["name"].as_str().expect("name").to_owned();
    for answer in [StreamedList::Served, StreamedList::Refused, StreamedList::FailedInStream] {
        let (ctx, mut api) = Context::test();
        let events = super::pod_events(kube::Api::<PodMeta>::all(ctx.client.clone()));
        let server = async {
            let watch = api.expect(Method::GET, STREAMED_LIST).await;
            match answer {
                StreamedList::Served => {
                    let end = json!({"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "7", "annotations": {"k8s.io/initial-events-end": "true"}}});
                    watch.events(&[
                        json!({"type": "ADDED", "object": stored}),
                        json!({"type": "BOOKMARK", "object": end}),
                    ]);
                    return api;
                }
                StreamedList::Refused => {
                    let refused: Value =
                        serde_json::from_str(&captured("watch-initial-events-1.24.json")).expect("JSON");
                    watch.respond(http::StatusCode::UNPROCESSABLE_ENTITY, &refused);
                }
                StreamedList::FailedInStream => {
                    let failed: Value =
                        serde_json::from_str(&captured("watch-initial-events-1.36-etcd-3.4.json")).expect("JSON");
                    watch.events(&[failed]);
                }
            }
            let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                              "items": [stored]});
            api.expect(Method::GET, "/api/v1/pods?limit=500").await.ok(&list);
            api
        };
        // A stream that failed had begun (`Init`): the index starts its listing again.
        let mut expected = vec!["Init".to_owned(), format!("InitApply {name}"), "InitDone".to_owned()];
        if matches!(answer, StreamedList::FailedInStream) {
            expected.insert(0, "Init".to_owned());
        }
        let (events, api) = tokio::join!(events.take(expected.len()).collect::<Vec<_>>(), server);
        let seen: Vec<String> = events
            .into_iter()
            .map(|event| match event.expect("no error reaches the index") {
                Event::Init => "Init".to_owned(),
                Event::InitApply(pod) => format!("InitApply {}", pod.metadata.name.unwrap_or_default()),
                Event::InitDone => "InitDone".to_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(seen, expected, "{answer:?}");
        drop(ctx);
        api.expect_no_more().await;
    }
}

/// Once the streamed list has ended, an error is a watch error: a 410 (expired) or a 503 on a
/// later watch reaches the caller, which retries it, and pods are never listed in pages.
#[tokio::test]
async fn a_later_watch_error_does_not_switch_to_pages() {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    let stored = crate::pods::in_place::tests::stored("pod-1.36-plain.json");
    for code in [410_u16, 503] {
        let (ctx, mut api) = Context::test();
        let events = super::pod_events(kube::Api::<PodMeta>::all(ctx.client.clone()));
        let server = async {
            let end = json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"resourceVersion": "7", "annotations": {"k8s.io/initial-events-end": "true"}}});
            let error = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "later", "reason": "Expired", "code": code}});
            api.expect(Method::GET, STREAMED_LIST).await.events(&[
                json!({"type": "ADDED", "object": stored}),
                json!({"type": "BOOKMARK", "object": end}),
                error,
            ]);
            api
        };
        let (events, api) = tokio::join!(events.take(4).collect::<Vec<_>>(), server);
        assert!(matches!(events[2], Ok(Event::InitDone)), "{:?}", events[2]);
        match &events[3] {
            Err(kube::runtime::watcher::Error::WatchError(status)) => assert_eq!(status.code, code),
            other => panic!("{code}: expected the watch error, got {other:?}"),
        }
        drop(ctx);
        api.expect_no_more().await;
    }
}

/// The copies in this crate are the bodies kube-apiserver sent, unchanged.
#[test]
fn apiserver_fixtures_are_the_shared_captures() {
    // Each copy this crate holds (the webhook's tests hold the pod refusals).
    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/apiserver/");
    if std::fs::read_dir(shared).is_err() {
        return; // a checkout without shared/
    }
    let ours = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/apiserver/");
    for entry in std::fs::read_dir(ours).expect("fixtures").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let theirs = std::fs::read_to_string(format!("{shared}{name}")).unwrap_or_default();
        assert_eq!(captured(&name), theirs, "{name} differs from shared/");
    }
}

// A ClusterWatcher's rollout: one across the namespaces where it applies.

/// The pod reconciler over a ClusterWatcher in `payments` namespaces: `team-a`, `team-b` and
/// `team-d` (no pods) match, `team-c` does not. Five outdated pods, created in turn across three
/// namespaces; `Recreate` with `maxUnavailable: 2` and `partition: 1` evicts the two oldest of
/// the four it applies to, whatever their namespace, and keeps the newest; its revision goes to
/// the operator's namespace, its status and Events to the ClusterWatcher.
#[tokio::test]
async fn a_cluster_watcher_rolls_out_across_namespaces_oldest_first_with_a_partition() {
    use kube::runtime::reflector;
    use watcher_api::ClusterWatcher;

    let cluster: ClusterWatcher = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
        "metadata": {"name": "log-watcher", "uid": "cw-uid", "generation": 3},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.37"},
                 "selector": {"matchLabels": {"app": "web"}},
                 "namespaceSelector": {"matchLabels": {"team": "payments"}},
                 "updatePolicy": {"type": "Recreate", "maxUnavailable": 2, "partition": 1}}}))
    .expect("valid ClusterWatcher");
    let (namespaces, mut namespace_writer) = reflector::store();
    for (name, team) in [("team-a", "payments"), ("team-b", "payments"), ("team-c", "search"), ("team-d", "payments")] {
        let namespace: crate::sync::NamespaceMeta =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": team}}}))
            .expect("namespace");
        namespace_writer.apply_watcher_event(&Event::Apply(namespace));
    }
    let (clusters, mut cluster_writer) = reflector::store();
    cluster_writer.apply_watcher_event(&Event::Apply(cluster.clone()));
    let (cache, _) =
        watcher_cache::WatcherCache::from_stores(reflector::store().0, clusters, namespaces, "watcher-system");

    let old = json!({"watcher.dev/injected": "log-watcher@0ld0ld00"});
    let pods = [
        ("web-1", "team-b", 1),
        ("web-2", "team-c", 2), // not where it applies
        ("web-3", "team-a", 3),
        ("web-4", "team-b", 4),
        ("web-5", "team-a", 5), // the newest: kept by the partition
    ]
    .map(|(name, namespace, created)| {
        meta(name, namespace, json!({"app": "web"}), old.clone(), Some("ReplicaSet"), created, false)
    });
    let (ctx, mut api) = Context::test();
    let shared = super::reconciler_with_cache(ctx, PodIndex::with_pods(pods), Vec::new(), cache);
    let status_path = "/apis/watcher.dev/v1alpha1/clusterwatchers/log-watcher/status";
    let echo = serde_json::to_value(&cluster).expect("JSON");
    let hash = cluster.spec.watcher.spec_hash().to_owned();
    let server = tokio::spawn(async move {
        // The spec the pods carry has no revision: the oldest pod is read to rebuild it (gone).
        let gone =
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        api.expect(Method::GET, "/api/v1/namespaces/team-b/pods/web-1")
            .await
            .respond(http::StatusCode::NOT_FOUND, &gone);
        let revision = api
            .expect(
                Method::POST,
                "/apis/apps/v1/namespaces/watcher-system/controllerrevisions?fieldManager=watcher-operator",
            )
            .await;
        assert_eq!(revision.body["metadata"]["ownerReferences"][0]["kind"], "ClusterWatcher");
        assert_eq!(revision.body["metadata"]["ownerReferences"][0]["uid"], "cw-uid");
        assert_eq!(revision.body["metadata"]["labels"]["watcher.dev/cluster-watcher"], "log-watcher");
        let created = revision.body.clone();
        revision.respond(http::StatusCode::CREATED, &created);
        let condition = api.expect(Method::PATCH, status_path).await;
        assert_eq!(
            condition.body["status"]["conditions"][0]["message"],
            "0 of 4 pods on the current spec, 3 to update, 1 kept by partition 1"
        );
        condition.ok(&echo);
        for path in ["/api/v1/namespaces/team-b/pods/web-1/eviction", "/api/v1/namespaces/team-a/pods/web-3/eviction"] {
            api.expect(Method::POST, path)
                .await
                .ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        }
        let counts = api.expect(Method::PATCH, status_path).await;
        // The pods carry a spec no revision keeps: nothing else is stable.
        let current = format!("log-watcher-{hash}");
        assert_eq!(
            counts.body,
            json!({"status": {"pods": {"matched": 4, "injected": 4, "upToDate": 0, "missing": 0},
                              "currentRevision": current, "stableRevision": current}})
        );
        counts.ok(&echo);
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events").await;
        assert_eq!(
            (event.body["reason"].as_str(), event.body["regarding"]["kind"].as_str()),
            (Some("InjectionDrift"), Some("ClusterWatcher"))
        );
        event.created();
        api.expect_no_more().await;
    });
    let action = super::reconcile_cluster(Arc::new(cluster.clone()), shared.0.clone(), shared.1.clone())
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(super::EVICTION_RETRY));
    let counted = shared.0.metrics.cluster_pods();
    drop(shared);
    server.await.expect("scenario passed");

    // Its pods per namespace, and its rollout, are exported while it exists.
    let (store, mut writer) = reflector::store();
    let mut cached = cluster;
    cached.status = Some(
        serde_json::from_value(json!({"namespaces": 2, "conditions": [{"type": "SidecarsUpdated",
        "status": "False", "reason": "Progressing", "message": "", "lastTransitionTime": "2026-11-24T10:00:00Z"}]}))
        .expect("status"),
    );
    writer.apply_watcher_event(&Event::Apply(cached));
    let mut registry = prometheus_client::registry::Registry::default();
    let shared_counts = counted.clone();
    let collector = crate::WatcherCollector::new(reflector::store().0, store, counted);
    registry.register_collector(Box::new(collector));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    for line in [
        r#"watcher_clusterwatcher_namespaces{clusterwatcher="log-watcher"} 2"#,
        r#"watcher_clusterwatcher_pods{clusterwatcher="log-watcher",namespace="team-a",state="injected"} 2"#,
        r#"watcher_clusterwatcher_pods{clusterwatcher="log-watcher",namespace="team-b",state="up_to_date"} 0"#,
        r#"watcher_clusterwatcher_rollout_state{clusterwatcher="log-watcher",state="progressing"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert!(!text.contains(r#"namespace="team-c""#), "only where it applies:\n{text}");
    assert!(!text.contains(r#"namespace="team-d""#), "only where pods ask for it:\n{text}");

    // Deleted: its counts go at the next scrape.
    writer.apply_watcher_event(&Event::Delete(
        serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher", "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher"}}}))
        .expect("ClusterWatcher"),
    ));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert!(!text.contains("log-watcher"), "{text}");
    assert!(shared_counts.read().map(|c| c.is_empty()).unwrap_or(false), "forgotten");
}

/// A pod the kubelet reports (1.36, a real node) as unable to start the Watcher's native
/// sidecar (`CreateContainerConfigError`: runAsNonRoot with an image that runs as root): the
/// Watcher's status counts it (`cannotStart`), its `SidecarsRunning` condition names the pod,
/// the container and the kubelet's words, a Warning Event says it once; the metric has it.
/// When it starts again, the condition turns `True`, with no Event.
#[tokio::test]
async fn a_sidecar_the_kubelet_cannot_start_is_reported() {
    let path = format!("{}/fixtures/kubelet/pod-1.36-sidecar-runasnonroot-root-image.json", env!("CARGO_MANIFEST_DIR"));
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    let watcher: Watcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "plain-watcher", "namespace": "kubelet-cap", "uid": "w-uid", "generation": 1},
        "spec": {"container": {"name": "plain-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]}}}))
    .expect("Watcher");
    assert_eq!(
        stored["metadata"]["annotations"]["watcher.dev/injected"],
        format!("plain-watcher@{}", watcher.spec.spec_hash()),
        "the fixture was injected with this spec"
    );
    let status_path = "/apis/watcher.dev/v1alpha1/namespaces/kubelet-cap/watchers/plain-watcher/status";
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(std::slice::from_ref(&stored), &watcher), Vec::new());
    let echo = serde_json::to_value(&watcher).expect("JSON");
    let server = tokio::spawn(async move {
        let counts = api.expect(Method::PATCH, status_path).await;
        assert_eq!(
            counts.body,
            json!({"status": {"pods": {"matched": 1, "injected": 1, "upToDate": 1, "missing": 0, "cannotStart": 1}}})
        );
        counts.ok(&echo);
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/kubelet-cap/events").await;
        assert_eq!(
            (event.body["type"].as_str(), event.body["reason"].as_str()),
            (Some("Warning"), Some("SidecarCannotStart"))
        );
        event.created();
        let condition = api.expect(Method::PATCH, status_path).await;
        let written = &condition.body["status"]["conditions"][0];
        assert_eq!((written["type"].as_str(), written["status"].as_str()), (Some("SidecarsRunning"), Some("False")));
        assert_eq!(written["reason"], "CreateContainerConfigError");
        let message = written["message"].as_str().expect("message");
        assert!(
            message.starts_with("1 of 1 injected pods cannot start a container of this Watcher: pod shop, container \
                                 plain-watcher: CreateContainerConfigError: container has runAsNonRoot and image will run as root"),
            "{message}"
        );
        condition.ok(&echo);
        api.expect_no_more().await;
    });
    reconcile(Arc::new(watcher.clone()), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("counted, said, conditioned");

    // The metric reads the status.
    let mut reported = watcher.clone();
    reported.status = Some(
        serde_json::from_value(json!({"pods": {"matched": 1, "injected": 1, "upToDate": 1,
        "missing": 0, "cannotStart": 1}}))
        .expect("status"),
    );
    let text = exported(vec![reported.clone()]);
    assert!(
        text.contains(r#"watcher_pods{namespace="kubelet-cap",watcher="plain-watcher",state="cannot_start"} 1"#),
        "{text}"
    );

    // Started (the kubelet reports it running): True, no Event.
    let mut running = stored.clone();
    running["status"]["initContainerStatuses"][0]["state"] = json!({"running": {"startedAt": "2026-11-26T01:10:00Z"}});
    running["status"]["initContainerStatuses"][0]["ready"] = json!(true);
    reported.status = Some(
        serde_json::from_value(json!({"pods": {"matched": 1, "injected": 1, "upToDate": 1,
        "missing": 0, "cannotStart": 1}, "conditions": [{"type": "SidecarsRunning", "status": "False",
        "reason": "CreateContainerConfigError", "message": "...", "lastTransitionTime": "2026-11-26T01:00:00Z"}]}))
        .expect("status"),
    );
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&[running], &watcher), Vec::new());
    let echo = serde_json::to_value(&watcher).expect("JSON");
    let server = tokio::spawn(async move {
        let counts = api.expect(Method::PATCH, status_path).await;
        assert_eq!(counts.body["status"]["pods"]["cannotStart"], Value::Null, "0: not written");
        counts.ok(&echo);
        let condition = api.expect(Method::PATCH, status_path).await;
        let written = &condition.body["status"]["conditions"][0];
        assert_eq!((written["status"].as_str(), written["reason"].as_str()), (Some("True"), Some("Started")));
        condition.ok(&echo);
        api.expect_no_more().await;
    });
    reconcile(Arc::new(reported), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("started again");
}

/// A Job's pod kept from ending, as a real 1.36 node reported it: the operator switched its
/// sidecar to the supervisor's image, which the sidecar's `imagePullPolicy: Always` could not
/// pull, and marked the pod `watcher.dev/sidecars-cannot-end` past its grace period. The
/// Watcher counts it (`cannotStart` for the pull, `cannotEnd`), its `SidecarsEnded` condition
/// names the pod and the container, a Warning Event says it once; the metric has it.
#[tokio::test]
async fn a_pod_kept_from_ending_is_reported() {
    let path = format!("{}/fixtures/ending/job-1.36-cannot-end.json", env!("CARGO_MANIFEST_DIR"));
    let stored: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    let namespace = stored[0]["metadata"]["namespace"].as_str().expect("namespace").to_owned();
    let pod_name = stored[0]["metadata"]["name"].as_str().expect("name").to_owned();
    // The Watcher the pod was injected with (its spec as the capture's cluster stored it).
    let watcher: Watcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "stubborn", "namespace": namespace, "uid": "w-uid", "generation": 2},
        "spec": {"nativeSidecar": "Never", "container": {"name": "stubborn", "image": "busybox:1.36",
                 "imagePullPolicy": "Always", "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]}}}))
    .expect("Watcher");
    assert_eq!(
        stored[0]["metadata"]["annotations"]["watcher.dev/injected"],
        format!("stubborn@{}", watcher.spec.spec_hash()),
        "the fixture was injected with this spec"
    );
    let status_path = format!("/apis/watcher.dev/v1alpha1/namespaces/{namespace}/watchers/stubborn/status");
    let events_path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
    let (ctx, mut api) = Context::test();
    let shared = reconciler_for_tests(ctx, stored_index(&stored, &watcher), Vec::new());
    let echo = serde_json::to_value(&watcher).expect("JSON");
    let server = tokio::spawn(async move {
        let counts = api.expect(Method::PATCH, &status_path).await;
        assert_eq!(
            counts.body,
            json!({"status": {"pods": {"matched": 1, "injected": 1, "upToDate": 1, "missing": 0,
                                       "cannotStart": 1, "cannotEnd": 1}}})
        );
        counts.ok(&echo);
        // First what the kubelet cannot start (the pull), then what cannot end.
        let event = api.expect(Method::POST, &events_path).await;
        assert_eq!(event.body["reason"], "SidecarCannotStart");
        event.created();
        let running = api.expect(Method::PATCH, &status_path).await;
        running.ok(&echo);
        let event = api.expect(Method::POST, &events_path).await;
        assert_eq!(
            (event.body["type"].as_str(), event.body["reason"].as_str()),
            (Some("Warning"), Some("SidecarCannotEnd"))
        );
        event.created();
        let condition = api.expect(Method::PATCH, &status_path).await;
        let conditions = condition.body["status"]["conditions"].as_array().expect("conditions").clone();
        let ended = conditions.iter().find(|c| c["type"] == "SidecarsEnded").expect("SidecarsEnded");
        assert_eq!((ended["status"].as_str(), ended["reason"].as_str()), (Some("False"), Some("CannotEnd")));
        let message = ended["message"].as_str().expect("message");
        assert!(message.contains(&format!("pod {pod_name}, container stubborn")), "{message}");
        assert!(conditions.iter().any(|c| c["type"] == "SidecarsRunning"), "the earlier condition kept");
        condition.ok(&echo);
        api.expect_no_more().await;
    });
    reconcile(Arc::new(watcher.clone()), shared.0.clone(), shared.1.clone()).await.expect("reconciled");
    drop(shared);
    server.await.expect("counted, said, conditioned");

    let mut reported = watcher;
    reported.status = Some(
        serde_json::from_value(json!({"pods": {"matched": 1, "injected": 1, "upToDate": 1,
        "missing": 0, "cannotEnd": 1}}))
        .expect("status"),
    );
    let text = exported(vec![reported]);
    assert!(text.contains(r#"watcher="stubborn",state="cannot_end"} 1"#), "{text}");
}

/// A pod the webhook admitted without the Watcher for its namespace's rules is missing, and the
/// `Injected` condition says why in kube-apiserver's words (the first such pod); once none is
/// left out it turns `True`, only where it was there.
#[test]
fn pods_left_out_by_their_namespaces_rules_are_said_on_the_watcher() {
    let w = watcher("Report", 1, None);
    let why = "the pod would fail its namespace's ResourceQuota team with it: exceeded quota: team, requested: \
               limits.cpu=400m, used: limits.cpu=0, limited: limits.cpu=300m";
    let left = json!({"watcher.dev/left-out": format!("other: something else\nlog-watcher: {why}")});
    let pods = [
        pod("first", "team-a", json!({"app": "web"}), left.clone(), None, 1, false),
        pod("second", "team-a", json!({"app": "web"}), left, None, 2, false),
        pod("plain", "team-a", json!({"app": "web"}), current(&w), None, 3, false),
    ];
    assert_eq!(count(&w, &refs(&pods)).missing, 2);
    let (status, reason, message) = super::left_out_condition(&w, &refs(&pods)).expect("said");
    assert!(!status);
    assert_eq!(reason, "LeftOut");
    assert_eq!(
        message,
        format!("2 pods that ask for it were admitted without it: pod first: Watcher log-watcher not injected: {why}")
    );
    assert_eq!(super::left_out_condition(&w, &refs(&pods[2..])), None, "never said: nothing to say");
    let had = watcher(
        "Report",
        1,
        Some(json!({"conditions": [{"type": "Injected", "status": "False", "reason": "LeftOut", "message": "m",
            "lastTransitionTime": "2026-11-21T10:00:00Z"}]})),
    );
    let cleared = super::left_out_condition(&had, &refs(&pods[2..])).expect("said again");
    assert_eq!((cleared.0, cleared.1.as_str()), (true, "NoneLeftOut"));
}

/// A plain sidecar reads its configuration once, when it starts: a pod injected with an older
/// configuration (`watcher.dev/injected-config`) is out of date, counted so under `Report` and
/// replaced under `Recreate` and `InPlace` alike (a running container's environment cannot
/// change). A pod injected before the hash was carried (0.2.0) is judged by its spec alone until
/// the configuration next changes (the Watcher's `status.configGeneration`); watcher-agent takes
/// a new configuration while it runs, and is never out of date by it where it has the volume.
#[test]
fn a_pod_with_an_older_configuration_is_out_of_date_unless_its_sidecar_reloads() {
    let with_config = |policy: &str, image: &str| {
        let mut w = watcher(policy, 1, None);
        w.spec.container.image = Some(image.to_owned());
        w.spec.config_data = Some([("LEVEL".to_owned(), "debug".to_owned())].into());
        w
    };
    let pods_of = |w: &Watcher| {
        let injected = |config: Option<&str>| {
            let mut annotations = current(w);
            if let Some(config) = config {
                annotations[watcher_api::annotation::InjectedConfig::KEY] = json!(format!("log-watcher@{config}"));
            }
            annotations
        };
        let hash = w.spec.config_hash().expect("config data");
        [
            pod("current", "team-a", json!({"app": "web"}), injected(Some(hash)), Some("ReplicaSet"), 1, false),
            pod("older", "team-a", json!({"app": "web"}), injected(Some("0ld0ld00")), Some("ReplicaSet"), 2, false),
            pod("from-0.2.0", "team-a", json!({"app": "web"}), injected(None), Some("ReplicaSet"), 3, false),
        ]
    };
    let report = with_config("Report", "busybox:1.36");
    let pods = pods_of(&report);
    assert_eq!(
        count(&report, &refs(&pods)),
        PodCounts { matched: 3, injected: 3, up_to_date: 2, ..PodCounts::default() }
    );
    assert!(eviction_choice(&report, &pods).is_empty(), "Report replaces nothing");
    for policy in ["Recreate", "InPlace"] {
        let w = with_config(policy, "busybox:1.36");
        assert_eq!(eviction_choice(&w, &pods_of(&w)), ["older"], "{policy}");
    }
    let agent = with_config("Recreate", "watcher-agent:0.2.0");
    let pods = pods_of(&agent);
    assert_eq!(count(&agent, &refs(&pods)).up_to_date, 3, "the agent reloads");
    assert!(eviction_choice(&agent, &pods).is_empty());

    // The configuration changed since the upgrade: the ConfigMap records the generation it
    // holds, and the Watcher's status says so. The pod from 0.2.0 runs an older configuration
    // now, watcher-agent's too (it has no volume to read a new one from).
    let recorded = |mut w: Watcher| {
        w.status = Some(watcher_api::WatcherStatus { config_generation: Some(2), ..Default::default() });
        w
    };
    let report = recorded(with_config("Report", "busybox:1.36"));
    assert_eq!(count(&report, &refs(&pods_of(&report))).up_to_date, 1);
    for policy in ["Recreate", "InPlace"] {
        let mut w = recorded(with_config(policy, "busybox:1.36"));
        w.spec.update_policy.max_unavailable = 3;
        assert_eq!(eviction_choice(&w, &pods_of(&w)), ["older", "from-0.2.0"], "{policy}");
    }
    let agent = recorded(with_config("Recreate", "watcher-agent:0.2.0"));
    let pods = pods_of(&agent);
    assert_eq!(count(&agent, &refs(&pods)).up_to_date, 2, "the agent of 0.2.0 cannot reload");
    assert_eq!(eviction_choice(&agent, &pods), ["from-0.2.0"]);
}
