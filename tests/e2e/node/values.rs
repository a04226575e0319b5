//! README's use case grown, on a real node: the samples whose apps log a latency (as text, and as
//! JSON) and a Java stack trace, watched by the agent as the samples' Watchers configure it. What
//! the sidecars' `/metrics` say is checked against what the apps wrote: the histogram's buckets
//! exact for the latencies logged, the JSON field as a label, one match and one Event per stack
//! trace quoting the exception's first line.

use super::{POD_START, SAMPLES, faster, require_node, sample};
use crate::common::{Operator, TestNamespace, client, exclusive, http_get, install_crds, kubectl, wait_for};

/// The sidecar's `/metrics` of pod `pod`.
async fn metrics(namespace: &str, pod: &str) -> String {
    let ip = kubectl(&["get", "pod", pod, "-n", namespace, "-o", "jsonpath={.status.podIP}"]);
    let url = format!("http://{}:9102/metrics", ip.trim());
    wait_for(POD_START, || async { http_get(&url).await.filter(|(status, _)| *status == 200).map(|(_, body)| body) })
        .await
}

/// What app `pod` wrote to its log.
fn app_log(namespace: &str, pod: &str) -> String {
    kubectl(&["exec", "-n", namespace, pod, "-c", "app", "--", "cat", "/var/log/app/app.log"])
}

#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the image watcher-agent:0.2.0 on the node"]
async fn values_json_fields_and_stack_traces_on_a_node() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-values").await;
    let operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();

    kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/agent-rbac.yaml")]);
    for watcher in ["app-values-watcher", "app-json-watcher"] {
        kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/{watcher}.yaml")]);
        kubectl(&["wait", "-n", n, "--for=condition=Ready", &format!("watcher/{watcher}"), "--timeout=60s"]);
    }
    kubectl(&["apply", "-n", n, "-f", &faster("app-values.yaml")]);
    kubectl(&["apply", "-n", n, "-f", &faster("app-json.yaml")]);
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "pod/shop-values", "pod/shop-json", &wait]);

    // The stack trace: one Event quoting the exception's first line (order 8, at about 8 s).
    let described = wait_for(POD_START, || async {
        let described = kubectl(&["describe", "pod", "shop-values", "-n", n]);
        described.contains("LogRuleException").then_some(described)
    })
    .await;
    let event = described.lines().find(|l| l.contains("LogRuleException")).expect("the Event's line");
    assert!(event.contains("last line: java.lang.IllegalStateException: order 8: payment refused"), "{event}");

    // The latencies: the histogram's first `_count` observations are the app's first latencies
    // (lines are read in order; the last may still wait for its event to end), each in its
    // bucket; one match per stack trace, never one per frame.
    let source = ("source", "/var/log/app/*.log");
    let text = metrics(n, "shop-values").await;
    let log = app_log(n, "shop-values");
    let latencies: Vec<f64> = log
        .lines()
        .filter_map(|l| l.split("latency=").nth(1)?.strip_suffix("ms")?.parse::<f64>().ok())
        .map(|ms| ms / 1000.0)
        .collect();
    let rule = ("rule", "latency");
    let count = sample(&text, "watcher_agent_latency_seconds_count", &[rule, source]).expect("the histogram") as usize;
    assert!(count >= 8 && count <= latencies.len(), "{count} observed, {} logged", latencies.len());
    for bound in ["0.01", "0.05", "0.1", "0.25", "0.5", "1.0"] {
        let le: f64 = bound.parse().expect("bound");
        let expected = latencies[..count].iter().filter(|v| **v <= le).count() as f64;
        let got = sample(&text, "watcher_agent_latency_seconds_bucket", &[("le", bound), rule, source]);
        assert_eq!(got, Some(expected), "le={bound}: {text}");
    }
    let sum = sample(&text, "watcher_agent_latency_seconds_sum", &[rule, source]).expect("sum");
    assert!((sum - latencies[..count].iter().sum::<f64>()).abs() < 1e-6, "{sum}");
    let traces = log.lines().filter(|l| l.starts_with("java.lang.IllegalStateException")).count() as f64;
    let matched = sample(&text, "watcher_agent_matches_total", &[("rule", "exception"), source]).expect("matched");
    assert!(matched >= 1.0 && matched <= traces, "{matched} matches, {traces} traces");
    let lines = sample(&text, "watcher_agent_lines_total", &[source]).expect("lines");
    let events = sample(&text, "watcher_agent_events_total", &[source]).expect("events");
    assert_eq!(lines, events + 4.0 * matched, "each trace's 5 lines one event: {events} events, {matched} traces");

    // The JSON app: errors by the route field (orders 4 and 8 on /cart, 12 on /pay), the
    // latency of the nested field http.ms.
    let text = wait_for(POD_START, || async {
        let text = metrics(n, "shop-json").await;
        let pay = sample(&text, "watcher_agent_matches_total", &[("rule", "error"), ("route", "/pay"), source]);
        pay.is_some_and(|v| v >= 1.0).then_some(text)
    })
    .await;
    let cart = sample(&text, "watcher_agent_matches_total", &[("rule", "error"), ("route", "/cart"), source]);
    assert!(cart.is_some_and(|v| v >= 2.0), "{text}");
    let observed =
        sample(&text, "watcher_agent_latency_seconds_count", &[("rule", "latency"), ("route", "/cart"), source]);
    assert!(observed.is_some_and(|v| v >= 2.0), "{text}");
    assert_eq!(sample(&text, "watcher_agent_parse_errors_total", &[source]), Some(0.0), "{text}");
    assert_eq!(sample(&text, "watcher_agent_value_errors_total", &[("rule", "latency")]), Some(0.0), "{text}");

    operator.stop().await;
    ns.delete().await;
    operator_ns.delete().await;
}
