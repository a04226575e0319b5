//! The rules judged against what real kube-apiservers (1.24 and 1.36) refused and stored:
//! `fixtures/resources/` (README there).

use k8s_openapi::api::core::v1::{Container, LimitRange, ResourceQuota, ResourceRequirements};
use serde::de::DeserializeOwned;

use super::*;
use crate::PodView;

const VERSIONS: [&str; 2] = ["1.24", "1.36"];

fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/fixtures/resources/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What kube-apiserver said, without the words it puts before every refusal.
fn refusal(name: &str) -> String {
    let status: serde_json::Value = fixture(name);
    let message = status["message"].as_str().expect("a Status with a message");
    message.strip_prefix("pods \"app\" is forbidden: ").expect("a pod refused").to_owned()
}

fn limit_range(version: &str) -> ResourceRules {
    ResourceRules::new([&fixture::<LimitRange>(&format!("limitrange-{version}.json"))], [])
}

fn quota(version: &str) -> ResourceRules {
    ResourceRules::new([], [&fixture::<ResourceQuota>(&format!("resourcequota-{version}.json"))])
}

/// The request's pod, and the same pod without its container `tail` (the Watcher's) and
/// that container.
fn request(case: &str) -> (PodView, PodResourceView, Container) {
    let pod: serde_json::Value = fixture(&format!("{case}-request.json"));
    let view: PodView = serde_json::from_value(pod.clone()).expect("a pod");
    let mut without = pod.clone();
    let containers = without["spec"]["containers"].as_array_mut().expect("containers");
    let tail = containers.pop().expect("the Watcher's container, last");
    let before = PodResourceView::of(&serde_json::from_value(without).expect("a pod"));
    (view, before, serde_json::from_value(tail).expect("a container"))
}

fn fitted(rules: &ResourceRules, before: &PodResourceView, tail: &Container) -> PodResourceView {
    let fit = rules.fit(tail.resources.as_ref(), before);
    let resources = fit.resources.as_ref().or(tail.resources.as_ref());
    before.with(ContainerResources::new(&tail.name, ContainerKind::Regular, resources))
}

#[test]
fn says_what_kube_apiserver_refused_in_its_words() {
    for version in VERSIONS {
        let cases = [
            ("quota-must-specify", quota(version)),
            ("quota-exceeded", quota(version)),
            ("limitrange-min", limit_range(version)),
            ("limitrange-max", limit_range(version)),
            ("limitrange-ratio", limit_range(version)),
        ];
        for (case, rules) in cases {
            let (pod, before, _) = request(case);
            let violations = rules.check(&PodResourceView::of(&pod));
            assert_eq!(describe(&violations), refusal(&format!("{case}-{version}.json")), "{case} on {version}");
            assert!(rules.check(&before).is_empty(), "{case} on {version}: the app alone passes");
        }
    }
}

#[test]
fn a_container_fitted_to_the_rules_passes_them() {
    for version in VERSIONS {
        for (case, rules) in [
            ("quota-must-specify", quota(version)),
            ("limitrange-min", limit_range(version)),
            ("limitrange-max", limit_range(version)),
            ("limitrange-ratio", limit_range(version)),
            ("limitrange-defaulted", limit_range(version)),
        ] {
            let (_, before, tail) = request(case);
            let after = fitted(&rules, &before, &tail);
            assert_eq!(rules.added(&before, &after), [], "{case} on {version}");
        }
    }
}

#[test]
fn limit_range_defaults_are_what_limit_ranger_stored() {
    for version in VERSIONS {
        let (_, before, tail) = request("limitrange-defaulted");
        let fit = limit_range(version).fit(tail.resources.as_ref(), &before);
        let stored: serde_json::Value = fixture(&format!("limitrange-defaulted-{version}.json"));
        let tail_stored = &stored["spec"]["containers"][1];
        assert_eq!(tail_stored["name"], "tail");
        let expected: ResourceRequirements =
            serde_json::from_value(tail_stored["resources"].clone()).expect("resources");
        assert_eq!(fit.resources, Some(expected), "on {version}");
        assert_eq!(fit.set.len(), 4, "{:?}", fit.set);
    }
}

#[test]
fn the_values_are_brought_within_the_bounds() {
    let rules = limit_range("1.36");
    let (_, before, tail) = request("limitrange-max");
    let fit = rules.fit(tail.resources.as_ref(), &before);
    let resources = fit.resources.expect("changed");
    let text =
        |list: &Option<BTreeMap<String, Quantity>>, r: &str| list.as_ref().and_then(|l| l.get(r)).map(|q| q.0.clone());
    assert_eq!(text(&resources.limits, "cpu").as_deref(), Some("500m"), "the limit of 1 CPU down to max");
    assert_eq!(text(&resources.requests, "cpu").as_deref(), Some("125m"), "the request up to limit / 4");
    assert!(fit.set.iter().any(|s| s == "limits.cpu: 500m (LimitRange bounds: max 500m)"), "{:?}", fit.set);
}

#[test]
fn room_in_the_quota_is_what_hard_and_used_leave() {
    for version in VERSIONS {
        let rules = quota(version);
        let (_, before, tail) = request("quota-exceeded");
        let after = fitted(&rules, &before, &tail);
        let added = rules.added(&before, &after);
        assert_eq!(describe(&added), refusal(&format!("quota-exceeded-{version}.json")));
        assert_eq!(added[0].rule.to_string(), "ResourceQuota team");
    }
}

#[test]
fn a_quota_asking_for_cpu_and_memory_gets_the_documented_defaults() {
    let rules = quota("1.36");
    let (_, before, tail) = request("quota-must-specify");
    let fit = rules.fit(tail.resources.as_ref(), &before);
    let resources = fit.resources.expect("changed");
    let pairs = |list: Option<BTreeMap<String, Quantity>>| -> Vec<(String, String)> {
        list.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
    };
    let strings = |list: [(&str, &str); 2]| list.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec();
    assert_eq!(pairs(resources.requests), strings(DEFAULT_REQUESTS));
    assert_eq!(pairs(resources.limits), strings(DEFAULT_LIMITS));
}

fn bounds_range(name: &str, item: serde_json::Value) -> LimitRange {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": {"limits": [item]}})).expect("range")
}

#[test]
fn bounds_no_value_satisfies_are_said() {
    let low = bounds_range("low", serde_json::json!({"type": "Container", "max": {"cpu": "100m"}}));
    let high = bounds_range("high", serde_json::json!({"type": "Container", "min": {"cpu": "200m"}}));
    let rules = ResourceRules::new([&low, &high], []);
    let before = PodResourceView::default();
    let fit = rules.fit(None, &before);
    let after = before.with(ContainerResources::new("tail", ContainerKind::Regular, fit.resources.as_ref()));
    let added = rules.added(&before, &after);
    assert!(!added.is_empty(), "min 200m and max 100m cannot both hold");
    assert!(describe(&added).contains("maximum cpu usage per Container is 100m"), "{}", describe(&added));
}

#[test]
fn a_pod_limit_range_counts_the_whole_pod() {
    let pod_max = bounds_range("pods", serde_json::json!({"type": "Pod", "max": {"cpu": "300m"}}));
    let rules = ResourceRules::new([&pod_max], []);
    let (_, before, tail) = request("quota-exceeded");
    let after = fitted(&rules, &before, &tail);
    assert_eq!(describe(&rules.added(&before, &after)), "maximum cpu usage per Pod is 300m, but limit is 400m");
}

#[test]
fn a_best_effort_quota_does_not_count_a_pod_with_resources() {
    let scoped: ResourceQuota = serde_json::from_value(serde_json::json!({"metadata": {"name": "be"},
        "spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}}))
    .expect("quota");
    let counting: ResourceQuota = serde_json::from_value(serde_json::json!({"metadata": {"name": "nbe"},
        "spec": {"hard": {"limits.cpu": "1"}, "scopes": ["NotBestEffort"]}}))
    .expect("quota");
    let rules = ResourceRules::new([], [&scoped, &counting]);
    let (_, before, tail) = request("quota-must-specify");
    let fit = rules.fit(tail.resources.as_ref(), &before);
    let limits = fit.resources.and_then(|r| r.limits).expect("limits set for the NotBestEffort quota");
    assert_eq!(limits.keys().collect::<Vec<_>>(), ["cpu"]);
}

#[test]
fn native_sidecars_add_to_the_pod_and_init_containers_peak() {
    let quantity = |cpu: &str| ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity(cpu.to_owned()))])),
        ..Default::default()
    };
    let pod = PodResourceView {
        containers: vec![
            ContainerResources::new("first", ContainerKind::Init, Some(&quantity("500m"))),
            ContainerResources::new("sidecar", ContainerKind::Sidecar, Some(&quantity("100m"))),
            ContainerResources::new("second", ContainerKind::Init, Some(&quantity("300m"))),
            ContainerResources::new("app", ContainerKind::Regular, Some(&quantity("200m"))),
        ],
        ..Default::default()
    };
    assert_eq!(pod.total(false).get("cpu").map(ToString::to_string).as_deref(), Some("500m"));
    let bigger = pod.with(ContainerResources::new("app2", ContainerKind::Regular, Some(&quantity("300m"))));
    assert_eq!(bigger.total(false).get("cpu").map(ToString::to_string).as_deref(), Some("600m"));
}

#[test]
fn no_rules_change_nothing() {
    let rules = ResourceRules::default();
    assert!(rules.is_empty());
    let (_, before, tail) = request("quota-must-specify");
    assert_eq!(rules.fit(tail.resources.as_ref(), &before), ContainerFit::default());
}
