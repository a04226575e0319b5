use k8s_openapi::api::core::v1::Pod;
use watcher_api::Watcher;

use super::rebuild;

fn stored(name: &str) -> Pod {
    let path = format!("{}/fixtures/stored-pods/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("Pod")
}

fn fixture_watcher(name: &str) -> Watcher {
    let path = format!("{}/fixtures/stored-pods/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("Watcher")
}

/// The hash `pod` carries for `watcher`.
fn carried(pod: &Pod, watcher: &str) -> String {
    let annotations = pod.metadata.annotations.as_ref().expect("annotations");
    let entries = watcher_api::annotation::Injected::read(annotations);
    entries.iter().find(|(n, _)| *n == watcher).map(|(_, h)| (*h).to_owned()).expect("injected")
}

/// The pods kube-apiserver 1.24 and 1.36 stored (a native sidecar and a regular container; the
/// token mount, defaults, LimitRange resources): each gives back the Watcher's spec exactly.
#[test]
fn the_stored_pods_give_back_the_spec_they_were_injected_with() {
    let watcher = fixture_watcher("watcher.yaml");
    for name in ["pod-1.24-plain.json", "pod-1.36-plain.json", "pod-1.24-limits.json", "pod-1.36-limits.json"] {
        let pod = stored(name);
        let hash = carried(&pod, "log-watcher");
        assert_eq!(hash, watcher.spec.spec_hash(), "{name}");
        let rebuilt = rebuild(&pod, "log-watcher", "log-watcher", &hash).unwrap_or_else(|| panic!("{name}: rebuilt"));
        assert_eq!(rebuilt, watcher.spec.injection(), "{name}");
    }
}

/// Under another container name (the spec renamed it since), found all the same; a hash no
/// spec of the pod has, or another Watcher's ConfigMap, gives nothing.
#[test]
fn only_a_spec_with_that_hash_is_rebuilt() {
    let watcher = fixture_watcher("watcher.yaml");
    let pod = stored("pod-1.36-plain.json");
    let hash = watcher.spec.spec_hash().to_owned();
    assert_eq!(rebuild(&pod, "log-watcher", "renamed", &hash).map(|s| s.hash()), Some(hash.clone()));
    assert_eq!(rebuild(&pod, "log-watcher", "log-watcher", "00000000"), None);
    assert_eq!(rebuild(&pod, "other", "log-watcher", &hash), None, "the envFrom is log-watcher's ConfigMap");
}
