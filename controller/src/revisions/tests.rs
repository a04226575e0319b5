use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::json;

use super::{HISTORY, desired_revision, injection_of, plan_revisions, revision_name, revisions_of, stable_revision};
use crate::pods::in_place::tests::fixture_watcher;

fn revision(image: &str, number: i64) -> ControllerRevision {
    desired_revision(&fixture_watcher("team-a", image), "team-a", number).expect("revision")
}

#[test]
fn a_revision_keeps_what_injection_uses_owned_by_the_watcher() {
    let watcher = fixture_watcher("team-a", "busybox:1.36");
    let revision = revision("busybox:1.36", 3);
    let hash = watcher.spec.spec_hash();
    assert_eq!(revision.metadata.name.as_deref(), Some(revision_name("log-watcher", hash).as_str()));
    assert_eq!(revision.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(revision.revision, 3);
    let owner = &revision.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Watcher", "w-uid", Some(true)));
    assert_eq!(revision.metadata.labels.as_ref().expect("labels")["watcher.dev/watcher"], "log-watcher");
    let kept = injection_of(&revision).expect("readable");
    assert_eq!(kept, watcher.spec.injection());
    assert_eq!(kept.hash(), hash);
    let unreadable =
        ControllerRevision { data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(json!(7))), ..revision };
    assert!(injection_of(&unreadable).is_none());
}

#[test]
fn created_once_per_spec_and_numbered_after_the_last() {
    let watcher = fixture_watcher("team-a", "busybox:1.37");
    let old = revision("busybox:1.36", 4);
    let plan = plan_revisions(&watcher, "team-a", &[&old], &BTreeSet::new(), "");
    let created = plan.create.expect("the current spec's revision");
    assert_eq!(created.revision, 5);
    assert!(plan.delete.is_empty());
    let again = plan_revisions(&watcher, "team-a", &[&old, &created], &BTreeSet::new(), "");
    assert_eq!(again, super::RevisionPlan::default(), "nothing to write in a steady state");
}

#[test]
fn pruned_beyond_the_history_never_one_a_pod_carries() {
    let watcher = fixture_watcher("team-a", "busybox:2.0");
    let old: Vec<ControllerRevision> =
        (0..HISTORY + 2).map(|i| revision(&format!("busybox:1.{i}"), i as i64 + 1)).collect();
    let refs: Vec<&ControllerRevision> = old.iter().collect();
    let oldest = |i: usize| old[i].metadata.name.clone().expect("name");
    let plan = plan_revisions(&watcher, "team-a", &refs, &BTreeSet::new(), "");
    // 12 old + the new one, 10 kept: the three oldest go.
    assert_eq!(plan.delete, [oldest(0), oldest(1), oldest(2)]);
    let carried_hash = oldest(0).strip_prefix("log-watcher-").expect("hash").to_owned();
    let plan = plan_revisions(&watcher, "team-a", &refs, &BTreeSet::from([carried_hash]), "");
    assert_eq!(plan.delete, [oldest(1), oldest(2), oldest(3)], "a carried revision is never pruned");
    let plan = plan_revisions(&watcher, "team-a", &refs, &BTreeSet::new(), &oldest(1));
    assert_eq!(plan.delete, [oldest(0), oldest(2), oldest(3)], "nor the stable one");
}

#[test]
fn only_the_watchers_own_revisions_count() {
    let watcher = fixture_watcher("team-a", "busybox:1.36");
    let mine = std::sync::Arc::new(revision("busybox:1.36", 1));
    let mut other_uid = revision("busybox:1.35", 2);
    other_uid.metadata.owner_references.as_mut().expect("owner")[0].uid = "another".into();
    let mut other_namespace = revision("busybox:1.34", 3);
    other_namespace.metadata.namespace = Some("team-b".into());
    let all = vec![mine.clone(), std::sync::Arc::new(other_uid), std::sync::Arc::new(other_namespace)];
    assert_eq!(revisions_of(&watcher, &all), [mine.as_ref()]);
}

/// The stable revision: the current one once no pod is on another spec; the one the status
/// names while it is kept; the one that was current before the spec changed; the kept one most
/// pods carry; the current one when nothing else is known.
#[test]
fn the_stable_revision_is_what_pods_carried_when_the_rollout_began() {
    let old = revision("busybox:1.36", 1);
    let older = revision("busybox:1.35", 2);
    let name = |r: &ControllerRevision| r.metadata.name.clone().expect("name");
    let hash = |r: &ControllerRevision| name(r).strip_prefix("log-watcher-").expect("hash").to_owned();
    let mut watcher = fixture_watcher("team-a", "busybox:1.37");
    let current = revision_name("log-watcher", watcher.spec.spec_hash());
    let kept = [&old, &older];
    let none = BTreeMap::new();
    assert_eq!(stable_revision(&watcher, &kept, &none, true), current, "complete");
    assert_eq!(stable_revision(&watcher, &kept, &none, false), current, "nothing known");
    let carried = BTreeMap::from([(hash(&old), 1), (hash(&older), 3)]);
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&older), "most pods");
    assert_eq!(stable_revision(&watcher, &[&old], &carried, false), name(&old), "only a kept one");
    watcher.status = Some(watcher_api::WatcherStatus { current_revision: Some(name(&old)), ..Default::default() });
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&old), "current before the change");
    let status = watcher.status.as_mut().expect("status");
    status.stable_revision = Some(name(&older));
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&older), "named stable, kept");
    assert_eq!(stable_revision(&watcher, &[&old], &carried, false), name(&old), "named stable, gone");
    assert_eq!(stable_revision(&watcher, &kept, &carried, true), current, "complete again");
}

/// Never a revision no pod carries while pods carry another: a stable revision the status
/// names, or the current one it named before the change, once no pod carries it, gives way to
/// one pods carry; the current spec's revision (kept at first sight, before any pod carried
/// it) is never the stable one while pods carry an older spec whose revision is kept.
#[test]
fn the_stable_revision_is_one_that_pods_carry() {
    let (old, older) = (revision("busybox:1.36", 1), revision("busybox:1.35", 2));
    let name = |r: &ControllerRevision| r.metadata.name.clone().expect("name");
    let hash = |r: &ControllerRevision| name(r).strip_prefix("log-watcher-").expect("hash").to_owned();
    let mut watcher = fixture_watcher("team-a", "busybox:1.37");
    let current = desired_revision(&watcher, "team-a", 3).expect("current");
    let kept = [&old, &older, &current];
    let carried = BTreeMap::from([(hash(&old), 4)]);
    watcher.status = Some(watcher_api::WatcherStatus {
        stable_revision: Some(name(&older)),
        current_revision: Some(name(&current)),
        ..Default::default()
    });
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&old), "named stable, carried by none");
    watcher.status.as_mut().expect("status").stable_revision = Some(name(&current));
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&old), "the new spec, carried by none");
    watcher.status.as_mut().expect("status").stable_revision = None;
    assert_eq!(stable_revision(&watcher, &kept, &carried, false), name(&old), "the status names nothing");
}

/// A rebuilt revision is numbered before the oldest kept one (never below 0).
#[test]
fn a_rebuilt_revision_comes_before_the_kept_ones() {
    let (first, later) = (revision("busybox:1.36", 1), revision("busybox:1.35", 4));
    assert_eq!(super::rebuilt_number(&[&later]), 3);
    assert_eq!(super::rebuilt_number(&[&later, &first]), 0);
    assert_eq!(super::rebuilt_number(&[]), 1);
}
