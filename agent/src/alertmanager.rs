//! Alerts posted to an Alertmanager (API v2, `POST /api/v2/alerts`) over plain HTTP: a firing
//! alert is posted when it fires and again while it fires (its `endsAt` ahead, as Prometheus
//! does, so Alertmanager keeps it), a resolved one with `endsAt` now.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::PodIdentity;

/// A firing alert is posted again this often.
pub const REPOST_EVERY: Duration = Duration::from_secs(30);
/// How far ahead a firing alert's `endsAt` is: three posts.
const ENDS_AHEAD: SignedDuration = SignedDuration::from_secs(90);
/// A post that takes longer fails.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where alerts go.
#[derive(Clone, Debug)]
pub struct Alertmanager {
    host: String,
    port: u16,
    path: String,
}

/// One alert's state, as posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Firing: `endsAt` ahead.
    Firing,
    /// Resolved: `endsAt` now.
    Resolved,
}

impl Alertmanager {
    /// Alertmanager at `url` (`http://host[:port][/prefix]`); `None` for another form.
    pub fn new(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("http://")?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().ok()?),
            None => (authority, 80),
        };
        if host.is_empty() || host.contains(['@', ' ']) {
            return None;
        }
        let prefix = prefix.trim_end_matches('/');
        let path = if prefix.is_empty() { "/api/v2/alerts".to_owned() } else { format!("/{prefix}/api/v2/alerts") };
        Some(Self { host: host.to_owned(), port, path })
    }

    /// The body of a post: one alert of rule `rule` about `pod`.
    pub fn body(rule: &str, note: &str, pod: &PodIdentity, state: State, now: Timestamp) -> serde_json::Value {
        let ends = match state {
            State::Firing => now.saturating_add(ENDS_AHEAD).unwrap_or(now),
            State::Resolved => now,
        };
        let mut labels = json!({"alertname": "WatcherAgentRule", "rule": rule, "severity": "warning"});
        if let Some(namespace) = &pod.namespace {
            labels["namespace"] = json!(namespace);
        }
        if let Some(name) = &pod.name {
            labels["pod"] = json!(name);
        }
        json!([{
            "labels": labels,
            "annotations": {"summary": format!("watcher-agent rule {rule} is over its threshold"), "description": note},
            "endsAt": ends.to_string(),
        }])
    }

    /// Posts `body`; the HTTP status, or why not.
    pub async fn post(&self, body: &serde_json::Value) -> Result<u16, String> {
        tokio::time::timeout(TIMEOUT, self.post_now(body)).await.map_err(|_| "timed out".to_owned())?
    }

    async fn post_now(&self, body: &serde_json::Value) -> Result<u16, String> {
        let payload = body.to_string();
        let mut stream =
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await.map_err(|e| e.to_string())?;
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{payload}",
            self.path,
            self.host,
            self.port,
            payload.len()
        );
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut head = Vec::with_capacity(256);
        let mut buffer = [0_u8; 256];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
            let n = stream.read(&mut buffer).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buffer[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("not HTTP: {line:.60}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_as_alertmanager_takes_them() {
        let am = Alertmanager::new("http://alertmanager.monitoring:9093").expect("valid");
        assert_eq!((am.host.as_str(), am.port, am.path.as_str()), ("alertmanager.monitoring", 9093, "/api/v2/alerts"));
        let prefixed = Alertmanager::new("http://am/prefix/").expect("valid");
        assert_eq!((prefixed.port, prefixed.path.as_str()), (80, "/prefix/api/v2/alerts"));
        for bad in ["https://am:9093", "am:9093", "http://:9093", "http://am:port"] {
            assert!(Alertmanager::new(bad).is_none(), "{bad}");
        }
    }

    /// A fake Alertmanager on a local port: what it was posted, firing then resolved.
    #[tokio::test]
    async fn firing_and_resolved_alerts_are_posted() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let mut bodies = Vec::new();
            for _ in 0..2 {
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
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .and_then(|v| v.parse().ok())
                            .expect("length");
                        if body.len() >= length {
                            assert!(head.starts_with("POST /api/v2/alerts HTTP/1.1"), "{head}");
                            bodies.push(serde_json::from_str::<serde_json::Value>(body).expect("JSON"));
                            break;
                        }
                    }
                }
                socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await.expect("write");
            }
            bodies
        });
        let am = Alertmanager::new(&format!("http://{addr}")).expect("url");
        let pod = PodIdentity { name: Some("shop".into()), namespace: Some("team-a".into()), uid: None };
        let now: Timestamp = "2026-11-25T10:00:00Z".parse().expect("time");
        for state in [State::Firing, State::Resolved] {
            let status = am.post(&Alertmanager::body("error", "rule error matched", &pod, state, now)).await;
            assert_eq!(status, Ok(200));
        }
        let bodies = server.await.expect("served");
        assert_eq!(
            bodies[0][0]["labels"],
            json!({"alertname": "WatcherAgentRule", "rule": "error", "severity": "warning", "namespace": "team-a", "pod": "shop"})
        );
        assert_eq!(bodies[0][0]["endsAt"], "2026-11-25T10:01:30Z", "firing: ends ahead");
        assert_eq!(bodies[1][0]["endsAt"], "2026-11-25T10:00:00Z", "resolved: ends now");
        assert_eq!(bodies[1][0]["annotations"]["description"], "rule error matched");
    }

    #[tokio::test]
    async fn an_unreachable_alertmanager_is_an_error_not_a_hang() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let am = Alertmanager::new(&format!("http://127.0.0.1:{port}")).expect("url");
        let pod = PodIdentity::default();
        assert!(am.post(&Alertmanager::body("error", "n", &pod, State::Firing, Timestamp::now())).await.is_err());
    }
}
