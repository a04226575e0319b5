//! The offline preview as README shows it: `watcher-operator inject -f POD --watcher WATCHER`,
//! the binary itself, no cluster.

use std::process::Command;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn preview(pod: &str, watcher: &str) -> (Value, String) {
    preview_with(pod, watcher, &[])
}

/// [`preview`] with `extra` flags.
fn preview_with(pod: &str, watcher: &str, extra: &[&str]) -> (Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["inject", "-f", pod, "--watcher", watcher])
        .args(extra)
        .current_dir(ROOT)
        .output()
        .expect("binary runs");
    assert!(output.status.success(), "inject failed: {}", String::from_utf8_lossy(&output.stderr));
    let pods: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(output.stdout).expect("UTF-8")).expect("YAML");
    let pod = pods.into_iter().find(|p| !p.is_null()).expect("a pod");
    (pod, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// README's "Watching the app": watcher-agent reads the app's log volume read-only, keeps its
/// checkpoints on a volume of its own, gets its configuration from the Watcher's ConfigMap and its
/// pod's identity from the downward API, and the pod is annotated for scraping.
#[test]
fn the_app_sample_is_watched_as_readme_says() {
    let (pod, warnings) = preview("deploy/samples/app.yaml", "deploy/samples/app-watcher.yaml");
    assert_eq!(warnings, "");
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "app-watcher");
    assert_eq!(
        sidecar["volumeMounts"],
        serde_json::json!([
            {"name": "watcher-agent-state", "mountPath": "/var/lib/watcher-agent"},
            {"name": "logs", "mountPath": "/var/log/app", "readOnly": true},
            {"name": "app-watcher-config", "mountPath": "/etc/watcher-agent/config", "readOnly": true},
        ])
    );
    let volumes: Vec<&str> =
        pod["spec"]["volumes"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(volumes, ["logs", "watcher-agent-state", "app-watcher-config"]);
    let env: Vec<&str> = sidecar["env"].as_array().into_iter().flatten().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(env, ["POD_NAME", "POD_NAMESPACE", "POD_UID"]);
    assert_eq!(sidecar["envFrom"], serde_json::json!([{"configMapRef": {"name": "app-watcher-config"}}]));
    assert_eq!(sidecar["image"], "watcher-agent:0.2.0");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(
        (&annotations["prometheus.io/scrape"], &annotations["prometheus.io/port"]),
        (&"true".into(), &"9102".into())
    );
}

/// Every other option shows in the preview too: the Watcher's volume in the app, the process
/// namespace, an init container before the pod's own; and a skipped one says why on stderr.
#[test]
fn every_option_shows_in_the_preview() {
    let dir = std::env::temp_dir().join(format!("watcher-preview-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let watcher = dir.join("watcher.yaml");
    std::fs::write(
        &watcher,
        r#"apiVersion: watcher.dev/v1alpha1
kind: Watcher
metadata: {name: app-watcher}
spec:
  selector: {matchLabels: {app: shop}}
  container: {name: app-watcher, image: busybox:1.36}
  volume: {name: watch-state, emptyDir: {}}
  appVolumeMounts: [{mountPath: /var/watch}, {mountPath: /var/log/app}]
  shareProcessNamespace: true
  initContainers: [{name: prepare-watch, image: busybox:1.36, command: ["true"]}]
"#,
    )
    .expect("written");
    let (pod, warnings) = preview("deploy/samples/app.yaml", watcher.to_str().expect("UTF-8 path"));
    let _ = std::fs::remove_dir_all(&dir);
    let app = &pod["spec"]["containers"][0];
    assert_eq!(app["volumeMounts"][1], serde_json::json!({"name": "watch-state", "mountPath": "/var/watch"}));
    assert_eq!(app["volumeMounts"].as_array().map(Vec::len), Some(2), "/var/log/app is the app's own: left alone");
    assert!(warnings.contains("container app already mounts something at /var/log/app: left as it is"), "{warnings}");
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    let init: Vec<&str> =
        pod["spec"]["initContainers"].as_array().expect("init").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(init, ["prepare-watch", "app-watcher"]);
}

/// README's ClusterWatcher preview, as written: in a namespace labelled `team=payments` the
/// log agent applies (selected by `app: shop`) and reads the app's log volume read-only; without
/// the labels it does not apply, and stderr says why.
#[test]
fn the_cluster_watcher_sample_applies_where_its_namespace_selector_matches() {
    let run = |extra: &[&str]| {
        let mut flags = vec!["--namespace", "team-a"];
        flags.extend(extra);
        preview_with("deploy/samples/app.yaml", "deploy/samples/clusterwatcher.yaml", &flags)
    };
    let (pod, warnings) = run(&["--namespace-labels", "team=payments"]);
    assert_eq!(warnings, "");
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "log-agent");
    assert_eq!(
        sidecar["volumeMounts"],
        serde_json::json!([{"name": "logs", "mountPath": "/var/log/app", "readOnly": true}])
    );
    assert_eq!(sidecar["envFrom"][0]["configMapRef"]["name"], "log-agent-config");

    let (pod, notes) = run(&[]);
    assert!(pod["spec"]["initContainers"].is_null(), "not injected: {pod}");
    assert!(notes.contains("unless --namespace-labels gives it more"), "{notes}");
}

/// The samples' LimitRange and ResourceQuota: the sidecar gets the LimitRange's defaults, said
/// on stderr, and the pod passes both.
#[test]
fn the_namespaces_resource_rules_are_previewed() {
    let flags =
        ["--limit-range", "deploy/samples/limitrange.yaml", "--resource-quota", "deploy/samples/resourcequota.yaml"];
    let (pod, said) = preview_with("deploy/samples/pod.yaml", "deploy/samples/watcher.yaml", &flags);
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "log-watcher");
    assert_eq!(
        sidecar["resources"],
        serde_json::json!({"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "50m", "memory": "32Mi"}})
    );
    assert!(
        said.contains(
            "Watcher log-watcher fitted to the namespace's resource rules (LimitRange bounds, ResourceQuota team)"
        ),
        "{said}"
    );
    let wrong = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["inject", "-f", "deploy/samples/pod.yaml", "--watcher", "deploy/samples/watcher.yaml"])
        .args(["--limit-range", "deploy/samples/resourcequota.yaml"])
        .current_dir(ROOT)
        .output()
        .expect("binary runs");
    assert!(!wrong.status.success(), "a ResourceQuota given as a LimitRange is an error");
    let error = String::from_utf8_lossy(&wrong.stderr);
    assert!(error.contains("LimitRange"), "{error}");
}

/// The PodMonitor sample scrapes what README's Watcher injects: it selects the app's pods by
/// labels they carry, and names the agent container's port.
#[test]
fn the_podmonitor_sample_selects_the_apps_pods_and_the_agents_port() {
    let read = |path: &str| -> Value {
        let text = std::fs::read_to_string(format!("{ROOT}/{path}")).expect("a sample");
        serde_saphyr::from_str(&text).expect("YAML")
    };
    let monitor = read("deploy/samples/agent-podmonitor.yaml");
    assert_eq!(monitor["kind"], "PodMonitor");
    let (pod, _) = preview("deploy/samples/app.yaml", "deploy/samples/app-watcher.yaml");
    let labels = pod["metadata"]["labels"].as_object().expect("the app's labels");
    let selected = monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
    assert!(!selected.is_empty() && selected.iter().all(|(k, v)| labels.get(k) == Some(v)), "{selected:?} {labels:?}");
    let ports: Vec<&Value> = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .chain(pod["spec"]["containers"].as_array())
        .flatten()
        .filter(|c| c["name"] == "app-watcher")
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .collect();
    let endpoints = monitor["spec"]["podMetricsEndpoints"].as_array().expect("endpoints");
    assert!(
        endpoints.iter().all(|e| ports.iter().any(|p| p["name"] == e["port"])),
        "{endpoints:?} against the agent's ports {ports:?}"
    );
}
