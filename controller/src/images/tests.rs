use std::sync::Arc;

use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodSpec;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::ImagePolicy;
use watcher_api::image::Rule;

use super::{TemplateRewrite, context_for_tests, plan_template, reconcile, template_matches, template_patch};
use crate::{Context, PolicyCache};

fn rules(pairs: &[(&str, &str)]) -> Vec<Rule> {
    pairs.iter().map(|(from, to)| Rule::compile(from, to).expect("valid")).collect()
}

fn spec(containers: Value) -> PodSpec {
    serde_json::from_value(json!({"containers": containers})).expect("pod spec")
}

#[test]
fn templates_are_rewritten_once_and_recorded() {
    let mirror = rules(&[("docker.io/library/", "mirror.internal/library/")]);
    let refs: Vec<&Rule> = mirror.iter().collect();
    let fresh = spec(json!([{"name": "app", "image": "alpine"}, {"name": "side", "image": "quay.io/x/y:1"}]));
    assert_eq!(
        plan_template(&fresh, None, &refs),
        Some(TemplateRewrite {
            images: vec![("app".into(), false, "mirror.internal/library/alpine:latest".into())],
            original_images: "app=alpine".into(),
        })
    );
    // Already rewritten: nothing to do.
    let done = spec(json!([{"name": "app", "image": "mirror.internal/library/alpine:latest"}]));
    assert_eq!(plan_template(&done, Some("app=alpine"), &refs), None);
    assert!(template_matches(&done, Some("app=alpine"), &refs), "matched counts the original");
    assert!(!template_matches(&spec(json!([{"name": "app", "image": "quay.io/x/y"}])), None, &refs));
}

#[test]
fn a_changed_policy_rewrites_again_from_the_original_and_never_chains() {
    let moved = rules(&[("docker.io/library/", "mirror2.internal/library/")]);
    let refs: Vec<&Rule> = moved.iter().collect();
    let old = spec(json!([{"name": "app", "image": "mirror.internal/library/alpine:latest"}]));
    let plan = plan_template(&old, Some("app=alpine"), &refs).expect("rewritten again");
    assert_eq!(plan.images, [("app".to_owned(), false, "mirror2.internal/library/alpine:latest".to_owned())]);
    assert_eq!(plan.original_images, "app=alpine");

    let pin_then_mirror = rules(&[("alpine:latest", "nginx:1.13"), ("docker.io/library/", "mirror.internal/library/")]);
    let refs: Vec<&Rule> = pin_then_mirror.iter().collect();
    let pinned = spec(json!([{"name": "app", "image": "nginx:1.13"}]));
    assert_eq!(plan_template(&pinned, Some("app=alpine"), &refs), None, "nginx:1.13 is the rewrite of alpine");
    // The owner sets a new image: rewritten, and recorded as the new original.
    let edited = spec(json!([{"name": "app", "image": "alpine:3.20"}]));
    let plan = plan_template(&edited, Some("app=alpine"), &refs).expect("rewritten");
    assert_eq!(plan.images[0].2, "mirror.internal/library/alpine:3.20");
    assert_eq!(plan.original_images, "app=alpine:3.20");
}

#[test]
fn the_patch_merges_containers_by_name_with_a_precondition() {
    let rewrite = TemplateRewrite {
        images: vec![("app".into(), false, "m/app:1".into()), ("init".into(), true, "m/init:1".into())],
        original_images: "app=app:1,init=init:1".into(),
    };
    assert_eq!(
        template_patch(Some("5"), &rewrite),
        json!({"metadata": {"resourceVersion": "5", "annotations": {"watcher.dev/original-images": "app=app:1,init=init:1"}},
               "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "m/app:1"}],
                                              "initContainers": [{"name": "init", "image": "m/init:1"}]}}}})
    );
}

// Mocked API server.

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team-a/deployments/web";
const STATUS: &str = "/apis/watcher.dev/v1alpha1/imagepolicies/mirror/status";

fn policy(status: Option<Value>) -> ImagePolicy {
    let mut object = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": "mirror", "generation": 1, "uid": "p-uid"},
        "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}], "workloads": true}});
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid ImagePolicy")
}

fn deployment(resource_version: &str, image: &str, annotation: Option<&str>) -> Deployment {
    let annotations = annotation.map_or(json!({}), |a| json!({"watcher.dev/original-images": a}));
    serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "resourceVersion": resource_version, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}}))
    .expect("valid Deployment")
}

fn context(ctx: Arc<Context>, policy: &ImagePolicy, deployment: Deployment) -> Arc<super::ImagesContext> {
    let (policies, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(policy.clone()));
    let (deployments, mut deployment_writer) = reflector::store();
    deployment_writer.apply_watcher_event(&Event::Apply(deployment));
    context_for_tests(ctx, PolicyCache::from_stores(policies, reflector::store().0), deployments)
}

fn expected_patch(resource_version: &str) -> Value {
    json!({"metadata": {"resourceVersion": resource_version, "annotations": {"watcher.dev/original-images": "app=alpine:3.20"}},
           "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "mirror.internal/library/alpine:3.20"}]}}}})
}

#[tokio::test]
async fn a_template_is_patched_with_its_resource_version_then_the_status_counts_it() {
    let (ctx, mut api) = Context::test();
    let policy = policy(None);
    let shared = context(ctx, &policy, deployment("5", "alpine:3.20", None));
    let server = tokio::spawn(async move {
        let patch = api.expect(Method::PATCH, DEPLOYMENT).await;
        assert_eq!(patch.body, expected_patch("5"));
        patch.ok(&deployment("6", "mirror.internal/library/alpine:3.20", Some("app=alpine:3.20")));
        let status = api.expect(Method::PATCH, STATUS).await;
        assert_eq!(status.body["status"]["workloads"], json!({"matched": 1, "rewritten": 1}));
        assert_eq!(status.body["status"]["conditions"][0]["status"], "True");
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(policy), shared).await.expect("reconciled");
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn a_conflict_is_retried_from_the_workload_as_it_is_now() {
    let (ctx, mut api) = Context::test();
    let policy = policy(None);
    let shared = context(ctx, &policy, deployment("5", "alpine:3.20", None));
    let server = tokio::spawn(async move {
        api.expect(Method::PATCH, DEPLOYMENT).await.fail(409, "Conflict");
        api.expect(Method::GET, DEPLOYMENT).await.ok(&deployment("7", "alpine:3.20", None));
        let retry = api.expect(Method::PATCH, DEPLOYMENT).await;
        assert_eq!(retry.body, expected_patch("7"), "the fresh resourceVersion");
        retry.ok(&deployment("8", "mirror.internal/library/alpine:3.20", Some("app=alpine:3.20")));
        let status = api.expect(Method::PATCH, STATUS).await;
        assert_eq!(status.body["status"]["workloads"], json!({"matched": 1, "rewritten": 1}));
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(policy), shared).await.expect("reconciled");
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn a_steady_state_writes_nothing() {
    let (ctx, api) = Context::test();
    let status = json!({"observedGeneration": 1, "workloads": {"matched": 1, "rewritten": 1},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "1 rules apply",
                        "observedGeneration": 1, "lastTransitionTime": "2026-11-21T10:00:00Z"}]});
    let policy = policy(Some(status));
    let shared = context(ctx, &policy, deployment("9", "mirror.internal/library/alpine:3.20", Some("app=alpine:3.20")));
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(policy), shared).await.expect("reconciled");
    server.await.expect("no request");
}

#[tokio::test]
async fn an_invalid_rule_is_reported_and_never_applied() {
    let (ctx, mut api) = Context::test();
    let mut invalid = policy(None);
    invalid.spec.rewrites[0].to = "mirror.internal/library".into();
    let shared = context(ctx, &invalid, deployment("5", "alpine:3.20", None));
    let server = tokio::spawn(async move {
        let status = api.expect(Method::PATCH, STATUS).await;
        let ready = &status.body["status"]["conditions"][0];
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("InvalidRule")));
        assert!(ready["message"].as_str().is_some_and(|m| m.contains("rewritten to a prefix")), "{ready}");
        assert_eq!(status.body["status"]["workloads"], Value::Null);
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(invalid), shared).await.expect("reconciled");
    server.await.expect("scenario passed");
}
