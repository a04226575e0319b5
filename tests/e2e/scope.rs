//! e2e: the admission scope against a real kube-apiserver. On 1.28 or later the operator writes
//! the webhook's matchConditions, so that kube-apiserver sends only the pods a Watcher or an
//! ImagePolicy applies to (the webhook's own request counter shows the others never arrive), a
//! selector change takes effect once the Watcher is Ready again, and with the operator gone
//! under `failurePolicy: Fail` the other pods are still created while the pods that ask are
//! refused. Before 1.28 every pod is sent, as before. On every version, a required Watcher
//! refuses a pod it cannot be injected into.
//! Run on purpose: `cargo test --test e2e scope:: -- --ignored`.
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use watcher_api::{ImagePolicy, Watcher};

use crate::common;

use std::time::Duration;

use common::{Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, wait_ready};

const CONFIGURATION: &str = "watcher-operator";

fn pod(name: &str, labels: Value, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                 "restartPolicy": "Never"},
    }))
    .expect("valid Pod")
}

fn watcher(name: &str, container: &str, extra: Value) -> Watcher {
    let mut spec = json!({"container": {"name": container, "image": "busybox:1.36", "command": ["sleep", "3600"]}});
    for (key, value) in extra.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name}, "spec": spec}))
    .expect("valid Watcher")
}

/// Creates the pod; a namespace whose default ServiceAccount is not there yet is retried.
async fn create(pods: &Api<Pod>, pod: &Pod) -> Result<Pod, String> {
    for _ in 0..40 {
        match pods.create(&PostParams::default(), pod).await {
            Err(kube::Error::Api(status)) if status.message.contains("serviceaccount") => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other.map_err(|error| error.to_string()),
        }
    }
    Err("the namespace's ServiceAccount never appeared".into())
}

/// Every admission request the webhook answered, whatever the result.
async fn answered(operator: &Operator) -> u64 {
    let text = operator.metrics_text().await;
    text.lines()
        .filter(|line| line.starts_with("watcher_admission_requests_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn injected(pod: &Pod) -> bool {
    pod.annotations().contains_key("watcher.dev/injected")
}

async fn server_minor(client: &Client) -> u32 {
    let info = client.apiserver_version().await.expect("version");
    info.minor.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().expect("minor version")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn only_the_pods_the_operator_could_change_reach_the_webhook() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-scope-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-scope").await;
    let scoped = server_minor(&client).await >= 28;
    let operator = Operator::start(&operator_ns.name).await;
    let watchers = Api::<Watcher>::namespaced(client.clone(), &ns.name);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    let configurations = Api::<MutatingWebhookConfiguration>::all(client.clone());

    // A Watcher selecting app=web; once Ready, a pod it selects is injected.
    watchers
        .create(
            &PostParams::default(),
            &watcher("web", "web-sidecar", json!({"selector": {"matchLabels": {"app": "web"}}})),
        )
        .await
        .expect("Watcher created");
    wait_ready(&watchers, "web").await;
    let web = create(&pods, &pod("web", json!({"app": "web"}), json!({}))).await.expect("created");
    assert!(injected(&web), "selected by label: injected");
    let configuration = configurations.get(CONFIGURATION).await.expect("configuration");
    let conditions = configuration.webhooks.iter().flatten().flat_map(|w| w.match_conditions.iter().flatten()).count();
    assert_eq!(conditions > 0, scoped, "matchConditions are written on 1.28 or later only");

    // A pod nothing applies to: on 1.28+ never sent (the webhook's counter does not move).
    let before = answered(&operator).await;
    let other = create(&pods, &pod("other", json!({"app": "other"}), json!({}))).await.expect("created");
    assert!(!injected(&other));
    let after = answered(&operator).await;
    if scoped {
        assert_eq!(after, before, "a pod no Watcher applies to never reaches the webhook");
    } else {
        assert_eq!(after, before + 1, "before 1.28 every pod is sent");
    }

    // The selector changes: once Ready again, app=api pods are injected, app=web pods not sent.
    let patch = json!({"spec": {"selector": {"matchLabels": {"app": "api"}}}});
    watchers.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("selector changed");
    wait_ready(&watchers, "web").await;
    let api = create(&pods, &pod("api", json!({"app": "api"}), json!({}))).await.expect("created");
    assert!(injected(&api), "the new selector applies");
    let before = answered(&operator).await;
    let old = create(&pods, &pod("web-2", json!({"app": "web"}), json!({}))).await.expect("created");
    assert!(!injected(&old));
    if scoped {
        assert_eq!(answered(&operator).await, before, "the old selector no longer sends pods");
    }

    // An ImagePolicy selecting this namespace by label puts every pod of it in scope.
    if scoped {
        let namespaces = Api::<Namespace>::all(client.clone());
        let label = json!({"metadata": {"labels": {"watcher-e2e-scope": "mirror"}}});
        namespaces.patch(&ns.name, &PatchParams::default(), &Patch::Merge(&label)).await.expect("labelled");
        let policy: ImagePolicy = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1",
            "kind": "ImagePolicy", "metadata": {"name": format!("{}-mirror", ns.name)},
            "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}],
                     "namespaceSelector": {"matchLabels": {"watcher-e2e-scope": "mirror"}}}}))
        .expect("valid ImagePolicy");
        let policies = Api::<ImagePolicy>::all(client.clone());
        policies.create(&PostParams::default(), &policy).await.expect("policy created");
        // The scope follows the policy within moments: pods are created until one is rewritten.
        let mut attempt = 0;
        let rewritten = common::wait_for(STEP, || {
            attempt += 1;
            let mirrored = pod(&format!("mirrored-{attempt}"), json!({}), json!({}));
            let pods = pods.clone();
            async move {
                let pod = create(&pods, &mirrored).await.ok()?;
                let image = pod.spec.as_ref()?.containers[0].image.clone()?;
                image.starts_with("mirror.internal/").then_some(image)
            }
        })
        .await;
        assert_eq!(rewritten, "mirror.internal/library/busybox:1.36");
        let _ = policies.delete(&policy.name_any(), &Default::default()).await;
        let unlabel = json!({"metadata": {"labels": {"watcher-e2e-scope": null}}});
        namespaces.patch(&ns.name, &PatchParams::default(), &Patch::Merge(&unlabel)).await.expect("unlabelled");
    }

    // A required Watcher whose container collides with the pod's: the pod is refused.
    watchers
        .create(&PostParams::default(), &watcher("audit", "app", json!({"failurePolicy": "Fail"})))
        .await
        .expect("Watcher created");
    wait_ready(&watchers, "audit").await;
    let refused = create(&pods, &pod("collides", json!({}), json!({"watcher.dev/inject": "audit"}))).await;
    let error = refused.expect_err("a required Watcher that collides refuses the pod");
    assert!(error.contains("Watcher audit is required"), "{error}");

    if scoped {
        // The required webhook exists and fails closed; make the other one fail closed too.
        let configuration = configurations.get(CONFIGURATION).await.expect("configuration");
        let names: Vec<&str> = configuration.webhooks.iter().flatten().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["inject.watcher.dev", "required.watcher.dev"]);
        let installed = configuration.webhooks.as_ref().expect("webhooks")[0].failure_policy.clone();
        kubectl(&[
            "patch",
            "mutatingwebhookconfiguration",
            CONFIGURATION,
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]"#,
        ]);
        // The operator gone (killed: nothing restored): unrelated pods are still created...
        operator.kill();
        let unrelated = create(&pods, &pod("unrelated", json!({"app": "other"}), json!({}))).await;
        assert!(unrelated.is_ok(), "a pod out of scope never waits for the webhook: {unrelated:?}");
        // ...while pods that ask, by label or for a required Watcher, are refused.
        let asks = create(&pods, &pod("asks", json!({"app": "api"}), json!({}))).await;
        assert!(asks.is_err(), "selected, failurePolicy Fail, webhook down: refused");
        let required = create(&pods, &pod("required", json!({}), json!({"watcher.dev/inject": "audit"}))).await;
        assert!(required.is_err(), "a required Watcher's pod is refused while the webhook is down");
        // A second run by URL finds the killed run's configuration and undoes it on its stop;
        // the failure policy goes back to what was installed first.
        let again = Operator::start(&operator_ns.name).await;
        let value = json!(installed.unwrap_or_else(|| "Ignore".into()));
        let patch = format!(r#"[{{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": {value}}}]"#);
        kubectl(&["patch", "mutatingwebhookconfiguration", CONFIGURATION, "--type=json", "-p", &patch]);
        again.stop().await;
    } else {
        operator.stop().await;
    }
    ns.delete().await;
    operator_ns.delete().await;
}
