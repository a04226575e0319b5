//! e2e: a ClusterWatcher on a real kube-apiserver. Applied with `kubectl` as a platform team
//! would, over namespaces chosen by label; a namespace labelled later gets its ConfigMap; a
//! Watcher of the same name takes a namespace over and hands it back; garbage collection removes
//! the ConfigMaps with it (a namespaced object owned by a cluster-scoped one). No kubelet: the
//! pods as stored are what is checked. Every version: 1.24 has no matchConditions and no native
//! sidecars, which changes where the sidecar is, not whether.
//! Run on purpose: `cargo test --test e2e cluster_watcher:: -- --ignored`.
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use watcher_api::{ClusterWatcher, Watcher};

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, create_injected_app, exclusive, install_crds, kubectl, kubectl_apply,
    wait_for, wait_ready, wait_until,
};

/// The ClusterWatcher's ConfigMap in `namespace`, when it is the ClusterWatcher's.
async fn ours(config_maps: &Api<ConfigMap>, name: &str) -> Option<ConfigMap> {
    let found = config_maps.get_opt(&format!("{name}-config")).await.ok().flatten()?;
    found.owner_references().iter().any(|o| o.kind == "ClusterWatcher" && o.name == name).then_some(found)
}

async fn status_namespaces(clusters: &Api<ClusterWatcher>, name: &str) -> Option<i32> {
    clusters.get(name).await.ok()?.status?.namespaces
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_cluster_watcher_serves_the_namespaces_it_selects() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let a = TestNamespace::create(&client, "watcher-e2e-cw-a").await;
    let b = TestNamespace::create(&client, "watcher-e2e-cw-b").await;
    let _operator = Operator::start(&operator_ns.name).await;
    let run = std::process::id() % 100_000;
    let name = format!("e2e-agent-{run}");
    let label = format!("watcher-e2e-cw={run}");
    kubectl(&["label", "namespace", &a.name, &label, "--overwrite"]);

    kubectl_apply(
        "default",
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"watcher-e2e-cw": run.to_string()}},
                     "container": {"name": "log-agent", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                     "configData": {"LEVEL": "info"},
                     "updatePolicy": {"type": "Recreate"}}}),
    );
    let clusters = Api::<ClusterWatcher>::all(client.clone());
    let (in_a, in_b) =
        (Api::<ConfigMap>::namespaced(client.clone(), &a.name), Api::<ConfigMap>::namespaced(client.clone(), &b.name));
    wait_until(STEP, || async { status_namespaces(&clusters, &name).await == Some(1) }).await;
    wait_for(STEP, || ours(&in_a, &name)).await;
    assert!(ours(&in_b, &name).await.is_none(), "namespace b is not selected");
    wait_until(STEP, || async {
        clusters
            .get(&name)
            .await
            .ok()
            .and_then(|c| c.status)
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await;

    // A pod asking for it by name in namespace a is injected; the same pod in b is admitted
    // untouched.
    let pods_a = Api::<Pod>::namespaced(client.clone(), &a.name);
    let injected = create_injected_app(&pods_a, &name).await;
    let carried = injected.annotations().get("watcher.dev/injected").cloned().unwrap_or_default();
    assert!(carried.starts_with(&format!("{name}@")), "{carried}");
    let app: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "annotations": {"watcher.dev/inject": name}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod");
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let in_b_pod = Api::<Pod>::namespaced(client.clone(), &b.name).create(&dry_run, &app).await.expect("admitted");
    assert!(!in_b_pod.annotations().contains_key("watcher.dev/injected"), "not where it does not apply");
    wait_until(STEP, || async {
        clusters.get(&name).await.ok().and_then(|c| c.status?.pods).is_some_and(|p| p.injected == 1)
    })
    .await;

    // check-inject says which one applied, and why.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["check-inject", "app", "-n", &a.name, "-o", "json"])
        .output()
        .expect("binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let explained: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let standing = explained["clusterWatchers"].as_array().into_iter().flatten().find(|c| c["name"] == name.as_str());
    assert_eq!(standing.map(|c| c["reason"].clone()), Some(json!("Applies")), "{explained}");

    // Namespace b labelled: its ConfigMap comes, and the count.
    kubectl(&["label", "namespace", &b.name, &label, "--overwrite"]);
    wait_for(STEP, || ours(&in_b, &name)).await;
    wait_until(STEP, || async { status_namespaces(&clusters, &name).await == Some(2) }).await;

    // A Watcher of the same name takes namespace a over: the ClusterWatcher's ConfigMap goes,
    // the Watcher's comes (it retries its conflict by itself), a stops counting.
    kubectl_apply(
        &a.name,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name},
            "spec": {"container": {"name": "team-agent", "image": "busybox:1.36"}, "configData": {"TEAM": "a"}}}),
    );
    let watchers = Api::<Watcher>::namespaced(client.clone(), &a.name);
    wait_until(2 * STEP, || async {
        in_a.get_opt(&format!("{name}-config"))
            .await
            .ok()
            .flatten()
            .is_some_and(|c| c.owner_references().iter().any(|o| o.kind == "Watcher"))
    })
    .await;
    wait_ready(&watchers, &name).await;
    wait_until(STEP, || async { status_namespaces(&clusters, &name).await == Some(1) }).await;

    // Deleting the Watcher hands a back: once garbage collection removes the Watcher's
    // ConfigMap, the ClusterWatcher's is created again.
    watchers.delete(&name, &DeleteParams::default()).await.expect("Watcher deleted");
    wait_for(2 * STEP, || ours(&in_a, &name)).await;
    wait_until(STEP, || async { status_namespaces(&clusters, &name).await == Some(2) }).await;

    // Its revision is kept in the operator's namespace; `rollout history` shows it.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["rollout", "history", &format!("clusterwatcher/{name}")])
        .output()
        .expect("binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let history = String::from_utf8_lossy(&output.stdout);
    assert!(history.contains("(current)"), "{history}");

    // Deleting the ClusterWatcher garbage-collects its ConfigMaps everywhere.
    clusters.delete(&name, &DeleteParams::background()).await.expect("ClusterWatcher deleted");
    wait_until(2 * STEP, || async {
        in_a.get_opt(&format!("{name}-config")).await.ok().flatten().is_none()
            && in_b.get_opt(&format!("{name}-config")).await.ok().flatten().is_none()
    })
    .await;
    a.delete().await;
    b.delete().await;
    operator_ns.delete().await;
}
