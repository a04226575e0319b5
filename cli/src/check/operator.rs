//! The installed operator: its Service's endpoints, Deployment and leader Lease.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};

use super::registration::Registered;
use super::{OPERATOR_NAME, Report};

/// The Service's endpoints, the Deployment and the Lease; by URL, the first two are skipped.
pub(super) async fn operator(client: &Client, report: &mut Report, namespace: &str, registered: Option<&Registered>) {
    const GROUP: &str = "operator";
    let by_url = registered.is_some_and(|r| r.service.is_none());
    if by_url {
        let skipped = "skipped: the webhook is registered by URL (the operator runs outside the cluster)";
        report.pass(GROUP, "Service endpoints", skipped);
        report.pass(GROUP, "Deployment", skipped);
    } else {
        let (service_namespace, service) = registered
            .and_then(|r| r.service.clone())
            .unwrap_or_else(|| (namespace.to_owned(), OPERATOR_NAME.to_owned()));
        endpoints(client, report, &service_namespace, &service).await;
        deployment(client, report, namespace).await;
    }
    lease(client, report, namespace, SystemTime::now()).await;
}

pub(super) async fn endpoints(client: &Client, report: &mut Report, namespace: &str, name: &str) {
    const GROUP: &str = "operator";
    let pods = format!("kubectl -n {namespace} get pods -l app.kubernetes.io/name={OPERATOR_NAME}");
    match Api::<Service>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("Service {namespace}/{name}, which the webhook configuration names, not found"),
                "apply the install again: `kubectl apply -k deploy/` (or `helm upgrade`)",
            );
        }
        Err(error) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("cannot read Service {namespace}/{name}: {error}"),
                "check your access",
            );
        }
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await;
    let ready = match slices {
        Ok(list) => list
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            // The API: a missing `ready` means ready.
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .count(),
        Err(error) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("cannot list the EndpointSlices of Service {namespace}/{name}: {error}"),
                "check your access: `kubectl get endpointslices`",
            );
        }
    };
    if ready == 0 {
        report.fail(
            GROUP,
            "Service endpoints",
            format!("Service {namespace}/{name} has no ready endpoints: kube-apiserver cannot reach the webhook"),
            &format!(
                "are the operator's pods running and ready? `{pods}`, then `kubectl -n {namespace} describe pods`"
            ),
        );
    } else {
        report.pass(GROUP, "Service endpoints", format!("Service {namespace}/{name} has {ready} ready endpoint(s)"));
    }
}

pub(super) async fn deployment(client: &Client, report: &mut Report, namespace: &str) {
    const GROUP: &str = "operator";
    let describe = format!("`kubectl -n {namespace} describe deployment {OPERATOR_NAME}`");
    match Api::<Deployment>::namespaced(client.clone(), namespace).get_opt(OPERATOR_NAME).await {
        Ok(Some(deployment)) => {
            match pods_that_end(&deployment) {
                Ok(message) => report.pass(GROUP, "pods that end", message),
                Err(message) => report.warn(
                    GROUP,
                    "pods that end",
                    message,
                    "add `pods` to WATCHER_CONTROLLERS (chart value `controllers`): Jobs, CronJobs and Ats whose \
                     Watcher sidecar is a regular container never end without it (docs/injection.md)",
                ),
            }
            let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let available = deployment.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0);
            if available > 0 {
                report.pass(
                    GROUP,
                    "Deployment",
                    format!("{namespace}/{OPERATOR_NAME}: {available} of {wanted} replicas available"),
                );
            } else {
                report.fail(
                    GROUP,
                    "Deployment",
                    format!("{namespace}/{OPERATOR_NAME}: 0 of {wanted} replicas available"),
                    &format!(
                        "{describe} and `kubectl -n {namespace} get pods` show why (image pull, probes, scheduling)"
                    ),
                );
            }
        }
        Ok(None) => report.fail(
            GROUP,
            "Deployment",
            format!("Deployment {namespace}/{OPERATOR_NAME} not found"),
            "install the operator, or pass its namespace with -n",
        ),
        Err(error) => report.fail(GROUP, "Deployment", format!("cannot read it: {error}"), "check your access"),
    }
}

/// Whether the installed operator ends the regular sidecars of pods that are meant to end: it
/// runs the `pods` controller (its `--controllers` or `WATCHER_CONTROLLERS`, default all), and
/// with which supervisor image.
pub(crate) fn pods_that_end(deployment: &Deployment) -> Result<String, String> {
    let template = deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let container = template.and_then(|s| s.containers.first());
    let args = container.and_then(|c| c.args.clone()).unwrap_or_default();
    let vars = container.and_then(|c| c.env.as_ref()).into_iter().flatten();
    let env = vars.filter_map(|e| Some((e.name.clone(), e.value.clone()?))).collect();
    let options = crate::deployed_options(&args, &env).map_err(|error| {
        format!("cannot read the operator's --controllers and --supervisor-image: {}", error.kind())
    })?;
    if !options.controllers.contains(&crate::ControllerName::Pods) {
        let name = |c: &crate::ControllerName| clap::ValueEnum::to_possible_value(c).map(|v| v.get_name().to_owned());
        let list: Vec<String> = options.controllers.iter().filter_map(name).collect();
        return Err(format!(
            "the operator runs the controllers {}, not `pods`: the regular sidecars of pods that are meant to end \
             (Jobs, CronJobs, Ats) are never ended",
            list.join(",")
        ));
    }
    Ok(format!(
        "the `pods` controller ends the regular sidecars of pods that are meant to end (supervisor image {})",
        options.supervisor_image
    ))
}

/// The Lease of the replica that runs the controllers: held, and renewed within its duration.
pub(super) async fn lease(client: &Client, report: &mut Report, namespace: &str, now: SystemTime) {
    const GROUP: &str = "operator";
    let logs = format!("`kubectl -n {namespace} get pods` and `kubectl -n {namespace} logs deploy/{OPERATOR_NAME}`");
    let lease = match Api::<Lease>::namespaced(client.clone(), namespace).get_opt(OPERATOR_NAME).await {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            return report.warn(
                GROUP,
                "leader Lease",
                format!("Lease {namespace}/{OPERATOR_NAME} not found: no replica has led (or leader election is off)"),
                &format!(
                    "the controllers run in the Lease holder; with --leader-election=false there is none. Else {logs}"
                ),
            );
        }
        Err(error) => {
            return report.fail(GROUP, "leader Lease", format!("cannot read it: {error}"), "check your access");
        }
    };
    let spec = lease.spec.unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let renewed = spec.renew_time.map(|t| SystemTime::from(t.0));
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0).unsigned_abs().into());
    match (holder, renewed) {
        (Some(holder), Some(renewed)) if now < renewed + duration => report.pass(
            GROUP,
            "leader Lease",
            format!("held by {holder}, renewed {} ago: the controllers run", ago(now, renewed)),
        ),
        (Some(holder), Some(renewed)) => report.fail(
            GROUP,
            "leader Lease",
            format!(
                "held by {holder}, last renewed {} ago (it lasts {}s): no replica runs the controllers",
                ago(now, renewed),
                duration.as_secs()
            ),
            &format!("the holder stopped or lost the API server; {logs}"),
        ),
        _ => report.fail(
            GROUP,
            "leader Lease",
            format!("Lease {namespace}/{OPERATOR_NAME} is not held: no replica runs the controllers"),
            &logs,
        ),
    }
}

pub(super) fn ago(now: SystemTime, then: SystemTime) -> String {
    let seconds = now.duration_since(then).unwrap_or_default().as_secs();
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        _ => format!("{}h", seconds / 3600),
    }
}
