//! The probe: a dry-run pod through the webhook, and what a failure most likely means.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use watcher_admission::{InjectOptions, exclusion};
use watcher_api::{PROBE_ANNOTATION, PROBED_ANNOTATION};

use super::registration::Registered;
use super::{CheckOptions, Report, Status};

/// The dry-run pod `check` sends through kube-apiserver: asks for the probe, passes the
/// `restricted` Pod Security level, is never stored.
pub(crate) fn probe_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "watcher-operator-probe-",
                     "labels": {"app.kubernetes.io/name": "watcher-operator-probe"},
                     "annotations": {PROBE_ANNOTATION: "check"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        },
    }))
    .unwrap_or_default()
}

/// The admission probe: a server-side dry run of [`probe_pod`] must come back with the
/// webhook's patch.
pub(super) async fn probe(
    client: &Client,
    report: &mut Report,
    options: &CheckOptions,
    registered: Option<&Registered>,
) {
    const GROUP: &str = "admission";
    const NAME: &str = "admission probe";
    let target = &options.probe_namespace;
    let pod = probe_pod();
    let namespace = match Api::<Namespace>::all(client.clone()).get_opt(target).await {
        Ok(Some(namespace)) => namespace,
        Ok(None) => {
            return report.fail(
                GROUP,
                NAME,
                format!("namespace {target} not found"),
                "pass --probe-namespace NS, a namespace the webhook serves",
            );
        }
        Err(error) => {
            return report.fail(GROUP, NAME, format!("cannot read namespace {target}: {error}"), "check your access");
        }
    };
    if let Some(registered) = registered {
        let namespace_labels = namespace.metadata.labels.unwrap_or_default();
        let injection = InjectOptions {
            excluded_namespaces: vec![options.namespace.clone()],
            native_sidecars: true,
            server_minor: None,
            ..Default::default()
        };
        if let Some(reason) = exclusion(target, &namespace_labels, pod.labels(), &registered.selectors, &injection) {
            return report.fail(
                GROUP,
                NAME,
                format!("namespace {target} is never sent to the webhook ({reason:?})"),
                "pass --probe-namespace NS, a namespace the webhook serves",
            );
        }
    }
    let params = PostParams { dry_run: true, ..PostParams::default() };
    match Api::<Pod>::namespaced(client.clone(), target).create(&params, &pod).await {
        Ok(answered) => match answered.annotations().get(PROBED_ANNOTATION) {
            Some(version) => report.pass(
                GROUP,
                NAME,
                format!("a dry-run pod in {target} came back patched by the webhook (watcher-operator {version})"),
            ),
            None => {
                let cause = likely_cause(report);
                report.fail(
                    GROUP,
                    NAME,
                    format!(
                        "a dry-run pod in {target} came back without the webhook's patch: kube-apiserver did not \
                         reach the webhook (failurePolicy Ignore let the pod through without an error){cause}"
                    ),
                    "fix the failed checks above; kube-apiserver's log names the error (`failed calling webhook`)",
                );
            }
        },
        Err(kube::Error::Api(status)) if status.code == 403 => report.fail(
            GROUP,
            NAME,
            format!("you may not create pods in {target}, even as a dry run: {}", status.message),
            "run `check` as a user who may create pods, or pass --probe-namespace NS",
        ),
        Err(error) => report.fail(
            GROUP,
            NAME,
            format!("the dry-run pod in {target} was refused: {error}"),
            "with failurePolicy Fail an unreachable webhook refuses every pod: fix the failed checks above",
        ),
    }
}

/// The first failed check of registration and operator, as " (likely cause: ...)".
pub(super) fn likely_cause(report: &Report) -> String {
    report
        .checks
        .iter()
        .find(|c| c.status == Status::Failed && matches!(c.group, "registration" | "operator"))
        .map(|c| format!("; likely cause: {}: {}", c.name, c.message))
        .unwrap_or_default()
}
