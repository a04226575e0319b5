//! A rollout's steps: what is planned from the cached pods, the revisions rebuilt and kept, the
//! in-place patches and evictions written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::{info, warn};
use watcher_api::{PodCounts, Watcher, annotation};

use super::rollout;
use super::status::set_rollout_condition;
use super::store::CountedPod;
use super::{EVICTION_RETRY, PodsState, Subject};
use crate::Context;
use crate::Result;
use crate::revisions;
use crate::runtime::lock;

/// How often a rollout in flight is looked at again (pod status changes also wake it).
pub(super) const IN_PLACE_RECHECK: Duration = Duration::from_secs(15);

/// What one step of a rollout writes, planned from the cached pods.
pub(super) struct Step {
    pub(super) revisions: revisions::RevisionPlan,
    pub(super) rollout: rollout::Rollout,
    /// The current revision's name, for the status.
    pub(super) current: String,
    /// The stable revision's name, for the status (see [`revisions::stable_revision`]).
    pub(super) stable: String,
}

/// Plans a step of `watcher`'s rollout over `pods` (those of `namespaces`, counted as
/// `counts`): the revisions kept (the current spec's created, the oldest beyond the history
/// that no pod carries deleted, never the stable one), the stable revision, the in-place
/// patches and the evictions.
pub(super) fn plan_step(
    watcher: &Watcher,
    pods: &[&CountedPod],
    state: &PodsState,
    namespaces: &[String],
    counts: &PodCounts,
    rebuilt: &[Arc<ControllerRevision>],
) -> Step {
    let mut all = state.revisions.store.state();
    all.extend(
        rebuilt.iter().filter(|r| !all.iter().any(|a| a.metadata.name == r.metadata.name)).cloned().collect::<Vec<_>>(),
    );
    let mine = revisions::revisions_of(watcher, &all);
    let name = watcher.name_any();
    let mut carried_by: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        for (_, hash) in annotation::Injected::read(pod.annotations()).into_iter().filter(|(n, _)| *n == name) {
            *carried_by.entry(hash.to_owned()).or_default() += 1;
        }
    }
    let carried: BTreeSet<String> = carried_by.keys().cloned().collect();
    let complete = counts.injected == counts.up_to_date;
    let stable = revisions::stable_revision(watcher, &mine, &carried_by, complete);
    let current = revisions::revision_name(&name, watcher.spec.spec_hash());
    let policies: Vec<(&str, Vec<Arc<watcher_api::CompiledPolicy>>)> = namespaces
        .iter()
        .map(|ns| (ns.as_str(), state.policies.as_ref().map(|p| p.policies_for(ns)).unwrap_or_default()))
        .filter(|(_, policies)| !policies.is_empty())
        .collect();
    let rules: rollout::Rules<'_> =
        policies.iter().map(|(ns, policies)| (*ns, policies.iter().flat_map(|p| p.valid_rules()).collect())).collect();
    Step {
        revisions: revisions::plan_revisions(watcher, &revisions_namespace(watcher, state), &mine, &carried, &stable),
        rollout: rollout::plan(watcher, pods, &mine, &rules, jiff::Timestamp::now()),
        current,
        stable,
    }
}

/// Specs rebuilt per reconcile at most (each a read of one pod and a search of its spec).
pub(super) const REBUILDS_PER_RECONCILE: usize = 3;

/// Specs remembered as tried (a bound on memory; forgotten all at once when reached).
pub(super) const REBUILDS_REMEMBERED: usize = 10_000;

/// The revisions of specs that pods carry and no revision holds (injected and replaced before
/// any controller saw them), rebuilt from one pod each ([`revisions::rebuild`]) and written, so
/// the stable revision is one that pods carry. Each spec is tried once per process.
pub(super) async fn rebuild_unkept(
    watcher: &Watcher,
    namespaces: &[String],
    ctx: &Context,
    state: &PodsState,
) -> Result<Vec<Arc<ControllerRevision>>> {
    let name = watcher.name_any();
    let current = watcher.spec.spec_hash();
    let all = state.revisions.store.state();
    let mine = revisions::revisions_of(watcher, &all);
    let kept = |hash: &str| {
        let revision = revisions::revision_name(&name, hash);
        mine.iter().any(|r| r.metadata.name.as_deref() == Some(revision.as_str()))
    };
    let uid = watcher.uid().unwrap_or_default();
    let unkept: BTreeMap<String, (String, String)> = state.pods.with_namespaces(namespaces, |pods| {
        let mut unkept = BTreeMap::new();
        // From the oldest pod that carries it (any pod holds the spec; one pod, predictably).
        let mut live: Vec<&&CountedPod> = pods.iter().filter(|p| !p.terminating()).collect();
        live.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
        for pod in live {
            for (_, hash) in annotation::Injected::read(pod.annotations()).into_iter().filter(|(n, _)| *n == name) {
                if hash != current && !kept(hash) {
                    unkept.entry(hash.to_owned()).or_insert_with(|| (pod.namespace().to_owned(), pod.name.to_string()));
                }
            }
        }
        unkept
    });
    let mut rebuilt = Vec::new();
    for (hash, (namespace, pod)) in unkept.into_iter().take(REBUILDS_PER_RECONCILE) {
        {
            let mut tried = lock(&state.rebuilt);
            if tried.len() >= REBUILDS_REMEMBERED {
                tried.clear();
            }
            if !tried.insert(format!("{uid}/{hash}")) {
                continue;
            }
        }
        let Some(stored) = Api::<Pod>::namespaced(ctx.client.clone(), &namespace).get_opt(&pod).await? else {
            continue;
        };
        let Some(spec) = revisions::rebuild::rebuild(&stored, &name, &watcher.spec.container.name, &hash) else {
            warn!(pod, namespace, hash, "the spec this pod carries has no revision and cannot be rebuilt from it");
            continue;
        };
        let number = revisions::rebuilt_number(&mine);
        let Some(mut revision) = revisions::revision_of(watcher, &spec, &revisions_namespace(watcher, state), number)
        else {
            continue;
        };
        let from = format!("{namespace}/{pod}");
        revision.metadata.annotations = Some([(revisions::REBUILT_FROM_ANNOTATION.to_owned(), from.clone())].into());
        revisions::create(&ctx.client, &revision).await?;
        info!(revision = revision.name_any(), from, "rebuilt the revision of a spec pods carry from a pod");
        rebuilt.push(Arc::new(revision));
    }
    Ok(rebuilt)
}

/// Where `watcher`'s revisions are kept: its namespace; a ClusterWatcher's, the operator's.
pub(super) fn revisions_namespace(watcher: &Watcher, state: &PodsState) -> String {
    watcher.namespace().unwrap_or_else(|| state.cache.operator_namespace().to_owned())
}

/// Patches `pod` with `ops` as `Api::patch` does, the answer (the whole pod) read but never
/// decoded: a rollout patches pod after pod, and the pod cache brings each back anyway.
async fn patch_pod(client: &kube::Client, namespace: &str, pod: &str, ops: &Patch<()>) -> kube::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let mut request = kube::core::Request::new(api.resource_url())
        .patch(pod, &PatchParams::default(), ops)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("patch");
    client.request_text(request).await.map(drop)
}

/// One step of a rollout (its revisions kept before): the in-place patches, then the evictions, an
/// Event for what was updated, and the `SidecarsUpdated` condition when it changes. Returns the
/// pods patched.
pub(super) async fn roll(
    watcher: &Watcher,
    subject: &Subject,
    mut rollout: rollout::Rollout,
    ctx: &Context,
) -> Result<(Action, usize, Option<Vec<watcher_api::Condition>>)> {
    let mut patched = Vec::new();
    let mut conflict = false;
    for patch in &rollout.patches {
        let ops = Patch::Json::<()>(json_patch::Patch(patch.ops.clone()));
        match patch_pod(&ctx.client, &patch.namespace, &patch.pod, &ops).await {
            Ok(_) => {
                info!(pod = patch.pod, image = patch.image, "sidecar image updated in place");
                ctx.metrics.in_place_update();
                patched.push(patch.pod.as_str());
            }
            // Changed since it was cached (409), or its container moved (422, the test op):
            // planned again from the next event.
            Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => conflict = true,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    if !patched.is_empty() {
        let image = rollout.patches.first().map(|p| p.image.as_str()).unwrap_or_default();
        let note =
            format!("sidecar image updated in place to {image} in {} pod(s): {}", patched.len(), patched.join(", "));
        ctx.publish(&subject.regarding(watcher), EventType::Normal, "SidecarUpdated", "Update", note).await;
    }
    // The condition counts a pod patched now as on the current spec and updating, as the
    // counts do.
    let patched: Vec<String> = patched.into_iter().map(str::to_owned).collect();
    rollout.updated += patched.len();
    rollout.outdated -= patched.len();
    rollout.in_flight.extend(patched.iter().cloned());
    let written = set_rollout_condition(watcher, subject, ctx, &rollout).await?;
    let mut action = evict_names(&ctx.client, &rollout.evictions).await?;
    if conflict || !patched.is_empty() || !rollout.in_flight.is_empty() {
        action = Action::requeue(IN_PLACE_RECHECK.min(EVICTION_RETRY));
    }
    Ok((action, patched.len(), written))
}

/// Evicts the chosen pods; a refusal by a PodDisruptionBudget waits for the next try.
pub(super) async fn evict_names(client: &kube::Client, chosen: &[rollout::PodName]) -> Result<Action> {
    if chosen.is_empty() {
        return Ok(Action::await_change());
    }
    for rollout::PodName { namespace, name } in chosen {
        let api = Api::<Pod>::namespaced(client.clone(), namespace);
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => info!(namespace, pod = name, "evicted: its controller recreates it injected"),
            Err(kube::Error::Api(status)) if status.code == 429 => {
                info!(namespace, pod = name, "eviction refused for now (PodDisruptionBudget)");
                return Ok(Action::requeue(EVICTION_RETRY));
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    // The next pods go when these are gone and their replacements counted.
    Ok(Action::requeue(EVICTION_RETRY))
}
