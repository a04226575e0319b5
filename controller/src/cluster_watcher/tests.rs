//! The ConfigMap fan-out against a mocked API server: a namespace appears, stops matching,
//! holds a foreign ConfigMap, is taken over by a same-named Watcher and handed back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::{ClusterWatcher, Watcher};
use watcher_cache::WatcherCache;

use super::{ClusterWatcherState, desired_config_map, plan_config_maps, reconcile};
use crate::Context;
use crate::fixtures::ApiServerVerifier;
use crate::scope::ScopeStatus;
use crate::sync::NamespaceMeta;

const UID: &str = "c0ffee00-0000-4000-8000-000000000001";
const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/clusterwatchers/log-agent/status";

fn cluster_watcher(namespace_selector: Value, status: Option<Value>) -> ClusterWatcher {
    let mut object = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
        "metadata": {"name": "log-agent", "uid": UID, "generation": 2},
        "spec": {"container": {"name": "log-agent", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}, "configData": {"LEVEL": "info"},
                 "namespaceSelector": namespace_selector}});
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid ClusterWatcher")
}

fn payments() -> Value {
    json!({"matchLabels": {"team": "payments"}})
}

fn namespace(name: &str, team: &str) -> NamespaceMeta {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": team}}}))
    .expect("namespace")
}

fn own_watcher(namespace: &str) -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-agent", "namespace": namespace, "uid": "w-1"},
        "spec": {"container": {"name": "team-agent", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}}}))
    .expect("Watcher")
}

/// The caches a reconcile reads, filled by the test.
struct Cluster {
    namespaces: Writer<NamespaceMeta>,
    watchers: Writer<Watcher>,
    config_maps: Writer<ConfigMap>,
    context: Arc<Context>,
    reconciler: Arc<ClusterWatcherState>,
}

fn cluster(ctx: Arc<Context>, namespaces: &[NamespaceMeta], config_maps: Vec<ConfigMap>) -> Cluster {
    let (watcher_store, watchers) = reflector::store();
    let (cluster_store, _) = reflector::store::<ClusterWatcher>();
    let (namespace_store, mut namespace_writer) = reflector::store();
    for namespace in namespaces {
        namespace_writer.apply_watcher_event(&Event::Apply(namespace.clone()));
    }
    let (cache, _) = WatcherCache::from_stores(watcher_store, cluster_store, namespace_store, "watcher-system");
    let (config_map_store, mut config_map_writer) = reflector::store();
    for config_map in config_maps {
        config_map_writer.apply_watcher_event(&Event::Apply(config_map));
    }
    let listed = Arc::new(AtomicBool::new(true));
    let revisions = watcher_cache::RevisionCache::holding(Vec::new(), "watcher-system");
    let reconciler =
        Arc::new(ClusterWatcherState::new(cache, config_map_store, listed, ScopeStatus::every_pod(), revisions));
    Cluster { namespaces: namespace_writer, watchers, config_maps: config_map_writer, context: ctx, reconciler }
}

/// Ours, as the cache holds it after the create.
fn ours(cluster: &ClusterWatcher, namespace: &str) -> ConfigMap {
    let mut config_map = desired_config_map(cluster, namespace).expect("config data");
    config_map.metadata.uid = Some(format!("cm-{namespace}"));
    config_map.metadata.resource_version = Some("5".into());
    config_map
}

fn status(namespaces: i32, ready: (&str, &str)) -> Value {
    json!({"observedGeneration": 2, "specHash": cluster_watcher(payments(), None).spec.watcher.spec_hash(),
           "namespaces": namespaces,
           "conditions": [{"type": "Ready", "status": ready.0, "reason": ready.1, "message": "m",
                           "observedGeneration": 2, "lastTransitionTime": "2026-11-24T10:00:00Z"}]})
}

fn echo() -> Value {
    serde_json::to_value(cluster_watcher(payments(), None)).expect("JSON")
}

/// Runs one reconcile against `scenario`; asserts it saw every request.
async fn reconcile_with<F: Future<Output = ()> + Send + 'static>(
    cluster: ClusterWatcher,
    state: Cluster,
    scenario: impl FnOnce(ApiServerVerifier) -> F,
    verifier: ApiServerVerifier,
) -> Action {
    let server = tokio::spawn(scenario(verifier));
    let action =
        reconcile(Arc::new(cluster), state.context.clone(), state.reconciler.clone()).await.expect("reconciled");
    drop(state);
    server.await.expect("scenario passed");
    action
}

/// A matching namespace gets the ConfigMap, owned by the ClusterWatcher, with one create; the
/// others get none; the status counts the namespaces.
#[tokio::test]
async fn each_matching_namespace_gets_one_create_and_nothing_more() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments"), namespace("team-c", "search")];
    let state = cluster(ctx, &namespaces, vec![]);
    let cw = cluster_watcher(payments(), None);
    let action = reconcile_with(
        cw.clone(),
        state,
        |mut api| async move {
            let seen = api
                .serve(2, |_, _, body| (201, body.clone()))
                .await
                .into_iter()
                .map(|(method, uri, body)| {
                    assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "ClusterWatcher");
                    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], UID);
                    assert_eq!(body["metadata"]["labels"]["watcher.dev/cluster-watcher"], "log-agent");
                    assert_eq!(body["data"], json!({"LEVEL": "info"}));
                    (method, uri)
                })
                .collect::<Vec<_>>();
            assert_eq!(
                seen,
                [
                    (Method::POST, "/api/v1/namespaces/team-a/configmaps?fieldManager=watcher-operator".to_owned()),
                    (Method::POST, "/api/v1/namespaces/team-b/configmaps?fieldManager=watcher-operator".to_owned()),
                ]
            );
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            assert_eq!(status.body["status"]["namespaces"], 2);
            assert_eq!(status.body["status"]["conditions"][0]["reason"], "Reconciled");
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
    assert_eq!(action, Action::requeue(super::RESYNC));
}

/// With its ConfigMaps cached and its status written, a reconcile makes no request; a
/// reconcile before the cache holds what was just created creates nothing again.
#[tokio::test]
async fn a_steady_state_reads_and_writes_nothing() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let cw = cluster_watcher(payments(), Some(status(2, ("True", "Reconciled"))));
    let cw = ClusterWatcher { status: Some(super::desired_status(&cw, 2, &BTreeSet::new(), true)), ..cw };
    let state = cluster(ctx, &namespaces, vec![ours(&cw, "team-a"), ours(&cw, "team-b")]);
    let server = tokio::spawn(verifier.expect_no_more());
    reconcile(Arc::new(cw), state.context.clone(), state.reconciler.clone()).await.expect("reconciled");
    drop(state);
    server.await.expect("no request");
}

/// A namespace that stops matching loses its ConfigMap (uid precondition); one relabelled to
/// match gets one.
#[tokio::test]
async fn a_namespace_that_stops_matching_loses_its_config_map() {
    let (ctx, verifier) = Context::test();
    let cw = cluster_watcher(payments(), Some(status(2, ("True", "Reconciled"))));
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "search")];
    let state = cluster(ctx, &namespaces, vec![ours(&cw, "team-a"), ours(&cw, "team-b")]);
    reconcile_with(
        cw,
        state,
        |mut api| async move {
            let delete = api.expect(Method::DELETE, "/api/v1/namespaces/team-b/configmaps/log-agent-config").await;
            assert_eq!(delete.body["preconditions"]["uid"], "cm-team-b");
            delete.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            assert_eq!(status.body["status"]["namespaces"], 1);
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
}

/// A ConfigMap of that name that is not the operator's: the create's 409 is a conflict for that
/// namespace only, named in the condition, with no read; the other namespace proceeds.
#[tokio::test]
async fn a_foreign_config_map_is_a_conflict_in_its_namespace_only() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let state = cluster(ctx, &namespaces, vec![]);
    let action = reconcile_with(
        cluster_watcher(payments(), None),
        state,
        |mut api| async move {
            let seen = api
                .serve(2, |_, uri, body| {
                    if uri.contains("team-b") {
                        (409, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                                     "reason": "AlreadyExists", "message": "configmaps \"log-agent-config\" already exists"}))
                    } else {
                        (201, body.clone())
                    }
                })
                .await;
            assert_eq!(seen.len(), 2);
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            let ready = &status.body["status"]["conditions"][0];
            assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ConfigMapConflict")));
            assert!(ready["message"].as_str().is_some_and(|m| m.contains("in namespace(s) team-b;")), "{ready}");
            assert_eq!(status.body["status"]["namespaces"], 2);
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
    assert_eq!(action, Action::requeue(super::RETRY), "the conflict is looked at again");
}

/// A Watcher of the same name takes a namespace over: the ClusterWatcher deletes its ConfigMap
/// there and stops counting it; deleting the Watcher hands the namespace back, and the
/// ConfigMap is created again once the Watcher's own is gone.
#[tokio::test]
async fn a_same_named_watcher_takes_a_namespace_over_and_hands_it_back() {
    let (ctx, mut verifier) = Context::test();
    let cw = cluster_watcher(payments(), Some(status(2, ("True", "Reconciled"))));
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let mut state = cluster(ctx, &namespaces, vec![ours(&cw, "team-a"), ours(&cw, "team-b")]);
    let taken = own_watcher("team-b");
    state.watchers.apply_watcher_event(&Event::Apply(taken.clone()));
    state.reconciler.cache.invalidate();
    assert_eq!(state.reconciler.cache.namespaces_of(&cw), ["team-a"]);

    let server = tokio::spawn(async move {
        let delete = verifier.expect(Method::DELETE, "/api/v1/namespaces/team-b/configmaps/log-agent-config").await;
        delete.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        let status = verifier.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["namespaces"], 1, "the taken namespace no longer counts");
        status.ok(&echo());
        verifier
    });
    reconcile(Arc::new(cw.clone()), state.context.clone(), state.reconciler.clone()).await.expect("reconciled");
    let mut verifier = server.await.expect("taken over");

    // The Watcher's controller creates its own ConfigMap there; then the Watcher is deleted:
    // while its ConfigMap is still there (garbage collection takes a moment) it is a conflict.
    state.config_maps.apply_watcher_event(&Event::Delete(ours(&cw, "team-b")));
    let theirs = crate::watcher::desired_config_map(&taken).map(|mut c| {
        c.metadata.uid = Some("theirs".into());
        c
    });
    let theirs = theirs.unwrap_or_else(|| {
        let mut with_config = taken.clone();
        with_config.spec.config_data = Some([("TEAM".to_owned(), "b".to_owned())].into());
        crate::watcher::desired_config_map(&with_config).expect("config")
    });
    state.config_maps.apply_watcher_event(&Event::Apply(theirs.clone()));
    state.watchers.apply_watcher_event(&Event::Delete(taken));
    state.reconciler.cache.invalidate();
    state.namespaces.apply_watcher_event(&Event::Apply(namespace("team-b", "payments"))); // no change
    let cw = ClusterWatcher { status: Some(super::desired_status(&cw, 1, &BTreeSet::new(), true)), ..cw };
    assert_eq!(state.reconciler.cache.namespaces_of(&cw), ["team-a", "team-b"], "handed back");
    let server = tokio::spawn(async move {
        let status = verifier.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "ConfigMapConflict");
        status.ok(&echo());
        verifier
    });
    reconcile(Arc::new(cw.clone()), state.context.clone(), state.reconciler.clone()).await.expect("reconciled");
    let mut verifier = server.await.expect("a conflict while theirs is there");

    // Garbage collection removes theirs: one create, and Ready again.
    state.config_maps.apply_watcher_event(&Event::Delete(theirs));
    let cw = ClusterWatcher {
        status: Some(super::desired_status(&cw, 2, &BTreeSet::from(["team-b".to_owned()]), true)),
        ..cw
    };
    let server = tokio::spawn(async move {
        let create =
            verifier.expect(Method::POST, "/api/v1/namespaces/team-b/configmaps?fieldManager=watcher-operator").await;
        create.created();
        let status = verifier.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "Reconciled");
        status.ok(&echo());
        verifier.expect_no_more().await;
    });
    reconcile(Arc::new(cw), state.context.clone(), state.reconciler.clone()).await.expect("reconciled");
    drop(state);
    server.await.expect("handed back");
}

/// New config data reaches every namespace where it applies: a merge patch of each cached
/// ConfigMap with its resourceVersion as precondition (the old key set to null), and no read.
#[tokio::test]
async fn new_config_data_patches_each_namespace_with_its_cached_version() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let before = cluster_watcher(payments(), Some(status(2, ("True", "Reconciled"))));
    let state = cluster(ctx, &namespaces, vec![ours(&before, "team-a"), ours(&before, "team-b")]);
    let mut after = before.clone();
    after.spec.watcher.config_data = Some([("FORMAT".to_owned(), "json".to_owned())].into());
    let merged = serde_json::to_value(ours(&after, "team-a")).expect("JSON");
    reconcile_with(
        after,
        state,
        |mut api| async move {
            let seen = api.serve(2, |_, _, _| (200, merged.clone())).await;
            let paths: Vec<(Method, &str)> = seen.iter().map(|(m, uri, _)| (m.clone(), uri.as_str())).collect();
            assert_eq!(
                paths,
                [
                    (Method::PATCH, "/api/v1/namespaces/team-a/configmaps/log-agent-config"),
                    (Method::PATCH, "/api/v1/namespaces/team-b/configmaps/log-agent-config"),
                ]
            );
            for (_, _, body) in &seen {
                assert_eq!(body["metadata"]["resourceVersion"], "5", "the cached version: {body}");
                assert_eq!(body["data"], json!({"FORMAT": "json", "LEVEL": null}));
            }
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            // Config data reaches pods through the ConfigMap, not their spec: the hash stays.
            assert_eq!(status.body["status"]["specHash"], json!(before_hash()));
            assert_eq!(status.body["status"]["conditions"][0]["reason"], "Reconciled");
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
}

fn before_hash() -> String {
    cluster_watcher(payments(), None).spec.watcher.spec_hash().to_owned()
}

/// The plan alone: without config data nothing is created, and what it owns is deleted.
#[test]
fn without_config_data_it_owns_no_config_map() {
    let with_config = cluster_watcher(payments(), None);
    let mut cw = with_config.clone();
    cw.spec.watcher.config_data = None;
    let owned = vec![Arc::new(ours(&with_config, "team-a"))];
    let plan = plan_config_maps(&cw, &["team-a".to_owned()], |_, _| owned.first().cloned(), &owned, &BTreeSet::new());
    assert!(plan.create.is_empty() && plan.update.is_empty());
    assert_eq!(plan.delete, [("team-a".to_owned(), "cm-team-a".to_owned())]);
}

/// A namespace relabelled to enforce `restricted`: the next reconcile (every namespace change
/// reconciles ClusterWatchers) writes the `PodSecurity` condition naming it, and nothing else;
/// unlabelled again, the condition goes.
#[tokio::test]
async fn a_relabelled_namespace_updates_the_pod_security_condition() {
    let (ctx, verifier) = Context::test();
    let restricted: NamespaceMeta = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a", "team": "payments",
                                                   "pod-security.kubernetes.io/enforce": "restricted"}}}))
    .expect("namespace");
    let namespaces = [restricted, namespace("team-b", "payments")];
    let cw = cluster_watcher(payments(), Some(status(2, ("True", "Reconciled"))));
    let cw = ClusterWatcher { status: Some(super::desired_status(&cw, 2, &BTreeSet::new(), true)), ..cw };
    let state = cluster(ctx, &namespaces, vec![ours(&cw, "team-a"), ours(&cw, "team-b")]);
    let (send_written, written) = std::sync::mpsc::channel();
    reconcile_with(
        cw.clone(),
        state,
        |mut api| async move {
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            let conditions = status.body["status"]["conditions"].as_array().expect("conditions").clone();
            let types: Vec<&str> = conditions.iter().filter_map(|c| c["type"].as_str()).collect();
            assert_eq!(types, ["Ready", "PodSecurity"]);
            assert_eq!(
                (conditions[1]["status"].as_str(), conditions[1]["reason"].as_str()),
                (Some("True"), Some("Adapted"))
            );
            assert_eq!(
                conditions[1]["message"],
                "1 namespace (team-a) enforces PodSecurity \"restricted:latest\": the Watcher complies once adapted \
                 (where the pod sets none of them: log-agent: allowPrivilegeEscalation: false, capabilities.drop: \
                 [ALL], seccompProfile: RuntimeDefault, runAsNonRoot: true, runAsUser: 65532)"
            );
            send_written.send(status.body["status"].clone()).expect("sent");
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
    let written: watcher_api::ClusterWatcherStatus =
        serde_json::from_value(written.recv().expect("the status written")).expect("a status");

    // Unlabelled: the condition is dropped (one write).
    let (ctx, verifier) = Context::test();
    let with_condition = ClusterWatcher { status: Some(written), ..cw };
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let state = cluster(ctx, &namespaces, vec![ours(&with_condition, "team-a"), ours(&with_condition, "team-b")]);
    reconcile_with(
        with_condition,
        state,
        |mut api| async move {
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            let types: Vec<&str> = status.body["status"]["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .filter_map(|c| c["type"].as_str())
                .collect();
            assert_eq!(types, ["Ready"]);
            status.ok(&echo());
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
}

/// A ClusterWatcher of watcher-agent over the payments namespaces, with `config` as its
/// `configData`.
fn agent(config: Value) -> ClusterWatcher {
    let mut cw = cluster_watcher(payments(), None);
    cw.spec.watcher.container.image = Some("watcher-agent:0.2.0".into());
    cw.spec.watcher.config_data = serde_json::from_value(config).expect("config data");
    cw
}

/// A ClusterWatcher of watcher-agent whose configuration the agent would refuse: the ConfigMap
/// that holds the last good one is not written, none is created where there is none yet, and
/// `Ready=False` (`ConfigRefused`) with a Warning Event says so, counting those namespaces.
#[tokio::test]
async fn a_refused_configuration_is_held_back_in_every_namespace() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let good = agent(json!({"AGENT_FILES": "/var/log/app/*.log", "AGENT_RULE_ERROR": "ERROR"}));
    let state = cluster(ctx, &namespaces, vec![ours(&good, "team-a")]);
    let refused = agent(json!({"AGENT_FILES": "/var/log/app/*.log", "AGENT_RULE_ERROR": "(ERROR"}));
    let echoed = serde_json::to_value(&refused).expect("JSON");
    reconcile_with(
        refused,
        state,
        |mut api| async move {
            let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events").await;
            assert_eq!(event.body["reason"], "ConfigRefused");
            event.created();
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            let ready = status.body["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
                .expect("Ready");
            assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ConfigRefused")));
            let message = ready["message"].as_str().unwrap_or_default();
            assert!(message.contains("AGENT_RULE_ERROR"), "{message}");
            assert!(
                message
                    .ends_with("1 namespace(s) have none yet: their pods wait for it until the configuration is fixed"),
                "{message}"
            );
            assert_eq!(status.body["status"]["configMapsHeld"], 1);
            status.ok(&echoed);
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
}

/// A ClusterWatcher whose first configuration is refused: no ConfigMap anywhere, none created,
/// and its status says none is held (`configMapsHeld: 0`), which the webhook reads to admit its
/// pods without the sidecar.
#[tokio::test]
async fn a_first_configuration_refused_ships_none_and_says_so() {
    let (ctx, verifier) = Context::test();
    let namespaces = [namespace("team-a", "payments"), namespace("team-b", "payments")];
    let refused = agent(json!({"AGENT_FILES": "/var/log/app/*.log", "AGENT_RULE_ERROR": "(ERROR"}));
    let state = cluster(ctx, &namespaces, vec![]);
    let echoed = serde_json::to_value(&refused).expect("JSON");
    reconcile_with(
        refused,
        state,
        |mut api| async move {
            let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events").await;
            event.created();
            let status = api.expect(Method::PATCH, STATUS_PATH).await;
            assert_eq!(status.body["status"]["configMapsHeld"], 0);
            let conditions = status.body["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let ready = conditions.iter().find(|c| c["type"] == "Ready").expect("Ready");
            let message = ready["message"].as_str().unwrap_or_default();
            assert!(message.ends_with("its pods are admitted without its sidecar until the configuration is fixed"));
            status.ok(&echoed);
            api.expect_no_more().await;
        },
        verifier,
    )
    .await;
}
