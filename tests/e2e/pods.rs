//! e2e: injection drift counted on Watchers, and repaired with `updatePolicy: Recreate`.
//! The operator registers its webhook by `--webhook-url https://127.0.0.1:<port>/mutate`, so the
//! API server must reach this machine's loopback. No kubelet is assumed: evicted pods that are
//! not on a node go at once, and their ReplicaSet recreates them through the webhook.
//! Run on purpose: `cargo test --test e2e pods:: -- --ignored`.
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use watcher_api::{PodCounts, Watcher};

use crate::common;

use common::{Operator, STEP, TestNamespace, client, exclusive, install_crds, wait_for};

async fn counts_become(watchers: &Api<Watcher>, check: impl Fn(PodCounts) -> bool) -> PodCounts {
    wait_for(STEP, || async {
        let counts = watchers.get("log-watcher").await.ok()?.status?.pods?;
        check(counts).then_some(counts)
    })
    .await
}

/// Waits until the pods of `app=<app>` reach the webhook and get the Watcher `log-watcher`: a
/// dry-run pod of that label is injected (the webhook's cache has the Watcher), and the Watcher
/// is `Ready` (kube-apiserver's matchConditions send such pods: until then a pod the
/// ReplicaSet makes may be admitted without a call).
async fn injected_on_a_dry_run(pods: &Api<Pod>, app: &str) {
    let watchers = Api::<Watcher>::namespaced(pods.clone().into_client(), pods.namespace().unwrap_or_default());
    let probe: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "labels": {"app": app}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}))
    .expect("valid Pod");
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_for(STEP, || async {
        let created = pods.create(&dry_run, &probe).await.ok()?;
        created.metadata.annotations?.get(watcher_api::annotation::Injected::KEY).cloned()
    })
    .await;
    wait_for(STEP, || async {
        let status = watchers.get("log-watcher").await.ok()?.status?;
        status.conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True").map(|_| ())
    })
    .await;
}

/// A Deployment `name` of `replicas` sleeping pods labelled `app=<name>` in `namespace`.
async fn create_deployment(client: &kube::Client, namespace: &str, name: &str, replicas: i32) {
    let deployment: Deployment = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}}}))
    .expect("valid Deployment");
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("Deployment created");
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn drift_is_counted_and_repaired() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op2").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-pods").await;
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    let watchers = Api::<Watcher>::namespaced(client.clone(), &ns.name);

    // A pod that asks for the Watcher before it exists: admitted uninjected.
    let early: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "early", "annotations": {"watcher.dev/inject": "log-watcher"}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod");
    pods.create(&PostParams::default(), &early).await.expect("pod created");

    let watcher: Watcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                 "selector": {"matchLabels": {"app": "drift"}}}}))
    .expect("valid Watcher");
    watchers.create(&PostParams::default(), &watcher).await.expect("Watcher created");
    counts_become(&watchers, |c| c.missing == 1 && c.matched == 1).await;

    // Wait until the webhook's cache has the Watcher (a dry-run pod gets injected), then three
    // selected pods from a Deployment.
    injected_on_a_dry_run(&pods, "drift").await;
    create_deployment(&client, &ns.name, "drift", 3).await;
    let counts = counts_become(&watchers, |c| c.matched == 4 && c.up_to_date == 3).await;
    assert_eq!(counts, PodCounts { matched: 4, injected: 3, up_to_date: 3, missing: 1, ..PodCounts::default() });

    // A new image: the three injected pods are outdated.
    let patch =
        json!({"spec": {"container": {"name": "log-watcher", "image": "busybox:1.37", "command": ["sleep", "3600"]}}});
    watchers.patch("log-watcher", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    counts_become(&watchers, |c| c.injected == 3 && c.up_to_date == 0).await;

    // Recreate: the Deployment's pods are evicted one at a time and come back with the new hash;
    // the bare pod that asked early is never evicted.
    let patch = json!({"spec": {"updatePolicy": {"type": "Recreate", "maxUnavailable": 1}}});
    watchers.patch("log-watcher", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    let counts = counts_become(&watchers, |c| c.up_to_date == 3).await;
    assert_eq!(counts, PodCounts { matched: 4, injected: 3, up_to_date: 3, missing: 1, ..PodCounts::default() });
    assert!(pods.get_opt("early").await.expect("get").is_some(), "bare pods are never evicted");

    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete("watcher-operator", &DeleteParams::default())
        .await;
    ns.delete().await;
    operator_ns.delete().await;
}

/// A plain sidecar that reads `LEVEL` from `configData` (`envFrom`) reads it once, when it
/// starts: a change of `LEVEL` makes every pod out of date (`Report` counts them), and `Recreate`
/// replaces them, each new pod injected with the new configuration.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_configuration_change_outdates_a_plain_sidecars_pods() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op3").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-config").await;
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    let watchers = Api::<Watcher>::namespaced(client.clone(), &ns.name);
    let watcher: Watcher =
        serde_json::from_value(json!({"apiVersion": <Watcher as kube::Resource>::api_version(&()), "kind": "Watcher",
        "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36",
                               "command": ["sh", "-c", "echo level $LEVEL; sleep 3600"]},
                 "configData": {"LEVEL": "info"},
                 "selector": {"matchLabels": {"app": "levels"}}}}))
        .expect("valid Watcher");
    let created = watchers.create(&PostParams::default(), &watcher).await.expect("Watcher created");
    let first = created.spec.config_hash().expect("config data");
    injected_on_a_dry_run(&pods, "levels").await;
    create_deployment(&client, &ns.name, "levels", 2).await;
    counts_become(&watchers, |c| c.matched == 2 && c.up_to_date == 2).await;
    let key = watcher_api::annotation::InjectedConfig::KEY;
    let carried = |pod: &Pod| pod.metadata.annotations.as_ref()?.get(key).cloned();
    let listed = pods.list(&Default::default()).await.expect("pods");
    assert!(
        listed.items.iter().all(|p| carried(p) == Some(format!("log-watcher@{first}"))),
        "{:?}",
        listed.items.iter().map(carried).collect::<Vec<_>>()
    );

    // LEVEL changes: Report counts both pods out of date, with the same spec.
    let patch = json!({"spec": {"configData": {"LEVEL": "debug"}}});
    let changed = watchers.patch("log-watcher", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    let second = changed.spec.config_hash().expect("config data");
    let counts = counts_become(&watchers, |c| c.injected == 2 && c.up_to_date == 0).await;
    assert_eq!(counts, PodCounts { matched: 2, injected: 2, up_to_date: 0, ..PodCounts::default() });
    assert_eq!(changed.spec.spec_hash(), created.spec.spec_hash(), "the spec is the same");

    // Recreate: replaced, each new pod injected with the new configuration.
    let patch = json!({"spec": {"updatePolicy": {"type": "Recreate", "maxUnavailable": 1}}});
    watchers.patch("log-watcher", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    counts_become(&watchers, |c| c.matched == 2 && c.up_to_date == 2).await;
    let listed = pods.list(&Default::default()).await.expect("pods");
    let live: Vec<&Pod> = listed.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    assert!(
        live.iter().all(|p| carried(p) == Some(format!("log-watcher@{second}"))),
        "{:?}",
        live.iter().map(|p| carried(p)).collect::<Vec<_>>()
    );

    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete("watcher-operator", &DeleteParams::default())
        .await;
    ns.delete().await;
    operator_ns.delete().await;
}
