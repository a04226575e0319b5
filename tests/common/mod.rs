//! Harness of the e2e tests: a real cluster from `KUBECONFIG`, the CRDs installed, a fresh
//! namespace per test and the operator binary running outside the cluster.

#![allow(dead_code, unreachable_pub)] // each test file uses a different part of the harness

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};

/// How long an e2e step may take before the test fails.
pub const STEP: Duration = Duration::from_secs(60);

/// A client of the cluster that `KUBECONFIG` names.
pub async fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_default().await.expect("a cluster: set KUBECONFIG")
}

/// Applies the operator's CRDs and waits until the API server serves them.
pub async fn install_crds(client: &Client) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply("watcher-operator-e2e").force();
    for crd in watcher_api::crds() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd)).await.expect("CRD applied");
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(STEP, established).await.expect("CRD established in time").expect("watch");
    }
}

/// A namespace made for one test; `delete` removes it.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", std::process::id() % 100_000);
        let api = Api::<Namespace>::all(client.clone());
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
        // A leftover of an earlier run with the same pid is removed first.
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_until(STEP, || async { api.get_opt(&name).await.ok().flatten().is_none() }).await;
        api.create(&PostParams::default(), &namespace).await.expect("namespace created");
        Self { name, client: client.clone() }
    }

    pub async fn delete(self) {
        let _ = Api::<Namespace>::all(self.client).delete(&self.name, &DeleteParams::background()).await;
    }
}

/// The operator binary, killed when dropped.
pub struct Operator {
    child: Child,
    pub metrics: SocketAddr,
    pub webhook: SocketAddr,
}

/// A free port on 127.0.0.1.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

impl Operator {
    /// Starts `watcher-operator run` with `args` and waits until `/readyz` answers 200.
    /// A test that passes its own `--webhook-addr` keeps it.
    pub async fn start(namespace: &str, args: &[&str]) -> Self {
        let metrics = free_port();
        let webhook = args
            .iter()
            .find_map(|a| a.strip_prefix("--webhook-addr="))
            .map(|a| a.parse().expect("--webhook-addr is an address"))
            .unwrap_or_else(free_port);
        let mut command = Command::new(env!("CARGO_BIN_EXE_watcher-operator"));
        command.arg("run").arg(format!("--namespace={namespace}")).arg(format!("--metrics-addr={metrics}"));
        if !args.iter().any(|a| a.starts_with("--webhook-addr=")) {
            command.arg(format!("--webhook-addr={webhook}"));
        }
        let child = command
            .args(args)
            .env("RUST_LOG", "info,watcher_controller=debug")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("operator starts");
        let operator = Self { child, metrics, webhook };
        let url = format!("http://{metrics}/readyz");
        wait_until(STEP, || async { http_get(&url).await.is_some_and(|(status, _)| status == 200) }).await;
        operator
    }

    /// The body of `GET /metrics`.
    pub async fn metrics_text(&self) -> String {
        http_get(&format!("http://{}/metrics", self.metrics)).await.map(|(_, body)| body).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// Polls `check` every 250 ms until it holds; panics after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "condition not met within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Polls `get` until it returns `Some`; panics after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = get().await {
            return value;
        }
        assert!(start.elapsed() < timeout, "value not there within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
