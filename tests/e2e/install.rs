//! e2e: the operator as a user installs it. `kubectl apply -k deploy/`, then the binary runs
//! outside the cluster with the token of the ServiceAccount that `deploy/rbac.yaml` binds (not
//! as cluster admin), so a missing RBAC rule fails here. Every controller does its job under it,
//! with its default flags, and the webhook registration switches from the installed Service to
//! a URL and back. Where kube-apiserver has ValidatingAdmissionPolicy (1.30+), under the
//! policies of `deploy/policies/` too.
//! Run on purpose: `cargo test --test e2e install:: -- --ignored`.
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, WebhookClientConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use watcher_api::{At, AtPhase, PodSet, Watcher};

use crate::common;

use common::{
    Operator, Registration, STEP, TestNamespace, client, create_injected_app, delete_cluster_wide_objects, exclusive,
    finish_pod, kubectl, kubectl_apply, rfc3339, run_pods, service_account_kubeconfig, wait_for,
    wait_for_crds_established, wait_until,
};

const OPERATOR_NAMESPACE: &str = "watcher-system";

async fn client_config(client: &Client) -> Option<WebhookClientConfig> {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let config = api.get_opt("watcher-operator").await.ok()??;
    Some(config.webhooks?.first()?.client_config.clone())
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn installed_operator_works_under_its_own_rbac() {
    let _one = exclusive().await;
    let client = client().await;
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    kubectl(&["apply", "-k", deploy]);
    if common::serves_policies(&client).await {
        kubectl(&["apply", "-k", &format!("{deploy}/policies")]);
    }
    wait_for_crds_established();
    // No kubelet runs the installed Deployment here: this process is the operator.
    let deployments = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let _ = deployments
        .patch("watcher-operator", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}})))
        .await;
    let installed = client_config(&client).await.expect("deploy/ installs the webhook configuration");
    assert!(installed.service.is_some() && installed.url.is_none());

    let kubeconfig = service_account_kubeconfig(&client, OPERATOR_NAMESPACE, "watcher-operator").await;
    let operator = Operator::start_as(OPERATOR_NAMESPACE, Some(&kubeconfig), Registration::Url).await;
    let url = operator.url.clone().expect("registered by URL");

    // Registration by URL replaced the Service: exactly one of the two, with a CA bundle.
    let registered =
        wait_for(STEP, || async { client_config(&client).await.filter(|c| c.url.as_deref() == Some(url.as_str())) })
            .await;
    assert!(registered.service.is_none(), "service and url are exclusive: {registered:?}");
    assert!(registered.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()));

    let ns = TestNamespace::create(&client, "watcher-e2e-rbac").await;
    let n = ns.name.as_str();

    // The Watcher controller: the ConfigMap and the status, read as a user does.
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                 "configData": {"LEVEL": "debug"}}}),
    );
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), n);
    wait_for(STEP, || async { config_maps.get_opt("log-watcher-config").await.ok().flatten() }).await;
    wait_until(STEP, || async {
        common::try_kubectl(&["get", "watcher", "log-watcher", "-n", n, "-o", "jsonpath={.status.configMapName}"])
            .is_ok_and(|name| name == "log-watcher-config")
    })
    .await;

    // The webhook: a pod that asks is injected (dry-run probes until the cache has the Watcher).
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let created = create_injected_app(&pods, "log-watcher").await;
    assert!(created.annotations().contains_key("watcher.dev/injected"));

    // The pod reconciler counts it.
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    wait_until(STEP, || async {
        let counts = watchers.get("log-watcher").await.ok().and_then(|w| w.status?.pods);
        counts.is_some_and(|c| c.matched == 1 && c.injected == 1 && c.up_to_date == 1 && c.missing == 0)
    })
    .await;

    // At: its pod is made, and its outcome read back.
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": "backup"},
        "spec": {"schedule": rfc3339(-5), "command": "echo hello world!"}}),
    );
    wait_for(STEP, || async { pods.get_opt("backup-at").await.ok().flatten() }).await;
    finish_pod(&pods, "backup-at", "command", 0).await;
    let ats = Api::<At>::namespaced(client.clone(), n);
    wait_until(STEP, || async {
        ats.get("backup").await.ok().and_then(|a| a.status?.phase) == Some(AtPhase::Succeeded)
    })
    .await;

    // PodSet: pods made, scaled with kubectl, status written.
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "greeters"},
        "spec": {"count": 1, "message": "hello"}}),
    );
    let live = |n: usize| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("watcher.dev/podset=greeters")).await;
                list.is_ok_and(|l| l.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == n)
            }
        }
    };
    wait_until(STEP, live(1)).await;
    kubectl(&["scale", "podset/greeters", "--replicas=2", "-n", n]);
    wait_until(STEP, live(2)).await;
    kubectl(&["scale", "podset/greeters", "--replicas=1", "-n", n]);
    wait_until(STEP, live(1)).await;
    let podsets = Api::<PodSet>::namespaced(client.clone(), n);
    wait_until(STEP, || async {
        run_pods(&pods, "watcher.dev/podset=greeters").await;
        podsets.get("greeters").await.ok().and_then(|p| p.status).is_some_and(|s| s.ready_count == 1)
    })
    .await;

    // The category lists the three kinds; each kind's name still names the kind.
    let all = kubectl(&["get", "watcher-dev", "-n", n, "-o", "name"]);
    for name in ["watcher.watcher.dev/log-watcher", "at.watcher.dev/backup", "podset.watcher.dev/greeters"] {
        assert!(all.lines().any(|l| l == name), "{name} in:\n{all}");
    }

    // And back: the operator as installed (by Service) takes the registration back, without
    // the URL.
    operator.stop().await;
    let in_cluster = Operator::start_as(OPERATOR_NAMESPACE, Some(&kubeconfig), Registration::Service).await;
    let restored = wait_for(STEP, || async { client_config(&client).await.filter(|c| c.service.is_some()) }).await;
    assert!(restored.url.is_none(), "service and url are exclusive: {restored:?}");
    let service = restored.service.expect("service");
    assert_eq!((service.name.as_str(), service.namespace.as_str()), ("watcher-operator", OPERATOR_NAMESPACE));
    in_cluster.stop().await;
    // deploy/ applies again cleanly over what the operator wrote.
    kubectl(&["apply", "-k", deploy]);

    ns.delete().await;
    let _ = deployments.delete("watcher-operator", &DeleteParams::default()).await;
    delete_cluster_wide_objects();
}

/// Whether the configuration is registered by the Service of `deploy/` only.
fn by_deploy_service(config: &WebhookClientConfig) -> bool {
    config.url.is_none() && config.service.as_ref().is_some_and(|s| s.namespace == OPERATOR_NAMESPACE)
}

/// `kubectl apply -k deploy/` right after a run by URL: while that operator still runs (the
/// applied Service form then stands: the run by URL does not write its URL back, and leaves
/// it on its stop), after it stopped (it put back what it replaced), and after it crashed
/// (its URL left behind: `url: null` in deploy/ clears it), client- and server-side.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn deploy_applies_over_a_registration_by_url() {
    let _one = exclusive().await;
    let client = client().await;
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    kubectl(&["apply", "-k", deploy]);
    let deployments = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let _ = deployments
        .patch("watcher-operator", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}})))
        .await;
    let registered_by = |url: String| {
        let client = client.clone();
        async move {
            wait_until(STEP, || async { client_config(&client).await.is_some_and(|c| c.url.as_deref() == Some(&url)) })
                .await;
        }
    };

    // Still running: the applied Service form stands for longer than the operator's longest
    // pause between two looks at the registration (60 s).
    let operator = Operator::start(OPERATOR_NAMESPACE).await;
    registered_by(operator.url.clone().expect("by URL")).await;
    kubectl(&["apply", "-k", deploy]);
    let stands = std::time::Instant::now();
    while stands.elapsed() < std::time::Duration::from_secs(70) {
        let config = client_config(&client).await.expect("configuration");
        assert!(by_deploy_service(&config), "the applied Service form stands: {config:?}");
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    operator.stop().await;
    let config = client_config(&client).await.expect("configuration");
    assert!(by_deploy_service(&config), "left as applied on the stop: {config:?}");

    // Stopped: the Service form it replaced is back, and deploy/ applies over it.
    let operator = Operator::start(OPERATOR_NAMESPACE).await;
    registered_by(operator.url.clone().expect("by URL")).await;
    operator.stop().await;
    let config = client_config(&client).await.expect("configuration");
    assert!(by_deploy_service(&config), "restored on the stop: {config:?}");
    kubectl(&["apply", "-k", deploy]);

    // Crashed: its URL is left behind; both kinds of apply replace it.
    for apply in [&["apply", "-k", deploy][..], &["apply", "--server-side", "--force-conflicts", "-k", deploy]] {
        let operator = Operator::start(OPERATOR_NAMESPACE).await;
        registered_by(operator.url.clone().expect("by URL")).await;
        operator.kill();
        kubectl(apply);
        let config = client_config(&client).await.expect("configuration");
        assert!(by_deploy_service(&config), "`kubectl {}` replaced the URL: {config:?}", apply.join(" "));
    }

    let _ = deployments.delete("watcher-operator", &DeleteParams::default()).await;
    delete_cluster_wide_objects();
}
