//! Series aggregation against a mocked API server: one create, then patches of `series`.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::Handle;

use super::*;

fn pod() -> PodIdentity {
    PodIdentity { name: Some("shop-7d9f".into()), namespace: Some("team-a".into()), uid: Some("uid-1".into()) }
}

async fn next(
    handle: &mut Handle<Request<Body>, Response<Body>>,
) -> (String, String, Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.expect("a request");
    let (method, uri) = (request.method().to_string(), request.uri().to_string());
    let bytes = request.into_body().collect_bytes().await.expect("body");
    (method, uri, serde_json::from_slice(&bytes).expect("JSON"), send)
}

fn answer(send: tower_test::mock::SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    let response = Response::builder().status(status).body(Body::from(body.to_string().into_bytes()));
    send.send_response(response.expect("response"));
}

#[tokio::test]
async fn one_event_per_rule_whose_series_grows() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "team-a");
    let mut publisher = EventPublisher::new(client, &pod()).expect("a pod");
    let server = tokio::spawn(async move {
        let (method, uri, body, send) = next(&mut handle).await;
        assert_eq!((method.as_str(), uri.as_str()), ("POST", "/apis/events.k8s.io/v1/namespaces/team-a/events?"));
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["reason"], "LogRuleError");
        assert_eq!(
            body["regarding"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "shop-7d9f", "namespace": "team-a", "uid": "uid-1"})
        );
        assert_eq!(body["reportingController"], "watcher.dev/watcher-agent");
        assert_eq!(body["reportingInstance"], "shop-7d9f");
        assert!(body.get("series").is_none(), "the first occurrence has no series");
        let name = body["metadata"]["name"].as_str().expect("name").to_owned();
        assert!(name.starts_with("shop-7d9f.error."), "{name}");
        answer(send, StatusCode::CREATED, &body);

        for count in [2, 5] {
            let (method, uri, body, send) = next(&mut handle).await;
            assert_eq!(
                (method.as_str(), uri),
                ("PATCH", format!("/apis/events.k8s.io/v1/namespaces/team-a/events/{name}?"))
            );
            assert_eq!(body["series"]["count"], count);
            assert!(body["series"]["lastObservedTime"].is_string());
            assert_eq!(body.as_object().map(|o| o.len()), Some(1), "only the series changes: {body}");
            answer(send, StatusCode::OK, &json!({}));
        }
        // Expired: created again, as a new series.
        let (method, _, _, send) = next(&mut handle).await;
        assert_eq!(method, "PATCH");
        answer(
            send,
            StatusCode::NOT_FOUND,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "not found"}),
        );
        let (method, _, body, send) = next(&mut handle).await;
        assert_eq!(method, "POST");
        assert_eq!(body["series"]["count"], 4);
        answer(send, StatusCode::CREATED, &body);
    });
    publisher.publish("error", "LogRuleError", "rule error: 5 matches in 1m", 1).await.expect("created");
    publisher.publish("error", "LogRuleError", "ignored after the first", 1).await.expect("patched");
    publisher.publish("error", "LogRuleError", "ignored", 3).await.expect("patched");
    publisher.publish("error", "LogRuleError", "again", 4).await.expect("created again");
    drop(publisher);
    server.await.expect("the server saw what it expected");
}

#[test]
fn notes_are_cut_at_a_character_boundary() {
    assert_eq!(truncate("short", 10), "short");
    let cut = truncate(&"é".repeat(600), MAX_NOTE);
    assert!(cut.len() <= MAX_NOTE && cut.ends_with('…'), "{}", cut.len());
}
