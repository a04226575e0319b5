//! e2e: ImagePolicy against a real API server, applied with `kubectl` as a user does. Pods are
//! rewritten at admission; with `workloads: true` a Deployment's template too, so its new
//! ReplicaSet carries the mirror image; deleting the policy stops further rewrites.
//! Run on purpose: `cargo test --test e2e images:: -- --ignored`.
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use watcher_api::ImagePolicy;

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, runs_cel,
    try_kubectl_apply, wait_for, wait_until,
};

fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod")
}

fn image(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

fn policy(name: &str, selector_value: &str, workloads: bool) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": name},
        "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}],
                 "namespaceSelector": {"matchLabels": {"watcher-e2e-mirror": selector_value}},
                 "workloads": workloads}})
}

/// What a server-side dry run of `pod` comes back with: the webhook's answer, with no pod made.
async fn dry_run_image(pods: &Api<Pod>, pod: &Pod) -> Option<String> {
    let created = pods.create(&PostParams { dry_run: true, ..PostParams::default() }, pod).await.ok()?;
    image(&created).map(str::to_owned)
}

async fn ready(client: &Client, name: &str) -> bool {
    let policy = Api::<ImagePolicy>::all(client.clone()).get_opt(name).await.ok().flatten();
    let conditions = policy.and_then(|p| p.status).map(|s| s.conditions).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn image_policies_rewrite_pods_and_workloads() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-img-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-img").await;
    let n = ns.name.as_str();
    let mark = format!("{}", std::process::id());
    kubectl(&["label", "namespace", n, &format!("watcher-e2e-mirror={mark}")]);
    let _operator = Operator::start(&operator_ns.name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);

    // Admission: a pod created with `alpine` gets the mirror image, the original annotated.
    kubectl_apply(n, &policy("e2e-mirror", &mark, false));
    wait_until(STEP, || ready(&client, "e2e-mirror")).await;
    let alpine = pod("alpine", "alpine");
    wait_until(STEP, || async {
        dry_run_image(&pods, &alpine).await.as_deref() == Some("mirror.internal/library/alpine:latest")
    })
    .await;
    let created = pods.create(&PostParams::default(), &alpine).await.expect("pod created");
    assert_eq!(image(&created), Some("mirror.internal/library/alpine:latest"));
    assert_eq!(created.annotations().get("watcher.dev/original-images").map(String::as_str), Some("app=alpine"));
    // A namespace outside the selector is not rewritten.
    let other = TestNamespace::create(&client, "watcher-e2e-img-no").await;
    let untouched = Api::<Pod>::namespaced(client.clone(), &other.name)
        .create(&PostParams::default(), &pod("alpine", "alpine"))
        .await
        .expect("pod created");
    assert_eq!(image(&untouched), Some("alpine"));

    // Workloads: the Deployment's template is rewritten, and its new ReplicaSet carries it.
    kubectl_apply(n, &policy("e2e-mirror", &mark, true));
    let deployment: Deployment = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "alpine:3.20", "command": ["sleep", "3600"]}]}}}}))
    .expect("valid Deployment");
    let deployments = Api::<Deployment>::namespaced(client.clone(), n);
    deployments.create(&PostParams::default(), &deployment).await.expect("Deployment created");
    let rewritten = wait_for(STEP, || async {
        let d = deployments.get("web").await.ok()?;
        let template = d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone()?;
        (template == "mirror.internal/library/alpine:3.20").then_some(d)
    })
    .await;
    assert_eq!(rewritten.annotations().get("watcher.dev/original-images").map(String::as_str), Some("app=alpine:3.20"));
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), n);
    wait_until(STEP, || async {
        let list = replica_sets.list(&ListParams::default().labels("app=web")).await;
        list.is_ok_and(|l| {
            l.items.iter().any(|rs| {
                let template = rs.spec.as_ref().and_then(|s| s.template.as_ref()).and_then(|t| t.spec.as_ref());
                template.and_then(|s| s.containers.first()).and_then(|c| c.image.as_deref())
                    == Some("mirror.internal/library/alpine:3.20")
            })
        })
    })
    .await;
    wait_until(STEP, || async {
        let status = Api::<ImagePolicy>::all(client.clone()).get("e2e-mirror").await.ok().and_then(|p| p.status);
        status.and_then(|s| s.workloads).is_some_and(|w| w.matched == 1 && w.rewritten == 1)
    })
    .await;

    // The owner wins: an image the owner sets that no rule matches stays as the owner wrote it,
    // and leaves the annotations (the controller's one write proves it looked).
    kubectl(&["set", "image", "deployment/web", "app=quay.io/acme/web:2.0", "-n", n]);
    let forgotten = wait_for(STEP, || async {
        let d = deployments.get("web").await.ok()?;
        (!d.annotations().contains_key("watcher.dev/original-images")).then_some(d)
    })
    .await;
    let template = |d: &Deployment| d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone();
    assert_eq!(template(&forgotten).as_deref(), Some("quay.io/acme/web:2.0"));
    assert!(!forgotten.annotations().contains_key("watcher.dev/rewritten-images"));
    // An image a rule matches is the owner's new original: rewritten.
    kubectl(&["set", "image", "deployment/web", "app=alpine:3.20", "-n", n]);
    wait_until(STEP, || async {
        deployments.get("web").await.ok().and_then(|d| template(&d)).as_deref()
            == Some("mirror.internal/library/alpine:3.20")
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await; // past the controller's debounce
    let settled = deployments.get("web").await.expect("Deployment");
    assert_eq!(template(&settled).as_deref(), Some("mirror.internal/library/alpine:3.20"));
    let table = kubectl(&["get", "imagepolicy", "e2e-mirror"]);
    assert!(table.lines().next().is_some_and(|h| h.contains("WORKLOADS") && h.contains("READY")), "{table}");

    // Deleting the policy stops further rewrites (and reverts nothing).
    kubectl(&["delete", "imagepolicy", "e2e-mirror"]);
    let busybox = pod("busybox", "busybox:1.36");
    wait_until(STEP, || async { dry_run_image(&pods, &busybox).await.as_deref() == Some("busybox:1.36") }).await;
    let created = pods.create(&PostParams::default(), &busybox).await.expect("pod created");
    assert_eq!(image(&created), Some("busybox:1.36"));
    let kept = deployments.get("web").await.expect("Deployment");
    let template =
        kept.spec.and_then(|s| s.template.spec).and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
    assert_eq!(template.as_deref(), Some("mirror.internal/library/alpine:3.20"));

    // An invalid rule (a prefix rewritten to a whole reference) is never applied: refused at
    // apply time where kube-apiserver runs the CRD's CEL rules (1.25+), reported before.
    let mut invalid = policy("e2e-invalid", &mark, false);
    invalid["spec"]["rewrites"][0]["to"] = json!("mirror.internal/library");
    if runs_cel(&client).await {
        let refused = try_kubectl_apply(n, &invalid).expect_err("refused at apply time");
        assert!(refused.contains("a prefix (from ending in /) is rewritten to a prefix"), "{refused}");
    } else {
        kubectl_apply(n, &invalid);
        let reason = wait_for(STEP, || async {
            let status = Api::<ImagePolicy>::all(client.clone()).get("e2e-invalid").await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Ready" && c.status == "False").map(|c| c.reason)
        })
        .await;
        assert_eq!(reason, "InvalidRule");
    }
    assert_eq!(dry_run_image(&pods, &pod("alpine2", "alpine")).await.as_deref(), Some("alpine"));
    let _ = common::try_kubectl(&["delete", "imagepolicy", "e2e-invalid", "--ignore-not-found"]);

    other.delete().await;
    ns.delete().await;
    operator_ns.delete().await;
}
