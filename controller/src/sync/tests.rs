use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::{NamespaceMeta, Plan, SourceKey, desired_copy, plan, reconcile};
use crate::Context;

const SOURCE_NS: &str = "watcher-system";

fn key() -> SourceKey {
    SourceKey { namespace: SOURCE_NS.into(), name: "regcred".into() }
}

fn namespace(name: &str, labels: Value, terminating: bool) -> Arc<NamespaceMeta> {
    let mut metadata = json!({"name": name, "labels": labels});
    if terminating {
        metadata["deletionTimestamp"] = json!("2026-11-21T10:00:00Z");
    }
    Arc::new(
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})).expect("ns"),
    )
}

/// The cluster of most scenarios: the source namespace, two teams, a system namespace and a
/// terminating one.
fn cluster() -> Vec<Arc<NamespaceMeta>> {
    vec![
        namespace(SOURCE_NS, json!({}), false),
        namespace("team-a", json!({"team": "a"}), false),
        namespace("team-b", json!({"team": "b"}), false),
        namespace("kube-system", json!({}), false),
        namespace("leaving", json!({"team": "a"}), true),
    ]
}

fn source(selector: Option<&str>, data: &str) -> Secret {
    let annotations = selector.map_or(json!({}), |s| json!({"watcher.dev/sync": s}));
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred", "namespace": SOURCE_NS, "uid": "source-uid",
                     "labels": {"app": "registry"}, "annotations": annotations},
        "data": {".dockerconfigjson": data},
    }))
    .expect("valid Secret")
}

/// The copy of `source` in `namespace`, as the API server returns it.
fn copy_in(source: &Secret, namespace: &str) -> Arc<Secret> {
    let mut copy = desired_copy(source, &key(), namespace);
    copy.metadata.uid = Some(format!("{namespace}-uid"));
    copy.metadata.resource_version = Some("7".into());
    Arc::new(copy)
}

fn names(list: &[(String, Option<String>)]) -> Vec<&str> {
    list.iter().map(|(ns, _)| ns.as_str()).collect()
}

#[test]
fn empty_selector_copies_into_every_eligible_namespace() {
    let source = source(Some(""), "e30=");
    let plan = plan(&key(), Some(&source), &cluster(), &[]);
    // Not the source's own namespace, not kube-system, not a terminating namespace.
    assert_eq!(plan, Plan { create: vec!["team-a".into(), "team-b".into()], ..Plan::default() });
}

#[test]
fn a_selector_limits_the_namespaces_and_unselected_copies_go() {
    let source = source(Some("team=a"), "e30=");
    let copies = [copy_in(&source, "team-b")];
    let plan = plan(&key(), Some(&source), &cluster(), &copies);
    assert_eq!(plan.create, ["team-a"]);
    assert_eq!(plan.delete, [("team-b".to_owned(), Some("team-b-uid".to_owned()))]);
    assert!(plan.update.is_empty() && plan.recreate.is_empty() && plan.conflicts.is_empty());
}

#[test]
fn copies_in_sync_mean_no_writes() {
    let source = source(Some(""), "e30=");
    let copies = [copy_in(&source, "team-a"), copy_in(&source, "team-b")];
    assert!(plan(&key(), Some(&source), &cluster(), &copies).is_empty());
}

#[test]
fn changed_data_labels_or_a_hand_edit_update_the_copy() {
    let source = source(Some(""), "e30=");
    let old = copy_in(&self::source(Some(""), "b2xk"), "team-a");
    let mut relabelled = (*copy_in(&source, "team-b")).clone();
    relabelled.labels_mut().remove("app");
    let plan = plan(&key(), Some(&source), &cluster(), &[old, Arc::new(relabelled)]);
    assert_eq!(plan.update, ["team-a", "team-b"]);
    assert!(plan.create.is_empty() && plan.recreate.is_empty());
}

#[test]
fn a_type_change_or_immutable_data_change_recreates() {
    let source = source(Some(""), "e30=");
    let mut opaque = (*copy_in(&source, "team-a")).clone();
    opaque.type_ = Some("Opaque".into());
    let mut frozen = (*copy_in(&self::source(Some(""), "b2xk"), "team-b")).clone();
    frozen.immutable = Some(true);
    let plan = plan(&key(), Some(&source), &cluster(), &[Arc::new(opaque), Arc::new(frozen)]);
    assert_eq!(names(&plan.recreate), ["team-a", "team-b"]);
    assert_eq!(plan.recreate[0].1.as_deref(), Some("team-a-uid"), "deleted by uid");
    assert!(plan.update.is_empty());

    // Immutable on both sides with equal data is in sync; making the source mutable recreates.
    let mut immutable_source = source.clone();
    immutable_source.immutable = Some(true);
    let frozen_copy = copy_in(&immutable_source, "team-a");
    assert!(!plan_for(&immutable_source, std::slice::from_ref(&frozen_copy)).create.contains(&"team-a".to_owned()));
    assert!(plan_for(&immutable_source, std::slice::from_ref(&frozen_copy)).recreate.is_empty());
    assert_eq!(names(&plan_for(&source, &[frozen_copy]).recreate), ["team-a"]);
}

fn plan_for(source: &Secret, copies: &[Arc<Secret>]) -> Plan {
    plan(&key(), Some(source), &cluster(), copies)
}

#[test]
fn objects_that_are_not_this_sources_copies_are_conflicts() {
    let source = source(Some(""), "e30=");
    // A copy of a same-named source in another namespace, and an object someone labelled.
    let other_key = SourceKey { namespace: "platform".into(), name: "regcred".into() };
    let mut others = desired_copy(&source, &other_key, "team-a");
    others.metadata.uid = Some("other".into());
    let mut labelled: Secret = (*copy_in(&source, "team-b")).clone();
    labelled.annotations_mut().clear();
    let plan = plan(&key(), Some(&source), &cluster(), &[Arc::new(others), Arc::new(labelled)]);
    assert_eq!(plan.conflicts, ["team-a", "team-b"]);
    assert!(plan.is_empty(), "never written, never deleted: {plan:?}");
}

#[test]
fn a_deleted_or_unannotated_source_deletes_every_copy_but_in_terminating_namespaces() {
    let annotated = source(Some(""), "e30=");
    let copies = [copy_in(&annotated, "team-a"), copy_in(&annotated, "team-b"), copy_in(&annotated, "leaving")];
    for source in [None, Some(self::source(None, "e30="))] {
        let plan = plan(&key(), source.as_ref(), &cluster(), &copies);
        assert_eq!(names(&plan.delete), ["team-a", "team-b"], "{source:?}");
        assert!(plan.create.is_empty() && plan.update.is_empty());
    }
}

#[test]
fn a_terminating_namespace_keeps_its_copy_untouched() {
    let source = source(Some(""), "e30=");
    let stale = copy_in(&self::source(Some(""), "b2xk"), "leaving");
    let plan = plan(&key(), Some(&source), &cluster(), &[stale]);
    assert_eq!(plan.create, ["team-a", "team-b"]);
    assert!(plan.update.is_empty() && plan.recreate.is_empty() && plan.delete.is_empty(), "{plan:?}");
}

#[test]
fn an_invalid_selector_changes_nothing() {
    let source = source(Some("team in (a"), "e30=");
    let copies = [copy_in(&self::source(Some(""), "e30="), "team-b")];
    let plan = plan(&key(), Some(&source), &cluster(), &copies);
    assert!(matches!(plan.invalid_selector, Some(super::SelectorError::Unclosed(_))), "{plan:?}");
    assert!(plan.is_empty() && plan.delete.is_empty(), "copies are kept: {plan:?}");
}

#[test]
fn config_maps_compare_data_binary_data_and_immutable() {
    let source: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "regcred", "namespace": SOURCE_NS, "annotations": {"watcher.dev/sync": ""}},
        "data": {"a": "1"}, "binaryData": {"b": "AA=="}}))
    .expect("ConfigMap");
    let copy = Arc::new(desired_copy(&source, &key(), "team-a"));
    let in_sync = plan(&key(), Some(&source), &cluster(), std::slice::from_ref(&copy));
    assert_eq!(in_sync.create, ["team-b"]);
    let mut edited = (*copy).clone();
    edited.binary_data = None;
    assert_eq!(plan(&key(), Some(&source), &cluster(), &[Arc::new(edited)]).update, ["team-a"]);
}

// Mocked API server: the exact requests of a reconcile.

const APPLY: &str = "fieldManager=watcher-operator&force=true";

fn secret_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets/regcred")
}

fn not_found() -> (u16, Value) {
    (404, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}))
}

#[tokio::test]
async fn first_sync_looks_then_applies_each_copy() {
    let (ctx, mut api) = Context::test();
    let source = source(Some(""), "e30=");
    let server = tokio::spawn(async move {
        let seen =
            api.serve(4, |method, _, body| if method == Method::GET { not_found() } else { (201, body.clone()) }).await;
        let requests: Vec<(Method, String)> = seen.iter().map(|(m, uri, _)| (m.clone(), uri.clone())).collect();
        // Query parameters come sorted.
        assert_eq!(
            requests,
            [
                (Method::GET, secret_path("team-a")),
                (Method::GET, secret_path("team-b")),
                (Method::PATCH, format!("{}?{APPLY}", secret_path("team-a"))),
                (Method::PATCH, format!("{}?{APPLY}", secret_path("team-b"))),
            ]
        );
        assert_eq!(
            seen[2].2,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "regcred", "namespace": "team-a",
                                "labels": {"app": "registry", "watcher.dev/synced": "true"},
                                "annotations": {"watcher.dev/synced-from": "watcher-system/regcred"}},
                   "data": {".dockerconfigjson": "e30="}})
        );
        api.expect_no_more().await;
    });
    let shared = ctx;
    let requeue = reconcile(&key(), Some(&source), &cluster(), &[], &shared).await.expect("synced");
    assert_eq!(requeue, None);
    drop(shared);
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn a_steady_state_makes_no_request() {
    let (ctx, api) = Context::test();
    let source = source(Some(""), "e30=");
    let copies = [copy_in(&source, "team-a"), copy_in(&source, "team-b")];
    let server = tokio::spawn(api.expect_no_more());
    let shared = ctx.clone();
    let requeue = reconcile(&key(), Some(&source), &cluster(), &copies, &shared).await.expect("in sync");
    assert_eq!(requeue, None);
    assert_eq!(ctx.metrics.reconciles_of("sync"), 1);
    drop((shared, ctx));
    server.await.expect("no request");
}

#[tokio::test]
async fn a_deleted_source_deletes_its_copies_by_uid() {
    let (ctx, mut api) = Context::test();
    let copies = [copy_in(&source(Some(""), "e30="), "team-a"), copy_in(&source(Some(""), "e30="), "team-b")];
    let server = tokio::spawn(async move {
        let seen = api.serve(2, |_, _, _| (200, json!({"kind": "Status", "status": "Success"}))).await;
        for ((method, uri, body), namespace) in seen.iter().zip(["team-a", "team-b"]) {
            assert_eq!((method, uri.as_str()), (&Method::DELETE, secret_path(namespace).as_str()));
            assert_eq!(body["preconditions"]["uid"], format!("{namespace}-uid"));
        }
        api.expect_no_more().await;
    });
    let shared = ctx;
    reconcile::<Secret>(&key(), None, &cluster(), &copies, &shared).await.expect("deleted");
    drop(shared);
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn an_object_that_is_not_a_copy_is_left_alone_with_an_event() {
    let (ctx, mut api) = Context::test();
    let mut source = source(Some("team=a"), "e30=");
    source.metadata.resource_version = Some("3".into());
    let server = tokio::spawn(async move {
        let get = api.expect(Method::GET, &secret_path("team-a")).await;
        get.ok(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": "team-a"},
                       "data": {"mine": "eA=="}}));
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/watcher-system/events").await;
        assert_eq!(event.body["reason"], "SyncConflict");
        assert_eq!(event.body["type"], "Warning");
        assert!(event.body["note"].as_str().is_some_and(|n| n.contains("team-a")), "{}", event.body);
        assert_eq!(event.body["regarding"]["name"], "regcred");
        event.created();
        api.expect_no_more().await;
    });
    let shared = ctx.clone();
    let requeue = reconcile(&key(), Some(&source), &cluster(), &[], &shared).await.expect("reconciled");
    assert_eq!(requeue, Some(super::CONFLICT_RETRY), "looked at again: the object is not watched");
    assert_eq!(ctx.metrics.sync_conflicts_of("Secret"), 1);
    drop((shared, ctx));
    server.await.expect("scenario passed");
}

/// A key added to a copy by hand survives an apply (another manager owns it): the copy is then
/// replaced whole, with the resourceVersion the apply returned.
#[tokio::test]
async fn a_hand_added_key_is_removed_by_a_replace() {
    let (ctx, mut api) = Context::test();
    let source = source(Some("team=a"), "e30=");
    let mut edited = (*copy_in(&source, "team-a")).clone();
    edited.data.get_or_insert_default().insert("extra".into(), k8s_openapi::ByteString(b"x".to_vec()));
    let edited = Arc::new(edited);
    let returned = edited.clone();
    let server = tokio::spawn(async move {
        let apply = api.expect(Method::PATCH, &format!("{}?{APPLY}", secret_path("team-a"))).await;
        apply.ok(returned.as_ref());
        let replace =
            api.expect(Method::PUT, &format!("{}?fieldManager=watcher-operator", secret_path("team-a"))).await;
        assert_eq!(replace.body["metadata"]["resourceVersion"], "7");
        assert_eq!(replace.body["data"], json!({".dockerconfigjson": "e30="}));
        let body = replace.body.clone();
        replace.ok(&body);
        api.expect_no_more().await;
    });
    let shared = ctx;
    reconcile(&key(), Some(&source), &cluster(), &[edited], &shared).await.expect("reconciled");
    drop(shared);
    server.await.expect("scenario passed");
}
