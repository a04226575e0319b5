//! Pods that are meant to end, end: a pod whose `restartPolicy` is `Never` or `OnFailure` (a
//! Job's, a CronJob's, an At's) and that carries Watchers' sidecars as regular containers
//! (servers before 1.29, `nativeSidecar: Never`) would run for ever after its app, the
//! sidecars running on. The webhook labels such a pod `watcher.dev/end-sidecars=true` and names
//! the sidecars in the annotation of that name; this controller watches those pods only and,
//! once no app container will run again, writes `watcher.dev/sidecars-ended` on the pod.
//! Sidecars that mount the downward API volume `watcher-ended` (a command under
//! `watcher-supervise`, watcher-agent) read it there and end by themselves, exit 0, with no
//! change to the spec: no restart counted, which a Job under `OnFailure` would count toward its
//! `backoffLimit`. The others (another image's entrypoint, pods admitted before the volume)
//! are switched to the supervisor's image (the image of the pod's own `watcher-supervise` init
//! container, else `--supervisor-image`): the kubelet restarts a container whose spec changed
//! whatever the restart policy, stopping it (its own SIGTERM handling) and starting it in that
//! image, where it exits 0. The pod then ends as its app containers decide.
//!
//! Decided from what the pod carries (its spec, its annotation, the kubelet's container
//! statuses), never from having seen a container end.

use std::sync::Arc;
use std::time::Duration;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, instrument, warn};
use watcher_api::{END_SIDECARS_LABEL, ENDED_VOLUME, SUPERVISOR_NAME, annotation};

use crate::{Context, Error, Result};

pub mod pod;
use pod::ContainerStatus;
pub use pod::EndingPod;

const CONTROLLER: &str = "ending";
/// How long sidecars may take to end once switched, beyond the pod's termination grace period
/// (the kubelet's SIGTERM to SIGKILL), before the pod is reported as kept from ending.
const ENDING_MARGIN: Duration = Duration::from_secs(30);
/// The kubelet's default termination grace period.
const DEFAULT_GRACE: i64 = 30;
/// How long after `watcher.dev/sidecars-ended` sidecars that read it may still run before it is
/// written again: they end within seconds of reading it (the supervisor's grace period, the
/// agent's linger), and the kubelet, which refreshes the downward API volume when the pod
/// changes, now and then misses a change until its next sync of the pod, a minute on
/// (kubernetes/kubernetes#59813); another change is refreshed at once.
const REMIND_AFTER: i64 = 10;

/// Runs the ending controller until shutdown: pods labelled `watcher.dev/end-sidecars=true`.
pub async fn run(ctx: Arc<Context>, supervisor_image: String) {
    let api = Api::<EndingPod>::all(ctx.client.clone());
    let selector = format!("{END_SIDECARS_LABEL}=true");
    let (store, pods, _) = crate::cached_watch(api, watcher::Config::default().labels(&selector), strip);
    let controller = Controller::for_stream(pods, store);
    let image = Arc::new(supervisor_image);
    crate::run_controller(CONTROLLER, controller, crate::controller_config(), ctx, image, reconcile).await;
}

/// Keeps of `pod` what this controller reads (decoded, it holds only the fields [`next`]
/// reads: [`pod::EndingPod`]): of its metadata, its name, namespace, uid, resourceVersion and
/// deletion, the annotations it reads (kept apart: [`pod::Marks`]); of each container, the mount of the ended file
/// only; of the init containers, the supervisor's. [`next`] decides the same on what is kept as
/// on the whole pod.
pub fn strip(pod: &mut EndingPod) {
    let meta = &mut pod.metadata;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.managed_fields = None;
    // The three it reads, kept apart ([`pod::Marks`]); the rest dropped.
    if let Some(mut annotations) = meta.annotations.take() {
        pod.marks = pod::Marks::take(&mut annotations);
    }
    if let Some(spec) = &mut pod.spec {
        for container in &mut spec.containers {
            if let Some(mounts) = &mut container.volume_mounts {
                mounts.retain(|m| m.name == ENDED_VOLUME);
            }
            if container.volume_mounts.as_ref().is_some_and(Vec::is_empty) {
                container.volume_mounts = None;
            }
        }
        if let Some(init) = &mut spec.init_containers {
            init.retain(|c| c.name == SUPERVISOR_NAME);
            for container in init {
                container.volume_mounts = None;
            }
        }
    }
}

/// What to do with a pod, from what it carries.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Nothing: not meant to end, already ended, being deleted, or no sidecar named.
    Nothing,
    /// The pod has ended (or is being deleted) and still carries the mark of sidecars that
    /// could not end: take it away, so that the Watcher counts it no more.
    Unmark,
    /// An app container runs, has yet to run, or will be restarted.
    Wait,
    /// Every app container has ended for good: write `watcher.dev/sidecars-ended` (the sidecars
    /// in `own` end by themselves), and switch the sidecars in `switch` (index in
    /// `spec.containers`, name) to the supervisor's image.
    End { own: Vec<String>, switch: Vec<(usize, String)> },
    /// Switched: these sidecars have still to stop. `overdue`: they have run longer than the
    /// pod's grace period and a margin since `watcher.dev/sidecars-ended`; `recheck`: when to
    /// look again (at that deadline, or in a second once past it).
    Ending { running: Vec<String>, overdue: bool, recheck: Duration },
    /// These sidecars read `watcher.dev/sidecars-ended` and still run [`REMIND_AFTER`] s after
    /// it was written, promptly after the app ended: write it again (the time it is written),
    /// once, so that the kubelet refreshes the volume on this change of the pod.
    Remind { running: Vec<String> },
}

/// The next step for `pod`, its sidecars to be switched to `image`, at `now` (seconds since
/// the Unix epoch).
pub fn next(pod: &EndingPod, image: &str, now: i64) -> Next {
    let (Some(spec), status) = (pod.spec.as_ref(), pod.status.as_ref()) else { return Next::Nothing };
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    let phase = status.and_then(|s| s.phase.as_deref());
    let over = pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed"));
    if over && pod.mark(annotation::SidecarsCannotEnd::KEY).is_some() {
        return Next::Unmark;
    }
    let os = spec.os.as_ref().map(|os| os.name.as_str());
    if over || !watcher_api::meant_to_end(spec.restart_policy.as_deref(), os) {
        return Next::Nothing;
    }
    let named = pod.mark(annotation::EndSidecars::KEY).map(annotation::EndSidecars::decode).unwrap_or_default();
    let (sidecars, apps): (Vec<_>, Vec<_>) =
        spec.containers.iter().enumerate().partition(|(_, c)| named.contains(&c.name.as_str()));
    if sidecars.is_empty() || apps.is_empty() {
        return Next::Nothing;
    }
    let statuses = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let reported = |name: &str| statuses.iter().find(|s| s.name == name);
    if !apps.iter().all(|(_, c)| reported(&c.name).is_some_and(|s| ended_for_good(s, restart))) {
        return Next::Wait;
    }
    let (own, others): (Vec<_>, Vec<_>) = sidecars.iter().partition(|(_, c)| ends_by_itself(c));
    let switch: Vec<(usize, String)> = others
        .iter()
        .filter(|(_, c)| c.image.as_deref() != Some(image))
        .map(|(index, c)| (*index, c.name.clone()))
        .collect();
    if !switch.is_empty() || pod.mark(annotation::SidecarsEnded::KEY).is_none() {
        let own = own.iter().map(|(_, c)| c.name.clone()).collect();
        return Next::End { own, switch };
    }
    let running: Vec<String> = sidecars
        .iter()
        .filter(|(_, c)| reported(&c.name).is_none_or(|s| s.state.as_ref().is_none_or(|s| s.terminated.is_none())))
        .map(|(_, c)| c.name.clone())
        .collect();
    if running.is_empty() {
        return Next::Nothing; // the kubelet has yet to write the phase
    }
    let ended = pod.mark(annotation::SidecarsEnded::KEY).map(annotation::SidecarsEnded::decode);
    let since = ended.and_then(Result::ok).map(|t| t.as_second());
    let grace = spec.termination_grace_period_seconds.unwrap_or(DEFAULT_GRACE).max(0);
    let deadline = since.unwrap_or(now) + grace + ENDING_MARGIN.as_secs() as i64;
    let overdue = now >= deadline;
    // Written promptly after the app's end (not written again yet), read by a sidecar still
    // running: written again at `since + REMIND_AFTER`.
    let reads_it = |name: &String| sidecars.iter().any(|(_, c)| &c.name == name && ends_by_itself(c));
    let app_ended = apps.iter().filter_map(|(_, c)| finished_at(reported(&c.name)?)).max();
    let remind_at = since
        .filter(|since| running.iter().any(reads_it) && app_ended.is_some_and(|end| *since < end + REMIND_AFTER))
        .map(|since| since + REMIND_AFTER);
    if remind_at.is_some_and(|at| now >= at) && !overdue {
        return Next::Remind { running };
    }
    let look = remind_at.map_or(deadline, |at| at.min(deadline));
    let recheck = Duration::from_secs(u64::try_from(look - now).unwrap_or(0).max(1));
    Next::Ending { running, overdue, recheck: if overdue { ENDING_MARGIN } else { recheck } }
}

/// When a container's last run ended (seconds since the Unix epoch), as the kubelet says.
fn finished_at(status: &ContainerStatus) -> Option<i64> {
    let terminated = status.state.as_ref()?.terminated.as_ref()?;
    Some(terminated.finished_at.as_ref()?.0.as_second())
}

/// Whether `sidecar` ends by itself once `watcher.dev/sidecars-ended` is written: it mounts the
/// downward API volume that holds it (the webhook's, for a command under the supervisor and for
/// watcher-agent).
fn ends_by_itself(sidecar: &pod::Container) -> bool {
    sidecar.volume_mounts.iter().flatten().any(|m| m.name == ENDED_VOLUME)
}

/// Whether an app container has ended and will not run again: terminated, and under
/// `OnFailure` with exit code 0 (a failed one is restarted).
fn ended_for_good(status: &ContainerStatus, restart: &str) -> bool {
    let terminated = status.state.as_ref().and_then(|s| s.terminated.as_ref());
    terminated.is_some_and(|t| restart == "Never" || t.exit_code == 0)
}

/// The JSON patch that records that the app has ended (`now`, RFC 3339) and switches `sidecars`
/// (none where every sidecar ends by itself) to `image`; each container's name is tested
/// first, so a patch never lands on another container.
pub fn end_patch(sidecars: &[(usize, String)], image: &str, now: &str) -> Vec<PatchOperation> {
    let mut ops = Vec::with_capacity(sidecars.len() * 2 + 1);
    for (index, name) in sidecars {
        let at = index.to_string();
        ops.push(PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["spec", "containers", &at, "name"]),
            value: Value::String(name.clone()),
        }));
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["spec", "containers", &at, "image"]),
            value: Value::String(image.to_owned()),
        }));
    }
    ops.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(["metadata", "annotations", annotation::SidecarsEnded::KEY]),
        value: Value::String(now.to_owned()),
    }));
    ops
}

/// `EndsWithoutRestart` of a Watcher's (or ClusterWatcher's) status: `False`/`ImageSwitch`
/// where its sidecar is ended by a restart in pods that are meant to end, said before any pod;
/// `None` where it ends by itself (the condition is then taken away).
pub fn restart_condition(spec: &watcher_api::WatcherSpec, generation: Option<i64>) -> Option<watcher_api::Condition> {
    let why = spec.ends_by_restart()?.to_string();
    Some(watcher_api::condition(watcher_api::types::ENDS_WITHOUT_RESTART, false, "ImageSwitch", why, generation))
}

/// Sets or takes away `EndsWithoutRestart` in `conditions`, as `spec` says.
pub fn set_restart_condition(
    conditions: &mut Vec<watcher_api::Condition>,
    spec: &watcher_api::WatcherSpec,
    generation: Option<i64>,
) {
    match restart_condition(spec, generation) {
        Some(condition) => watcher_api::set_condition(conditions, condition),
        None => conditions.retain(|c| c.type_ != watcher_api::types::ENDS_WITHOUT_RESTART),
    }
}

/// The image the sidecars of `pod` are switched to: the one its own `watcher-supervise` init
/// container has (an ImagePolicy may have rewritten it to a mirror, the only registry the node
/// reaches), else `default` (`--supervisor-image`: a pod whose sidecars run their entrypoint).
pub fn supervisor_image<'p>(pod: &'p EndingPod, default: &'p str) -> &'p str {
    let init = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref());
    let own = init.into_iter().flatten().find(|c| c.name == SUPERVISOR_NAME).and_then(|c| c.image.as_deref());
    own.filter(|image| !image.is_empty()).unwrap_or(default)
}

/// Ends the sidecars of `pod` once its app has ended, switching those that cannot end by
/// themselves to `default_image` (the supervisor's, `--supervisor-image`) or the pod's own.
#[instrument(skip(pod, ctx, default_image), fields(namespace = pod.namespace(), pod = pod.name_any()))]
async fn reconcile(pod: Arc<EndingPod>, ctx: Arc<Context>, default_image: Arc<String>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let namespace = pod.namespace().ok_or_else(|| Error::MissingNamespace(pod.name_any()))?;
    let now = jiff::Timestamp::now();
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let image = supervisor_image(&pod, &default_image);
    let action: Result<Action> = match next(&pod, image, now.as_second()) {
        Next::Nothing | Next::Wait => Ok(Action::await_change()),
        Next::Unmark => {
            let unmark = json!({"metadata": {"annotations": {annotation::SidecarsCannotEnd::KEY: null}}});
            match api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&unmark)).await {
                Ok(_) => Ok(Action::await_change()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
                Err(error) => Err(error.into()),
            }
        }
        Next::End { own, switch } => {
            let switched: Vec<&str> = switch.iter().map(|(_, n)| n.as_str()).collect();
            let patch = json_patch::Patch(end_patch(&switch, image, &annotation::SidecarsEnded::encode(now)));
            if let Err(error) = api.patch(&pod.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
                return Err(error.into());
            }
            info!(own = ?own, switched = ?switched, "the app containers have ended: ending the sidecars");
            let note = ending_note(&own, &switched, image);
            ctx.publish(&pod.object_ref(&()), EventType::Normal, "SidecarsEnding", "End", note).await;
            Ok(Action::requeue(ENDING_MARGIN))
        }
        Next::Remind { running } => {
            let mark = json!({"metadata": {"annotations": {annotation::SidecarsEnded::KEY: annotation::SidecarsEnded::encode(now)}}});
            match api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&mark)).await {
                Ok(_) => {
                    info!(sidecars = ?running, "sidecars still run {REMIND_AFTER} s after they were told the app ended: told again");
                    Ok(Action::requeue(Duration::from_secs(REMIND_AFTER.unsigned_abs())))
                }
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
                Err(error) => Err(error.into()),
            }
        }
        Next::Ending { running, overdue, recheck } => {
            let marked = pod
                .mark(annotation::SidecarsCannotEnd::KEY)
                .map(annotation::SidecarsCannotEnd::decode)
                .unwrap_or_default();
            let names = annotation::SidecarsCannotEnd::encode(&running);
            if overdue && marked != running.iter().map(String::as_str).collect::<Vec<_>>() {
                // Counted on the Watcher (`status.pods.cannotEnd`) from what the pod carries.
                let mark = json!({"metadata": {"annotations": {annotation::SidecarsCannotEnd::KEY: names}}});
                if let Err(error) = api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&mark)).await {
                    return Err(error.into());
                }
                let note = format!(
                    "The app containers have ended, but the sidecars {} still run: the pod cannot end. \
                     Does the sidecar stop on SIGTERM, is the image {image} pullable on this node \
                     (kubectl describe pod)?",
                    running.join(", "),
                );
                warn!(sidecars = ?running, "sidecars still run after their app ended");
                ctx.publish(&pod.object_ref(&()), EventType::Warning, "SidecarCannotEnd", "End", note).await;
            }
            Ok(Action::requeue(recheck))
        }
    };
    if action.is_ok() {
        ctx.reconciled(&crate::object_key(CONTROLLER, pod.as_ref()));
    }
    action
}

/// The Event's words for sidecars being ended: those that end by themselves, those switched.
fn ending_note(own: &[String], switched: &[&str], image: &str) -> String {
    let mut parts = Vec::new();
    if !own.is_empty() {
        parts.push(format!("{} end by themselves", own.join(", ")));
    }
    if !switched.is_empty() {
        parts.push(format!("{} switched to {image} (a restart the kubelet counts)", switched.join(", ")));
    }
    format!("The app containers have ended: ending the sidecars: {}", parts.join("; "))
}

#[cfg(test)]
mod tests;
