use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use watcher_api::Watcher;

use super::{desired_config_map, error_policy, reconcile};
use crate::fixtures::{ApiServerVerifier, NOT_FOUND};
use crate::{Context, Metrics};

const CM_PATH: &str = "/api/v1/namespaces/team-a/configmaps/log-watcher-config";
const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/watchers/log-watcher/status";
const APPLY_QUERY: &str = "fieldManager=watcher-operator&force=true";
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
    json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}, "configData": {"LEVEL": "debug"}})
}

fn owner_reference() -> Value {
    json!([{"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "name": "log-watcher",
            "uid": UID, "controller": true}])
}

fn status_of(watcher: &Watcher, config_map_name: Option<&str>, message: &str) -> Value {
    json!({
        "configMapName": config_map_name,
        "observedGeneration": 4,
        "specHash": watcher.spec.spec_hash(),
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": message,
                        "observedGeneration": 4, "lastTransitionTime": "2026-11-21T10:00:00Z"}],
    })
}

/// Runs one reconcile against the scenario and asserts the scenario saw every request.
async fn run_scenario<F>(
    watcher: Watcher,
    scenario: impl FnOnce(ApiServerVerifier) -> F,
) -> (Result<Action, crate::Error>, Metrics)
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ctx, verifier) = Context::test();
    let server = tokio::spawn(scenario(verifier));
    let result = reconcile(Arc::new(watcher), ctx.clone()).await;
    let metrics = ctx.metrics.clone();
    drop(ctx); // lets the scenario see that no request follows
    server.await.expect("scenario passed");
    (result, metrics)
}

#[tokio::test]
async fn first_reconcile_applies_the_config_map_then_writes_status() {
    let watcher = watcher(spec_with_config(), None);
    let hash = watcher.spec.spec_hash();
    let (result, _) = run_scenario(watcher, |mut api| async move {
        api.expect(Method::GET, CM_PATH).await.fail(NOT_FOUND.0, NOT_FOUND.1);

        let apply = api.expect(Method::PATCH, &format!("{CM_PATH}?{APPLY_QUERY}")).await;
        assert_eq!(
            apply.body,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "log-watcher-config", "namespace": "team-a",
                             "labels": {"app.kubernetes.io/managed-by": "watcher-operator", "watcher.dev/watcher": "log-watcher"},
                             "ownerReferences": owner_reference()},
                "data": {"LEVEL": "debug"},
            })
        );
        let applied = apply.body.clone();
        apply.ok(&applied);

        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let patch = &status.body["status"];
        assert_eq!(patch["configMapName"], "log-watcher-config");
        assert_eq!(patch["observedGeneration"], 4);
        assert_eq!(patch["specHash"], hash.as_str());
        assert_eq!(patch["conditions"][0]["type"], "Ready");
        assert_eq!(patch["conditions"][0]["status"], "True");
        assert_eq!(patch["conditions"][0]["reason"], "Reconciled");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 4);
        status.ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                          "metadata": {"name": "log-watcher", "namespace": "team-a"}, "spec": spec_with_config()}));
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(result.expect("reconciled"), Action::requeue(super::RESYNC));
}

#[tokio::test]
async fn steady_state_writes_nothing() {
    let unsynced = watcher(spec_with_config(), None);
    let status = status_of(&unsynced, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    let watcher = watcher(spec_with_config(), Some(status));
    let existing: ConfigMap = desired_config_map(&watcher).expect("has config");
    let (result, _) = run_scenario(watcher, |mut api| async move {
        api.expect(Method::GET, CM_PATH).await.ok(&existing);
        // No apply, no status patch: the only request was the read.
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn removed_config_data_deletes_the_config_map_and_clears_the_name() {
    let with_config = watcher(spec_with_config(), None);
    let existing = desired_config_map(&with_config).map(|mut cm| {
        cm.metadata.uid = Some("cm-uid".into());
        cm
    });
    let status = status_of(&with_config, Some("log-watcher-config"), "ConfigMap log-watcher-config is up to date");
    let watcher = watcher(json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}}), Some(status));
    let (result, _) = run_scenario(watcher, |mut api| async move {
        api.expect(Method::GET, CM_PATH).await.ok(&existing);

        let delete = api.expect(Method::DELETE, CM_PATH).await;
        assert_eq!(delete.body["preconditions"]["uid"], "cm-uid");
        delete.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));

        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["configMapName"], Value::Null, "null removes the field");
        assert_eq!(status.body["status"]["conditions"][0]["message"], "Watcher has no config data");
        status.ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                          "metadata": {"name": "log-watcher", "namespace": "team-a"}, "spec": {"container": {"name": "x"}}}));
        api.expect_no_more().await;
    })
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn a_config_map_owned_by_someone_else_is_left_alone() {
    let watcher = watcher(spec_with_config(), None);
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "log-watcher-config", "namespace": "team-a"}, "data": {"mine": "yes"}});
    let (result, _) = run_scenario(watcher, |mut api| async move {
        api.expect(Method::GET, CM_PATH).await.ok(&foreign);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["configMapName"], Value::Null);
        assert_eq!(status.body["status"]["conditions"][0]["status"], "False");
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "ConfigMapConflict");
        status.ok(&json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                          "metadata": {"name": "log-watcher", "namespace": "team-a"}, "spec": spec_with_config()}));
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(result.expect("reconciled"), Action::requeue(super::CONFLICT_RETRY));
}

#[tokio::test]
async fn api_errors_back_off_and_are_counted() {
    let watcher = watcher(spec_with_config(), None);
    let (result, metrics) = run_scenario(watcher.clone(), |mut api| async move {
        api.expect(Method::GET, CM_PATH).await.fail(500, "InternalError");
        api.expect_no_more().await;
    })
    .await;
    let error = result.expect_err("a 500 fails the reconcile");
    assert_eq!(error.metric_label(), "api_server_error");

    assert_eq!(metrics.reconciles_of("watcher"), 1);

    let (ctx, _api) = Context::test();
    let watcher = Arc::new(watcher);
    let first = error_policy(watcher.clone(), &error, ctx.clone());
    let second = error_policy(watcher.clone(), &error, ctx.clone());
    assert_eq!(first, Action::requeue(std::time::Duration::from_secs(5)));
    assert_eq!(second, Action::requeue(std::time::Duration::from_secs(10)));
    assert_eq!(ctx.metrics.errors_of("watcher", "api_server_error"), 2);
}
