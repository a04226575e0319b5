//! Properties of review decoding and `inject`, over generated pods, Watchers and bodies.
//! Bounded (a few hundred cases) so every CI run exercises them; `fuzz/` goes further.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use watcher_admission::{InjectOptions, PodView, inject};
use watcher_api::Watcher;
use watcher_webhook::Reviewer;

const FIXTURE: &str = include_str!("../../admission/fixtures/admission-review/pod-create-named-annotated.json");
const NAMES: [&str; 4] = ["log-watcher", "metrics", "app", "sidecar"];

fn watcher(name: &str, container: &str, volume: Option<&str>, selector: bool, native: &str) -> Watcher {
    let mut spec = json!({"container": {"name": container, "image": "busybox"}, "nativeSidecar": native,
                          "configData": {"K": "v"}, "imagePullSecrets": {"name": "regcred"}});
    if let Some(volume) = volume {
        spec["volume"] = json!({"name": volume, "emptyDir": {}});
    }
    if selector {
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
    }
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
    .expect("valid Watcher")
}

prop_compose! {
    fn any_watcher()(
        name in 0..NAMES.len(), container in 0..NAMES.len(), volume in proptest::option::of(0..NAMES.len()),
        selector in any::<bool>(), native in prop::sample::select(vec!["Auto", "Always", "Never"]),
    ) -> Watcher {
        watcher(NAMES[name], NAMES[container], volume.map(|v| NAMES[v]), selector, native)
    }
}

prop_compose! {
    fn any_pod()(
        containers in prop::collection::vec(0..NAMES.len(), 1..3),
        init in proptest::option::of(prop::collection::vec(0..NAMES.len(), 0..2)),
        volumes in proptest::option::of(prop::collection::vec(0..NAMES.len(), 0..2)),
        secrets in proptest::option::of(any::<bool>()),
        inject in proptest::option::of(prop::collection::vec(0..NAMES.len(), 0..4)),
        labelled in any::<bool>(),
        injected in proptest::option::of(0..NAMES.len()),
    ) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(names) = inject {
            let list: Vec<&str> = names.iter().map(|i| NAMES[*i]).collect();
            annotations.insert("watcher.dev/inject".into(), json!(list.join(",")));
        }
        if let Some(i) = injected {
            annotations.insert("watcher.dev/injected".into(), json!(format!("{}@0", NAMES[i])));
        }
        let mut metadata = json!({"generateName": "p-"});
        if !annotations.is_empty() { metadata["annotations"] = Value::Object(annotations); }
        if labelled { metadata["labels"] = json!({"app": "web"}); }
        // Container names of a valid pod are unique.
        let mut names: Vec<usize> = containers;
        names.extend(init.clone().unwrap_or_default());
        names.sort_unstable();
        names.dedup();
        let (main, rest) = names.split_at(1);
        let mut spec = json!({"containers": main.iter().map(|i| json!({"name": NAMES[*i]})).collect::<Vec<_>>()});
        if let Some(init) = init {
            let init: Vec<_> = rest.iter().filter(|i| init.contains(i)).map(|i| json!({"name": NAMES[*i]})).collect();
            spec["initContainers"] = json!(init);
        }
        if let Some(mut volumes) = volumes {
            volumes.sort_unstable();
            volumes.dedup();
            spec["volumes"] = json!(volumes.iter().map(|i| json!({"name": NAMES[*i], "emptyDir": {}})).collect::<Vec<_>>());
        }
        if let Some(true) = secrets { spec["imagePullSecrets"] = json!([{"name": "regcred"}]); }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    }
}

fn names(pod: &Value, list: &str) -> Vec<String> {
    pod["spec"][list].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every patch applies to the pod it was made for, leaves names unique, injects each
    /// Watcher once, and a second pass (reinvocation) changes nothing.
    #[test]
    fn inject_patches_apply_and_are_idempotent(
        pod in any_pod(),
        watchers in prop::collection::vec(any_watcher(), 0..4),
        native_sidecars in any::<bool>(),
    ) {
        let options = InjectOptions { excluded_namespaces: vec![], native_sidecars, server_minor: None, ..Default::default() };
        let typed: PodView = serde_json::from_value(pod.clone()).expect("valid pod");
        let refs: Vec<&Watcher> = watchers.iter().collect();
        let first = inject(&typed, "team-a", &refs, &options);
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &first.patch).expect("the patch applies");
        prop_assert_eq!(first.patch.is_empty(), first.injected.is_empty());
        prop_assert_eq!(first.patch.is_empty(), first.skipped.is_some());

        for list in ["containers", "volumes", "imagePullSecrets"] {
            let mut all = names(&patched, list);
            if list == "containers" { all.extend(names(&patched, "initContainers")); }
            let count = all.len();
            all.sort();
            all.dedup();
            prop_assert_eq!(all.len(), count, "{} names stay unique", list);
        }
        let annotation = patched["metadata"]["annotations"]["watcher.dev/injected"].as_str().unwrap_or("").to_owned();
        for name in &first.injected {
            let prefix = format!("{}@", name);
            prop_assert!(annotation.split(',').any(|e| e.starts_with(&prefix)), "{} missing from {}", name, annotation);
        }

        let typed: PodView = serde_json::from_value(patched.clone()).expect("patched pod is a pod");
        let second = inject(&typed, "team-a", &refs, &options);
        prop_assert!(second.patch.is_empty(), "reinvocation patched again: {:?}", second.patch);
    }

    /// Any body gets an answer or a clean error, never a panic; an answer echoes the uid.
    #[test]
    fn review_never_panics_on_mangled_bodies(cut in 0..FIXTURE.len(), byte in any::<u8>(), at in 0..FIXTURE.len()) {
        let reviewer = Reviewer::new(vec![Arc::new(watcher("log-watcher", "log-watcher", Some("logs"), false, "Auto"))], InjectOptions::default());
        let mut body = FIXTURE.as_bytes().to_vec();
        body[at] = byte;
        body.truncate(cut.max(1));
        if let Ok((answer, _)) = reviewer.review(&body) {
            let value = serde_json::to_value(&answer).expect("answers serialise");
            let uid = value["response"]["uid"].as_str().expect("uid echoed");
            prop_assert!(!uid.is_empty() || body.windows(6).any(|w| w == b"\"uid\":"));
        }
    }

    /// Any JSON value in place of the pod gets an answer or a clean error.
    #[test]
    fn review_never_panics_on_odd_objects(object in arbitrary_json(3)) {
        let reviewer = Reviewer::new(Vec::new(), InjectOptions::default());
        let mut review: Value = serde_json::from_str(FIXTURE).expect("fixture");
        review["request"]["object"] = object;
        let body = serde_json::to_vec(&review).expect("serialises");
        if let Ok((answer, _)) = reviewer.review(&body) {
            let value = serde_json::to_value(&answer).expect("answers serialise");
            prop_assert_eq!(&value["response"]["uid"], "39a859b2-1366-467b-80f2-70a009723439");
        }
    }
}

fn arbitrary_json(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["metadata", "spec", "containers", "name", "annotations", "kind", "x"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}
