//! A Watcher's configuration reaching the agents that run (docs/agent.md, "Changing the
//! configuration"), on a real node: the kubelet's ConfigMap volume, the agent's reload, and the
//! operator holding back a configuration the agent would refuse.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;

use super::{POD_START, SAMPLES, faster, readme_use_case, require_node, sample};
use crate::common::{Operator, TestNamespace, client, exclusive, http_get, install_crds, kubectl, wait_for};

/// The kubelet refreshes a ConfigMap volume at its next sync of the pod (a minute, and its
/// cache's time): the bound.
const RELOADED_WITHIN: Duration = Duration::from_secs(150);

/// README's agent Watcher with `extra` lines added to its `configData`, as a file to apply.
pub(super) fn watcher_with(extra: &str, tag: &str) -> String {
    let text = std::fs::read_to_string(format!("{SAMPLES}/app-watcher.yaml")).expect("sample");
    let anchor = "    AGENT_STATE_DIR: /var/lib/watcher-agent\n";
    assert!(text.contains(anchor), "the sample's configData");
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-app-watcher-{tag}.yaml", std::process::id()));
    std::fs::write(&path, text.replace(anchor, &format!("{anchor}{extra}"))).expect("written");
    path.display().to_string()
}

/// The restart counts of `pod`'s containers, init containers (native sidecars) included.
async fn restarts(pods: &Api<Pod>, pod: &str) -> Vec<i32> {
    let status = pods.get(pod).await.expect("the pod").status.expect("a status");
    let init = status.init_container_statuses.into_iter().flatten();
    init.chain(status.container_statuses.into_iter().flatten()).map(|s| s.restart_count).collect()
}

/// README's use case; then a rule added with `kubectl apply`: counted by the same agent within
/// [`RELOADED_WITHIN`], every restart count 0, the unchanged rule's counter not reset; then that
/// rule's pattern changed: what it counts now, its series not reset. Then a
/// pattern that does not compile: the ConfigMap stays as it was, the Watcher says so, and a pod
/// created meanwhile is Ready and counting with the last good configuration.
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the image watcher-agent:0.2.0 on the node"]
async fn a_rule_added_is_counted_by_the_agents_that_run() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-reload").await;
    let operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();
    readme_use_case(n);
    let pods = Api::<Pod>::namespaced(client.clone(), n);

    let ip = kubectl(&["get", "pod", "shop", "-n", n, "-o", "jsonpath={.status.podIP}"]);
    let url = format!("http://{}:9102/metrics", ip.trim());
    let source = ("source", "/var/log/app/*.log");
    let errors_before = wait_for(POD_START, || async {
        let (_, metrics) = http_get(&url).await?;
        sample(&metrics, "watcher_agent_matches_total", &[("rule", "error"), source]).filter(|e| *e >= 1.0)
    })
    .await;

    // A rule added: the app logs INFO three orders in four.
    kubectl(&["apply", "-n", n, "-f", &watcher_with("    AGENT_RULE_INFO: \\bINFO\\b\n", "info")]);
    let metrics = wait_for(RELOADED_WITHIN, || async {
        let (_, metrics) = http_get(&url).await?;
        let info = sample(&metrics, "watcher_agent_matches_total", &[("rule", "info"), source])?;
        (info >= 1.0).then_some(metrics)
    })
    .await;
    let errors = sample(&metrics, "watcher_agent_matches_total", &[("rule", "error"), source]).expect("error");
    assert!(errors >= errors_before, "the unchanged rule goes on: {errors} after {errors_before}");
    assert_eq!(sample(&metrics, "watcher_agent_config_reloads_total", &[("result", "applied")]), Some(1.0));
    assert!(restarts(&pods, "shop").await.iter().all(|r| *r == 0), "no restart");
    let described = kubectl(&["describe", "pod", "shop", "-n", n]);
    assert!(described.contains("ConfigApplied"), "the Event on the pod: {described}");

    // A pattern changed: rule `info` now counts the ERROR lines, its series going on.
    let matches = |metrics: &str, rule: &str| sample(metrics, "watcher_agent_matches_total", &[("rule", rule), source]);
    let info_before = matches(&metrics, "info").expect("info");
    kubectl(&["apply", "-n", n, "-f", &watcher_with("    AGENT_RULE_INFO: \\bERROR\\b\n", "changed")]);
    let reloaded = wait_for(RELOADED_WITHIN, || async {
        let (_, metrics) = http_get(&url).await?;
        let applied = sample(&metrics, "watcher_agent_config_reloads_total", &[("result", "applied")]);
        (applied == Some(2.0)).then_some(metrics)
    })
    .await;
    assert!(matches(&reloaded, "info").expect("info") >= info_before, "the changed rule's series go on");
    // The reader takes a new configuration at its next flush: once the ERROR count has moved,
    // every batch after is counted with it, and both rules count the same lines.
    let after = |since: f64| {
        let url = url.clone();
        async move {
            wait_for(Duration::from_secs(60), || async {
                let (_, metrics) = http_get(&url).await?;
                let counts = (matches(&metrics, "info")?, matches(&metrics, "error")?);
                (counts.1 > since).then_some(counts)
            })
            .await
        }
    };
    let error_reloaded = matches(&reloaded, "error").expect("error");
    let (info_1, error_1) = after(error_reloaded).await;
    let (info_2, error_2) = after(error_1).await;
    assert_eq!(info_2 - info_1, error_2 - error_1, "the new pattern counts the ERROR lines");
    assert!(restarts(&pods, "shop").await.iter().all(|r| *r == 0), "no restart");

    // A pattern that does not compile: never written, said by the Watcher.
    let configs = Api::<ConfigMap>::namespaced(client.clone(), n);
    let held = configs.get("app-watcher-config").await.expect("the ConfigMap").data;
    kubectl(&["apply", "-n", n, "-f", &watcher_with("    AGENT_RULE_INFO: (INFO\n", "refused")]);
    let watchers = Api::<watcher_api::Watcher>::namespaced(client.clone(), n);
    let ready = wait_for(Duration::from_secs(60), || async {
        let status = watchers.get("app-watcher").await.ok()?.status?;
        status.conditions.into_iter().find(|c| c.type_ == "Ready" && c.reason == "ConfigRefused")
    })
    .await;
    assert!(ready.message.contains("AGENT_RULE_INFO"), "{}", ready.message);
    assert!(ready.message.contains("ConfigMap app-watcher-config keeps generation"), "{}", ready.message);
    assert_eq!(configs.get("app-watcher-config").await.expect("the ConfigMap").data, held, "kept as it was");

    // A pod created meanwhile starts, with the last good configuration.
    let app = std::fs::read_to_string(faster("app.yaml")).expect("the app").replace("name: shop\n", "name: shop-2\n");
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-shop-2.yaml", std::process::id()));
    std::fs::write(&path, app).expect("written");
    kubectl(&["apply", "-n", n, "-f", &path.display().to_string()]);
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "pod/shop-2", &wait]);
    let ip = kubectl(&["get", "pod", "shop-2", "-n", n, "-o", "jsonpath={.status.podIP}"]);
    let url = format!("http://{}:9102/metrics", ip.trim());
    wait_for(POD_START, || async {
        let (_, metrics) = http_get(&url).await?;
        sample(&metrics, "watcher_agent_matches_total", &[("rule", "info"), source]).filter(|i| *i >= 1.0)
    })
    .await;

    operator.stop().await;
    ns.delete().await;
    operator_ns.delete().await;
}
