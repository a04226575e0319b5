//! e2e: a sidecar rollout by revision, partition and pause, in a namespace with a LimitRange
//! (so kube-apiserver stores every container with resources the Watcher never named, and the
//! ServiceAccount token mounted into it). Four bare pods, created a second apart; no kubelet:
//! the test writes container statuses where the kubelet would. `kubectl watcher rollout` is
//! the binary itself, as the plugin runs it.
//! Run on purpose: `cargo test --test e2e rollout:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    Operator, STEP, TestNamespace, client, container_image, exclusive, install_crds, kubectl, kubectl_apply, rollout,
    wait_until,
};

const SELECTOR: &str = "app=rollout";

fn sidecar_image(pod: &Pod) -> Option<String> {
    container_image(pod, "log-watcher")
}

/// What the kubelet would report of the pods.
async fn kubelet_reports(pods: &Api<Pod>) {
    common::kubelet_reports(pods, SELECTOR).await;
}

/// The sidecar image of each pod, by name.
async fn images(pods: &Api<Pod>) -> BTreeMap<String, String> {
    let list = pods.list(&ListParams::default().labels(SELECTOR)).await.expect("list");
    list.items.iter().map(|p| (p.name_any(), sidecar_image(p).unwrap_or_default())).collect()
}

/// The uid of each pod, by name.
async fn uids(pods: &Api<Pod>) -> BTreeMap<String, String> {
    let list = pods.list(&ListParams::default().labels(SELECTOR)).await.expect("list");
    list.items.iter().map(|p| (p.name_any(), p.uid().unwrap_or_default())).collect()
}

fn watcher(image: &str, partition: i32, paused: bool) -> serde_json::Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
           "spec": {"container": {"name": "log-watcher", "image": image, "command": ["sleep", "3600"]},
                    "selector": {"matchLabels": {"app": "rollout"}},
                    "updatePolicy": {"type": "InPlace", "maxUnavailable": 4, "partition": partition, "paused": paused}}})
}

/// Reports statuses until the pods' sidecar images are `want` (by pod name), failing after a
/// step. The images are read before each report: the last report covers the images returned
/// (a patch landing between a report and the read would otherwise never be reported).
async fn until_images(pods: &Api<Pod>, want: &BTreeMap<String, String>) {
    wait_until(STEP, || async {
        let images = images(pods).await;
        kubelet_reports(pods).await;
        &images == want
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn partition_pause_status_and_undo() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-rollout-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-rollout").await;
    let n = ns.name.as_str();
    kubectl_apply(
        n,
        &json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
                "spec": {"limits": [{"type": "Container", "default": {"cpu": "100m", "memory": "64Mi"},
                                     "defaultRequest": {"cpu": "10m", "memory": "16Mi"}}]}}),
    );
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    kubectl_apply(n, &watcher("busybox:1.36", 0, false));
    let pod = |name: &str| -> Pod {
        serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "rollout"}},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}),
        )
        .expect("pod")
    };
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_until(STEP, || async {
        pods.create(&dry_run, &pod("probe")).await.is_ok_and(|p| sidecar_image(&p).is_some())
    })
    .await;
    // Four pods, a second apart: web-1 is the oldest, web-4 the newest.
    for i in 1..=4 {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"))).await.expect("pod created");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    kubelet_reports(&pods).await;
    let before = uids(&pods).await;
    assert!(rollout(n, &["status", "log-watcher", "--timeout", "60s"]).0, "the first spec is rolled out");
    let all =
        |image: &str| -> BTreeMap<String, String> { (1..=4).map(|i| (format!("web-{i}"), image.to_owned())).collect() };

    // Partition 2: the two oldest get the new image in place, the two newest keep theirs.
    kubectl_apply(n, &watcher("busybox:1.37", 2, false));
    let mut want = all("busybox:1.37");
    want.insert("web-3".into(), "busybox:1.36".into());
    want.insert("web-4".into(), "busybox:1.36".into());
    until_images(&pods, &want).await;
    let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "60s"]);
    assert!(done && text.contains("partitioned roll out complete"), "{text}");

    // Partition 0: the rest follow.
    kubectl_apply(n, &watcher("busybox:1.37", 0, false));
    until_images(&pods, &all("busybox:1.37")).await;
    let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "60s"]);
    assert!(done && text.contains("successfully rolled out"), "{text}");

    // Paused with a new image: nothing moves, and status says so (exit 1); resumed: all move.
    kubectl_apply(n, &watcher("busybox:1.38", 0, true));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(images(&pods).await, all("busybox:1.37"), "paused: nothing moves");
    let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "30s"]);
    assert!(!done && text.contains("paused"), "{text}");
    assert!(rollout(n, &["resume", "log-watcher"]).0);
    until_images(&pods, &all("busybox:1.38")).await;
    let (done, text) = rollout(n, &["status", "log-watcher", "--timeout", "60s"]);
    assert!(done, "{text}");

    // History and undo: the previous image comes back, in place.
    let (_, history) = rollout(n, &["history", "log-watcher"]);
    assert!(history.contains("busybox:1.36") && history.contains("busybox:1.38  (current)"), "{history}");
    let (undone, text) = rollout(n, &["undo", "log-watcher"]);
    assert!(undone, "{text}");
    until_images(&pods, &all("busybox:1.37")).await;
    let after = uids(&pods).await;
    assert_eq!(after, before, "every pod kept its uid");
    let events = kubectl(&["get", "events", "-n", n, "--field-selector", "reason=SidecarUpdated", "-o", "name"]);
    assert!(!events.trim().is_empty());
    ns.delete().await;
    operator_ns.delete().await;
}
