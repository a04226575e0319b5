//! e2e: secure by default. `/metrics` answers only a token kube-apiserver authenticates and
//! allows (TokenReview, SubjectAccessReview), over TLS the operator's CA verifies; and, where
//! kube-apiserver has ValidatingAdmissionPolicy (1.30+), the policies of `deploy/policies/` hold
//! the operator's own ServiceAccount to what its controllers write, acting with its token.
//! Run on purpose: `cargo test --test e2e security:: -- --ignored`.
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::common;

use common::{
    Operator, STEP, TestNamespace, client, delete_cluster_wide_objects, exclusive, http_get, install_crds, kubectl,
    metrics_get, serves_policies, service_account_kubeconfig, try_kubectl, wait_for, wait_for_crds_established,
};

/// The object named `name` in a manifest of `deploy/`, as JSON.
fn deploy_object(file: &str, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"))).expect("deploy file");
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    objects.into_iter().find(|o| o["metadata"]["name"] == name).unwrap_or_else(|| panic!("{name} in deploy/{file}"))
}

fn write_json(name: &str, value: &serde_json::Value) -> String {
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-{name}.json", std::process::id()));
    std::fs::write(&path, value.to_string()).expect("written");
    path.to_str().expect("UTF-8 path").to_owned()
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn metrics_answer_only_a_token_allowed_to_read_them() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "watcher-e2e-metrics").await;
    let n = ns.name.as_str();
    let operator = Operator::start(n).await;

    // The probes' port says whether the process is ready, and nothing else.
    assert_eq!(http_get(&format!("http://{}/readyz", operator.health)).await.map(|r| r.0), Some(200));
    assert_eq!(http_get(&format!("http://{}/metrics", operator.health)).await.map(|r| r.0), Some(404));
    // Plain HTTP is not served on the metrics port.
    assert_ne!(http_get(&format!("http://{}/metrics", operator.metrics)).await.map(|r| r.0), Some(200));

    // The shipped metrics-reader role, bound to one ServiceAccount; another has nothing.
    kubectl(&[
        "apply",
        "-f",
        &write_json("reader-role", &deploy_object("rbac.yaml", "watcher-operator-metrics-reader")),
    ]);
    for account in ["reader", "nobody"] {
        kubectl(&["create", "serviceaccount", account, "-n", n]);
    }
    let binding = format!("{n}-metrics-reader");
    let subject = format!("{n}:reader");
    kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=watcher-operator-metrics-reader",
        &format!("--serviceaccount={subject}"),
    ]);
    let token = |account: &str| kubectl(&["create", "token", account, "-n", n]).trim().to_owned();

    let (status, body) = metrics_get(operator.metrics, None).expect("answers");
    assert_eq!(status, 401, "{body}");
    assert_eq!(metrics_get(operator.metrics, Some("not-a-token")).map(|r| r.0), Some(401));
    let (status, body) = metrics_get(operator.metrics, Some(&token("nobody"))).expect("answers");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains(&format!("system:serviceaccount:{n}:nobody")), "{body}");
    let reader = token("reader");
    let (status, body) = metrics_get(operator.metrics, Some(&reader)).expect("answers");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("watcher_leader ") && body.ends_with("# EOF\n"), "{body}");

    // Verified as Prometheus verifies it: the CA of the operator's Secret, the name it serves.
    let secret = wait_for(STEP, || async {
        Api::<Secret>::namespaced(client.clone(), n).get_opt("watcher-operator-tls").await.ok().flatten()
    })
    .await;
    let ca = secret.data.as_ref().and_then(|d| d.get("ca.crt")).expect("ca.crt").0.clone();
    let ca_file = std::env::temp_dir().join(format!("watcher-e2e-{}-ca.crt", std::process::id()));
    std::fs::write(&ca_file, ca).expect("CA written");
    let verified = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca_file.to_str().expect("UTF-8")])
        .args(["-H", &format!("Authorization: Bearer {reader}")])
        .arg(format!("https://{}:{}/metrics", common::webhook_host(), operator.metrics.port()))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&verified.stdout), "200", "{}", String::from_utf8_lossy(&verified.stderr));

    operator.stop().await;
    kubectl(&["delete", "clusterrolebinding", &binding]);
    delete_cluster_wide_objects();
    ns.delete().await;
}

/// `kubectl` acting as the ServiceAccount of `kubeconfig`: its stderr when refused.
fn as_operator(kubeconfig: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["--kubeconfig", kubeconfig.to_str().expect("UTF-8 path")];
    all.extend(args);
    try_kubectl(&all)
}

fn refused_by(result: Result<String, String>, policy: &str, words: &str) {
    let said = result.expect_err("refused");
    assert!(
        said.contains(&format!("ValidatingAdmissionPolicy '{policy}'")) && said.contains(words),
        "not refused by {policy} ({words}): {said}"
    );
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn the_policies_hold_the_operators_own_service_account() {
    let _one = exclusive().await;
    let client = client().await;
    if !serves_policies(&client).await {
        eprintln!("kube-apiserver before 1.30 serves no ValidatingAdmissionPolicy: only RBAC holds the operator");
        assert!(try_kubectl(&["apply", "-k", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/policies")]).is_err());
        return;
    }
    delete_cluster_wide_objects();
    kubectl(&["apply", "-k", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy")]);
    kubectl(&["apply", "-k", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/policies")]);
    wait_for_crds_established();
    let _ = Api::<Deployment>::namespaced(client.clone(), "watcher-system")
        .patch("watcher-operator", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}})))
        .await;
    let ns = TestNamespace::create(&client, "watcher-e2e-fence").await;
    let n = ns.name.as_str();
    let operator = service_account_kubeconfig(&client, "watcher-system", "watcher-operator").await;

    // A privileged pod in kube-system: its token cannot make one.
    let evil = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watcher-e2e-evil", "namespace": "kube-system"},
        "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": true}}]}});
    let evil = write_json("evil", &evil);
    refused_by(as_operator(&operator, &["create", "-f", &evil]), "watcher-operator-pods", "At and PodSet");
    // Even one that names an At as its owner, if it is not of the project's shape.
    let owned = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "watcher-e2e-owned", "namespace": n,
                     "ownerReferences": [{"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "name": "x",
                                          "uid": "6d1bd0e5-0000-4000-8000-000000000001", "controller": true}]},
        "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox:1.36"}]}});
    refused_by(
        as_operator(&operator, &["create", "-f", &write_json("owned", &owned)]),
        "watcher-operator-pods",
        "shape",
    );
    // A dry run stores nothing: the Pod Security probe's privileged pod passes.
    as_operator(&operator, &["create", "-f", &evil, "--dry-run=server"]).expect("a dry run passes");

    // An injected pod: its app container's image is not the operator's to change, nor its
    // command (kube-apiserver refuses that to anyone); the sidecar's image is.
    kubectl(&[
        "apply",
        "-n",
        n,
        "-f",
        &write_json(
            "app",
            &json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "annotations": {"watcher.dev/sidecars": "log-watcher", "team": "a"}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}, {"name": "log-watcher", "image": "busybox:1.36"}]}}),
        ),
    ]);
    let image = |index: usize, image: &str| {
        json!([{"op": "replace", "path": format!("/spec/containers/{index}/image"), "value": image}]).to_string()
    };
    refused_by(
        as_operator(&operator, &["patch", "pod", "app", "-n", n, "--type=json", "-p", &image(0, "evil:1")]),
        "watcher-operator-pods",
        "image of no container but a sidecar",
    );
    let command = json!([{"op": "add", "path": "/spec/containers/0/command", "value": ["sh"]}]).to_string();
    assert!(as_operator(&operator, &["patch", "pod", "app", "-n", n, "--type=json", "-p", &command]).is_err());
    refused_by(
        as_operator(
            &operator,
            &["annotate", "pod", "app", "-n", n, "--overwrite", "watcher.dev/sidecars=log-watcher,app"],
        ),
        "watcher-operator-pods",
        "never watcher.dev/sidecars",
    );
    refused_by(
        as_operator(&operator, &["annotate", "pod", "app", "-n", n, "--overwrite", "team=b"]),
        "watcher-operator-pods",
        "annotations and labels",
    );
    as_operator(&operator, &["patch", "pod", "app", "-n", n, "--type=json", "-p", &image(1, "busybox:1.37")])
        .expect("a sidecar's image is updated in place");

    // A workload: its images only.
    kubectl(&["create", "deployment", "web", "-n", n, "--image=busybox:1.36", "--", "sleep", "3600"]);
    let patch_web = |container: serde_json::Value| {
        let template = json!({"spec": {"template": {"spec": {"containers": [container]}}}}).to_string();
        as_operator(&operator, &["patch", "deployment", "web", "-n", n, "-p", &template])
    };
    refused_by(
        patch_web(json!({"name": "busybox", "command": ["sh", "-c", "evil"]})),
        "watcher-operator-workloads",
        "container images",
    );
    patch_web(json!({"name": "busybox", "image": "mirror.example/busybox:1.36"})).expect("an image rewritten");

    // ConfigMaps and Secrets without its ownership: never overwritten. Secrets need the rights
    // that syncing them grants.
    kubectl(&["create", "configmap", "theirs", "-n", n, "--from-literal=a=b"]);
    refused_by(
        as_operator(&operator, &["patch", "configmap", "theirs", "-n", n, "-p", r#"{"data":{"a":"evil"}}"#]),
        "watcher-operator-owned",
        &format!("not {n}/theirs"),
    );
    kubectl(&["create", "secret", "generic", "theirs", "-n", n, "--from-literal=a=b"]);
    let grant = format!("{n}-sync-secrets");
    kubectl(&["create", "clusterrole", &grant, "--verb=get,patch,update,create,delete", "--resource=secrets"]);
    kubectl(&[
        "create",
        "clusterrolebinding",
        &grant,
        &format!("--clusterrole={grant}"),
        "--serviceaccount=watcher-system:watcher-operator",
    ]);
    let overwrite = ["patch", "secret", "theirs", "-n", n, "-p", r#"{"stringData":{"a":"evil"}}"#];
    let said = common::wait_for(STEP, || async {
        as_operator(&operator, &overwrite).err().filter(|said| said.contains("ValidatingAdmissionPolicy"))
    })
    .await;
    refused_by(Err(said), "watcher-operator-owned", &format!("not {n}/theirs"));
    let hijack = ["label", "secret", "theirs", "-n", n, "watcher.dev/synced=true"];
    refused_by(as_operator(&operator, &hijack), "watcher-operator-owned", "Sync copy");

    // Another webhook configuration: not its own.
    let other = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                       "metadata": {"name": format!("{n}-other")}, "webhooks": []});
    refused_by(
        as_operator(&operator, &["create", "-f", &write_json("other", &other)]),
        "watcher-operator-webhooks",
        "only its own MutatingWebhookConfiguration",
    );
    kubectl(&["create", "-f", &write_json("other", &other)]);
    assert!(
        as_operator(&operator, &["annotate", "mutatingwebhookconfiguration", &format!("{n}-other"), "x=y"]).is_err(),
        "nor patch another"
    );

    kubectl(&["delete", "mutatingwebhookconfiguration", &format!("{n}-other")]);
    kubectl(&["delete", "clusterrolebinding", &grant]);
    kubectl(&["delete", "clusterrole", &grant]);
    ns.delete().await;
    let _ = Api::<Deployment>::namespaced(client.clone(), "watcher-system")
        .delete("watcher-operator", &DeleteParams::default())
        .await;
    delete_cluster_wide_objects();
}
