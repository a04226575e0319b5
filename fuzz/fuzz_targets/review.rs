//! Any bytes as an AdmissionReview body: an answer or a clean error, never a panic; an answer
//! only for a body that is JSON, written as JSON; every patch returned applies to the pod it was
//! made for.
#![no_main]

use std::sync::{Arc, LazyLock};

use k8s_openapi::ByteString;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use watcher_api::Watcher;
use watcher_admission::InjectOptions;
use watcher_webhook::Reviewer;

static REVIEWER: LazyLock<Reviewer<Vec<Arc<Watcher>>>> = LazyLock::new(|| {
    let watchers = ["log-watcher", "app", "metrics"].map(|name| {
        let watcher: Watcher = serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"container": {"name": name, "image": "busybox"}, "volume": {"name": "logs", "emptyDir": {}},
                     "configData": {"K": "v"}, "selector": {"matchLabels": {"app": "web"}}},
        }))
        .expect("valid Watcher");
        Arc::new(watcher)
    });
    Reviewer::new(watchers.into(), InjectOptions { excluded_namespaces: vec![], native_sidecars: true })
});

fuzz_target!(|body: &[u8]| {
    let Ok((answer, _)) = REVIEWER.review(body) else { return };
    // The one pass checks the whole body: only JSON is answered.
    let review: Value = serde_json::from_slice(body).expect("an answered body is JSON");
    let answer: Value = serde_json::from_slice(&answer.to_json().expect("answers encode")).expect("answers are JSON");
    let Some(encoded) = answer["response"].get("patch") else { return };
    let patch: ByteString = serde_json::from_value(encoded.clone()).expect("base64 patch");
    let patch: json_patch::Patch = serde_json::from_slice(&patch.0).expect("a JSON patch");
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("the patch applies to the pod it was made for");
});
