//! The log stream against a mocked API server: a stream that ends is asked again from the
//! second of its last line and the lines sent again are skipped, and only they; lines out of
//! order are counted; a restarted container's previous log is read first; a server that does
//! not answer is asked again.

use std::sync::Arc;

use crate::metrics::Registry;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower_test::mock::Handle;

use super::*;
use crate::config::RuleConfig;
use crate::matching::Rules;
use crate::metrics::Metrics;
use crate::parse::fields::Format;
use crate::pipeline::Pipeline;
use crate::sinks::alerts::AlertBook;

fn stamp(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

type Server = Handle<Request<Body>, Response<Body>>;

/// Answers the next request with `status` and `body`; its path and query.
async fn serve(handle: &mut Server, status: StatusCode, body: &str) -> String {
    let (request, send) = handle.next_request().await.expect("a request");
    let uri = request.uri().to_string();
    let response = Response::builder().status(status).body(Body::from(body.as_bytes().to_vec()));
    send.send_response(response.expect("response"));
    uri
}

/// A stream's counting: every line, and the lines with a word (`(?P<word>\w+)$`) by that word.
fn pipeline() -> (Pipeline, Arc<Metrics>, Registry) {
    let rules = [RuleConfig::counting("word", r"(?P<word>\w+)$").expect("a rule")];
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry, &["stdout".into()], &rules, 100));
    let alerts = Arc::new(Mutex::new(AlertBook::new(&rules)));
    let compiled = Rules::new(&rules).expect("rules");
    let pipeline = Pipeline::reading(&compiled, vec![Format::Text], 1024, metrics.clone(), alerts);
    (pipeline, metrics, registry)
}

/// A reader of source 0 into `pipeline`, lines joined as `events` says.
fn reader<'a>(pipeline: &'a mut Pipeline, resume: &'a Mutex<Resume>, events: LineBuffer) -> Reader<'a> {
    Reader { pipeline, source: 0, resume, max_line: 1024, idle: Duration::from_secs(120), events }
}

/// The words counted, each as many times as it was.
fn words(registry: &Registry) -> Vec<String> {
    let text = crate::metrics::openmetrics(registry);
    let mut words = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("watcher_agent_matches_total{")) {
        let word = line.split("word=\"").nth(1).and_then(|w| w.split('"').next()).unwrap_or_default().to_owned();
        let count: usize = line.rsplit(' ').next().and_then(|c| c.parse().ok()).unwrap_or(0);
        words.extend(std::iter::repeat_n(word, count));
    }
    words.sort();
    words
}

fn sorted(words: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    words.sort();
    words
}

#[tokio::test]
async fn a_stream_asked_again_skips_only_what_it_sends_again() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
    let server = tokio::spawn(async move {
        // stdout and stderr are stamped apart: "err" is earlier than "four" before it.
        let first = serve(
            &mut handle,
            StatusCode::OK,
            "2026-11-25T10:00:00.100000000Z one\n2026-11-25T10:00:01.5Z two\n2026-11-25T10:00:01.5Z two\n\
             2026-11-25T10:00:01.700Z four\n2026-11-25T10:00:01.6Z err\n2026-11-25T10:00:01.9Z fi",
        )
        .await;
        assert_eq!(first, "/api/v1/namespaces/team-a/pods/shop/log?&container=app&follow=true&timestamps=true");
        // Asked again from the second of the last whole line: that second again, the rest of
        // the cut line among it, and a line stamped earlier than every one read.
        let second = serve(
            &mut handle,
            StatusCode::OK,
            "2026-11-25T10:00:01.5Z two\n2026-11-25T10:00:01.5Z two\n2026-11-25T10:00:01.6Z err\n\
             2026-11-25T10:00:01.700Z four\n2026-11-25T10:00:01.9Z five\n2026-11-25T10:00:01.05Z late\n\
             2026-11-25T10:00:02Z six\n",
        )
        .await;
        assert!(second.contains("&sinceTime=2026-11-25T10%3A00%3A01Z&"), "{second}");
        let third = serve(&mut handle, StatusCode::FORBIDDEN, r#"{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"pods \"shop\" is forbidden: User \"system:serviceaccount:team-a:default\" cannot get resource \"pods/log\"",
            "reason":"Forbidden","code":403}"#).await;
        assert!(third.contains("&sinceTime=2026-11-25T10%3A00%3A02Z&"), "{third}");
    });
    let (mut pipeline, _, registry) = pipeline();
    let resume = Mutex::new(Resume::default());
    let mut reader = reader(&mut pipeline, &resume, LineBuffer::new(1024));
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    assert_eq!(stream_once(&pods, "shop", "app", false, &mut reader, &mut stopped).await, Ended::ByServer { lines: 5 });
    assert_eq!(stream_once(&pods, "shop", "app", false, &mut reader, &mut stopped).await, Ended::ByServer { lines: 3 });
    let ended = stream_once(&pods, "shop", "app", false, &mut reader, &mut stopped).await;
    assert!(matches!(&ended, Ended::Forbidden(m) if m.contains("cannot get resource \"pods/log\"")), "{ended:?}");
    drop(pods);
    server.await.expect("served");
    assert_eq!(words(&registry), sorted(&["one", "two", "two", "four", "err", "five", "late", "six"]));
}

/// The container restarted while the stream was down: its previous log is read from where the
/// stream was left (its last words), then the new container's.
#[tokio::test]
async fn a_restarted_container_is_read_from_its_previous_log_first() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
    let pod = |restarts: i32| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop"},
            "status": {"containerStatuses": [{"name": "app", "restartCount": restarts, "ready": false,
            "image": "app", "imageID": ""}]}})
        .to_string()
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(async move {
        assert_eq!(serve(&mut handle, StatusCode::OK, &pod(0)).await, "/api/v1/namespaces/team-a/pods/shop");
        serve(&mut handle, StatusCode::OK, "2026-11-25T10:00:00Z one\n2026-11-25T10:00:01Z two\n").await;
        serve(&mut handle, StatusCode::OK, &pod(1)).await;
        let previous = serve(
            &mut handle,
            StatusCode::OK,
            "2026-11-25T10:00:01Z two\n2026-11-25T10:00:02Z panic\n2026-11-25T10:00:02.5Z exiting\n",
        )
        .await;
        assert!(previous.contains("&previous=true&"), "{previous}");
        assert!(previous.contains("&sinceTime=2026-11-25T10%3A00%3A01Z&"), "{previous}");
        let current = serve(&mut handle, StatusCode::OK, "2026-11-25T10:00:05Z started\n").await;
        assert!(current.contains("&follow=true&"), "{current}");
        assert!(current.contains("&sinceTime=2026-11-25T10%3A00%3A02Z&"), "{current}");
        stop.send(true).expect("stop");
    });
    let (mut pipeline, _, registry) = pipeline();
    let resume = Mutex::new(Resume::default());
    let reader = reader(&mut pipeline, &resume, LineBuffer::new(1024));
    follow(pods, "shop".into(), "app".into(), reader, stopped).await;
    server.await.expect("served");
    assert_eq!(words(&registry), sorted(&["one", "two", "panic", "exiting", "started"]));
    let text = crate::metrics::openmetrics(&registry);
    assert!(text.contains(r#"watcher_agent_stream_reconnects_total{reason="restarted"} 1"#), "{text}");
}

/// A server that never answers the request: asked again after [`ANSWER`], never a hang.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_is_asked_again() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
    let server = tokio::spawn(async move {
        let (_request, send) = handle.next_request().await.expect("a request");
        std::future::pending::<()>().await;
        drop(send);
    });
    let (mut pipeline, _, _) = pipeline();
    let resume = Mutex::new(Resume::default());
    let mut reader = reader(&mut pipeline, &resume, LineBuffer::new(1024));
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    let ended = stream_once(&pods, "shop", "app", false, &mut reader, &mut stopped).await;
    assert_eq!(ended, Ended::Failed("no answer within 30s".into()));
    server.abort();
}

#[test]
fn only_lines_sent_again_are_skipped() {
    let mut resume = Resume::from(stamp("2026-11-25T10:00:00Z"));
    assert!(!resume.accept(stamp("2026-11-25T09:59:59Z"), b"x"), "before the start");
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"));
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"), "two lines may share a time and text");
    assert!(resume.accept(stamp("2026-11-25T10:00:00.2Z"), b"b"), "earlier than the last: still new");
    assert_eq!(resume.restart(), Some(stamp("2026-11-25T10:00:00Z")));
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.2Z"), b"b"), "sent again");
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"));
    assert!(!resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"));
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"), "a third at that time is new");
    assert!(resume.accept(stamp("2026-11-25T10:00:00.1Z"), b"c"), "not read before: new");
}

#[test]
fn the_resume_point_survives_a_checkpoint() {
    let mut resume = Resume::default();
    assert!(resume.accept(stamp("2026-11-25T10:00:00.5Z"), b"a"));
    assert!(resume.accept(stamp("2026-11-25T10:00:01.5Z"), b"b"));
    resume.restart_count = Some(2);
    let mut again = Resume::from_mark(&resume.mark());
    assert_eq!(again.restart_count, Some(2));
    assert_eq!(again.restart(), Some(stamp("2026-11-25T10:00:01Z")));
    assert!(!again.accept(stamp("2026-11-25T10:00:01.5Z"), b"b"), "read before the restart");
    assert!(again.accept(stamp("2026-11-25T10:00:01.7Z"), b"c"));
}

#[test]
fn the_timestamp_is_split_from_the_text() {
    let (at, text) = split_timestamp(b"2026-11-25T10:00:00.123456789Z ERROR boom");
    assert_eq!(at, Some(stamp("2026-11-25T10:00:00.123456789Z")));
    assert_eq!(text, b"ERROR boom");
    assert_eq!(split_timestamp(b"no stamp here"), (None, &b"no stamp here"[..]));
}

#[test]
fn backoff_doubles_to_half_a_minute() {
    let mut delay = Duration::ZERO;
    let mut delays = Vec::new();
    for _ in 0..7 {
        delay = backoff(delay);
        delays.push(delay.as_secs());
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
}

/// Multi-line events on the stream: an event not yet ended when the agent stops is where its
/// checkpoint resumes (its first line's time, the lines before it known), so the next agent reads
/// it whole, once, and counts each line once.
#[tokio::test]
async fn an_event_waiting_at_a_checkpoint_is_read_whole_after_a_restart() {
    let multiline = Arc::new(crate::tail::multiline::Multiline {
        start: crate::tail::multiline::Start::Java,
        wait: Duration::from_secs(30),
        max_lines: 500,
        max_bytes: 65_536,
    });
    let first = "2026-11-25T10:00:00.1Z INFO a\n2026-11-25T10:00:00.2Z Exception: x\n2026-11-25T10:00:00.3Z \tat a\n";
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
    let server = tokio::spawn(async move {
        serve(&mut handle, StatusCode::OK, first).await;
        let again = serve(
            &mut handle,
            StatusCode::OK,
            &format!("{first}2026-11-25T10:00:00.4Z \tat b\n2026-11-25T10:00:00.5Z INFO b\n"),
        )
        .await;
        assert!(again.contains("&sinceTime=2026-11-25T10%3A00%3A00Z&"), "{again}");
    });
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    // The first agent: INFO a ends when the exception begins; the exception waits.
    let (mut pipeline, metrics, _) = pipeline();
    let resume = Mutex::new(Resume::default());
    let mut first_agent = reader(&mut pipeline, &resume, LineBuffer::joining(1024, Some(&multiline)));
    assert_eq!(
        stream_once(&pods, "shop", "app", false, &mut first_agent, &mut stopped).await,
        Ended::ByServer { lines: 3 }
    );
    assert_eq!((metrics.lines[0].get(), metrics.events[0].get()), (1, 1));
    let mark = lock(&resume).mark();
    assert_eq!(mark.last.as_deref(), Some("2026-11-25T10:00:00.2Z"), "the waiting event's first line");
    assert_eq!(mark.recent.len(), 1, "only INFO a is known: {:?}", mark.recent);
    // The agent killed; the next one starts from that checkpoint.
    let (mut pipeline, metrics, registry) = self::pipeline();
    let resume = Mutex::new(Resume::from_mark(&mark));
    let mut again = reader(&mut pipeline, &resume, LineBuffer::joining(1024, Some(&multiline)));
    assert_eq!(stream_once(&pods, "shop", "app", false, &mut again, &mut stopped).await, Ended::ByServer { lines: 4 });
    again.end_event(std::time::Instant::now(), true);
    drop(pods);
    server.await.expect("served");
    assert_eq!((metrics.lines[0].get(), metrics.events[0].get()), (4, 2), "the trace of 3 lines, then INFO b");
    assert_eq!(words(&registry), sorted(&["b", "b"]), "the trace's text ends in `b`: matched once");
    assert_eq!(lock(&resume).mark().last.as_deref(), Some("2026-11-25T10:00:00.5Z"));
}
