//! Logs, metrics and health: tracing set-up, the plain-HTTP `/healthz` and `/readyz` server,
//! and the `/metrics` server (HTTPS behind [`crate::metrics_auth`], or plain HTTP).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tracing_subscriber::EnvFilter;
use watcher_cli::LogFormat;

use crate::metrics_auth::MetricsAuth;

/// `watcher_certificate_expiry_timestamp_seconds{certificate}`: when the serving certificate
/// and its CA expire, read from the certificate store at each scrape.
#[derive(Debug)]
pub(crate) struct CertificateCollector(pub(crate) Arc<watcher_certs::CertStore>);

impl prometheus_client::collector::Collector for CertificateCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let expiry = self.0.expiry();
        let mut family = encoder.encode_descriptor(
            "watcher_certificate_expiry_timestamp_seconds",
            "When a certificate the webhook serves with expires (Unix time): the serving certificate, and the CA \
             that signs it where known",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (certificate, not_after) in [("serving", expiry.serving), ("ca", expiry.ca)] {
            let Some(seconds) = not_after.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) else { continue };
            let gauge = prometheus_client::metrics::gauge::ConstGauge::new(seconds.as_secs_f64());
            gauge.encode(family.encode_family(&[("certificate", certificate)])?)?;
        }
        Ok(())
    }
}

/// Every metric of the process, registered in one registry: the controllers' (with the
/// per-Watcher gauges read from `watchers`), the webhook's, and the certificates' from `certs`.
pub(crate) fn registry(
    watchers: &watcher_cache::WatcherCache,
    certs: Arc<watcher_certs::CertStore>,
) -> (Registry, watcher_controller::Metrics, watcher_webhook::Metrics) {
    let mut registry = Registry::default();
    registry.register(
        "watcher_operator_build",
        "What this binary is: its version, commit (revision), cargo profile and target; always 1",
        prometheus_client::metrics::info::Info::new(watcher_build_info::LABELS),
    );
    let controllers = watcher_controller::Metrics::register(&mut registry);
    let webhook = watcher_webhook::Metrics::register(&mut registry);
    let collector = watcher_controller::WatcherCollector::new(
        watchers.store.clone(),
        watchers.cluster.clone(),
        controllers.cluster_pods(),
    );
    registry.register_collector(Box::new(collector));
    registry.register_collector(Box::new(CertificateCollector(certs)));
    (registry, controllers, webhook)
}

/// Logs to stderr (stdout is for command output such as `crds`); `RUST_LOG` overrides the level.
/// `default_filter` applies when `RUST_LOG` is not set.
pub(crate) fn init_tracing(format: LogFormat, default_filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(default_filter))?;
    // Colours on a terminal only: in a pod the kubelet keeps the log as plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    result.map_err(|error| anyhow::anyhow!("cannot start logging: {error}"))
}

/// Named readiness gates; `/readyz` answers 200 once every gate is open.
#[derive(Clone, Default)]
pub(crate) struct Readiness {
    gates: Vec<(&'static str, Arc<AtomicBool>)>,
}

impl Readiness {
    /// Adds a closed gate called `name` and returns the switch that opens it.
    pub(crate) fn gate(&mut self, name: &'static str) -> Arc<AtomicBool> {
        let gate = Arc::new(AtomicBool::new(false));
        self.gates.push((name, gate.clone()));
        gate
    }

    /// The names of the gates still closed.
    fn waiting_for(&self) -> Vec<&'static str> {
        self.gates.iter().filter(|(_, open)| !open.load(Ordering::Acquire)).map(|(name, _)| *name).collect()
    }
}

/// The router of the health port: `/healthz` and `/readyz`, nothing else.
fn health_router(readiness: Readiness) -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state(readiness)
}

async fn readyz(State(readiness): State<Readiness>) -> impl IntoResponse {
    let waiting = readiness.waiting_for();
    if waiting.is_empty() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for: {}\n", waiting.join(", ")))
    }
}

/// The router of the metrics port: `/metrics`, behind `auth` when given.
fn metrics_router(registry: Registry, auth: Option<Arc<MetricsAuth>>) -> Router {
    let router = Router::new().route("/metrics", get(metrics)).with_state(Arc::new(registry));
    match auth {
        Some(auth) => router.layer(axum::middleware::from_fn_with_state(auth, crate::metrics_auth::require)),
        None => router,
    }
}

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// Binds the health port now (so a taken port fails start-up) and returns its server.
pub(crate) async fn serve_health(
    addr: SocketAddr,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<impl Future<Output = std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on --health-addr {addr}: {error}"))?;
    tracing::info!(%addr, "serving /healthz and /readyz");
    let router = health_router(readiness);
    Ok(async move { axum::serve(listener, router).with_graceful_shutdown(shutdown).await })
}

/// How `/metrics` is served: over TLS behind authentication (the default), or plain.
pub(crate) enum MetricsServing {
    Secure { tls: Arc<rustls::ServerConfig>, auth: Arc<MetricsAuth> },
    Plain,
}

/// Binds the metrics port now (so a taken port fails start-up) and returns its server.
pub(crate) async fn serve_metrics(
    addr: SocketAddr,
    registry: Registry,
    serving: MetricsServing,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<futures::future::BoxFuture<'static, ()>> {
    use futures::FutureExt;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on --metrics-addr {addr}: {error}"))?;
    Ok(match serving {
        MetricsServing::Secure { tls, auth } => {
            tracing::info!(%addr, "serving /metrics over HTTPS to tokens allowed to get /metrics");
            let router = metrics_router(registry, Some(auth));
            watcher_webhook::serve_tls(listener, tls, router, Arc::default(), shutdown).boxed()
        }
        MetricsServing::Plain => {
            tracing::warn!(%addr, "serving /metrics over plain HTTP to anyone (--metrics-secure=false)");
            let router = metrics_router(registry, None);
            async move {
                if let Err(error) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
                    tracing::warn!(%error, "the metrics server failed");
                }
            }
            .boxed()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn readyz_waits_for_every_gate() {
        let mut readiness = Readiness::default();
        let cache = readiness.gate("watcher-cache");
        let tls = readiness.gate("webhook-tls");
        let router = health_router(readiness);

        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&router, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "waiting for: watcher-cache, webhook-tls\n".into())
        );
        cache.store(true, Ordering::Release);
        assert_eq!(get(&router, "/readyz").await.1, "waiting for: webhook-tls\n");
        tls.store(true, Ordering::Release);
        assert_eq!(get(&router, "/readyz").await, (StatusCode::OK, "ok\n".into()));
        assert_eq!(get(&router, "/metrics").await.0, StatusCode::NOT_FOUND, "the probes' port says nothing else");
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let mut registry = Registry::default();
        let metrics = watcher_controller::Metrics::register(&mut registry);
        drop(metrics.reconcile("watcher"));
        let (status, body) = get(&metrics_router(registry, None), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("watcher_reconcile_total{controller=\"watcher\"} 1"), "{body}");
        assert!(body.contains("watcher_reconcile_duration_seconds_count{controller=\"watcher\"} 1"), "{body}");
        assert!(body.ends_with("# EOF\n"));
    }

    /// The names a PromQL query may read of what `/metrics` exports: a gauge by its name, a
    /// counter with `_total`, a histogram's `_bucket`, `_sum` and `_count`.
    fn exported_names() -> std::collections::BTreeSet<String> {
        let (registry, controllers, webhook) =
            registry(&watcher_cache::WatcherCache::from_store(kube::runtime::reflector::store().0).0, Arc::default());
        // A family shows in the text once it has a series: one each.
        webhook.observe(watcher_webhook::AdmissionResult::injected, 0.001);
        drop(controllers.reconcile("watcher"));
        controllers.error("watcher", &watcher_controller::Error::MissingNamespace("w".into()));
        controllers.sync_conflicts("Secret", 1);
        controllers.set_scope(watcher_controller::ScopeState::Applied);
        let mut observe = watcher_cache::watch::observe_watch::<()>("pods");
        observe(&Ok(kube::runtime::watcher::Event::Init));
        observe(&Err(kube::runtime::watcher::Error::NoResourceVersion));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        // The Watcher's sidecar, watcher-agent, exports its own: the dashboard's row and the
        // alert on them read what it exports.
        let mut agent = watcher_agent::metrics::Registry::default();
        let latency = watcher_agent::config::RuleConfig {
            value: Some(watcher_agent::config::ValueFrom::Group("ms".into())),
            metric: watcher_agent::config::MetricKind::Histogram,
            buckets: watcher_agent::config::DEFAULT_BUCKETS.to_vec(),
            reading: watcher_agent::parse::value::Reading {
                bare: Some(watcher_agent::parse::value::Unit::Milliseconds),
                non_negative: false,
            },
            labels: Vec::new(),
            ..watcher_agent::config::RuleConfig::counting("latency", r"latency=(?P<ms>\d+)ms").expect("a rule")
        };
        let rules = [watcher_agent::config::RuleConfig::counting("error", "ERROR").expect("a rule"), latency];
        let sources = ["/var/log/*.log".into(), "stdout".into()];
        drop(watcher_agent::metrics::Metrics::register(&mut agent, &sources, &rules, 100));
        text.push_str(&watcher_agent::metrics::openmetrics(&agent));
        let mut names = std::collections::BTreeSet::new();
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').expect("name and type");
            match kind {
                "counter" => names.insert(format!("{name}_total")),
                "histogram" => ["_bucket", "_sum", "_count"].iter().all(|s| names.insert(format!("{name}{s}"))),
                _ => names.insert(name.to_owned()),
            };
        }
        names
    }

    /// A fresh operator's `/metrics`: every series known in advance is there at 0 (each
    /// controller's reconciles and errors, each watched resource, each admission result), so the
    /// dashboard shows 0 and `rate()` sees the first error of each.
    #[test]
    fn known_series_are_exported_at_zero_from_the_start() {
        let (registry, _, _) =
            registry(&watcher_cache::WatcherCache::from_store(kube::runtime::reflector::store().0).0, Arc::default());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        let mut wanted = Vec::new();
        for controller in watcher_controller::CONTROLLERS {
            wanted.push(format!("watcher_reconcile_total{{controller=\"{controller}\"}} 0"));
            for error in watcher_controller::Error::METRIC_LABELS {
                wanted
                    .push(format!("watcher_reconcile_errors_total{{controller=\"{controller}\",error=\"{error}\"}} 0"));
            }
        }
        for resource in watcher_controller::WATCHED_RESOURCES {
            // Counted process-wide: another test may have counted a watch of it already.
            wanted.push(format!("watcher_watch_errors_total{{resource=\"{resource}\"}} "));
            wanted.push(format!("watcher_watch_lists_total{{resource=\"{resource}\"}} "));
        }
        for result in ["injected", "rewritten", "skipped", "probe", "refused", "error"] {
            wanted.push(format!("watcher_admission_requests_total{{result=\"{result}\"}} 0"));
        }
        let missing: Vec<&String> =
            wanted.iter().filter(|w| !text.lines().any(|l| l.starts_with(w.as_str()))).collect();
        assert!(missing.is_empty(), "not exported: {missing:?}");
        assert_eq!(watcher_webhook::AdmissionResult::ALL.len(), 6, "every result listed above");
    }

    /// The `watcher_` metric names `text` reads.
    fn names_read(text: &str) -> std::collections::BTreeSet<String> {
        let name = regex::Regex::new(r"\bwatcher_[a-z_]+").expect("regex");
        name.find_iter(text).map(|m| m.as_str().to_owned()).collect()
    }

    const FILES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/watcher-operator/files/");

    /// The dashboard and the alerts read only metrics this binary exports, and every metric a
    /// promise of README is guarded by is there.
    #[test]
    fn the_dashboard_and_the_alerts_read_only_exported_metrics() {
        let exported = exported_names();
        for wanted in [
            "watcher_admission_requests_total",
            "watcher_admission_duration_seconds_bucket",
            "watcher_reconcile_total",
            "watcher_reconcile_errors_total",
            "watcher_reconcile_duration_seconds_bucket",
            "watcher_pods",
            "watcher_rollout_state",
            "watcher_certificate_expiry_timestamp_seconds",
            "watcher_admission_scope",
            "watcher_leader",
            "watcher_watch_errors_total",
            "watcher_watch_lists_total",
            "watcher_agent_matches_total",
            "watcher_agent_alert_firing",
        ] {
            assert!(exported.contains(wanted), "{wanted} not exported: {exported:?}");
        }
        let dashboard: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{FILES}watcher-operator.dashboard.json")).expect("file"),
        )
        .expect("JSON");
        let mut queries = String::new();
        for panel in dashboard["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().into_iter().flatten() {
                queries.push_str(target["expr"].as_str().expect("expr"));
                queries.push('\n');
            }
        }
        queries.push_str(dashboard["templating"]["list"][1]["definition"].as_str().unwrap_or_default());
        let rules = std::fs::read_to_string(format!("{FILES}watcher-operator.rules.yaml")).expect("file");
        for (what, text) in [("the dashboard", &queries), ("the alerts", &rules)] {
            let read = names_read(text);
            assert!(read.len() >= 5, "{what} reads {read:?}");
            let unknown: Vec<&String> = read.iter().filter(|n| !exported.contains(*n)).collect();
            assert!(unknown.is_empty(), "{what} reads metrics the operator does not export: {unknown:?}");
        }
        // The check can fail: a name the operator does not export is found.
        assert!(!exported.contains("watcher_pods_missing_total"));
        assert!(names_read("sum(rate(watcher_pods_missing_total[5m]))").contains("watcher_pods_missing_total"));
    }

    /// The certificates' expiry as exported: the serving certificate once one is served, the CA
    /// once known, each as its `notAfter` in Unix seconds.
    #[test]
    fn certificate_expiry_is_exported_once_known() {
        let store = Arc::new(watcher_certs::CertStore::default());
        let (registry, _, _) =
            registry(&watcher_cache::WatcherCache::from_store(kube::runtime::reflector::store().0).0, store.clone());
        let exported = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
            text.lines()
                .filter(|l| l.starts_with("watcher_certificate_expiry_timestamp_seconds{"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert!(exported(&registry).is_empty(), "nothing served yet");
        let (ca, ca_pem) = watcher_certs::Authority::generate(std::time::Duration::from_secs(30 * 86400)).expect("CA");
        let serving =
            ca.issue(&["w.watcher-system.svc".to_owned()], std::time::Duration::from_secs(86400)).expect("cert");
        store.load_pem(serving.cert_pem.as_bytes(), serving.key_pem.as_bytes()).expect("loads");
        store.set_ca(&ca_pem.cert_pem);
        let seconds = |pem: &str| {
            let info = watcher_certs::CertInfo::from_pem(pem).expect("parses");
            info.not_after.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64()
        };
        let lines = exported(&registry);
        assert_eq!(
            lines,
            [
                format!(
                    r#"watcher_certificate_expiry_timestamp_seconds{{certificate="serving"}} {:.1}"#,
                    seconds(&serving.cert_pem)
                ),
                format!(
                    r#"watcher_certificate_expiry_timestamp_seconds{{certificate="ca"}} {:.1}"#,
                    seconds(&ca_pem.cert_pem)
                ),
            ]
        );
    }
}
