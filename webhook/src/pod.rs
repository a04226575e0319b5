//! The parts of a pod that injection reads: names, labels, annotations, and which lists exist.
//!
//! Decoding only these (the rest is checked and dropped without allocating, see
//! [`crate::json`]) makes an admission several times cheaper than decoding a whole `Pod`, whose
//! `managedFields` alone become hundreds of small allocations, and states plainly what `inject`
//! depends on.

use std::collections::BTreeMap;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use watcher_api::GROUP;

use crate::json::{Text, Valid, narrow};

/// A pod as `inject` sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Name, namespace, labels and annotations.
    pub metadata: PodMeta,
    /// The names in the pod's lists; `None` for a pod without a spec.
    pub spec: Option<PodSpecView>,
}

/// The metadata `inject` reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    /// Absent for pods made from `generateName`.
    pub name: Option<String>,
    /// The name prefix of pods made by controllers.
    pub generate_name: Option<String>,
    /// May be absent: the request's namespace is the one that counts.
    pub namespace: Option<String>,
    /// Labels, matched against Watcher selectors.
    pub labels: Option<BTreeMap<String, String>>,
    /// The pod's `watcher.dev/` annotations, the only ones injection reads (`watcher.dev/inject`,
    /// `watcher.dev/injected`, ...): the others, `kubectl`'s last applied configuration among
    /// them, are checked and dropped. `None` when the pod has no annotations object at all (the
    /// patch must then create it).
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The lists of a pod spec, by the names of their entries. `None` means the list is absent
/// (the patch must create it), `Some(empty)` that it exists and is empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSpecView {
    /// Regular containers.
    pub containers: Vec<ContainerView>,
    /// Init containers (native sidecars among them).
    pub init_containers: Option<Vec<ContainerView>>,
    /// Volumes.
    pub volumes: Option<Vec<Named>>,
    /// Image pull secrets.
    pub image_pull_secrets: Option<Vec<Named>>,
}

/// A list entry, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Named {
    /// The entry's name.
    pub name: String,
}

/// A container, by name and image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerView {
    /// The container's name.
    pub name: String,
    /// Its image, as written.
    pub image: Option<String>,
}

narrow!(PodView { metadata: "metadata", spec: "spec" });
narrow!(PodMeta {
    name: "name",
    generate_name: "generateName",
    namespace: "namespace",
    labels: "labels",
    annotations: "annotations" => watcher_annotations,
});
narrow!(PodSpecView {
    containers: "containers",
    init_containers: "initContainers",
    volumes: "volumes",
    image_pull_secrets: "imagePullSecrets",
});
narrow!(Named { name: "name" });
narrow!(ContainerView { name: "name", image: "image" });

/// Reads an annotations object (or `null`), keeping the `watcher.dev/` entries.
fn watcher_annotations<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<BTreeMap<String, String>>, A::Error> {
    struct Own(BTreeMap<String, String>);
    impl<'de> Deserialize<'de> for Own {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct OwnVisitor;
            impl<'de> Visitor<'de> for OwnVisitor {
                type Value = Own;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a map of annotations")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Own, A::Error> {
                    let mut own = BTreeMap::new();
                    while let Some(key) = map.next_key::<Text<'de>>()? {
                        if key.strip_prefix(GROUP).is_some_and(|name| name.starts_with('/')) {
                            own.insert(key.0.into_owned(), map.next_value()?);
                        } else {
                            map.next_value::<Valid>()?;
                        }
                    }
                    Ok(Own(own))
                }
            }
            deserializer.deserialize_map(OwnVisitor)
        }
    }
    Ok(map.next_value::<Option<Own>>()?.map(|own| own.0))
}

static NO_STRINGS: BTreeMap<String, String> = BTreeMap::new();

impl PodView {
    /// The pod's annotations (empty when it has none).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.metadata.annotations.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The pod's labels (empty when it has none).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata.labels.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The pod's name, or its `generateName` prefix, for messages.
    pub fn display_name(&self) -> &str {
        self.metadata.name.as_deref().or(self.metadata.generate_name.as_deref()).unwrap_or("<unnamed>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_inject_needs_from_a_real_pod() {
        let review: serde_json::Value = serde_json::from_str(include_str!(
            "../fixtures/admission-review/pod-create-init-and-existing-watcher-container.json"
        ))
        .expect("fixture");
        let pod: PodView = serde_json::from_value(review["request"]["object"].clone()).expect("a pod");
        assert_eq!(pod.display_name(), "with-init");
        assert!(pod.labels().is_empty() && pod.metadata.labels.is_none());
        let spec = pod.spec.expect("spec");
        let names = |list: &[ContainerView]| list.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&spec.containers), ["app", "watcher"]);
        assert!(spec.containers.iter().all(|c| c.image.is_some()), "images are read");
        assert_eq!(spec.init_containers.as_deref().map(names), Some(vec!["setup".to_owned()]));
        let volumes: Vec<_> = spec.volumes.iter().flatten().map(|v| v.name.clone()).collect();
        assert_eq!(volumes, ["kube-api-access-zc9s7"]);
        assert_eq!(spec.image_pull_secrets, None);
    }

    /// The review path reads pods with `crate::json`; every other caller with serde's own
    /// deserializers. Both read the captured pods alike.
    #[test]
    fn both_readers_agree_on_the_captured_pods() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission-review");
        let mut read = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let review: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("readable")).expect("JSON");
            let object = &review["request"]["object"];
            let by_serde: PodView = serde_json::from_value(object.clone()).expect("a pod");
            let by_json: PodView = crate::json::from_str(&object.to_string()).expect("a pod");
            assert_eq!(by_json, by_serde, "{}", path.display());
            read += 1;
        }
        assert_eq!(read, 4, "every capture read");
    }

    /// `kubectl apply` leaves its last applied configuration among the annotations: dropped.
    #[test]
    fn only_the_operators_own_annotations_are_kept() {
        let review: serde_json::Value =
            serde_json::from_str(include_str!("../fixtures/admission-review/pod-create-named-annotated.json"))
                .expect("fixture");
        let object = &review["request"]["object"];
        assert!(object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string());
        let pod: PodView = crate::json::from_str(&object.to_string()).expect("a pod");
        let keys: Vec<_> = pod.annotations().keys().collect();
        assert_eq!(keys, ["watcher.dev/inject"]);
        let bare: PodView =
            serde_json::from_value(serde_json::json!({"metadata": {"annotations": {"a": "b"}}})).expect("a pod");
        assert_eq!(bare.metadata.annotations, Some(BTreeMap::new()), "the object is there, empty");
    }

    #[test]
    fn wrong_shapes_are_errors() {
        let bad = serde_json::json!({"spec": {"containers": "nginx"}});
        assert!(serde_json::from_value::<PodView>(bad).is_err());
        let pod: PodView =
            serde_json::from_value(serde_json::json!({"metadata": {"generateName": "web-"}})).expect("minimal");
        assert_eq!(pod.display_name(), "web-");
        assert_eq!(pod.spec, None);
    }
}
