//! e2e: Pod Security on a real kube-apiserver (1.24 has Pod Security admission too): in a
//! `restricted` namespace a plain Watcher with an init container is injected adapted, for a pod
//! non-root at pod level and for one non-root per container only; unlabelled, the sidecar is as
//! written; a privileged Watcher is left out with the warning, its condition set before any pod;
//! `baseline` with a hostPath volume: left out, a plain Watcher beside it injected unchanged; a
//! required Watcher that cannot comply refuses the pod; a pod failing the level by itself is
//! refused by kube-apiserver as without the operator.
//! Run on purpose: `cargo test --test e2e pod_security:: -- --ignored`.
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use watcher_api::Watcher;

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, wait_for, wait_ready,
};

/// `kubectl create` of a pod: whether it was created, and everything kubectl said.
fn create(namespace: &str, pod: &Value) -> (bool, String) {
    common::kubectl_create(namespace, pod)
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

/// What kube-apiserver changes before Pod Security judges the pod, and what the kubelet later
/// refuses, on the server in use: a pod hardened by its seccomp annotation (a field to 1.19 -
/// 1.26, nothing from 1.27); a namespace pinned to `v1.22` (no `runAsUser` check) with a
/// Watcher asking for root where non-root is required; a user-namespaced pod whose user is 0
/// (1.35+ waives `runAsNonRoot`); a Watcher that only adds a capability.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn the_pod_is_judged_as_the_server_prepares_it() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let minor = common::minor(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-psp-op").await;
    let latest = TestNamespace::create(&client, "watcher-e2e-psp-r").await;
    let pinned = TestNamespace::create(&client, "watcher-e2e-psp-v122").await;
    let (r, v) = (latest.name.as_str(), pinned.name.as_str());
    kubectl(&["label", "namespace", r, "pod-security.kubernetes.io/enforce=restricted"]);
    kubectl(&["label", "namespace", v, "pod-security.kubernetes.io/enforce=restricted"]);
    kubectl(&["label", "namespace", v, "pod-security.kubernetes.io/enforce-version=v1.22"]);
    let _operator = Operator::start(&operator_ns.name).await;
    let plain = watcher(
        "plain",
        json!({"container": {"name": "plain", "image": "busybox:1.36", "command": ["sleep", "3600"]}}),
    );
    let root = watcher(
        "root",
        json!({"container": {"name": "root", "image": "busybox:1.36", "securityContext": {"runAsUser": 0}}}),
    );
    let binding = watcher(
        "binding",
        json!({"container": {"name": "binding", "image": "busybox:1.36",
               "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"add": ["NET_BIND_SERVICE"]}}}}),
    );
    for namespace in [r, v] {
        for manifest in [&plain, &root, &binding] {
            kubectl_apply(namespace, manifest);
        }
        let watchers = Api::<Watcher>::namespaced(client.clone(), namespace);
        for name in ["plain", "root", "binding"] {
            wait_ready(&watchers, name).await;
        }
    }
    let hardened = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 65534});
    let pod = |name: &str, watchers: &str, annotations: Value, context: Value| {
        let mut annotations = annotations;
        annotations["watcher.dev/inject"] = json!(watchers);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
               "spec": {"securityContext": context, "restartPolicy": "Never",
                        "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                        "securityContext": hardened.clone()}]}})
    };
    let pods = Api::<Pod>::namespaced(client.clone(), r);

    // Hardened by the seccomp annotation: on 1.19 to 1.26 the pod passes by itself and the
    // plain Watcher is adapted (a user, no seccomp of its own: the pod's annotation is the
    // pod's field to the server); from 1.27 the annotation is nothing and the pod fails by itself.
    let annotated = pod(
        "annotated",
        "plain",
        json!({"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}),
        json!({"runAsNonRoot": true}),
    );
    let (created, said) = create(r, &annotated);
    if (19..=26).contains(&minor) {
        assert!(created, "{said}");
        let context =
            sidecar(&pods.get("annotated").await.expect("pod"), "plain").security_context.clone().expect("adapted");
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert_eq!(context.run_as_user, Some(watcher_api::ADAPTED_RUN_AS_USER), "{context:?}");
        assert_eq!(context.seccomp_profile, None, "{context:?}");
    } else {
        // Refused as without the operator (a pod failing by itself changes no decision).
        assert!(
            !created && said.contains("violates PodSecurity \"restricted:latest\"") && said.contains("seccompProfile"),
            "{said}"
        );
    }

    // Root where non-root is required, under v1.22 (which checks no runAsUser): the server would
    // admit it and the kubelet never start it, so it is left out, saying why.
    let seccomp = json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    let (created, said) = create(v, &pod("pinned", "root,plain", json!({}), seccomp.clone()));
    assert!(created, "{said}");
    assert!(said.contains("Watcher root not injected") && said.contains("the kubelet would not start it"), "{said}");
    let stored = Api::<Pod>::namespaced(client.clone(), v).get("pinned").await.expect("pod");
    let spec = stored.spec.as_ref().expect("spec");
    assert!(spec.containers.iter().chain(spec.init_containers.iter().flatten()).all(|c| c.name != "root"));
    assert_eq!(sidecar(&stored, "plain").security_context.as_ref().and_then(|c| c.run_as_user), Some(65532));

    // Capabilities that only add: `drop: [ALL]` beside them, injected.
    let (created, said) = create(r, &pod("binding", "binding", json!({}), seccomp.clone()));
    assert!(created && !said.contains("not injected"), "{said}");
    let context =
        sidecar(&pods.get("binding").await.expect("pod"), "binding").security_context.clone().expect("context");
    let capabilities = context.capabilities.expect("capabilities");
    assert_eq!(
        (capabilities.add, capabilities.drop),
        (Some(vec!["NET_BIND_SERVICE".into()]), Some(vec!["ALL".into()]))
    );

    // A user-namespaced pod whose user is 0 (1.35+ waives runAsNonRoot and runAsUser for it):
    // the sidecar is not made to run as non-root (it would inherit uid 0 and never start).
    if minor >= 35 {
        let mut userns =
            pod("userns", "plain", json!({}), json!({"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}));
        userns["spec"]["hostUsers"] = json!(false);
        userns["spec"]["containers"][0]["securityContext"] =
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
        let (created, said) = create(r, &userns);
        assert!(created, "{said}");
        let context =
            sidecar(&pods.get("userns").await.expect("pod"), "plain").security_context.clone().expect("adapted");
        assert_eq!((context.run_as_non_root, context.run_as_user), (None, None), "{context:?}");
        assert_eq!(context.allow_privilege_escalation, Some(false));
    }
}

/// What kube-apiserver enforces where a namespace sets no level is learned from dry-run pods;
/// here, in namespaces that do set levels, the same probes read the real server's words: the
/// enforced level and version from a refusal, the level warned about from a warning.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn the_pod_security_defaults_are_read_from_the_servers_answers() {
    use watcher_controller::pod_security_probe::probe;
    let _one = exclusive().await;
    let client = client().await;
    let baseline = TestNamespace::create(&client, "watcher-e2e-psd-b").await;
    let restricted = TestNamespace::create(&client, "watcher-e2e-psd-r").await;
    let open = TestNamespace::create(&client, "watcher-e2e-psd-open").await;
    let b = baseline.name.as_str();
    kubectl(&["label", "namespace", b, "pod-security.kubernetes.io/enforce=baseline"]);
    kubectl(&["label", "namespace", b, "pod-security.kubernetes.io/enforce-version=v1.23"]);
    kubectl(&["label", "namespace", b, "pod-security.kubernetes.io/warn=restricted"]);
    kubectl(&["label", "namespace", &restricted.name, "pod-security.kubernetes.io/enforce=restricted"]);
    let seen = |learned: watcher_controller::pod_security_probe::Learned| {
        learned.defaults.defaults.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>()
    };
    let learned = probe(&client, b).await.expect("learned");
    assert_eq!(seen(learned), ["enforce=baseline", "enforce-version=v1.23", "warn=restricted", "warn-version=latest"]);
    let learned = probe(&client, &restricted.name).await.expect("learned");
    assert_eq!(seen(learned), ["enforce=restricted", "enforce-version=latest"]);
    let learned = probe(&client, &open.name).await.expect("learned");
    assert_eq!(seen(learned), ["enforce=privileged"], "this control plane has no defaults");
    // Nothing was stored.
    let pods = kubectl(&["get", "pods", "-n", b, "-o", "name"]);
    assert!(pods.trim().is_empty(), "{pods}");
}
