//! Jobs pay nothing for their Watcher, on a real node: under `restartPolicy: OnFailure` the Job
//! controller counts every container restart of a running pod toward `backoffLimit`, so a
//! sidecar that ends by itself (a command under the supervisor, README's agent) must end with no
//! restart; and the supervisor comes through an ImagePolicy's mirror, the only registry a node
//! may reach.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{Ending, POD_START, require_node};
use crate::common::{
    Operator, Registration, TestNamespace, client, exclusive, http_get, install_crds, kubectl, kubectl_apply,
};

/// A busybox sidecar with a command that ignores SIGTERM (the supervisor ends it).
fn stubborn(native: &str) -> Value {
    json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "stubborn"},
        "spec": {"nativeSidecar": native, "selector": {"matchLabels": {"sidecar": "stubborn"}},
                 "container": {"name": "stubborn", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                               "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]}}})
}

/// A Job of one pod labelled `labels`, under `OnFailure`: its app writes three ERROR lines to
/// the log README's agent follows and succeeds; with `fail_once`, it fails its first run
/// (the kubelet restarts it; `backoffLimit` 2 allows the app's own restart, as without a
/// Watcher: the Job controller fails a Job whose restarts reach `backoffLimit`).
fn job(name: &str, labels: Value, fail_once: bool) -> Value {
    let script = "for i in 1 2 3; do echo \"ERROR line $i\" >> /var/log/app/app.log; done; \
                  if [ -n \"$FAIL_ONCE\" ] && [ ! -e /var/log/app/failed ]; then touch /var/log/app/failed; exit 1; fi; \
                  sleep 2";
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": if fail_once { 2 } else { 0 },
                 "template": {"metadata": {"labels": labels},
                   "spec": {"restartPolicy": "OnFailure",
                            "volumes": [{"name": "logs", "emptyDir": {}}],
                            "containers": [{"name": "app", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                                "command": ["sh", "-c", script],
                                "env": [{"name": "FAIL_ONCE", "value": if fail_once { "1" } else { "" }}],
                                "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}]}]}}}})
}

/// The status of container `name` of the only pod of Job `job` (a native sidecar's among the
/// init containers).
async fn status_of(pods: &Api<Pod>, job: &str, name: &str) -> ContainerStatus {
    let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.expect("list pods");
    assert_eq!(list.items.len(), 1, "Job {job}: one pod, never replaced");
    let status = list.items.into_iter().next().and_then(|p| p.status).expect("a status");
    let all =
        status.container_statuses.into_iter().flatten().chain(status.init_container_statuses.into_iter().flatten());
    all.into_iter().find(|s| s.name == name).unwrap_or_else(|| panic!("Job {job}: no container {name}"))
}

/// Under `OnFailure`, with `backoffLimit: 0` (the app succeeds) and with one failure of the app
/// (`backoffLimit: 2`), Jobs complete with a busybox Watcher with a command and with README's
/// agent: the sidecar ended by itself, exit 0, `restartCount` 0; the agent's last counts are in
/// its termination message, readable after the pod has ended. On a server without native
/// sidecars (1.24) as injected by default; on one with them both ways.
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the images watcher-agent:0.2.0 and watcher-supervise:0.2.0 on the node"]
async fn on_failure_jobs_complete_with_no_restart_of_their_sidecar() {
    let _one = exclusive().await;
    let client = client().await;
    let ending = Ending::start(&client, "watcher-e2e-onfailure").await;
    for (mode, ns) in &ending.namespaces {
        let n = ns.name.as_str();
        kubectl_apply(n, &stubborn(mode));
        kubectl(&[
            "wait",
            "-n",
            n,
            "--for=condition=Ready",
            "--timeout=60s",
            "watcher/app-watcher",
            "watcher/stubborn",
        ]);
        for (name, fail_once) in [("ok", false), ("retry", true)] {
            kubectl_apply(n, &job(&format!("busybox-{name}"), json!({"sidecar": "stubborn"}), fail_once));
            kubectl_apply(n, &job(&format!("agent-{name}"), json!({"app": "shop"}), fail_once));
        }
    }
    for (mode, ns) in &ending.namespaces {
        let n = ns.name.as_str();
        let pods = Api::<Pod>::namespaced(client.clone(), n);
        let wait = format!("--timeout={}s", POD_START.as_secs());
        for name in ["ok", "retry"] {
            for (job, sidecar) in [(format!("busybox-{name}"), "stubborn"), (format!("agent-{name}"), "app-watcher")] {
                kubectl(&["wait", "-n", n, "--for=condition=complete", &format!("job/{job}"), &wait]);
                let status = status_of(&pods, &job, sidecar).await;
                assert_eq!(status.restart_count, 0, "{mode}: Job {job}: {sidecar} ended with no restart");
                let ended = status.state.and_then(|s| s.terminated).expect("the sidecar has ended");
                assert_eq!(ended.exit_code, 0, "{mode}: Job {job}: {sidecar} exit 0");
                let app = status_of(&pods, &job, "app").await;
                assert_eq!(app.restart_count, i32::from(name == "retry"), "{mode}: Job {job}: the app's own restarts");
                if sidecar == "app-watcher" {
                    let message = ended.message.unwrap_or_default();
                    let matched = message.lines().find(|l| l.starts_with("watcher_agent_matches_total{rule=\"error\""));
                    let count: f64 = matched.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0);
                    let expected = if name == "retry" { 6.0 } else { 3.0 };
                    assert_eq!(count, expected, "{mode}: Job {job}: the agent's last counts: {message:?}");
                }
            }
        }
    }
    ending.stop().await;
}

/// A node that reaches only the mirror: the operator's `--supervisor-image` names a registry the
/// node cannot reach, an ImagePolicy rewrites it to the image the node has. The supervisor's
/// init container runs the mirrored image, the supervised sidecar ends by itself, and a sidecar
/// that runs another image's entrypoint is switched to the pod's own (mirrored) supervisor
/// image, not the flag's: the Job completes.
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the images watcher-supervise:0.2.0 and e2e-looper:0.1.0 on the node"]
async fn the_supervisor_comes_through_the_mirror() {
    const UNREACHABLE: &str = "registry.invalid/library/watcher-supervise:0.2.0";
    const MIRRORED: &str = "docker.io/library/watcher-supervise:0.2.0";
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-end-mirror").await;
    let n = ns.name.as_str();
    let mark = format!("{}", std::process::id());
    kubectl(&["label", "namespace", n, &format!("watcher-e2e-end-mirror={mark}")]);
    let flag = format!("--supervisor-image={UNREACHABLE}");
    let operator = Operator::start_with(&operator_ns.name, None, Registration::Url, &[&flag]).await;
    let policy = format!("e2e-end-mirror-{mark}");
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": policy},
            "spec": {"rewrites": [{"from": "registry.invalid/", "to": "docker.io/"}],
                     "namespaceSelector": {"matchLabels": {"watcher-e2e-end-mirror": mark}}}}),
    );
    kubectl(&["wait", "--for=condition=Ready", "--timeout=60s", &format!("imagepolicy/{policy}")]);
    kubectl_apply(n, &stubborn("Never"));
    let looper = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "looper"},
        "spec": {"nativeSidecar": "Never", "selector": {"matchLabels": {"sidecar": "stubborn"}},
                 "container": {"name": "looper", "image": "e2e-looper:0.1.0", "imagePullPolicy": "IfNotPresent"}}});
    kubectl_apply(n, &looper);
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "--timeout=60s", "watcher/stubborn", "watcher/looper"]);
    // `Never`: the looper's switch is a restart, which `OnFailure` would count.
    let mut never = job("mirrored", json!({"sidecar": "stubborn"}), false);
    never["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    kubectl_apply(n, &never);
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=complete", "job/mirrored", &wait]);

    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let list = pods.list(&ListParams::default().labels("job-name=mirrored")).await.expect("list pods");
    let spec = list.items.first().and_then(|p| p.spec.clone()).expect("the Job's pod");
    let image_of = |name: &str| {
        let all = spec.containers.iter().chain(spec.init_containers.iter().flatten());
        all.into_iter().find(|c| c.name == name).and_then(|c| c.image.clone()).unwrap_or_default()
    };
    assert_eq!(image_of("watcher-supervise"), MIRRORED, "the supervisor's init container went through the mirror");
    assert_eq!(image_of("looper"), MIRRORED, "switched to the pod's own supervisor image, not the flag's");
    assert_eq!(
        status_of(&pods, "mirrored", "watcher-supervise").await.state.and_then(|s| s.terminated).map(|t| t.exit_code),
        Some(0)
    );
    assert_eq!(status_of(&pods, "mirrored", "stubborn").await.restart_count, 0, "ended by itself");
    let looper = status_of(&pods, "mirrored", "looper").await;
    assert_eq!(looper.restart_count, 1, "switched: started again in the supervisor's image");
    operator.stop().await;
    kubectl(&["delete", "imagepolicy", &policy, "--wait=false"]);
    ns.delete().await;
    operator_ns.delete().await;
}

/// Debian's `prometheus` on the host as a remote write receiver only (nothing scraped), on a
/// port of all the host's addresses: pods reach it at the bridge's gateway. Stopped when dropped.
struct Receiver {
    child: std::process::Child,
    port: u16,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a pod on the node reaches the host (node-up's bridge: `cni0`, gateway 10.88.0.1).
const HOST_FROM_PODS: &str = "10.88.0.1";

impl Receiver {
    /// Started and ready; `None` where Prometheus is not installed and the tools are not required.
    async fn start(dir: &std::path::Path) -> Option<Self> {
        if std::process::Command::new("prometheus").arg("--version").output().is_err() {
            assert!(std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none(), "prometheus is not installed");
            eprintln!("prometheus is not installed: not tested");
            return None;
        }
        std::fs::create_dir_all(dir).expect("a directory");
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, "global: {scrape_interval: 15s}\n").expect("the configuration");
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("0.0.0.0:0").and_then(|l| l.local_addr()).expect("a port").port();
            let child = std::process::Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                .arg(format!("--web.listen-address=0.0.0.0:{port}"))
                .args(["--enable-feature=native-histograms,exemplar-storage", "--web.enable-remote-write-receiver"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("prometheus starts");
            let mut receiver = Self { child, port };
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(30) {
                if http_get(&format!("http://127.0.0.1:{port}/-/ready")).await.is_some_and(|(s, _)| s == 200) {
                    return Some(receiver);
                }
                if receiver.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        panic!("Prometheus did not start")
    }

    /// The value of the instant query `expr` (its one series).
    async fn query(&self, expr: &str) -> Option<f64> {
        let query: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let (status, body) = http_get(&format!("http://127.0.0.1:{}/api/v1/query?query={query}", self.port)).await?;
        let (start, end) = (body.find('{')?, body.rfind('}')?);
        let answer: Value = serde_json::from_str(&body[start..=end]).ok().filter(|_| status == 200)?;
        let result = answer["data"]["result"].as_array()?;
        (result.len() == 1).then(|| result[0]["value"][1].as_str()?.parse().ok()).flatten()
    }
}

/// README's Job (deploy/samples/job.yaml as written) with README's agent pushing by remote write
/// to a Prometheus that scrapes nothing: the Job completes, and the agent's last counts are in
/// Prometheus, with the pod's `namespace` and `pod`: the three ERROR lines the app wrote before
/// it ended, pushed when the agent ended with it.
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the images watcher-agent:0.2.0 and watcher-supervise:0.2.0 on the node"]
async fn a_jobs_last_counts_reach_prometheus_by_remote_write() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    let dir = std::env::temp_dir().join(format!("watcher-e2e-{}-remote-write", std::process::id()));
    let Some(prometheus) = Receiver::start(&dir).await else { return };
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-push").await;
    let operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();
    let url = format!("    AGENT_REMOTE_WRITE_URL: http://{HOST_FROM_PODS}:{}/api/v1/write\n", prometheus.port);
    kubectl(&["apply", "-n", n, "-f", &format!("{}/agent-rbac.yaml", super::SAMPLES)]);
    kubectl(&["apply", "-n", n, "-f", &super::config::watcher_with(&url, "remote-write")]);
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "watcher/app-watcher", "--timeout=60s"]);
    kubectl(&["apply", "-n", n, "-f", &format!("{}/job.yaml", super::SAMPLES)]);
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=complete", "job/shop-report", &wait]);
    let pod =
        kubectl(&["get", "pods", "-n", n, "-l", "job-name=shop-report", "-o", "jsonpath={.items[0].metadata.name}"]);
    let series = format!(r#"watcher_agent_matches_total{{rule="error",namespace="{n}",pod="{}"}}"#, pod.trim());
    let errors = crate::common::wait_for(std::time::Duration::from_secs(30), || async {
        prometheus.query(&series).await.filter(|v| *v == 3.0)
    })
    .await;
    assert_eq!(errors, 3.0, "the Job's last counts, pushed");
    operator.stop().await;
    ns.delete().await;
    operator_ns.delete().await;
    drop(prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}
