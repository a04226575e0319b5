//! e2e: validation at apply time. `kubectl apply` refuses what could never work, naming the
//! field (CEL rules from Kubernetes 1.25, OpenAPI rules on every version); the samples apply;
//! and a Watcher stored before its CRD had a rule never makes a pod fail admission.
//! Run on purpose against a cluster: `cargo test --test e2e validation:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use watcher_api::Watcher;

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, minor, runs_cel, try_kubectl_apply,
    wait_for,
};

/// `kubectl apply` of `manifest`: its stderr when refused.
fn apply(namespace: &str, manifest: &Value) -> Result<String, String> {
    try_kubectl_apply(namespace, manifest)
}

fn watcher(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn mistakes_are_refused_at_apply_and_samples_apply() {
    let client = client().await;
    let _one = exclusive().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-validation").await;
    let n = ns.name.as_str();
    let sidecar = json!({"name": "log-watcher", "image": "busybox:1.36"});

    let always = [
        (watcher("a", json!({"container": {"name": "Bad_Name", "image": "busybox"}})), "spec.container.name"),
        (
            watcher(
                "b",
                json!({"container": sidecar, "selector": {"matchExpressions": [
            {"key": "app", "operator": "Like", "values": ["web"]}]}}),
            ),
            "spec.selector.matchExpressions[0].operator",
        ),
        (
            watcher("c", json!({"container": sidecar, "selector": {"matchLabels": {"app": "x' || true"}}})),
            "spec.selector.matchLabels",
        ),
        (
            watcher("d", json!({"container": sidecar, "updatePolicy": {"maxUnavailable": 0}})),
            "spec.updatePolicy.maxUnavailable",
        ),
        (
            watcher(
                "d1",
                json!({"container": sidecar, "volume": {"name": "v", "emptyDir": {}},
                                  "appVolumeMounts": [{"mountPath": "var/log"}]}),
            ),
            "spec.appVolumeMounts[0].mountPath",
        ),
        (
            watcher("d2", json!({"container": sidecar, "transferEnv": [{"names": ["A=B"]}]})),
            "spec.transferEnv[0].names[0]",
        ),
        (
            watcher("d3", json!({"container": sidecar, "initContainers": [{"name": "Prepare", "image": "busybox"}]})),
            "spec.initContainers[0].name",
        ),
    ];
    for (manifest, field) in always {
        let refused = apply(n, &manifest).expect_err("refused");
        assert!(refused.contains(field), "{manifest}: {refused}");
    }
    if runs_cel(&client).await {
        let cel = [
            (
                watcher(
                    "e",
                    json!({"container": sidecar, "selector": {"matchExpressions": [
                {"key": "app", "operator": "Exists", "values": ["web"]}]}}),
                ),
                "values must be empty",
            ),
            (
                watcher("e1", json!({"container": sidecar, "appVolumeMounts": [{"mountPath": "/var/log/app"}]})),
                "appVolumeMounts needs volume",
            ),
            (
                watcher(
                    "e2",
                    json!({"container": sidecar, "initContainers": [{"name": "log-watcher", "image": "busybox"}]}),
                ),
                "a name must differ from container.name",
            ),
            (
                watcher("e3", json!({"container": sidecar, "podAnnotations": {"watcher.dev/inject": "x"}})),
                "outside watcher.dev/",
            ),
            (
                watcher(
                    "e4",
                    json!({"container": sidecar, "volume": {"name": "v", "emptyDir": {}},
                                      "appVolumeMounts": [{"mountPath": "/x", "subPath": "../etc"}]}),
                ),
                "subPath must be a relative path without '..'",
            ),
            (
                json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "e2e-bad-prefix"},
                    "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/alpine:3"}]}}),
                "a prefix (from ending in /) is rewritten to a prefix",
            ),
        ];
        for (manifest, message) in cel {
            let refused = apply(n, &manifest).expect_err("refused");
            assert!(refused.contains(message), "{manifest}: {refused}");
        }
    }
    let samples = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/samples");
    for sample in ["watcher.yaml", "app-watcher.yaml", "app.yaml", "at.yaml", "podset.yaml"] {
        kubectl(&["apply", "--dry-run=server", "-n", n, "-f", &format!("{samples}/{sample}")]);
    }
    kubectl(&["apply", "--dry-run=server", "-f", &format!("{samples}/imagepolicy.yaml")]);
    ns.delete().await;
}

/// A Watcher with `Bad_Name` stored under a CRD without the rule (as before an upgrade): a pod
/// that asks for it is created, without it, and a Warning Event on the Watcher says why, on
/// every version. Its status says so too where kube-apiserver takes a status write of an
/// object its schema now refuses (validation ratcheting of the status subresource, 1.33); before
/// that it refuses it, as 1.24 does.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_stored_invalid_watcher_never_fails_a_pod() {
    let client = client().await;
    let _one = exclusive().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-stored-invalid").await;
    let n = ns.name.as_str();

    // The CRD as an older release had it: no pattern on the container name.
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crd = serde_json::to_value(crds.get("watchers.watcher.dev").await.expect("CRD")).expect("JSON");
    let name = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["container"]
        ["properties"]["name"];
    name.as_object_mut().expect("name schema").retain(|key, _| key == "type" || key == "description");
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("CRD");
    crds.replace("watchers.watcher.dev", &PostParams::default(), &crd).await.expect("older CRD");
    let invalid = watcher("typo", json!({"container": {"name": "Bad_Name", "image": "busybox:1.36"}}));
    common::wait_until(STEP, || async { apply(n, &invalid).is_ok() }).await;
    install_crds(&client).await; // the upgrade: the rule is back, the Watcher stays

    let _operator = Operator::start(n).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "annotations": {"watcher.dev/inject": "typo"}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("pod");
    let created = pods.create(&PostParams::default(), &pod).await.expect("the pod is admitted");
    let containers = created.spec.as_ref().map(|s| {
        s.containers.iter().chain(s.init_containers.iter().flatten()).map(|c| c.name.clone()).collect::<Vec<_>>()
    });
    assert_eq!(containers, Some(vec!["app".to_owned()]), "without the invalid sidecar");

    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), n);
    let note = wait_for(STEP, || async {
        let listed = events.list(&Default::default()).await.ok()?;
        listed.items.into_iter().find_map(|event| {
            let about_it = event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("typo");
            (about_it && event.reason.as_deref() == Some("InvalidSpec") && event.type_.as_deref() == Some("Warning"))
                .then(|| event.note.unwrap_or_default())
        })
    })
    .await;
    assert!(note.contains("spec.container.name"), "{note}");
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    if minor(&client).await >= 33 {
        let reason = wait_for(STEP, || async {
            let watcher = watchers.get("typo").await.ok()?;
            let ready = watcher.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
            (ready.reason == "InvalidSpec").then_some(ready.message)
        })
        .await;
        assert_eq!(reason, note, "the status and the event say the same");
    }
    assert!(watchers.get("typo").await.expect("readable").name_any() == "typo");
    ns.delete().await;
}
