//! Operations: the Grafana dashboard and the alerts, as the chart renders them and as
//! Prometheus's own `promtool` checks them.

use std::path::Path;

use serde_json::Value;

use super::{ROOT, find, get, render, run_tool};

const FILES: &str = "charts/watcher-operator/files";

fn chart_file(name: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(FILES).join(name)).expect("chart file")
}

/// Off by default; on, the dashboard is a ConfigMap Grafana's sidecar picks up (label and
/// namespace as set) holding the dashboard file as it is, and the alerts are a PrometheusRule
/// whose spec is the rules file as it is.
#[test]
fn the_dashboard_and_the_alerts_render_where_asked() {
    let Some(defaults) = render("watcher-system", &[]) else { return };
    assert!(find(&defaults, "ConfigMap", "watcher-operator-dashboard").is_none());
    assert!(find(&defaults, "PrometheusRule", "watcher-operator").is_none());
    assert_eq!(
        get(&render("team", &["metrics.serviceMonitor.enabled=true"]).expect("helm"), "ServiceMonitor")["spec"]["endpoints"]
            [0]["honorLabels"],
        true
    );

    let Some(on) = render(
        "watcher-system",
        &[
            "grafana.dashboards.enabled=true,metrics.prometheusRule.enabled=true",
            "grafana.dashboards.namespace=monitoring,grafana.dashboards.label=dashboards,grafana.dashboards.labelValue=on",
            "grafana.dashboards.annotations.grafana_folder=Kubernetes,metrics.prometheusRule.labels.release=prom",
        ],
    ) else {
        return;
    };
    let dashboard = find(&on, "ConfigMap", "watcher-operator-dashboard").expect("the dashboard's ConfigMap");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["dashboards"], "on");
    assert_eq!(dashboard["metadata"]["annotations"]["grafana_folder"], "Kubernetes");
    let rendered: Value =
        serde_json::from_str(dashboard["data"]["watcher-operator.json"].as_str().expect("JSON text")).expect("JSON");
    let file: Value = serde_json::from_str(&chart_file("watcher-operator.dashboard.json")).expect("JSON");
    assert_eq!(rendered, file);

    let rule = get(&on, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "watcher-system");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let rules: Value = serde_saphyr::from_str(&chart_file("watcher-operator.rules.yaml")).expect("YAML");
    assert_eq!(rule["spec"], rules);
    let alerts = rules["groups"][0]["rules"].as_array().expect("rules");
    assert!(alerts.len() >= 6, "{} alerts", alerts.len());
}

/// The dashboard's queries as recording rules, for promtool to check: Grafana's variables
/// replaced by what they stand for.
fn dashboard_rules() -> String {
    let dashboard: Value = serde_json::from_str(&chart_file("watcher-operator.dashboard.json")).expect("JSON");
    let mut rules = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let expr = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*");
            rules.push(serde_json::json!({"record": format!("dashboard:panel_{}:{}", panel["id"], target["refId"].as_str().expect("refId").to_lowercase()), "expr": expr}));
        }
    }
    assert!(rules.len() >= 10, "the dashboard's queries: {}", rules.len());
    serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string()
}

/// Prometheus's own tools: `promtool check rules` on the alerts and on every query of the
/// dashboard, and `promtool test rules` (each alert firing on its series and silent on others).
#[test]
fn promtool_checks_the_alerts_and_every_dashboard_query() {
    let dir = Path::new(ROOT).join("target").join("promtool");
    std::fs::create_dir_all(&dir).expect("target/promtool");
    let generated = dir.join("dashboard.rules.yaml");
    std::fs::write(&generated, dashboard_rules()).expect("written");
    let rules = format!("{FILES}/watcher-operator.rules.yaml");
    let Some(checked) = run_tool("promtool", &["check", "rules", &rules, generated.to_str().expect("UTF-8")]) else {
        return;
    };
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = run_tool("promtool", &["test", "rules", &format!("{FILES}/watcher-operator.rules.test.yaml")]);
    assert!(tested.is_some_and(|out| out.contains("SUCCESS")));
}

/// Each alert is tested: `promtool test rules` names every alert of the rules file, firing and
/// silent (an alert with no test could fire on nothing, or on everything).
#[test]
fn every_alert_has_tests_that_fire_and_that_stay_silent() {
    let rules: Value = serde_saphyr::from_str(&chart_file("watcher-operator.rules.yaml")).expect("YAML");
    let tests: Value = serde_saphyr::from_str(&chart_file("watcher-operator.rules.test.yaml")).expect("YAML");
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().expect("cases"))
        .collect();
    for alert in rules["groups"][0]["rules"].as_array().expect("rules") {
        let name = alert["alert"].as_str().expect("alert");
        let of_it: Vec<&&Value> = cases.iter().filter(|c| c["alertname"] == name).collect();
        assert!(of_it.iter().any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty())), "{name} never fires");
        let silent = of_it.iter().any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(silent, "{name} is never shown silent");
        for key in ["summary", "description", "runbook_url"] {
            assert!(alert["annotations"][key].as_str().is_some_and(|v| !v.is_empty()), "{name}: {key}");
        }
        assert!(["warning", "critical"].contains(&alert["labels"]["severity"].as_str().unwrap_or_default()), "{name}");
    }
}
