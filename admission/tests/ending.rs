//! Pods that are meant to end, prepared at admission so that their sidecars end with the app:
//! real Job pods as kube-apiserver stored them (`fixtures/ending/`, captured on a 1.24 node),
//! injected with sidecars that set a command and sidecars that do not, on servers with and
//! without native sidecars; and pods that are not meant to end, left as before.

use serde_json::{Value, json};
use watcher_admission::pod_security::{Level, NamespaceLevels, Policy, evaluate};
use watcher_admission::{InjectOptions, Injection, PodView, inject, inject_at_level};
use watcher_api::{END_SIDECARS_LABEL, Watcher, annotation};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/");

fn read(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}{path}")).expect("fixture")).expect("JSON")
}

fn watcher(name: &str, spec: Value) -> Watcher {
    let namespace = "capture";
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": spec}))
    .expect("valid Watcher")
}

/// A busybox sidecar that ignores SIGTERM, asked for by every pod (selector on nothing).
fn stubborn() -> Watcher {
    watcher(
        "stubborn",
        json!({"selector": {}, "container": {"name": "stubborn", "image": "busybox:1.36",
               "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"], "args": ["x"]}}),
    )
}

/// watcher-agent, which runs its image's entrypoint and ends by itself.
fn agent() -> Watcher {
    watcher("agent", json!({"selector": {}, "container": {"name": "agent", "image": "watcher-agent:0.2.0"}}))
}

/// A sidecar that runs another image's entrypoint.
fn entrypoint() -> Watcher {
    watcher("looper", json!({"selector": {}, "container": {"name": "looper", "image": "e2e-looper:0.1.0"}}))
}

/// The downward API volume of the ended file, as every pod with a sidecar that reads it gets it.
fn ended_volume() -> Value {
    json!({"name": "watcher-ended", "downwardAPI": {"items": [{"path": "ended",
        "fieldRef": {"fieldPath": "metadata.annotations['watcher.dev/sidecars-ended']"}}]}})
}

fn ended_mount() -> Value {
    json!({"name": "watcher-ended", "mountPath": "/watcher-ended", "readOnly": true})
}

fn options(native: bool) -> InjectOptions {
    InjectOptions { native_sidecars: native, server_minor: Some(if native { 36 } else { 24 }), ..Default::default() }
}

/// `pod` patched by `injection` (whose patch, as the webhook writes it, is its operations
/// serialised).
fn patched(pod: &Value, injection: &Injection) -> Value {
    let mut written = Vec::new();
    injection.patch.write(&mut written);
    assert_eq!(written, serde_json::to_vec(&*injection.patch).expect("serialises"), "as the webhook writes it");
    let mut pod = pod.clone();
    json_patch::patch(&mut pod, &injection.patch).expect("the patch applies");
    pod
}

fn container<'a>(pod: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    pod["spec"][list].as_array().into_iter().flatten().find(|c| c["name"] == name)
}

fn injected(pod: &Value, watchers: &[Watcher], native: bool) -> (Injection, Value) {
    let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
    let namespace = pod["metadata"]["namespace"].as_str().expect("namespace");
    let watchers: Vec<Watcher> = watchers
        .iter()
        .cloned()
        .map(|mut w| {
            w.metadata.namespace = Some(namespace.to_owned());
            w
        })
        .collect();
    let injection = inject(&view, namespace, &watchers, &options(native));
    let after = patched(pod, &injection);
    (injection, after)
}

const VERSIONS: [&str; 2] = ["1.24", "1.36"];

#[test]
fn a_job_s_regular_sidecar_runs_under_the_supervisor() {
    for version in VERSIONS {
        a_job_s_regular_sidecar_runs_under_the_supervisor_on(version);
    }
}

fn a_job_s_regular_sidecar_runs_under_the_supervisor_on(version: &str) {
    let pod = read(&format!("ending/job-{version}-plain.json"));
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let (injection, after) = injected(&pod, &[stubborn()], false);
    assert_eq!(injection.injected, ["stubborn"], "{:?}", injection.warnings);
    let sidecar = container(&after, "containers", "stubborn").expect("a regular container");
    assert_eq!(
        sidecar["command"],
        json!([
            "/watcher-supervise/watcher-supervise",
            "run",
            "--ended-file",
            "/watcher-ended/ended",
            "--",
            "sh",
            "-c",
            "trap '' TERM; while true; do sleep 1; done"
        ])
    );
    assert_eq!(sidecar["args"], json!(["x"]), "args stay: the runtime appends them to the command");
    let mounts = sidecar["volumeMounts"].as_array().expect("mounts");
    assert!(
        mounts.contains(&json!({"name": "watcher-supervise", "mountPath": "/watcher-supervise", "readOnly": true}))
    );
    assert!(mounts.contains(&ended_mount()), "the supervisor reads the ended file: {mounts:?}");
    let init = after["spec"]["initContainers"].as_array().expect("init containers");
    assert_eq!(init[0]["name"], "watcher-supervise", "before the pod's own init containers");
    assert_eq!(init[0]["image"], "watcher-supervise:0.2.0");
    assert_eq!(init[0]["command"], json!(["/usr/local/bin/watcher-supervise", "install", "/watcher-supervise"]));
    // No API token for it: nothing for the ServiceAccount plugin to add, no reinvocation.
    assert!(init[0]["volumeMounts"].as_array().expect("mounts").contains(&json!({"name": "watcher-dev-no-token",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true})));
    let volumes = after["spec"]["volumes"].as_array().expect("volumes");
    assert!(volumes.contains(&json!({"name": "watcher-supervise", "emptyDir": {"sizeLimit": "16Mi"}})));
    assert!(volumes.contains(&json!({"name": "watcher-dev-no-token", "emptyDir": {}})));
    assert!(volumes.contains(&ended_volume()), "{volumes:?}");
    assert_eq!(after["metadata"]["labels"][END_SIDECARS_LABEL], "true");
    assert_eq!(after["metadata"]["annotations"][annotation::EndSidecars::KEY], "stubborn");
    // Its own labels are kept: the Job still owns the pod.
    assert_eq!(after["metadata"]["labels"]["job-name"], pod["metadata"]["labels"]["job-name"]);
}

#[test]
fn a_sidecar_without_a_command_is_named_and_left_as_it_is() {
    let pod = read("ending/job-1.24-plain.json");
    let (injection, after) = injected(&pod, &[entrypoint()], false);
    assert_eq!(injection.injected, ["looper"]);
    let sidecar = container(&after, "containers", "looper").expect("a regular container");
    assert_eq!(sidecar.get("command"), None, "the image's entrypoint runs");
    assert_eq!(sidecar.get("volumeMounts"), None, "it cannot read the ended file: switched instead");
    assert_eq!(sidecar.get("env"), None);
    assert!(container(&after, "initContainers", "watcher-supervise").is_none(), "no supervisor to copy");
    let volumes = after["spec"]["volumes"].as_array().expect("volumes");
    assert!(!volumes.iter().any(|v| v["name"] == "watcher-ended"), "{volumes:?}");
    assert_eq!(after["metadata"]["annotations"][annotation::EndSidecars::KEY], "looper");
    assert_eq!(after["metadata"]["labels"][END_SIDECARS_LABEL], "true");

    // With one of each, one supervisor serves the wrapped one; both are named.
    let (_, after) = injected(&pod, &[entrypoint(), stubborn()], false);
    let init = after["spec"]["initContainers"].as_array().expect("init containers");
    assert_eq!(init.iter().filter(|c| c["name"] == "watcher-supervise").count(), 1);
    assert_eq!(after["metadata"]["annotations"][annotation::EndSidecars::KEY], "looper,stubborn");
}

/// watcher-agent runs its image's entrypoint and reads the ended file itself: told where it is,
/// no supervisor, named for the operator to write the mark.
#[test]
fn the_agent_is_told_of_the_ended_file() {
    for native in [false, true] {
        let pod = read("ending/job-1.24-plain.json");
        let (injection, after) = injected(&pod, &[agent()], native);
        assert_eq!(injection.injected, ["agent"]);
        let list = if native { "initContainers" } else { "containers" };
        let sidecar = container(&after, list, "agent").expect("the agent");
        assert_eq!(sidecar.get("command"), None, "the image's entrypoint runs");
        assert_eq!(sidecar["env"], json!([{"name": "WATCHER_ENDED_FILE", "value": "/watcher-ended/ended"}]));
        assert_eq!(sidecar["volumeMounts"], json!([ended_mount()]));
        assert!(container(&after, "initContainers", "watcher-supervise").is_none(), "no supervisor to copy");
        assert!(after["spec"]["volumes"].as_array().expect("volumes").contains(&ended_volume()));
        let named = after["metadata"]["annotations"].get(annotation::EndSidecars::KEY).and_then(Value::as_str);
        assert_eq!(named, if native { None } else { Some("agent") });
    }
}

/// A native sidecar is stopped by the kubelet once the app has ended: it runs under the
/// supervisor (so that one that ignores SIGTERM stops within seconds, not the pod's grace
/// period), and the pod is not labelled for the operator. `nativeSidecar: Never` on the same
/// server is a regular container, supervised and named.
#[test]
fn native_sidecars_are_supervised_and_never_is_named_on_any_server() {
    let pod = read("ending/job-1.24-plain.json");
    let (injection, after) = injected(&pod, &[stubborn()], true);
    assert_eq!(injection.injected, ["stubborn"]);
    let init = after["spec"]["initContainers"].as_array().expect("init containers");
    let names: Vec<&str> = init.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["watcher-supervise", "stubborn"], "the supervisor is copied before the sidecar starts");
    assert_eq!(init[1]["command"][0], "/watcher-supervise/watcher-supervise");
    assert_eq!(init[1]["restartPolicy"], "Always");
    assert_eq!(after["metadata"]["labels"].get(END_SIDECARS_LABEL), None);
    assert_eq!(after["metadata"]["annotations"].get(annotation::EndSidecars::KEY), None);

    // Without a command the kubelet's SIGTERM reaches the image's own process: nothing added.
    let (_, after) = injected(&pod, &[entrypoint()], true);
    let names: Vec<&str> =
        after["spec"]["initContainers"].as_array().expect("init").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["looper"]);

    let mut never = stubborn();
    never.spec.native_sidecar = watcher_api::NativeSidecar::Never;
    let (_, after) = injected(&pod, &[never], true);
    let sidecar = container(&after, "containers", "stubborn").expect("a regular container");
    assert_eq!(sidecar["command"][0], "/watcher-supervise/watcher-supervise");
    assert_eq!(after["metadata"]["annotations"][annotation::EndSidecars::KEY], "stubborn");
}

/// Pods that run for ever (restartPolicy Always, as every Deployment's) are injected as before.
#[test]
fn pods_not_meant_to_end_are_injected_as_before() {
    for file in ["real-workloads/argo-cd-1.36-plain.json", "real-workloads/microservices-demo-1.36-plain.json"] {
        let list = read(file);
        for pod in list["items"].as_array().expect("items") {
            assert_eq!(pod["spec"]["restartPolicy"], "Always", "{file}");
            let other = watcher(
                "other",
                json!({"selector": {},
                "container": {"name": "other", "image": "busybox:1.36", "command": ["sleep", "1d"]}}),
            );
            let (injection, after) = injected(pod, &[other], false);
            assert_eq!(injection.injected, ["other"], "{file}");
            let sidecar = container(&after, "containers", "other").expect("injected");
            assert_eq!(sidecar["command"], json!(["sleep", "1d"]), "{file}");
            assert_eq!(after["metadata"]["annotations"].get(annotation::EndSidecars::KEY), None, "{file}");
            assert!(container(&after, "initContainers", "watcher-supervise").is_none(), "{file}");
        }
    }
}

/// Reinvocation is a no-op; a later pass that injects another Watcher names it beside the first.
#[test]
fn reinvocation_changes_nothing_and_a_later_watcher_is_named_too() {
    let pod = read("ending/job-1.24-plain.json");
    let (_, first) = injected(&pod, &[stubborn()], false);
    let (again, _) = injected(&first, &[stubborn()], false);
    assert!(again.patch.is_empty(), "{:?}", again.patch);
    let mut second = watcher(
        "second",
        json!({"selector": {}, "container": {"name": "second",
        "image": "busybox:1.36", "command": ["sleep", "1d"]}}),
    );
    second.metadata.namespace = Some("capture".into());
    let (injection, after) = injected(&first, &[stubborn(), second], false);
    assert_eq!(injection.injected, ["second"]);
    assert_eq!(after["metadata"]["annotations"][annotation::EndSidecars::KEY], "stubborn,second");
    let init = after["spec"]["initContainers"].as_array().expect("init containers");
    assert_eq!(init.iter().filter(|c| c["name"] == "watcher-supervise").count(), 1, "one supervisor");
    let volumes = after["spec"]["volumes"].as_array().expect("volumes");
    assert_eq!(volumes.iter().filter(|v| v["name"] == "watcher-supervise").count(), 1);
}

/// In a `restricted` namespace the supervisor is no reason to refuse a pod: the README's Job
/// (which passes `restricted` by itself) as 1.24 and 1.36 stored it, with a hardened sidecar,
/// passes it patched, on 1.24's rules and 1.36's, as a regular and as a native sidecar.
#[test]
fn the_supervisor_passes_restricted() {
    for version in VERSIONS {
        the_supervisor_passes_restricted_on(version);
    }
}

fn the_supervisor_passes_restricted_on(version: &str) {
    let pod = read(&format!("ending/job-{version}-restricted.json"));
    let hardened = watcher(
        "stubborn",
        json!({"selector": {}, "container": {"name": "stubborn", "image": "busybox:1.36",
               "command": ["sleep", "1d"],
               "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                                   "runAsNonRoot": true, "runAsUser": 65534,
                                   "seccompProfile": {"type": "RuntimeDefault"}}}}),
    );
    let mut hardened = hardened;
    hardened.metadata.namespace = pod["metadata"]["namespace"].as_str().map(str::to_owned);
    let labels = [("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned())].into();
    let levels = NamespaceLevels::from_labels(&labels);
    for (server, native) in [(24, false), (36, false), (36, true)] {
        let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
        let policy = Policy { level: Level::Restricted, version: None };
        assert!(evaluate(&view.security_facts(), policy, server).passed(), "the Job passes by itself");
        let options = InjectOptions { native_sidecars: native, server_minor: Some(server), ..Default::default() };
        let namespace = pod["metadata"]["namespace"].as_str().expect("namespace");
        let injection = inject_at_level(&view, namespace, std::slice::from_ref(&hardened), &options, &levels);
        assert_eq!(injection.injected, ["stubborn"], "{server}: {:?}", injection.warnings);
        let after = patched(&pod, &injection);
        assert!(container(&after, "initContainers", "watcher-supervise").is_some());
        let view: PodView = serde_json::from_value(after).expect("a pod");
        let verdict = evaluate(&view.security_facts(), policy, server);
        assert!(verdict.passed(), "1.{server}: {verdict}");
    }
}
