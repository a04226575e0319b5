//! e2e: `watcher-operator check` and `check-inject` against a real cluster, run as a user runs
//! them: healthy (the lines it is about passed), then with the operator stopped and with the
//! webhook configuration deleted (exit 1, the failing line named); `check-inject` on an injected, a not-asked and an
//! excluded pod. Run on purpose: `cargo test --test e2e check:: -- --ignored`.
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::common;

use std::process::Command;

use common::{Operator, STEP, TestNamespace, client, exclusive, install_crds, kubectl_apply, wait_until};

/// `watcher-operator ARGS -o json`: the exit code and the JSON it printed.
fn run_json(args: &[&str]) -> (i32, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("watcher-operator runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{args:?} printed no JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    });
    (output.status.code().unwrap_or(-1), json)
}

fn status_of<'a>(report: &'a Value, name: &str) -> &'a str {
    let checks = report["checks"].as_array().expect("checks");
    let check = checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} in {report:#}"));
    check["status"].as_str().unwrap_or_default()
}

fn pod(name: &str, annotations: Value) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}))
    .expect("valid Pod")
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn check_and_check_inject_explain_the_installation() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-check-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-check").await;
    let (op, n) = (operator_ns.name.as_str(), ns.name.as_str());
    let operator = Operator::start(op).await;
    let check = ["check", "-n", op, "--probe-namespace", n];

    // Healthy: the probe patched (once the webhook serves its certificate). Only the lines this
    // test is about: a cluster other suites used may hold Watchers that make other lines warn.
    wait_until(STEP, || async { status_of(&run_json(&check).1, "admission probe") == "passed" }).await;
    let (_, report) = run_json(&check);
    for line in ["webhook configuration", "caBundle", "admission probe"] {
        assert_eq!(status_of(&report, line), "passed", "{line}: {report:#}");
    }
    assert_eq!(status_of(&report, "Deployment"), "passed", "skipped (by URL) reads as passed");

    // check-inject: an injected pod, a pod that asks for nothing, a pod of the operator's namespace.
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
                "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]}}}),
    );
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let asking = pod("asking", json!({"watcher.dev/inject": "log-watcher"}));
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_until(STEP, || async {
        pods.create(&dry_run, &asking).await.is_ok_and(|p| p.annotations().contains_key("watcher.dev/injected"))
    })
    .await;
    pods.create(&PostParams::default(), &asking).await.expect("pod created");
    pods.create(&PostParams::default(), &pod("plain", json!({}))).await.expect("pod created");
    let (code, injected) = run_json(&["check-inject", "asking", "-n", n, "--operator-namespace", op]);
    assert_eq!(code, 0);
    assert_eq!(injected["excluded"], Value::Null);
    assert_eq!(
        injected["watchers"][0],
        json!({"name": "log-watcher", "injected": true, "upToDate": true, "reason": "Annotation",
               "message": "asked by annotation watcher.dev/inject: injected, up to date"})
    );
    let (_, plain) = run_json(&["check-inject", "plain", "-n", n, "--operator-namespace", op]);
    assert_eq!(
        (plain["watchers"][0]["injected"].as_bool(), plain["watchers"][0]["reason"].as_str()),
        (Some(false), Some("NotAsked"))
    );
    Api::<Pod>::namespaced(client.clone(), op).create(&PostParams::default(), &asking).await.expect("pod created");
    let (_, excluded) = run_json(&["check-inject", "asking", "-n", op, "--operator-namespace", op]);
    assert_eq!(excluded["excluded"]["reason"], "OperatorNamespace", "{excluded:#}");
    let missing = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["check-inject", "no-such-pod", "-n", n])
        .output()
        .expect("watcher-operator runs");
    assert_eq!(missing.status.code(), Some(1), "no answer: exit code 1");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("pod no-such-pod not found"));

    // The operator stopped (so that no pass of its certificate steps registers the webhook again
    // meanwhile): exit 1, the probe failing.
    operator.stop().await;
    let (code, report) = run_json(&check);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(status_of(&report, "admission probe"), "failed");

    // The webhook configuration deleted (if the stop left one, another install's): exit 1, the
    // line named.
    let configs = Api::<MutatingWebhookConfiguration>::all(client.clone());
    if configs.get_opt("watcher-operator").await.expect("readable").is_some() {
        configs.delete("watcher-operator", &DeleteParams::default()).await.expect("deleted");
    }
    let (code, report) = run_json(&check);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(status_of(&report, "webhook configuration"), "failed");
    assert_eq!(status_of(&report, "admission probe"), "failed");

    ns.delete().await;
    operator_ns.delete().await;
}
