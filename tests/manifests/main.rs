//! The install manifests as kube-apiserver gets them: `kubectl kustomize deploy/`.
//!
//! These tests run the real tools. Without `kubectl` on the `PATH` they are skipped with a
//! message, unless `WATCHER_REQUIRE_TOOLS=1` (set by `.ci/run`), which makes a missing tool a
//! failure.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod monitoring;
mod policies;
mod rbac;
mod security;

use rbac::cluster_role_grants;

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
