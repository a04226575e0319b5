//! The chart's ValidatingAdmissionPolicies held to the annotation codec: `watcher-operator-pods`
//! rendered as Helm renders it and evaluated with kube-cel, as kube-apiserver evaluates it, on
//! pods kube-apiserver stored whose `watcher.dev/` annotations `watcher_api`'s codec wrote. A
//! change to an annotation's format, or to the supervisor's image value, fails here, not only in
//! the e2e run on 1.30 and later.

use std::collections::HashMap;

use kube_cel::{KubeCelExt, cel};
use serde_json::{Value, json};
use watcher_api::annotation::{EndSidecars, SidecarUpdated, Sidecars, SidecarsEnded};

use super::{VAP, find, render_for};

const OPERATOR: &str = "system:serviceaccount:watcher-system:watcher-operator";
const SUPERVISOR: &str = "mirror.example/watcher-supervise";

/// The stored pods: 1.36's native sidecar, 1.24's regular one (`log-watcher`), as kube-apiserver
/// stored them after the webhook injected them.
fn stored_pods() -> Vec<(&'static str, Value)> {
    let read = |name: &str| -> Value {
        let path = format!("{}/controller/fixtures/stored-pods/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).expect("a stored pod")).expect("json")
    };
    vec![("1.36", read("pod-1.36-plain.json")), ("1.24", read("pod-1.24-plain.json"))]
}

/// What the policy says of the operator's `operation` from `old` to `new`: `Ok` where every
/// validation holds, else the message of the first that does not. An evaluation error fails the
/// test: kube-apiserver would refuse the request (failurePolicy Fail).
fn verdict(policy: &Value, operation: &str, old: &Value, new: &Value) -> Result<(), String> {
    let request = json!({"operation": operation, "dryRun": false, "userInfo": {"username": OPERATOR}});
    let mut context = cel::Context::default();
    context.register_all();
    context.add_variable("request", &request).expect("request");
    context.add_variable("object", new).expect("object");
    context.add_variable("oldObject", old).expect("oldObject");
    let run = |context: &cel::Context, expression: &str| {
        let program = cel::Program::compile(expression).unwrap_or_else(|e| panic!("{e}: {expression}"));
        program.execute(context).unwrap_or_else(|e| panic!("{e}: {expression}"))
    };
    let spec = &policy["spec"];
    for condition in spec["matchConditions"].as_array().into_iter().flatten() {
        let expression = condition["expression"].as_str().expect("expression");
        assert_eq!(run(&context, expression), cel::Value::Bool(true), "the operator's requests match: {expression}");
    }
    let mut variables: HashMap<String, cel::Value> = HashMap::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let value = run(&context, variable["expression"].as_str().expect("expression"));
        variables.insert(variable["name"].as_str().expect("name").to_owned(), value);
        context.add_variable_from_value("variables", variables.clone());
    }
    for validation in spec["validations"].as_array().expect("validations") {
        let expression = validation["expression"].as_str().expect("expression");
        match run(&context, expression) {
            cel::Value::Bool(true) => {}
            cel::Value::Bool(false) => return Err(validation["message"].as_str().unwrap_or_default().to_owned()),
            other => panic!("a validation must be a bool, got {other:?}: {expression}"),
        }
    }
    Ok(())
}

/// `pod` with the annotations the webhook writes on a pod it injects, written by the codec:
/// its sidecars (two, so that the separator counts), and for a pod that is meant to end those
/// to end. `sidecars: false`: a pod admitted before `watcher.dev/sidecars` was written.
fn injected(pod: &Value, sidecars: bool, ending: bool) -> Value {
    let mut pod = pod.clone();
    let annotations = &mut pod["metadata"]["annotations"];
    if sidecars {
        annotations[Sidecars::KEY] = json!(Sidecars::encode(&["log-agent", "log-watcher"]));
    }
    if ending {
        annotations[EndSidecars::KEY] = json!(EndSidecars::encode(&["log-agent", "log-watcher"]));
    }
    pod
}

/// The container named `name` of `pod`, in `containers` or `initContainers`.
fn container<'p>(pod: &'p mut Value, name: &str) -> &'p mut Value {
    let spec = pod["spec"].as_object_mut().expect("spec");
    let lists = spec.iter_mut().filter(|(k, _)| *k == "containers" || *k == "initContainers");
    let mut all = lists.flat_map(|(_, list)| list.as_array_mut().expect("a list").iter_mut());
    all.find(|c| c["name"] == name).unwrap_or_else(|| panic!("no container {name}"))
}

#[test]
fn the_pods_policy_admits_what_the_operator_writes_and_refuses_the_rest() {
    let Some(chart) = render_for("watcher-system", &[&format!("supervisor.image.repository={SUPERVISOR}")], &[VAP])
    else {
        return;
    };
    let policy = find(&chart, "ValidatingAdmissionPolicy", "watcher-operator-pods").expect("the pods policy");
    let supervisor = format!("{SUPERVISOR}:{}", env!("CARGO_PKG_VERSION"));
    let now = jiff::Timestamp::from_second(1_800_000_000).expect("a time");
    for (version, stored) in stored_pods() {
        let pod = injected(&stored, true, false);
        // An in-place update: the sidecar's image, and when.
        let mut updated = pod.clone();
        container(&mut updated, "log-watcher")["image"] = json!("busybox:1.37");
        updated["metadata"]["annotations"][SidecarUpdated::KEY] = json!(SidecarUpdated::encode(now));
        assert_eq!(verdict(policy, "UPDATE", &pod, &updated), Ok(()), "{version}: an in-place update");

        // A pod that is meant to end: its ending marked, its sidecar switched to the supervisor.
        let ending = injected(&stored, true, true);
        let mut ended = ending.clone();
        ended["metadata"]["annotations"][SidecarsEnded::KEY] = json!(SidecarsEnded::encode(now));
        container(&mut ended, "log-watcher")["image"] = json!(supervisor);
        assert_eq!(verdict(policy, "UPDATE", &ending, &ended), Ok(()), "{version}: a sidecar ended");
        // Admitted before `watcher.dev/sidecars`: a sidecar to end goes to the supervisor's
        // image (the chart's value), to no other.
        let older = injected(&stored, false, true);
        let mut switched = older.clone();
        container(&mut switched, "log-watcher")["image"] = json!(supervisor);
        assert_eq!(verdict(policy, "UPDATE", &older, &switched), Ok(()), "{version}: ended on an older pod");
        container(&mut switched, "log-watcher")["image"] = json!("busybox:1.37");
        let said = verdict(policy, "UPDATE", &older, &switched).expect_err("not the supervisor");
        assert!(said.starts_with("watcher-operator changes the image of no container"), "{version}: {said}");

        // What the fence refuses, whoever holds the operator's token.
        let refused = |what: &str, change: &dyn Fn(&mut Value)| {
            let mut changed = pod.clone();
            change(&mut changed);
            let said = verdict(policy, "UPDATE", &pod, &changed).expect_err(what);
            assert!(said.starts_with("watcher-operator "), "{version}: {what}: {said}");
        };
        refused("the app's image", &|p| container(p, "app")["image"] = json!("evil:latest"));
        refused("the sidecars' list", &|p| {
            p["metadata"]["annotations"][Sidecars::KEY] = json!(Sidecars::encode(&["log-agent", "log-watcher", "app"]));
        });
        refused("an annotation not the operator's", &|p| p["metadata"]["annotations"]["team"] = json!("x"));
        refused("a command", &|p| container(p, "log-watcher")["command"] = json!(["sh", "-c", "curl evil"]));
        let mut not_ending = pod.clone();
        container(&mut not_ending, "app")["image"] = json!(supervisor);
        assert!(verdict(policy, "UPDATE", &pod, &not_ending).is_err(), "{version}: the app is never switched");
    }
}
