//! e2e: the operator as installed by Helm. `helm install` into a fresh namespace, then the
//! binary runs outside the cluster with the token of the chart's ServiceAccount (so the chart's
//! RBAC is what it has): it reconciles a Watcher and injects a pod. `helm uninstall` then
//! leaves the CRDs and the Watchers in place.
//! Run on purpose, with `helm` on the PATH: `cargo test --test e2e helm:: -- --ignored`.
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use watcher_api::Watcher;

use crate::common;

use common::{
    Operator, Registration, STEP, TestNamespace, client, create_injected_app, delete_cluster_wide_objects, exclusive,
    kubectl_apply, service_account_kubeconfig, wait_for, wait_for_crds_established, wait_until,
};

pub(crate) fn helm(args: &[&str]) -> String {
    let output = std::process::Command::new("helm").args(args).output().expect("helm on the PATH");
    assert!(output.status.success(), "helm {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `helm install` as README shows it: with `--skip-crds` when the CRDs are installed already
/// (by `watcher-operator crds | kubectl apply --server-side -f -`, as earlier tests do): Helm 4
/// applies the chart's `crds/` server-side, and on 1.24, which stores the CRDs without their CEL
/// rules, that apply conflicts with kubectl's on `.spec.versions`.
pub(crate) async fn helm_install(client: &kube::Client, release_namespace: &str, more: &[&str]) {
    helm_install_from(client, release_namespace, CHART, more).await;
}

/// [`helm_install`] of `chart` (a directory, or `oci://…` with its `--version` in `more`).
pub(crate) async fn helm_install_from(client: &kube::Client, release_namespace: &str, chart: &str, more: &[&str]) {
    // What an earlier test's operator was given (its RBAC, its policies): Helm adopts nothing.
    delete_cluster_wide_objects();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let installed = crds.get_opt("watchers.watcher.dev").await.expect("read the CRDs").is_some();
    let mut args = vec!["install", "watcher-operator", chart, "-n", release_namespace];
    if installed {
        args.push("--skip-crds");
    }
    args.extend(more);
    helm(&args);
}

/// The chart, as README installs it.
pub(crate) const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/watcher-operator");

/// A release in a registry the node pulls from (`.ci/e2e` makes this build's with `cargo xtask
/// release`): HOST:PORT/PATH of a plain-HTTP registry, and the version.
pub(crate) struct Release {
    pub(crate) registry: String,
    pub(crate) version: String,
}

impl Release {
    /// This build's: `WATCHER_E2E_REGISTRY`, at this build's version.
    pub(crate) fn from_env() -> Option<Self> {
        let registry = std::env::var("WATCHER_E2E_REGISTRY").ok().filter(|r| !r.is_empty())?;
        Some(Self { registry, version: env!("CARGO_PKG_VERSION").to_owned() })
    }

    /// The build before this one: `WATCHER_E2E_PREVIOUS`, `REGISTRY VERSION`.
    pub(crate) fn previous_from_env() -> Option<Self> {
        let given = std::env::var("WATCHER_E2E_PREVIOUS").ok()?;
        let (registry, version) = given.trim().split_once(' ')?;
        Some(Self { registry: registry.to_owned(), version: version.to_owned() })
    }

    /// `oci://REGISTRY/charts/watcher-operator`, as a user installs it.
    pub(crate) fn chart(&self) -> String {
        format!("oci://{}/charts/watcher-operator", self.registry)
    }

    /// `helm install`'s (and `upgrade`'s) arguments for the release's chart.
    pub(crate) fn install_args(&self) -> Vec<String> {
        vec!["--version".into(), self.version.clone(), "--plain-http".into()]
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn helm_install_runs_and_uninstall_keeps_the_crds_and_watchers() {
    let _one = exclusive().await;
    let client = client().await;
    // An earlier `kubectl apply -k deploy/` (`install`) may have left its cluster-wide
    // objects, and Helm adopts nothing it did not create.
    delete_cluster_wide_objects();
    let release_ns = TestNamespace::create(&client, "watcher-e2e-helm").await;
    let r = release_ns.name.as_str();
    helm_install(&client, r, &[]).await;
    wait_for_crds_established();
    // No kubelet runs the chart's Deployment here: this process is the operator.
    let _ = Api::<Deployment>::namespaced(client.clone(), r)
        .patch("watcher-operator", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}})))
        .await;
    let kubeconfig = service_account_kubeconfig(&client, r, "watcher-operator").await;
    let operator = Operator::start_as(r, Some(&kubeconfig), Registration::Url).await;

    let ns = TestNamespace::create(&client, "watcher-e2e-helm-apps").await;
    let n = ns.name.as_str();
    kubectl_apply(
        n,
        &json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": "log-watcher"},
                "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                         "configData": {"LEVEL": "debug"}}}),
    );
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), n);
    wait_for(STEP, || async { config_maps.get_opt("log-watcher-config").await.ok().flatten() }).await;
    let pods = Api::<Pod>::namespaced(client.clone(), n);
    let created = create_injected_app(&pods, "log-watcher").await;
    assert!(created.annotations().contains_key("watcher.dev/injected"));
    operator.stop().await;

    // Uninstall: the release's objects go; the CRDs and every Watcher stay.
    helm(&["uninstall", "watcher-operator", "-n", r]);
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in watcher_api::crds().iter().map(ResourceExt::name_any) {
        assert!(crds.get_opt(&name).await.expect("read").is_some(), "{name} kept");
    }
    let watchers = Api::<Watcher>::namespaced(client.clone(), n);
    assert!(watchers.get_opt("log-watcher").await.expect("read").is_some(), "the Watcher is kept");
    assert!(
        common::try_kubectl(&["get", "clusterrole", "watcher-operator"]).is_err(),
        "the release's cluster-wide objects are gone"
    );

    ns.delete().await;
    release_ns.delete().await;
}

/// A run outside the cluster killed with SIGKILL leaves the configuration it created; the next
/// run stopped gracefully deletes it (the object says a run created it), and `helm install` as
/// README shows it succeeds.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn helm_install_follows_a_run_by_url_that_was_killed() {
    let _one = exclusive().await;
    let client = client().await;
    // An earlier `kubectl apply -k deploy/` (`install`) may have left its cluster-wide
    // objects, and Helm adopts nothing it did not create.
    delete_cluster_wide_objects();
    common::install_crds(&client).await;
    let run_ns = TestNamespace::create(&client, "watcher-e2e-killed").await;
    let configurations =
        Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(client.clone());

    // Ready means serving; the configuration follows the certificate, so the run is killed once
    // it has registered.
    let killed = Operator::start(&run_ns.name).await;
    wait_for(STEP, || async { configurations.get_opt("watcher-operator").await.ok().flatten() }).await;
    killed.kill();
    let leftover = configurations.get("watcher-operator").await.expect("the killed run's configuration is left");
    assert!(leftover.annotations().contains_key("watcher.dev/created-by-run"), "{:?}", leftover.metadata);
    let pre = std::process::Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["check", "--pre", "-o", "json"])
        .output()
        .expect("check --pre runs");
    let report: serde_json::Value = serde_json::from_slice(&pre.stdout).expect("JSON");
    let in_the_way = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "no MutatingWebhookConfiguration in the way")
        .expect("check --pre looks for it")
        .clone();
    assert_eq!(in_the_way["status"], "warning", "{in_the_way}");
    assert!(in_the_way["hint"].as_str().is_some_and(|h| h.contains("kubectl delete mutatingwebhookconfiguration")));

    Operator::start(&run_ns.name).await.stop().await;
    wait_until(STEP, || async { configurations.get_opt("watcher-operator").await.ok().flatten().is_none() }).await;

    let release_ns = TestNamespace::create(&client, "watcher-e2e-helm-after").await;
    helm_install(&client, &release_ns.name, &[]).await;
    helm(&["uninstall", "watcher-operator", "-n", &release_ns.name]);
    release_ns.delete().await;
    run_ns.delete().await;
}
