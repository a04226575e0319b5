//! The router, in-process, with AdmissionReview bodies captured from kube-apiserver v1.36.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::ByteString;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use rstest::rstest;
use serde_json::{Value, json};
use tower::ServiceExt;
use watcher_api::Watcher;

use watcher_admission::InjectOptions;

use crate::{AdmissionResult, Metrics, Reviewer, router};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../admission/fixtures/admission-review/");

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}{name}")).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn watcher(name: &str, spec: Value) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec,
    }))
    .expect("valid Watcher")
}

fn log_watcher() -> Watcher {
    watcher(
        "log-watcher",
        json!({"container": {"name": "log-watcher", "image": "busybox:1.36"},
               "volume": {"name": "logs", "emptyDir": {}}, "configData": {"LEVEL": "debug"},
               "imagePullSecrets": {"name": "regcred"}}),
    )
}

fn store(watchers: Vec<Watcher>) -> Store<Watcher> {
    let (reader, mut writer) = reflector::store();
    for watcher in watchers {
        writer.apply_watcher_event(&Event::Apply(watcher));
    }
    reader
}

fn app(watchers: Vec<Watcher>) -> (axum::Router, Metrics) {
    let metrics = Metrics::register(&mut Registry::default());
    let options = InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    (router(Reviewer::new(store(watchers), options), metrics.clone()), metrics)
}

async fn post(app: &axum::Router, body: impl Into<Body>) -> (StatusCode, Value, String) {
    let request = Request::post("/mutate?timeout=10s")
        .header("content-type", "application/json")
        .body(body.into())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), text)
}

/// The response's patch, decoded, and applied to the request's pod.
fn patched_pod(request: &Value, response: &Value) -> (Vec<Value>, Value) {
    let encoded = response["response"]["patch"].clone();
    let bytes: ByteString = serde_json::from_value(encoded).expect("base64 patch");
    let ops: Vec<Value> = serde_json::from_slice(&bytes.0).expect("JSON patch");
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone())).expect("valid ops");
    let mut pod = request["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("patch applies to the real pod");
    (ops, pod)
}

#[tokio::test]
async fn named_annotated_pod_is_injected() {
    let (app, metrics) = app(vec![log_watcher()]);
    let request = fixture("pod-create-named-annotated.json");
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (review["apiVersion"].as_str(), review["kind"].as_str()),
        (Some("admission.k8s.io/v1"), Some("AdmissionReview"))
    );
    let response = &review["response"];
    assert_eq!(response["uid"], "39a859b2-1366-467b-80f2-70a009723439");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert!(response.get("warnings").is_none());

    let (ops, pod) = patched_pod(&request, &review);
    let paths: Vec<_> = ops.iter().map(|op| op["path"].as_str().unwrap_or_default()).collect();
    assert_eq!(
        paths,
        [
            "/spec/initContainers",
            "/spec/volumes/-",
            "/spec/imagePullSecrets",
            "/metadata/annotations/watcher.dev~1injected",
            "/metadata/annotations/watcher.dev~1injected-without-image",
            "/metadata/annotations/watcher.dev~1sidecars",
            "/metadata/annotations/watcher.dev~1injected-config",
            "/metadata/annotations/cluster-autoscaler.kubernetes.io~1safe-to-evict-local-volumes"
        ]
    );
    assert_eq!(pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"], "logs");
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "log-watcher");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(sidecar["envFrom"], json!([{"configMapRef": {"name": "log-watcher-config"}}]));
    let volumes: Vec<_> =
        pod["spec"]["volumes"].as_array().expect("volumes").iter().map(|v| v["name"].clone()).collect();
    assert_eq!(volumes, [json!("data"), json!("kube-api-access-jzvlc"), json!("logs")]);
    assert_eq!(pod["spec"]["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        pod["metadata"]["annotations"]["watcher.dev/injected"],
        format!("log-watcher@{}", log_watcher().spec.spec_hash())
    );
    assert_eq!(metrics.count(AdmissionResult::injected), 1);
}

#[rstest]
#[case::dry_run("pod-create-dry-run.json", json!({"matchLabels": {"run": "dry"}}), "4845950a-f383-4954-afd0-572ab9002979")]
#[case::generate_name(
    "pod-create-from-replicaset-generatename.json",
    json!({"matchLabels": {"app": "web"}}),
    "108fe1e6-94e4-438f-867f-e81d25946438"
)]
#[tokio::test]
async fn selected_pods_are_injected(#[case] file: &str, #[case] selector: Value, #[case] uid: &str) {
    let selecting = watcher("metrics", json!({"container": {"name": "metrics", "image": "m:1"}, "selector": selector}));
    let hash = selecting.spec.spec_hash().to_owned();
    let (app, _) = app(vec![selecting]);
    let request = fixture(file);
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["uid"], uid);
    assert_eq!(review["response"]["allowed"], true);
    let (_, pod) = patched_pod(&request, &review);
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "metrics");
    assert_eq!(pod["metadata"]["annotations"]["watcher.dev/injected"], format!("metrics@{hash}"));
}

#[tokio::test]
async fn existing_container_name_is_allowed_with_a_warning() {
    let everyone = watcher("watcher", json!({"container": {"name": "watcher", "image": "w:1"}, "selector": {}}));
    let (app, metrics) = app(vec![everyone]);
    let (status, review, _) =
        post(&app, fixture("pod-create-init-and-existing-watcher-container.json").to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let response = &review["response"];
    assert_eq!(response["uid"], "1c260c5f-204a-4aa8-90c2-9a8366fc4f9d");
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    assert_eq!(
        response["warnings"],
        json!(["Watcher watcher not injected: the pod already has a container named watcher"])
    );
    assert_eq!(metrics.count(AdmissionResult::skipped), 1);
}

/// A required Watcher (`failurePolicy: Fail`) the pod cannot get refuses the pod, saying why;
/// an optional one next to it changes nothing of that.
#[tokio::test]
async fn a_required_watcher_that_collides_refuses_the_pod() {
    let required = watcher(
        "watcher",
        json!({"container": {"name": "watcher", "image": "w:1"}, "selector": {}, "failurePolicy": "Fail"}),
    );
    let optional = watcher("other", json!({"container": {"name": "other", "image": "o:1"}, "selector": {}}));
    let (app, metrics) = app(vec![required, optional]);
    let (status, review, _) =
        post(&app, fixture("pod-create-init-and-existing-watcher-container.json").to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let response = &review["response"];
    assert_eq!(response["uid"], "1c260c5f-204a-4aa8-90c2-9a8366fc4f9d");
    assert_eq!(response["allowed"], false);
    assert!(response.get("patch").is_none(), "a refused pod gets no patch");
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(
        response["status"]["message"],
        "Watcher watcher is required (failurePolicy: Fail) and cannot be injected: \
         the pod already has a container named watcher"
    );
    assert_eq!(metrics.count(AdmissionResult::refused), 1);
}

#[tokio::test]
async fn missing_watcher_is_allowed_with_a_warning() {
    let (app, _) = app(vec![]);
    let (status, review, _) = post(&app, fixture("pod-create-named-annotated.json").to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none());
    assert_eq!(review["response"]["warnings"], json!(["Watcher log-watcher not found in namespace team-a"]));
}

#[tokio::test]
async fn pods_of_the_operator_namespace_are_not_injected() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["namespace"] = json!("watcher-system");
    request["request"]["object"]["metadata"]["namespace"] = json!("watcher-system");
    let (app, _) = app(vec![log_watcher()]);
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!((status, review["response"]["allowed"].clone()), (StatusCode::OK, json!(true)));
    assert!(review["response"].get("patch").is_none());
}

/// Bodies that are not a usable review: a 4xx with a reason, never a 5xx or a panic.
#[rstest]
#[case::empty("", StatusCode::BAD_REQUEST, "not an AdmissionReview")]
#[case::invalid_json("{\"kind\": ", StatusCode::BAD_REQUEST, "not an AdmissionReview")]
#[case::empty_object("{}", StatusCode::BAD_REQUEST, "")]
#[case::no_request(
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
    StatusCode::BAD_REQUEST,
    "no request"
)]
#[case::array("[1,2]", StatusCode::BAD_REQUEST, "not an AdmissionReview")]
#[tokio::test]
async fn unreadable_bodies_get_400(#[case] body: &str, #[case] status: StatusCode, #[case] message: &str) {
    let (app, metrics) = app(vec![log_watcher()]);
    let (got, _, text) = post(&app, body.to_owned()).await;
    assert_eq!(got, status, "{text}");
    assert!(text.contains(message), "{text}");
    assert_eq!(metrics.count(AdmissionResult::error), 1);
}

#[tokio::test]
async fn missing_uid_gets_400() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"].as_object_mut().expect("object").remove("uid");
    let (app, _) = app(vec![log_watcher()]);
    let (status, _, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("uid"), "{text}");
}

/// A request with a uid but no kind is named for the field it lacks.
#[tokio::test]
async fn missing_kind_gets_400_naming_kind() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"].as_object_mut().expect("object").remove("kind");
    let (app, _) = app(vec![log_watcher()]);
    let (status, _, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("missing field `kind`"), "{text}");
}

/// A lone UTF-16 surrogate escape inside a skipped field (found by the fuzz target in the user's
/// groups) is not JSON either: skipping checks escapes, not their pairing.
#[tokio::test]
async fn a_lone_surrogate_in_a_skipped_field_gets_400() {
    let (app, metrics) = app(vec![log_watcher()]);
    let text = std::fs::read_to_string(format!("{FIXTURES}pod-create-named-annotated.json")).expect("fixture exists");
    let body = text.replacen("\"kind\":\"CreateOptions\"", "\"kind\":\"Create\\udbff\\rOptions\"", 1);
    assert_ne!(body, text, "the fixture has the options to break");
    let (status, _, text) = post(&app, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("not an AdmissionReview"), "{text}");
    assert_eq!(metrics.count(AdmissionResult::injected), 0);
}

#[tokio::test]
async fn a_pod_that_cannot_be_read_is_denied_with_the_uid() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["object"]["spec"] = json!({"containers": "nginx"});
    let (app, metrics) = app(vec![log_watcher()]);
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(review["response"]["uid"], "39a859b2-1366-467b-80f2-70a009723439");
    assert_eq!(review["response"]["allowed"], false);
    assert!(review["response"]["status"]["message"].as_str().is_some_and(|m| m.contains("cannot read the pod")));
    assert!(review["response"].get("patch").is_none());
    assert_eq!(metrics.count(AdmissionResult::error), 1);
}

/// Anything but a Pod (the webhook's rules widened by hand) is allowed unchanged with a warning
/// naming the kind, readable or not as a pod, and counted as skipped.
#[rstest]
#[case::deployment(
    json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}}),
    "watcher-operator mutates pods only; Deployment.apps admitted unchanged"
)]
#[case::service_unreadable_as_a_pod(
    json!({"group": "", "version": "v1", "kind": "Service"}),
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"containers": 80}}),
    "watcher-operator mutates pods only; Service admitted unchanged"
)]
#[tokio::test]
async fn other_kinds_are_allowed_unchanged(#[case] kind: Value, #[case] object: Value, #[case] warning: &str) {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["kind"] = kind;
    request["request"]["object"] = object;
    let (app, metrics) = app(vec![log_watcher()]);
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let response = &review["response"];
    assert_eq!(response["uid"], "39a859b2-1366-467b-80f2-70a009723439");
    assert_eq!(response["allowed"], true, "{text}");
    assert_eq!(response["warnings"], json!([warning]));
    assert!(response.get("patch").is_none() && response.get("status").is_none(), "{text}");
    assert_eq!(metrics.count(AdmissionResult::skipped), 1);
    assert_eq!(metrics.count(AdmissionResult::error), 0);
}

/// A byte that is not UTF-8 inside a field injection skips (an owner reference's name) makes
/// the body something other than JSON: 400, never a patch.
#[tokio::test]
async fn a_body_that_is_not_utf8_gets_400() {
    let (app, metrics) = app(vec![watcher(
        "metrics",
        json!({"container": {"name": "metrics", "image": "m:1"}, "selector": {"matchLabels": {"app": "web"}}}),
    )]);
    let text = std::fs::read_to_string(format!("{FIXTURES}pod-create-from-replicaset-generatename.json"))
        .expect("fixture exists");
    let (before, after) = text.split_once("\"name\":\"web-7d876db474\"").expect("the owner reference");
    let mut body = before.as_bytes().to_vec();
    body.extend_from_slice(b"\"name\":\"web-\xff\"");
    body.extend_from_slice(after.as_bytes());
    let (status, _, text) = post(&app, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("not UTF-8"), "{text}");
    assert_eq!(metrics.count(AdmissionResult::error), 1);
    assert_eq!(metrics.count(AdmissionResult::injected), 0);
}

#[tokio::test]
async fn a_pod_without_containers_is_allowed_unchanged() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["object"]["spec"] = json!({});
    let (app, _) = app(vec![log_watcher()]);
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(review["response"]["uid"], "39a859b2-1366-467b-80f2-70a009723439");
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none());
}

#[tokio::test]
async fn oversize_bodies_get_413() {
    let (app, _) = app(vec![log_watcher()]);
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["object"]["metadata"]["annotations"]["padding"] = json!("x".repeat(4 * 1024 * 1024));
    let (status, _, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn updates_are_allowed_unchanged() {
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["operation"] = json!("UPDATE");
    let (app, _) = app(vec![log_watcher()]);
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!((status, review["response"]["allowed"].clone()), (StatusCode::OK, json!(true)));
    assert!(review["response"].get("patch").is_none());
}

#[tokio::test]
async fn only_post_is_served() {
    let (app, _) = app(vec![]);
    let request = Request::get("/mutate").body(Body::empty()).expect("request");
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}

/// The copies in this crate are the files kube-apiserver sent, unchanged.
#[test]
fn fixtures_are_the_shared_captures() {
    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/admission-review/");
    let Ok(entries) = std::fs::read_dir(shared) else { return }; // a checkout without shared/
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = std::fs::read(format!("{FIXTURES}{name}")).unwrap_or_default();
        assert_eq!(ours, std::fs::read(entry.path()).expect("readable"), "{name} differs from shared/");
    }
}

#[test]
fn reviewer_is_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Reviewer<Store<Watcher>>>();
    let _ = Arc::new(());
}

/// ImagePolicies through the router: a namespace outside a policy's selector is untouched; one
/// inside is rewritten in the answer's patch, counted as `rewritten`.
#[rstest]
#[case::selected(json!({"mirror": "on"}), true)]
#[case::outside_the_selector(json!({"mirror": "off"}), false)]
#[tokio::test]
async fn image_policies_follow_their_namespace_selector(#[case] labels: Value, #[case] rewritten: bool) {
    struct Namespaces(std::collections::BTreeMap<String, String>, Vec<Arc<watcher_api::CompiledPolicy>>);
    impl watcher_admission::PolicySource for Namespaces {
        fn policies_for(&self, _: &str) -> Vec<Arc<watcher_api::CompiledPolicy>> {
            self.1.iter().filter(|p| p.selects(&self.0)).cloned().collect()
        }
    }
    let policy: watcher_api::ImagePolicy = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "mirror"},
        "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}],
                 "namespaceSelector": {"matchLabels": {"mirror": "on"}}}}))
    .expect("valid ImagePolicy");
    let labels = serde_json::from_value(labels).expect("labels");
    let metrics = Metrics::register(&mut Registry::default());
    let options = InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let reviewer = Reviewer::new(store(vec![]), options)
        .with_policies(Arc::new(Namespaces(labels, vec![Arc::new(policy.compile())])));
    let app = router(reviewer, metrics.clone());
    let request = fixture("pod-create-from-replicaset-generatename.json");
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(review["response"]["allowed"], true);
    if rewritten {
        let (_, pod) = patched_pod(&request, &review);
        assert_eq!(pod["spec"]["containers"][0]["image"], "mirror.internal/library/nginx:1.27");
        assert_eq!(pod["metadata"]["annotations"]["watcher.dev/original-images"], "nginx=nginx:1.27");
        assert_eq!(metrics.count(AdmissionResult::rewritten), 1);
    } else {
        assert!(review["response"].get("patch").is_none(), "{text}");
        assert_eq!(metrics.count(AdmissionResult::skipped), 1);
    }
}

/// What serde skips unchecked, besides UTF-8 and surrogates (found by the fuzz target): a
/// number out of f64 range, and nesting deeper than a parse allows. Each is a 400.
#[rstest]
#[case::number_out_of_range("1e999")]
#[case::too_deep(&format!("{}{}", "[".repeat(200), "]".repeat(200)))]
#[tokio::test]
async fn what_a_full_parse_rejects_in_a_skipped_field_gets_400(#[case] value: &str) {
    let (app, metrics) = app(vec![log_watcher()]);
    let text = std::fs::read_to_string(format!("{FIXTURES}pod-create-named-annotated.json")).expect("fixture exists");
    let body = text.replacen("\"dryRun\":false", &format!("\"dryRun\":false,\"extra\":{value}"), 1);
    assert_ne!(body, text, "the fixture has the field to extend");
    let (status, _, text) = post(&app, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(metrics.count(AdmissionResult::injected), 0);
}

/// `watcher-operator check`'s probe: a server-side dry run of a pod annotated
/// `watcher.dev/probe` comes back with `watcher.dev/probed` (the webhook's version); the same
/// pod created for real is left as it is.
#[tokio::test]
async fn a_dry_run_probe_is_answered_with_a_patch() {
    let (app, metrics) = app(vec![]);
    let mut request = fixture("pod-create-dry-run.json");
    request["request"]["object"]["metadata"]["annotations"] = json!({"watcher.dev/probe": "check"});
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let (_, pod) = patched_pod(&request, &review);
    assert_eq!(pod["metadata"]["annotations"]["watcher.dev/probed"], env!("CARGO_PKG_VERSION"));
    assert_eq!(metrics.count(AdmissionResult::probe), 1);

    request["request"]["dryRun"] = json!(false);
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(review["response"].get("patch").is_none(), "only a dry run is probed: {review}");
}

/// The former fuzz findings, hidden deeper: in fields the narrow pod view skips (a container's
/// `terminationMessagePath`, the managed fields). Each is still a 400: the one pass checks
/// every field it does not read.
#[rstest]
#[case::lone_surrogate_in_a_container(
    "\"terminationMessagePath\":\"/dev/termination-log\"",
    "\"terminationMessagePath\":\"\\udbff\\r\""
)]
#[case::out_of_range_in_a_container(
    "\"terminationMessagePath\":\"/dev/termination-log\"",
    "\"terminationMessagePath\":1e999"
)]
#[case::too_deep_in_managed_fields(
    "\"managedFields\":[{\"manager\":\"kubectl-client-side-apply\"",
    &format!("\"managedFields\":[{{\"deep\":{}{},\"manager\":\"kubectl-client-side-apply\"", "[".repeat(200), "]".repeat(200))
)]
#[tokio::test]
async fn findings_inside_the_pod_get_400(#[case] from: &str, #[case] to: &str) {
    let (app, metrics) = app(vec![log_watcher()]);
    let text = std::fs::read_to_string(format!("{FIXTURES}pod-create-named-annotated.json")).expect("fixture exists");
    let body = text.replacen(from, to, 1);
    assert_ne!(body, text, "the fixture has the field");
    let (status, _, text) = post(&app, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(metrics.count(AdmissionResult::injected), 0);
}

/// The body the server writes is the JSON serde's derive gives: with a patch and warnings, a
/// denial with its status, a plain allow.
#[test]
fn answers_are_written_as_serde_writes_them() {
    let reviewer = Reviewer::new(store(vec![log_watcher()]), InjectOptions::default());
    let injected = fixture("pod-create-named-annotated.json");
    let mut warned = injected.clone();
    warned["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] = json!("log-watcher,missing\"one");
    let mut denied = injected.clone();
    denied["request"]["object"]["spec"] = json!({"containers": "nginx"});
    let mut updated = injected.clone();
    updated["request"]["operation"] = json!("UPDATE");
    for (body, patched, warnings) in [(injected, true, 0), (warned, true, 1), (denied, false, 0), (updated, false, 0)] {
        let (answer, _) = reviewer.review(body.to_string().as_bytes()).expect("answered");
        let written: Value = serde_json::from_slice(&answer.to_json().expect("encodes")).expect("JSON");
        assert_eq!(written, serde_json::to_value(&answer).expect("serialises"));
        assert_eq!(written["response"].get("patch").is_some(), patched, "{written}");
        assert_eq!(written["response"]["warnings"].as_array().map_or(0, Vec::len), warnings, "{written}");
    }
}

/// A Watcher stored before its CRD had the rules (or on Kubernetes 1.24, without CEL) whose
/// injection would make the pod invalid: the real pod is admitted without it, with a warning
/// naming the field, and a valid Watcher it also asks for is still injected.
#[rstest]
#[case::container_name(json!({"container": {"name": "Bad_Name", "image": "busybox:1.36"}}), "spec.container.name: \"Bad_Name\" is not a DNS-1123 label")]
#[case::volume_name(json!({"container": {"name": "log-watcher", "image": "busybox:1.36"}, "volume": {"name": "Logs", "emptyDir": {}}}), "spec.volume.name")]
#[case::no_image(json!({"container": {"name": "log-watcher"}}), "spec.container.image: required")]
#[case::mount_of_no_volume(
    json!({"container": {"name": "log-watcher", "image": "busybox:1.36", "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}}),
    "volume \"logs\" is neither the pod's nor the Watcher's"
)]
#[case::selector(
    json!({"container": {"name": "log-watcher", "image": "busybox:1.36"},
           "selector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["web"]}]}}),
    "values: must be empty with operator Exists"
)]
#[tokio::test]
async fn a_watcher_that_would_make_the_pod_invalid_is_left_out(#[case] spec: Value, #[case] problem: &str) {
    let fine = watcher("metrics", json!({"container": {"name": "metrics", "image": "m:1"}}));
    let (app, _) = app(vec![watcher("log-watcher", spec), fine.clone()]);
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] = json!("log-watcher,metrics");
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
    let warnings = review["response"]["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().expect("text");
    assert!(warning.starts_with("Watcher log-watcher not injected: the pod would be invalid with it: "), "{warning}");
    assert!(warning.contains(problem), "{warning}");
    let (_, pod) = patched_pod(&request, &review);
    let names: Vec<&str> =
        pod["spec"]["initContainers"].as_array().expect("sidecars").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["metrics"], "only the valid Watcher");
    assert_eq!(pod["metadata"]["annotations"]["watcher.dev/injected"], format!("metrics@{}", fine.spec.spec_hash()));
}

/// A volumeMount of a volume the pod has (the captured pod's `data`) is fine.
#[tokio::test]
async fn a_mount_of_the_pods_own_volume_is_injected() {
    let (app, _) = app(vec![watcher(
        "log-watcher",
        json!({"container": {"name": "log-watcher", "image": "busybox:1.36",
                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]}}),
    )]);
    let request = fixture("pod-create-named-annotated.json");
    let (_, review, _) = post(&app, request.to_string()).await;
    assert!(review["response"].get("warnings").is_none(), "{review}");
    let (_, pod) = patched_pod(&request, &review);
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "log-watcher");
}

/// A namespace labelled `watcher.dev/injection=disabled` is never injected nor rewritten, even
/// where the installed configuration's namespaceSelector lets its pods through (a hand-written
/// or edited configuration): the webhook holds the namespace labels, and refuses by itself.
#[tokio::test]
async fn an_opted_out_namespace_is_never_injected_whatever_the_selectors() {
    struct OptedOut(Vec<Arc<watcher_api::CompiledPolicy>>);
    impl watcher_admission::PolicySource for OptedOut {
        fn policies_for(&self, _: &str) -> Vec<Arc<watcher_api::CompiledPolicy>> {
            self.0.clone()
        }
        fn namespace(&self, namespace: &str) -> watcher_admission::NamespaceAdmission {
            watcher_admission::NamespaceAdmission { injection_disabled: namespace == "team-a", ..Default::default() }
        }
    }
    let policy: watcher_api::ImagePolicy = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "mirror"},
        "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}]}}))
    .expect("valid ImagePolicy");
    let metrics = Metrics::register(&mut Registry::default());
    let options = InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let reviewer = Reviewer::new(store(vec![log_watcher()]), options)
        .with_policies(Arc::new(OptedOut(vec![Arc::new(policy.compile())])));
    let app = router(reviewer, metrics.clone());
    let request = fixture("pod-create-named-annotated.json");
    assert_eq!(request["request"]["namespace"], "team-a", "the captured pod asks for log-watcher in team-a");
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none(), "{text}");
    assert_eq!(review["response"]["uid"], request["request"]["uid"]);
    assert_eq!(metrics.count(AdmissionResult::injected), 0);
}

/// The sidecar sees the app, through the router: the captured pods with a Watcher that sets
/// every field. The answer's patch applies to the pod kube-apiserver sent; each part shows; a
/// part the pod cannot take is a warning of the answer, and the pod is allowed. The same review
/// a second time, on the patched pod after the ServiceAccount plugin, patches nothing.
#[rstest]
#[case::named_annotated("pod-create-named-annotated.json")]
#[case::from_a_replicaset("pod-create-from-replicaset-generatename.json")]
#[case::with_init_and_a_watcher_container("pod-create-init-and-existing-watcher-container.json")]
#[case::dry_run("pod-create-dry-run.json")]
#[tokio::test]
async fn the_sidecar_sees_the_app_through_the_router(#[case] name: &str) {
    let sees = watcher(
        "sees",
        json!({"container": {"name": "sees", "image": "busybox:1.36"}, "selector": {},
               "volume": {"name": "sees-state", "emptyDir": {}},
               "shareVolumes": "ReadOnly", "appVolumeMounts": [{"mountPath": "/var/watch"}],
               "transferEnv": [{"names": ["HOSTNAME"]}], "shareProcessNamespace": true,
               "podAnnotations": {"prometheus.io/scrape": "true"},
               "initContainers": [{"name": "prepare-watch", "image": "busybox:1.36"}]}),
    );
    let (app, _) = app(vec![sees]);
    let mut request = fixture(name);
    request["request"]["namespace"] = json!("team-a");
    let (status, review, _) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
    let (_, pod) = patched_pod(&request, &review);
    let containers = pod["spec"]["containers"].as_array().expect("containers");
    let init = pod["spec"]["initContainers"].as_array().expect("init containers");
    assert_eq!(init[0]["name"], "prepare-watch", "{name}: before the pod's own");
    let sidecar = init.last().expect("the native sidecar");
    assert_eq!(sidecar["name"], "sees");
    // The app's mounts, read-only, without the token (kube-apiserver mounts it itself).
    let shared: Vec<&Value> = sidecar["volumeMounts"].as_array().into_iter().flatten().collect();
    let app_paths: Vec<&Value> = containers
        .iter()
        .filter(|c| c["name"] != "sees")
        .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
        .map(|m| &m["mountPath"])
        .filter(|p| *p != "/var/run/secrets/kubernetes.io/serviceaccount" && *p != "/var/watch")
        .collect();
    assert_eq!(shared.iter().map(|m| &m["mountPath"]).collect::<Vec<_>>(), app_paths, "{name}");
    assert!(shared.iter().all(|m| m["readOnly"] == true));
    assert!(
        containers.iter().all(|c| c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["mountPath"] == "/var/watch"))
    );
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/scrape"], "true");
    // No app container defines HOSTNAME: skipped, and not a warning.
    assert!(sidecar.get("env").is_none());

    // Reinvocation: the ServiceAccount plugin has mounted the token into the new containers.
    let mut again = request.clone();
    let mut reinvoked = pod.clone();
    let token = reinvoked["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find_map(|v| v["name"].as_str().filter(|n| n.starts_with("kube-api-access-")).map(str::to_owned))
        .expect("the token volume");
    for list in ["initContainers", "containers"] {
        for container in reinvoked["spec"][list].as_array_mut().expect("list") {
            let mounts = container["volumeMounts"].as_array().cloned().unwrap_or_default();
            if !mounts.iter().any(|m| m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount") {
                let mut mounts = mounts;
                mounts.push(json!({"name": token, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
                container["volumeMounts"] = json!(mounts);
            }
        }
    }
    again["request"]["object"] = reinvoked;
    let (_, review, _) = post(&app, again.to_string()).await;
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none(), "{name}: reinvocation patched again: {}", review["response"]);
}

/// A namespace that enforces a Pod Security level, for the router.
struct Enforcing(&'static str);

impl watcher_admission::PolicySource for Enforcing {
    fn policies_for(&self, _: &str) -> Vec<Arc<watcher_api::CompiledPolicy>> {
        Vec::new()
    }

    fn namespace(&self, _: &str) -> watcher_admission::NamespaceAdmission {
        watcher_admission::NamespaceAdmission::from_lookup(|key| {
            (key == watcher_admission::pod_security::ENFORCE_LABEL).then_some(self.0)
        })
    }
}

/// The captured review of a ReplicaSet's pod, carrying instead a real pod that passes
/// `restricted` by itself (argo-cd's redis, as kube-apiserver 1.36 stores it).
fn restricted_review() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../admission/fixtures/real-workloads/argo-cd-1.36-plain.json"
    ))
    .expect("fixture");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    let redis = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("argocd-redis")));
    let mut review = fixture("pod-create-from-replicaset-generatename.json");
    review["request"]["object"] = redis.expect("the redis pod").clone();
    review["request"]["object"]["metadata"]["annotations"] = json!({"watcher.dev/inject": "log-watcher,root-watcher"});
    review["request"]["namespace"] = json!("team-a");
    review
}

/// In a `restricted` namespace: the plain Watcher's sidecar gets the fields it leaves unset, the
/// one asking for root is left out with kube-apiserver's words, each counted; required, the
/// latter refuses the pod.
#[tokio::test]
async fn the_enforced_level_holds_after_the_patch() {
    let root = |policy: &str| {
        watcher(
            "root-watcher",
            json!({"container": {"name": "root", "image": "busybox:1.36", "securityContext": {"runAsUser": 0}},
                   "failurePolicy": policy}),
        )
    };
    for required in [false, true] {
        let metrics = Metrics::register(&mut Registry::default());
        let options = InjectOptions {
            excluded_namespaces: vec![],
            native_sidecars: true,
            server_minor: Some(36),
            ..Default::default()
        };
        let watchers = vec![log_watcher(), root(if required { "Fail" } else { "Ignore" })];
        let reviewer = Reviewer::new(store(watchers), options).with_policies(Arc::new(Enforcing("restricted")));
        let app = router(reviewer, metrics.clone());
        let request = restricted_review();
        let (status, review, text) = post(&app, request.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let violation = "it would make the pod violate PodSecurity \"restricted:latest\": runAsUser=0 \
                         (container \"root\" must not set runAsUser=0)";
        if required {
            assert_eq!(review["response"]["allowed"], false, "{text}");
            let message = review["response"]["status"]["message"].as_str().expect("message");
            assert!(message.contains("root-watcher is required") && message.contains(violation), "{message}");
            assert_eq!(metrics.pod_security_count(crate::PodSecurityOutcome::refused), 1);
            continue;
        }
        assert_eq!(review["response"]["allowed"], true, "{text}");
        assert_eq!(review["response"]["warnings"], json!([format!("Watcher root-watcher not injected: {violation}")]));
        let (_, pod) = patched_pod(&request, &review);
        let sidecar = pod["spec"]["initContainers"]
            .as_array()
            .expect("init containers")
            .iter()
            .find(|c| c["name"] == "log-watcher");
        assert_eq!(
            sidecar.expect("the sidecar")["securityContext"],
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
            "the pod sets runAsNonRoot and seccomp itself"
        );
        assert_eq!(pod["spec"]["securityContext"], request["request"]["object"]["spec"]["securityContext"]);
        assert_eq!(metrics.pod_security_count(crate::PodSecurityOutcome::adapted), 1);
        assert_eq!(metrics.pod_security_count(crate::PodSecurityOutcome::left_out), 1);
    }
}

/// A namespace with the ResourceQuota kube-apiserver stored (`limits.cpu: 300m`, nothing
/// used), for the router.
struct Quota(Arc<watcher_admission::resources::ResourceRules>);

impl watcher_admission::PolicySource for Quota {
    fn policies_for(&self, _: &str) -> Vec<Arc<watcher_api::CompiledPolicy>> {
        Vec::new()
    }

    fn resource_rules(&self, _: &str) -> Arc<watcher_admission::resources::ResourceRules> {
        self.0.clone()
    }
}

/// Under a quota on cpu and memory: the plain Watcher's sidecar gets the documented requests
/// and limits (kube-apiserver would refuse it without), the one whose 200m does not fit in what
/// is left is left out with the quota's words; each is counted.
#[tokio::test]
async fn the_namespaces_quota_holds_after_the_patch() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../admission/fixtures/resources/resourcequota-1.36.json"
    ))
    .expect("fixture");
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_str(&text).expect("quota");
    let rules = Arc::new(watcher_admission::resources::ResourceRules::new([], [&quota]));
    let big = watcher(
        "big-watcher",
        json!({"container": {"name": "big", "image": "busybox:1.36",
               "resources": {"requests": {"cpu": "200m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "32Mi"}}}}),
    );
    let metrics = Metrics::register(&mut Registry::default());
    let options = InjectOptions { native_sidecars: true, server_minor: Some(36), ..Default::default() };
    let reviewer = Reviewer::new(store(vec![log_watcher(), big]), options).with_policies(Arc::new(Quota(rules)));
    let app = router(reviewer, metrics.clone());
    let mut request = fixture("pod-create-named-annotated.json");
    request["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] = json!("log-watcher,big-watcher");
    for container in request["request"]["object"]["spec"]["containers"].as_array_mut().expect("containers") {
        container["resources"] =
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}});
    }
    let (status, review, text) = post(&app, request.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(review["response"]["allowed"], true, "{text}");
    let warnings = review["response"]["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w.as_str().is_some_and(|w| w.starts_with("Watcher big-watcher not injected")
            && w.contains("exceeded quota: team, requested: limits.cpu="))),
        "{warnings:?}"
    );
    let (_, pod) = patched_pod(&request, &review);
    let sidecar =
        pod["spec"]["initContainers"].as_array().expect("init containers").iter().find(|c| c["name"] == "log-watcher");
    assert_eq!(
        sidecar.expect("the sidecar")["resources"],
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}})
    );
    assert!(!pod.to_string().contains("\"big\""), "the Watcher left out is not in the pod");
    let left_out = pod["metadata"]["annotations"]["watcher.dev/left-out"].as_str().expect("said on the pod");
    assert!(
        left_out.starts_with(
            "big-watcher: the pod would fail its namespace's ResourceQuota team with it: exceeded quota: team"
        ),
        "{left_out}"
    );
    assert_eq!(metrics.resources_count(crate::ResourceOutcome::adapted), 1);
    assert_eq!(metrics.resources_count(crate::ResourceOutcome::left_out), 1);
}
