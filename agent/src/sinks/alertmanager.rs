//! Alerts posted to an Alertmanager (API v2, `POST /api/v2/alerts`) over plain HTTP, as
//! Prometheus posts them: each firing alert when it fires and again every [`REPOST_EVERY`] while
//! it fires, with `startsAt` (the first match of the firing) and an `endsAt` ahead
//! ([`ENDS_AHEAD`]: if the agent dies, Alertmanager resolves it by itself); a resolved one with
//! `endsAt` the time it was resolved, posted until Alertmanager takes it. Labels name the rule,
//! the pod and its namespace. Each post has a timeout; a failed one is tried again with backoff.
//! The poster runs in a task of its own ([`run`]): reading never waits for it.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use http::header::{CONTENT_TYPE, HOST};
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tracing::warn;

use crate::config::{AlertmanagerUrl, PodIdentity};
use crate::metrics::Metrics;
use crate::sinks::alerts::{AlertSink, AlertState};
use crate::text::timestamp;

/// A firing alert is posted again this often.
pub(crate) const REPOST_EVERY: Duration = Duration::from_secs(30);
/// How far ahead of a post a firing alert's `endsAt` is: three posts.
pub(crate) const ENDS_AHEAD: Duration = Duration::from_secs(90);
/// A post that takes longer fails.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Backoff between failed posts: from 1 s, doubling, to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A resolution Alertmanager never took is given up after this (it resolved the alert by
/// itself at its `endsAt` long before).
const GIVE_UP: Duration = Duration::from_secs(10 * 60);

/// Why a post got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    /// No connection to Alertmanager's address.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// `host:port`.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The request cannot be made of the URL (a host or path HTTP refuses).
    #[error("cannot make the request: {0}")]
    Request(#[from] http::Error),
    /// The HTTP exchange failed (the connection closed, not HTTP).
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// No answer within [`TIMEOUT`].
    #[error("no answer within {}s", TIMEOUT.as_secs())]
    Timeout,
}

/// Where alerts go.
#[derive(Clone, Debug)]
pub(crate) struct Alertmanager {
    url: AlertmanagerUrl,
}

impl Alertmanager {
    /// Alertmanager at `url`.
    pub(crate) fn new(url: AlertmanagerUrl) -> Self {
        Self { url }
    }

    /// The body of one alert of rule `alert` about `pod`: firing (`endsAt` ahead of `now`) or
    /// resolved (`endsAt` when it was).
    pub(crate) fn alert(alert: &AlertState, pod: &PodIdentity, now: SystemTime) -> serde_json::Value {
        let ends = match alert.resolved_at {
            Some(at) if !alert.firing => at,
            _ => now + ENDS_AHEAD,
        };
        let mut labels = json!({"alertname": "WatcherAgentRule", "rule": alert.name, "severity": "warning"});
        if let Some(namespace) = &pod.namespace {
            labels["namespace"] = json!(namespace);
        }
        if let Some(name) = &pod.name {
            labels["pod"] = json!(name);
        }
        json!({
            "labels": labels,
            "annotations": {
                "summary": format!("watcher-agent rule {} is over its threshold", alert.name),
                "description": alert.note,
            },
            "startsAt": timestamp(alert.starts_at).to_string(),
            "endsAt": timestamp(ends).to_string(),
        })
    }

    /// Posts `alerts` (a JSON array) on a connection of its own (a post every 30 s at most
    /// keeps none open); the HTTP status, or why there is none.
    pub(crate) async fn post(&self, alerts: &serde_json::Value) -> Result<StatusCode, PostError> {
        tokio::time::timeout(TIMEOUT, self.post_now(alerts)).await.map_err(|_| PostError::Timeout)?
    }

    async fn post_now(&self, body: &serde_json::Value) -> Result<StatusCode, PostError> {
        let AlertmanagerUrl { host, port, path } = &self.url;
        let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .map_err(|source| PostError::Connect { address: format!("{host}:{port}"), source })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let request = Request::post(path.as_str())
            .header(HOST, format!("{host}:{port}"))
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))?;
        // The connection is driven while the answer is awaited; once it came (its body is never
        // read) the request side is dropped, and the connection ends.
        let answer = async move {
            let response = sender.send_request(request).await;
            drop(sender);
            response.map(|response| response.status())
        };
        let (status, _ended) = tokio::join!(answer, connection);
        Ok(status?)
    }
}

/// What was posted of one rule's alert.
#[derive(Default)]
struct Posted {
    /// The firing posted (its number), and when.
    firing: Option<(u64, Instant)>,
    /// The firing whose resolution was posted (or given up).
    resolved: u64,
}

/// The alerts due to be posted, and what was.
pub(crate) struct Poster {
    alertmanager: Alertmanager,
    pod: PodIdentity,
    posted: HashMap<String, Posted>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Poster {
    /// Posts to `alertmanager` about `pod`.
    pub(crate) fn new(alertmanager: Alertmanager, pod: PodIdentity) -> Self {
        Self { alertmanager, pod, posted: HashMap::new(), retry_at: None, backoff: Duration::ZERO }
    }
}

/// Posts, in one request, the alerts make due at `now`: firings new or due again, resolutions
/// not yet taken (every one when `closing`, backoff or not).
impl AlertSink for Poster {
    const WHAT: &'static str = "Alertmanager";

    async fn sync(&mut self, alerts: &[AlertState], now: Instant, wall: SystemTime, closing: bool, metrics: &Metrics) {
        if !closing && self.retry_at.is_some_and(|at| at > now) {
            return;
        }
        let mut due = Vec::new();
        for alert in alerts.iter().filter(|a| a.firings > 0) {
            let posted = self.posted.entry(alert.name.clone()).or_default();
            let firing_due = alert.firing
                && posted.firing.is_none_or(|(firing, at)| {
                    firing != alert.firings || now.saturating_duration_since(at) >= REPOST_EVERY
                });
            let resolution_due = !alert.firing && posted.resolved < alert.firings;
            if resolution_due
                && alert.resolved_at.is_some_and(|at| wall.duration_since(at).unwrap_or_default() > GIVE_UP)
            {
                warn!(
                    rule = alert.name,
                    "Alertmanager never took the resolution: given up (it resolved the alert by itself)"
                );
                posted.resolved = alert.firings;
                continue;
            }
            if firing_due || resolution_due {
                due.push(alert);
            }
        }
        if due.is_empty() {
            return;
        }
        let body: Vec<serde_json::Value> = due.iter().map(|a| Alertmanager::alert(a, &self.pod, wall)).collect();
        let result = self.alertmanager.post(&serde_json::Value::Array(body)).await;
        match result {
            Ok(status) if status.is_success() => {
                metrics.sent("alertmanager", "sent");
                self.backoff = Duration::ZERO;
                self.retry_at = None;
                for alert in due {
                    let posted = self.posted.entry(alert.name.clone()).or_default();
                    if alert.firing {
                        posted.firing = Some((alert.firings, now));
                    } else {
                        posted.resolved = alert.firings;
                        posted.firing = None;
                    }
                }
            }
            failed => {
                metrics.sent("alertmanager", "failed");
                self.backoff = (self.backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                self.retry_at = Some(now + self.backoff);
                let why = match failed {
                    Ok(status) => format!("HTTP {status}"),
                    Err(error) => error.to_string(),
                };
                warn!(why, retry_in = ?self.backoff, "cannot post to Alertmanager; posting again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Registry;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A fake Alertmanager on a local port: the bodies of the posts it answers with `status`.
    async fn alertmanager(statuses: Vec<u16>) -> (AlertmanagerUrl, tokio::task::JoinHandle<Vec<serde_json::Value>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let mut bodies = Vec::new();
            for status in statuses {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let mut request = Vec::new();
                let mut buffer = [0_u8; 4096];
                loop {
                    let n = socket.read(&mut buffer).await.expect("read");
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                            .map(|(_, v)| v.trim())
                            .and_then(|v| v.parse().ok())
                            .expect("length");
                        if body.len() >= length {
                            assert!(head.starts_with("POST /api/v2/alerts HTTP/1.1"), "{head}");
                            bodies.push(serde_json::from_str::<serde_json::Value>(body).expect("JSON"));
                            break;
                        }
                    }
                }
                let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                socket.write_all(answer.as_bytes()).await.expect("write");
            }
            bodies
        });
        (AlertmanagerUrl::parse(&format!("http://{addr}")).expect("url"), server)
    }

    fn firing(at: SystemTime) -> AlertState {
        AlertState {
            firing: true,
            firings: 1,
            occurrences: 3,
            note: "rule error matched 3 times within 3 in 1m; last line: ERROR db".into(),
            starts_at: at,
            ..AlertState::new("error")
        }
    }

    fn metrics() -> (Metrics, Registry) {
        let mut registry = Registry::default();
        (Metrics::register(&mut registry, &["stdout".into()], &[], 10), registry)
    }

    /// Firing with `startsAt` its first match and `endsAt` ahead, posted again only after
    /// [`REPOST_EVERY`]; resolved with `endsAt` when it was, after a refusal, tried again.
    #[tokio::test]
    async fn firing_then_resolved_as_prometheus_posts_them() {
        let (url, server) = alertmanager(vec![200, 200, 503, 200]).await;
        let pod = PodIdentity { name: Some("shop".into()), namespace: Some("team-a".into()), uid: None };
        let mut poster = Poster::new(Alertmanager::new(url), pod);
        let (metrics, registry) = metrics();
        let wall: SystemTime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first_match = wall - Duration::from_secs(40);
        let start = Instant::now();
        let mut alert = firing(first_match);
        poster.sync(&[alert.clone()], start, wall, false, &metrics).await;
        poster.sync(&[alert.clone()], start + Duration::from_secs(10), wall, false, &metrics).await; // not due
        poster.sync(&[alert.clone()], start + REPOST_EVERY, wall + REPOST_EVERY, false, &metrics).await;
        alert.firing = false;
        alert.resolved_at = Some(wall + Duration::from_secs(45));
        let later = start + Duration::from_secs(50);
        poster.sync(&[alert.clone()], later, wall, false, &metrics).await; // 503
        poster.sync(&[alert.clone()], later + Duration::from_millis(10), wall, false, &metrics).await; // backoff
        poster.sync(&[alert.clone()], later + Duration::from_secs(2), wall, false, &metrics).await;
        poster.sync(&[alert.clone()], later + Duration::from_secs(60), wall, false, &metrics).await; // nothing
        let bodies = server.await.expect("served");
        assert_eq!(bodies.len(), 4);
        let first = &bodies[0][0];
        assert_eq!(
            first["labels"],
            json!({"alertname": "WatcherAgentRule", "rule": "error", "severity": "warning", "namespace": "team-a", "pod": "shop"})
        );
        assert_eq!(first["startsAt"], "2027-01-15T07:59:20Z", "the first match of the firing");
        assert_eq!(first["endsAt"], "2027-01-15T08:01:30Z", "firing: ends ahead");
        assert_eq!(first["annotations"]["description"], alert.note);
        assert_eq!(bodies[1][0]["endsAt"], "2027-01-15T08:02:00Z", "posted again, ending further ahead");
        for resolved in &bodies[2..] {
            assert_eq!(resolved[0]["endsAt"], "2027-01-15T08:00:45Z", "resolved: ends when it was");
            assert_eq!(resolved[0]["startsAt"], first["startsAt"]);
        }
        let text = crate::metrics::openmetrics(&registry);
        assert!(text.contains(r#"watcher_agent_alerts_sent_total{to="alertmanager",result="sent"} 3"#), "{text}");
        assert!(text.contains(r#"watcher_agent_alerts_sent_total{to="alertmanager",result="failed"} 1"#), "{text}");
    }

    #[tokio::test]
    async fn an_unreachable_alertmanager_is_an_error_not_a_hang() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let url = AlertmanagerUrl::parse(&format!("http://127.0.0.1:{port}")).expect("url");
        let am = Alertmanager::new(url);
        let body = Alertmanager::alert(&firing(SystemTime::now()), &PodIdentity::default(), SystemTime::now());
        assert!(matches!(am.post(&json!([body])).await, Err(PostError::Connect { .. })));
    }

    /// Alertmanager answers with a body and keeps the connection open: the post ends with the
    /// answer, not at the timeout.
    #[tokio::test]
    async fn an_answer_on_a_kept_connection_ends_the_post() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = AlertmanagerUrl::parse(&format!("http://{}", listener.local_addr().expect("addr"))).expect("url");
        let _held = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buffer = [0_u8; 4096];
            let _ = socket.read(&mut buffer).await.expect("read");
            socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").await.expect("write");
            std::future::pending::<()>().await;
            drop(socket);
        });
        let result = Alertmanager::new(url).post(&json!([])).await;
        assert_eq!(result.ok(), Some(StatusCode::OK), "the answer, not the timeout");
    }

    /// A server that takes the connection and never answers: the post ends at its timeout.
    #[tokio::test(start_paused = true)]
    async fn a_silent_alertmanager_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = AlertmanagerUrl::parse(&format!("http://{}", listener.local_addr().expect("addr"))).expect("url");
        let _held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            std::future::pending::<()>().await;
            drop(socket);
        });
        let result = Alertmanager::new(url).post(&json!([])).await;
        assert!(matches!(result, Err(PostError::Timeout)), "{result:?}");
    }
}
