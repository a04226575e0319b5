use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::Request as HttpRequest;
use axum::routing::get;
use tower::ServiceExt;

use super::*;

const AUTHENTICATED: &str = include_str!("fixtures/tokenreview-authenticated-1.36.json");
const INVALID: &str = include_str!("fixtures/tokenreview-invalid-1.36.json");
const ALLOWED: &str = include_str!("fixtures/subjectaccessreview-allowed-1.36.json");
const DENIED: &str = include_str!("fixtures/subjectaccessreview-denied-1.36.json");

/// kube-apiserver as captured: the TokenReview answer `review(token)` gives (`None`: a 500),
/// and the SubjectAccessReview answer. Counts the requests, and keeps what was asked.
struct ApiServer {
    requests: Arc<AtomicUsize>,
    asked: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
}

fn api_server(review: fn(&str) -> Option<&'static str>, access: &'static str) -> (kube::Client, ApiServer) {
    let (service, mut handle) =
        tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
    let requests = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (requests.clone(), asked.clone());
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            count.fetch_add(1, Ordering::SeqCst);
            let path = request.uri().path().to_owned();
            let body = request.into_body().collect_bytes().await.expect("body");
            let sent: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let answer = if path.ends_with("/tokenreviews") {
                review(sent["spec"]["token"].as_str().unwrap_or_default())
            } else {
                assert_eq!(path, "/apis/authorization.k8s.io/v1/subjectaccessreviews");
                Some(access)
            };
            log.lock().expect("lock").push((path, sent));
            let response = match answer {
                Some(body) => http::Response::builder().status(201).body(kube::client::Body::from(body.as_bytes().to_vec())),
                None => http::Response::builder().status(500).body(kube::client::Body::from(
                    br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","code":500}"#.to_vec(),
                )),
            };
            send.send_response(response.expect("response"));
        }
    });
    (kube::Client::new(service, "default"), ApiServer { requests, asked })
}

fn only_good(token: &str) -> Option<&'static str> {
    Some(if token == "good" { AUTHENTICATED } else { INVALID })
}

#[tokio::test]
async fn an_allowed_token_is_reviewed_once_then_remembered() {
    let (client, server) = api_server(only_good, ALLOWED);
    let auth = MetricsAuth::new(client);
    for _ in 0..5 {
        assert_eq!(auth.verdict("good").await.expect("reviewed"), Verdict::Allowed);
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 2, "one TokenReview, one SubjectAccessReview");
    // The SubjectAccessReview asks for the user kube-apiserver authenticated, and `get /metrics`.
    let asked = server.asked.lock().expect("lock").clone();
    let spec = &asked[1].1["spec"];
    assert_eq!(spec["user"], "system:serviceaccount:watcher-system:prometheus");
    assert_eq!(spec["uid"], "3646530d-a703-4a0a-a5c9-f21ee971b23d");
    assert_eq!(spec["groups"][1], "system:serviceaccounts:watcher-system");
    assert_eq!(spec["nonResourceAttributes"], serde_json::json!({"path": "/metrics", "verb": "get"}));
    assert!(spec["extra"]["authentication.kubernetes.io/credential-id"].is_array(), "{spec}");
}

#[tokio::test]
async fn an_unknown_token_is_unauthenticated_without_an_access_review() {
    let (client, server) = api_server(only_good, ALLOWED);
    let auth = MetricsAuth::new(client);
    assert_eq!(auth.verdict("not-a-token").await.expect("reviewed"), Verdict::Unauthenticated);
    assert_eq!(auth.verdict("not-a-token").await.expect("reviewed"), Verdict::Unauthenticated);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "one TokenReview, remembered");
}

#[tokio::test]
async fn a_token_without_the_permission_is_forbidden_by_name() {
    let (client, _server) = api_server(only_good, DENIED);
    let auth = MetricsAuth::new(client);
    assert_eq!(
        auth.verdict("good").await.expect("reviewed"),
        Verdict::Forbidden("system:serviceaccount:watcher-system:prometheus".into())
    );
}

#[tokio::test]
async fn an_api_error_is_not_remembered() {
    let (client, server) = api_server(|_| None, ALLOWED);
    let auth = MetricsAuth::new(client);
    assert!(auth.verdict("good").await.is_err());
    assert!(auth.verdict("good").await.is_err());
    assert_eq!(server.requests.load(Ordering::SeqCst), 2, "asked again after an error");
}

#[tokio::test]
async fn the_cache_stays_bounded_under_a_flood_of_tokens() {
    let (client, _server) = api_server(only_good, ALLOWED);
    let auth = MetricsAuth::new(client);
    for i in 0..(MAX_VERDICTS + 10) {
        assert_eq!(auth.verdict(&format!("flood-{i}")).await.expect("reviewed"), Verdict::Unauthenticated);
    }
    assert!(auth.verdicts.lock().expect("lock").len() <= MAX_VERDICTS);
}

async fn answer(router: &Router, authorization: Option<&str>) -> (StatusCode, HeaderMap, String) {
    let mut request = HttpRequest::get("/metrics");
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    let response = router.clone().oneshot(request.body(Body::empty()).expect("request")).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.expect("body");
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

fn guarded(auth: Arc<MetricsAuth>) -> Router {
    Router::new()
        .route("/metrics", get(|| async { "watcher_leader 1\n" }))
        .layer(axum::middleware::from_fn_with_state(auth, require))
}

#[tokio::test]
async fn metrics_answer_401_403_or_the_metrics() {
    let (client, _server) = api_server(only_good, ALLOWED);
    let router = guarded(MetricsAuth::new(client));
    let (status, headers, body) = answer(&router, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
    assert_eq!(answer(&router, Some("Basic dXNlcjpwYXNz")).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(answer(&router, Some("Bearer ")).await.0, StatusCode::UNAUTHORIZED);
    let (status, _, body) = answer(&router, Some("Bearer not-a-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!body.contains("watcher_leader"), "{body}");
    let (status, _, body) = answer(&router, Some("bearer good")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "watcher_leader 1\n"));

    let (client, _server) = api_server(only_good, DENIED);
    let (status, _, body) = answer(&guarded(MetricsAuth::new(client)), Some("Bearer good")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("system:serviceaccount:watcher-system:prometheus") && body.contains("metrics-reader"),
        "{body}"
    );

    let (client, _server) = api_server(|_| None, ALLOWED);
    let (status, _, body) = answer(&guarded(MetricsAuth::new(client)), Some("Bearer good")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("etcdserver: request timed out"), "{body}");
}
