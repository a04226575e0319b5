//! The sidecar sees the app, over real pods: the pods of two public projects as kube-apiserver
//! 1.36 stores them (`fixtures/real-workloads/`: many containers, init containers, subPaths,
//! projected volumes, the ServiceAccount token mount), injected with every option of a
//! Watcher's `AppAccess`, alone and combined, first call and reinvocation. No patched pod breaks
//! a rule kube-apiserver refused a pod for (`fixtures/apiserver/pod-create-refused-*`).

use proptest::prelude::*;
use serde_json::{Value, json};
use watcher_admission::{InjectOptions, PodView, inject};
use watcher_api::{SERVICE_ACCOUNT_PATH, Watcher};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/");
const WORKLOADS: [&str; 4] = [
    "argo-cd-1.36-plain",
    "argo-cd-1.36-injected",
    "microservices-demo-1.36-plain",
    "microservices-demo-1.36-injected",
];

fn read(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}{path}")).expect("fixture")).expect("JSON")
}

/// Every pod of the four captures, with the file it came from.
fn pods() -> Vec<(&'static str, Value)> {
    WORKLOADS
        .iter()
        .flat_map(|file| {
            let list = read(&format!("real-workloads/{file}.json"));
            list["items"].as_array().expect("items").clone().into_iter().map(move |pod| (*file, pod))
        })
        .collect()
}

/// The Watcher the `-injected` captures were injected with (their README).
fn corpus() -> Watcher {
    watcher(
        "corpus",
        json!({"container": {"name": "corpus-sidecar", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
               "configData": {"LEVEL": "info"},
               "selector": {"matchExpressions": [{"key": "corpus.example/never", "operator": "DoesNotExist"}]}}),
    )
}

fn watcher(name: &str, spec: Value) -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
    .expect("valid Watcher")
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

/// What kube-apiserver refuses of a pod that a patch could cause, each as the field it names
/// and its reason: a volume name twice, a mountPath twice in a container, a mount (or device) of
/// a volume the pod lacks, a mount and a device of one volume or path, two containers of one
/// name, a shared process namespace beside the host's, annotations over 256 KiB.
fn refusals(pod: &Value) -> Vec<String> {
    let spec = &pod["spec"];
    let mut out = Vec::new();
    let volumes: Vec<&str> = items(&spec["volumes"]).filter_map(|v| v["name"].as_str()).collect();
    for (i, name) in volumes.iter().enumerate() {
        if volumes[..i].contains(name) {
            out.push(format!("spec.volumes[{i}].name: Duplicate value: {name:?}"));
        }
    }
    let mut names = Vec::new();
    for list in ["initContainers", "containers"] {
        for (c, container) in items(&spec[list]).enumerate() {
            let name = container["name"].as_str().unwrap_or_default();
            if names.contains(&name) {
                out.push(format!("spec.{list}[{c}].name: Duplicate value: {name:?}"));
            }
            names.push(name);
            let devices: Vec<(&str, &str)> = items(&container["volumeDevices"])
                .map(|d| (d["name"].as_str().unwrap_or_default(), d["devicePath"].as_str().unwrap_or_default()))
                .collect();
            let mut paths = Vec::new();
            for (m, mount) in items(&container["volumeMounts"]).enumerate() {
                let at = format!("spec.{list}[{c}].volumeMounts[{m}]");
                let (volume, path) =
                    (mount["name"].as_str().unwrap_or_default(), mount["mountPath"].as_str().unwrap_or_default());
                if paths.contains(&path) {
                    out.push(format!("{at}.mountPath: Invalid value: {path:?}: must be unique"));
                }
                paths.push(path);
                if !volumes.contains(&volume) {
                    out.push(format!("{at}.name: Not found: {volume:?}"));
                }
                if devices.iter().any(|(name, device)| *name == volume || *device == path) {
                    out.push(format!("{at}: a volumeDevice has that name or path"));
                }
                if mount["mountPropagation"] == "Bidirectional" && container["securityContext"]["privileged"] != true {
                    out.push(format!("{at}.mountPropagation: Bidirectional only in a privileged container"));
                }
            }
        }
    }
    if spec["shareProcessNamespace"] == true && spec["hostPID"] == true {
        out.push("spec.shareProcessNamespace: not with hostPID".to_owned());
    }
    let bytes: usize = pod["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if bytes > 256 * 1024 {
        out.push("metadata.annotations: Too long".to_owned());
    }
    out
}

/// The checker finds what kube-apiserver 1.36 and 1.24 refused, naming the same field.
#[test]
fn the_checker_refuses_what_kube_apiserver_refused() {
    let cases = [
        (
            "dup-mountpath",
            json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
                   "containers": [{"name": "c", "image": "busybox", "volumeMounts": [
                       {"name": "a", "mountPath": "/var/log"}, {"name": "b", "mountPath": "/var/log"}]}]}),
        ),
        (
            "missing-volume",
            json!({"containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "logs", "mountPath": "/x"}]}]}),
        ),
        (
            "dup-volume",
            json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}],
                   "containers": [{"name": "c", "image": "busybox"}]}),
        ),
    ];
    for (case, spec) in cases {
        let found = refusals(&json!({"metadata": {"name": "refused"}, "spec": spec}));
        for version in ["1.24", "1.36"] {
            let answer = read(&format!("apiserver/pod-create-refused-{case}-{version}.json"));
            let cause = &answer["details"]["causes"][0];
            let field = cause["field"].as_str().expect("field");
            let message = cause["message"].as_str().expect("message");
            assert_eq!(found, [format!("{field}: {message}")], "{case} on {version}");
        }
    }
}

/// The copies in this crate are the files kube-apiserver's clusters gave, unchanged.
#[test]
fn fixtures_are_the_shared_captures() {
    for dir in ["real-workloads", "apiserver", "pod-security"] {
        let shared = format!("{}/../../shared/fixtures/{dir}/", env!("CARGO_MANIFEST_DIR"));
        let Ok(entries) = std::fs::read_dir(&shared) else { return }; // a checkout without shared/
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if dir == "apiserver" && !name.starts_with("pod-create-refused-") && name != "README.pods.md" {
                continue;
            }
            let ours = std::fs::read(format!("{FIXTURES}{dir}/{name}")).unwrap_or_default();
            assert_eq!(ours, std::fs::read(entry.path()).expect("readable"), "{dir}/{name} differs from shared/");
        }
    }
}

/// What the ServiceAccount plugin does to a pod that a webhook changed, before it calls the
/// webhook again: the token volume mounted into every container that lacks it.
fn service_account_plugin(pod: &mut Value) {
    let Some(token) = items(&pod["spec"]["volumes"])
        .find(|v| v["name"].as_str().is_some_and(|n| n.starts_with("kube-api-access-")))
        .and_then(|v| v["name"].as_str())
        .map(str::to_owned)
    else {
        return;
    };
    for list in ["initContainers", "containers"] {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            let has = items(&container["volumeMounts"]).any(|m| m["mountPath"] == SERVICE_ACCOUNT_PATH);
            if !has {
                let mount = json!({"name": token, "readOnly": true, "mountPath": SERVICE_ACCOUNT_PATH});
                match container["volumeMounts"].as_array_mut() {
                    Some(mounts) => mounts.push(mount),
                    None => container["volumeMounts"] = json!([mount]),
                }
            }
        }
    }
}

/// A Watcher's spec from the options the property draws.
#[allow(clippy::too_many_arguments)]
fn viewer_spec(
    pod: &Value,
    share: &str,
    volume: &str,
    own_mount: Option<&str>,
    app_mounts: usize,
    app_containers: usize,
    transfer: usize,
    process: bool,
    annotations: usize,
    inits: usize,
    native: &str,
) -> Value {
    let first = &pod["spec"]["containers"][0];
    let first_name = first["name"].as_str().unwrap_or("app");
    let first_env: Vec<&str> = items(&first["env"]).filter_map(|e| e["name"].as_str()).take(2).collect();
    let mut container = json!({"name": "viewer", "image": "busybox:1.36", "command": ["sleep", "infinity"]});
    if let Some(path) = own_mount {
        container["volumeMounts"] = json!([{"name": volume, "mountPath": path}]);
    }
    if transfer == 3 {
        container["env"] = json!([{"name": first_env.first().copied().unwrap_or("X"), "value": "own"}]);
    }
    let mut spec = json!({"container": container, "volume": {"name": volume, "emptyDir": {}},
                          "shareVolumes": share, "nativeSidecar": native, "selector": {}});
    spec["appVolumeMounts"] = match app_mounts {
        1 => json!([{"mountPath": "/var/log/app"}]),
        2 => json!([{"mountPath": "/tmp"}]),
        3 => json!([{"mountPath": "/var/log/app", "subPath": "logs", "readOnly": true}, {"mountPath": "/tmp/"}]),
        _ => json!([]),
    };
    spec["appContainers"] = match app_containers {
        1 => json!([first_name]),
        2 => json!(["nope"]),
        _ => json!([]),
    };
    let mut names: Vec<&str> = first_env.clone();
    names.push("MISSING");
    spec["transferEnv"] = match transfer {
        1 | 3 => json!([{"names": names}]),
        2 => json!([{"container": "nope", "names": names}, {"container": first_name, "names": ["HOSTNAME"]}]),
        _ => json!([]),
    };
    if process {
        spec["shareProcessNamespace"] = json!(true);
    }
    spec["podAnnotations"] = match annotations {
        1 => json!({"prometheus.io/scrape": "true", "prometheus.io/port": "9102"}),
        2 => json!({"sidecar.istio.io/rewriteAppHTTPProbers": "false"}),
        _ => json!({}),
    };
    spec["initContainers"] = match inits {
        1 => json!([{"name": "prepare-watch", "image": "busybox:1.36", "command": ["true"],
                     "volumeMounts": [{"name": volume, "mountPath": "/work"}]}]),
        2 => json!([{"name": "prepare-watch", "image": "busybox:1.36"}, {"name": "copyutil", "image": "busybox:1.36"}]),
        _ => json!([]),
    };
    spec
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every option alone and combined, over every real pod: the patch applies, the pod stays
    /// one kube-apiserver takes, the sidecar shares only app mounts (never the token), and the
    /// reinvocation after the ServiceAccount plugin changes nothing.
    #[test]
    fn no_patched_real_pod_is_refused(
        pod in 0..pods().len(),
        share in prop::sample::select(vec!["None", "ReadOnly", "ReadWrite"]),
        volume in prop::sample::select(vec!["app-logs", "tmp", "static-files"]),
        own_mount in proptest::option::of(prop::sample::select(vec!["/var/log/app", "/tmp", "/data"])),
        app_mounts in 0..4_usize, app_containers in 0..3_usize, transfer in 0..4_usize,
        process in any::<bool>(), annotations in 0..3_usize, inits in 0..3_usize,
        native in prop::sample::select(vec!["Auto", "Never"]), native_sidecars in any::<bool>(),
    ) {
        let (file, pod) = pods().swap_remove(pod);
        let spec = viewer_spec(&pod, share, volume, own_mount, app_mounts, app_containers, transfer, process,
                               annotations, inits, native);
        let watchers = [corpus(), watcher("viewer", spec)];
        let refs: Vec<&Watcher> = watchers.iter().collect();
        let options = InjectOptions { excluded_namespaces: vec![], native_sidecars, server_minor: None, ..Default::default() };
        prop_assert_eq!(refusals(&pod), Vec::<String>::new(), "{} as stored", file);

        let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
        let first = inject(&view, "team-a", &refs, &options);
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &first.patch).expect("the patch applies");
        prop_assert_eq!(refusals(&patched), Vec::<String>::new(), "{} patched: {:?}", file, first.patch);
        // As the webhook writes it: the operations applied, serialised.
        let mut written = Vec::new();
        first.patch.write(&mut written);
        prop_assert_eq!(written, serde_json::to_vec(&*first.patch).expect("serialises"), "{} written", file);

        if first.injected.iter().any(|w| w == "viewer") {
            let sidecar = items(&patched["spec"]["containers"]).chain(items(&patched["spec"]["initContainers"]))
                .find(|c| c["name"] == "viewer").expect("the sidecar");
            let apps: Vec<&Value> = items(&pod["spec"]["containers"]).collect();
            for mount in items(&sidecar["volumeMounts"]) {
                let path = mount["mountPath"].as_str().unwrap_or_default();
                prop_assert!(path != SERVICE_ACCOUNT_PATH, "the token is never shared");
                let own = own_mount == Some(path);
                let from_app = apps.iter().any(|c| items(&c["volumeMounts"]).any(|m| m["mountPath"] == path && m["name"] == mount["name"]));
                prop_assert!(own || from_app, "{} shares {} from no app container", file, path);
                if share == "ReadOnly" && !own {
                    prop_assert_eq!(&mount["readOnly"], &json!(true));
                }
            }
            // A report whenever any field is set (the step is skipped otherwise), with a line.
            let none_set = share == "None" && app_mounts == 0 && app_containers == 0 && transfer == 0 && !process
                && annotations == 0 && inits == 0;
            match first.app.iter().find(|r| r.watcher == "viewer") {
                Some(report) => prop_assert!(!report.lines.is_empty() || app_containers != 0, "{:?}", report),
                None => prop_assert!(none_set, "no report with fields set"),
            }
        }

        service_account_plugin(&mut patched);
        prop_assert_eq!(refusals(&patched), Vec::<String>::new(), "{} after the ServiceAccount plugin", file);
        let view: PodView = serde_json::from_value(patched.clone()).expect("a pod");
        let second = inject(&view, "team-a", &refs, &options);
        prop_assert!(second.patch.is_empty(), "reinvocation patched again: {:?}", second.patch);
    }
}
