//! e2e: `updatePolicy: InPlace` against a real API server. A new sidecar image reaches three
//! running pods of a Deployment in place (same uid), one at a time with `maxUnavailable: 1`, as
//! their statuses report the new image ready, the image changed right after the pods started
//! (no revision of their spec need be kept); then an env change takes the Recreate path. No
//! kubelet is assumed: the test writes container statuses where the kubelet would.
//! Run on purpose: `cargo test --test e2e inplace:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use watcher_api::Watcher;

use crate::common;

use std::collections::BTreeMap;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, wait_for, wait_until,
};

const SELECTOR: &str = "app=inplace";

fn sidecar_image(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().find(|c| c.name == "log-watcher")?.image.clone()
}

fn reported_image(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find(|s| s.name == "log-watcher" && s.ready).map(|s| s.image.clone())
}

/// What the kubelet would report: every container of the pod running and ready, with the
/// image its spec names.
async fn kubelet_reports(pods: &Api<Pod>, pod: &Pod) {
    let now = jiff::Timestamp::now().to_string();
    let statuses: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({
        "name": c.name, "image": c.image, "imageID": "", "ready": true, "restartCount": 0, "started": true,
        "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let status = json!({"status": {"phase": "Running", "startTime": now, "containerStatuses": statuses,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
    pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await.expect("status patched");
}

async fn live(pods: &Api<Pod>) -> Vec<Pod> {
    let list = pods.list(&ListParams::default().labels(SELECTOR)).await.expect("list");
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_new_sidecar_image_reaches_running_pods_in_place() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-inplace-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-inplace").await;
    let n = ns.name.as_str();
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    let watcher = |image: &str, env: Option<&str>| {
        let mut container = json!({"name": "log-watcher", "image": image, "command": ["sleep", "3600"]});
        if let Some(level) = env {
            container["env"] = json!([{"name": "LEVEL", "value": level}]);
        }
        json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
               "spec": {"container": container, "selector": {"matchLabels": {"app": "inplace"}}, "nativeSidecar": "Never",
                        "updatePolicy": {"type": "InPlace", "maxUnavailable": 1}}})
    };
    kubectl_apply(n, &watcher("busybox:1.36", None));
    let probe: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "labels": {"app": "inplace"}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}))
    .expect("valid Pod");
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_until(STEP, || async { pods.create(&dry_run, &probe).await.is_ok_and(|p| sidecar_image(&p).is_some()) }).await;
    kubectl_apply(
        n,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "inplace"},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "inplace"}},
                         "template": {"metadata": {"labels": {"app": "inplace"}},
                                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}}}),
    );
    let started = wait_for(STEP, || async {
        let live = live(&pods).await;
        (live.len() == 3 && live.iter().all(|p| sidecar_image(p).as_deref() == Some("busybox:1.36"))).then_some(live)
    })
    .await;
    for pod in &started {
        kubelet_reports(&pods, pod).await;
    }
    // The image changes at once, before the operator may have kept a revision of the spec the
    // pods were injected with: the pods carry what decides (the hash without image).
    let uids: BTreeMap<String, String> = started.iter().map(|p| (p.name_any(), p.uid().unwrap_or_default())).collect();

    // The new image: one pod at a time gets it in place; the next only once the kubelet reports
    // the previous one running and ready with it.
    kubectl_apply(n, &watcher("busybox:1.37", None));
    let mut updated = 0;
    while updated < 3 {
        let pending = wait_for(STEP, || async {
            let live = live(&pods).await;
            let in_flight: Vec<Pod> = live
                .into_iter()
                .filter(|p| {
                    sidecar_image(p).as_deref() == Some("busybox:1.37")
                        && reported_image(p).as_deref() != Some("busybox:1.37")
                })
                .collect();
            (!in_flight.is_empty()).then_some(in_flight)
        })
        .await;
        assert_eq!(pending.len(), 1, "maxUnavailable: 1 pod in flight at a time");
        let pod = &pending[0];
        assert_eq!(uids.get(&pod.name_any()), pod.uid().as_ref(), "the same pod, in place");
        assert!(pod.annotations().contains_key("watcher.dev/sidecar-updated"));
        kubelet_reports(&pods, pod).await;
        updated += 1;
    }
    let after = live(&pods).await;
    assert!(after.iter().all(|p| sidecar_image(p).as_deref() == Some("busybox:1.37")));
    let kept: BTreeMap<String, String> = after.iter().map(|p| (p.name_any(), p.uid().unwrap_or_default())).collect();
    assert_eq!(kept, uids, "every pod kept its uid");
    wait_until(STEP, || async {
        watchers.get("log-watcher").await.ok().and_then(|w| w.status?.pods).is_some_and(|c| c.up_to_date == 3)
    })
    .await;
    let events = kubectl(&["get", "events", "-n", n, "--field-selector", "reason=SidecarUpdated", "-o", "name"]);
    assert!(!events.trim().is_empty(), "SidecarUpdated events recorded");

    // An env change cannot be applied in place: the pods are evicted and recreated.
    kubectl_apply(n, &watcher("busybox:1.37", Some("debug")));
    wait_until(2 * STEP, || async {
        let live = live(&pods).await;
        for pod in live.iter().filter(|p| reported_image(p).is_none()) {
            kubelet_reports(&pods, pod).await; // the recreated pods run
        }
        live.len() == 3 && live.iter().all(|p| !uids.values().any(|u| Some(u) == p.uid().as_ref()))
    })
    .await;
    let recreated = live(&pods).await;
    assert!(recreated.iter().all(|p| {
        p.spec.as_ref().is_some_and(|s| {
            s.containers.iter().any(|c| {
                c.name == "log-watcher" && c.env.as_ref().is_some_and(|e| e[0].value.as_deref() == Some("debug"))
            })
        })
    }));

    ns.delete().await;
    operator_ns.delete().await;
}
