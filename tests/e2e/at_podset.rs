//! e2e: At and PodSet against a real API server. No kubelet is assumed: where a pod must run or
//! finish, the test patches its status as a kubelet would (the commands agree with the patched
//! outcome, so a cluster with kubelets gives the same result).
//! Run on purpose: `cargo test --test e2e at_podset:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use watcher_api::{At, AtPhase, PodSet};

use crate::common;

use std::time::Duration;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, finish_pod, install_crds, kubectl, rfc3339, run_pods, wait_for,
    wait_until,
};

async fn at_status(ats: &Api<At>, name: &str, phase: AtPhase) -> watcher_api::AtStatus {
    wait_for(STEP, || async {
        let status = ats.get(name).await.ok()?.status?;
        (status.phase == Some(phase)).then_some(status)
    })
    .await
}

fn at(name: &str, schedule: &str, command: &str) -> At {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": name},
        "spec": {"schedule": schedule, "command": command}}))
    .expect("valid At")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn at_runs_once_at_its_time() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-at").await;
    let _one = exclusive().await;
    let _operator = Operator::start(&ns.name).await;
    let ats = Api::<At>::namespaced(client.clone(), &ns.name);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);

    // In the past: runs now, and ends with the pod's exit code.
    ats.create(&PostParams::default(), &at("ok", &rfc3339(-60), "echo hello world!")).await.expect("created");
    ats.create(&PostParams::default(), &at("broken", &rfc3339(-60), "exit 3")).await.expect("created");
    for (name, exit_code) in [("ok", 0), ("broken", 3)] {
        let pod = wait_for(STEP, || async { pods.get_opt(&format!("{name}-at")).await.ok().flatten() }).await;
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.owner_references()[0].kind, "At");
        finish_pod(&pods, &pod.name_any(), "command", exit_code).await;
    }
    let ok = at_status(&ats, "ok", AtPhase::Succeeded).await;
    assert_eq!((ok.exit_code, ok.pod_name.as_deref()), (Some(0), Some("ok-at")));
    assert!(ok.completion_time.is_some());
    let broken = at_status(&ats, "broken", AtPhase::Failed).await;
    assert_eq!(broken.exit_code, Some(3));
    // `kubectl get at` shows the schedule, the phase and its reason.
    let table = kubectl(&["get", "at", "-n", &ns.name]);
    let header: Vec<_> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SCHEDULE", "PHASE", "REASON", "AGE"], "{table}");
    let ok_row: Vec<_> = table.lines().find(|l| l.starts_with("ok ")).unwrap_or_default().split_whitespace().collect();
    assert_eq!(ok_row.get(2..4), Some(&["Succeeded", "Completed"][..]), "{table}");

    // 10 s ahead: no pod before its time, one after.
    ats.create(&PostParams::default(), &at("soon", &rfc3339(10), "echo later")).await.expect("created");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(pods.get_opt("soon-at").await.expect("get").is_none(), "no pod before the schedule");
    assert_eq!(ats.get("soon").await.expect("At").status.and_then(|s| s.phase), Some(AtPhase::Pending));
    wait_for(Duration::from_secs(30), || async { pods.get_opt("soon-at").await.ok().flatten() }).await;

    // An invalid schedule (the CRD lets through what its format check cannot reject) fails.
    let invalid = at("invalid", "2026-02-30T10:00:00Z", "echo never");
    if ats.create(&PostParams::default(), &invalid).await.is_ok() {
        let status = at_status(&ats, "invalid", AtPhase::Failed).await;
        assert_eq!(status.reason.as_deref(), Some("InvalidSchedule"));
    }
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn podset_keeps_count_pods_and_rolls_out_a_new_message() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-ps").await;
    let _one = exclusive().await;
    let _operator = Operator::start(&ns.name).await;
    let podsets = Api::<PodSet>::namespaced(client.clone(), &ns.name);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);

    // A pod with the PodSet's label that the PodSet does not own: never touched.
    let foreign: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "foreign", "labels": {"watcher.dev/podset": "greeters"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod");
    pods.create(&PostParams::default(), &foreign).await.expect("foreign pod");

    let set: PodSet = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "greeters"}, "spec": {"count": 2, "message": "hello"}}))
    .expect("valid PodSet");
    podsets.create(&PostParams::default(), &set).await.expect("PodSet created");
    let owned = |client: Client, ns: String| async move {
        let pods = Api::<Pod>::namespaced(client, &ns);
        let list = pods.list(&ListParams::default().labels("watcher.dev/podset=greeters")).await.ok()?;
        Some(
            list.items
                .into_iter()
                .filter(|p| p.owner_references().iter().any(|o| o.kind == "PodSet"))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect::<Vec<_>>(),
        )
    };
    let count_is = |n: usize| {
        let (client, ns) = (client.clone(), ns.name.clone());
        move || {
            let (client, ns) = (client.clone(), ns.clone());
            async move { owned(client, ns).await.is_some_and(|p| p.len() == n) }
        }
    };

    // Scale up to 2.
    wait_until(STEP, count_is(2)).await;
    run_pods(&pods, "watcher.dev/podset=greeters").await;

    // A deleted pod is replaced.
    let victim = owned(client.clone(), ns.name.clone()).await.expect("pods")[0].name_any();
    pods.delete(&victim, &DeleteParams::default().grace_period(0)).await.expect("deleted");
    wait_until(STEP, || async {
        owned(client.clone(), ns.name.clone())
            .await
            .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p.name_any() != victim))
    })
    .await;
    run_pods(&pods, "watcher.dev/podset=greeters").await;

    // Scale down to 1, as a user does (the scale subresource).
    kubectl(&["scale", "podset/greeters", "--replicas=1", "-n", &ns.name]);
    wait_until(STEP, count_is(1)).await;
    let listed = kubectl(&["get", "podset", "greeters", "-n", &ns.name, "-o", "jsonpath={.spec.count}"]);
    assert_eq!(listed, "1");

    // A new message rolls out; pods are marked ready as they come.
    run_pods(&pods, "watcher.dev/podset=greeters").await;
    podsets
        .patch("greeters", &PatchParams::default(), &Patch::Merge(json!({"spec": {"message": "bye"}})))
        .await
        .expect("patched");
    wait_until(STEP, || async {
        run_pods(&pods, "watcher.dev/podset=greeters").await;
        owned(client.clone(), ns.name.clone()).await.is_some_and(|p| {
            p.len() == 1
                && p.iter().all(|pod| {
                    let env = pod.spec.as_ref().and_then(|s| s.containers[0].env.clone()).unwrap_or_default();
                    env.iter().any(|e| e.name == "MESSAGE" && e.value.as_deref() == Some("bye"))
                })
        })
    })
    .await;
    let status = wait_for(STEP, || async {
        let status = podsets.get("greeters").await.ok()?.status?;
        (status.message.as_deref() == Some("bye")).then_some(status)
    })
    .await;
    assert_eq!(status.ready_count, 1);

    // The foreign pod is still there, untouched.
    let foreign = pods.get("foreign").await.expect("foreign pod kept");
    assert!(foreign.owner_references().is_empty());
    ns.delete().await;
}
