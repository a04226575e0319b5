use std::sync::Arc;

use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use watcher_api::PodSet;

use super::{desired_pod, plan, reconcile, template_hash};
use crate::Context;

const UID: &str = "b7000000-0000-4000-8000-000000000001";
const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/podsets/greeters/status";

fn podset(count: i32, message: &str) -> PodSet {
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "greeters", "namespace": "team-a", "uid": UID, "generation": 2},
        "spec": {"count": count, "message": message}}))
    .expect("valid PodSet")
}

/// A pod owned by the PodSet (or not), of the template of `message`, created at second `age`.
fn pod(name: &str, message: &str, ready: bool, created: u32, owner: Option<&str>) -> Pod {
    let hash = template_hash(&podset(1, message));
    let owners = owner.map_or(json!([]), |uid| {
        json!([{"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet", "name": "greeters", "uid": uid, "controller": true}])
    });
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                     "creationTimestamp": format!("2026-11-21T10:00:{created:02}Z"),
                     "labels": {"watcher.dev/podset": "greeters", "watcher.dev/pod-template-hash": hash},
                     "ownerReferences": owners},
        "spec": {"containers": [{"name": "greeter"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
    .expect("valid Pod")
}

fn mine(name: &str, message: &str, ready: bool, created: u32) -> Pod {
    pod(name, message, ready, created, Some(UID))
}

#[test]
fn scales_up_to_count() {
    let plan = plan(&podset(3, "hello"), &[mine("a", "hello", true, 1)]);
    assert_eq!((plan.create, plan.delete.len()), (2, 0));
    assert_eq!((plan.status.count, plan.status.ready_count), (1, 1));
}

#[test]
fn scales_down_not_ready_first_then_newest() {
    let pods = [
        mine("old-ready", "hello", true, 1),
        mine("new-ready", "hello", true, 5),
        mine("not-ready", "hello", false, 2),
        mine("mid-ready", "hello", true, 3),
    ];
    let plan = plan(&podset(2, "hello"), &pods);
    assert_eq!((plan.create, plan.delete.clone()), (0, vec!["not-ready".to_owned(), "new-ready".to_owned()]));
}

#[test]
fn steady_state_changes_nothing_and_is_ready() {
    let pods = [mine("a", "hello", true, 1), mine("b", "hello", true, 2)];
    let plan = plan(&podset(2, "hello"), &pods);
    assert_eq!((plan.create, plan.delete.len()), (0, 0));
    assert_eq!(plan.status.conditions[0].status, "True");
    assert_eq!(plan.status.message.as_deref(), Some("hello"));
}

#[test]
fn a_new_message_rolls_out_one_pod_at_a_time() {
    let set = podset(2, "bye");
    let old = [mine("a", "hello", true, 1), mine("b", "hello", true, 2)];
    // 1. add one pod of the new template
    assert_eq!(plan(&set, &old).create, 1);
    // 2. while it starts, nothing else happens
    let starting = [old[0].clone(), old[1].clone(), mine("c", "bye", false, 3)];
    let waiting = plan(&set, &starting);
    assert_eq!((waiting.create, waiting.delete.len()), (0, 0));
    assert_eq!(waiting.status.conditions[0].reason, "RollingOut");
    // 3. once ready, one old pod goes (ready pods never below count - 1)
    let ready = [old[0].clone(), old[1].clone(), mine("c", "bye", true, 3)];
    let step = plan(&set, &ready);
    assert_eq!((step.create, step.delete.clone()), (0, vec!["b".to_owned()]));
    // 4. then the next one is added
    let next = [old[0].clone(), mine("c", "bye", true, 3)];
    assert_eq!(plan(&set, &next).create, 1);
    // the status keeps the old message until no old pod is left
    assert_eq!(plan(&set, &next).status.message, None);
}

#[test]
fn terminating_pods_do_not_count() {
    let mut leaving = mine("leaving", "hello", true, 1);
    leaving.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-11-21T10:01:00Z".parse().expect("time")));
    let plan = plan(&podset(1, "hello"), &[leaving]);
    assert_eq!(plan.create, 1);
}

#[test]
fn count_zero_removes_everything() {
    let plan = plan(&podset(0, "hello"), &[mine("a", "hello", true, 1), mine("b", "bye", true, 2)]);
    assert_eq!(plan.create, 0);
    assert_eq!(plan.delete.len(), 2);
}

#[test]
fn pods_carry_the_message_labels_and_owner() {
    let pod = serde_json::to_value(desired_pod(&podset(1, "hello")).expect("pod")).expect("serialises");
    assert_eq!(pod["metadata"]["generateName"], "greeters-");
    assert_eq!(pod["metadata"]["labels"]["watcher.dev/podset"], "greeters");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], UID);
    assert_eq!(pod["spec"]["containers"][0]["env"], json!([{"name": "MESSAGE", "value": "hello"}]));
}

fn cached(pods: &[Pod]) -> kube::runtime::reflector::Store<Pod> {
    let (store, mut writer) = kube::runtime::reflector::store();
    for pod in pods {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(pod.clone()));
    }
    store
}

/// One reconcile with `pods` in the cache, against `script`; returns the writes it expects the
/// cache to show.
async fn scenario<F>(
    set: PodSet,
    pods: &[Pod],
    script: impl FnOnce(crate::fixtures::ApiServerVerifier) -> F,
) -> std::collections::HashMap<String, super::Expected>
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ctx, verifier) = Context::test();
    let shared = super::PodSetState::listed(cached(pods), Default::default());
    let server = tokio::spawn(script(verifier));
    reconcile(Arc::new(set), ctx.clone(), shared.clone()).await.expect("reconciled");
    let expected = std::mem::take(&mut *shared.expectations.lock().expect("lock"));
    drop((shared, ctx)); // lets the scenario see that no request follows
    server.await.expect("scenario passed");
    expected
}

fn podset_body() -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "greeters"},
           "spec": {"count": 1, "message": "x"}})
}

#[tokio::test]
async fn scale_up_creates_the_missing_pods_and_leaves_foreign_ones_alone() {
    let foreign = pod("foreign", "hello", true, 1, Some("someone-else"));
    let unowned = pod("unowned", "hello", true, 1, None);
    let cache = [foreign, unowned];
    let expected = scenario(podset(2, "hello"), &cache, |mut api| async move {
        for i in 0..2 {
            let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
            assert_eq!(create.body["metadata"]["generateName"], "greeters-");
            let mut body = create.body.clone();
            body["metadata"]["name"] = json!(format!("greeters-{i}"));
            create.respond(StatusCode::CREATED, &body);
        }
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(
            (status.body["status"]["count"].clone(), status.body["status"]["readyCount"].clone()),
            (json!(0), json!(0))
        );
        status.ok(&podset_body());
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(expected.values().map(|e| e.created.len()).sum::<usize>(), 2);

    // The pods' events have not reached the cache yet: the next reconcile waits for them rather
    // than creating two more.
    let (ctx, mut api) = Context::test();
    let waiting = super::PodSetState::listed(cached(&cache), expected);
    let action = reconcile(Arc::new(podset(2, "hello")), ctx.clone(), waiting.clone()).await.expect("reconciled");
    assert_eq!(action, kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1)));
    let next = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods");
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(100), next).await.is_err(),
        "no pod is created twice"
    );
    drop((waiting, ctx));
}

#[tokio::test]
async fn scale_down_deletes_the_newest_pod() {
    let pods = [mine("a", "hello", true, 1), mine("b", "hello", true, 2)];
    scenario(podset(1, "hello"), &pods.clone(), |mut api| async move {
        let delete = api.expect(Method::DELETE, "/api/v1/namespaces/team-a/pods/b").await;
        assert_eq!(delete.body["preconditions"]["uid"], "uid-b");
        delete.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["count"], 2, "counts what is there now");
        status.ok(&podset_body());
        api.expect_no_more().await;
    })
    .await;
}

#[tokio::test]
async fn a_message_change_adds_one_pod_of_the_new_template() {
    let pods = [mine("a", "hello", true, 1), mine("b", "hello", true, 2)];
    let hash = template_hash(&podset(2, "bye"));
    scenario(podset(2, "bye"), &pods.clone(), |mut api| async move {
        let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
        assert_eq!(create.body["metadata"]["labels"]["watcher.dev/pod-template-hash"], hash.as_str());
        assert_eq!(create.body["spec"]["containers"][0]["env"][0]["value"], "bye");
        create.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["conditions"][0]["reason"], "RollingOut");
        status.ok(&podset_body());
        api.expect_no_more().await;
    })
    .await;
}

/// The pods refused (Pod Security `restricted` of another era, a quota): `Ready` says so in
/// kube-apiserver's words, once as an Event, and no second pod is tried in the same pass.
#[tokio::test]
async fn a_refused_pod_reaches_the_status() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../admission/fixtures/resources/quota-must-specify-1.36.json");
    let refusal: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    let words = format!("kube-apiserver refused the pod: {}", refusal["message"].as_str().expect("message"));
    let expected = scenario(podset(3, "hello"), &[], |mut api| async move {
        let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
        assert_eq!(create.body["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"], false);
        create.respond(http::StatusCode::FORBIDDEN, &refusal);
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        assert_eq!(event.body["reason"], "PodRefused");
        assert_eq!(event.body["note"], words);
        let body = event.body.clone();
        event.respond(http::StatusCode::CREATED, &body);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        let ready = &status.body["status"]["conditions"][0];
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("PodRefused")));
        assert_eq!(ready["message"], words);
        status.ok(&podset_body());
        api.expect_no_more().await;
    })
    .await;
    assert!(expected.is_empty(), "nothing was created to wait for");
}

#[test]
fn resources_go_into_the_pods_and_the_template() {
    let plain = podset(1, "hello");
    let mut sized = plain.clone();
    sized.spec.resources =
        serde_json::from_value(json!({"limits": {"cpu": "100m", "memory": "32Mi"}})).expect("resources");
    assert_ne!(super::template_hash(&plain), super::template_hash(&sized), "a change replaces the pods");
    let mut empty = plain.clone();
    empty.spec.resources = Some(Default::default());
    assert_eq!(super::template_hash(&plain), super::template_hash(&empty), "no resources: the hash pods carry");
    let pod = super::desired_pod(&sized).expect("pod");
    let limits = pod.spec.expect("spec").containers[0].resources.clone().and_then(|r| r.limits).expect("limits");
    assert_eq!(limits["memory"].0, "32Mi");
}
