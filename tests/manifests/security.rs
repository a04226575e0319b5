//! What the chart installs to be secure by default: `/metrics` behind authentication, the
//! ValidatingAdmissionPolicies that fence the operator's own ServiceAccount, the NetworkPolicy.

use serde_json::{Value, json};

use super::{VAP, find, get, render, render_for};

fn names(objects: &[Value], kind: &str) -> Vec<String> {
    let mut names: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `/metrics` on its own port, HTTPS by default, the probes on a plain port of their own; the
/// metrics-reader role, bound to what `metrics.readers` names; the ServiceMonitor scrapes over
/// TLS it verifies, with Prometheus' token. `metrics.secure=false` turns all of it back.
#[test]
fn metrics_are_served_behind_authentication_by_default() {
    let Some(chart) = render("team", &["metrics.serviceMonitor.enabled=true"]) else { return };
    let container = &get(&chart, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["ports"],
        json!([{"name": "webhook", "containerPort": 8443}, {"name": "metrics", "containerPort": 8080},
               {"name": "health", "containerPort": 8081}])
    );
    assert_eq!(container["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "health"}));
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "health"}));
    let env = container["env"].as_array().expect("env");
    assert!(!env.iter().any(|e| e["name"] == "WATCHER_METRICS_SECURE"), "the binary's default: secure");

    let reader = find(&chart, "ClusterRole", "watcher-operator-metrics-reader").expect("the metrics-reader role");
    assert_eq!(reader["rules"], json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]));
    assert!(find(&chart, "ClusterRoleBinding", "watcher-operator-metrics-reader").is_none(), "bound only when asked");

    let endpoint = &get(&chart, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token");
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"serverName": "watcher-operator.team.svc", "ca": {"secret": {"name": "watcher-operator-tls", "key": "ca.crt"}}})
    );
    assert!(!endpoint.to_string().contains("insecureSkipVerify"));

    let sets = ["metrics.readers[0].namespace=monitoring", "metrics.readers[0].name=prometheus-k8s"];
    let Some(bound) = render("team", &sets) else { return };
    let binding = find(&bound, "ClusterRoleBinding", "watcher-operator-metrics-reader").expect("bound");
    assert_eq!(binding["roleRef"]["name"], "watcher-operator-metrics-reader");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );

    let Some(plain) = render("team", &["metrics.secure=false", "metrics.serviceMonitor.enabled=true"]) else { return };
    let container = &get(&plain, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_array().expect("env");
    assert!(env.iter().any(|e| e["name"] == "WATCHER_METRICS_SECURE" && e["value"] == "false"), "{env:?}");
    let endpoint = &get(&plain, "ServiceMonitor")["spec"]["endpoints"][0];
    assert!(endpoint.get("scheme").is_none() && endpoint.get("tlsConfig").is_none(), "{endpoint}");
}

/// The policies go where kube-apiserver serves ValidatingAdmissionPolicy (Helm asks it), each
/// with its binding, matching only the release's ServiceAccount; `policies.enabled=false`
/// leaves them out.
#[test]
fn the_policies_fence_only_the_operator_where_the_server_has_them() {
    let Some(older) = render("team-ops", &[]) else { return };
    assert!(names(&older, "ValidatingAdmissionPolicy").is_empty(), "a server before 1.30 has none");
    let Some(chart) = render_for("team-ops", &["supervisor.image.repository=mirror.example/watcher-supervise"], &[VAP])
    else {
        return;
    };
    let policies = names(&chart, "ValidatingAdmissionPolicy");
    assert_eq!(
        policies,
        ["watcher-operator-owned", "watcher-operator-pods", "watcher-operator-webhooks", "watcher-operator-workloads"]
    );
    assert_eq!(names(&chart, "ValidatingAdmissionPolicyBinding"), policies);
    for name in &policies {
        let policy = find(&chart, "ValidatingAdmissionPolicy", name).expect("policy");
        assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{name}");
        assert_eq!(
            policy["spec"]["matchConditions"],
            json!([{"name": "the-operator",
                    "expression": "request.userInfo.username == 'system:serviceaccount:team-ops:watcher-operator'"}]),
            "{name} matches the operator's requests only"
        );
        let binding = find(&chart, "ValidatingAdmissionPolicyBinding", name).expect("binding");
        assert_eq!(binding["spec"], json!({"policyName": name, "validationActions": ["Deny"]}));
        for validation in policy["spec"]["validations"].as_array().expect("validations") {
            assert_eq!(validation["reason"], "Forbidden", "{name}");
            assert!(validation["message"].as_str().is_some_and(|m| m.starts_with("watcher-operator ")), "{name}");
        }
    }
    let pods = find(&chart, "ValidatingAdmissionPolicy", "watcher-operator-pods").expect("pods");
    assert!(
        pods.to_string().contains("'mirror.example/watcher-supervise:0.2.0'"),
        "the supervisor image follows the values"
    );
    let owned = find(&chart, "ValidatingAdmissionPolicy", "watcher-operator-owned").expect("owned");
    assert!(owned.to_string().contains("request.namespace == 'team-ops'"), "its TLS Secret, in its own namespace");

    let Some(off) = render_for("team-ops", &["policies.enabled=false"], &[VAP]) else { return };
    assert!(names(&off, "ValidatingAdmissionPolicy").is_empty());
}

/// In: the webhook port from anywhere, the metrics port from the selected namespaces; out:
/// kube-apiserver's ports and DNS only. One value turns it off.
#[test]
fn the_network_policy_opens_only_what_the_operator_needs() {
    let Some(chart) = render("team", &["networkPolicy.metricsNamespaceSelector.matchLabels.team=monitoring"]) else {
        return;
    };
    let policy = get(&chart, "NetworkPolicy");
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"], json!({"app.kubernetes.io/name": "watcher-operator"}));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        policy["spec"]["ingress"],
        json!([
            {"ports": [{"port": "webhook", "protocol": "TCP"}]},
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
             "ports": [{"port": "metrics", "protocol": "TCP"}]},
        ])
    );
    assert_eq!(
        policy["spec"]["egress"],
        json!([
            {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
            {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        ])
    );
    let Some(off) = render("team", &["networkPolicy.enabled=false"]) else { return };
    assert!(find(&off, "NetworkPolicy", "watcher-operator").is_none());
}
