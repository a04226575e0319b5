//! e2e: a Watcher with config data becomes an owned ConfigMap that follows the Watcher.
//! Run on purpose against a cluster: `cargo test --test e2e watcher:: -- --ignored`.
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use watcher_api::Watcher;

use crate::common;

use common::{Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, wait_for};

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn watcher_config_map_lifecycle() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-cm").await;
    let _one = exclusive().await;
    let _operator = Operator::start(&ns.name).await;

    let watchers = Api::<Watcher>::namespaced(client.clone(), &ns.name);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns.name);
    let watcher: Watcher = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"}, "configData": {"LEVEL": "debug"}},
    }))
    .expect("valid Watcher");
    let watcher = watchers.create(&PostParams::default(), &watcher).await.expect("Watcher created");
    let uid = watcher.uid().expect("uid");

    // The ConfigMap appears, owned by the Watcher, with the config data.
    let cm = wait_for(STEP, || async { config_maps.get_opt("log-watcher-config").await.ok().flatten() }).await;
    assert_eq!(cm.data.as_ref().and_then(|d| d.get("LEVEL")).map(String::as_str), Some("debug"));
    let owner = &cm.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Watcher", "log-watcher", uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));

    // The status names it and is Ready for the current generation.
    let status = wait_for(STEP, || async {
        let w = watchers.get("log-watcher").await.ok()?;
        let status = w.status.clone()?;
        (status.observed_generation == w.meta().generation).then_some(status)
    })
    .await;
    assert_eq!(status.config_map_name.as_deref(), Some("log-watcher-config"));
    assert_eq!(status.spec_hash.as_deref().map(str::len), Some(8));
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready condition");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Reconciled"));

    // What a user types: the kind by name, and the category for everything of the operator.
    let jsonpath =
        kubectl(&["get", "watcher", "log-watcher", "-n", &ns.name, "-o", "jsonpath={.status.configMapName}"]);
    assert_eq!(jsonpath, "log-watcher-config");
    let short = kubectl(&["get", "wt", "log-watcher", "-n", &ns.name, "-o", "name"]);
    assert_eq!(short.trim(), "watcher.watcher.dev/log-watcher");
    // Cluster-scoped ImagePolicies of other tests or users are listed too: only this namespace's
    // objects are this test's to judge.
    let all = kubectl(&["get", "watcher-dev", "-n", &ns.name, "-o", "name"]);
    let namespaced: Vec<&str> = all.lines().filter(|l| !l.starts_with("imagepolicy.watcher.dev/")).collect();
    assert_eq!(namespaced, ["watcher.watcher.dev/log-watcher"], "the category lists the Watcher:\n{all}");

    // An update of configData reaches the ConfigMap.
    let patch = json!({"spec": {"configData": {"LEVEL": "info", "EXTRA": "1"}}});
    watchers.patch("log-watcher", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    wait_for(STEP, || async {
        let cm = config_maps.get_opt("log-watcher-config").await.ok().flatten()?;
        let data = cm.data?;
        (data.get("LEVEL").map(String::as_str) == Some("info") && data.contains_key("EXTRA")).then_some(())
    })
    .await;

    // A ConfigMap deleted by hand is put back (a new object: another uid).
    let deleted_uid = config_maps.get("log-watcher-config").await.expect("exists").uid();
    config_maps.delete("log-watcher-config", &DeleteParams::default()).await.expect("deleted");
    wait_for(STEP, || async {
        let cm = config_maps.get_opt("log-watcher-config").await.ok().flatten()?;
        (cm.uid() != deleted_uid).then_some(())
    })
    .await;

    // Deleting the Watcher garbage-collects its ConfigMap.
    watchers.delete("log-watcher", &DeleteParams::foreground()).await.expect("Watcher deleted");
    wait_for(STEP, || async {
        config_maps.get_opt("log-watcher-config").await.ok().and_then(|cm| cm.is_none().then_some(()))
    })
    .await;

    ns.delete().await;
}
