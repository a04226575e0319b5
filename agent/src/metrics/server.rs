//! `/metrics`, in the format the scraper asks for as client_golang's `promhttp` negotiates it:
//! Prometheus' protobuf (delimited `MetricFamily` messages: native histograms travel only so),
//! OpenMetrics text, else Prometheus text 0.0.4; `/healthz` and `/readyz` (ready once every file
//! glob has been looked at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::Notify;

/// What the endpoints read.
pub(crate) struct Endpoints {
    /// The metrics, with their exemplars.
    pub(crate) registry: crate::metrics::Registry,
    /// Set once the files were looked at.
    pub(crate) ready: AtomicBool,
    /// Notified after each scrape (shutdown waits for a last one).
    pub(crate) scraped: Notify,
}

/// The router of the agent's port.
pub(crate) fn router(endpoints: Arc<Endpoints>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(endpoints)
}

async fn readyz(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    if endpoints.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting: the files have not been looked at yet\n")
    }
}

/// The protobuf exposition's content type.
pub(crate) const PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// What a scraper's `Accept` asks for: the first of its kinds this agent serves, by its `q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Protobuf,
    OpenMetrics,
    Text,
}

impl Format {
    /// The format `accept` (an `Accept` header) prefers; text where it names none served here.
    pub(crate) fn negotiated(accept: &str) -> Self {
        let mut best = (Self::Text, -1.0_f64);
        for kind in accept.split(',') {
            let mut parameters = kind.split(';').map(str::trim);
            let media = parameters.next().unwrap_or_default().to_ascii_lowercase();
            let mut quality = 1.0;
            let mut proto_ok = true;
            for parameter in parameters {
                let Some((key, value)) = parameter.split_once('=') else { continue };
                match key.trim() {
                    "q" => quality = value.trim().parse().unwrap_or(0.0),
                    "proto" => proto_ok = value.trim() == "io.prometheus.client.MetricFamily",
                    "encoding" => proto_ok &= value.trim() == "delimited",
                    _ => {}
                }
            }
            let format = match media.as_str() {
                "application/vnd.google.protobuf" if proto_ok => Self::Protobuf,
                "application/openmetrics-text" => Self::OpenMetrics,
                "text/plain" | "*/*" => Self::Text,
                _ => continue,
            };
            if quality > best.1 && quality > 0.0 {
                best = (format, quality);
            }
        }
        best.0
    }
}

async fn metrics(State(endpoints): State<Arc<Endpoints>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (content_type, body) = match Format::negotiated(accept) {
        Format::Protobuf => (PROTOBUF, crate::metrics::protobuf(&endpoints.registry)),
        Format::OpenMetrics => (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            crate::metrics::openmetrics(&endpoints.registry).into_bytes(),
        ),
        Format::Text => (
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::prometheus_text(&endpoints.registry).into_bytes(),
        ),
    };
    endpoints.scraped.notify_waiters();
    ([(header::CONTENT_TYPE, content_type)], body)
}

#[cfg(test)]
mod tests {
    use super::Format;

    /// As `promhttp` negotiates: Prometheus 2.42 with native histograms on asks protobuf first,
    /// without them OpenMetrics; `q` orders; curl's `*/*` and no header get text.
    #[test]
    fn the_scrapers_accept_header_picks_the_format() {
        let prometheus_native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
                                 encoding=delimited;q=0.8,application/openmetrics-text;version=1.0.0;q=0.7,\
                                 text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiated(prometheus_native), Format::Protobuf);
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiated(prometheus), Format::OpenMetrics);
        assert_eq!(Format::negotiated("*/*"), Format::Text);
        assert_eq!(Format::negotiated(""), Format::Text);
        assert_eq!(Format::negotiated("application/vnd.google.protobuf;proto=other.Message"), Format::Text);
        assert_eq!(Format::negotiated("text/plain;q=0.9,application/openmetrics-text;q=0.1"), Format::Text);
    }
}
