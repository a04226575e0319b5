use std::collections::BTreeMap;
use std::sync::Arc;

use rstest::rstest;
use serde_json::{Value, json};
use watcher_api::{InjectionSpec, Watcher};

use super::{Chosen, RevisionSource, at_revision, choose};

fn watcher(image: &str, update_policy: Value, stable: Option<&str>) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a", "uid": "w-1"},
        "spec": {"container": {"name": "log-watcher", "image": image}, "selector": {"matchLabels": {"app": "web"}},
                 "updatePolicy": update_policy},
        "status": {"stableRevision": stable},
    }))
    .expect("valid Watcher")
}

/// The stable spec (busybox:1.36) kept as its revision would be, by name.
fn kept() -> (String, BTreeMap<String, Arc<InjectionSpec>>) {
    let stable = watcher("busybox:1.36", json!({}), None).spec.injection();
    let name = format!("log-watcher-{}", stable.hash());
    (name.clone(), BTreeMap::from([(name, Arc::new(stable))]))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn shown(chosen: &Chosen) -> String {
    match chosen {
        Chosen::Current => "current".into(),
        Chosen::Stable(_, spec) => format!("stable {}", spec.container.image.as_deref().unwrap_or_default()),
        Chosen::Unavailable(_, why) => format!("current: {why}"),
    }
}

/// Every case of the choice: held or not, in the group or not, Stable or Current, the
/// revision cached or not.
#[rstest]
#[case::current_by_default(json!({"partition": 3}), &[("app", "web")], true, "current")]
#[case::stable_not_held(json!({"newPods": "Stable"}), &[("app", "web")], true, "current")]
#[case::held_by_partition(json!({"newPods": "Stable", "partition": 3}), &[("app", "web")], true, "stable busybox:1.36")]
#[case::held_by_pause(json!({"newPods": "Stable", "paused": true}), &[("app", "web")], true, "stable busybox:1.36")]
#[case::held_outside_the_group(
    json!({"newPods": "Stable", "selector": {"matchLabels": {"track": "canary"}}}), &[("app", "web")], true,
    "stable busybox:1.36")]
#[case::held_in_the_group(
    json!({"newPods": "Stable", "partition": 1, "selector": {"matchLabels": {"track": "canary"}}}),
    &[("app", "web"), ("track", "canary")], true, "current")]
#[case::held_not_cached(json!({"newPods": "Stable", "partition": 3}), &[("app", "web")], false,
    "current: not in the operator's cache")]
fn the_spec_a_new_pod_gets(
    #[case] policy: Value,
    #[case] pod_labels: &[(&str, &str)],
    #[case] cached: bool,
    #[case] want: &str,
) {
    let (stable, revisions) = kept();
    let held = watcher("busybox:1.37", policy, Some(&stable));
    let source: &dyn RevisionSource = if cached { &revisions } else { &() };
    assert_eq!(shown(&choose(&held, &labels(pod_labels), source)), want);
}

/// Nothing is stable before a rollout was seen complete; a complete rollout (or one undone to
/// the stable spec) injects the current spec: through its revision when the cache holds it,
/// as it is when not (no warning).
#[test]
fn without_a_stable_revision_or_on_it_the_current_spec() {
    let (stable, revisions) = kept();
    let held = json!({"newPods": "Stable", "partition": 3});
    let web = labels(&[("app", "web")]);
    assert_eq!(choose(&watcher("busybox:1.37", held.clone(), None), &web, &revisions), Chosen::Current);
    let undone = watcher("busybox:1.36", held, Some(&stable));
    let Chosen::Stable(_, spec) = choose(&undone, &web, &revisions) else { panic!("through the revision") };
    assert_eq!(*spec, undone.spec.injection(), "the current spec");
    assert_eq!(choose(&undone, &web, &()), Chosen::Current, "not cached, and current: no warning");
}

/// A stable spec that reads the Watcher's ConfigMap is not injected once the ConfigMap is gone.
#[test]
fn a_stable_spec_whose_config_map_is_gone_is_not_injected() {
    let mut stable = watcher("busybox:1.36", json!({}), None);
    stable.spec.config_data = Some(BTreeMap::from([("LEVEL".to_owned(), "debug".to_owned())]));
    let spec = stable.spec.injection();
    let name = format!("log-watcher-{}", spec.hash());
    let revisions = BTreeMap::from([(name.clone(), Arc::new(spec))]);
    let held = watcher("busybox:1.37", json!({"newPods": "Stable", "partition": 1}), Some(&name));
    let chosen = choose(&held, &labels(&[("app", "web")]), &revisions);
    assert!(matches!(chosen, Chosen::Unavailable(_, why) if why.contains("ConfigMap")), "{chosen:?}");
}

/// The Watcher at its stable revision hashes as the revision: the pod carries that hash.
#[test]
fn at_its_revision_a_watcher_carries_the_revision_hash() {
    let (stable, revisions) = kept();
    let held = watcher("busybox:1.37", json!({"newPods": "Stable", "partition": 3}), Some(&stable));
    let spec = &revisions[&stable];
    let at = at_revision(&held, spec);
    assert_eq!(format!("log-watcher-{}", at.spec.spec_hash()), stable);
    assert_eq!(at.metadata, held.metadata, "the same Watcher, by name and owner");
    assert_eq!(at.spec.selector, held.spec.selector, "who is injected is the current spec's");
}

/// No held Watcher: nothing replaced, nothing allocated; a held one is replaced in place, the
/// others kept; an unavailable revision is a warning, by Watcher.
#[test]
fn only_held_watchers_are_replaced() {
    let (stable, revisions) = kept();
    let web = labels(&[("app", "web")]);
    let plain = Arc::new(watcher("busybox:1.37", json!({}), Some(&stable)));
    let held = super::for_pod(std::slice::from_ref(&plain), &web, &revisions);
    assert!(held.stable.is_empty() && held.unavailable.is_empty());

    let paused = Arc::new(watcher("busybox:1.37", json!({"newPods": "Stable", "paused": true}), Some(&stable)));
    let both = [plain.clone(), paused.clone(), plain.clone()];
    let held = super::for_pod(&both, &web, &revisions);
    let chosen = held.watchers(&both);
    assert_eq!(chosen.len(), 3);
    assert!(std::ptr::eq(chosen[0], plain.as_ref()) && std::ptr::eq(chosen[2], plain.as_ref()));
    assert_eq!(chosen[1].spec.container.image.as_deref(), Some("busybox:1.36"));
    assert!(held.unavailable.is_empty());

    let held = super::for_pod(&both, &web, &());
    assert!(std::ptr::eq(held.watchers(&both)[1], paused.as_ref()), "not cached: the current spec");
    assert_eq!(held.unavailable.len(), 1);
    assert_eq!(held.unavailable[0].0, "log-watcher");
    assert!(held.unavailable[0].1.contains(&stable), "{}", held.unavailable[0].1);
}
