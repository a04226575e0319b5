//! e2e: the namespace's ResourceQuotas and LimitRanges on a real kube-apiserver (kube-controller-
//! manager counting quotas, as `../shared/k8s/cluster-up` runs it): a Watcher that states nothing
//! is given what a quota counts; one outside a LimitRange's bounds is brought within; one that
//! does not fit in what is left of a quota is left out, the pod admitted and the Watcher saying
//! why, or, required, the pod refused with the quota's words. At and PodSet run their pods under
//! a quota and `restricted`, say why when kube-apiserver refuses them, and run once the quota is
//! raised. Run on purpose: `cargo test --test e2e resources:: -- --ignored`.
use std::process::Command;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceQuota};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use watcher_api::{At, PodSet, Watcher};

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, rfc3339, wait_for,
    wait_ready,
};

/// `kubectl create` of a pod: whether it was created, and everything kubectl said.
fn create(namespace: &str, pod: &Value) -> (bool, String) {
    common::kubectl_create(namespace, pod)
}

fn watcher(name: &str, container: Value, required: bool) -> Value {
    let mut spec = json!({"container": container});
    if required {
        spec["failurePolicy"] = json!("Fail");
    }
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name}, "spec": spec})
}

fn busybox(name: &str, resources: Option<Value>) -> Value {
    let mut container = json!({"name": name, "image": "busybox:1.36", "command": ["sleep", "3600"]});
    if let Some(resources) = resources {
        container["resources"] = resources;
    }
    container
}

/// A pod asking for `watchers` whose app states `cpu` as request and limit (64Mi of memory).
fn app(name: &str, watchers: &str, cpu: &str) -> Value {
    let resources = json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}});
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"watcher.dev/inject": watchers}},
        "spec": {"containers": [busybox("app", Some(resources))]}})
}

fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

fn quantity(container: &Container, list: &str, resource: &str) -> Option<String> {
    let resources = container.resources.as_ref()?;
    let values = if list == "limits" { resources.limits.as_ref() } else { resources.requests.as_ref() };
    values?.get(resource).map(|q| q.0.clone())
}

/// The quota `team` of `namespace`, once kube-controller-manager has counted it (kube-apiserver
/// refuses every pod of a namespace whose quota it has not).
async fn quota(client: &kube::Client, namespace: &str, hard: Value) {
    let api = Api::<ResourceQuota>::namespaced(client.clone(), namespace);
    let quota =
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team"}, "spec": {"hard": hard}});
    api.patch("team", &PatchParams::apply("watcher-e2e").force(), &Patch::Apply(&quota)).await.expect("quota");
    wait_for(STEP, || async {
        let status = api.get("team").await.ok()?.status?;
        let counted = serde_json::to_value(status.hard?).ok()? == hard;
        counted.then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn watchers_fit_the_namespaces_quota_and_limit_range() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-rr-op").await;
    let quota_ns = TestNamespace::create(&client, "watcher-e2e-rr-q").await;
    let range_ns = TestNamespace::create(&client, "watcher-e2e-rr-lr").await;
    let (q, l) = (quota_ns.name.as_str(), range_ns.name.as_str());
    quota(
        &client,
        q,
        json!({"requests.cpu": "2", "requests.memory": "2Gi", "limits.cpu": "500m", "limits.memory": "2Gi"}),
    )
    .await;
    let range = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds"},
        "spec": {"limits": [{"type": "Container", "min": {"cpu": "50m", "memory": "32Mi"},
            "max": {"cpu": "500m", "memory": "512Mi"}, "maxLimitRequestRatio": {"cpu": "4"},
            "default": {"cpu": "100m", "memory": "64Mi"}, "defaultRequest": {"cpu": "50m", "memory": "32Mi"}}]}});
    kubectl_apply(l, &range);
    let _operator = Operator::start(&operator_ns.name).await;

    let big = json!({"requests": {"cpu": "400m", "memory": "32Mi"}, "limits": {"cpu": "400m", "memory": "32Mi"}});
    kubectl_apply(q, &watcher("plain", busybox("tail", None), false));
    kubectl_apply(q, &watcher("big", busybox("big", Some(big.clone())), false));
    kubectl_apply(q, &watcher("big-required", busybox("big-required", Some(big)), true));
    let small = json!({"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}});
    kubectl_apply(l, &watcher("small", busybox("small", Some(small)), false));
    kubectl_apply(l, &watcher("large", busybox("large", Some(json!({"limits": {"cpu": "1"}}))), false));
    for (namespace, names) in [(q, &["plain", "big", "big-required"][..]), (l, &["small", "large"][..])] {
        let watchers = Api::<Watcher>::namespaced(client.clone(), namespace);
        for name in names {
            wait_ready(&watchers, name).await;
        }
    }

    // check-inject names the quota, before any pod.
    let manifest = std::env::temp_dir().join(format!("watcher-e2e-{}-rr-check.json", std::process::id()));
    std::fs::write(&manifest, app("planned", "plain,big", "200m").to_string()).expect("written");
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["check-inject", "-f", manifest.to_str().expect("UTF-8"), "-n", q, "--operator-namespace"])
        .arg(&operator_ns.name)
        .output()
        .expect("check-inject runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("× big: not injected (Resources)"), "{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("container tail gets"), "{text}");

    // No room for the app and the sidecar: the app admitted alone, the Watcher says why.
    let (created, said) = create(q, &app("roomless", "big", "200m"));
    assert!(created, "{said}");
    assert!(said.contains("Watcher big not injected") && said.contains("exceeded quota: team"), "{said}");
    let pods = Api::<Pod>::namespaced(client.clone(), q);
    assert!(container(&pods.get("roomless").await.expect("pod"), "big").is_none());
    let watchers = Api::<Watcher>::namespaced(client.clone(), q);
    let condition = wait_for(STEP, || async {
        let conditions = watchers.get("big").await.ok()?.status?.conditions;
        conditions.into_iter().find(|c| c.type_ == "Injected" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "LeftOut");
    assert!(
        condition.message.contains("pod roomless") && condition.message.contains("exceeded quota: team"),
        "{condition:?}"
    );

    // Stating nothing where the quota counts cpu and memory: given the documented defaults.
    let (created, said) = create(q, &app("fits", "plain", "100m"));
    assert!(created, "{said}");
    let pod = pods.get("fits").await.expect("pod");
    let tail = container(&pod, "tail").expect("the sidecar");
    assert_eq!(quantity(tail, "requests", "cpu").as_deref(), Some("10m"));
    assert_eq!(quantity(tail, "limits", "memory").as_deref(), Some("64Mi"));

    // Required, and no room: kube-apiserver refuses the pod with the quota named.
    let (created, said) = create(q, &app("required", "big-required", "100m"));
    assert!(!created, "{said}");
    assert!(said.contains("big-required is required") && said.contains("exceeded quota: team"), "{said}");

    // Outside the LimitRange's bounds: brought within, both Watchers injected.
    let (created, said) = create(l, &app("bounded", "small,large", "100m"));
    assert!(created, "{said}");
    let pod = Api::<Pod>::namespaced(client.clone(), l).get("bounded").await.expect("pod");
    let small = container(&pod, "small").expect("small injected");
    assert_eq!(quantity(small, "requests", "cpu").as_deref(), Some("50m"), "up to min");
    assert_eq!(quantity(small, "requests", "memory").as_deref(), Some("32Mi"), "up to min");
    let large = container(&pod, "large").expect("large injected");
    assert_eq!(quantity(large, "limits", "cpu").as_deref(), Some("500m"), "down to max");
    assert_eq!(quantity(large, "requests", "cpu").as_deref(), Some("500m"), "the request, its limit, down to max");

    for namespace in [quota_ns, range_ns, operator_ns] {
        namespace.delete().await;
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn at_and_podset_run_under_a_quota_and_restricted_or_say_why() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-rr-at").await;
    let n = ns.name.as_str();
    kubectl(&["label", "namespace", n, "pod-security.kubernetes.io/enforce=restricted"]);
    quota(
        &client,
        n,
        json!({"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "50m", "limits.memory": "1Gi"}),
    )
    .await;
    let _operator = Operator::start(n).await;
    let ats = Api::<At>::namespaced(client.clone(), n);
    let podsets = Api::<PodSet>::namespaced(client.clone(), n);
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let sized = json!({"requests": {"cpu": "20m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}});
    let at = |name: &str, resources: Option<&Value>| -> At {
        let mut at = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": name},
            "spec": {"schedule": rfc3339(-5), "command": "echo hello"}});
        if let Some(resources) = resources {
            at["spec"]["resources"] = resources.clone();
        }
        serde_json::from_value(at).expect("At")
    };
    ats.create(&PostParams::default(), &at("bare", None)).await.expect("created");
    ats.create(&PostParams::default(), &at("sized", Some(&sized))).await.expect("created");
    let podset: PodSet = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "greeters"}, "spec": {"count": 1, "message": "hello"}}))
    .expect("PodSet");
    podsets.create(&PostParams::default(), &podset).await.expect("created");

    // Refused: said within seconds, in kube-apiserver's words, no time promised.
    let refused = |name: &'static str| {
        let ats = ats.clone();
        async move {
            wait_for(std::time::Duration::from_secs(10), || async {
                let status = ats.get(name).await.ok()?.status?;
                (status.reason.as_deref() == Some("PodRefused")).then_some(status)
            })
            .await
        }
    };
    let bare = refused("bare").await;
    assert!(bare.message.as_deref().is_some_and(|m| m.contains("must specify")), "{bare:?}");
    let sized_status = refused("sized").await;
    assert!(sized_status.message.as_deref().is_some_and(|m| m.contains("exceeded quota: team")), "{sized_status:?}");
    assert!(kubectl(&["get", "at", "bare", "-n", n]).contains("PodRefused"));
    let ready = wait_for(std::time::Duration::from_secs(10), || async {
        let conditions = podsets.get("greeters").await.ok()?.status?.conditions;
        conditions.into_iter().find(|c| c.type_ == "Ready" && c.reason == "PodRefused")
    })
    .await;
    assert!(ready.message.contains("must specify"), "{ready:?}");

    // The quota raised: the sized At's pod is created with no other step, `restricted` as
    // written (kube-apiserver's Pod Security let it in).
    quota(
        &client,
        n,
        json!({"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "1", "limits.memory": "1Gi"}),
    )
    .await;
    let pod = wait_for(STEP, || async { pods.get_opt("sized-at").await.ok().flatten() }).await;
    let context = pod.spec.as_ref().expect("spec").containers[0].security_context.clone().expect("context");
    assert_eq!(context.run_as_non_root, Some(true));
    // The PodSet given resources: its pod is created.
    let patch = json!({"spec": {"resources": sized}});
    podsets.patch("greeters", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patched");
    wait_for(STEP, || async {
        let list = pods.list(&kube::api::ListParams::default().labels("watcher.dev/podset=greeters")).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;

    ns.delete().await;
}
