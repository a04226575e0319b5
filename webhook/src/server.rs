//! HTTPS serving: the axum router behind rustls, HTTP/1.1 keep-alive, graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceBuilder;
use tracing::{debug, info, warn};
use watcher_admission::WatcherSource;

use crate::metrics::{AdmissionResult, Metrics};
use crate::review::Reviewer;

/// Largest AdmissionReview accepted: kube-apiserver caps objects near 1.5 MiB, twice that is
/// generous and still bounded.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// A request (body read and answer) that takes longer than this gets 408.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A TLS handshake or request head that takes longer than this drops the connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests may take after shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

struct WebhookState<S> {
    reviewer: Reviewer<S>,
    metrics: Metrics,
}

/// The webhook's routes: `POST /mutate` (and `/mutate-pods`, the path older registrations use).
pub fn router<S: WatcherSource + 'static>(reviewer: Reviewer<S>, metrics: Metrics) -> Router {
    let state = Arc::new(WebhookState { reviewer, metrics });
    Router::new()
        .route("/mutate", post(mutate::<S>))
        .route("/mutate-pods", post(mutate::<S>))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                    (StatusCode::REQUEST_TIMEOUT, "request timed out\n")
                }))
                .timeout(REQUEST_TIMEOUT),
        )
        .with_state(state)
}

async fn mutate<S: WatcherSource>(State(state): State<Arc<WebhookState<S>>>, body: Bytes) -> Response {
    let start = Instant::now();
    let (response, result) = match state.reviewer.review(&body) {
        Ok((review, result)) => match review.to_json() {
            Ok(json) => {
                state.metrics.count_pod_security(review.pod_security());
                state.metrics.count_resources(review.resources());
                (([(CONTENT_TYPE, "application/json")], json).into_response(), result)
            }
            // Cannot happen for the strings and numbers of an answer; say so rather than panic.
            Err(error) => {
                warn!(%error, "cannot encode the answer");
                (
                    (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the answer: {error}\n")).into_response(),
                    AdmissionResult::error,
                )
            }
        },
        Err(error) => {
            warn!(%error, "bad admission request");
            ((StatusCode::BAD_REQUEST, format!("{error}\n")).into_response(), AdmissionResult::error)
        }
    };
    state.metrics.observe(result, start.elapsed().as_secs_f64());
    response
}

/// Serves `router` (the webhook's, or `/metrics`) over TLS on `listener` until `shutdown` completes, then lets in-flight
/// requests finish (up to 20 s). `serving` turns true once the listener accepts.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    serving: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).keep_alive(true).header_read_timeout(HANDSHAKE_TIMEOUT);
    let builder = Arc::new(builder);
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "serving over TLS");
    }
    serving.store(true, Ordering::Release);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => return debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(error) = watcher.watch(connection).await {
                debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    serving.store(false, Ordering::Release);
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        warn!("connections still open after {DRAIN_TIMEOUT:?}");
    }
}
