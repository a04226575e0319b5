//! Harness of the e2e tests: a real cluster from `KUBECONFIG`, the CRDs installed, a fresh
//! namespace per test and the operator binary running outside the cluster.

#![allow(dead_code, unreachable_pub)] // each test file uses a different part of the harness

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::discovery;
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Client, ResourceExt};

/// How long an e2e step may take before the test fails.
pub const STEP: Duration = Duration::from_secs(60);

/// A client of the cluster that `KUBECONFIG` names.
pub async fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_default().await.expect("a cluster: set KUBECONFIG")
}

/// The annotation [`install_crds`] marks each CRD it applied with: a digest of what it applied
/// and the generation the server gave it, `<digest>@<generation>`.
const APPLIED_DIGEST: &str = "e2e.watcher-operator/applied";

/// Applies the operator's CRDs and waits until the API server serves them. A CRD already
/// established as this build applied it is left as it is: each test calls this, and
/// kube-apiserver compiles every CEL rule of a CRD it is sent, changed or not. As this build
/// applied it: the [`APPLIED_DIGEST`] of this build's CRD at the generation the CRD has now, so
/// that a test that changes a CRD (an older release's) has it applied again.
pub async fn install_crds(client: &Client) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply("watcher-operator-e2e").force();
    for crd in watcher_api::crds() {
        let name = crd.name_any();
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            serde_json::to_string(&crd).expect("CRD as JSON").hash(&mut hasher);
            format!("{:016x}", hasher.finish())
        };
        let applied_at = |crd: &CustomResourceDefinition| format!("{digest}@{}", crd.metadata.generation.unwrap_or(0));
        let stored = api.get_opt(&name).await.expect("read the CRD");
        if stored.is_some_and(|s| {
            s.annotations().get(APPLIED_DIGEST) == Some(&applied_at(&s))
                && conditions::is_crd_established().matches_object(Some(&s))
        }) {
            continue;
        }
        let applied = api.patch(&name, &params, &Patch::Apply(&crd)).await.expect("CRD applied");
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(STEP, established).await.expect("CRD established in time").expect("watch");
        // Metadata only: the generation stays.
        let mark = serde_json::json!({"metadata": {"annotations": {APPLIED_DIGEST: applied_at(&applied)}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&mark)).await.expect("CRD marked");
    }
}

/// Waits, as a user would with `kubectl wait`, until the API server serves the CRDs an install
/// (`deploy/` or the chart) just created.
pub fn wait_for_crds_established() {
    let crds: Vec<String> = watcher_api::crds().iter().map(|crd| format!("crd/{}", crd.name_any())).collect();
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(crds.iter().map(String::as_str));
    kubectl(&args);
}

/// A namespace made for one test, deleted (with all it holds) when the test ends, passed or
/// failed: the next test, and the next run on the same cluster, find none of it.
pub struct TestNamespace {
    pub name: String,
    client: Client,
    deleted: bool,
}

impl TestNamespace {
    /// `<prefix>-<pid>`, or `<prefix>-<pid>-<n>` for the n-th namespace of the same prefix in
    /// this process: tests run one after another in one process (the node's) never wait for
    /// the namespace controller to finish deleting the one before.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        static MADE: std::sync::Mutex<BTreeMap<String, u32>> = std::sync::Mutex::new(BTreeMap::new());
        let earlier = {
            let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = made.entry(prefix.to_owned()).or_default();
            *count += 1;
            *count - 1
        };
        let pid = std::process::id() % 100_000;
        let name = match earlier {
            0 => format!("{prefix}-{pid}"),
            n => format!("{prefix}-{pid}-{}", n + 1),
        };
        let api = Api::<Namespace>::all(client.clone());
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
        // A leftover of an earlier run with the same pid is removed first.
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_until(STEP, || async { api.get_opt(&name).await.ok().flatten().is_none() }).await;
        api.create(&PostParams::default(), &namespace).await.expect("namespace created");
        Self { name, client: client.clone(), deleted: false }
    }

    /// Deletes the namespace, its pods first with a grace period of a second: a test's pods
    /// that run on a node (an app that ignores SIGTERM) are not left to their 30 s meanwhile,
    /// taking the machine from the next test and holding up `node-down`.
    pub async fn delete(mut self) {
        let quickly = DeleteParams { grace_period_seconds: Some(1), ..DeleteParams::background() };
        let _ = Api::<Pod>::namespaced(self.client.clone(), &self.name)
            .delete_collection(&quickly, &ListParams::default())
            .await;
        let _ = Api::<Namespace>::all(self.client.clone()).delete(&self.name, &DeleteParams::background()).await;
        self.deleted = true;
    }
}

/// A test that fails (or forgets) still removes its namespace; `kubectl`, as the tests' async
/// client cannot be used from a drop.
impl Drop for TestNamespace {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = try_kubectl(&["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"]);
        }
    }
}

/// Deletes the cluster-wide objects of `deploy/` and the chart (their names are fixed), the
/// CRDs excepted: every test shares them.
pub fn delete_cluster_wide_objects() {
    kubectl(&[
        "delete",
        "clusterrole/watcher-operator",
        "clusterrole/watcher-operator-edit",
        "clusterrole/watcher-operator-view",
        "clusterrole/watcher-operator-metrics-reader",
        "clusterrolebinding/watcher-operator",
        "clusterrolebinding/watcher-operator-metrics-reader",
        "mutatingwebhookconfiguration/watcher-operator",
        "--ignore-not-found",
    ]);
    // The policies (1.30+; an older server has no such kind, which is fine).
    let policies = ["pods", "workloads", "owned", "webhooks"];
    let mut names: Vec<String> =
        policies.iter().map(|p| format!("validatingadmissionpolicy/watcher-operator-{p}")).collect();
    names.extend(policies.iter().map(|p| format!("validatingadmissionpolicybinding/watcher-operator-{p}")));
    let mut args = vec!["delete", "--ignore-not-found"];
    args.extend(names.iter().map(String::as_str));
    let _ = try_kubectl(&args);
}

/// Whether the server serves ValidatingAdmissionPolicy (v1: Kubernetes 1.30 and later).
pub async fn serves_policies(client: &Client) -> bool {
    client
        .list_api_group_resources("admissionregistration.k8s.io/v1")
        .await
        .is_ok_and(|list| list.resources.iter().any(|r| r.name == "validatingadmissionpolicies"))
}

/// Who the operator of a test runs as: ServiceAccount `watcher-operator` of `namespace`, with
/// the RBAC the chart grants it there (Secrets synced too, for the sync tests) and, where
/// kube-apiserver serves ValidatingAdmissionPolicy, the chart's policies for it. Every test's
/// operator is held as an installed one is. Returns its kubeconfig.
pub async fn operator_identity(client: &Client, namespace: &str) -> PathBuf {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/watcher-operator");
    let mut args = vec!["template", "watcher-operator", chart, "-n", namespace, "--set", "sync.secrets=true"];
    args.extend(["--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"]);
    if serves_policies(client).await {
        args.extend(["--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]);
        args.extend(["--show-only", "templates/policies.yaml"]);
    }
    let rendered = Command::new("helm").args(&args).output().expect("helm on the PATH");
    assert!(rendered.status.success(), "helm template: {}", String::from_utf8_lossy(&rendered.stderr));
    let objects: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&rendered.stdout)).expect("the chart renders YAML");
    apply_objects(client, namespace, &objects).await;
    service_account_kubeconfig(client, namespace, "watcher-operator").await
}

/// Applies `objects` (server-side, as the tests' field manager), the namespaced ones in
/// `namespace`: what the harness sets up for a test, as `kubectl apply` would, without a
/// `kubectl` process each.
pub async fn apply_objects(client: &Client, namespace: &str, objects: &[serde_json::Value]) {
    let params = PatchParams::apply("watcher-operator-e2e").force();
    for object in objects.iter().filter(|o| !o.is_null()) {
        let object: DynamicObject = serde_json::from_value(object.clone()).expect("a Kubernetes object");
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("apiVersion");
        let (resource, capabilities) = discovery::pinned_kind(client, &gvk).await.expect("the kind is served");
        let api: Api<DynamicObject> = match capabilities.scope {
            discovery::Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
            discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(&object.name_any(), &params, &Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("{} {} applied: {e}", types.kind, object.name_any()));
    }
}

/// Tests of one binary run one at a time: each starts an operator, and operators share the
/// cluster-wide webhook configuration and reconcile every namespace.
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE_AT_A_TIME.lock().await
}

/// The operator binary, stopped (SIGKILL) when dropped; [`Operator::stop`] stops it as the
/// kubelet does.
pub struct Operator {
    child: Child,
    /// `/metrics`, over HTTPS behind authentication ([`Operator::metrics_text`] reads it).
    pub metrics: SocketAddr,
    /// `/healthz` and `/readyz`, plain HTTP.
    pub health: SocketAddr,
    pub webhook: SocketAddr,
    /// The URL the webhook is registered at, when it is registered by URL.
    pub url: Option<String>,
}

/// A free port on 127.0.0.1.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

/// The address kube-apiserver reaches this machine at: `WATCHER_E2E_HOST`, default `127.0.0.1`
/// (a control plane on this machine). For kind, the Docker network's gateway; for k3d,
/// `host.k3d.internal`; for minikube, `host.minikube.internal`.
pub fn webhook_host() -> String {
    std::env::var("WATCHER_E2E_HOST").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "127.0.0.1".into())
}

/// How the webhook is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// `--webhook-url https://<webhook_host()>:<port>/mutate`: the operator outside the cluster.
    Url,
    /// No `--webhook-url`: by the Service, as the installed operator does.
    Service,
}

impl Operator {
    /// `watcher-operator run` as a user runs it outside the cluster: every default (all
    /// controllers, leader election), plus only `--namespace`, the addresses and
    /// `--webhook-url`, as the chart's ServiceAccount of `namespace` ([`operator_identity`]).
    /// Waits until `/readyz` answers 200.
    pub async fn start(namespace: &str) -> Self {
        Self::start_as(namespace, None, Registration::Url).await
    }

    /// [`Operator::start`] with another kubeconfig (`None`: [`operator_identity`]) and
    /// registration.
    pub async fn start_as(namespace: &str, kubeconfig: Option<&Path>, registration: Registration) -> Self {
        Self::start_with(namespace, kubeconfig, registration, &[]).await
    }

    /// [`Operator::start_as`] with `flags` added (`--supervisor-image=...`).
    pub async fn start_with(
        namespace: &str,
        kubeconfig: Option<&Path>,
        registration: Registration,
        flags: &[&str],
    ) -> Self {
        let identity = match kubeconfig {
            Some(kubeconfig) => kubeconfig.to_owned(),
            None => operator_identity(&client().await, namespace).await,
        };
        // A free port may be taken by another process (the other version's suite) before the
        // operator binds it: the operator then exits at once, and starts again on other ports.
        for _ in 0..3 {
            let (metrics, health, webhook) = (free_port(), free_port(), free_port());
            let mut command = Command::new(env!("CARGO_BIN_EXE_watcher-operator"));
            command
                .arg("run")
                .arg(format!("--namespace={namespace}"))
                .arg(format!("--metrics-addr={metrics}"))
                .arg(format!("--health-addr={health}"))
                .arg(format!("--webhook-addr=0.0.0.0:{}", webhook.port()))
                .args(flags);
            let url = (registration == Registration::Url)
                .then(|| format!("https://{}:{}/mutate", webhook_host(), webhook.port()));
            if let Some(url) = &url {
                command.arg(format!("--webhook-url={url}"));
            }
            let child = command
                .env("KUBECONFIG", &identity)
                .env("RUST_LOG", "info,watcher_controller=debug")
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("operator starts");
            let mut operator = Self { child, metrics, health, webhook, url };
            let ready = format!("http://{health}/readyz");
            let start = Instant::now();
            loop {
                if http_get(&ready).await.is_some_and(|(status, _)| status == 200) {
                    return operator;
                }
                if matches!(operator.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                assert!(start.elapsed() < STEP, "the operator was not ready within {STEP:?}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            eprintln!("the operator exited before it was ready: starting it again on other ports");
        }
        panic!("the operator exited before it was ready, three times");
    }

    /// The body of `GET /metrics`, over HTTPS with the test's own bearer token (kubeconfig's
    /// user, which kube-apiserver authenticates and RBAC allows).
    pub async fn metrics_text(&self) -> String {
        let (status, body) = metrics_get(self.metrics, Some(&kubeconfig_token())).unwrap_or_default();
        assert_eq!(status, 200, "GET /metrics with the kubeconfig's token: {body}");
        body
    }

    /// SIGTERM, as the kubelet stops a pod: in-flight work finishes, the Lease is released and
    /// a run by URL restores the registration it replaced.
    pub async fn stop(mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let start = Instant::now();
        while start.elapsed() < STEP {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the operator did not stop within {STEP:?} of SIGTERM");
    }

    /// SIGKILL: the operator dies as in a crash, restoring nothing.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An operator still running when its test ends (or fails) is stopped as [`Operator::stop`]
/// does, so it puts back the registration it replaced: the next test, in whatever order cargo
/// runs them, finds the cluster as this one found it. SIGKILL only if it does not stop in time.
impl Drop for Operator {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let start = Instant::now();
        while start.elapsed() < STEP {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API server's minor version (1.x).
pub async fn minor(client: &Client) -> u32 {
    let version = client.apiserver_version().await.expect("version");
    version.minor.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or(0)
}

/// Whether the API server runs CEL validation rules (Kubernetes 1.25 or later): before, an
/// object a rule would refuse is stored, and the operator reports it instead.
pub async fn runs_cel(client: &Client) -> bool {
    minor(client).await >= 25
}

/// Runs `kubectl` (with the test's `KUBECONFIG`) and returns its stdout, or its stderr as the
/// error.
pub fn try_kubectl(args: &[&str]) -> Result<String, String> {
    let output = Command::new("kubectl").args(args).output().map_err(|e| format!("cannot run kubectl: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// [`try_kubectl`], failing the test when kubectl fails.
pub fn kubectl(args: &[&str]) -> String {
    try_kubectl(args).unwrap_or_else(|stderr| panic!("kubectl {} failed: {stderr}", args.join(" ")))
}

/// `kubectl apply` of a manifest given as JSON.
/// `kubectl create` of `manifest` in `namespace`: whether it was created, and everything kubectl
/// said (admission warnings too).
pub fn kubectl_create(namespace: &str, manifest: &serde_json::Value) -> (bool, String) {
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-create.json", std::process::id()));
    std::fs::write(&path, manifest.to_string()).expect("manifest written");
    let output = std::process::Command::new("kubectl")
        .args(["create", "-n", namespace, "-f", path.to_str().expect("UTF-8 path")])
        .output()
        .expect("kubectl runs");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

pub fn kubectl_apply(namespace: &str, manifest: &serde_json::Value) {
    try_kubectl_apply(namespace, manifest).unwrap_or_else(|stderr| panic!("kubectl apply failed: {stderr}"));
}

/// `kubectl apply` of a manifest given as JSON: kubectl's stderr when refused.
pub fn try_kubectl_apply(namespace: &str, manifest: &serde_json::Value) -> Result<String, String> {
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-apply.json", std::process::id()));
    std::fs::write(&path, manifest.to_string()).expect("manifest written");
    try_kubectl(&["apply", "-n", namespace, "-f", path.to_str().expect("UTF-8 path")])
}

/// A kubeconfig for ServiceAccount `namespace/name` on the test's cluster, with a token of a
/// TokenRequest (as `kubectl create token`): a process using it has exactly that account's RBAC.
pub async fn service_account_kubeconfig(client: &Client, namespace: &str, name: &str) -> PathBuf {
    let request: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 7200}}))
            .expect("TokenRequest");
    let token = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .expect("the token")
        .token;
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": kubeconfig_entry("clusters", "cluster")}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "e2e", "user": name, "namespace": namespace}}],
        "current-context": name,
    });
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-{name}.kubeconfig", std::process::id()));
    std::fs::write(&path, config.to_string()).expect("kubeconfig written");
    path
}

/// The bearer token of the test's kubeconfig (`cluster-up`'s admin has one).
pub fn kubeconfig_token() -> String {
    kubeconfig_entry("users", "user")["token"].as_str().unwrap_or_default().to_owned()
}

/// The current context's entry of `list` (`clusters` or `users`, their `field`: `cluster`,
/// `user`) in the test's kubeconfig (`KUBECONFIG`'s first file, as `kubectl config view
/// --minify` shows it).
fn kubeconfig_entry(list: &str, field: &str) -> serde_json::Value {
    let paths = std::env::var("KUBECONFIG").expect("a cluster: set KUBECONFIG");
    let path = std::env::split_paths(&paths).next().expect("a kubeconfig path");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config: serde_json::Value = serde_saphyr::from_str(&text).expect("the kubeconfig is YAML");
    let current = config["current-context"].as_str().expect("current-context");
    let named = |list: &str, name: &str| {
        config[list].as_array().and_then(|l| l.iter().find(|e| e["name"] == name)).cloned().unwrap_or_default()
    };
    let context = named("contexts", current);
    named(list, context["context"][field].as_str().expect("the context names it"))[field].clone()
}

/// `GET https://ADDR/metrics` (the operator's own certificate, not verified here) with `token`
/// as bearer: the status and the body, or `None` if nothing answers.
pub fn metrics_get(addr: SocketAddr, token: Option<&str>) -> Option<(u16, String)> {
    let mut curl = Command::new("curl");
    curl.args(["-sk", "-w", "\n%{http_code}", &format!("https://{addr}/metrics")]);
    if let Some(token) = token {
        curl.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let output = curl.output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n')?;
    Some((status.trim().parse().ok().filter(|s| *s != 0)?, body.to_owned()))
}

/// A plain HTTP/1.1 GET on loopback: status and body, or `None` if nothing answers.
pub async fn http_get(url: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// Polls `check` until it holds (pausing as [`FIRST_PAUSE`] says); panics after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    while !check().await {
        assert!(start.elapsed() < timeout, "condition not met within {timeout:?}");
        tokio::time::sleep(pause).await;
        pause = next_pause(pause);
    }
}

/// Polls `get` until it returns `Some`; panics after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(value) = get().await {
            return value;
        }
        assert!(start.elapsed() < timeout, "value not there within {timeout:?}");
        tokio::time::sleep(pause).await;
        pause = next_pause(pause);
    }
}

/// The first pause of [`wait_until`] and [`wait_for`]; each next one is half as long again, up
/// to [`LAST_PAUSE`]: what comes within a second is seen at once, and a wait of a minute asks
/// (often by running `kubectl`) a few dozen times, not hundreds, leaving the machine to the
/// servers and the other tests.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LAST_PAUSE: Duration = Duration::from_secs(1);

fn next_pause(pause: Duration) -> Duration {
    (pause * 3 / 2).min(LAST_PAUSE)
}

/// The RFC 3339 time `offset_seconds` from now.
pub fn rfc3339(offset_seconds: i64) -> String {
    (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(offset_seconds)).to_string()
}

/// Sets a pod's status as the kubelet does when its one container `container` ran and exited
/// (there is no kubelet in the test clusters).
pub async fn finish_pod(pods: &Api<Pod>, name: &str, container: &str, exit_code: i32) {
    let now = jiff::Timestamp::now().to_string();
    let phase = if exit_code == 0 { "Succeeded" } else { "Failed" };
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let status = serde_json::json!({"status": {"phase": phase, "startTime": now, "containerStatuses": [{
        "name": container, "ready": false, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
        "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": now, "finishedAt": now}}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status patched");
}

/// Marks every live pod matching `labels` Running and Ready, as the kubelet would.
pub async fn run_pods(pods: &Api<Pod>, labels: &str) {
    let list = pods.list(&ListParams::default().labels(labels)).await.expect("list");
    for pod in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let now = jiff::Timestamp::now().to_string();
        let status = serde_json::json!({"status": {"phase": "Running", "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
        let _ = pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await;
    }
}

/// Waits until Watcher `name` is Ready for its current generation: from then on the webhook's
/// registered conditions cover it (kube-apiserver 1.28+ sends the pods it selects).
pub async fn wait_ready(watchers: &Api<watcher_api::Watcher>, name: &str) {
    wait_until(STEP, || async {
        let Ok(watcher) = watchers.get(name).await else { return false };
        let generation = watcher.metadata.generation;
        watcher
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.observed_generation == generation)
    })
    .await;
}

/// Creates pod `app` asking for `watcher` by annotation once a dry run shows the webhook
/// injecting it (the operator's cache may not have the Watcher yet), and returns it as created.
pub async fn create_injected_app(pods: &Api<Pod>, watcher: &str) -> Pod {
    let app: Pod = serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "annotations": {"watcher.dev/inject": watcher}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod");
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_until(STEP, || async {
        pods.create(&dry_run, &app).await.is_ok_and(|p| p.annotations().contains_key("watcher.dev/injected"))
    })
    .await;
    pods.create(&PostParams::default(), &app).await.expect("pod created")
}

/// What the kubelet would report of every live pod matching `labels`: Running, Ready, every
/// container running and ready with its spec's image (an image updated in place included).
pub async fn kubelet_reports(pods: &Api<Pod>, labels: &str) {
    let list = pods.list(&ListParams::default().labels(labels)).await.expect("list");
    let now = jiff::Timestamp::now().to_string();
    for pod in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let Some(spec) = pod.spec.as_ref() else { continue };
        let status = |containers: &[k8s_openapi::api::core::v1::Container]| -> Vec<serde_json::Value> {
            containers
                .iter()
                .map(|c| {
                    serde_json::json!({"name": c.name,
                    "image": format!("docker.io/library/{}", c.image.as_deref().unwrap_or_default()),
                    "imageID": "", "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": now}}})
                })
                .collect()
        };
        let patch = serde_json::json!({"status": {"phase": "Running", "startTime": now,
            "containerStatuses": status(&spec.containers),
            "initContainerStatuses": status(spec.init_containers.as_deref().unwrap_or_default()),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
        let _ = pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
    }
}

/// The image of container `name` of `pod`, a native sidecar or a regular container.
pub fn container_image(pod: &Pod, name: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let all = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    all.into_iter().find(|c| c.name == name)?.image.clone()
}

/// `kubectl watcher rollout ARGS -n NAMESPACE` (the binary itself, as the plugin runs it): exit
/// code and output.
pub fn rollout(namespace: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .arg("rollout")
        .args(args)
        .args(["-n", namespace])
        .output()
        .expect("rollout runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}
