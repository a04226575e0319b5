//! e2e: the webhook against a real kube-apiserver. The operator runs outside the cluster and
//! registers itself with `--webhook-url https://127.0.0.1:<port>/mutate` (self-managed
//! certificates), so the API server must reach this machine's loopback.
//! Run on purpose: `cargo test --test e2e webhook:: -- --ignored`.
//!
//! One test function: the webhook configuration `watcher-operator` is cluster-wide.
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use watcher_api::Watcher;

use crate::common;

use common::{Operator, STEP, TestNamespace, client, exclusive, install_crds, wait_for, wait_ready};

fn pod(name: &str, annotations: Value, labels: Value, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {"containers": containers, "restartPolicy": "Never"},
    }))
    .expect("valid Pod")
}

fn app() -> Value {
    json!([{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}])
}

/// The sidecar named `name`, wherever it was put (native sidecar or regular container).
fn sidecar<'a>(pod: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

fn injected(pod: &Pod) -> Option<&String> {
    pod.annotations().get("watcher.dev/injected")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn webhook_injects_pods() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-wh").await;
    let _operator = Operator::start(&operator_ns.name).await;

    let watchers = Api::<Watcher>::namespaced(client.clone(), &ns.name);
    let log_watcher: Watcher = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                 "volume": {"name": "logs", "emptyDir": {}}, "configData": {"LEVEL": "debug"},
                 "imagePullSecrets": {"name": "regcred"}},
    }))
    .expect("valid Watcher");
    watchers.create(&PostParams::default(), &log_watcher).await.expect("Watcher created");
    let selecting: Watcher = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "selecting"},
        "spec": {"container": {"name": "selected-sidecar", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                 "selector": {"matchLabels": {"watcher-e2e": "selected"}}},
    }))
    .expect("valid Watcher");
    watchers.create(&PostParams::default(), &selecting).await.expect("Watcher created");

    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    let annotated = pod("annotated", json!({"watcher.dev/inject": "log-watcher"}), json!({}), app());

    // Server dry-run goes through the webhook too, and doubles as the probe that the webhook is
    // registered, trusted and has the Watcher in its cache.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let probed = wait_for(STEP, || async {
        let created = pods.create(&dry_run, &annotated).await.ok()?;
        injected(&created).is_some().then_some(created)
    })
    .await;
    assert!(sidecar(&probed, "log-watcher").is_some());
    assert!(pods.get_opt("annotated").await.expect("get").is_none(), "dry-run created nothing");

    // An annotated pod: container with envFrom, volume, pull secret, annotation.
    let created = pods.create(&PostParams::default(), &annotated).await.expect("pod created");
    let container = sidecar(&created, "log-watcher").expect("sidecar injected");
    let env_from = container.env_from.as_ref().and_then(|e| e.first()).and_then(|e| e.config_map_ref.as_ref());
    assert_eq!(env_from.map(|r| r.name.as_str()), Some("log-watcher-config"));
    let spec = created.spec.as_ref().expect("spec");
    assert!(spec.volumes.iter().flatten().any(|v| v.name == "logs"));
    assert!(spec.image_pull_secrets.iter().flatten().any(|s| s.name == "regcred"));
    let hash = watchers.get("log-watcher").await.expect("Watcher").spec.spec_hash().to_owned();
    assert_eq!(injected(&created), Some(&format!("log-watcher@{hash}")));

    // Selector opt-in, no annotation: once the Watcher is Ready, kube-apiserver sends such pods
    // (on 1.28 or later the webhook's matchConditions follow the selectors).
    wait_ready(&watchers, "selecting").await;
    let labelled = pod("labelled", json!({}), json!({"watcher-e2e": "selected"}), app());
    let created = pods.create(&PostParams::default(), &labelled).await.expect("pod created");
    assert!(sidecar(&created, "selected-sidecar").is_some());

    // A Deployment's pods (generateName, created by the ReplicaSet controller).
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}, "annotations": {"watcher.dev/inject": "log-watcher"}},
                              "spec": {"containers": app()}}},
    }))
    .expect("valid Deployment");
    deployments.create(&PostParams::default(), &deployment).await.expect("Deployment created");
    let web = wait_for(STEP, || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?;
        (list.items.len() == 2).then_some(list.items)
    })
    .await;
    for pod in &web {
        assert!(pod.metadata.generate_name.is_some());
        assert!(sidecar(pod, "log-watcher").is_some(), "{} injected", pod.name_any());
    }

    // A name collision and a missing Watcher: allowed, not injected.
    let colliding = pod(
        "colliding",
        json!({"watcher.dev/inject": "log-watcher"}),
        json!({}),
        json!([{"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]}]),
    );
    let created = pods.create(&PostParams::default(), &colliding).await.expect("allowed");
    assert_eq!(injected(&created), None);
    assert_eq!(created.spec.as_ref().map(|s| s.containers.len()), Some(1));
    let missing = pod("missing", json!({"watcher.dev/inject": "no-such-watcher"}), json!({}), app());
    let created = pods.create(&PostParams::default(), &missing).await.expect("allowed");
    assert_eq!(injected(&created), None);

    // kube-system is never injected, whatever the pod asks for.
    let system = Api::<Pod>::namespaced(client.clone(), "kube-system");
    let name = format!("watcher-e2e-{}", std::process::id());
    let created = system
        .create(&PostParams::default(), &pod(&name, json!({"watcher.dev/inject": "log-watcher"}), json!({}), app()))
        .await
        .expect("allowed");
    assert_eq!(injected(&created), None);
    let _ = system.delete(&name, &DeleteParams::default()).await;

    // A namespace labelled watcher.dev/injection=disabled, under a configuration whose
    // namespaceSelector lets it through (written or edited by hand): the webhook refuses it by
    // itself, from the namespace labels it holds.
    let configs = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let installed = configs.get("watcher-operator").await.expect("the configuration");
    let everything: Vec<Value> = (0..installed.webhooks.iter().flatten().count())
        .map(|i| json!({"op": "add", "path": format!("/webhooks/{i}/namespaceSelector"), "value": {}}))
        .collect();
    let everything: json_patch::Patch = serde_json::from_value(Value::Array(everything)).expect("JSON patch");
    configs
        .patch("watcher-operator", &PatchParams::default(), &Patch::Json::<()>(everything))
        .await
        .expect("selectors opened");
    let opted_out = TestNamespace::create(&client, "watcher-e2e-optout").await;
    common::kubectl(&["label", "namespace", &opted_out.name, "watcher.dev/injection=disabled"]);
    let there = Api::<Watcher>::namespaced(client.clone(), &opted_out.name);
    there.create(&PostParams::default(), &log_watcher).await.expect("Watcher created");
    let opted_out_pods = Api::<Pod>::namespaced(client.clone(), &opted_out.name);
    // Once the operator's namespace cache has the label (a moment after it is set).
    wait_for(STEP, || async {
        let created = opted_out_pods.create(&dry_run, &annotated).await.ok()?;
        injected(&created).is_none().then_some(())
    })
    .await;
    let created = opted_out_pods.create(&PostParams::default(), &annotated).await.expect("allowed");
    assert_eq!(injected(&created), None, "never injected in an opted-out namespace");
    assert!(sidecar(&created, "log-watcher").is_none());
    opted_out.delete().await;

    cleanup(&client).await;
    ns.delete().await;
    operator_ns.delete().await;
}

async fn cleanup(client: &Client) {
    let configs = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let _ = configs.delete("watcher-operator", &DeleteParams::default()).await;
}

/// `Ready` means that the webhook of the process that set it injects that Watcher: a
/// Deployment of four replicas created the moment `kubectl wait` returns has all four pods
/// injected, ten times in a row (each time a new Watcher, so each time a change the webhook's
/// view of the Watchers must take before the pods come, several admissions at once).
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn pods_created_the_moment_a_watcher_is_ready_are_injected() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-ready").await;
    let n = ns.name.as_str();
    let operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    for round in 0..10 {
        let name = format!("ready-{round}");
        common::kubectl_apply(
            n,
            &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}},
                         "container": {"name": name, "image": "busybox:1.36", "command": ["sleep", "3600"]}}}),
        );
        common::kubectl(&["wait", "-n", n, "--for=condition=Ready", &format!("watcher/{name}"), "--timeout=60s"]);
        common::kubectl_apply(
            n,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": app()}}}}),
        );
        let created = wait_for(STEP, || async {
            let list = pods.list(&ListParams::default().labels(&format!("app={name}"))).await.ok()?;
            (list.items.len() == 4).then_some(list.items)
        })
        .await;
        for pod in &created {
            let carried = injected(pod).map(String::as_str).unwrap_or_default();
            assert!(
                carried.starts_with(&format!("{name}@")) && sidecar(pod, &name).is_some(),
                "round {round}: pod {} was created after Watcher {name} was Ready, and not injected: {carried:?}",
                pod.name_any()
            );
        }
    }
    operator.stop().await;
    cleanup(&client).await;
    ns.delete().await;
    operator_ns.delete().await;
}
