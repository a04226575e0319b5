use std::sync::Arc;
use std::time::Duration;

use http::Method;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use watcher_api::{At, AtPhase};

use super::{Plan, desired_pod, plan, pod_name, reconcile_at};
use crate::Context;
use crate::fixtures::NOT_FOUND;

const UID: &str = "a7000000-0000-4000-8000-000000000001";
const POD_PATH: &str = "/api/v1/namespaces/team-a/pods/backup-at";
const STATUS_PATH: &str = "/apis/watcher.dev/v1alpha1/namespaces/team-a/ats/backup/status";

fn at(spec: Value, status: Option<Value>) -> At {
    let mut spec_full = json!({"schedule": "2026-11-21T10:12:00Z", "command": "echo hello world!"});
    for (k, v) in spec.as_object().into_iter().flatten() {
        spec_full[k] = v.clone();
    }
    let mut object = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At",
        "metadata": {"name": "backup", "namespace": "team-a", "uid": UID, "generation": 1}, "spec": spec_full});
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid At")
}

fn time(s: &str) -> Timestamp {
    s.parse().expect("RFC 3339")
}

fn owned_pod(phase: &str, terminated: Option<Value>) -> Pod {
    let mut status = json!({"phase": phase, "startTime": "2026-11-21T10:12:01Z"});
    if let Some(terminated) = terminated {
        status["containerStatuses"] = json!([{"name": "command", "image": "busybox:1.36", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": terminated}}]);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "backup-at", "namespace": "team-a", "uid": "pod-uid",
                     "ownerReferences": [{"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "name": "backup", "uid": UID, "controller": true}]},
        "spec": {"containers": [{"name": "command"}]}, "status": status}))
    .expect("valid Pod")
}

fn phase_of(plan: &Plan) -> (Option<AtPhase>, Option<&str>) {
    (plan.status.phase, plan.status.reason.as_deref())
}

#[test]
fn before_the_schedule_it_waits_exactly_the_remaining_time() {
    let plan = plan(&at(json!({}), None), None, time("2026-11-21T10:00:00Z"));
    assert!(!plan.create_pod);
    assert_eq!(plan.requeue, Some(Duration::from_secs(12 * 60)));
    assert_eq!(phase_of(&plan), (Some(AtPhase::Pending), Some("Scheduled")));
}

#[test]
fn any_offset_is_the_same_instant() {
    let at = at(json!({"schedule": "2026-11-21T11:12:00+01:00"}), None);
    assert_eq!(plan(&at, None, time("2026-11-21T10:11:59Z")).requeue, Some(Duration::from_secs(1)));
    assert!(plan(&at, None, time("2026-11-21T10:12:00Z")).create_pod);
}

#[test]
fn at_the_schedule_it_creates_the_pod() {
    let plan = plan(&at(json!({}), None), None, time("2026-11-21T10:12:00Z"));
    assert!(plan.create_pod);
    assert_eq!(plan.status.pod_name.as_deref(), Some("backup-at"));
    assert_eq!(phase_of(&plan), (Some(AtPhase::Pending), Some("PodCreated")));
}

#[test]
fn noticed_after_the_starting_deadline_it_is_missed() {
    let at = at(json!({"startingDeadlineSeconds": 300}), None);
    assert!(plan(&at, None, time("2026-11-21T10:17:00Z")).create_pod, "at the deadline it still runs");
    let late = plan(&at, None, time("2026-11-21T10:17:01Z"));
    assert!(!late.create_pod);
    assert_eq!(phase_of(&late), (Some(AtPhase::Failed), Some("Missed")));
    assert!(late.status.completion_time.is_some());
}

#[test]
fn an_invalid_schedule_fails_with_the_parse_error() {
    let plan = plan(&at(json!({"schedule": "tomorrow at noon"}), None), None, time("2026-11-21T10:00:00Z"));
    assert!(!plan.create_pod);
    assert_eq!(phase_of(&plan), (Some(AtPhase::Failed), Some("InvalidSchedule")));
    let message = plan.status.message.unwrap_or_default();
    assert!(message.contains("\"tomorrow at noon\"") && message.contains("RFC 3339"), "{message}");
}

#[test]
fn the_phase_follows_the_pod() {
    let now = time("2026-11-21T10:13:00Z");
    let created = at(json!({}), Some(json!({"phase": "Pending", "podName": "backup-at"})));
    let running = plan(&created, Some(&owned_pod("Running", None)), now);
    assert_eq!(phase_of(&running), (Some(AtPhase::Running), Some("Running")));
    assert!(running.status.start_time.is_some());

    let ok = json!({"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-21T10:12:05Z"});
    let succeeded = plan(&created, Some(&owned_pod("Succeeded", Some(ok))), now);
    assert_eq!(phase_of(&succeeded), (Some(AtPhase::Succeeded), Some("Completed")));
    assert_eq!(succeeded.status.exit_code, Some(0));
    assert_eq!(succeeded.status.completion_time.map(|t| t.0), Some(time("2026-11-21T10:12:05Z")));

    let error = json!({"exitCode": 3, "reason": "Error", "finishedAt": "2026-11-21T10:12:05Z"});
    let failed = plan(&created, Some(&owned_pod("Failed", Some(error))), now);
    assert_eq!(phase_of(&failed), (Some(AtPhase::Failed), Some("Error")));
    assert_eq!(failed.status.exit_code, Some(3));
    assert_eq!(failed.status.message.as_deref(), Some("the command exited 3"));
}

#[test]
fn a_pod_deleted_while_running_fails_and_is_never_recreated() {
    let running = at(json!({}), Some(json!({"phase": "Running", "podName": "backup-at"})));
    let plan = plan(&running, None, time("2026-11-21T10:13:00Z"));
    assert!(!plan.create_pod);
    assert_eq!(phase_of(&plan), (Some(AtPhase::Failed), Some("PodDeleted")));
}

#[test]
fn finished_pods_are_deleted_after_their_ttl_and_the_status_kept() {
    let done = json!({"phase": "Succeeded", "podName": "backup-at", "exitCode": 0,
                      "completionTime": "2026-11-21T10:12:05Z", "reason": "Completed"});
    let at = at(json!({"ttlSecondsAfterFinished": 60}), Some(done));
    let pod = owned_pod("Succeeded", None);
    let early = plan(&at, Some(&pod), time("2026-11-21T10:12:35Z"));
    assert_eq!((early.delete_pod, early.requeue), (false, Some(Duration::from_secs(30))));
    let due = plan(&at, Some(&pod), time("2026-11-21T10:13:05Z"));
    assert!(due.delete_pod);
    assert_eq!(due.status.phase, Some(AtPhase::Succeeded));
    let gone = plan(&at, None, time("2026-11-21T10:20:00Z"));
    assert_eq!((gone.delete_pod, gone.create_pod, gone.status.phase), (false, false, Some(AtPhase::Succeeded)));
}

#[test]
fn the_pod_runs_the_command_once_and_never_restarts() {
    let pod = desired_pod(&at(json!({"activeDeadlineSeconds": 600, "image": "alpine:3"}), None)).expect("pod");
    let pod = serde_json::to_value(pod).expect("serialises");
    assert_eq!(pod["metadata"]["name"], "backup-at");
    assert_eq!(pod["metadata"]["labels"]["watcher.dev/at"], "backup");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], UID);
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["activeDeadlineSeconds"], 600);
    assert_eq!(pod["spec"]["containers"][0]["image"], "alpine:3");
    assert_eq!(pod["spec"]["containers"][0]["command"], json!(["/bin/sh", "-c", "echo hello world!"]));
    assert_eq!(pod_name(&"x".repeat(300)).len(), 253);
    assert_eq!(pod_name(&"x".repeat(300)), pod_name(&"x".repeat(300)), "long names stay deterministic");
}

/// One reconcile at `now` with `cached` in the pod cache, against `script`.
async fn scenario<F>(
    at: At,
    now: Timestamp,
    cached: Option<Pod>,
    script: impl FnOnce(crate::fixtures::ApiServerVerifier) -> F,
) -> Action
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ctx, verifier) = Context::test();
    let (store, mut writer) = kube::runtime::reflector::store();
    if let Some(pod) = cached {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(pod));
    }
    let server = tokio::spawn(script(verifier));
    let owned = crate::owned_pods::OwnedPods::listed(store);
    let action = reconcile_at(Arc::new(at), &ctx, &owned, now).await.expect("reconciled");
    drop(ctx);
    server.await.expect("scenario passed");
    action
}

fn at_echo() -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": "backup"},
           "spec": {"schedule": "2026-11-21T10:12:00Z", "command": "x"}})
}

#[tokio::test]
async fn before_the_schedule_nothing_is_read_or_written_and_it_requeues_for_the_remaining_time() {
    let now = time("2026-11-21T10:00:00Z");
    let steady = plan(&at(json!({}), None), None, now).status;
    let at = at(json!({}), Some(serde_json::to_value(steady).expect("status")));
    let action = scenario(at, now, None, |api| api.expect_no_more()).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(12 * 60)));
}

#[tokio::test]
async fn when_due_the_pod_is_created_then_the_status_written() {
    let action = scenario(at(json!({}), None), time("2026-11-21T10:12:00Z"), None, |mut api| async move {
        let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
        assert_eq!(create.body["metadata"]["name"], "backup-at");
        assert_eq!(create.body["spec"]["restartPolicy"], "Never");
        create.created();
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["phase"], "Pending");
        assert_eq!(status.body["status"]["podName"], "backup-at");
        status.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_pod_that_already_exists_is_not_created_twice() {
    // A restart after the pod was created but before the status recorded it.
    let now = time("2026-11-21T10:12:01Z");
    scenario(at(json!({}), None), now, Some(owned_pod("Pending", None)), |mut api| async move {
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["podName"], "backup-at");
        status.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
    // The same, with the cache a moment behind the create: the POST is refused, not repeated.
    scenario(at(json!({}), None), now, None, |mut api| async move {
        api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await.fail(409, "AlreadyExists");
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
}

#[tokio::test]
async fn a_finished_pod_ends_the_at_with_its_exit_code() {
    let at = at(json!({}), Some(json!({"phase": "Running", "podName": "backup-at"})));
    let terminated = json!({"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-21T10:12:05Z"});
    let pod = owned_pod("Succeeded", Some(terminated));
    scenario(at, time("2026-11-21T10:13:00Z"), Some(pod), |mut api| async move {
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["phase"], "Succeeded");
        assert_eq!(status.body["status"]["exitCode"], 0);
        assert_eq!(status.body["status"]["completionTime"], "2026-11-21T10:12:05Z");
        status.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
}

/// A pod the status names but the cache lacks is read once: the cache may just be behind.
#[tokio::test]
async fn a_pod_missing_from_the_cache_is_confirmed_before_the_at_fails() {
    let running = || {
        at(
            json!({}),
            Some(json!({"phase": "Pending", "podName": "backup-at", "reason": "PodCreated",
        "message": "the pod is starting"})),
        )
    };
    let now = time("2026-11-21T10:12:02Z");
    // Behind: the pod is there; nothing fails.
    scenario(running(), now, None, |mut api| async move {
        api.expect(Method::GET, POD_PATH).await.ok(&owned_pod("Pending", None));
        api.expect(Method::PATCH, STATUS_PATH).await.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
    // Gone: the At fails with PodDeleted.
    scenario(running(), now, None, |mut api| async move {
        api.expect(Method::GET, POD_PATH).await.fail(NOT_FOUND.0, NOT_FOUND.1);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["phase"], "Failed");
        assert_eq!(status.body["status"]["reason"], "PodDeleted");
        status.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
}

/// What kube-apiserver 1.36 answered a pod that does not state what the namespace's quota counts.
fn quota_refusal() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../admission/fixtures/resources/quota-must-specify-1.36.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// The pod refused (a quota): the At says so in kube-apiserver's words, once as an Event, names
/// no pod, and tries again soon; a later try finds the same words and says nothing twice.
#[tokio::test]
async fn a_refused_pod_reaches_the_status_and_is_tried_again() {
    let now = time("2026-11-21T10:12:00Z");
    let words = quota_refusal()["message"].as_str().expect("message").to_owned();
    let expected = format!("kube-apiserver refused the pod: {words}");
    let said = expected.clone();
    let action = scenario(at(json!({}), None), now, None, |mut api| async move {
        let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
        let context = &create.body["spec"]["containers"][0]["securityContext"];
        assert_eq!(context["runAsNonRoot"], true, "restricted as written");
        create.respond(http::StatusCode::FORBIDDEN, &quota_refusal());
        let event = api.expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events").await;
        assert_eq!((event.body["type"].as_str(), event.body["reason"].as_str()), (Some("Warning"), Some("PodRefused")));
        assert_eq!(event.body["note"], said);
        let body = event.body.clone();
        event.respond(http::StatusCode::CREATED, &body);
        let status = api.expect(Method::PATCH, STATUS_PATH).await;
        assert_eq!(status.body["status"]["phase"], "Pending");
        assert_eq!(status.body["status"]["reason"], "PodRefused");
        assert_eq!(status.body["status"]["message"], said);
        assert!(status.body["status"].get("podName").is_none(), "no pod is recorded");
        status.ok(&at_echo());
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(action, Action::requeue(crate::REFUSED_RETRY));

    let mut refused = plan(&at(json!({}), None), None, now);
    super::refused(&mut refused, &words, Some(1));
    assert_eq!(refused.status.message.as_deref(), Some(expected.as_str()));
    let again = at(json!({}), Some(serde_json::to_value(&refused.status).expect("status")));
    let action = scenario(again, time("2026-11-21T10:12:10Z"), None, |mut api| async move {
        let create = api.expect(Method::POST, "/api/v1/namespaces/team-a/pods").await;
        create.respond(http::StatusCode::FORBIDDEN, &quota_refusal());
        api.expect_no_more().await;
    })
    .await;
    assert_eq!(action, Action::requeue(crate::REFUSED_RETRY));
}

#[test]
fn the_pod_states_the_resources_and_passes_restricted() {
    let at =
        at(json!({"resources": {"requests": {"cpu": "10m", "memory": 16000000}, "limits": {"cpu": "100m"}}}), None);
    let pod = desired_pod(&at).expect("pod");
    let container = &pod.spec.expect("spec").containers[0];
    let resources = serde_json::to_value(container.resources.as_ref().expect("resources")).expect("JSON");
    assert_eq!(resources, json!({"requests": {"cpu": "10m", "memory": "16000000"}, "limits": {"cpu": "100m"}}));
    let context = serde_json::to_value(container.security_context.as_ref().expect("context")).expect("JSON");
    assert_eq!(
        context,
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true,
               "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
    );
}
