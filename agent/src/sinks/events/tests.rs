//! The Event cadence against a mocked API server, the clock passed in: create at the first
//! occurrence, patch at the second, then every 30 minutes while it grows, a last patch when the
//! series closes after 6 minutes without one; created again when gone; refused for good once.

use std::sync::Arc;

use crate::metrics::Registry;
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::*;

fn pod() -> PodIdentity {
    PodIdentity { name: Some("shop-7d9f".into()), namespace: Some("team-a".into()), uid: Some("uid-1".into()) }
}

/// A request the mocked server saw.
#[derive(Debug)]
struct Seen {
    method: String,
    uri: String,
    body: Value,
}

/// A mocked API server answering each request with the next of `statuses` (the request's body
/// back, or a Status for an error); what it saw comes on the receiver.
fn server(statuses: Vec<u16>) -> (kube::Client, mpsc::UnboundedReceiver<Seen>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for status in statuses {
            let Some((request, send)) = handle.next_request().await else { return };
            let (method, uri) = (request.method().to_string(), request.uri().to_string());
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let body: Value = serde_json::from_slice(&bytes).expect("JSON");
            let answer = if status < 300 {
                body.clone()
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status, "message": "no"})
            };
            let response = Response::builder().status(status).body(Body::from(answer.to_string().into_bytes()));
            send.send_response(response.expect("response"));
            let _ = seen.send(Seen { method, uri, body });
        }
    });
    (kube::Client::new(service, "team-a"), requests)
}

fn metrics() -> (Arc<Metrics>, Registry) {
    let mut registry = Registry::default();
    (Arc::new(Metrics::register(&mut registry, &["stdout".into()], &[], 10)), registry)
}

fn alert(name: &str, occurrences: u64, line: &str) -> AlertState {
    AlertState {
        firing: true,
        firings: 1,
        occurrences,
        note: format!("rule {name} matched 3 times within 3 in 1m; last line: {line}"),
        ..AlertState::new(name)
    }
}

fn drain(requests: &mut mpsc::UnboundedReceiver<Seen>) -> Vec<Seen> {
    let mut seen = Vec::new();
    while let Ok(request) = requests.try_recv() {
        seen.push(request);
    }
    seen
}

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_series_is_written_as_client_go_writes_it() {
    let (client, mut requests) = server(vec![201, 200, 200, 200, 201]);
    let mut publisher = EventPublisher::new(client, &pod()).expect("a pod");
    let (metrics, registry) = metrics();
    let t0 = Instant::now();
    let wall: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let at = |d: Duration| (t0 + d, wall + d);
    let mut sync = async |occurrences: u64, line: &str, after: Duration| {
        let (now, wall) = at(after);
        publisher.sync(&[alert("error", occurrences, line)], now, wall.into(), false, &metrics).await;
    };

    sync(1, "ERROR one", Duration::ZERO).await;
    let created = drain(&mut requests);
    assert_eq!(created.len(), 1);
    let body = &created[0].body;
    assert_eq!(
        (created[0].method.as_str(), created[0].uri.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/team-a/events?")
    );
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["reason"], "LogRuleError");
    assert_eq!(body["note"], "rule error matched 3 times within 3 in 1m; last line: ERROR one");
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "shop-7d9f", "namespace": "team-a", "uid": "uid-1"})
    );
    assert_eq!(
        (body["reportingController"].as_str(), body["reportingInstance"].as_str()),
        (Some(REPORTING_CONTROLLER), Some("shop-7d9f"))
    );
    assert!(body.get("series").is_none(), "the first occurrence has no series");
    let name = body["metadata"]["name"].as_str().expect("name").to_owned();
    assert!(name.starts_with("shop-7d9f.") && name.len() <= 253, "{name}");

    sync(2, "ERROR two", Duration::from_secs(10)).await;
    let second = drain(&mut requests);
    assert_eq!(
        (second[0].method.as_str(), second[0].uri.as_str()),
        ("PATCH", &*format!("/apis/events.k8s.io/v1/namespaces/team-a/events/{name}?"))
    );
    assert_eq!(second[0].body["series"]["count"], 2, "the second occurrence: at once");
    assert_eq!(second[0].body.as_object().map(|o| o.len()), Some(1), "only the series: the note is immutable");

    // One occurrence a minute for half an hour: written once, at the heartbeat.
    for minute in 1..=30 {
        sync(2 + minute, "ERROR more", MINUTE * minute as u32).await;
    }
    assert!(drain(&mut requests).is_empty(), "no write between the second occurrence and the heartbeat");
    sync(33, "ERROR last", MINUTE * 30 + Duration::from_secs(10)).await;
    let heartbeat = drain(&mut requests);
    assert_eq!(heartbeat.len(), 1);
    assert_eq!(heartbeat[0].body["series"]["count"], 33);

    // Two more, then quiet: a last write when the series closes after 6 minutes.
    sync(35, "ERROR final", MINUTE * 31).await;
    sync(35, "", MINUTE * 36).await;
    assert!(drain(&mut requests).is_empty());
    sync(35, "", MINUTE * 37).await;
    let closing = drain(&mut requests);
    assert_eq!(closing.len(), 1);
    assert_eq!(closing[0].body["series"]["count"], 35);

    // The next occurrence is a new Event.
    sync(36, "ERROR again", MINUTE * 40).await;
    let again = drain(&mut requests);
    assert_eq!(again[0].method, "POST");
    assert_ne!(again[0].body["metadata"]["name"], json!(name));
    assert!(again[0].body.get("series").is_none());
    let text = crate::metrics::openmetrics(&registry);
    assert!(text.contains(r#"watcher_agent_alerts_sent_total{to="event",result="sent"} 5"#), "{text}");
}

/// An Event gone (its TTL, or deleted) is created again with its note and count; one refused
/// (422) is said once and not sent again; a failure is tried again after a backoff.
#[tokio::test]
async fn gone_refused_and_failing_events() {
    let (client, mut requests) = server(vec![201, 404, 201, 422, 503, 201]);
    let mut publisher = EventPublisher::new(client, &pod()).expect("a pod");
    let (metrics, registry) = metrics();
    let t0 = Instant::now();
    let wall: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    publisher.sync(&[alert("error", 1, "ERROR a")], t0, wall.into(), false, &metrics).await;
    publisher.sync(&[alert("error", 2, "ERROR b")], t0 + MINUTE, wall.into(), false, &metrics).await;
    let seen = drain(&mut requests);
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST", "PATCH", "POST"]);
    assert_eq!(seen[2].body["note"], "rule error matched 3 times within 3 in 1m; last line: ERROR b");
    assert_eq!(seen[2].body["series"]["count"], 2);

    publisher.sync(&[alert("error_", 1, "x")], t0, wall.into(), false, &metrics).await; // 422
    publisher.sync(&[alert("error_", 1, "x")], t0 + MINUTE, wall.into(), false, &metrics).await;
    assert_eq!(drain(&mut requests).len(), 1, "refused: not sent again");

    publisher.sync(&[alert("panic", 1, "panic: x")], t0, wall.into(), false, &metrics).await; // 503
    publisher
        .sync(&[alert("panic", 1, "panic: x")], t0 + Duration::from_millis(100), wall.into(), false, &metrics)
        .await;
    assert_eq!(drain(&mut requests).len(), 1, "backing off");
    publisher.sync(&[alert("panic", 1, "panic: x")], t0 + Duration::from_secs(2), wall.into(), false, &metrics).await;
    let retried = drain(&mut requests);
    assert_eq!(retried[0].body["note"], "rule panic matched 3 times within 3 in 1m; last line: panic: x");
    let text = crate::metrics::openmetrics(&registry);
    assert!(text.contains(r#"watcher_agent_alerts_sent_total{to="event",result="failed"} 2"#), "{text}");
}

/// A server that never answers: the call ends at its timeout, tried again later.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_is_not_waited_for() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let _held = tokio::spawn(async move {
        let request = handle.next_request().await;
        std::future::pending::<()>().await;
        drop(request);
    });
    let mut publisher = EventPublisher::new(kube::Client::new(service, "team-a"), &pod()).expect("a pod");
    let (metrics, registry) = metrics();
    let started = tokio::time::Instant::now();
    publisher.sync(&[alert("error", 1, "ERROR")], Instant::now(), SystemTime::now(), false, &metrics).await;
    assert_eq!(started.elapsed(), TIMEOUT);
    let text = crate::metrics::openmetrics(&registry);
    assert!(text.contains(r#"watcher_agent_alerts_sent_total{to="event",result="failed"} 1"#), "{text}");
}

#[test]
fn names_are_dns_subdomains_whatever_the_pod() {
    assert_eq!(event_name("shop-7d9f", 0x1234), "shop-7d9f.1234");
    let long = "a".repeat(253);
    let name = event_name(&long, i128::from(u64::MAX));
    assert_eq!(name.len(), 253);
    let cut_after_a_dash = format!("{}-bb", "a".repeat(250));
    assert_eq!(event_name(&cut_after_a_dash, 1), format!("{}.1", "a".repeat(250)), "never a label ending in -");
}

#[test]
fn notes_are_cut_at_a_character_boundary() {
    let cut = truncate(&"é".repeat(600), MAX_NOTE);
    assert!(cut.len() <= MAX_NOTE && cut.ends_with('…'), "{}", cut.len());
}
