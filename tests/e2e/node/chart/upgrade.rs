//! The upgrade a user makes: the last release installed from the registry
//! (`WATCHER_E2E_PREVIOUS`: `.ci/e2e` keeps it there, or builds it from the commit
//! `.ci/last-release` names), with Watchers of every
//! kind and their pods, then `helm upgrade` to this build's release and `helm rollback` to the
//! one before: no pod re-created, restarted or written by the operator, every status as it was,
//! every pod made meanwhile injected. Between the two, a configuration change replaces the pod
//! of a `Recreate` Watcher that the release before injected, as it does any sidecar's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{injected_on_a_dry_run, rollout};
use crate::common::{
    STEP, TestNamespace, client, delete_cluster_wide_objects, exclusive, kubectl, kubectl_apply, wait_until,
};
use crate::helm::{Release, helm, helm_install_from};
use crate::node::{POD_START, require_node};
use watcher_api::annotation;

/// What an upgrade must leave as it was, per pod: its uid, its containers' restarts, its
/// `watcher.dev/` annotations and labels, its images, and when the operator last wrote it.
fn pod_state(pod: &Pod) -> Value {
    let prefix = format!("{}/", watcher_api::GROUP);
    let ours = |map: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        map.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let status = pod.status.clone().unwrap_or_default();
    let statuses = status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
    let restarts: i32 = statuses.map(|s| s.restart_count).sum();
    let spec = pod.spec.clone().unwrap_or_default();
    let images: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.image.clone().unwrap_or_default())
        .collect();
    let written_by_operator: Vec<String> = pod
        .managed_fields()
        .iter()
        .filter(|f| f.manager.as_deref() == Some(watcher_api::FIELD_MANAGER))
        .filter_map(|f| f.time.as_ref().map(|t| format!("{:?} {}", f.operation, t.0)))
        .collect();
    json!({
        "uid": pod.metadata.uid, "restarts": restarts, "annotations": ours(pod.annotations()),
        "labels": ours(pod.labels()), "images": images, "operatorWrites": written_by_operator,
    })
}

/// The namespace's pods and the statuses of its resources (and of the ClusterWatcher).
async fn state(client: &kube::Client, namespace: &str) -> Value {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace).list(&ListParams::default()).await.expect("pods");
    let pods: BTreeMap<String, Value> = pods.items.iter().map(|p| (p.name_any(), pod_state(p))).collect();
    let status = |kind: &str, scope: &[&str]| -> Value {
        let mut args = vec!["get", kind, "-o", "json"];
        args.extend(scope);
        let listed: Value = serde_json::from_str(&kubectl(&args)).expect("json");
        let items = listed["items"].as_array().cloned().unwrap_or_default();
        let by_name =
            items.iter().map(|i| (i["metadata"]["name"].as_str().unwrap_or_default().to_owned(), i["status"].clone()));
        let mut statuses: BTreeMap<String, Value> = by_name.collect();
        // When a condition last moved says nothing of the state.
        for status in statuses.values_mut() {
            for condition in status["conditions"].as_array_mut().into_iter().flatten() {
                condition.as_object_mut().map(|c| c.remove("lastTransitionTime"));
            }
        }
        json!(statuses)
    };
    json!({
        "pods": pods,
        "watchers": status("watchers.watcher.dev", &["-n", namespace]),
        "podsets": status("podsets.watcher.dev", &["-n", namespace]),
        "ats": status("ats.watcher.dev", &["-n", namespace]),
        "clusterWatchers": status("clusterwatchers.watcher.dev", &[]),
    })
}

/// Watchers of every kind with their pods, as a user has them before an upgrade: an `InPlace`
/// Watcher (the release's agent) over README's app, a canary rollout held by its partition, a
/// `Recreate` Watcher with config data over a Deployment, a ClusterWatcher, an ImagePolicy, an At
/// that ran and a PodSet.
async fn workloads(client: &kube::Client, n: &str, agent: &str) {
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    let sleeper = |name: &str, app: &str, image: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
               "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "app", "image": image,
                 "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", "sleep 3600"], "securityContext": restricted}]}})
    };
    kubectl(&["label", "namespace", n, "upgrade-e2e=yes", "--overwrite"]);
    let watcher = |name: &str, app: &str, image: &str, policy: Value| -> Value {
        json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name},
               "spec": {"selector": {"matchLabels": {"app": app}}, "updatePolicy": policy,
                 "container": {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                   "command": ["sh", "-c", "sleep 3600"], "securityContext": restricted}}})
    };
    // README's app and its Watcher, the release's agent, updated in place.
    let sample = std::fs::read_to_string(format!("{}/app-watcher.yaml", crate::node::SAMPLES)).expect("sample");
    let local = format!("    image: watcher-agent:{}\n", env!("CARGO_PKG_VERSION"));
    assert!(sample.contains(&local) && sample.contains("\nspec:\n"), "the sample's shape");
    let sample = sample
        .replace(&local, &format!("    image: {agent}\n"))
        .replace("\nspec:\n", "\nspec:\n  updatePolicy:\n    type: InPlace\n");
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-upgrade-app-watcher.yaml", std::process::id()));
    std::fs::write(&path, sample).expect("written");
    crate::node::readme_use_case_with(n, &path.display().to_string());
    kubectl_apply(n, &watcher("held", "held", "busybox:1.36", json!({"type": "InPlace", "partition": 2})));
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher", "metadata": {"name": "upgrade-e2e"},
                "spec": {"namespaceSelector": {"matchLabels": {"upgrade-e2e": "yes"}}, "selector": {"matchLabels": {"app": "cw"}},
                  "container": {"name": "cw", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"], "securityContext": restricted}}}),
    );
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "upgrade-e2e"},
                "spec": {"namespaceSelector": {"matchLabels": {"upgrade-e2e": "yes"}},
                  "rewrites": [{"from": "e2e-looper:0.1.0", "to": "docker.io/library/e2e-looper:0.1.0"}]}}),
    );
    // A plain sidecar with config data under Recreate, over a Deployment's pod: 0.2.0 put no
    // configuration's hash on its pods, and the upgrade replaces none of them.
    let mut configured = watcher("configured", "configured", "busybox:1.36", json!({"type": "Recreate"}));
    configured["spec"]["configData"] = json!({"LEVEL": "info"});
    kubectl_apply(n, &configured);
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "watcher/configured", "--timeout=60s"]);
    let mut template = sleeper("configured", "configured", "busybox:1.36");
    template.as_object_mut().map(|t| t.remove("apiVersion").and(t.remove("kind")));
    template["metadata"].as_object_mut().map(|m| m.remove("name"));
    kubectl_apply(
        n,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "configured"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "configured"}}, "template": template}}),
    );
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "watcher/held", "--timeout=60s"]);
    for (name, app, image) in [
        ("held-1", "held", "busybox:1.36"),
        ("held-2", "held", "busybox:1.36"),
        ("cw", "cw", "busybox:1.36"),
        ("looper", "mirrored", "e2e-looper:0.1.0"),
    ] {
        kubectl_apply(n, &sleeper(name, app, image));
    }
    // The canary: a new sidecar image that the partition holds from both pods.
    kubectl(&[
        "patch",
        "watcher",
        "held",
        "-n",
        n,
        "--type=merge",
        "-p",
        r#"{"spec":{"container":{"image":"docker.io/library/busybox:1.36"}}}"#,
    ]);
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "greeters"},
                             "spec": {"count": 2, "message": "hello"}}),
    );
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": "once"},
                             "spec": {"schedule": crate::common::rfc3339(0), "command": "echo once", "ttlSecondsAfterFinished": 3600}}),
    );
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "pod/held-1", "pod/held-2", "pod/cw", "pod/looper", &wait]);
    kubectl(&["wait", "-n", n, "--for=jsonpath={.status.phase}=Succeeded", "at/once", &wait]);
    kubectl(&["rollout", "status", "-n", n, "deployment/configured", &wait]);
    kubectl(&["wait", "-n", n, "--for=jsonpath={.status.readyCount}=2", "podset/greeters", &wait]);
    // Steady: the held rollout counted, nothing left to write.
    let watchers = Api::<watcher_api::Watcher>::namespaced(client.clone(), n);
    wait_until(STEP, || async {
        let held = watchers.get("held").await.ok().and_then(|w| w.status);
        held.is_some_and(|s| s.current_revision.is_some() && s.current_revision != s.stable_revision)
    })
    .await;
}

/// The configuration of the `Recreate` Watcher changes after the upgrade: its Deployment's pod,
/// injected by the release before (no configuration's hash), now runs an older configuration and
/// is replaced, as any sidecar's pod is; the new one carries the hash and the Watcher records the
/// generation its ConfigMap holds. Returns the state once that is done.
async fn configuration_changed(client: &kube::Client, n: &str) -> Value {
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let configured = ListParams::default().labels("app=configured");
    let carried =
        |pod: &Pod| annotation::InjectedConfig::read(pod.annotations()).iter().any(|(n, _)| *n == "configured");
    let listed = pods.list(&configured).await.expect("pods").items;
    assert!(listed.len() == 1 && !carried(&listed[0]), "the release before's pod, with no configuration's hash");
    let before = listed[0].metadata.uid.clone().expect("a uid");
    kubectl(&[
        "patch",
        "watcher",
        "configured",
        "-n",
        n,
        "--type=merge",
        "-p",
        r#"{"spec":{"configData":{"LEVEL":"debug"}}}"#,
    ]);
    let watchers = Api::<watcher_api::Watcher>::namespaced(client.clone(), n);
    wait_until(POD_START * 3, || async {
        let listed = pods.list(&configured).await.map(|l| l.items).unwrap_or_default();
        let live: Vec<&Pod> = listed.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let replaced =
            live.len() == 1 && live.iter().all(|p| p.metadata.uid.as_ref().is_some_and(|u| *u != before) && carried(p));
        let ready = live.iter().all(|p| {
            let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        let status = watchers.get("configured").await.ok().and_then(|w| w.status);
        let counted = status.is_some_and(|s| {
            s.config_generation.is_some() && s.pods.is_some_and(|p| p.injected == 1 && p.up_to_date == 1)
        });
        replaced && ready && counted
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    state(client, n).await
}

/// The Lease is held by one of the operator's pods that run now (the upgraded Deployment's),
/// and it has had time to reconcile everything once.
async fn new_leader_settled(client: &kube::Client, release_ns: &str) {
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), release_ns);
    let pods = Api::<Pod>::namespaced(client.clone(), release_ns);
    wait_until(std::time::Duration::from_secs(90), || async {
        let holder = leases.get_opt("watcher-operator").await.ok().flatten().and_then(|l| l.spec?.holder_identity);
        let listed = pods.list(&ListParams::default().labels("app.kubernetes.io/name=watcher-operator")).await;
        let running: Vec<String> = listed
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        holder.is_some_and(|h| running.contains(&h))
    })
    .await;
    // Its caches synced and a first pass over every resource: a second or two, on this node.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
}

/// `helm upgrade` (or rollback) with `args`, every pod created meanwhile injected.
async fn while_pods_are_made(client: &kube::Client, release_ns: &str, n: &str, args: &[&str]) {
    helm(args);
    let mut rolling = std::process::Command::new("kubectl")
        .args(["rollout", "status", "deployment/watcher-operator", "-n", release_ns, "--timeout=180s"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("kubectl rollout status");
    let mut made = 0;
    while rolling.try_wait().expect("rollout status").is_none() {
        assert!(
            injected_on_a_dry_run(client, n, "app-watcher").await,
            "pod {made} during `helm {}` was injected",
            args[0]
        );
        made += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(rolling.wait().expect("rollout status").success(), "`helm {}` rolled out", args[0]);
    assert!(made >= 2, "{made} pods made during `helm {}`", args[0]);
}

#[tokio::test]
#[ignore = "needs a cluster with a node, Services routed, and two releases in a registry: WATCHER_E2E_REGISTRY, WATCHER_E2E_PREVIOUS"]
async fn an_upgrade_from_the_last_release_and_a_rollback_leave_every_pod_as_it_was() {
    let _one = exclusive().await;
    let (Some(release), Some(previous)) = (Release::from_env(), Release::previous_from_env()) else {
        eprintln!("upgrade: no last release in the registry (WATCHER_E2E_PREVIOUS): not tested");
        return;
    };
    let client = client().await;
    require_node(&client).await;
    delete_cluster_wide_objects();
    let _cluster_scoped = ClusterScoped;
    let release_ns = TestNamespace::create(&client, "watcher-e2e-upgrade").await;
    let r = release_ns.name.as_str();
    let install = previous.install_args();
    let args: Vec<&str> = install.iter().map(String::as_str).collect();
    helm_install_from(&client, r, &previous.chart(), &args).await;
    rollout(r);
    let notes = helm(&["get", "notes", "watcher-operator", "-n", r]);
    let agent =
        notes.lines().find_map(|l| l.trim().strip_prefix("image: ")).expect("the notes name the agent").to_owned();
    let ns = TestNamespace::create(&client, "watcher-e2e-upgrade-app").await;
    let n = ns.name.as_str();
    workloads(&client, n, &agent).await;
    let before = state(&client, n).await;

    let upgrade = release.install_args();
    // The values the user set, on the new chart's defaults (`--reuse-values` would keep the old
    // chart's: its images).
    let mut args = vec!["upgrade", "watcher-operator", "-n", r, "--reset-then-reuse-values"];
    let chart = release.chart();
    args.insert(2, &chart);
    args.extend(upgrade.iter().map(String::as_str));
    while_pods_are_made(&client, r, n, &args).await;
    let image = kubectl(&[
        "get",
        "deployment",
        "watcher-operator",
        "-n",
        r,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert!(image.starts_with(&format!("{}/watcher-operator:", release.registry)), "upgraded to this build: {image}");
    // The new release has reconciled everything and found nothing to write.
    new_leader_settled(&client, r).await;
    assert_eq!(state(&client, n).await, before, "helm upgrade changed what it did not need to");
    let changed = configuration_changed(&client, n).await;

    while_pods_are_made(&client, r, n, &["rollback", "watcher-operator", "1", "-n", r]).await;
    new_leader_settled(&client, r).await;
    assert_eq!(state(&client, n).await, changed, "helm rollback changed what it did not need to");

    helm(&["uninstall", "watcher-operator", "-n", r, "--wait"]);
    ns.delete().await;
    release_ns.delete().await;
    delete_cluster_wide_objects();
}

/// The test's ClusterWatcher and ImagePolicy, deleted however the test ends: the tests after it
/// on the same control plane list every object of the category.
struct ClusterScoped;

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        for kind in ["clusterwatcher", "imagepolicy"] {
            let _ = crate::common::try_kubectl(&["delete", kind, "upgrade-e2e", "--ignore-not-found", "--wait=false"]);
        }
    }
}
