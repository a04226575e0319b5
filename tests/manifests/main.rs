//! The install manifests as kube-apiserver gets them: `kubectl kustomize deploy/`.
//!
//! These tests run the real tools. Without `kubectl` on the `PATH` they are skipped with a
//! message, unless `WATCHER_REQUIRE_TOOLS=1` (set by `.ci/run`), which makes a missing tool a
//! failure.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod policies;
mod security;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The output of `program args...`, or `None` (test skipped) when the program is missing and
/// tools are not required.
fn run_tool(program: &str, args: &[&str]) -> Option<String> {
    let output = match Command::new(program).args(args).current_dir(ROOT).output() {
        Ok(output) => output,
        Err(error) if std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none() => {
            eprintln!("skipped: cannot run {program} ({error}); .ci/run installs it");
            return None;
        }
        Err(error) => panic!("cannot run {program}: {error}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{program} {} failed: {stderr}", args.join(" "));
    Some(String::from_utf8(output.stdout).expect("UTF-8 output"))
}

/// The objects of a multi-document YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn deploy_clears_a_url_registration() {
    assert!(Path::new(ROOT).join("deploy/kustomization.yaml").exists());
    let Some(built) = run_tool("kubectl", &["kustomize", "deploy/"]) else { return };
    let objects = documents(&built);
    let config = objects
        .iter()
        .find(|o| o["kind"] == "MutatingWebhookConfiguration")
        .expect("deploy/ installs the webhook configuration");
    let webhooks = config["webhooks"].as_array().expect("webhooks");
    assert!(!webhooks.is_empty());
    for webhook in webhooks {
        let client_config = webhook["clientConfig"].as_object().expect("clientConfig");
        // Present and null: kubectl's apply (either kind) then removes a `url` another writer set.
        assert_eq!(client_config.get("url"), Some(&Value::Null), "{client_config:?}");
        assert_eq!(client_config["service"]["namespace"], "watcher-system");
    }
}

// The Helm chart.

const CHART: &str = "charts/watcher-operator";
/// The labels Helm's chart adds that `deploy/` has no use for.
const HELM_LABELS: [&str; 4] =
    ["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"];

/// `helm template` of the chart into `namespace` with `--set` values; `None`: no helm here.
fn render(namespace: &str, sets: &[&str]) -> Option<Vec<Value>> {
    render_for(namespace, sets, &[])
}

/// What a server that serves ValidatingAdmissionPolicy (1.30+) tells Helm.
const VAP: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";

/// [`render`] for a server that serves `api_versions` (`--api-versions`).
fn render_for(namespace: &str, sets: &[&str], api_versions: &[&str]) -> Option<Vec<Value>> {
    let mut args = vec!["template", "watcher-operator", CHART, "-n", namespace];
    for set in sets {
        args.extend(["--set", set]);
    }
    for api in api_versions {
        args.extend(["--api-versions", api]);
    }
    run_tool("helm", &args).map(|yaml| documents(&yaml))
}

/// The chart refuses `sets`: Helm's own error, from values.schema.json.
fn refused(sets: &[&str]) -> Option<String> {
    let mut args = vec!["template", "watcher-operator", CHART];
    for set in sets {
        args.extend(["--set", set]);
    }
    let output = match Command::new("helm").args(&args).current_dir(ROOT).output() {
        Ok(output) => output,
        Err(_) if std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none() => return None,
        Err(error) => panic!("cannot run helm: {error}"),
    };
    assert!(!output.status.success(), "{sets:?} was accepted");
    Some(String::from_utf8_lossy(&output.stderr).into_owned())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn get<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    find(objects, kind, "watcher-operator").unwrap_or_else(|| panic!("no {kind} watcher-operator"))
}

fn without_helm_labels(mut object: Value) -> Value {
    if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
        labels.retain(|key, _| !HELM_LABELS.contains(&key.as_str()));
    }
    object
}

/// The chart with its defaults installs what `kubectl apply -k deploy/` installs, object by
/// object (Helm's own labels aside), except the Namespace, which `helm install
/// --create-namespace` creates, and the CRDs, which both take byte for byte from `crds`. Where
/// kube-apiserver serves ValidatingAdmissionPolicy (1.30+), it also installs what
/// `kubectl apply -k deploy/policies/` does.
#[test]
fn the_chart_installs_what_deploy_installs() {
    for (api_versions, directories) in [(&[][..], &["deploy/"][..]), (&[VAP][..], &["deploy/", "deploy/policies/"])] {
        let Some(chart) = render_for("watcher-system", &[], api_versions) else { return };
        let mut deploy = Vec::new();
        for directory in directories {
            let Some(built) = run_tool("kubectl", &["kustomize", directory]) else { return };
            deploy.extend(
                documents(&built)
                    .into_iter()
                    .filter(|o| !matches!(o["kind"].as_str(), Some("Namespace" | "CustomResourceDefinition"))),
            );
        }
        let key = |o: &Value| {
            format!("{}/{}", o["kind"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())
        };
        let mut chart_keys: Vec<String> = chart.iter().map(key).collect();
        let mut deploy_keys: Vec<String> = deploy.iter().map(key).collect();
        chart_keys.sort();
        deploy_keys.sort();
        assert_eq!(chart_keys, deploy_keys, "the same objects ({api_versions:?})");
        for object in &deploy {
            let rendered = chart.iter().find(|o| key(o) == key(object)).expect("rendered");
            assert_eq!(without_helm_labels(rendered.clone()), *object, "{} differs from {directories:?}", key(object));
        }
    }
}

/// The release namespace replaces `watcher-system` everywhere.
#[test]
fn the_release_namespace_is_used_everywhere() {
    let Some(chart) = render("team-ops", &[]) else { return };
    let text = serde_json::to_string(&chart).expect("JSON");
    assert!(!text.contains("watcher-system"), "watcher-system left in the chart: {text}");
    let webhook = get(&chart, "MutatingWebhookConfiguration");
    assert_eq!(webhook["webhooks"][0]["clientConfig"]["service"]["namespace"], "team-ops");
    assert_eq!(
        webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["kube-system", "kube-public", "kube-node-lease", "team-ops"])
    );
    assert_eq!(get(&chart, "ClusterRoleBinding")["subjects"][0]["namespace"], "team-ops");
    assert_eq!(get(&chart, "RoleBinding")["subjects"][0]["namespace"], "team-ops");
}

fn cluster_role_resources(chart: &[Value]) -> Vec<String> {
    let rules = get(chart, "ClusterRole")["rules"].as_array().expect("rules").clone();
    rules
        .iter()
        .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect()
}

/// Every `(apiGroup, resource, verb)` the ClusterRole grants.
fn cluster_role_grants(chart: &[Value]) -> std::collections::BTreeSet<(String, String, String)> {
    let mut grants = std::collections::BTreeSet::new();
    for rule in get(chart, "ClusterRole")["rules"].as_array().expect("rules") {
        let strings = |key: &str| -> Vec<String> {
            rule[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    grants.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    grants
}

/// The cluster-wide API calls of the operator, by who makes them (`""`: every replica), as the
/// code makes them: `(who, apiGroup, resources, verbs)`.
const CALLS: &[(&str, &str, &[&str], &[&str])] = &[
    // The webhook's caches (cache/src/watchers.rs, policies.rs), in every replica.
    ("", "watcher.dev", &["watchers", "clusterwatchers", "imagepolicies"], &["get", "list", "watch"]),
    ("", "", &["namespaces"], &["list", "watch"]),
    // The namespaces' resource rules (cache/src/resource_rules.rs).
    ("", "", &["limitranges", "resourcequotas"], &["list", "watch"]),
    // The Pod Security defaults (controller/src/pod_security_probe.rs): dry-run pods.
    ("", "", &["pods"], &["create"]),
    // The revision cache (cache/src/revisions.rs): a held rollout's stable revision.
    ("", "apps", &["controllerrevisions"], &["get", "list", "watch"]),
    // Events (controller/src/context.rs), the self-managed registration (certs/src/registration.rs)
    // and the admission scope (controller/src/scope.rs: get, update).
    ("", "events.k8s.io", &["events"], &["create", "patch"]),
    // Who reads /metrics (src/metrics_auth.rs), with metrics.secure (the default).
    ("", "authentication.k8s.io", &["tokenreviews"], &["create"]),
    ("", "authorization.k8s.io", &["subjectaccessreviews"], &["create"]),
    ("", "admissionregistration.k8s.io", &["mutatingwebhookconfigurations"], &["get", "patch", "update"]),
    // A run by URL creates the configuration, and deletes it when it stops.
    ("", "admissionregistration.k8s.io", &["mutatingwebhookconfigurations"], &["create", "delete"]),
    // watcher.rs and cluster_watcher.rs: the owned ConfigMaps (a labelled watch, POST, merge
    // patch, delete) and status.
    ("watcher", "", &["configmaps"], &["get", "list", "watch", "create", "patch", "update", "delete"]),
    ("watcher", "watcher.dev", &["watchers/status", "clusterwatchers/status"], &["get", "patch", "update"]),
    // revisions.rs: each spec's revision written when it is first seen.
    ("watcher", "apps", &["controllerrevisions"], &["create"]),
    // pods.rs: the pod index, in-place patches, evictions, the revisions, and the counts.
    ("pods", "", &["pods"], &["get", "list", "watch", "patch"]),
    ("pods", "", &["pods/eviction"], &["create"]),
    ("pods", "apps", &["controllerrevisions"], &["create", "delete"]),
    ("pods", "watcher.dev", &["watchers/status", "clusterwatchers/status"], &["get", "patch", "update"]),
    // at.rs and podset.rs: their resources, status and the pods they own.
    ("at", "watcher.dev", &["ats"], &["get", "list", "watch"]),
    ("at", "watcher.dev", &["ats/status"], &["get", "patch", "update"]),
    ("at", "", &["pods"], &["get", "list", "watch", "create", "delete"]),
    ("podset", "watcher.dev", &["podsets"], &["get", "list", "watch"]),
    ("podset", "watcher.dev", &["podsets/status"], &["get", "patch", "update"]),
    ("podset", "", &["pods"], &["get", "list", "watch", "create", "delete"]),
    // sync.rs: sources, copies by label, server-side apply, recreate and delete.
    ("sync", "", &["configmaps"], &["get", "list", "watch", "create", "patch", "update", "delete"]),
    // Secrets only with sync.secrets (off by default): rbac_grants_only_what_the_enabled_controllers_need.
    // images.rs: workload templates (strategic merge patch, GET after a conflict) and status.
    ("images", "apps", &["deployments", "statefulsets", "daemonsets"], &["get", "list", "watch", "patch"]),
    ("images", "watcher.dev", &["imagepolicies/status"], &["get", "patch", "update"]),
];

const CONTROLLERS: [&str; 6] = ["watcher", "pods", "at", "podset", "sync", "images"];

/// Least privilege follows the values, for every subset of controllers: the ClusterRole grants
/// exactly the calls of the controllers that run (and of every replica), nothing more.
#[test]
fn rbac_grants_exactly_what_the_enabled_controllers_call() {
    for mask in 1u32..(1 << CONTROLLERS.len()) {
        let enabled: Vec<&str> =
            CONTROLLERS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| *c).collect();
        let set = format!("controllers={{{}}}", enabled.join(","));
        let Some(chart) = render("watcher-system", &[&set]) else { return };
        let mut expected = std::collections::BTreeSet::new();
        for (who, group, resources, verbs) in CALLS {
            if who.is_empty() || enabled.contains(who) {
                for resource in *resources {
                    for verb in *verbs {
                        expected.insert(((*group).to_owned(), (*resource).to_owned(), (*verb).to_owned()));
                    }
                }
            }
        }
        let granted = cluster_role_grants(&chart);
        let extra: Vec<_> = granted.difference(&expected).collect();
        let missing: Vec<_> = expected.difference(&granted).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{set}: granted beyond the calls {extra:?}, missing {missing:?}"
        );
    }
}

/// Secrets cluster-wide only when sync copies them (sync.secrets, off by default); the reviews
/// of /metrics only when it is secure; cert-manager leaves only the rights the admission scope
/// needs on the webhook configuration.
#[test]
fn rbac_grants_only_what_the_enabled_controllers_need() {
    let cases: [(&[&str], &[&str], &[&str]); 4] = [
        (&[], &["configmaps", "deployments", "pods", "pods/eviction", "ats/status", "tokenreviews"], &["secrets"]),
        (&["sync.secrets=true"], &["secrets", "configmaps"], &[]),
        (&["metrics.secure=false"], &["configmaps"], &["tokenreviews", "subjectaccessreviews"]),
        (&["certManager.enabled=true"], &["configmaps", "mutatingwebhookconfigurations"], &[]),
    ];
    for (sets, granted, refused) in cases {
        let Some(chart) = render("watcher-system", sets) else { return };
        let resources = cluster_role_resources(&chart);
        for resource in granted {
            assert!(resources.iter().any(|r| r == resource), "{sets:?}: {resource} not granted: {resources:?}");
        }
        for resource in refused {
            assert!(!resources.iter().any(|r| r == resource), "{sets:?}: {resource} granted: {resources:?}");
        }
    }
    // By default, only the tls Secret of its own namespace, and the binary's own default.
    let Some(chart) = render("watcher-system", &[]) else { return };
    let role = get(&chart, "Role");
    let secret_rules: Vec<&Value> =
        role["rules"].as_array().expect("rules").iter().filter(|r| r["resources"][0] == "secrets").collect();
    assert_eq!(secret_rules[0]["resourceNames"], serde_json::json!(["watcher-operator-tls"]));
    let env = |chart: &[Value]| get(chart, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    assert!(!env(&chart).as_array().expect("env").iter().any(|e| e["name"] == "WATCHER_SYNC_SECRETS"));
    let Some(syncing) = render("watcher-system", &["sync.secrets=true"]) else { return };
    assert!(
        env(&syncing)
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "WATCHER_SYNC_SECRETS" && e["value"] == "true")
    );
}

/// certManager.enabled: a Certificate (and a self-signed Issuer) into Secret
/// watcher-operator-tls, served with --tls-cert-file, the CA injected by cert-manager; the
/// operator gets no right to its Secret, and updates the webhook configuration only for its
/// matchConditions.
#[test]
fn cert_manager_issues_and_injects_the_certificate() {
    let Some(chart) = render("watcher-system", &["certManager.enabled=true"]) else { return };
    let certificate = get(&chart, "Certificate");
    assert_eq!(certificate["spec"]["secretName"], "watcher-operator-tls");
    assert_eq!(certificate["spec"]["dnsNames"][0], "watcher-operator.watcher-system.svc");
    assert_eq!(certificate["spec"]["issuerRef"]["name"], "watcher-operator-selfsigned");
    assert!(find(&chart, "Issuer", "watcher-operator-selfsigned").is_some());
    let pod = &get(&chart, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["args"],
        serde_json::json!([
            "run",
            "--tls-cert-file=/etc/watcher-operator/tls/tls.crt",
            "--tls-key-file=/etc/watcher-operator/tls/tls.key"
        ])
    );
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "watcher-operator-tls");
    let webhook = get(&chart, "MutatingWebhookConfiguration");
    assert_eq!(webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "watcher-system/watcher-operator");
    assert!(webhook["webhooks"][0]["clientConfig"].get("caBundle").is_none());
    let webhook_grants: Vec<String> = cluster_role_grants(&chart)
        .into_iter()
        .filter(|(_, resource, _)| resource == "mutatingwebhookconfigurations")
        .map(|(_, _, verb)| verb)
        .collect();
    assert_eq!(webhook_grants, ["get", "update"], "the matchConditions only: no create, no patch");
    assert!(get(&chart, "Role")["rules"].as_array().expect("rules").iter().all(|r| r["resources"][0] != "secrets"));

    let Some(chart) = render(
        "watcher-system",
        &["certManager.enabled=true", "certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer"],
    ) else {
        return;
    };
    assert!(find(&chart, "Issuer", "watcher-operator-selfsigned").is_none());
    assert_eq!(
        get(&chart, "Certificate")["spec"]["issuerRef"],
        serde_json::json!({"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
}

/// Every other value reaches the object it is about.
#[test]
fn every_value_is_rendered_where_it_belongs() {
    let sets = [
        "image.repository=registry.example.com/watcher-operator",
        "image.tag=0.2.0",
        "imagePullSecrets[0].name=regcred",
        "replicaCount=3",
        "resources.requests.cpu=100m",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "topologySpreadConstraints=null",
        "priorityClassName=system-cluster-critical",
        "podAnnotations.team=platform",
        "podLabels.tier=control",
        "controllers={watcher,pods}",
        "sync.namespaces={watcher-system,shared}",
        "logFormat=text",
        "leaderElection=false",
        "webhook.failurePolicy=Fail",
        "webhook.timeoutSeconds=10",
        "webhook.namespaceSelectorExpressions[0].key=team",
        "webhook.namespaceSelectorExpressions[0].operator=Exists",
        "webhook.objectSelector.matchLabels.sidecars=on",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
        "podDisruptionBudget.minAvailable=2",
    ];
    let Some(chart) = render("watcher-system", &sets) else { return };
    let deployment = get(&chart, "Deployment");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(container["image"], "registry.example.com/watcher-operator:0.2.0");
    assert_eq!(container["resources"]["requests"]["cpu"], "100m");
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(pod["spec"]["nodeSelector"]["pool"], "system");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "dedicated");
    assert!(pod["spec"]["affinity"]["nodeAffinity"].is_object());
    assert!(pod["spec"].get("topologySpreadConstraints").is_none());
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["metadata"]["annotations"]["team"], "platform");
    assert_eq!(pod["metadata"]["labels"]["tier"], "control");
    assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "watcher-operator");
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
        .collect();
    for expected in [
        ("WATCHER_CONTROLLERS", "watcher,pods"),
        ("WATCHER_SYNC_NAMESPACES", "watcher-system,shared"),
        ("WATCHER_LOG_FORMAT", "text"),
        ("WATCHER_LEADER_ELECTION", "false"),
    ] {
        assert!(env.iter().any(|(n, v)| (n.as_str(), v.as_str()) == expected), "{expected:?} in {env:?}");
    }
    let webhook = &get(&chart, "MutatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["timeoutSeconds"], 10);
    assert_eq!(
        webhook["namespaceSelector"]["matchExpressions"][2],
        serde_json::json!({"key": "team", "operator": "Exists"})
    );
    assert_eq!(webhook["objectSelector"], serde_json::json!({"matchLabels": {"sidecars": "on"}}));
    let monitor = get(&chart, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["scheme"], "https");
    assert_eq!(get(&chart, "PodDisruptionBudget")["spec"]["minAvailable"], 2);
}

/// values.schema.json refuses a wrong type or an unknown enum value, with Helm's own error.
#[test]
fn the_schema_refuses_wrong_values() {
    for sets in [
        &["replicaCount=two"][..],
        &["webhook.failurePolicy=Sometimes"],
        &["logFormat=xml"],
        &["controllers={watcher,bogus}"],
        &["webhook.timeoutSeconds=60"],
        &["certManager.enabled=yes"],
        &["replicas=2"],
        &["metrics.secure=maybe"],
        &["metrics.readers[0].name=prometheus"],
        &["networkPolicy.apiServerPorts={0}"],
        &["policies.enabled=on"],
    ] {
        let Some(stderr) = refused(sets) else { return };
        assert!(stderr.contains("values don't meet the specifications of the schema"), "{sets:?}: {stderr}");
    }
}

// Operations: the Grafana dashboard and the alerts.

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

/// The ClusterRoles aggregated into Kubernetes' admin, edit and view: namespace editors manage
/// the namespaced kinds users create (never a ClusterWatcher or an ImagePolicy), viewers read
/// every kind the CRDs serve; `rbac.aggregateClusterRoles=false` leaves them out.
#[test]
fn the_aggregated_cluster_roles_follow_kubernetes_own() {
    let Some(chart) = render("watcher-system", &[]) else { return };
    let role = |name: &str| find(&chart, "ClusterRole", name).unwrap_or_else(|| panic!("no ClusterRole {name}"));
    let aggregates = |name: &str| -> Vec<String> {
        let labels = role(name)["metadata"]["labels"].as_object().expect("labels").clone();
        let mut to: Vec<String> = labels
            .iter()
            .filter(|(_, v)| *v == "true")
            .filter_map(|(k, _)| k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-").map(str::to_owned))
            .collect();
        to.sort();
        to
    };
    assert_eq!(aggregates("watcher-operator-edit"), ["admin", "edit"]);
    assert_eq!(aggregates("watcher-operator-view"), ["admin", "edit", "view"]);

    let grants = |name: &str| -> std::collections::BTreeSet<(String, String)> {
        let mut grants = std::collections::BTreeSet::new();
        for rule in role(name)["rules"].as_array().expect("rules") {
            assert_eq!(rule["apiGroups"], serde_json::json!(["watcher.dev"]), "{name}: the operator's group only");
            for resource in rule["resources"].as_array().expect("resources") {
                for verb in rule["verbs"].as_array().expect("verbs") {
                    grants.insert((
                        resource.as_str().expect("resource").to_owned(),
                        verb.as_str().expect("verb").to_owned(),
                    ));
                }
            }
        }
        grants
    };
    let edit = grants("watcher-operator-edit");
    let managed: std::collections::BTreeSet<String> = edit.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(managed.into_iter().collect::<Vec<_>>(), ["ats", "podsets", "watchers"]);
    for resource in ["watchers", "ats", "podsets"] {
        for verb in ["create", "delete", "get", "list", "patch", "update", "watch"] {
            assert!(edit.contains(&(resource.to_owned(), verb.to_owned())), "edit: {verb} {resource}");
        }
    }

    // view reads every kind the CRDs serve, and writes nothing.
    let crds = std::fs::read_to_string(Path::new(ROOT).join("deploy/crds/crds.yaml")).expect("crds");
    let served: Vec<String> = documents(&crds)
        .iter()
        .map(|crd| crd["spec"]["names"]["plural"].as_str().expect("plural").to_owned())
        .collect();
    assert!(served.len() >= 5, "{served:?}");
    let view = grants("watcher-operator-view");
    for plural in &served {
        for verb in ["get", "list", "watch"] {
            assert!(view.contains(&(plural.clone(), verb.to_owned())), "view: {verb} {plural}");
        }
    }
    assert!(view.iter().all(|(_, verb)| matches!(verb.as_str(), "get" | "list" | "watch")), "{view:?}");

    let Some(off) = render("watcher-system", &["rbac.aggregateClusterRoles=false"]) else { return };
    let roles: Vec<&str> =
        off.iter().filter(|o| o["kind"] == "ClusterRole").filter_map(|o| o["metadata"]["name"].as_str()).collect();
    assert_eq!(roles, ["watcher-operator", "watcher-operator-metrics-reader"], "the operator's own roles only");
}

/// The chart renders the agent's image where users read it: the install notes, with the
/// default (the chart's appVersion) and with a registry of one's own.
#[test]
fn the_install_notes_name_the_agent_image() {
    let notes = |sets: &[&str]| {
        let mut args = vec!["install", "watcher-operator", "charts/watcher-operator", "--dry-run=client"];
        for set in sets {
            args.extend(["--set", set]);
        }
        run_tool("helm", &args)
    };
    let Some(default) = notes(&[]) else { return };
    let chart =
        std::fs::read_to_string(Path::new(ROOT).join("charts/watcher-operator/Chart.yaml")).expect("Chart.yaml");
    let version =
        chart.lines().find_map(|l| l.strip_prefix("appVersion:")).expect("appVersion").trim().trim_matches('"');
    assert!(default.contains(&format!("  image: watcher-agent:{version}\n")), "{default}");
    let Some(own) = notes(&["agent.image.repository=registry.example/watcher-agent,agent.image.tag=1.2.3"]) else {
        return;
    };
    assert!(own.contains("  image: registry.example/watcher-agent:1.2.3\n"), "{own}");
    assert!(
        refused(&["agent.image.repository="]).is_some_and(|e| e.contains("agent")),
        "an empty repository is refused"
    );
}

/// `podSecurity.configuration`: a ConfigMap in kube-apiserver's own shape, which the binary
/// reads as it reads `--pod-security-config` (the same parser), mounted and passed; wrong
/// levels are refused at `helm install` time.
#[test]
fn pod_security_configuration_is_rendered_for_the_binary() {
    let sets = [
        "podSecurity.configuration.defaults.enforce=baseline",
        "podSecurity.configuration.defaults.warn=restricted",
        "podSecurity.configuration.exemptions.namespaces={kube-system,monitoring}",
    ];
    let Some(chart) = render("watcher-system", &sets) else { return };
    let config_map = find(&chart, "ConfigMap", "watcher-operator-pod-security").expect("the ConfigMap");
    let text = config_map["data"]["pod-security.yaml"].as_str().expect("the file");
    let read = watcher_cli::pod_security_config::parse(text).expect("the binary reads it");
    assert_eq!(read.defaults.get("enforce").map(String::as_str), Some("baseline"));
    assert_eq!(read.exemptions.namespaces, ["kube-system", "monitoring"]);
    let pod = &get(&chart, "Deployment")["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().expect("args");
    assert!(args.iter().any(|a| a == "--pod-security-config=/etc/watcher-operator/pod-security/pod-security.yaml"));
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["configMap"]["name"] == "watcher-operator-pod-security")
    );
    let error = refused(&["podSecurity.configuration.defaults.enforce=strict"]).expect("refused");
    assert!(error.contains("enforce"), "{error}");
    // Unset: no ConfigMap, no flag (the defaults are learned).
    let Some(chart) = render("watcher-system", &[]) else { return };
    assert!(find(&chart, "ConfigMap", "watcher-operator-pod-security").is_none());
}
