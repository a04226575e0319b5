//! The namespace's ResourceQuotas and LimitRanges hold after the patch, over real pods: the pods
//! of two public projects as kube-apiserver 1.36 stores them (`fixtures/real-workloads/`), in a
//! namespace with the LimitRange and the quota kube-apiserver stored (`fixtures/resources/`),
//! injected with Watchers of every kind of resources. A pod that passes the rules by itself
//! passes them patched, or the Watcher is left out and the patch has none of it; a Watcher that
//! can be fitted is never left out.

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use proptest::prelude::*;
use serde_json::{Value, json};
use watcher_admission::resources::{PodResourceView, ResourceRules, describe};
use watcher_admission::{Guards, InjectOptions, PodView, inject_guarded};
use watcher_api::Watcher;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/");

fn fixture(path: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}{path}")).expect("fixture");
    serde_json::from_str(&text).expect("JSON")
}

fn pods() -> Vec<Value> {
    ["argo-cd-1.36-plain.json", "microservices-demo-1.36-plain.json"]
        .iter()
        .flat_map(|file| fixture(&format!("real-workloads/{file}"))["items"].as_array().expect("items").clone())
        .collect()
}

/// The LimitRange kube-apiserver stored (min 50m/32Mi, max 500m/512Mi, cpu ratio 4, defaults).
fn limit_range() -> LimitRange {
    serde_json::from_value(fixture("resources/limitrange-1.36.json")).expect("LimitRange")
}

/// The quota kube-apiserver stored, with `hard` and `used` as given.
fn quota(limits_cpu: &str, used_cpu: &str) -> ResourceQuota {
    let mut quota = fixture("resources/resourcequota-1.36.json");
    for part in ["spec", "status"] {
        quota[part]["hard"] = json!({"requests.cpu": "64", "requests.memory": "64Gi", "limits.cpu": limits_cpu,
            "limits.memory": "64Gi"});
    }
    quota["status"]["used"]["limits.cpu"] = json!(used_cpu);
    serde_json::from_value(quota).expect("ResourceQuota")
}

/// The resources a Watcher's container may state, and whether any value meets the LimitRange.
const RESOURCES: [&str; 6] = ["unset", "small", "large", "requests-only", "limits-only", "wide-ratio"];

fn resources(kind: &str) -> Option<Value> {
    match kind {
        "small" => {
            Some(json!({"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "20m", "memory": "16Mi"}}))
        }
        "large" => Some(json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})),
        "requests-only" => Some(json!({"requests": {"cpu": "100m", "memory": "64Mi"}})),
        "limits-only" => Some(json!({"limits": {"cpu": "300m", "memory": "128Mi"}})),
        "wide-ratio" => Some(json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "500m"}})),
        _ => None,
    }
}

fn watcher(spec: Value) -> Watcher {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "viewer", "namespace": "team-a"}, "spec": spec}))
    .expect("valid Watcher")
}

fn container(name: &str, kind: &str) -> Value {
    let mut container = json!({"name": name, "image": "busybox:1.36", "command": ["sleep", "infinity"]});
    if let Some(resources) = resources(kind) {
        container["resources"] = resources;
    }
    container
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_pod_that_passes_its_namespaces_resource_rules_passes_them_patched(
        pod in 0..pods().len(),
        sidecar in 0..RESOURCES.len(),
        init in proptest::option::of(0..RESOURCES.len()),
        with_limit_range in any::<bool>(),
        quota_room in prop::sample::select(vec!["none", "plenty", "tight"]),
        native in any::<bool>(),
        ends in any::<bool>(),
    ) {
        let mut pod = pods().swap_remove(pod);
        if ends {
            pod["spec"]["restartPolicy"] = json!("Never");
        }
        let every_pod = json!({"matchExpressions": [{"key": "corpus.example/never", "operator": "DoesNotExist"}]});
        let mut spec = json!({"container": container("viewer", RESOURCES[sidecar]),
            "nativeSidecar": if native { "Always" } else { "Never" }, "selector": every_pod});
        if let Some(init) = init {
            spec["initContainers"] = json!([container("viewer-init", RESOURCES[init])]);
        }
        let range = limit_range();
        let quota = match quota_room {
            "plenty" => Some(quota("64", "0")),
            "tight" => Some(quota("64", "63900m")),
            _ => None,
        };
        let rules = ResourceRules::new(with_limit_range.then_some(&range), quota.as_ref());
        let watchers = [watcher(spec)];
        let options = InjectOptions { native_sidecars: native, ..Default::default() };
        let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
        let levels = Default::default();
        let injection = inject_guarded(&view, "team-a", &watchers, &options, &Guards { levels: &levels, resources: &rules });
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &injection.patch).expect("the patch applies");
        let after: PodView = serde_json::from_value(patched.clone()).expect("a pod");
        let injected = injection.injected.iter().any(|w| w == "viewer");
        let before = rules.check(&PodResourceView::of(&view));
        let added = rules.added(&PodResourceView::of(&view), &PodResourceView::of(&after));
        prop_assert!(added.is_empty(), "patched, the pod fails {}", describe(&added));
        if before.is_empty() {
            prop_assert!(rules.check(&PodResourceView::of(&after)).is_empty());
        }
        // Only the quota's room, which the tight quota has not, can keep a Watcher out.
        if quota_room != "tight" {
            prop_assert!(injected, "{:?}", injection.warnings);
        }
        if !injected {
            let text = serde_json::to_string(&patched).expect("JSON");
            prop_assert!(!text.contains("\"viewer\""), "the patch has none of the Watcher left out");
            prop_assert!(injection.warnings.iter().any(|w| w.contains("exceeded quota: team")), "{:?}", injection.warnings);
        }
    }
}

/// The captured cases of kube-apiserver's refusals, now admitted: the pod of each request with
/// its Watcher's container as a Watcher's.
fn admitted(case: &str, rules: &ResourceRules, required: bool) -> (Value, watcher_admission::Injection) {
    let mut pod = fixture(&format!("resources/{case}-request.json"));
    let tail = pod["spec"]["containers"].as_array_mut().expect("containers").pop().expect("tail");
    pod["metadata"]["annotations"] = json!({"watcher.dev/inject": "tail"});
    let mut spec = json!({"container": tail});
    if required {
        spec["failurePolicy"] = json!("Fail");
    }
    let watcher: Watcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "tail", "namespace": "team-a"}, "spec": spec}))
    .expect("Watcher");
    let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
    let levels = Default::default();
    let guards = Guards { levels: &levels, resources: rules };
    let injection = inject_guarded(&view, "team-a", &[watcher], &InjectOptions::default(), &guards);
    let mut patched = pod;
    json_patch::patch(&mut patched, &injection.patch).expect("the patch applies");
    (patched, injection)
}

#[test]
fn the_refused_cases_are_admitted_with_the_watcher_fitted() {
    let range = limit_range();
    let stored = fixture("resources/resourcequota-1.36.json");
    let quota: ResourceQuota = serde_json::from_value(stored).expect("quota");
    for (case, rules) in [
        ("quota-must-specify", ResourceRules::new([], [&quota])),
        ("limitrange-min", ResourceRules::new([&range], [])),
        ("limitrange-max", ResourceRules::new([&range], [])),
        ("limitrange-ratio", ResourceRules::new([&range], [])),
    ] {
        let (patched, injection) = admitted(case, &rules, false);
        assert_eq!(injection.injected, ["tail"], "{case}: {:?}", injection.warnings);
        let after: PodView = serde_json::from_value(patched).expect("a pod");
        assert_eq!(rules.check(&PodResourceView::of(&after)), [], "{case}");
        assert_eq!(injection.resources.len(), 1, "{case}: reported");
        assert!(injection.resources[0].violations.is_none());
    }
}

#[test]
fn no_room_in_the_quota_leaves_the_watcher_out_or_refuses_the_pod_when_required() {
    let stored = fixture("resources/resourcequota-1.36.json");
    let quota: ResourceQuota = serde_json::from_value(stored).expect("quota");
    let rules = ResourceRules::new([], [&quota]);
    let (patched, injection) = admitted("quota-exceeded", &rules, false);
    assert!(injection.injected.is_empty());
    assert_eq!(patched["spec"]["containers"].as_array().map(Vec::len), Some(1), "the app alone");
    let expected = "Watcher tail not injected: the pod would fail its namespace's ResourceQuota team with it: \
                    exceeded quota: team, requested: limits.cpu=400m, used: limits.cpu=0, limited: limits.cpu=300m";
    assert_eq!(injection.warnings, [expected]);
    assert_eq!(injection.resources[0].rules, "ResourceQuota team");
    let (_, refused) = admitted("quota-exceeded", &rules, true);
    let reason = refused.refused.expect("a required Watcher refuses the pod");
    assert!(reason.contains("exceeded quota: team"), "{reason}");
}

#[test]
fn the_supervisor_is_fitted_too() {
    let range = limit_range();
    let rules = ResourceRules::new([&range], []);
    let mut pod = fixture("resources/limitrange-min-request.json");
    pod["spec"]["containers"].as_array_mut().expect("containers").pop();
    pod["spec"]["restartPolicy"] = json!("Never");
    let watcher = watcher(json!({"container": container("viewer", "unset"), "selector": {}, "nativeSidecar": "Never"}));
    let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
    let levels = Default::default();
    let guards = Guards { levels: &levels, resources: &rules };
    let injection = inject_guarded(&view, "team-a", &[watcher], &InjectOptions::default(), &guards);
    let mut patched = pod;
    json_patch::patch(&mut patched, &injection.patch).expect("the patch applies");
    let supervisor = &patched["spec"]["initContainers"][0];
    assert_eq!(supervisor["name"], "watcher-supervise");
    assert_eq!(supervisor["resources"]["requests"]["cpu"], "50m", "up to the LimitRange's min");
    let after: PodView = serde_json::from_value(patched).expect("a pod");
    assert_eq!(rules.check(&PodResourceView::of(&after)), []);
}
