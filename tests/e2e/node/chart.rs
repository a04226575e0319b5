//! The chart as users install it, on a real node: the operator as the chart's Deployment (two
//! replicas, its probes, the webhook reached through its Service, routed by
//! `../shared/k8s/service-proxy`), README's use case, the Lease holder's pod deleted, a `helm
//! upgrade`, Debian's Prometheus scraping `/metrics` in the cluster with the metrics-reader
//! token (and refused without it), `helm uninstall`. Needs the images `watcher-operator:0.2.0`
//! and `e2e-prometheus:0.1.0` on the node (`.ci/e2e` makes them) and Services routed.

use std::collections::BTreeSet;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::{POD_START, SAMPLES, readme_use_case, readme_use_case_with, require_node};
use crate::common::{
    STEP, TestNamespace, client, delete_cluster_wide_objects, exclusive, kubectl, kubectl_apply, kubectl_create,
    metrics_get, wait_for, wait_until,
};
use crate::helm::{CHART, Release, helm, helm_install_from};

mod upgrade;

/// A pod that asks for `watcher`, created as a dry run (nothing stored): whether kube-apiserver
/// reached the webhook through the Service and applied its patch.
async fn injected_on_a_dry_run(client: &kube::Client, namespace: &str, watcher: &str) -> bool {
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "probe-", "annotations": {"watcher.dev/inject": watcher}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}))
    .expect("pod");
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let created = Api::<Pod>::namespaced(client.clone(), namespace).create(&dry_run, &pod).await.expect("created");
    created.annotations().get("watcher.dev/injected").is_some_and(|v| v.starts_with(watcher))
}

/// The IPs of the operator's ready pods (not terminating).
async fn operator_ips(client: &kube::Client, release: &str) -> Vec<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), release);
    let listed = pods.list(&ListParams::default().labels("app.kubernetes.io/name=watcher-operator")).await;
    let ready = |pod: &Pod| {
        let conditions = pod.status.iter().flat_map(|s| s.conditions.iter().flatten());
        pod.metadata.deletion_timestamp.is_none()
            && conditions.into_iter().any(|c| c.type_ == "Ready" && c.status == "True")
    };
    let items = listed.map(|l| l.items).unwrap_or_default();
    items.iter().filter(|p| ready(p)).filter_map(|p| p.status.as_ref()?.pod_ip.clone()).collect()
}

fn rollout(release: &str) {
    kubectl(&["rollout", "status", "deployment/watcher-operator", "-n", release, "--timeout=180s"]);
}

/// The metric names a Prometheus text exposition holds.
fn names_in(text: &str) -> BTreeSet<String> {
    let name = |line: &str| line.split(['{', ' ']).next().map(str::to_owned);
    text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).filter_map(name).collect()
}

/// Prometheus' API at `ip`: the JSON of `path` (curl: its answers come chunked).
async fn prometheus(ip: &str, path: &str) -> Option<Value> {
    let output = std::process::Command::new("curl").args(["-sf", &format!("http://{ip}:9090{path}")]).output().ok()?;
    serde_json::from_slice(&output.stdout).ok()
}

/// The operator's pods run the release's image, pulled from its registry by the kubelet.
fn pulled_from_the_release(release_namespace: &str, release: &Release) {
    let expected = format!("{}/watcher-operator:{}", release.registry, release.version);
    let images = kubectl(&[
        "get",
        "pods",
        "-n",
        release_namespace,
        "-l",
        "app.kubernetes.io/name=watcher-operator",
        "-o",
        "jsonpath={range .items[*]}{.status.containerStatuses[0].image} {.status.containerStatuses[0].imageID}{\"\\n\"}{end}",
    ]);
    for line in images.lines() {
        let (image, id) = line.split_once(' ').unwrap_or((line, ""));
        assert_eq!(image, expected, "{images}");
        assert!(
            id.starts_with(&format!("{}/watcher-operator@sha256:", release.registry)),
            "pulled by digest: {images}"
        );
    }
}

/// A Watcher whose image names a tag the registry does not hold: its pod waits on the pull, and
/// the Watcher says so (`cannotStart`, `SidecarsRunning` False with the kubelet's reason), as on
/// any cluster.
async fn a_tag_not_released_is_said_by_the_watcher(n: &str, release: &Release) {
    let image = format!("{}/watcher-agent:0.0.0-not-released", release.registry);
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "wrong-tag"},
                "spec": {"selector": {"matchLabels": {"app": "wrong-tag"}}, "container": {"name": "wrong-tag", "image": image}}}),
    );
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "watcher/wrong-tag", "--timeout=60s"]);
    kubectl_apply(
        n,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wrong-tag", "labels": {"app": "wrong-tag"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "app", "image": "busybox:1.36",
                  "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", "sleep 3600"]}]}}),
    );
    let said = wait_for(POD_START, || async {
        let status = kubectl(&["get", "watcher", "wrong-tag", "-n", n, "-o", "json"]);
        let status: Value = serde_json::from_str(&status).ok()?;
        let running =
            status["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "SidecarsRunning")?.clone();
        (status["status"]["pods"]["cannotStart"] == 1 && running["status"] == "False").then_some(running)
    })
    .await;
    let reason = said["reason"].as_str().unwrap_or_default();
    assert!(["ErrImagePull", "ImagePullBackOff"].contains(&reason), "{said}");
    assert!(said["message"].as_str().is_some_and(|m| m.contains("pod wrong-tag")), "{said}");
}

/// README's app-watcher with the agent image the chart's notes name (the release's).
fn watcher_with_the_notes_agent(release_namespace: &str, release: &Release) -> String {
    let notes = helm(&["get", "notes", "watcher-operator", "-n", release_namespace]);
    let agent = notes.lines().find_map(|l| l.trim().strip_prefix("image: ")).expect("the notes name the agent image");
    assert_eq!(agent, format!("{}/watcher-agent:{}", release.registry, release.version), "{notes}");
    let sample = std::fs::read_to_string(format!("{SAMPLES}/app-watcher.yaml")).expect("sample");
    let local = format!("image: watcher-agent:{}", env!("CARGO_PKG_VERSION"));
    assert!(sample.contains(&local), "the sample names {local}");
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-released-app-watcher.yaml", std::process::id()));
    std::fs::write(&path, sample.replace(&local, &format!("image: {agent}"))).expect("written");
    path.display().to_string()
}

#[tokio::test]
#[ignore = "needs a cluster with a node, Services routed, and the images watcher-operator:0.2.0 and e2e-prometheus:0.1.0"]
async fn the_chart_runs_in_the_cluster_and_prometheus_scrapes_it_with_a_token() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    delete_cluster_wide_objects();
    let release_ns = TestNamespace::create(&client, "watcher-e2e-chart").await;
    let r = release_ns.name.as_str();
    for account in ["prometheus", "nobody"] {
        kubectl(&["create", "serviceaccount", account, "-n", r]);
    }
    let readers = [format!("metrics.readers[0].namespace={r}"), "metrics.readers[0].name=prometheus".to_owned()];
    let mut install = vec!["--set".to_owned(), readers[0].clone(), "--set".to_owned(), readers[1].clone()];
    // A release in a registry (CI's): installed from it as users do, every image pulled by the
    // kubelet. Else the tree's chart, its images on the node already.
    let release = Release::from_env();
    let chart = release.as_ref().map_or_else(|| CHART.to_owned(), Release::chart);
    match &release {
        Some(release) => install.extend(release.install_args()),
        None => install.extend(["--set".to_owned(), "image.pullPolicy=Never".to_owned()]),
    }
    let args: Vec<&str> = install.iter().map(String::as_str).collect();
    helm_install_from(&client, r, &chart, &args).await;
    rollout(r);
    if let Some(release) = &release {
        pulled_from_the_release(r, release);
    }
    let ready = kubectl(&["get", "deployment", "watcher-operator", "-n", r, "-o", "jsonpath={.status.readyReplicas}"]);
    assert_eq!(ready, "2", "two replicas ready");
    let service = kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "watcher-operator",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.service.name}/{.webhooks[0].clientConfig.service.namespace}",
    ]);
    assert_eq!(service, format!("watcher-operator/{r}"), "registered by its Service");

    // README's use case, through the Service.
    let ns = TestNamespace::create(&client, "watcher-e2e-chart-app").await;
    let n = ns.name.as_str();
    match &release {
        Some(release) => readme_use_case_with(n, &watcher_with_the_notes_agent(r, release)),
        None => readme_use_case(n),
    }
    if let Some(release) = &release {
        // README's Job: its pod gets the release's supervisor, pulled by the kubelet, and ends.
        kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/job.yaml")]);
        kubectl(&["wait", "-n", n, "--for=condition=complete", "job/shop-report", "--timeout=120s"]);
        a_tag_not_released_is_said_by_the_watcher(n, release).await;
    }

    // The Lease holder's pod deleted: pods are still injected meanwhile, and another replica
    // takes the Lease and reconciles.
    let leases = Api::<Lease>::namespaced(client.clone(), r);
    let holder = |lease: Lease| lease.spec.and_then(|s| s.holder_identity);
    let leader =
        wait_for(STEP, || async { leases.get_opt("watcher-operator").await.ok().flatten().and_then(holder) }).await;
    kubectl(&["delete", "pod", &leader, "-n", r, "--wait=false"]);
    for _ in 0..5 {
        assert!(injected_on_a_dry_run(&client, n, "app-watcher").await, "a pod made while the leader goes is injected");
    }
    let new_leader = wait_for(STEP, || async {
        let now = leases.get_opt("watcher-operator").await.ok().flatten().and_then(holder)?;
        (now != leader).then_some(now)
    })
    .await;
    assert_ne!(new_leader, leader);
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "after-leader"},
                "spec": {"container": {"name": "after", "image": "busybox:1.36"}, "configData": {"A": "b"}}}),
    );
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), n);
    wait_until(STEP, || async { config_maps.get_opt("after-leader-config").await.ok().flatten().is_some() }).await;
    rollout(r);

    // `helm upgrade` rolls the replicas one at a time: every pod made meanwhile is injected.
    let mut upgrade =
        vec!["upgrade", "watcher-operator", chart.as_str(), "-n", r, "--reuse-values", "--set", "logFormat=text"];
    let release_args = release.as_ref().map(Release::install_args).unwrap_or_default();
    upgrade.extend(release_args.iter().map(String::as_str));
    helm(&upgrade);
    let mut rolling = std::process::Command::new("kubectl")
        .args(["rollout", "status", "deployment/watcher-operator", "-n", r, "--timeout=180s"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("kubectl rollout status");
    let (mut made, started) = (0, Instant::now());
    while rolling.try_wait().expect("rollout status").is_none() {
        assert!(injected_on_a_dry_run(&client, n, "app-watcher").await, "pod {made} during the upgrade was injected");
        made += 1;
        assert!(started.elapsed() < std::time::Duration::from_secs(200), "the upgrade did not finish");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(rolling.wait().expect("rollout status").success(), "the upgrade rolled out");
    assert!(made >= 2, "{made} pods made during the upgrade");
    assert!(injected_on_a_dry_run(&client, n, "app-watcher").await);

    // Prometheus in the cluster, scraping each replica as the ServiceMonitor does (HTTPS
    // verified with the operator's CA, its own ServiceAccount token), and two jobs that must be
    // refused: no token, and a token without the metrics-reader role.
    let ips = wait_for(STEP, || async { Some(operator_ips(&client, r).await).filter(|ips| ips.len() == 2) }).await;
    let targets: Vec<String> = ips.iter().map(|ip| format!("{ip}:8080")).collect();
    let nobody = kubectl(&["create", "token", "nobody", "-n", r]).trim().to_owned();
    let tls =
        json!({"ca_file": "/etc/watcher-operator-tls/ca.crt", "server_name": format!("watcher-operator.{r}.svc")});
    let config = json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "watcher-operator", "scheme": "https", "honor_labels": true, "tls_config": tls,
             "authorization": {"credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
             "static_configs": [{"targets": targets}]},
            {"job_name": "no-token", "scheme": "https", "tls_config": tls, "static_configs": [{"targets": [targets[0]]}]},
            {"job_name": "not-allowed", "scheme": "https", "tls_config": tls,
             "authorization": {"credentials": nobody}, "static_configs": [{"targets": [targets[0]]}]},
        ],
    });
    kubectl_apply(
        r,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prometheus"},
                "data": {"prometheus.yml": config.to_string()}}),
    );
    let (created, said) = kubectl_create(
        r,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prometheus"},
            "spec": {"serviceAccountName": "prometheus", "securityContext": {"runAsNonRoot": true, "runAsUser": 65534},
                "containers": [{"name": "prometheus", "image": "e2e-prometheus:0.1.0", "imagePullPolicy": "Never",
                    "args": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                             "--web.listen-address=:9090"],
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus"},
                                     {"name": "ca", "mountPath": "/etc/watcher-operator-tls"},
                                     {"name": "data", "mountPath": "/prometheus"}]}],
                "volumes": [{"name": "config", "configMap": {"name": "prometheus"}},
                            {"name": "ca", "secret": {"secretName": "watcher-operator-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"name": "data", "emptyDir": {}}]}}),
    );
    assert!(created, "{said}");
    kubectl(&[
        "wait",
        "-n",
        r,
        "--for=condition=Ready",
        "pod/prometheus",
        &format!("--timeout={}s", POD_START.as_secs()),
    ]);
    let prometheus_ip = kubectl(&["get", "pod", "prometheus", "-n", r, "-o", "jsonpath={.status.podIP}"]);
    let health = wait_for(STEP, || async {
        let targets = prometheus(&prometheus_ip, "/api/v1/targets").await?;
        let mut health: Vec<(String, String, String)> = targets["data"]["activeTargets"]
            .as_array()?
            .iter()
            .map(|t| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (text(&t["labels"]["job"]), text(&t["health"]), text(&t["lastError"]))
            })
            .collect();
        health.sort();
        (health.len() == 4 && health.iter().all(|(_, h, _)| h != "unknown")).then_some(health)
    })
    .await;
    assert_eq!(
        health,
        [
            ("no-token".to_owned(), "down".to_owned(), "server returned HTTP status 401 Unauthorized".to_owned()),
            ("not-allowed".to_owned(), "down".to_owned(), "server returned HTTP status 403 Forbidden".to_owned()),
            ("watcher-operator".to_owned(), "up".to_owned(), String::new()),
            ("watcher-operator".to_owned(), "up".to_owned(), String::new()),
        ]
    );
    // Every series the operator exports reached Prometheus.
    let reader = kubectl(&["create", "token", "prometheus", "-n", r]).trim().to_owned();
    let address: std::net::SocketAddr = format!("{}:8080", ips[0]).parse().expect("address");
    let (status, text) = metrics_get(address, Some(&reader)).expect("answers");
    assert_eq!(status, 200, "{text}");
    let exported = names_in(&text);
    assert!(exported.len() >= 10 && exported.contains("watcher_leader"), "{exported:?}");
    let query = "/api/v1/query?query=count%20by%20(__name__)(%7Bjob%3D%22watcher-operator%22%7D)";
    let started = Instant::now();
    loop {
        let result = prometheus(&prometheus_ip, query).await.unwrap_or_default();
        let names: BTreeSet<String> = result["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["metric"]["__name__"].as_str().map(str::to_owned))
            .collect();
        let missing: Vec<&String> = exported.difference(&names).collect();
        if missing.is_empty() {
            break;
        }
        assert!(started.elapsed() < STEP, "exported but not in Prometheus: {missing:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    // Uninstalled: no webhook configuration is left, and pods are created as before.
    helm(&["uninstall", "watcher-operator", "-n", r, "--wait"]);
    assert!(crate::common::try_kubectl(&["get", "mutatingwebhookconfiguration", "watcher-operator"]).is_err());
    let (created, said) = kubectl_create(
        n,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after", "annotations": {"watcher.dev/inject": "app-watcher"}},
                "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}),
    );
    assert!(created, "a pod is created once the chart is gone: {said}");

    ns.delete().await;
    release_ns.delete().await;
    delete_cluster_wide_objects();
}
