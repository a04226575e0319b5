//! At → one owned pod that runs the command at the scheduled time.
//!
//! The pod has a deterministic name and is created only if absent, before the status records
//! it: a crash at any point finds the same pod on the next reconcile, never makes a second one,
//! and never mistakes a pod not yet created for one that was deleted. Pods are read from the
//! controller's own cache; only a pod the status names and the cache lacks is read from the API
//! server, to tell a deleted pod from one the cache has not seen yet.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument};
use watcher_api::{
    AT_LABEL, At, AtPhase, AtStatus, DEFAULT_AT_IMAGE, MANAGED_BY, MANAGED_BY_LABEL, condition, set_condition,
};
use watcher_api::{reasons, types};

use crate::owned_pods::OwnedPods;
use crate::{Context, Error, Result};

const CONTROLLER: &str = "at";
/// The container that runs the command.
const CONTAINER: &str = "command";

/// Runs the At controller until shutdown.
pub async fn run(ctx: Arc<Context>) {
    let (controller, pods) = OwnedPods::controller::<At>(&ctx, AT_LABEL);
    crate::run_controller(CONTROLLER, controller, crate::controller_config(), ctx, Arc::new(pods), reconcile).await;
}

/// What to do for an At, decided from the At, its pod and the time.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// Create the pod now.
    pub create_pod: bool,
    /// Delete the finished pod now (its TTL has passed).
    pub delete_pod: bool,
    /// The status the At should have.
    pub status: AtStatus,
    /// When to look again, if no event comes first.
    pub requeue: Option<Duration>,
}

/// The name of the pod of the At `at_name`: fixed, so a restart finds the pod it made.
pub fn pod_name(at_name: &str) -> String {
    const SUFFIX: &str = "-at";
    // Pod names are DNS subdomains of at most 253 characters.
    if at_name.len() + SUFFIX.len() <= 253 {
        format!("{at_name}{SUFFIX}")
    } else {
        let hash = watcher_api::stable_hash(&at_name);
        let keep: String = at_name.chars().take(253 - SUFFIX.len() - hash.len() - 1).collect();
        format!("{keep}-{hash}{SUFFIX}")
    }
}

/// The next step for `at`, whose pod (by its fixed name) is `pod`, at time `now`.
pub fn plan(at: &At, pod: Option<&Pod>, now: Timestamp) -> Plan {
    let current = at.status.clone().unwrap_or_default();
    let generation = at.meta().generation;
    let mut plan = Plan { create_pod: false, delete_pod: false, status: current.clone(), requeue: None };
    plan.status.observed_generation = generation;

    let finished = current.phase.is_some_and(AtPhase::is_finished);
    if finished {
        // Final: only the TTL of the pod is left to honour.
        if let (Some(ttl), Some(_), Some(done)) = (at.spec.ttl_seconds_after_finished, pod, &current.completion_time) {
            let expires = done.0 + jiff::SignedDuration::from_secs(ttl);
            if now >= expires {
                plan.delete_pod = true;
            } else {
                plan.requeue = Some(until(now, expires));
            }
        }
        return plan;
    }

    let schedule = match at.spec.schedule.parse::<Timestamp>() {
        Ok(schedule) => schedule,
        Err(error) => {
            let message = format!("spec.schedule {:?} is not an RFC 3339 time: {error}", at.spec.schedule);
            finish(&mut plan.status, AtPhase::Failed, "InvalidSchedule", message, None, now, generation);
            return plan;
        }
    };

    match pod {
        Some(pod) => follow_pod(&mut plan.status, pod, now, generation),
        None if current.pod_name.is_some() => {
            let message = format!("pod {} was deleted before the command finished", pod_name(&at.name_any()));
            finish(&mut plan.status, AtPhase::Failed, "PodDeleted", message, None, now, generation);
        }
        None if now < schedule => {
            set_phase(&mut plan.status, AtPhase::Pending, "Scheduled", format!("runs at {schedule}"), generation);
            plan.requeue = Some(until(now, schedule));
        }
        None => {
            let deadline = at.spec.starting_deadline_seconds.map(|s| schedule + jiff::SignedDuration::from_secs(s));
            if deadline.is_some_and(|deadline| now > deadline) {
                let message = format!(
                    "first seen at {now}, later than the schedule {schedule} plus startingDeadlineSeconds {}",
                    at.spec.starting_deadline_seconds.unwrap_or_default()
                );
                finish(&mut plan.status, AtPhase::Failed, "Missed", message, None, now, generation);
            } else {
                plan.create_pod = true;
                plan.status.pod_name = Some(pod_name(&at.name_any()));
                set_phase(&mut plan.status, AtPhase::Pending, "PodCreated", "the pod is starting".into(), generation);
            }
        }
    }
    plan
}

/// The At's phase from its pod's.
fn follow_pod(status: &mut AtStatus, pod: &Pod, now: Timestamp, generation: Option<i64>) {
    status.pod_name = pod.metadata.name.clone();
    let pod_status = pod.status.as_ref();
    let terminated = pod_status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .and_then(|state| state.terminated.as_ref());
    status.start_time = pod_status.and_then(|s| s.start_time.clone()).or(status.start_time.take());
    match pod_status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => {
            let done = terminated.and_then(|t| t.finished_at.clone());
            status.exit_code = Some(terminated.map_or(0, |t| t.exit_code));
            finish(status, AtPhase::Succeeded, "Completed", "the command exited 0".into(), done, now, generation);
        }
        Some("Failed") => {
            let done = terminated.and_then(|t| t.finished_at.clone());
            status.exit_code = terminated.map(|t| t.exit_code);
            let reason = terminated
                .and_then(|t| t.reason.clone())
                .or_else(|| pod_status.and_then(|s| s.reason.clone()))
                .unwrap_or_else(|| "Failed".into());
            let message = terminated
                .and_then(|t| t.message.clone())
                .or_else(|| pod_status.and_then(|s| s.message.clone()))
                .unwrap_or_else(|| match status.exit_code {
                    Some(code) => format!("the command exited {code}"),
                    None => "the pod failed".into(),
                });
            finish(status, AtPhase::Failed, &reason, message, done, now, generation);
        }
        Some("Running") => set_phase(status, AtPhase::Running, "Running", "the command is running".into(), generation),
        _ => set_phase(status, AtPhase::Pending, "PodCreated", "the pod is starting".into(), generation),
    }
}

fn set_phase(status: &mut AtStatus, phase: AtPhase, reason: &str, message: String, generation: Option<i64>) {
    status.phase = Some(phase);
    status.reason = Some(reason.to_owned());
    status.message = Some(message.clone());
    let done = phase.is_finished();
    let ready = phase == AtPhase::Succeeded;
    set_condition(&mut status.conditions, condition(types::READY, ready, reason, message, generation));
    if !done {
        status.completion_time = None;
    }
}

fn finish(
    status: &mut AtStatus,
    phase: AtPhase,
    reason: &str,
    message: String,
    done: Option<Time>,
    now: Timestamp,
    generation: Option<i64>,
) {
    set_phase(status, phase, reason, message, generation);
    status.completion_time = Some(done.unwrap_or(Time(now)));
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or_default()
}

/// The pod that runs the command.
pub fn desired_pod(at: &At) -> Option<Pod> {
    let owner = at.controller_owner_ref(&())?;
    let labels =
        BTreeMap::from([(AT_LABEL.to_owned(), at.name_any()), (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())]);
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&at.name_any())),
            namespace: at.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            active_deadline_seconds: at.spec.active_deadline_seconds,
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(at.spec.image.clone().unwrap_or_else(|| DEFAULT_AT_IMAGE.into())),
                command: Some(vec!["/bin/sh".into(), "-c".into(), at.spec.command.clone()]),
                resources: at.spec.resources.as_ref().and_then(watcher_api::PodResources::requirements),
                security_context: Some(crate::restricted_context()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    })
}

/// Creates the pod if the time has come, follows it, and records the phase.
#[instrument(skip(at, ctx, owned), fields(namespace = at.namespace(), at = at.name_any()))]
pub async fn reconcile(at: Arc<At>, ctx: Arc<Context>, owned: Arc<OwnedPods>) -> Result<Action> {
    reconcile_at(at, &ctx, &owned, Timestamp::now()).await
}

/// [`reconcile`] as of `now`.
async fn reconcile_at(at: Arc<At>, ctx: &Context, owned: &OwnedPods, now: Timestamp) -> Result<Action> {
    if !owned.is_listed() {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // the cache would say "no pod"
    }
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let namespace = at.namespace().ok_or_else(|| Error::MissingNamespace(at.name_any()))?;
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let name = pod_name(&at.name_any());
    let cached = owned.pods.get(&ObjectRef::new(&name).within(&namespace)).map(|pod| (*pod).clone());
    let mut pod = cached.filter(|pod| crate::is_controlled_by(pod, at.as_ref()));
    let recorded =
        at.status.as_ref().is_some_and(|s| s.pod_name.is_some() && !s.phase.is_some_and(AtPhase::is_finished));
    if pod.is_none() && recorded {
        // The status names a pod the cache does not hold: deleted, or created a moment before
        // the cache saw it. Only the API server can tell; this read happens once per such doubt.
        pod = pods.get_opt(&name).await?.filter(|pod| crate::is_controlled_by(pod, at.as_ref()));
    }
    let plan = plan(&at, pod.as_ref(), now);

    let mut plan = plan;
    if plan.create_pod {
        let desired = desired_pod(&at).ok_or_else(|| Error::MissingNamespace(at.name_any()))?;
        match pods.create(&PostParams::default(), &desired).await {
            Ok(_) => info!(pod = name, "created the pod"),
            // Made by an earlier reconcile whose status write was lost: the same pod, not a second.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(kube::Error::Api(status)) if crate::is_refusal(&status) => {
                refused(&mut plan, &status.message, at.meta().generation);
                let said = at.status.as_ref().and_then(|s| s.message.as_ref()) == plan.status.message.as_ref();
                let note = plan.status.message.clone().unwrap_or_default();
                crate::owned_pods::say_refused(ctx, at.as_ref(), &status.message, said, note).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    if plan.delete_pod
        && let Some(pod) = &pod
    {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => info!(pod = name, "deleted the finished pod: ttlSecondsAfterFinished passed"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    if at.status.as_ref() != Some(&plan.status) {
        let api = Api::<At>::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({"status": plan.status});
        api.patch_status(&at.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    ctx.reconciled(&crate::object_key(CONTROLLER, at.as_ref()));
    Ok(plan.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// kube-apiserver refused the pod (`message`, its words): no pod is recorded, the At stays
/// `Pending` saying so, and the pod is created again after [`crate::REFUSED_RETRY`] (a quota
/// raised, a LimitRange changed: it runs with no other step), unless the starting deadline
/// passes first.
pub fn refused(plan: &mut Plan, message: &str, generation: Option<i64>) {
    plan.create_pod = false;
    plan.status.pod_name = None;
    let message = crate::owned_pods::refusal(message);
    set_phase(&mut plan.status, AtPhase::Pending, reasons::POD_REFUSED, message, generation);
    plan.requeue = Some(plan.requeue.map_or(crate::REFUSED_RETRY, |r| r.min(crate::REFUSED_RETRY)));
}

#[cfg(test)]
mod tests;
