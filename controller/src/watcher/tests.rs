use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use watcher_api::Watcher;

use kube::runtime::reflector;
use kube::runtime::watcher::Event;

use super::{WatcherState, desired_config_map, reconcile};
use crate::fixtures::ApiServerVerifier;
use crate::scope::{Registered, ScopeStatus};
use crate::{Context, Metrics};

const CM_PATH: &str = "/api/v1/namespaces/team-a/configmaps/log-watcher-config";
const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/watchers/log-watcher/status";
const CREATE_PATH: &str = "/api/v1/namespaces/team-a/configmaps?fieldManager=watcher-operator";
const UID: &str = "5b1c2f4e-0000-4000-8000-000000000001";

fn watcher(spec: Value, status: Option<Value>) -> Watcher {
    let mut object = json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a", "uid": UID, "generation": 4},
        "spec": spec,
    });
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid Watcher")
}

fn spec_with_config() -> Value {
    json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}, "configData": {"LEVEL": "debug"}})
}

fn owner_reference() -> Value {
    json!([{"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "name": "log-watcher",
            "uid": UID, "controller": true}])
}

fn status_of(watcher: &Watcher, config_map_name: Option<&str>, message: &str) -> Value {
    json!({
        "configMapName": config_map_name,
        "configGeneration": config_map_name.map(|_| 4),
        "observedGeneration": 4,
        "specHash": watcher.spec.spec_hash(),
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": message,
                        "observedGeneration": 4, "lastTransitionTime": "2026-11-21T10:00:00Z"}],
    })
}

/// The controller's state with an empty ConfigMap cache that the test feeds (its writer).
fn state_fed_by_the_test() -> (Arc<WatcherState>, reflector::store::Writer<ConfigMap>) {
    let (store, writer) = reflector::store();
    (WatcherState::new(store, ScopeStatus::every_pod(), reflector::store().0), writer)
}

/// Answers the ConfigMap's create as kube-apiserver does, at resourceVersion 101: the object
/// created.
async fn created_at_101(api: &mut ApiServerVerifier) -> Value {
    let create = api.expect(Method::POST, CREATE_PATH).await;
    let mut created = create.body.clone();
    created["metadata"]["resourceVersion"] = json!("101");
    create.respond(http::StatusCode::CREATED, &created);
    created
}

/// Expects the ConfigMap created again with `data` and answers it, then the Watcher's status;
/// then nothing more.
async fn created_again_then_nothing(mut api: ApiServerVerifier, data: Value) {
    let again = api.expect(Method::POST, CREATE_PATH).await;
    assert_eq!(again.body["data"], data);
    let body = again.body.clone();
    again.respond(http::StatusCode::CREATED, &body);
    api.expect(Method::PATCH, STATUS_PATH).await.ok(&watcher_echo(spec_with_config()));
    api.expect_no_more().await;
}

/// Runs one reconcile, with `cached` in the ConfigMap cache, against the scenario, and asserts
/// the scenario saw every request.
async fn run_scenario<F>(
    watcher: Watcher,
    cached: Vec<ConfigMap>,
    scenario: impl FnOnce(ApiServerVerifier) -> F,
) -> (Result<Action, crate::Error>, Metrics)
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ctx, verifier) = Context::test();
    let (store, mut writer) = reflector::store();
    for cm in cached {
        writer.apply_watcher_event(&Event::Apply(cm));
    }
    let server = tokio::spawn(scenario(verifier));
    let result = reconcile(
        Arc::new(watcher),
        ctx.clone(),
        WatcherState::new(store, ScopeStatus::every_pod(), reflector::store().0),
    )
    .await;
    let metrics = ctx.metrics.clone();
    drop(ctx); // lets the scenario see that no request follows
    server.await.expect("scenario passed");
    (result, metrics)
}

fn watcher_echo(spec: Value) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
           "metadata": {"name": "log-watcher", "namespace": "team-a"}, "spec": spec})
}

/// A first reconcile is two requests: the ConfigMap created, the status written. No read.
#[tokio::test]
async fn first_reconcile_creates_the_config_map_then_writes_status() {
    let watcher = watcher(spec_with_config(), None);
    let hash = watcher.spec.spec_hash().to_owned();
    let (result, _) = run_scenario(watcher, vec![], |mut api| async move {
        let create = api.expect(Method::POST, CREATE_PATH).await;
        assert_eq!(
            create.body,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "log-watcher-config", "namespace": "team-a",
                             "labels": {"app.kubernetes.io/managed-by": "watcher-operator", "watcher.dev/watcher": "log-watcher"},
                             "annotations": {watcher_api::CONFIG_GENERATION_ANNOTATION: "4"},
                             "ownerReferences": owner_reference()},
                "data": {"LEVEL": "debug"},
            })
        );
        let created = create.body.clone();
        create.respond(http::StatusCode::CREATED, &created);

        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let patch = &status.body["status"];
        assert_eq!(patch["configMapName"], "log-watcher-config");
        assert_eq!(patch["configGeneration"], 4);
        assert_eq!(patch["observedGeneration"], 4);
        assert_eq!(patch["specHash"], hash);
        assert_eq!(patch["conditions"][0]["type"], "Ready");
        assert_eq!(patch["conditions"][0]["status"], "True");
        assert_eq!(patch["conditions"][0]["reason"], "Reconciled");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 4);
        status.ok(&watcher_echo(spec_with_config()));
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(result.expect("reconciled"), Action::requeue(super::RESYNC));
}

/// A steady reconcile reads and writes nothing: the ConfigMap comes from the cache.
#[tokio::test]
async fn steady_state_makes_no_request() {
    let unsynced = watcher(spec_with_config(), None);
    let status = status_of(&unsynced, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    let watcher = watcher(spec_with_config(), Some(status));
    let cached: ConfigMap = desired_config_map(&watcher).expect("has config");
    let (result, metrics) = run_scenario(watcher, vec![cached], |api| api.expect_no_more()).await;
    result.expect("reconciled");
    assert_eq!(metrics.reconciles_of("watcher"), 1);
}

/// After an upgrade from 0.2.0, whose ConfigMaps record no generation: nothing is written, and
/// the status records none (pods injected by 0.2.0 run what the ConfigMap holds).
#[tokio::test]
async fn a_config_map_written_by_0_2_0_is_left_as_it_is_and_no_generation_recorded() {
    let unsynced = watcher(spec_with_config(), None);
    let mut status = status_of(&unsynced, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    status.as_object_mut().map(|s| s.remove("configGeneration"));
    let watcher = watcher(spec_with_config(), Some(status));
    let mut cached: ConfigMap = desired_config_map(&watcher).expect("has config");
    cached.metadata.annotations = None;
    let (result, _) = run_scenario(watcher, vec![cached], |api| api.expect_no_more()).await;
    result.expect("reconciled");
}

/// Changed config data: one merge patch with the cached resourceVersion, removed keys nulled.
#[tokio::test]
async fn changed_config_data_is_patched_with_the_cached_resource_version() {
    let old =
        watcher(json!({"container": {"name": "log-watcher"}, "configData": {"LEVEL": "debug", "OLD": "1"}}), None);
    let mut cached = desired_config_map(&old).expect("has config");
    cached.metadata.resource_version = Some("17".into());
    let unsynced = watcher(spec_with_config(), None);
    let status = status_of(&unsynced, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    let watcher = watcher(spec_with_config(), Some(status));
    let (result, _) = run_scenario(watcher, vec![cached], |mut api| async move {
        let patch = api.expect(Method::PATCH, CM_PATH).await;
        assert_eq!(patch.body["metadata"]["resourceVersion"], "17", "optimistic concurrency");
        assert_eq!(patch.body["data"], json!({"LEVEL": "debug", "OLD": null}));
        assert_eq!(patch.body["metadata"]["ownerReferences"], owner_reference());
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "log-watcher-config"}});
        patch.ok(&body);
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn removed_config_data_deletes_the_config_map_and_clears_the_name() {
    let with_config = watcher(spec_with_config(), None);
    let mut cached = desired_config_map(&with_config).expect("has config");
    cached.metadata.uid = Some("cm-uid".into());
    let status = status_of(&with_config, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    let watcher = watcher(
        json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}}),
        Some(status),
    );
    let (result, _) = run_scenario(watcher, vec![cached], |mut api| async move {
        let delete = api.expect(Method::DELETE, CM_PATH).await;
        assert_eq!(delete.body["preconditions"]["uid"], "cm-uid");
        delete.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));

        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["configMapName"], Value::Null, "null removes the field");
        assert_eq!(status.body["status"]["conditions"][0]["message"], "Watcher has no config data");
        status.ok(&watcher_echo(json!({"container": {"name": "x"}})));
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

/// A ConfigMap of that name that the cache does not hold (not labelled as the operator's): the
/// create fails, a GET tells whose it is, and someone else's is left alone.
#[tokio::test]
async fn a_config_map_owned_by_someone_else_is_left_alone() {
    let watcher = watcher(spec_with_config(), None);
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "log-watcher-config", "namespace": "team-a"}, "data": {"mine": "yes"}});
    let (result, _) = run_scenario(watcher, vec![], |mut api| async move {
        api.expect(Method::POST, CREATE_PATH).await.fail(409, "AlreadyExists");
        api.expect(Method::GET, CM_PATH).await.ok(&foreign);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["configMapName"], Value::Null);
        assert_eq!(status.body["status"]["conditions"][0]["status"], "False");
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "ConfigMapConflict");
        status.ok(&watcher_echo(spec_with_config()));
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(result.expect("reconciled"), Action::requeue(super::CONFLICT_RETRY));
}

#[tokio::test]
async fn api_errors_back_off_and_are_counted() {
    let watcher = watcher(spec_with_config(), None);
    let (result, metrics) = run_scenario(watcher.clone(), vec![], |mut api| async move {
        api.expect(Method::POST, CREATE_PATH).await.fail(500, "InternalError");
        api.expect_no_more().await;
    })
    .await;
    let error = result.expect_err("a 500 fails the reconcile");
    assert_eq!(error.metric_label(), "api_server_error");

    assert_eq!(metrics.reconciles_of("watcher"), 1);

    let (ctx, _api) = Context::test();
    let watcher = Arc::new(watcher);
    let first = crate::runtime::error_policy("watcher", watcher.as_ref(), &error, &ctx);
    let second = crate::runtime::error_policy("watcher", watcher.as_ref(), &error, &ctx);
    assert_eq!(first, Action::requeue(std::time::Duration::from_secs(5)));
    assert_eq!(second, Action::requeue(std::time::Duration::from_secs(10)));
    assert_eq!(ctx.metrics.errors_of("watcher", "api_server_error"), 2);
}

/// A Watcher stored with a container name the schema now refuses: the ConfigMap is kept up to
/// date as ever, and `Ready=False` says why the webhook never injects it.
#[tokio::test]
async fn an_invalid_spec_is_not_ready_and_says_why() {
    let spec = json!({"container": {"name": "Bad_Name", "image": "busybox:1.36"},
                      "selector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["web"]}]}});
    let (result, _) = run_scenario(watcher(spec.clone(), None), vec![], |mut api| async move {
        let event = api.expect(Method::POST, EVENTS_PATH).await;
        assert_eq!(
            (event.body["type"].as_str(), event.body["reason"].as_str()),
            (Some("Warning"), Some("InvalidSpec"))
        );
        assert_eq!(event.body["note"], INVALID_MESSAGE);
        assert_eq!(event.body["regarding"]["name"], "log-watcher");
        event.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let ready = &status.body["status"]["conditions"][0];
        assert_eq!((ready["type"].as_str(), ready["status"].as_str()), (Some("Ready"), Some("False")));
        assert_eq!(ready["reason"], "InvalidSpec");
        assert_eq!(ready["message"], INVALID_MESSAGE);
        status.ok(&watcher_echo(spec));
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/team-a/events";
const INVALID_MESSAGE: &str = "not injected: a pod would be invalid with it: spec.container.name: \"Bad_Name\" is not a \
     DNS-1123 label; spec.selector.matchExpressions[0].operator: \"Like\" is not one of In, NotIn, Exists, DoesNotExist";

/// Before 1.30 kube-apiserver validates the whole object on a status write, and refuses the
/// status of a Watcher its schema refuses (422): the Warning Event has said why, and the
/// reconcile does not fail over it (no retry storm); the webhook leaves the Watcher out.
#[tokio::test]
async fn an_invalid_spec_is_said_by_an_event_where_the_status_is_refused() {
    let spec = json!({"container": {"name": "Bad_Name", "image": "busybox:1.36"},
                      "selector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["web"]}]}});
    let (result, metrics) = run_scenario(watcher(spec, None), vec![], |mut api| async move {
        let event = api.expect(Method::POST, EVENTS_PATH).await;
        assert_eq!(event.body["note"], INVALID_MESSAGE);
        event.created();
        let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
            "message": "Watcher.watcher.dev \"log-watcher\" is invalid: spec.container.name: Invalid value: \"Bad_Name\""});
        api.expect(Method::PATCH, STATUS_PATH).await.respond(http::StatusCode::UNPROCESSABLE_ENTITY, &refused);
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(result.expect("not an error"), Action::requeue(super::RESYNC));
    assert_eq!(metrics.errors_of("watcher", "api_server_error"), 0);
}

/// Reconciles that run before the caches have seen the controller's own writes (Watchers
/// created in bulk) make no request: no second create (no 409, no read), no second status.
/// Once the caches hold those versions, the cache is read again.
#[tokio::test]
async fn a_reconcile_before_the_caches_see_its_writes_repeats_none() {
    let watcher = watcher(spec_with_config(), None);
    let (ctx, mut api) = Context::test();
    let (shared, mut writer) = state_fed_by_the_test();
    let server = tokio::spawn(async move {
        let created = created_at_101(&mut api).await;
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let mut echo = watcher_echo(spec_with_config());
        echo["metadata"]["resourceVersion"] = json!("102");
        echo["status"] = status.body["status"].clone();
        status.ok(&echo);
        api.expect_no_more().await;
        created
    });
    let mut stale = watcher.clone(); // the cache's copy: no status, no ConfigMap yet
    stale.metadata.resource_version = Some("100".into());
    let stale = Arc::new(stale);
    reconcile(stale.clone(), ctx.clone(), shared.clone()).await.expect("first");
    reconcile(stale.clone(), ctx.clone(), shared.clone()).await.expect("second, before the caches catch up");
    let written = shared.written.take();
    let statuses = shared.statuses.take();
    let store = shared.config_maps.clone();
    drop((shared, ctx));
    let created = server.await.expect("one create, one status");

    // The caches catch up: the ConfigMap at 101, the Watcher at 102 with its status.
    writer.apply_watcher_event(&Event::Apply(serde_json::from_value::<ConfigMap>(created).expect("ConfigMap")));
    let mut caught_up = serde_json::to_value(&watcher).expect("JSON");
    caught_up["metadata"]["resourceVersion"] = json!("102");
    caught_up["status"] = serde_json::to_value(statuses.values().next().expect("kept").1.1.clone()).expect("JSON");
    let caught_up: Watcher = serde_json::from_value(caught_up).expect("Watcher");
    let (ctx, api) = Context::test();
    let shared = WatcherState::new(store, ScopeStatus::every_pod(), reflector::store().0);
    shared.written.restore(written);
    shared.statuses.restore(statuses);
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(caught_up), ctx.clone(), shared.clone()).await.expect("steady");
    let forgotten = shared.written.len() == 0 && shared.statuses.len() == 0;
    drop((shared, ctx));
    server.await.expect("no request");
    assert!(forgotten, "what the caches hold is forgotten");
}

/// A Watcher that selects pods is `Ready` only once the registered matchConditions send them:
/// before the leader has read the configuration nothing is written at all (no flapping at
/// each start), and while the conditions in place predate the selector, `Ready=False` says so.
#[tokio::test]
async fn ready_waits_for_the_admission_scope() {
    let spec = json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]},
                      "selector": {"matchLabels": {"app": "web"}}});
    let (ctx, mut api) = Context::test();
    let pending =
        WatcherState::new(reflector::store().0, ScopeStatus::fixed(Registered::Pending), reflector::store().0);
    let action = reconcile(Arc::new(watcher(spec.clone(), None)), ctx.clone(), pending).await.expect("reconciled");
    assert_eq!(action, Action::requeue(super::SCOPE_PENDING_RETRY));

    let stale = ScopeStatus::fixed(Registered::Scoped(Arc::new(watcher_admission::Scope::default())));
    let shared = WatcherState::new(reflector::store().0, stale, reflector::store().0);
    let server = tokio::spawn(async move {
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let ready = &status.body["status"]["conditions"][0];
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("AdmissionScopePending"))
        );
        status.ok(&watcher_echo(json!({"container": {"name": "log-watcher"}})));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(watcher(spec, None)), ctx.clone(), shared).await.expect("reconciled");
    drop(ctx);
    server.await.expect("scenario passed");
}

/// A ConfigMap the controller created and someone deleted before its cache saw it: the patch
/// that follows is answered 404, what was written is forgotten, and the next reconcile creates
/// it again (a ConfigMap deleted by hand is put back).
#[tokio::test]
async fn a_config_map_deleted_before_the_cache_saw_it_is_created_again() {
    let watcher = watcher(spec_with_config(), None);
    let mut changed = serde_json::to_value(&watcher).expect("JSON");
    changed["spec"]["configData"] = json!({"LEVEL": "info"});
    changed["metadata"]["resourceVersion"] = json!("200");
    let changed: Watcher = serde_json::from_value(changed).expect("Watcher");
    let (ctx, mut api) = Context::test();
    let shared = WatcherState::new(reflector::store().0, ScopeStatus::every_pod(), reflector::store().0);
    let server = tokio::spawn(async move {
        created_at_101(&mut api).await;
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&watcher_echo(spec_with_config()));
        // Deleted by hand; the cache never saw it. The data changed: a patch, answered 404.
        api.expect(Method::PATCH, CM_PATH).await.fail(404, "NotFound");
        // Forgotten: created again.
        created_again_then_nothing(api, json!({"LEVEL": "info"})).await;
    });
    reconcile(Arc::new(watcher), ctx.clone(), shared.clone()).await.expect("created");
    let error = reconcile(Arc::new(changed.clone()), ctx.clone(), shared.clone()).await.expect_err("404");
    assert_eq!(error.metric_label(), "api_rejected", "a 4xx: retried with a backoff");
    reconcile(Arc::new(changed), ctx.clone(), shared.clone()).await.expect("created again");
    drop((shared, ctx));
    server.await.expect("scenario passed");
}

/// A ConfigMap the controller wrote, that its cache then held and saw deleted before any
/// reconcile looked (a ConfigMap deleted by hand right after a change of `configData`): the
/// next reconcile creates it again, instead of taking what it wrote for what the cache lacks.
#[tokio::test]
async fn a_config_map_deleted_after_the_cache_held_it_is_created_again() {
    let watcher = watcher(spec_with_config(), None);
    let (ctx, mut api) = Context::test();
    let (shared, mut writer) = state_fed_by_the_test();
    let (created_tx, created_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let _ = created_tx.send(created_at_101(&mut api).await);
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&watcher_echo(spec_with_config()));
        // Deleted: created again.
        created_again_then_nothing(api, json!({"LEVEL": "debug"})).await;
    });
    let watcher = Arc::new(watcher);
    reconcile(watcher.clone(), ctx.clone(), shared.clone()).await.expect("created");
    let created: ConfigMap = serde_json::from_value(created_rx.await.expect("created")).expect("ConfigMap");
    // The cache's feed: the ConfigMap at 101, then its deletion.
    for event in [Event::Apply(created.clone()), Event::Delete(created.clone())] {
        writer.apply_watcher_event(&event);
        shared.saw(&created);
    }
    reconcile(watcher, ctx.clone(), shared.clone()).await.expect("created again");
    drop((shared, ctx));
    server.await.expect("scenario passed");
}

/// A Watcher whose revisions are kept has the revision of each spec written when the spec is
/// first seen, before its status says Ready: pods injected and changed a moment later still
/// find the spec they carry. A spec whose revision is there writes none; a `Report` Watcher
/// keeps none.
#[tokio::test]
async fn the_revision_of_a_new_spec_is_written_before_ready() {
    const REVISIONS: &str = "/apis/apps/v1/namespaces/team-a/controllerrevisions?fieldManager=watcher-operator";
    let spec = json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]},
                      "updatePolicy": {"type": "InPlace", "newPods": "Stable"}});
    let new = watcher(spec.clone(), None);
    let hash = new.spec.spec_hash().to_owned();
    let kept = crate::revisions::desired_revision(&new, "team-a", 1).expect("revision");
    let (ctx, mut api) = Context::test();
    let echo = watcher_echo(spec.clone());
    let server = tokio::spawn(async move {
        let create = api.expect(Method::POST, REVISIONS).await;
        assert_eq!(create.body["metadata"]["name"], format!("log-watcher-{hash}"));
        assert_eq!(create.body["revision"], 1);
        assert_eq!(create.body["data"]["container"]["image"], "busybox:1.36");
        let created = create.body.clone();
        create.respond(http::StatusCode::CREATED, &created);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "Reconciled");
        status.ok(&echo);
        api.expect_no_more().await;
    });
    let revisions = watcher_cache::RevisionCache::holding(Vec::new(), "watcher-system");
    let shared = WatcherState::with_revisions(reflector::store().0, revisions);
    reconcile(Arc::new(new.clone()), ctx.clone(), shared).await.expect("reconciled");
    drop(ctx);
    server.await.expect("the revision, then the status");

    // Its revision there: the status alone.
    let (ctx, mut api) = Context::test();
    let server = tokio::spawn(async move {
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&watcher_echo(spec));
        api.expect_no_more().await;
    });
    let shared =
        WatcherState::with_revisions(reflector::store().0, watcher_cache::RevisionCache::holding(vec![kept], "x"));
    reconcile(Arc::new(new), ctx.clone(), shared).await.expect("reconciled");
    drop(ctx);
    server.await.expect("no revision written again");

    // A Report Watcher: none.
    let report = watcher(
        json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}}),
        None,
    );
    let (result, _) = run_scenario(report, vec![], |mut api| async move {
        let echo = watcher_echo(json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["tail", "-F", "/var/log/app/app.log"]}}));
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&echo);
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

/// README's agent Watcher with `configData` as given: generation 4 of it.
fn agent_watcher(config: Value, status: Option<Value>) -> Watcher {
    let sample: Watcher =
        serde_saphyr::from_str(include_str!("../../../deploy/samples/app-watcher.yaml")).expect("the sample");
    let mut spec = serde_json::to_value(&sample.spec).expect("a spec");
    spec["configData"] = config;
    watcher(spec, status)
}

/// What watcher-agent refuses: a rule whose pattern does not compile.
fn refused_config() -> Value {
    json!({"AGENT_FILES": "/var/log/app/*.log", "AGENT_RULE_ERROR": "(ERROR"})
}

/// A configuration the agent would refuse is never written: the ConfigMap keeps generation 3's,
/// which pods get meanwhile; `Ready=False` (`ConfigRefused`) and a Warning Event say which
/// generation it keeps and why the new one is refused. A reconcile that finds it so again
/// writes nothing.
#[tokio::test]
async fn a_refused_configuration_is_not_written_and_the_config_map_keeps_the_last_good_one() {
    let good = agent_watcher(json!({"AGENT_FILES": "/var/log/app/*.log", "AGENT_RULE_ERROR": "ERROR"}), None);
    let mut kept = desired_config_map(&good).expect("config data");
    kept.metadata.annotations = Some([(watcher_api::CONFIG_GENERATION_ANNOTATION.to_owned(), "3".to_owned())].into());
    let refused = agent_watcher(refused_config(), None);
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let seen = written.clone();
    let (result, _) = run_scenario(refused, vec![kept.clone()], |mut api| async move {
        let event = api.expect(Method::POST, EVENTS_PATH).await;
        assert_eq!(
            (event.body["type"].as_str(), event.body["reason"].as_str()),
            (Some("Warning"), Some("ConfigRefused"))
        );
        let note = event.body["note"].as_str().unwrap_or_default().to_owned();
        event.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let patch = status.body["status"].clone();
        assert_eq!(patch["configMapName"], "log-watcher-config", "the ConfigMap is still the pods'");
        let ready = patch["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned();
        let ready = ready.expect("Ready");
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ConfigRefused")));
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("generation 4's configuration is not shipped, watcher-agent would refuse it: "),
            "{message}"
        );
        assert!(message.contains("AGENT_RULE_ERROR"), "the variable named: {message}");
        assert!(message.ends_with("ConfigMap log-watcher-config keeps generation 3's, which pods get"), "{message}");
        assert_eq!(note, message);
        *seen.lock().expect("not poisoned") = patch;
        status.ok(&watcher_echo(serde_json::to_value(agent_watcher(refused_config(), None).spec).expect("a spec")));
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");

    // Again, with the status it wrote: nothing written, nothing said twice.
    let status = written.lock().expect("not poisoned").clone();
    let (result, _) =
        run_scenario(agent_watcher(refused_config(), Some(status)), vec![kept], |api| api.expect_no_more()).await;
    result.expect("reconciled");
}

/// A Watcher whose first configuration is refused: no ConfigMap is created, and the status says
/// that none was ever shipped, which the webhook reads to admit its pods without the sidecar.
#[tokio::test]
async fn a_first_configuration_refused_creates_no_config_map() {
    let (result, _) = run_scenario(agent_watcher(refused_config(), None), vec![], |mut api| async move {
        let event = api.expect(Method::POST, EVENTS_PATH).await;
        assert_eq!(event.body["reason"], "ConfigRefused");
        event.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["configMapName"], Value::Null);
        let mut echoed =
            watcher_echo(serde_json::to_value(agent_watcher(refused_config(), None).spec).expect("a spec"));
        echoed["status"] = status.body["status"].clone();
        let stored: Watcher = serde_json::from_value(echoed.clone()).expect("a Watcher");
        let unshipped = stored.unshipped_config().expect("said to the webhook");
        assert!(unshipped.contains("no configuration was ever shipped"), "{unshipped}");
        status.ok(&echoed);
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}
