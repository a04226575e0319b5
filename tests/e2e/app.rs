//! e2e: the sidecar sees the app, on a real kube-apiserver. The samples of README's "Watching
//! the app" applied with `kubectl` as a user would, and every other option on pods created the
//! same way; what kube-apiserver stores is read back (the ServiceAccount plugin's token mount
//! included). No kubelet: nothing runs, the pods as stored are what is checked.
//! Run on purpose: `cargo test --test e2e app:: -- --ignored`.
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;
use watcher_api::{SERVICE_ACCOUNT_PATH, Watcher};

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl, kubectl_apply, wait_for, wait_ready,
};

/// Container `name` of the pod, wherever the webhook put it (a native sidecar from 1.29).
fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

/// Creates `pod` once a server dry run of it comes back injected with `watcher`.
async fn create_injected(pods: &Api<Pod>, pod: &Pod, watcher: &str) -> Pod {
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let prefix = format!("{watcher}@");
    wait_for(STEP, || async {
        let created = pods.create(&dry_run, pod).await.ok()?;
        let injected = created.annotations().get("watcher.dev/injected")?;
        injected.split(',').any(|e| e.starts_with(&prefix)).then_some(())
    })
    .await;
    pods.create(&PostParams::default(), pod).await.expect("pod created")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn the_sidecar_sees_the_app() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-app").await;
    let _operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    let pods = Api::<Pod>::namespaced(client.clone(), n);

    // README's example, as README applies it.
    let samples = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/samples");
    kubectl(&["apply", "-n", n, "-f", &format!("{samples}/app-watcher.yaml")]);
    wait_ready(&watchers, "app-watcher").await;
    let sample: Pod =
        serde_saphyr::from_str(&std::fs::read_to_string(format!("{samples}/app.yaml")).expect("sample")).expect("Pod");
    let shop = create_injected(&pods, &sample, "app-watcher").await;
    let sidecar = container(&shop, "app-watcher").expect("the sidecar");
    let mounts: Vec<(&str, &str, Option<bool>)> = sidecar
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .filter(|(_, path, _)| *path != SERVICE_ACCOUNT_PATH)
        .collect();
    assert_eq!(
        mounts,
        [
            ("watcher-agent-state", "/var/lib/watcher-agent", None),
            ("logs", "/var/log/app", Some(true)),
            ("app-watcher-config", "/etc/watcher-agent/config", Some(true)),
        ],
        "its checkpoints' volume, the app's log volume read-only, and its configuration as files"
    );
    let env: Vec<&str> = sidecar.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(env, ["POD_NAME", "POD_NAMESPACE", "POD_UID"], "the pod's identity, for the agent's Events");
    assert_eq!(shop.annotations().get("prometheus.io/scrape").map(String::as_str), Some("true"));
    assert_eq!(shop.annotations().get("prometheus.io/port").map(String::as_str), Some("9102"));
    // kube-apiserver's own token mount, once in every container: the webhook never copied it.
    for c in shop.spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())) {
        let tokens = c.volume_mounts.iter().flatten().filter(|m| m.mount_path == SERVICE_ACCOUNT_PATH).count();
        assert!(tokens <= 1, "{}: {tokens} token mounts", c.name);
    }
    // check-inject says what the sidecar sees, from the pod as stored.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["check-inject", "shop", "-n", n, "-o", "json"])
        .output()
        .expect("binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let explained: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let line =
        explained["watchers"].as_array().into_iter().flatten().find(|w| w["name"] == "app-watcher").expect("line");
    let sees: Vec<&str> = line["sees"].as_array().into_iter().flatten().filter_map(|s| s.as_str()).collect();
    assert!(sees.contains(&"shares /var/log/app of app (read-only)"), "{sees:?}");

    // Every other option, on a pod created with kubectl as a user would.
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "all-options"},
            "spec": {"selector": {"matchLabels": {"watch": "all"}},
                     "container": {"name": "all-options", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                   "resources": {"limits": {"memory": "64Mi"}}},
                     "volume": {"name": "watch-state", "emptyDir": {}},
                     "appVolumeMounts": [{"mountPath": "/var/watch"}, {"mountPath": "/data"}],
                     "appContainers": ["app"],
                     "transferEnv": [{"names": ["MEMORY", "MISSING"]}],
                     "shareProcessNamespace": true,
                     "initContainers": [{"name": "prepare-watch", "image": "busybox:1.36", "command": ["true"]}]}}),
    );
    wait_ready(&watchers, "all-options").await;
    let app: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "all", "labels": {"watch": "all"}},
        "spec": {"restartPolicy": "Never", "initContainers": [{"name": "setup", "image": "busybox:1.36", "command": ["true"]}],
                 "containers": [
                     {"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"],
                      "resources": {"limits": {"memory": "128Mi"}},
                      "env": [{"name": "MEMORY", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}],
                      "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                     {"name": "helper", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                 "volumes": [{"name": "data", "emptyDir": {}}]}}))
    .expect("valid Pod");
    let all = create_injected(&pods, &app, "all-options").await;
    let spec = all.spec.as_ref().expect("spec");
    assert_eq!(spec.share_process_namespace, Some(true));
    let init: Vec<&str> = spec.init_containers.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(init.first(), Some(&"prepare-watch"), "before the pod's own: {init:?}");
    assert!(
        init.iter().position(|c| *c == "setup") < init.iter().position(|c| *c == "all-options").or(Some(usize::MAX))
    );
    let app_mounts: Vec<&str> =
        container(&all, "app").expect("app").volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
    assert!(app_mounts.contains(&"/var/watch") && app_mounts.iter().filter(|p| **p == "/data").count() == 1);
    let helper = container(&all, "helper").expect("helper");
    assert!(!helper.volume_mounts.iter().flatten().any(|m| m.mount_path == "/var/watch"), "not an app container");
    let carried = container(&all, "all-options").expect("sidecar").env.clone().unwrap_or_default();
    assert_eq!(carried.len(), 1, "MISSING is skipped: {carried:?}");
    let field = carried[0].value_from.as_ref().and_then(|v| v.resource_field_ref.as_ref()).expect("resourceFieldRef");
    assert_eq!(field.container_name.as_deref(), Some("app"), "reads the app's limits, not the sidecar's");

    ns.delete().await;
    operator_ns.delete().await;
}

/// Admission requests the operator answered, every result summed (its `/metrics`).
async fn requests_answered(operator: &Operator) -> u64 {
    let text = operator.metrics_text().await;
    text.lines()
        .filter(|line| line.starts_with("watcher_admission_requests_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `automountServiceAccountToken: false`: the sidecar and the Watcher's init container get no
/// token (the empty volume is what kube-apiserver stores at the token's path), the app keeps
/// its own; and with nothing left for the ServiceAccount plugin to add after the webhook,
/// kube-apiserver calls the webhook once for such a pod, where a plain Watcher's pod is
/// called again (reinvocation) for the token the plugin mounts into the new sidecar.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn a_watcher_without_token_is_called_once_per_pod() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-token").await;
    let operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let spec = |name: &str| {
        json!({"container": {"name": name, "image": "busybox:1.36", "command": ["sleep", "3600"]},
               "initContainers": [{"name": format!("{name}-init"), "image": "busybox:1.36", "command": ["true"]}]})
    };
    let mut no_token = spec("no-token");
    no_token["automountServiceAccountToken"] = json!(false);
    for (name, spec) in [("plain", spec("plain")), ("no-token", no_token)] {
        kubectl_apply(
            n,
            &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                                 "metadata": {"name": name}, "spec": spec}),
        );
        wait_ready(&watchers, name).await;
    }
    let app = |watcher: &str| -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("app-{watcher}"), "annotations": {"watcher.dev/inject": watcher}},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                     "restartPolicy": "Never"}}))
        .expect("Pod")
    };

    let mut calls = Vec::new();
    for watcher in ["plain", "no-token"] {
        // Dry runs until the webhook injects it (they are counted too), then one real create.
        let dry_run = PostParams { dry_run: true, ..PostParams::default() };
        let prefix = format!("{watcher}@");
        wait_for(STEP, || async {
            let created = pods.create(&dry_run, &app(watcher)).await.ok()?;
            let injected = created.annotations().get("watcher.dev/injected")?;
            injected.starts_with(&prefix).then_some(())
        })
        .await;
        let before = requests_answered(&operator).await;
        let pod = pods.create(&PostParams::default(), &app(watcher)).await.expect("pod created");
        calls.push(requests_answered(&operator).await - before);

        let token_mount = |name: &str| {
            let c = container(&pod, name).unwrap_or_else(|| panic!("container {name}"));
            c.volume_mounts.iter().flatten().find(|m| m.mount_path == SERVICE_ACCOUNT_PATH).map(|m| m.name.clone())
        };
        let app_token = token_mount("app").expect("the app keeps its token");
        assert!(app_token.starts_with("kube-api-access-"), "{app_token}");
        for name in [watcher.to_owned(), format!("{watcher}-init")] {
            let mounted = token_mount(&name).expect("something at the token's path");
            if watcher == "no-token" {
                assert_eq!(mounted, "watcher-dev-no-token", "{name}");
            } else {
                assert_eq!(mounted, app_token, "{name}: the plugin's token");
            }
        }
    }
    assert_eq!(calls, [2, 1], "webhook calls per pod: plain (reinvoked for the token), no token");
    let stored = pods.get("app-no-token").await.expect("pod");
    let volume = stored
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "watcher-dev-no-token").cloned());
    assert!(volume.is_some_and(|v| v.empty_dir.is_some()), "an emptyDir");
}
