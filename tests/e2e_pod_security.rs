//! e2e: Pod Security on a real kube-apiserver (1.24 has Pod Security admission too): in a
//! `restricted` namespace a plain Watcher with an init container is injected adapted, for a pod
//! non-root at pod level and for one non-root per container only; unlabelled, the sidecar is as
//! written; a privileged Watcher is left out with the warning, its condition set before any pod;
//! `baseline` with a hostPath volume: left out, a plain Watcher beside it injected unchanged; a
//! required Watcher that cannot comply refuses the pod; a pod failing the level by itself is
//! refused by kube-apiserver as without the operator.
//! Run on purpose: `cargo test --test e2e_pod_security -- --ignored`.

mod common;

use std::process::Command;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, wait_for, wait_ready,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use watcher_api::Watcher;

/// `kubectl create` of a pod: whether it was created, and everything kubectl said (warnings too).
fn create(namespace: &str, pod: &Value) -> (bool, String) {
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-psa-pod.json", std::process::id()));
    std::fs::write(&path, pod.to_string()).expect("manifest written");
    let output = Command::new("kubectl")
        .args(["create", "-n", namespace, "-f", path.to_str().expect("UTF-8 path")])
        .output()
        .expect("kubectl runs");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

fn watcher(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name}, "spec": spec})
}

/// A pod asking for `watchers` that passes `restricted` by itself: non-root at pod level, or
/// per container only.
fn app(name: &str, watchers: &str, per_container: bool) -> Value {
    let hardened = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}});
    let mut container = json!({"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"],
                               "securityContext": hardened});
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"watcher.dev/inject": watchers}},
        "spec": {"containers": [], "restartPolicy": "Never"}});
    if per_container {
        for (key, value) in restricted.as_object().expect("object") {
            container["securityContext"][key] = value.clone();
        }
    } else {
        pod["spec"]["securityContext"] = restricted;
    }
    pod["spec"]["containers"] = json!([container]);
    pod
}

fn sidecar<'a>(pod: &'a Pod, name: &str) -> &'a k8s_openapi::api::core::v1::Container {
    let spec = pod.spec.as_ref().expect("spec");
    let all = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    all.into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no container {name}"))
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn the_enforced_level_holds_after_the_patch() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-psa-op").await;
    let restricted = TestNamespace::create(&client, "watcher-e2e-psa-r").await;
    let baseline = TestNamespace::create(&client, "watcher-e2e-psa-b").await;
    let open = TestNamespace::create(&client, "watcher-e2e-psa-open").await;
    let (r, b, o) = (restricted.name.as_str(), baseline.name.as_str(), open.name.as_str());
    kubectl(&["label", "namespace", r, "pod-security.kubernetes.io/enforce=restricted"]);
    kubectl(&["label", "namespace", b, "pod-security.kubernetes.io/enforce=baseline"]);
    let _operator = Operator::start(&operator_ns.name).await;

    let plain = watcher(
        "plain",
        json!({"container": {"name": "plain", "image": "busybox:1.36", "command": ["sleep", "3600"]},
               "initContainers": [{"name": "prepare", "image": "busybox:1.36", "command": ["true"]}]}),
    );
    let privileged = watcher(
        "privileged",
        json!({"container": {"name": "root", "image": "busybox:1.36", "securityContext": {"privileged": true}}}),
    );
    let mut required = privileged.clone();
    required["metadata"]["name"] = json!("required");
    required["spec"]["failurePolicy"] = json!("Fail");
    let host_path = watcher(
        "host-logs",
        json!({"container": {"name": "host-logs", "image": "busybox:1.36"},
               "volume": {"name": "varlog", "hostPath": {"path": "/var/log"}}}),
    );
    for namespace in [r, b, o] {
        for manifest in [&plain, &privileged, &required, &host_path] {
            kubectl_apply(namespace, manifest);
        }
    }

    // Pods are sent to the webhook once the Watchers are Ready (the admission scope covers them).
    for namespace in [r, b, o] {
        let watchers = Api::<Watcher>::namespaced(client.clone(), namespace);
        for name in ["plain", "privileged", "required", "host-logs"] {
            wait_ready(&watchers, name).await;
        }
    }

    // Before any pod: the privileged Watcher's condition says it cannot comply.
    let watchers = Api::<Watcher>::namespaced(client.clone(), r);
    let condition = wait_for(STEP, || async {
        let watcher = watchers.get("privileged").await.ok()?;
        let conditions = watcher.status?.conditions;
        conditions.into_iter().find(|c| c.type_ == "PodSecurity")
    })
    .await;
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "CannotComply"), "{condition:?}");
    assert!(condition.message.contains("privileged (container \"root\""), "{}", condition.message);

    // Restricted: the plain Watcher adapted, for a pod non-root at pod level and per container.
    let pods = Api::<Pod>::namespaced(client.clone(), r);
    for (name, per_container) in [("pod-level", false), ("per-container", true)] {
        let (created, said) = create(r, &app(name, "plain,privileged", per_container));
        assert!(created, "{said}");
        assert!(said.contains("Watcher privileged not injected") && said.contains("violate PodSecurity"), "{said}");
        let pod = pods.get(name).await.expect("pod");
        let context = sidecar(&pod, "plain").security_context.clone().expect("adapted");
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert_eq!(context.capabilities.as_ref().and_then(|c| c.drop.clone()), Some(vec!["ALL".to_owned()]));
        let prepare = sidecar(&pod, "prepare").security_context.clone().expect("the init container adapted");
        assert_eq!(prepare.allow_privilege_escalation, Some(false));
        // Per container only: the pod sets no runAsNonRoot nor seccomp, so the sidecar gets them.
        assert_eq!(context.run_as_non_root.is_some(), per_container, "{context:?}");
        assert_eq!(context.seccomp_profile.is_some(), per_container, "{context:?}");
        let spec = pod.spec.as_ref().expect("spec");
        assert!(spec.containers.iter().chain(spec.init_containers.iter().flatten()).all(|c| c.name != "root"));
    }

    // A required Watcher that cannot comply: the pod refused, naming it.
    let (created, said) = create(r, &app("needs-required", "required", false));
    assert!(!created && said.contains("required") && said.contains("violate PodSecurity"), "{said}");

    // A pod failing the level by itself: kube-apiserver's own refusal.
    let mut failing = app("fails-itself", "plain", false);
    failing["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let (created, said) = create(r, &failing);
    assert!(!created && said.contains("violates PodSecurity \"restricted:latest\""), "{said}");

    // Baseline: the hostPath Watcher left out, the plain one beside it injected unchanged.
    let (created, said) = create(b, &app("logs", "plain,host-logs", false));
    assert!(created && said.contains("Watcher host-logs not injected"), "{said}");
    let pod = Api::<Pod>::namespaced(client.clone(), b).get("logs").await.expect("pod");
    assert_eq!(sidecar(&pod, "plain").security_context, None, "baseline needs nothing set");
    assert!(pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().all(|v| v.name != "varlog"));

    // Unlabelled: the sidecar as written.
    let (created, said) = create(o, &app("open", "plain", false));
    assert!(created, "{said}");
    let pod = Api::<Pod>::namespaced(client.clone(), o).get("open").await.expect("pod");
    assert_eq!(sidecar(&pod, "plain").security_context, None);

    for namespace in [restricted, baseline, open, operator_ns] {
        namespace.delete().await;
    }
}
