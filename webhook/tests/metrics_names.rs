//! The admission metrics carry the names and labels the design promises.

use prometheus_client::registry::Registry;
use watcher_webhook::{AdmissionResult, Metrics, ResourceOutcome};

#[test]
fn admission_metrics_are_named_as_documented() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    metrics.observe(AdmissionResult::injected, 0.0002);
    metrics.observe(AdmissionResult::skipped, 0.0001);
    metrics.observe(AdmissionResult::error, 0.0001);
    metrics.count_resources(&[ResourceOutcome::adapted, ResourceOutcome::left_out]);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    for line in [
        "watcher_admission_requests_total{result=\"injected\"} 1",
        "watcher_admission_requests_total{result=\"skipped\"} 1",
        "watcher_admission_requests_total{result=\"error\"} 1",
        "watcher_admission_duration_seconds_count 3",
        "watcher_admission_resources_total{outcome=\"adapted\"} 1",
        "watcher_admission_resources_total{outcome=\"left_out\"} 1",
        "watcher_admission_resources_total{outcome=\"refused\"} 0",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}
