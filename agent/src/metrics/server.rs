//! `/metrics` (Prometheus text, or OpenMetrics when the scraper asks for it), `/healthz` and
//! `/readyz` (ready once every file glob has been looked at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

/// What the endpoints read.
pub(crate) struct Endpoints {
    /// The metrics.
    pub(crate) registry: Registry,
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

async fn metrics(State(endpoints): State<Arc<Endpoints>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let response = if accept.contains("application/openmetrics-text") {
        let body = crate::metrics::openmetrics(&endpoints.registry);
        ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
    } else {
        let body = crate::metrics::prometheus_text(&endpoints.registry);
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
    };
    endpoints.scraped.notify_waiters();
    response
}
