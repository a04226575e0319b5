use rstest::rstest;
use serde_json::{Value, json};
use watcher_api::Watcher;

use super::{InjectOptions, Injection, inject, supports_native_sidecars};
use crate::PodView;

fn watcher(name: &str, namespace: &str, spec: Value) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .expect("valid Watcher")
}

/// A Watcher with every optional part: config, volume, pull secret.
fn full_watcher(native: &str) -> Watcher {
    watcher(
        "log-watcher",
        "team-a",
        json!({
            "container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sh", "-c", "tail -F /x"]},
            "volume": {"name": "logs", "emptyDir": {}},
            "configData": {"LEVEL": "debug"},
            "imagePullSecrets": {"name": "regcred"},
            "nativeSidecar": native,
        }),
    )
}

fn pod(metadata: Value, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

fn annotated(names: &str) -> Value {
    pod(
        json!({"name": "app", "annotations": {"watcher.dev/inject": names}}),
        json!({"containers": [{"name": "app", "image": "nginx"}]}),
    )
}

fn options(native_sidecars: bool) -> InjectOptions {
    InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars,
        server_minor: None,
        ..Default::default()
    }
}

/// Runs `inject` and applies its patch: the patch must apply cleanly to the pod it was made for.
fn run(pod: &Value, watchers: &[Watcher], options: &InjectOptions) -> (Injection, Value) {
    run_in("team-a", pod, watchers, options)
}

fn run_in(namespace: &str, pod: &Value, watchers: &[Watcher], options: &InjectOptions) -> (Injection, Value) {
    let typed: PodView = serde_json::from_value(pod.clone()).expect("valid Pod");
    let refs: Vec<&Watcher> = watchers.iter().collect();
    let injection = inject(&typed, namespace, &refs, options);
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &injection.patch).expect("patch applies");
    (injection, patched)
}

fn ops(injection: &Injection) -> Value {
    serde_json::to_value(&injection.patch).expect("patch serialises")
}

fn sidecar(native: bool) -> Value {
    let mut container = json!({
        "name": "log-watcher", "image": "busybox:1.36", "command": ["sh", "-c", "tail -F /x"],
        "envFrom": [{"configMapRef": {"name": "log-watcher-config"}}],
    });
    if native {
        container["restartPolicy"] = json!("Always");
    }
    container
}

fn injected_value(watcher: &Watcher) -> String {
    format!("log-watcher@{}", watcher.spec.spec_hash())
}

/// `watcher.dev/injected-without-image`: the hash the pod reconciler compares with the current
/// spec's to update a sidecar in place with no revision kept.
fn without_image_value(watcher: &Watcher) -> String {
    format!("log-watcher@{}", watcher.spec.spec_hash_without_image())
}

#[test]
fn annotated_pod_gets_container_config_volume_secret_and_annotation() {
    let watcher = full_watcher("Never");
    let (injection, patched) = run(&annotated("log-watcher"), std::slice::from_ref(&watcher), &options(true));
    assert_eq!(
        ops(&injection),
        json!([
            {"op": "add", "path": "/spec/containers/-", "value": sidecar(false)},
            {"op": "add", "path": "/spec/volumes", "value": [{"name": "logs", "emptyDir": {}}]},
            {"op": "add", "path": "/spec/imagePullSecrets", "value": [{"name": "regcred"}]},
            {"op": "add", "path": "/metadata/annotations/watcher.dev~1injected", "value": injected_value(&watcher)},
            {"op": "add", "path": "/metadata/annotations/watcher.dev~1injected-without-image",
             "value": without_image_value(&watcher)},
            {"op": "add", "path": "/metadata/annotations/watcher.dev~1sidecars", "value": "log-watcher"},
            {"op": "add", "path": "/metadata/annotations/watcher.dev~1injected-config",
             "value": format!("log-watcher@{}", watcher.spec.config_hash().expect("config data"))},
            {"op": "add", "path": "/metadata/annotations/cluster-autoscaler.kubernetes.io~1safe-to-evict-local-volumes",
             "value": "logs"},
            {"op": "add", "path": "/metadata/annotations/kubectl.kubernetes.io~1default-container", "value": "app"},
        ])
    );
    assert_eq!(injection.injected, ["log-watcher"]);
    assert!(injection.warnings.is_empty() && injection.skipped.is_none() && injection.asked);
    assert_eq!(patched["spec"]["containers"][1]["name"], "log-watcher");
    assert_eq!(patched["metadata"]["annotations"]["watcher.dev/inject"], "log-watcher");
    assert_eq!(patched["metadata"]["annotations"]["watcher.dev/injected"], injected_value(&watcher));
}

#[rstest]
#[case::auto_on_a_new_server("Auto", true, true, 0)]
#[case::auto_on_an_old_server("Auto", false, false, 0)]
#[case::always_on_a_new_server("Always", true, true, 0)]
#[case::always_on_an_old_server_warns("Always", false, true, 1)]
#[case::never("Never", true, false, 0)]
fn native_sidecar_modes(
    #[case] mode: &str,
    #[case] server_supports: bool,
    #[case] expect_native: bool,
    #[case] warnings: usize,
) {
    let (injection, patched) = run(&annotated("log-watcher"), &[full_watcher(mode)], &options(server_supports));
    let first = &ops(&injection)[0];
    if expect_native {
        assert_eq!(first, &json!({"op": "add", "path": "/spec/initContainers", "value": [sidecar(true)]}));
        assert_eq!(patched["spec"]["initContainers"][0]["restartPolicy"], "Always");
        assert_eq!(patched["spec"]["containers"].as_array().map(Vec::len), Some(1));
    } else {
        assert_eq!(first, &json!({"op": "add", "path": "/spec/containers/-", "value": sidecar(false)}));
        assert!(patched["spec"].get("initContainers").is_none());
    }
    assert_eq!(injection.warnings.len(), warnings, "{:?}", injection.warnings);
}

/// The Watcher's own `envFrom` comes first, the ConfigMap after it; nothing else is added.
#[test]
fn the_config_map_follows_the_containers_own_env_from() {
    let spec = json!({
        "container": {"name": "log-watcher", "image": "busybox:1.36",
                      "envFrom": [{"secretRef": {"name": "token"}}], "restartPolicy": "OnFailure"},
        "configData": {"LEVEL": "debug"},
        "nativeSidecar": "Never",
    });
    let (_, patched) = run(&annotated("log-watcher"), &[watcher("log-watcher", "team-a", spec)], &options(true));
    assert_eq!(
        patched["spec"]["containers"][1],
        json!({"name": "log-watcher", "image": "busybox:1.36", "restartPolicy": "OnFailure",
               "envFrom": [{"secretRef": {"name": "token"}}, {"configMapRef": {"name": "log-watcher-config"}}]})
    );
}

#[test]
fn native_sidecar_appends_to_existing_init_containers() {
    let pod = pod(
        json!({"name": "app", "annotations": {"watcher.dev/inject": "log-watcher"}}),
        json!({"initContainers": [{"name": "setup", "image": "busybox"}], "containers": [{"name": "app"}]}),
    );
    let (injection, patched) = run(&pod, &[full_watcher("Always")], &options(true));
    assert_eq!(ops(&injection)[0], json!({"op": "add", "path": "/spec/initContainers/-", "value": sidecar(true)}));
    assert_eq!(patched["spec"]["initContainers"][0]["name"], "setup");
    assert_eq!(patched["spec"]["initContainers"][1]["name"], "log-watcher");
}

#[test]
fn reinvocation_is_a_no_op() {
    let watchers = [full_watcher("Auto")];
    let (first, patched) = run(&annotated("log-watcher"), &watchers, &options(true));
    assert_eq!(first.injected, ["log-watcher"]);
    let (second, unchanged) = run(&patched, &watchers, &options(true));
    assert!(second.patch.is_empty());
    assert!(second.warnings.is_empty(), "our own sidecar is not a collision: {:?}", second.warnings);
    assert_eq!(second.skipped.as_deref(), Some("every Watcher the pod asks for is injected or cannot be"));
    assert_eq!(unchanged, patched);
}

#[test]
fn selector_injects_without_annotation_and_creates_annotations() {
    let selected = watcher(
        "metrics",
        "team-a",
        json!({"container": {"name": "metrics", "image": "m:1"}, "selector": {"matchLabels": {"app": "web"}}}),
    );
    let other = watcher(
        "db",
        "team-a",
        json!({"container": {"name": "db", "image": "d:1"}, "selector": {"matchLabels": {"app": "db"}}}),
    );
    let pod = pod(
        json!({"generateName": "web-7d876db474-", "labels": {"app": "web"}}),
        json!({"containers": [{"name": "app"}]}),
    );
    let (injection, patched) = run(&pod, &[selected.clone(), other], &options(false));
    assert_eq!(
        ops(&injection),
        json!([
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "metrics", "image": "m:1"}},
            {"op": "add", "path": "/metadata/annotations",
             "value": {"watcher.dev/injected": format!("metrics@{}", selected.spec.spec_hash()),
                       "watcher.dev/injected-without-image": format!("metrics@{}", selected.spec.spec_hash_without_image()),
                       "watcher.dev/sidecars": "metrics",
                       "kubectl.kubernetes.io/default-container": "app"}},
        ])
    );
    assert_eq!(patched["spec"]["containers"][1]["name"], "metrics");
}

#[test]
fn annotation_order_first_then_selected_by_name_and_lists_created_once() {
    let spec = |name: &str, selector: Value| {
        json!({"container": {"name": name, "image": "x"}, "volume": {"name": format!("v-{name}"), "emptyDir": {}},
               "selector": selector})
    };
    let watchers = [
        watcher("zeta", "team-a", spec("zeta", json!({"matchLabels": {"app": "web"}}))),
        watcher("alpha", "team-a", spec("alpha", json!({"matchLabels": {"app": "web"}}))),
        watcher("requested", "team-a", spec("requested", Value::Null)),
    ];
    let pod = pod(
        json!({"name": "p", "labels": {"app": "web"}, "annotations": {"watcher.dev/inject": "requested,zeta"}}),
        json!({"containers": [{"name": "app"}]}),
    );
    let (injection, patched) = run(&pod, &watchers, &options(false));
    assert_eq!(injection.injected, ["requested", "zeta", "alpha"]);
    let paths: Vec<_> = injection.patch.iter().map(|op| op.path().to_string()).collect();
    assert_eq!(
        paths,
        [
            "/spec/containers/-",
            "/spec/volumes",
            "/spec/containers/-",
            "/spec/volumes/-",
            "/spec/containers/-",
            "/spec/volumes/-",
            "/metadata/annotations/watcher.dev~1injected",
            "/metadata/annotations/watcher.dev~1injected-without-image",
            "/metadata/annotations/watcher.dev~1sidecars",
            "/metadata/annotations/cluster-autoscaler.kubernetes.io~1safe-to-evict-local-volumes",
            "/metadata/annotations/kubectl.kubernetes.io~1default-container"
        ]
    );
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(annotations["watcher.dev/sidecars"], "requested,zeta,alpha", "the containers, in the pod's order");
    assert_eq!(
        annotations["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"],
        "v-requested,v-zeta,v-alpha"
    );
    let volumes: Vec<_> =
        patched["spec"]["volumes"].as_array().expect("volumes").iter().map(|v| v["name"].clone()).collect();
    assert_eq!(volumes, [json!("v-requested"), json!("v-zeta"), json!("v-alpha")]);
}

#[test]
fn container_name_collision_is_a_warning_not_a_patch() {
    let pod = pod(
        json!({"name": "p", "annotations": {"watcher.dev/inject": "log-watcher"}}),
        json!({"containers": [{"name": "app"}, {"name": "log-watcher", "image": "mine"}]}),
    );
    let (injection, patched) = run(&pod, &[full_watcher("Never")], &options(true));
    assert!(injection.patch.is_empty());
    assert_eq!(
        injection.warnings,
        ["Watcher log-watcher not injected: the pod already has a container named log-watcher"]
    );
    assert_eq!(patched, pod);
}

#[test]
fn two_watchers_with_one_container_name_inject_the_first_only() {
    let twin = watcher("twin", "team-a", json!({"container": {"name": "log-watcher", "image": "other"}}));
    let (injection, _) = run(&annotated("log-watcher,twin"), &[full_watcher("Never"), twin], &options(true));
    assert_eq!(injection.injected, ["log-watcher"]);
    assert_eq!(injection.warnings, ["Watcher twin not injected: the pod already has a container named log-watcher"]);
}

#[test]
fn missing_watcher_is_a_warning_and_the_others_still_inject() {
    let (injection, patched) = run(&annotated("nope,log-watcher"), &[full_watcher("Never")], &options(true));
    assert_eq!(injection.warnings, ["Watcher nope not found in namespace team-a"]);
    assert_eq!(injection.injected, ["log-watcher"]);
    assert_eq!(patched["spec"]["containers"][1]["name"], "log-watcher");

    let (only_missing, _) = run(&annotated("nope"), &[full_watcher("Never")], &options(true));
    assert!(only_missing.patch.is_empty());
    assert_eq!(only_missing.skipped.as_deref(), Some("no requested Watcher exists"));
    assert_eq!(only_missing.warnings.len(), 1);
}

#[test]
fn watchers_of_other_namespaces_are_never_used() {
    let elsewhere = watcher("log-watcher", "team-b", json!({"container": {"name": "log-watcher"}, "selector": {}}));
    let (injection, _) = run(&annotated("log-watcher"), &[elsewhere], &options(true));
    assert!(injection.patch.is_empty());
    assert_eq!(injection.warnings, ["Watcher log-watcher not found in namespace team-a"]);
}

#[rstest]
#[case::kube_system("kube-system")]
#[case::kube_public("kube-public")]
#[case::kube_node_lease("kube-node-lease")]
#[case::operator_namespace("watcher-system")]
fn excluded_namespaces_are_never_injected(#[case] namespace: &str) {
    let everywhere = watcher("log-watcher", namespace, json!({"container": {"name": "log-watcher"}, "selector": {}}));
    let (injection, _) = run_in(namespace, &annotated("log-watcher"), &[everywhere], &options(true));
    assert!(injection.patch.is_empty());
    assert_eq!(injection.skipped, Some(format!("namespace {namespace} is never injected")));
}

#[test]
fn existing_volume_and_pull_secret_are_not_duplicated() {
    let pod = pod(
        json!({"name": "p", "annotations": {"watcher.dev/inject": "log-watcher"}}),
        json!({"containers": [{"name": "app"}], "volumes": [{"name": "logs", "hostPath": {"path": "/var/log"}}],
               "imagePullSecrets": [{"name": "regcred"}]}),
    );
    let (injection, patched) = run(&pod, &[full_watcher("Never")], &options(true));
    let paths: Vec<_> = injection.patch.iter().map(|op| op.path().to_string()).collect();
    assert_eq!(
        paths,
        [
            "/spec/containers/-",
            "/metadata/annotations/watcher.dev~1injected",
            "/metadata/annotations/watcher.dev~1injected-without-image",
            "/metadata/annotations/watcher.dev~1sidecars",
            "/metadata/annotations/watcher.dev~1injected-config",
            "/metadata/annotations/kubectl.kubernetes.io~1default-container"
        ]
    );
    assert_eq!(patched["spec"]["volumes"], json!([{"name": "logs", "hostPath": {"path": "/var/log"}}]));
}

#[test]
fn earlier_injections_are_kept_in_the_annotation() {
    let pod = pod(
        json!({"name": "p", "annotations": {"watcher.dev/inject": "first,log-watcher", "watcher.dev/injected": "first@abc",
                                             "watcher.dev/sidecars": "first"}}),
        json!({"containers": [{"name": "app"}, {"name": "first"}]}),
    );
    let first = watcher("first", "team-a", json!({"container": {"name": "first"}}));
    let watcher = full_watcher("Never");
    let (injection, patched) = run(&pod, &[first, watcher.clone()], &options(true));
    assert_eq!(injection.injected, ["log-watcher"]);
    assert_eq!(
        patched["metadata"]["annotations"]["watcher.dev/injected"],
        format!("first@abc,{}", injected_value(&watcher))
    );
    assert_eq!(patched["metadata"]["annotations"]["watcher.dev/sidecars"], "first,log-watcher");
}

#[test]
fn a_pod_that_asks_for_nothing_is_skipped() {
    let pod = pod(json!({"name": "p", "labels": {"app": "web"}}), json!({"containers": [{"name": "app"}]}));
    let (injection, _) = run(&pod, &[full_watcher("Never")], &options(true));
    assert_eq!(injection, Injection { skipped: Some("the pod asks for no Watcher".into()), ..Injection::default() });
    assert!(!injection.asked);
}

#[test]
fn a_pod_without_containers_is_skipped() {
    let pod = pod(json!({"name": "p", "annotations": {"watcher.dev/inject": "log-watcher"}}), json!({}));
    let (injection, _) = run(&pod, &[full_watcher("Never")], &options(true));
    assert!(injection.patch.is_empty());
    assert_eq!(injection.skipped.as_deref(), Some("the pod has no containers"));
}

#[rstest]
#[case("1", "29", true)]
#[case("1", "33", true)]
#[case("1", "30+", true)]
#[case("1", "28", false)]
#[case("1", "", false)]
#[case("2", "0", true)]
#[case("x", "y", false)]
fn native_sidecar_support_by_server_version(#[case] major: &str, #[case] minor: &str, #[case] expected: bool) {
    assert_eq!(supports_native_sidecars(major, minor), expected);
}

mod app {
    //! The sidecar sees the app: each option on the pod kube-apiserver sent (a volume `data` at
    //! `/data` and the ServiceAccount token in container `app`).
    use serde_json::{Value, json};
    use watcher_api::Watcher;

    use super::{options, run, watcher};

    const CAPTURED: &str = include_str!("../../fixtures/admission-review/pod-create-named-annotated.json");

    pub(super) fn captured() -> Value {
        let review: Value = serde_json::from_str(CAPTURED).expect("fixture");
        review["request"]["object"].clone()
    }

    /// The captured pod's `log-watcher`, with `more` added to its spec.
    fn log_watcher(more: Value) -> Watcher {
        let mut spec = json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}, "nativeSidecar": "Never"});
        for (key, value) in more.as_object().expect("object") {
            spec[key] = value.clone();
        }
        watcher("log-watcher", "team-a", spec)
    }

    fn sidecar_of(patched: &Value) -> Value {
        patched["spec"]["containers"].as_array().expect("containers").last().cloned().expect("sidecar")
    }

    fn lines(injection: &crate::Injection) -> Vec<String> {
        injection.app.iter().flat_map(|r| r.lines.clone()).collect()
    }

    #[test]
    fn shared_volumes_read_only_without_the_token() {
        let (injection, patched) =
            run(&captured(), &[log_watcher(json!({"shareVolumes": "ReadOnly"}))], &options(true));
        assert_eq!(
            sidecar_of(&patched)["volumeMounts"],
            json!([{"name": "data", "mountPath": "/data", "readOnly": true}])
        );
        assert_eq!(
            lines(&injection),
            [
                "shares /data of app (read-only)",
                "does not share /var/run/secrets/kubernetes.io/serviceaccount: the ServiceAccount token, which kube-apiserver mounts itself",
            ]
        );
        assert!(injection.warnings.is_empty());
    }

    #[test]
    fn shared_volumes_read_write_keep_the_apps_mode_and_skip_the_sidecars_paths() {
        let mut pod = captured();
        pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = json!(false);
        pod["spec"]["containers"][0]["volumeMounts"][0]["mountPropagation"] = json!("Bidirectional");
        pod["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        let own = json!({"container": {"name": "log-watcher", "image": "busybox:1.36",
                                       "volumeMounts": [{"name": "data", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount/"}]},
                         "shareVolumes": "ReadWrite"});
        let (injection, patched) = run(&pod, &[log_watcher(own)], &options(true));
        // Bidirectional is for privileged containers: the sidecar sees the app's mounts from the host side.
        assert_eq!(
            sidecar_of(&patched)["volumeMounts"],
            json!([{"name": "data", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount/"},
                   {"name": "data", "mountPath": "/data", "readOnly": false, "mountPropagation": "HostToContainer"}])
        );
        assert_eq!(lines(&injection)[0], "shares /data of app (read-write)");
    }

    #[test]
    fn the_watchers_volume_is_mounted_into_the_app_containers() {
        let spec = json!({"volume": {"name": "app-logs", "emptyDir": {}},
                          "appVolumeMounts": [{"mountPath": "/var/log/app", "subPath": "a"}, {"mountPath": "/data/"}]});
        let (injection, patched) = run(&captured(), &[log_watcher(spec)], &options(true));
        let mounts = &patched["spec"]["containers"][0]["volumeMounts"];
        assert_eq!(mounts[2], json!({"name": "app-logs", "mountPath": "/var/log/app", "subPath": "a"}));
        assert_eq!(mounts.as_array().map(Vec::len), Some(3), "/data/ is where app mounts data: left alone");
        assert_eq!(
            injection.warnings,
            ["Watcher log-watcher: container app already mounts something at /data: left as it is"]
        );
        assert_eq!(
            lines(&injection),
            [
                "mounts volume app-logs at /var/log/app in app",
                "does not mount app-logs at /data in app: it mounts something else there"
            ]
        );
    }

    #[test]
    fn a_volume_of_the_pods_own_name_is_the_pods() {
        let spec = json!({"volume": {"name": "data", "emptyDir": {}}, "appVolumeMounts": [{"mountPath": "/data"}, {"mountPath": "/x"}]});
        let (injection, patched) = run(&captured(), &[log_watcher(spec)], &options(true));
        assert_eq!(patched["spec"]["volumes"].as_array().map(Vec::len), Some(2), "no second volume data");
        assert_eq!(patched["spec"]["containers"][0]["volumeMounts"][2], json!({"name": "data", "mountPath": "/x"}));
        assert_eq!(
            injection.warnings,
            [
                "Watcher log-watcher: the pod has a volume data of its own: the app containers mount the pod's, not the Watcher's"
            ]
        );
        assert_eq!(lines(&injection)[0], "mounts volume data at /data in app", "already there: nothing to add");
    }

    #[test]
    fn env_is_carried_as_the_app_has_it() {
        let mut pod = captured();
        pod["spec"]["containers"][0]["env"] = json!([
            {"name": "SERVICE_NAME", "value": "old"},
            {"name": "SERVICE_NAME", "value": "web"},
            {"name": "MEMORY", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "TOKEN", "valueFrom": {"fileKeyRef": {"volumeName": "data", "path": "t", "key": "k"}}},
            {"name": "OWN", "value": "app's"},
        ]);
        let spec = json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "env": [{"name": "OWN", "value": "sidecar's"}]},
                          "transferEnv": [{"names": ["SERVICE_NAME", "MEMORY", "TOKEN", "OWN", "POD_IP"]},
                                          {"container": "web", "names": ["X"]}]});
        let (injection, patched) = run(&pod, &[log_watcher(spec)], &options(true));
        assert_eq!(
            sidecar_of(&patched)["env"],
            json!([
                {"name": "OWN", "value": "sidecar's"},
                {"name": "SERVICE_NAME", "value": "web"},
                {"name": "MEMORY", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi", "containerName": "app"}}},
                {"name": "TOKEN", "valueFrom": {"fileKeyRef": {"volumeName": "data", "path": "t", "key": "k"}}},
            ])
        );
        assert_eq!(
            lines(&injection),
            [
                "carries SERVICE_NAME from app",
                "carries MEMORY from app",
                "carries TOKEN from app",
                "does not carry OWN: the sidecar defines it",
                "does not carry POD_IP: app has no such variable",
                "does not carry X: the pod has no app container web",
            ]
        );
        assert_eq!(injection.warnings, ["Watcher log-watcher: no app container web to carry X from"]);
    }

    #[test]
    fn the_process_namespace_is_shared_where_the_pod_leaves_it_unset() {
        let spec = json!({"shareProcessNamespace": true});
        let (injection, patched) = run(&captured(), &[log_watcher(spec.clone())], &options(true));
        assert_eq!(patched["spec"]["shareProcessNamespace"], true);
        assert!(injection.warnings.is_empty());
        for (field, warning) in [
            ("shareProcessNamespace", "Watcher log-watcher: the pod says shareProcessNamespace: false: kept"),
            ("hostPID", "Watcher log-watcher: the pod uses the host's process namespace (hostPID): not shared"),
        ] {
            let mut pod = captured();
            pod["spec"][field] = json!(field == "hostPID");
            let (injection, patched) = run(&pod, &[log_watcher(spec.clone())], &options(true));
            assert_ne!(patched["spec"]["shareProcessNamespace"], true, "{field}");
            assert_eq!(injection.warnings, [warning]);
        }
    }

    #[test]
    fn pod_annotations_are_added_never_overwritten() {
        let mut pod = captured();
        pod["metadata"]["annotations"]["prometheus.io/port"] = json!("8080");
        let spec = json!({"podAnnotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9102"}});
        let (injection, patched) = run(&pod, &[log_watcher(spec.clone())], &options(true));
        let annotations = &patched["metadata"]["annotations"];
        assert_eq!(
            (&annotations["prometheus.io/scrape"], &annotations["prometheus.io/port"]),
            (&json!("true"), &json!("8080"))
        );
        assert!(annotations["kubectl.kubernetes.io/last-applied-configuration"].is_string(), "the others stay");
        assert_eq!(
            lines(&injection),
            [
                "does not annotate prometheus.io/port: the pod has it (never overwritten)",
                "annotates prometheus.io/scrape"
            ]
        );
        // A pod with no annotations at all: one object with them and the operator's own.
        let bare = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
        let mut selecting = spec;
        selecting["selector"] = json!({"matchLabels": {"app": "web"}});
        let (_, patched) = run(&bare, &[log_watcher(selecting)], &options(true));
        let keys: Vec<&String> = patched["metadata"]["annotations"].as_object().expect("annotations").keys().collect();
        assert_eq!(
            keys,
            [
                "kubectl.kubernetes.io/default-container",
                "prometheus.io/port",
                "prometheus.io/scrape",
                "watcher.dev/injected",
                "watcher.dev/injected-without-image",
                "watcher.dev/sidecars"
            ]
        );
    }

    #[test]
    fn annotations_stay_under_kube_apiservers_limit() {
        let mut pod = captured();
        pod["metadata"]["annotations"]["big"] = json!("x".repeat(255 * 1024));
        let (injection, patched) =
            run(&pod, &[log_watcher(json!({"podAnnotations": {"prometheus.io/scrape": "true"}}))], &options(true));
        assert!(patched["metadata"]["annotations"].get("prometheus.io/scrape").is_none());
        assert_eq!(
            injection.warnings,
            [
                "Watcher log-watcher: annotation prometheus.io/scrape not added: the pod's annotations would pass 256 KiB"
            ]
        );
    }

    /// An init container that mounts a volume neither the pod nor the Watcher has would get the
    /// pod refused: the Watcher is not injected, and the warning names the field.
    #[test]
    fn an_init_container_mount_of_no_volume_keeps_the_watcher_out() {
        let spec = json!({"initContainers": [{"name": "prepare", "image": "busybox:1.36",
                                               "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]});
        let (injection, patched) = run(&captured(), &[log_watcher(spec)], &options(true));
        assert!(injection.patch.is_empty() && patched == captured());
        assert_eq!(
            injection.warnings,
            [
                "Watcher log-watcher not injected: the pod would be invalid with it: spec.initContainers[0].volumeMounts[0].name: \
              volume \"nope\" is neither the pod's nor the Watcher's"
            ]
        );
    }

    /// The captured pod with an init container (`setup`), asking for `log-watcher`.
    fn with_init_container() -> Value {
        let review: Value = serde_json::from_str(include_str!(
            "../../fixtures/admission-review/pod-create-init-and-existing-watcher-container.json"
        ))
        .expect("fixture");
        let mut pod = review["request"]["object"].clone();
        pod["metadata"]["annotations"] = json!({"watcher.dev/inject": "log-watcher"});
        pod
    }

    #[test]
    fn init_containers_run_before_the_pods_own_and_the_sidecar_keeps_its_place() {
        let pod = with_init_container();
        let spec = json!({"nativeSidecar": "Always", "initContainers": [
            {"name": "prepare", "image": "busybox:1.36"}, {"name": "second", "image": "busybox:1.36"}]});
        let (injection, patched) = run(&pod, &[log_watcher(spec)], &options(true));
        let names: Vec<&str> = patched["spec"]["initContainers"]
            .as_array()
            .expect("init")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["prepare", "second", "setup", "log-watcher"]);
        assert_eq!(
            lines(&injection),
            ["runs init container prepare before the pod's own", "runs init container second before the pod's own"]
        );

        // A name the pod uses keeps the Watcher out, as the sidecar's does.
        let clash = json!({"initContainers": [{"name": "setup", "image": "busybox:1.36"}]});
        let (injection, patched) = run(&pod, &[log_watcher(clash)], &options(true));
        assert!(injection.patch.is_empty() && patched == pod);
        assert_eq!(
            injection.warnings,
            ["Watcher log-watcher not injected: the pod already has a container named setup"]
        );
    }

    /// `automountServiceAccountToken: false`: the sidecar and the Watcher's init containers get an
    /// empty read-only volume where the ServiceAccount plugin would mount the token (it leaves a
    /// container alone that has a mount there); the app keeps the token kube-apiserver mounted.
    #[test]
    fn no_token_for_the_watchers_containers_only() {
        let pod = captured();
        let token = "/var/run/secrets/kubernetes.io/serviceaccount";
        let no_token = json!({"name": "watcher-dev-no-token", "mountPath": token, "readOnly": true});
        let first = log_watcher(json!({"automountServiceAccountToken": false, "shareVolumes": "ReadOnly",
            "initContainers": [{"name": "prepare", "image": "busybox:1.36"}]}));
        let second = watcher(
            "metrics",
            "team-a",
            json!({"container": {"name": "metrics", "image": "busybox:1.36"},
            "nativeSidecar": "Never", "automountServiceAccountToken": false}),
        );
        let mut pod_asking = pod.clone();
        pod_asking["metadata"]["annotations"]["watcher.dev/inject"] = json!("log-watcher,metrics");
        let (injection, patched) = run(&pod_asking, &[first, second], &options(true));
        assert_eq!(injection.injected, ["log-watcher", "metrics"]);
        let containers = patched["spec"]["containers"].as_array().expect("containers");
        let mounts = |c: &Value| c["volumeMounts"].as_array().cloned().unwrap_or_default();
        assert_eq!(containers[0], pod["spec"]["containers"][0], "the app's container is unchanged");
        assert!(mounts(&containers[0]).iter().any(|m| m["mountPath"] == token && m["name"] != "watcher-dev-no-token"));
        for sidecar in &containers[1..] {
            assert_eq!(mounts(sidecar).iter().filter(|m| m["mountPath"] == token).collect::<Vec<_>>(), [&no_token]);
        }
        assert_eq!(patched["spec"]["initContainers"][0]["volumeMounts"], json!([no_token]));
        let volumes: Vec<&Value> = patched["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter(|v| v["name"] == "watcher-dev-no-token")
            .collect();
        assert_eq!(volumes, [&json!({"name": "watcher-dev-no-token", "emptyDir": {}})], "one volume for both");
        assert!(lines(&injection).contains(&format!("gets no API token: an empty read-only volume at {token}")));
        let hashes = |w: &Watcher| (w.spec.spec_hash().to_owned(), w.spec.spec_hash_without_image().to_owned());
        assert_ne!(
            hashes(&log_watcher(json!({}))),
            hashes(&log_watcher(json!({"automountServiceAccountToken": false})))
        );
    }

    /// A sidecar that mounts its own volume at the token's path keeps it (a second mount at one
    /// path is refused by kube-apiserver); `true` changes nothing.
    #[test]
    fn no_token_keeps_the_sidecars_own_mount() {
        let token = "/var/run/secrets/kubernetes.io/serviceaccount";
        let own = json!({"container": {"name": "log-watcher", "image": "busybox:1.36",
                                       "volumeMounts": [{"name": "data", "mountPath": format!("{token}/")}]},
                         "automountServiceAccountToken": false});
        let (injection, patched) = run(&captured(), &[log_watcher(own)], &options(true));
        assert_eq!(sidecar_of(&patched)["volumeMounts"], json!([{"name": "data", "mountPath": format!("{token}/")}]));
        assert_eq!(lines(&injection), [format!("gets no API token: its container mounts its own volume at {token}")]);

        let (_, as_is) =
            run(&captured(), &[log_watcher(json!({"automountServiceAccountToken": true}))], &options(true));
        let (_, plain) = run(&captured(), &[log_watcher(json!({}))], &options(true));
        assert_eq!(sidecar_of(&as_is), sidecar_of(&plain));
        assert_eq!(as_is["spec"]["volumes"], plain["spec"]["volumes"]);
    }

    /// The pod's own init containers move along when the Watcher's go before them: an
    /// ImagePolicy rewrites them where they end up.
    #[test]
    fn images_are_rewritten_where_the_containers_end_up() {
        let pod = with_init_container();
        let watchers = [log_watcher(json!({"initContainers": [{"name": "prepare", "image": "busybox:1.36"}]}))];
        let refs: Vec<&Watcher> = watchers.iter().collect();
        let view: crate::PodView = serde_json::from_value(pod.clone()).expect("pod");
        let mut injection = crate::inject(&view, "team-a", &refs, &options(true));
        let policy: watcher_api::ImagePolicy = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1",
            "kind": "ImagePolicy", "metadata": {"name": "mirror"},
            "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.corp/library/"}]}}))
        .expect("policy");
        let policies = vec![std::sync::Arc::new(policy.compile())];
        crate::rewrite_images(&view, "team-a", &policies, &options(true), &mut injection);
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &injection.patch).expect("applies");
        let init: Vec<(&str, &str)> = patched["spec"]["initContainers"]
            .as_array()
            .expect("init")
            .iter()
            .map(|c| (c["name"].as_str().unwrap_or_default(), c["image"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!(
            init,
            [("prepare", "mirror.corp/library/busybox:1.36"), ("setup", "mirror.corp/library/busybox:latest")]
        );
    }
}

/// A case of the captures of real servers judging pods as they prepare them.
fn prepared_case(file: &str, name: &str) -> Value {
    let path = format!("{}/fixtures/pod-security-prepared/{file}", env!("CARGO_MANIFEST_DIR"));
    let verdicts: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    let cases = verdicts["cases"].as_array().expect("cases");
    cases.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name}")).clone()
}

/// `pod` (a captured case's) asking for `watcher`, in a namespace enforcing `level` at
/// `version`, on a server of minor `server`: the injection and the patched pod.
fn at_level(pod: &Value, watcher: &Watcher, level: &str, version: Option<&str>, server: u32) -> (Injection, Value) {
    let mut pod = pod.clone();
    pod["metadata"]["annotations"]["watcher.dev/inject"] = json!(watcher.metadata.name.clone().expect("name"));
    let mut labels =
        std::collections::BTreeMap::from([("pod-security.kubernetes.io/enforce".to_owned(), level.to_owned())]);
    if let Some(version) = version {
        labels.insert("pod-security.kubernetes.io/enforce-version".to_owned(), version.to_owned());
    }
    let levels = crate::pod_security::NamespaceLevels::from_labels(&labels);
    let typed: PodView = serde_json::from_value(pod.clone()).expect("valid Pod");
    let options = InjectOptions {
        excluded_namespaces: vec![],
        native_sidecars: server >= 29,
        server_minor: Some(server),
        ..Default::default()
    };
    let injection = super::inject_at_level(&typed, "team-a", &[watcher], &options, &levels);
    let mut patched = pod;
    json_patch::patch(&mut patched, &injection.patch).expect("patch applies");
    (injection, patched)
}

fn injected_container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    let all = pod["spec"]["containers"].as_array().into_iter().chain(pod["spec"]["initContainers"].as_array());
    all.flatten().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name} in {pod}"))
}

fn plain_sidecar() -> Watcher {
    watcher("plain", "team-a", json!({"container": {"name": "plain-sidecar", "image": "busybox:1.36"}}))
}

/// On 1.24 a pod hardened by its seccomp annotation passes `restricted` (the server copies the
/// annotation into the field before Pod Security sees it): a plain Watcher is adapted, not
/// left to be refused, exactly as the server then admitted it (`...app+adapted-sidecar`).
#[test]
fn a_pod_hardened_by_annotation_gets_an_adapted_sidecar_on_1_24() {
    let case = prepared_case("prepared-1.24.json", "seccomp-pod-annotation/app");
    assert_eq!(case["allowed"], true);
    let (injection, patched) = at_level(&case["pod"], &plain_sidecar(), "restricted", None, 24);
    assert_eq!(injection.injected, ["plain"], "{:?}", injection.warnings);
    let admitted = prepared_case("prepared-1.24.json", "seccomp-pod-annotation/app+adapted-sidecar");
    assert_eq!(admitted["allowed"], true);
    assert_eq!(
        injected_container(&patched, "plain-sidecar")["securityContext"],
        injected_container(&admitted["pod"], "plain-sidecar")["securityContext"],
        "no seccomp of its own: the pod's annotation is the pod's field to the server"
    );
    // On 1.36 the annotation is nothing: the pod fails by itself and nothing is decided.
    let (on_1_36, _) = at_level(&case["pod"], &plain_sidecar(), "restricted", None, 36);
    assert!(on_1_36.pod_security.is_empty(), "{:?}", on_1_36.pod_security);
}

/// Under `restricted:v1.22` (no `runAsUser` check) a Watcher asking for root in a pod that
/// must run as non-root is admitted by the server (captured) and refused by the kubelet: it is
/// left out, saying why; required, the pod is refused.
#[test]
fn root_where_non_root_is_required_is_left_out() {
    let case = prepared_case("prepared-1.36.json", "run-as-root-nonroot/v1.22");
    assert_eq!(case["allowed"], true, "the server admits what the kubelet refuses");
    let app = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
        "spec": {"securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [injected_container(&case["pod"], "app").clone()]}});
    let mut app = app;
    app["spec"]["containers"][0]["securityContext"] =
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let root = watcher(
        "root",
        "team-a",
        json!({"container": {"name": "root", "image": "busybox:1.36",
        "securityContext": {"runAsUser": 0}}}),
    );
    for server in [24, 36] {
        let (injection, patched) = at_level(&app, &root, "restricted", Some("v1.22"), server);
        assert!(injection.injected.is_empty(), "{server}: {patched}");
        let warning = injection.warnings.iter().find(|w| w.starts_with("Watcher root not injected")).expect("said");
        assert!(warning.contains("runAsNonRoot=true and runAsUser=0: the kubelet would not start it"), "{warning}");
    }
    let mut required = root.clone();
    required.spec.failure_policy = watcher_api::FailurePolicy::Fail;
    let (injection, _) = at_level(&app, &required, "restricted", Some("v1.22"), 36);
    assert!(injection.refused.as_deref().is_some_and(|r| r.contains("the kubelet would not start it")));
}

/// A pod in a user namespace (1.35+: `runAsNonRoot` and `runAsUser` waived) whose pod-level
/// user is 0: the sidecar is not made to run as non-root (it would inherit uid 0 and never
/// start); the server admits it so (captured, 1.36).
#[test]
fn a_user_namespaced_pod_keeps_its_user() {
    let case = prepared_case("prepared-1.36.json", "user-namespace-root");
    assert_eq!(case["allowed"], true);
    let mut pod = case["pod"].clone();
    pod["spec"]["containers"].as_array_mut().expect("containers").retain(|c| c["name"] == "app");
    let (injection, patched) = at_level(&pod, &plain_sidecar(), "restricted", None, 36);
    assert_eq!(injection.injected, ["plain"], "{:?}", injection.warnings);
    let context = &injected_container(&patched, "plain-sidecar")["securityContext"];
    assert_eq!(context, &json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}));
    assert_eq!(context, &injected_container(&case["pod"], "sidecar")["securityContext"], "as the server admitted");
}

/// A Watcher that adds a capability the level allows and drops nothing: `drop: [ALL]` is added
/// beside it (the server admits it so, captured), not the Watcher left out.
#[test]
fn capabilities_that_only_add_are_topped_up() {
    let admitted = prepared_case("prepared-1.36.json", "capabilities-add-topped-up");
    assert_eq!(admitted["allowed"], true);
    let mut pod = admitted["pod"].clone();
    pod["spec"]["containers"].as_array_mut().expect("containers").retain(|c| c["name"] == "app");
    let binding = watcher(
        "bind",
        "team-a",
        json!({"container": {"name": "sidecar", "image": "busybox:1.36",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"add": ["NET_BIND_SERVICE"]}}}}),
    );
    for server in [24, 36] {
        let (injection, patched) = at_level(&pod, &binding, "restricted", None, server);
        assert_eq!(injection.injected, ["bind"], "{server}: {:?}", injection.warnings);
        assert_eq!(
            injected_container(&patched, "sidecar")["securityContext"],
            injected_container(&admitted["pod"], "sidecar")["securityContext"]
        );
    }
}

/// Whatever the level (here none), a pod that requires non-root (`runAsNonRoot: true`) and says
/// its app's user per container: the sidecar is given a user, or it would run as its image's
/// (root for busybox) and the kubelet would not start it.
#[test]
fn a_pod_requiring_non_root_gives_the_sidecar_a_user() {
    let pod = pod(
        json!({"name": "app", "annotations": {"watcher.dev/inject": "plain"}}),
        json!({"securityContext": {"runAsNonRoot": true},
               "containers": [{"name": "app", "image": "nginx", "securityContext": {"runAsUser": 101}}]}),
    );
    let (injection, patched) = run(&pod, &[plain_sidecar()], &options(true));
    assert_eq!(injection.injected, ["plain"]);
    assert_eq!(injected_container(&patched, "plain-sidecar")["securityContext"], json!({"runAsUser": 65532}));
    let mut says_user = pod.clone();
    says_user["spec"]["securityContext"]["runAsUser"] = json!(1000);
    let (_, patched) = run(&says_user, &[plain_sidecar()], &options(true));
    assert!(injected_container(&patched, "plain-sidecar").get("securityContext").is_none(), "the pod's user");
}

/// The emptyDirs the patch adds are named for cluster-autoscaler, merged with what the pod says;
/// `kubectl logs` lands in the app where the sidecar is a regular container and the pod names no
/// default container, and nowhere else.
#[test]
fn the_nodes_neighbours_are_told_what_the_patch_adds() {
    let pod = pod(
        json!({"name": "p", "annotations": {"watcher.dev/inject": "log-watcher",
            "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "cache, scratch",
            "kubectl.kubernetes.io/default-container": "web"}}),
        json!({"containers": [{"name": "app"}, {"name": "web"}], "restartPolicy": "Never"}),
    );
    let (_, patched) = run(&pod, &[full_watcher("Never")], &options(true));
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(
        annotations["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"],
        "cache,scratch,logs,watcher-supervise,watcher-dev-no-token"
    );
    assert_eq!(annotations["kubectl.kubernetes.io/default-container"], "web", "the pod's own stays");
    let (_, native) = run(&annotated("log-watcher"), &[full_watcher("Always")], &options(true));
    assert!(native["metadata"]["annotations"].get("kubectl.kubernetes.io/default-container").is_none());
}

/// A Watcher whose status says that no configuration of it was ever shipped (its first one is
/// refused, so there is no ConfigMap): the pod is admitted without its sidecar, which would wait
/// for that ConfigMap, with a warning and the `watcher.dev/left-out` annotation the pod
/// reconciler reports.
#[test]
fn a_watcher_whose_configuration_was_never_shipped_is_left_out() {
    let mut refused = full_watcher("Auto");
    refused.status = Some(
        serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": "False", "reason": "ConfigRefused",
            "message": "generation 1's configuration is not shipped, watcher-agent would refuse it: AGENT_RULE_X: bad",
            "lastTransitionTime": "2026-12-07T00:00:00Z"}]}))
        .expect("a status"),
    );
    let (injection, patched) = run(&annotated("log-watcher"), &[refused.clone()], &options(true));
    assert!(injection.injected.is_empty(), "{injection:?}");
    assert_eq!(injection.warnings.len(), 1, "{injection:?}");
    assert!(
        injection.warnings[0].starts_with("Watcher log-watcher not injected: no configuration of it was ever shipped")
    );
    let left_out = &patched["metadata"]["annotations"][watcher_api::annotation::LeftOut::KEY];
    assert!(left_out.as_str().is_some_and(|l| l.contains("AGENT_RULE_X: bad")), "{patched}");
    assert_eq!(patched["spec"]["initContainers"], Value::Null, "no sidecar: {patched}");

    // Once a ConfigMap holds a configuration (an earlier good one), the sidecar goes in.
    if let Some(status) = refused.status.as_mut() {
        status.config_map_name = Some("log-watcher-config".into());
    }
    let (injection, _) = run(&annotated("log-watcher"), &[refused], &options(true));
    assert_eq!(injection.injected, ["log-watcher"]);
}

/// watcher-agent's configuration as files (docs/agent.md, "Changing the configuration").
mod agent_config {
    use serde_json::{Value, json};
    use watcher_api::Watcher;

    use super::app::captured;
    use super::{options, run, watcher};

    fn agent(more: Value) -> Watcher {
        let mut spec = json!({
            "container": {"name": "log-watcher", "image": "registry.example/mirror/watcher-agent:0.2.0"},
            "configData": {"AGENT_FILES": "/data/*.log", "AGENT_RULE_ERROR": "ERROR"},
            "nativeSidecar": "Never",
        });
        for (key, value) in more.as_object().expect("object") {
            spec[key] = value.clone();
        }
        watcher("log-watcher", "team-a", spec)
    }

    fn sidecar_of(patched: &Value) -> Value {
        patched["spec"]["containers"].as_array().expect("containers").last().cloned().expect("sidecar")
    }

    fn volume<'a>(patched: &'a Value, name: &str) -> Option<&'a Value> {
        patched["spec"]["volumes"].as_array()?.iter().find(|v| v["name"] == name)
    }

    /// The agent gets its ConfigMap twice: as variables (`envFrom`), and mounted read-only where
    /// it reads it again (an optional volume: no pod waits for it).
    #[test]
    fn the_agents_config_map_is_mounted_beside_env_from() {
        let (injection, patched) = run(&captured(), &[agent(json!({}))], &options(true));
        assert_eq!(injection.injected, ["log-watcher"]);
        let sidecar = sidecar_of(&patched);
        assert_eq!(sidecar["envFrom"], json!([{"configMapRef": {"name": "log-watcher-config"}}]));
        assert_eq!(
            sidecar["volumeMounts"],
            json!([{"name": "log-watcher-config", "mountPath": "/etc/watcher-agent/config", "readOnly": true}])
        );
        assert_eq!(
            volume(&patched, "log-watcher-config"),
            Some(&json!({"name": "log-watcher-config", "configMap": {"name": "log-watcher-config", "optional": true}}))
        );
    }

    /// Every Watcher with config data is recorded on the pod with the hash of its configuration
    /// (`watcher.dev/injected-config`): what a sidecar that reads it once runs.
    #[test]
    fn the_configuration_injected_is_carried_by_the_pod() {
        let plain = agent(json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}}));
        let hash = plain.spec.config_hash().expect("config data").to_owned();
        let (_, patched) = run(&captured(), &[plain], &options(true));
        let key = watcher_api::annotation::InjectedConfig::KEY;
        assert_eq!(patched["metadata"]["annotations"][key], format!("log-watcher@{hash}"));
        let bare = agent(json!({"configData": null}));
        let (_, patched) = run(&captured(), &[bare], &options(true));
        assert_eq!(patched["metadata"]["annotations"][key], Value::Null);
    }

    /// Another sidecar, or an agent without config data: nothing mounted. An agent whose
    /// container names another directory: mounted there; one that mounts something there
    /// already: not mounted.
    #[test]
    fn only_an_agent_with_config_data_gets_it_where_it_reads_it() {
        let other = agent(json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}}));
        let (_, patched) = run(&captured(), &[other], &options(true));
        assert_eq!(volume(&patched, "log-watcher-config"), None);
        let bare = agent(json!({"configData": null}));
        let (_, patched) = run(&captured(), &[bare], &options(true));
        assert_eq!(volume(&patched, "log-watcher-config"), None);

        let elsewhere = agent(json!({"container": {"name": "log-watcher", "image": "watcher-agent:0.2.0",
            "env": [{"name": "AGENT_CONFIG_DIR", "value": "/config"}]}}));
        let (_, patched) = run(&captured(), &[elsewhere], &options(true));
        assert_eq!(sidecar_of(&patched)["volumeMounts"][0]["mountPath"], "/config");

        let taken = agent(json!({"container": {"name": "log-watcher", "image": "watcher-agent:0.2.0",
            "volumeMounts": [{"name": "own", "mountPath": "/etc/watcher-agent/config/"}]},
            "volume": {"name": "own", "emptyDir": {}}}));
        let (injection, patched) = run(&captured(), &[taken], &options(true));
        assert_eq!(injection.injected, ["log-watcher"]);
        assert_eq!(volume(&patched, "log-watcher-config"), None);
        assert_eq!(sidecar_of(&patched)["volumeMounts"].as_array().map(Vec::len), Some(1));
    }
}
