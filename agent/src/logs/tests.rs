//! The log stream against a mocked API server: a stream that drops is resumed from the second of
//! its last line, and the lines sent again are skipped: none lost, none doubled.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower_test::mock::Handle;

use super::*;

fn stamp(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

async fn serve(handle: &mut Handle<Request<Body>, Response<Body>>, status: StatusCode, body: &str) -> String {
    let (request, send) = handle.next_request().await.expect("a request");
    let uri = request.uri().to_string();
    let response = Response::builder().status(status).body(Body::from(body.as_bytes().to_vec()));
    send.send_response(response.expect("response"));
    uri
}

#[tokio::test]
async fn a_dropped_stream_resumes_with_no_line_lost_or_doubled() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
    let server = tokio::spawn(async move {
        let first = serve(
            &mut handle,
            StatusCode::OK,
            "2026-11-25T10:00:00.100000000Z one\n2026-11-25T10:00:01.5Z two\n2026-11-25T10:00:01.5Z three\n\
             2026-11-25T10:00:01.700Z four\n2026-11-25T10:00:01.9Z fi",
        )
        .await;
        assert_eq!(first, "/api/v1/namespaces/team-a/pods/shop/log?&container=app&follow=true&timestamps=true");
        // Asked again from the second of "four", the last whole line: the server sends that
        // second again, the rest of the cut line among it.
        let second = serve(
            &mut handle,
            StatusCode::OK,
            "2026-11-25T10:00:01.5Z two\n2026-11-25T10:00:01.5Z three\n2026-11-25T10:00:01.700Z four\n\
             2026-11-25T10:00:01.9Z five\n2026-11-25T10:00:02Z six\n",
        )
        .await;
        assert!(second.contains("&sinceTime=2026-11-25T10%3A00%3A01Z&"), "{second}");
        let third = serve(&mut handle, StatusCode::FORBIDDEN, r#"{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"pods \"shop\" is forbidden: User \"system:serviceaccount:team-a:default\" cannot get resource \"pods/log\"",
            "reason":"Forbidden","code":403}"#).await;
        assert!(third.contains("&sinceTime=2026-11-25T10%3A00%3A02Z&"), "{third}");
    });
    let mut resume = Resume::default();
    let mut seen = Vec::new();
    let mut line = |l: Line<'_>| seen.push(String::from_utf8_lossy(l.bytes).into_owned());
    for _ in 0..2 {
        let ended = stream_once(&pods, "shop", "app", &mut resume, 1024, &mut line).await;
        assert!(matches!(ended, Ended::Dropped(_)), "{ended:?}");
    }
    let ended = stream_once(&pods, "shop", "app", &mut resume, 1024, &mut line).await;
    assert!(matches!(&ended, Ended::Forbidden(m) if m.contains("cannot get resource \"pods/log\"")), "{ended:?}");
    drop(pods);
    server.await.expect("served");
    assert_eq!(seen, ["one", "two", "three", "four", "five", "six"]);
}

#[test]
fn lines_are_new_after_the_last_time_seen() {
    let mut resume = Resume::from(stamp("2026-11-25T10:00:00Z"));
    assert!(!resume.accept(stamp("2026-11-25T09:59:59Z")), "before the start");
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z")));
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z")), "two lines may share a time");
    assert_eq!(resume.restart(), Some(stamp("2026-11-25T10:00:00Z")));
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.2Z")));
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.5Z")));
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.5Z")));
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z")), "a third line at that time is new");
}

#[test]
fn the_timestamp_is_split_from_the_text() {
    let (at, text) = split_timestamp(b"2026-11-25T10:00:00.123456789Z ERROR boom");
    assert_eq!(at, Some(stamp("2026-11-25T10:00:00.123456789Z")));
    assert_eq!(text, b"ERROR boom");
    assert_eq!(split_timestamp(b"no stamp here"), (None, &b"no stamp here"[..]));
}

#[test]
fn backoff_doubles_to_half_a_minute_and_starts_over_after_a_long_stream() {
    let mut delay = Duration::ZERO;
    let mut delays = Vec::new();
    for _ in 0..7 {
        delay = backoff(delay, Duration::from_secs(1));
        delays.push(delay.as_secs());
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(backoff(delay, Duration::from_secs(120)), Duration::from_secs(1));
}
