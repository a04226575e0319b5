//! e2e: Secrets copied across namespaces by the `sync` controller (`--sync-secrets=true`; off by
//! default), driven with `kubectl` as a user does: annotate, label namespaces, edit a copy,
//! restart the operator, restart it with Secrets off (its copies stay).
//! Run on purpose: `cargo test --test e2e sync:: -- --ignored`.
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::common;

use common::{
    Operator, Registration, STEP, TestNamespace, client, exclusive, install_crds, kubectl, wait_for, wait_until,
};

const NAME: &str = "regcred-e2e";

/// The copy in `namespace`, if there is one (an object of that name that is labelled a copy).
async fn copy(client: &Client, namespace: &str) -> Option<Secret> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace).get_opt(NAME).await.ok()??;
    (secret.labels().get("watcher.dev/synced").map(String::as_str) == Some("true")).then_some(secret)
}

fn data(secret: &Secret) -> Option<String> {
    let value = secret.data.as_ref()?.get("token")?;
    String::from_utf8(value.0.clone()).ok()
}

async fn has_copy_with(client: &Client, namespace: &str, value: &str) -> bool {
    copy(client, namespace).await.is_some_and(|s| data(&s).as_deref() == Some(value))
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG"]
async fn secrets_are_copied_level_based() {
    let _one = exclusive().await;
    let client = client().await;
    install_crds(&client).await;
    let source_ns = TestNamespace::create(&client, "watcher-e2e-sync-src").await;
    let targets = [
        TestNamespace::create(&client, "watcher-e2e-sync-1").await,
        TestNamespace::create(&client, "watcher-e2e-sync-2").await,
        TestNamespace::create(&client, "watcher-e2e-sync-3").await,
    ];
    let [one, two, three] = [&targets[0].name, &targets[1].name, &targets[2].name].map(String::as_str);
    // An unrelated Secret of the same name, there before the source: never touched.
    let conflict_ns = TestNamespace::create(&client, "watcher-e2e-sync-own").await;
    let unrelated: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": NAME}, "stringData": {"token": "theirs"}}))
    .expect("valid Secret");
    Api::<Secret>::namespaced(client.clone(), &conflict_ns.name)
        .create(&PostParams::default(), &unrelated)
        .await
        .expect("unrelated Secret");

    // The operator's own namespace is the default sync source namespace.
    let syncing_secrets = |namespace: &str| {
        let namespace = namespace.to_owned();
        async move { Operator::start_with(&namespace, None, Registration::Url, &["--sync-secrets=true"]).await }
    };
    let operator = syncing_secrets(&source_ns.name).await;
    let src = source_ns.name.as_str();
    kubectl(&["create", "secret", "generic", NAME, "-n", src, "--from-literal=token=v1"]);
    kubectl(&["label", "secret", NAME, "-n", src, "app=registry"]);
    kubectl(&["annotate", "secret", NAME, "-n", src, "watcher.dev/sync="]);

    // Every namespace gets a copy: labels, annotation, data, type.
    for namespace in [one, two, three] {
        wait_until(STEP, || has_copy_with(&client, namespace, "v1")).await;
    }
    let sample = copy(&client, one).await.expect("copy");
    assert_eq!(sample.labels().get("app").map(String::as_str), Some("registry"));
    assert_eq!(
        sample.annotations().get("watcher.dev/synced-from").map(String::as_str),
        Some(format!("{src}/{NAME}").as_str())
    );
    assert_eq!(sample.type_.as_deref(), Some("Opaque"));

    // The unrelated Secret is untouched, and the source says why.
    let theirs = Api::<Secret>::namespaced(client.clone(), &conflict_ns.name).get(NAME).await.expect("kept");
    assert_eq!(data(&theirs).as_deref(), Some("theirs"));
    assert!(theirs.labels().is_empty() && theirs.annotations().is_empty(), "untouched: {theirs:?}");
    let events = Api::<Event>::namespaced(client.clone(), src);
    wait_until(STEP, || async {
        let list = events.list(&ListParams::default()).await;
        list.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("SyncConflict")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME)
                    && e.note.as_deref().is_some_and(|n| n.contains(&conflict_ns.name))
            })
        })
    })
    .await;

    // A namespace created afterwards gets it.
    let late = TestNamespace::create(&client, "watcher-e2e-sync-4").await;
    wait_until(STEP, || has_copy_with(&client, &late.name, "v1")).await;

    // A copy edited by hand is put back; one deleted by hand comes back.
    let patch = json!({"data": {"token": "aGFja2Vk", "extra": "eA=="}}).to_string();
    kubectl(&["patch", "secret", NAME, "-n", two, "--type=merge", "-p", &patch]);
    wait_until(STEP, || async {
        copy(&client, two)
            .await
            .is_some_and(|s| data(&s).as_deref() == Some("v1") && s.data.as_ref().is_some_and(|d| d.len() == 1))
    })
    .await;
    kubectl(&["delete", "secret", NAME, "-n", three]);
    wait_until(STEP, || has_copy_with(&client, three, "v1")).await;

    // A selector limits it to labelled namespaces; relabelling adds and removes copies.
    kubectl(&["label", "namespace", one, "team=a"]);
    kubectl(&["annotate", "secret", NAME, "-n", src, "--overwrite", "watcher.dev/sync=team=a"]);
    wait_until(STEP, || async {
        copy(&client, one).await.is_some()
            && copy(&client, two).await.is_none()
            && copy(&client, &late.name).await.is_none()
    })
    .await;
    kubectl(&["label", "namespace", two, "team=a"]);
    wait_until(STEP, || has_copy_with(&client, two, "v1")).await;
    kubectl(&["label", "namespace", one, "--overwrite", "team=b"]);
    wait_until(STEP, || async { copy(&client, one).await.is_none() }).await;

    // Restarting in the middle loses nothing: what changed while the operator was down
    // converges when it is back.
    operator.stop().await;
    kubectl(&["label", "namespace", three, "team=a"]);
    let v2 = json!({"stringData": {"token": "v2"}}).to_string();
    kubectl(&["patch", "secret", NAME, "-n", src, "--type=merge", "-p", &v2]);
    kubectl(&["delete", "secret", NAME, "-n", two]);
    let operator = syncing_secrets(src).await;
    for namespace in [two, three] {
        wait_until(STEP, || has_copy_with(&client, namespace, "v2")).await;
    }

    // Restarted with its defaults (Secrets not synced, as after an upgrade): no copy is made,
    // updated or deleted, while ConfigMaps still are synced (a ConfigMap's copy proves the
    // controller went round).
    operator.stop().await;
    let operator = Operator::start(src).await;
    kubectl(&["label", "namespace", one, "--overwrite", "team=a"]);
    kubectl(&["create", "configmap", NAME, "-n", src, "--from-literal=token=v1"]);
    kubectl(&["annotate", "configmap", NAME, "-n", src, "watcher.dev/sync=team=a"]);
    let config_maps =
        |namespace: &str| Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), namespace);
    for namespace in [one, two, three] {
        let api = config_maps(namespace);
        wait_until(STEP, || async { api.get_opt(NAME).await.ok().flatten().is_some() }).await;
    }
    assert!(copy(&client, one).await.is_none(), "no Secret copied with Secrets off");
    for namespace in [two, three] {
        assert!(has_copy_with(&client, namespace, "v2").await, "the copy in {namespace} stays as it was");
    }
    kubectl(&["label", "namespace", one, "--overwrite", "team=b"]);
    kubectl(&["annotate", "configmap", NAME, "-n", src, "watcher.dev/sync-"]);
    for namespace in [one, two, three] {
        let api = config_maps(namespace);
        wait_until(STEP, || async { api.get_opt(NAME).await.ok().flatten().is_none() }).await;
    }
    operator.stop().await;
    let operator = syncing_secrets(src).await;

    // Removing the annotation deletes every copy, and only the copies.
    kubectl(&["annotate", "secret", NAME, "-n", src, "watcher.dev/sync-"]);
    for namespace in [one, two, three, late.name.as_str()] {
        wait_until(STEP, || async { copy(&client, namespace).await.is_none() }).await;
    }
    let theirs = wait_for(STEP, || async {
        Api::<Secret>::namespaced(client.clone(), &conflict_ns.name).get_opt(NAME).await.ok().flatten()
    })
    .await;
    assert_eq!(data(&theirs).as_deref(), Some("theirs"));
    assert!(
        Api::<Secret>::namespaced(client.clone(), src).get_opt(NAME).await.expect("get").is_some(),
        "the source stays"
    );

    operator.stop().await;
    let _ = Api::<Secret>::namespaced(client.clone(), src).delete(NAME, &DeleteParams::default()).await;
    for namespace in targets.into_iter().chain([late, conflict_ns, source_ns]) {
        namespace.delete().await;
    }
}
