//! `watcher-operator check`: is the installation healthy? Each check reads the cluster once and
//! judges what it finds with the operator's own code (its CRDs, its certificate rules, its
//! webhook selectors); the admission probe sends a dry-run pod through kube-apiserver itself.
//! `--pre` asks instead whether the cluster can take an install.

mod admission;
mod agent_config;
mod cluster;
mod crds;
pub(crate) mod inject;
mod operator;
mod pod_security;
mod probe;
mod registration;
mod report;
mod resources;

use kube::Client;

use admission::admission_scope;
use cluster::{adoptable, cluster, permissions};
use crds::{crds, installed_crds};
use operator::operator;
use pod_security::{POD_SECURITY_CONFIG_KEY, POD_SECURITY_CONFIG_MAP};
use probe::probe;
use registration::registration;
pub(crate) use report::{Report, Status};

/// The Deployment, Service and Lease of an installed operator (`deploy/`, the Helm chart).
const OPERATOR_NAME: &str = "watcher-operator";
/// How to install or upgrade the CRDs.
const APPLY_CRDS: &str = "watcher-operator crds | kubectl apply --server-side -f -";

/// What `check` looks at.
#[derive(Clone, Debug)]
pub(crate) struct CheckOptions {
    /// The operator's namespace.
    pub(crate) namespace: String,
    /// Where the admission probe's dry-run pod is created.
    pub(crate) probe_namespace: String,
    /// The checks before an install instead.
    pub(crate) pre: bool,
}

/// Runs every check against the cluster of `client`.
pub(crate) async fn check(client: &Client, options: &CheckOptions) -> Report {
    let mut report = Report::default();
    let Some(version) = cluster(client, &mut report, options.pre).await else {
        return report; // nothing else can be read
    };
    if options.pre {
        permissions(client, &mut report, &options.namespace).await;
        adoptable(client, &mut report).await;
        installed_crds(client, &mut report, &version).await;
        return report;
    }
    crds(client, &mut report, &version).await;
    let registration = registration(client, &mut report, &options.namespace).await;
    if let Some(registered) = &registration {
        admission_scope(client, &mut report, &options.namespace, &version, &registered.configuration).await;
    }
    operator(client, &mut report, &options.namespace, registration.as_ref()).await;
    probe(client, &mut report, options, registration.as_ref()).await;
    report
}

#[cfg(test)]
mod tests;
