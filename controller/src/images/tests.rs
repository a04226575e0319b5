use std::sync::Arc;

use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodSpec;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::ImagePolicy;
use watcher_api::image::Rule;
use watcher_cache::PolicyCache;

use super::{Recorded, TemplateRewrite, plan_template, reconcile, state_for_tests, template_matches, template_patch};
use crate::Context;

fn rules(pairs: &[(&str, &str)]) -> Vec<Rule> {
    pairs.iter().map(|(from, to)| Rule::compile(from, to).expect("valid")).collect()
}

fn spec(containers: Value) -> PodSpec {
    serde_json::from_value(json!({"containers": containers})).expect("pod spec")
}

fn recorded<'a>(originals: &'a str, rewritten: &'a str) -> Recorded<'a> {
    Recorded { originals: Some(originals), rewritten: Some(rewritten) }
}

/// A plan as `((container, image) written, original-images, rewritten-images)`.
type Planned = (Vec<(String, String)>, String, String);

fn plan(spec: &PodSpec, recorded: Recorded<'_>, rules: &[Rule]) -> Option<Planned> {
    let refs: Vec<&Rule> = rules.iter().collect();
    plan_template(spec, recorded, &refs).map(|plan| {
        let images = plan.images.into_iter().map(|(name, _, image)| (name, image)).collect();
        (images, plan.original_images, plan.rewritten_images)
    })
}

fn app(image: &str) -> PodSpec {
    spec(json!([{"name": "app", "image": image}]))
}

const MIRROR: (&str, &str) = ("docker.io/library/", "mirror.internal/library/");

#[test]
fn templates_are_rewritten_once_and_recorded() {
    let mirror = rules(&[MIRROR]);
    let refs: Vec<&Rule> = mirror.iter().collect();
    let fresh = spec(json!([{"name": "app", "image": "alpine"}, {"name": "side", "image": "quay.io/x/y:1"}]));
    assert_eq!(
        plan_template(&fresh, Recorded::default(), &refs),
        Some(TemplateRewrite {
            images: vec![("app".into(), false, "mirror.internal/library/alpine:latest".into())],
            original_images: "app=alpine".into(),
            rewritten_images: "app=mirror.internal/library/alpine:latest".into(),
        })
    );
    // Already rewritten: nothing to do.
    let done = app("mirror.internal/library/alpine:latest");
    let ours = recorded("app=alpine", "app=mirror.internal/library/alpine:latest");
    assert_eq!(plan_template(&done, ours, &refs), None);
    assert!(template_matches(&done, ours, &refs), "matched counts the original");
    assert!(!template_matches(&app("quay.io/x/y"), Recorded::default(), &refs));
    // Nothing matches, nothing recorded: nothing to write.
    assert_eq!(plan_template(&app("quay.io/x/y"), Recorded::default(), &refs), None);
}

/// The owner wins: what the controller wrote is planned again from its original; anything else
/// in the template was set by the owner.
#[test]
fn the_owner_wins() {
    let mirror = rules(&[MIRROR]);
    let ours = recorded("app=nginx:1.27", "app=mirror.internal/library/nginx:1.27");
    let no_rules = Vec::new();
    let cases = [
        (
            "the owner sets an image no rule matches: left as written, dropped from the annotations",
            app("quay.io/acme/web:2.0"),
            ours,
            &mirror,
            Some((vec![], String::new(), String::new())),
        ),
        (
            "the owner sets an image a rule matches: rewritten, recorded as the new original",
            app("nginx:1.28"),
            ours,
            &mirror,
            Some((
                vec![("app".into(), "mirror.internal/library/nginx:1.28".into())],
                "app=nginx:1.28".into(),
                "app=mirror.internal/library/nginx:1.28".into(),
            )),
        ),
        (
            "the policy changed: what the controller wrote is planned again from the original",
            app("mirror.internal/library/nginx:1.27"),
            ours,
            &rules(&[("docker.io/library/", "mirror2.internal/library/")]),
            Some((
                vec![("app".into(), "mirror2.internal/library/nginx:1.27".into())],
                "app=nginx:1.27".into(),
                "app=mirror2.internal/library/nginx:1.27".into(),
            )),
        ),
        (
            "the policy no longer matches the original: nothing written, the record kept",
            app("mirror.internal/library/nginx:1.27"),
            ours,
            &rules(&[("quay.io/", "mirror.internal/quay/")]),
            None,
        ),
        (
            "the policy was deleted (no rule left): nothing written, nothing reverted",
            app("mirror.internal/library/nginx:1.27"),
            ours,
            &no_rules,
            None,
        ),
        (
            "the container was renamed: the new name is the owner's, the old entry goes",
            spec(json!([{"name": "web", "image": "alpine:3.20"}])),
            ours,
            &mirror,
            Some((
                vec![("web".into(), "mirror.internal/library/alpine:3.20".into())],
                "web=alpine:3.20".into(),
                "web=mirror.internal/library/alpine:3.20".into(),
            )),
        ),
        (
            "the container was removed: its entries go, nothing else is written",
            spec(json!([{"name": "other", "image": "quay.io/x/y:1"}])),
            ours,
            &mirror,
            Some((vec![], String::new(), String::new())),
        ),
        (
            "written before the rewritten images were recorded: recognised by the rules, recorded",
            app("mirror.internal/library/nginx:1.27"),
            Recorded { originals: Some("app=nginx:1.27"), rewritten: None },
            &mirror,
            Some((vec![], "app=nginx:1.27".into(), "app=mirror.internal/library/nginx:1.27".into())),
        ),
    ];
    for (case, spec, recorded, rules, expected) in cases {
        let planned = plan(&spec, recorded, rules);
        assert_eq!(planned, expected, "{case}");
        // Applying the plan reaches a fixed point: planning again writes nothing.
        if let Some((images, originals, rewritten)) = planned {
            let mut applied = spec.clone();
            for (name, image) in images {
                let container = applied.containers.iter_mut().find(|c| c.name == name).expect("container");
                container.image = Some(image);
            }
            let again = Recorded { originals: Some(&originals), rewritten: Some(&rewritten) };
            assert_eq!(plan(&applied, again, rules), None, "{case}: stable once applied");
        }
    }
}

#[test]
fn a_changed_policy_never_chains() {
    let pin_then_mirror = rules(&[("alpine:latest", "nginx:1.13"), MIRROR]);
    let refs: Vec<&Rule> = pin_then_mirror.iter().collect();
    let pinned = app("nginx:1.13");
    assert_eq!(plan_template(&pinned, recorded("app=alpine", "app=nginx:1.13"), &refs), None, "not chained");
    // The owner sets a new image: rewritten, and recorded as the new original.
    let plan = plan_template(&app("alpine:3.20"), recorded("app=alpine", "app=nginx:1.13"), &refs).expect("rewritten");
    assert_eq!(plan.images[0].2, "mirror.internal/library/alpine:3.20");
    assert_eq!(plan.original_images, "app=alpine:3.20");
}

#[test]
fn the_patch_merges_containers_by_name_with_a_precondition() {
    let rewrite = TemplateRewrite {
        images: vec![("app".into(), false, "m/app:1".into()), ("init".into(), true, "m/init:1".into())],
        original_images: "app=app:1,init=init:1".into(),
        rewritten_images: "app=m/app:1,init=m/init:1".into(),
    };
    assert_eq!(
        template_patch(Some("5"), &rewrite),
        json!({"metadata": {"resourceVersion": "5", "annotations": {"watcher.dev/original-images": "app=app:1,init=init:1",
                                                                     "watcher.dev/rewritten-images": "app=m/app:1,init=m/init:1"}},
               "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "m/app:1"}],
                                              "initContainers": [{"name": "init", "image": "m/init:1"}]}}}})
    );
    // Only the annotations: the owner's image is forgotten, the template untouched.
    let forget = TemplateRewrite { images: vec![], original_images: String::new(), rewritten_images: String::new() };
    assert_eq!(
        template_patch(Some("6"), &forget),
        json!({"metadata": {"resourceVersion": "6", "annotations": {"watcher.dev/original-images": null,
                                                                     "watcher.dev/rewritten-images": null}}})
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

/// `recorded`: the original image of `app`, and what the controller wrote for it.
fn deployment(resource_version: &str, image: &str, recorded: Option<(&str, &str)>) -> Deployment {
    let annotations = recorded.map_or(json!({}), |(original, written)| {
        json!({"watcher.dev/original-images": format!("app={original}"),
               "watcher.dev/rewritten-images": format!("app={written}")})
    });
    serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "resourceVersion": resource_version, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}}))
    .expect("valid Deployment")
}

fn context(ctx: Arc<Context>, policy: &ImagePolicy, deployment: Deployment) -> (Arc<Context>, Arc<super::ImagesState>) {
    let (policies, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(policy.clone()));
    let (deployments, mut deployment_writer) = reflector::store();
    deployment_writer.apply_watcher_event(&Event::Apply(deployment));
    (ctx, state_for_tests(PolicyCache::from_stores(policies, reflector::store().0), deployments))
}

fn expected_patch(resource_version: &str) -> Value {
    json!({"metadata": {"resourceVersion": resource_version, "annotations": {"watcher.dev/original-images": "app=alpine:3.20",
                                                                          "watcher.dev/rewritten-images": "app=mirror.internal/library/alpine:3.20"}},
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
        patch.ok(&deployment(
            "6",
            "mirror.internal/library/alpine:3.20",
            Some(("alpine:3.20", "mirror.internal/library/alpine:3.20")),
        ));
        let status = api.expect(Method::PATCH, STATUS).await;
        assert_eq!(status.body["status"]["workloads"], json!({"matched": 1, "rewritten": 1}));
        assert_eq!(status.body["status"]["conditions"][0]["status"], "True");
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(policy), shared.0, shared.1).await.expect("reconciled");
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
        retry.ok(&deployment(
            "8",
            "mirror.internal/library/alpine:3.20",
            Some(("alpine:3.20", "mirror.internal/library/alpine:3.20")),
        ));
        let status = api.expect(Method::PATCH, STATUS).await;
        assert_eq!(status.body["status"]["workloads"], json!({"matched": 1, "rewritten": 1}));
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(policy), shared.0, shared.1).await.expect("reconciled");
    server.await.expect("scenario passed");
}

#[tokio::test]
async fn a_steady_state_writes_nothing() {
    let (ctx, api) = Context::test();
    let status = json!({"observedGeneration": 1, "workloads": {"matched": 1, "rewritten": 1},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "1 rules apply",
                        "observedGeneration": 1, "lastTransitionTime": "2026-11-21T10:00:00Z"}]});
    let policy = policy(Some(status));
    let shared = context(
        ctx,
        &policy,
        deployment(
            "9",
            "mirror.internal/library/alpine:3.20",
            Some(("alpine:3.20", "mirror.internal/library/alpine:3.20")),
        ),
    );
    let server = tokio::spawn(api.expect_no_more());
    reconcile(Arc::new(policy), shared.0, shared.1).await.expect("reconciled");
    server.await.expect("no request");
}

/// `kubectl set image deployment/web app=quay.io/acme/web:2.0` on a rewritten Deployment: the
/// owner's image stays; the one patch only forgets the original.
#[tokio::test]
async fn an_image_the_owner_sets_is_never_reverted() {
    let (ctx, mut api) = Context::test();
    let policy = policy(None);
    let owner_changed =
        deployment("9", "quay.io/acme/web:2.0", Some(("nginx:1.27", "mirror.internal/library/nginx:1.27")));
    let shared = context(ctx, &policy, owner_changed);
    let server = tokio::spawn(async move {
        let patch = api.expect(Method::PATCH, DEPLOYMENT).await;
        assert_eq!(
            patch.body,
            json!({"metadata": {"resourceVersion": "9", "annotations": {"watcher.dev/original-images": null,
                                                                         "watcher.dev/rewritten-images": null}}}),
            "no image written"
        );
        patch.ok(&deployment("10", "quay.io/acme/web:2.0", None));
        let status = api.expect(Method::PATCH, STATUS).await;
        assert_eq!(status.body["status"]["workloads"], json!({"matched": 1, "rewritten": 0}));
        status.ok(&self::policy(None));
        api.expect_no_more().await;
    });
    reconcile(Arc::new(policy), shared.0, shared.1).await.expect("reconciled");
    server.await.expect("scenario passed");
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
    reconcile(Arc::new(invalid), shared.0, shared.1).await.expect("reconciled");
    server.await.expect("scenario passed");
}
