//! PodSet → `count` owned pods that print `message` and wait (a small ReplicaSet).
//!
//! A new template (message or image) rolls out one pod at a time: one pod of the new template
//! is added, and once it is Ready one old pod goes, so the Ready pods never drop below
//! `count - 1`. Pods without this PodSet as their controller are never touched.
//!
//! Pods are read from the controller's own cache, never listed per reconcile; a reconcile that
//! created or deleted pods waits for the cache to show those writes before the next one plans.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument};
use watcher_api::{
    DEFAULT_PODSET_IMAGE, MANAGED_BY, MANAGED_BY_LABEL, POD_TEMPLATE_HASH_LABEL, PODSET_LABEL, PodSet, PodSetStatus,
    condition, set_condition, stable_hash,
};
use watcher_api::{reasons, types};

use crate::owned_pods::OwnedPods;
use crate::runtime::lock;
use crate::{Context, Error, Result};

const CONTROLLER: &str = "podset";
const CONTAINER: &str = "greeter";
/// Prints the message, then waits; exits at once on SIGTERM so scale-down is quick.
const SCRIPT: &str = "echo \"$MESSAGE\"; trap 'exit 0' TERM; while true; do sleep 1; done";

/// How long a reconcile waits for the cache to show the pods it created or deleted before it
/// trusts the cache again anyway (a missed event).
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the PodSet controller keeps between reconciles: the pods of PodSets, cached, and the
/// creations and deletions the cache has not shown yet.
pub struct PodSetState {
    /// Pods labelled `watcher.dev/podset`.
    owned: OwnedPods,
    expectations: Mutex<HashMap<String, Expected>>,
}

/// Writes of one reconcile that the cache must show before the next one plans: otherwise it
/// would count pods it just created as missing and create them again.
pub(crate) struct Expected {
    created: Vec<String>,
    deleted: Vec<String>,
    since: Instant,
}

impl PodSetState {
    /// The state over `pods`, already listed, expecting `expectations` (for tests that fill the
    /// store themselves).
    #[cfg(test)]
    pub(crate) fn listed(
        pods: kube::runtime::reflector::Store<Pod>,
        expectations: HashMap<String, Expected>,
    ) -> Arc<Self> {
        Arc::new(Self { owned: OwnedPods::listed(pods), expectations: Mutex::new(expectations) })
    }

    /// Whether the cache shows what the last reconcile of `key` wrote (or it waited long enough).
    fn caught_up(&self, key: &str, owned: &[Pod]) -> bool {
        let mut expectations = lock(&self.expectations);
        let Some(expected) = expectations.get(key) else { return true };
        let present = |name: &String| owned.iter().any(|p| p.metadata.name.as_ref() == Some(name));
        let gone = |name: &String| {
            owned.iter().all(|p| p.metadata.name.as_ref() != Some(name) || p.metadata.deletion_timestamp.is_some())
        };
        let seen = expected.created.iter().all(present) && expected.deleted.iter().all(gone);
        if seen || expected.since.elapsed() > EXPECTATION_TIMEOUT {
            expectations.remove(key);
            return true;
        }
        false
    }
}

/// Runs the PodSet controller until shutdown.
pub async fn run(ctx: Arc<Context>) {
    let (controller, owned) = OwnedPods::controller::<PodSet>(&ctx, PODSET_LABEL);
    let state = Arc::new(PodSetState { owned, expectations: Mutex::default() });
    crate::run_controller(CONTROLLER, controller, crate::controller_config(), ctx, state, reconcile).await;
}

/// What to change, decided from the PodSet and the pods it owns.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// How many pods of the current template to create.
    pub create: usize,
    /// Names of the pods to delete.
    pub delete: Vec<String>,
    /// The status the PodSet should have.
    pub status: PodSetStatus,
}

/// The hash of what the pods run: a change replaces them.
pub fn template_hash(podset: &PodSet) -> String {
    let image = podset.spec.image.as_deref().unwrap_or(DEFAULT_PODSET_IMAGE);
    match podset.spec.resources.as_ref().filter(|r| **r != watcher_api::PodResources::default()) {
        // Without resources, the hash of the pods made before PodSets had them: no churn.
        None => stable_hash(&(&podset.spec.message, image)),
        Some(resources) => stable_hash(&(&podset.spec.message, image, resources)),
    }
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == types::READY && c.status == "True")
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The pods to delete first: not ready before ready, then newest first.
fn deletion_order(mut pods: Vec<&Pod>) -> Vec<&Pod> {
    pods.sort_by(|a, b| {
        is_ready(a).cmp(&is_ready(b)).then_with(|| b.creation_timestamp().cmp(&a.creation_timestamp()))
    });
    pods
}

/// The changes that bring `owned` (the PodSet's pods, any state) towards `spec.count` pods of
/// the current template.
pub fn plan(podset: &PodSet, owned: &[Pod]) -> Plan {
    let hash = template_hash(podset);
    let live: Vec<&Pod> = owned.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    let (new, old): (Vec<&Pod>, Vec<&Pod>) =
        live.iter().partition(|p| p.labels().get(POD_TEMPLATE_HASH_LABEL) == Some(&hash));
    let desired = usize::try_from(podset.spec.count).unwrap_or(0);
    let total = live.len();
    let names = |pods: Vec<&Pod>, n: usize| pods.into_iter().take(n).map(|p| p.name_any()).collect::<Vec<_>>();

    let (create, delete) = if desired == 0 {
        (0, names(deletion_order(live.clone()), total))
    } else if old.is_empty() {
        match total.cmp(&desired) {
            std::cmp::Ordering::Less => (desired - total, vec![]),
            std::cmp::Ordering::Greater => (0, names(deletion_order(new.clone()), total - desired)),
            std::cmp::Ordering::Equal => (0, vec![]),
        }
    } else if total < desired {
        (desired - total, vec![])
    } else if total > desired + 1 {
        // More than the one extra a rollout allows: old pods go first.
        (0, names(deletion_order(old.clone()), total - desired - 1))
    } else if !new.iter().all(|p| is_ready(p)) {
        (0, vec![]) // the new pod is starting: wait for it
    } else if total == desired + 1 {
        (0, names(deletion_order(old.clone()), 1))
    } else {
        (1, vec![]) // total == desired: add one pod of the new template
    };

    let mut status = podset.status.clone().unwrap_or_default();
    status.count = i32::try_from(live.iter().filter(|p| is_running(p)).count()).unwrap_or(i32::MAX);
    status.ready_count = i32::try_from(live.iter().filter(|p| is_ready(p)).count()).unwrap_or(i32::MAX);
    status.observed_generation = podset.meta().generation;
    if old.is_empty() {
        status.message = Some(podset.spec.message.clone());
    }
    let done = old.is_empty() && total == desired && new.iter().all(|p| is_ready(p));
    let (reason, message) = if done {
        ("Ready", format!("{desired} pods of the current template are ready"))
    } else if old.is_empty() {
        ("Scaling", format!("{} of {desired} pods ready", status.ready_count))
    } else {
        ("RollingOut", format!("{} of {desired} pods run the current template", new.len()))
    };
    set_condition(&mut status.conditions, condition(types::READY, done, reason, message, podset.meta().generation));
    Plan { create, delete, status }
}

/// A new pod of the current template.
pub fn desired_pod(podset: &PodSet) -> Option<Pod> {
    let owner = podset.controller_owner_ref(&())?;
    let labels = BTreeMap::from([
        (PODSET_LABEL.to_owned(), podset.name_any()),
        (POD_TEMPLATE_HASH_LABEL.to_owned(), template_hash(podset)),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ]);
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", podset.name_any())),
            namespace: podset.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: Some(5),
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(podset.spec.image.clone().unwrap_or_else(|| DEFAULT_PODSET_IMAGE.into())),
                command: Some(vec!["/bin/sh".into(), "-c".into(), SCRIPT.into()]),
                env: Some(vec![EnvVar {
                    name: "MESSAGE".into(),
                    value: Some(podset.spec.message.clone()),
                    ..EnvVar::default()
                }]),
                resources: podset.spec.resources.as_ref().and_then(watcher_api::PodResources::requirements),
                security_context: Some(crate::restricted_context()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    })
}

/// Creates and deletes pods towards the plan and records the status.
#[instrument(skip(podset, ctx, shared), fields(namespace = podset.namespace(), podset = podset.name_any()))]
pub async fn reconcile(podset: Arc<PodSet>, ctx: Arc<Context>, shared: Arc<PodSetState>) -> Result<Action> {
    if !shared.owned.is_listed() {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // the cache would say "no pods"
    }
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let namespace = podset.namespace().ok_or_else(|| Error::MissingNamespace(podset.name_any()))?;
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let key = crate::object_key(CONTROLLER, podset.as_ref());
    // The label is a hint; ownership is what counts.
    let owned: Vec<Pod> = shared
        .owned
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|p| p.labels().get(PODSET_LABEL) == Some(&podset.name_any()))
        .filter(|p| crate::is_controlled_by(p.as_ref(), podset.as_ref()))
        .map(|p| (**p).clone())
        .collect();
    if !shared.caught_up(&key, &owned) {
        return Ok(Action::requeue(Duration::from_secs(1))); // the pods' own events come first
    }
    let plan = plan(&podset, &owned);
    let mut expected = Expected { created: Vec::new(), deleted: plan.delete.clone(), since: Instant::now() };

    let mut plan = plan;
    let mut requeue = None;
    if plan.create > 0 {
        let pod = desired_pod(&podset).ok_or_else(|| Error::MissingNamespace(podset.name_any()))?;
        for _ in 0..plan.create {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(created) => expected.created.extend(created.metadata.name),
                Err(kube::Error::Api(status)) if crate::is_refusal(&status) => {
                    refused(&mut plan.status, &status.message, podset.meta().generation);
                    let note = plan.status.conditions.iter().find(|c| c.type_ == types::READY);
                    let note = note.map(|c| c.message.clone()).unwrap_or_default();
                    let said = said_already(&podset, &plan.status);
                    crate::owned_pods::say_refused(&ctx, podset.as_ref(), &status.message, said, note).await;
                    requeue = Some(crate::REFUSED_RETRY);
                    break;
                }
                Err(error) => return Err(error.into()),
            }
        }
        info!(created = expected.created.len(), "created pods");
    }
    if !expected.created.is_empty() || !expected.deleted.is_empty() {
        lock(&shared.expectations).insert(key.clone(), expected);
    }
    for name in &plan.delete {
        let uid = owned.iter().find(|p| &p.name_any() == name).and_then(ResourceExt::uid);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid, resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(name, &params).await {
            Ok(_) => info!(pod = name, "deleted pod"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    if podset.status.as_ref() != Some(&plan.status) {
        let api = Api::<PodSet>::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({"status": plan.status});
        api.patch_status(&podset.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    ctx.reconciled(&key);
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// kube-apiserver refused a pod (`message`, its words): `Ready` says so until a pod is created
/// again (after [`crate::REFUSED_RETRY`]).
pub fn refused(status: &mut PodSetStatus, message: &str, generation: Option<i64>) {
    let message = crate::owned_pods::refusal(message);
    set_condition(&mut status.conditions, condition(types::READY, false, reasons::POD_REFUSED, message, generation));
}

/// Whether the PodSet's status already says what `status` says of a refusal.
fn said_already(podset: &PodSet, status: &PodSetStatus) -> bool {
    let ready = |s: &PodSetStatus| s.conditions.iter().find(|c| c.type_ == types::READY).map(|c| c.message.clone());
    podset.status.as_ref().and_then(ready) == ready(status)
}

#[cfg(test)]
mod tests;
