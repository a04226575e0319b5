//! e2e: a canary that holds at admission (`updatePolicy.newPods: Stable`). A Deployment of 4
//! replicas with a Watcher rolled out in place; a new image with `partition: 3` and
//! `newPods: Stable`; the Deployment scaled to 8: the new pods come in on the stable image; a
//! canary `selector` for `track: canary` and a pod created with that label: the current image;
//! the hold released: every pod ends on the current image; `rollout status` reports each step.
//! No kubelet is assumed: the test writes container statuses where the kubelet would. Runs on
//! every server from 1.24 (the sidecar a regular container where native sidecars are not).
//! Run on purpose: `cargo test --test e2e canary:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use watcher_api::Watcher;

use crate::common;

use std::collections::BTreeSet;

use common::{
    Operator, STEP, TestNamespace, client, container_image, exclusive, install_crds, kubectl, kubectl_apply, rollout,
    wait_for, wait_until,
};

const SELECTOR: &str = "app=canary-web";

fn sidecar_image(pod: &Pod) -> Option<String> {
    container_image(pod, "log-watcher")
}

/// The app's pods that are not being deleted, oldest first.
async fn live(pods: &Api<Pod>) -> Vec<Pod> {
    let list = pods.list(&ListParams::default().labels(SELECTOR)).await.expect("list");
    let mut live: Vec<Pod> = list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    live.sort_by(|a, b| {
        a.creation_timestamp().cmp(&b.creation_timestamp()).then_with(|| a.name_any().cmp(&b.name_any()))
    });
    live
}

/// What the kubelet would report of the app's pods.
async fn kubelet_reports(pods: &Api<Pod>) {
    common::kubelet_reports(pods, SELECTOR).await;
}

fn watcher(image: &str, update_policy: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
           "spec": {"container": {"name": "log-watcher", "image": image, "command": ["sleep", "3600"]},
                    "selector": {"matchLabels": {"app": "canary-web"}}, "updatePolicy": update_policy}})
}

fn app_pod(name: &str, track: Option<&str>) -> Pod {
    let mut labels = json!({"app": "canary-web"});
    if let Some(track) = track {
        labels["track"] = json!(track);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("pod")
}

/// The sidecar image a new pod with these labels gets now (a server-side dry run).
async fn admitted_image(pods: &Api<Pod>, track: Option<&str>) -> Option<String> {
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let pod = pods.create(&dry_run, &app_pod("probe", track)).await.expect("dry run");
    sidecar_image(&pod)
}

/// Reports statuses until `done` holds of the live pods, failing after a step.
async fn until(pods: &Api<Pod>, what: &str, done: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
    let found = wait_for(STEP, || async {
        // Read before the report, so the last report covers what is returned.
        let live = live(pods).await;
        kubelet_reports(pods).await;
        done(&live).then_some(live)
    })
    .await;
    assert!(!found.is_empty(), "{what}");
    found
}

fn images(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| sidecar_image(p).unwrap_or_default()).collect()
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_held_canary_holds_new_pods_on_the_stable_revision() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-canary-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-canary").await;
    let n = ns.name.as_str();
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    let policy = json!({"type": "InPlace", "maxUnavailable": 8});
    kubectl_apply(n, &watcher("busybox:1.36", policy));
    wait_until(STEP, || async { admitted_image(&pods, None).await.as_deref() == Some("busybox:1.36") }).await;

    // Four replicas on busybox:1.36, rolled out.
    kubectl_apply(
        n,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "canary-web"},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "canary-web"}},
                         "template": {"metadata": {"labels": {"app": "canary-web"}},
                                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}}}),
    );
    let first =
        until(&pods, "4 pods", |live| live.len() == 4 && images(live).iter().all(|i| i == "busybox:1.36")).await;
    let originals: BTreeSet<String> = first.iter().map(ResourceExt::name_any).collect();
    let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "60s"]);
    assert!(done && text.contains("successfully rolled out"), "{text}");
    let stable = wait_for(STEP, || async {
        let status = watchers.get("log-watcher").await.ok()?.status?;
        status.stable_revision.filter(|s| Some(s) == status.current_revision.as_ref())
    })
    .await;

    // A new image held on three pods of four, and new pods on the stable revision.
    kubectl_apply(
        n,
        &watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 8, "partition": 3, "newPods": "Stable"})),
    );
    until(&pods, "the oldest pod updated", |live| {
        images(live) == ["busybox:1.37", "busybox:1.36", "busybox:1.36", "busybox:1.36"]
    })
    .await;
    wait_until(STEP, || async {
        let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "5s"]);
        done && text.contains("partitioned roll out complete") && text.contains(&stable)
    })
    .await;
    let status = watchers.get("log-watcher").await.expect("watcher").status.expect("status");
    assert_eq!(status.stable_revision.as_deref(), Some(stable.as_str()), "the stable revision stays while held");
    assert_ne!(status.current_revision.as_deref(), Some(stable.as_str()));
    assert_eq!(admitted_image(&pods, None).await.as_deref(), Some("busybox:1.36"), "a new pod gets the stable image");

    // Scaled to 8: the new pods come in on the stable image; the partition keeps the 3 newest
    // as they came in (the oldest new one may be updated in place by the rollout, as any pod).
    kubectl(&["scale", "deployment/canary-web", "--replicas", "8", "-n", n]);
    let scaled = until(&pods, "8 pods", |live| live.len() == 8).await;
    let newest: Vec<&Pod> = scaled.iter().filter(|p| !originals.contains(&p.name_any())).collect();
    assert_eq!(newest.len(), 4);
    for pod in &newest[1..] {
        assert_eq!(
            sidecar_image(pod).as_deref(),
            Some("busybox:1.36"),
            "{} came in on the stable image",
            pod.name_any()
        );
        assert!(!pod.annotations().contains_key("watcher.dev/sidecar-updated"), "{} never updated", pod.name_any());
    }
    let (_, history) = rollout(n, &["history", "log-watcher"]);
    assert!(history.contains("busybox:1.36  (stable: pods created outside the canary group"), "{history}");

    // A canary group instead of a count: a pod labelled track=canary gets the current image.
    kubectl_apply(
        n,
        &watcher(
            "busybox:1.37",
            json!({"type": "InPlace", "maxUnavailable": 8, "newPods": "Stable",
                   "selector": {"matchLabels": {"track": "canary"}}}),
        ),
    );
    wait_until(STEP, || async { admitted_image(&pods, Some("canary")).await.as_deref() == Some("busybox:1.37") }).await;
    assert_eq!(admitted_image(&pods, None).await.as_deref(), Some("busybox:1.36"), "outside the group: stable");
    let canary = pods.create(&PostParams::default(), &app_pod("canary-1", Some("canary"))).await.expect("created");
    assert_eq!(sidecar_image(&canary).as_deref(), Some("busybox:1.37"));
    wait_until(STEP, || async {
        kubelet_reports(&pods).await;
        let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "5s"]);
        done && text.contains("outside the canary selector")
    })
    .await;

    // Released: every pod ends on the current image, and new pods get it.
    kubectl_apply(n, &watcher("busybox:1.37", json!({"type": "InPlace", "maxUnavailable": 8, "newPods": "Stable"})));
    until(&pods, "all on the current image", |live| {
        live.len() == 9 && images(live).iter().all(|i| i == "busybox:1.37")
    })
    .await;
    wait_until(STEP, || async {
        kubelet_reports(&pods).await;
        let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "5s"]);
        done && text.contains("successfully rolled out")
    })
    .await;
    assert_eq!(admitted_image(&pods, None).await.as_deref(), Some("busybox:1.37"));
    let status = watchers.get("log-watcher").await.expect("watcher").status.expect("status");
    assert_eq!(status.stable_revision, status.current_revision, "complete: the current revision is the stable one");
    ns.delete().await;
    operator_ns.delete().await;
}

/// The spec changed as soon as the pods exist, as a GitOps sync or a script does it: a new image
/// held (`paused`) with a canary group, within a second of the Deployment's pods being created.
/// The stable revision is the spec the pods carry (kept when it was first seen), never the new
/// one; new pods outside the group get it, pods of the group the new one.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_canary_changed_as_soon_as_its_pods_exist_holds_them() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-hold-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-hold").await;
    let n = ns.name.as_str();
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    let first = watcher("busybox:1.36", json!({"type": "InPlace", "maxUnavailable": 1, "newPods": "Stable"}));
    kubectl_apply(n, &first);
    wait_until(STEP, || async { admitted_image(&pods, None).await.as_deref() == Some("busybox:1.36") }).await;
    let revision_of = |manifest: &serde_json::Value| {
        let spec: watcher_api::WatcherSpec = serde_json::from_value(manifest["spec"].clone()).expect("spec");
        format!("log-watcher-{}", spec.spec_hash())
    };
    kubectl_apply(
        n,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "canary-web"},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "canary-web"}},
                         "template": {"metadata": {"labels": {"app": "canary-web"}},
                                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}}}),
    );
    wait_until(STEP, || async { live(&pods).await.len() == 4 }).await;
    let held = watcher(
        "busybox:1.37",
        json!({"type": "InPlace", "maxUnavailable": 1, "newPods": "Stable", "paused": true,
               "selector": {"matchLabels": {"track": "canary"}}}),
    );
    kubectl_apply(n, &held);
    let (stable, current) = (revision_of(&first), revision_of(&held));

    let status = wait_for(STEP, || async {
        let status = watchers.get("log-watcher").await.ok()?.status?;
        (status.current_revision.as_deref() == Some(current.as_str()) && status.pods.is_some_and(|p| p.matched == 4))
            .then_some(status)
    })
    .await;
    assert_eq!(status.stable_revision.as_deref(), Some(stable.as_str()), "the spec the pods carry: {status:?}");
    assert_eq!(status.pods.map(|p| (p.injected, p.up_to_date)), Some((4, 0)));
    assert!(images(&live(&pods).await).iter().all(|i| i == "busybox:1.36"));
    assert_eq!(admitted_image(&pods, None).await.as_deref(), Some("busybox:1.36"), "outside the group: stable");
    assert_eq!(admitted_image(&pods, Some("canary")).await.as_deref(), Some("busybox:1.37"), "the group: current");

    // Scaled to 8: the hold holds.
    kubectl(&["scale", "deployment/canary-web", "--replicas", "8", "-n", n]);
    let scaled = wait_for(STEP, || async {
        let live = live(&pods).await;
        (live.len() == 8).then_some(live)
    })
    .await;
    assert!(images(&scaled).iter().all(|i| i == "busybox:1.36"), "{:?}", images(&scaled));
    let status = watchers.get("log-watcher").await.expect("watcher").status.expect("status");
    assert_eq!(status.stable_revision.as_deref(), Some(stable.as_str()));
}
