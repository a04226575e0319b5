//! ImagePolicy → its status, and with `workloads: true` the pod templates of Deployments,
//! StatefulSets and DaemonSets rewritten like pods at admission (a rollout follows).
//!
//! Workloads are cached stripped to what rewriting reads (names, images, the originals
//! annotation). A template is patched with a strategic merge patch carrying the
//! resourceVersion it was computed from: a concurrent change is a conflict, and the rewrite is
//! computed again from the workload as it is now.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, instrument};
use watcher_api::image::{self, Rule};
use watcher_api::{ImagePolicy, ImagePolicyStatus, WorkloadCounts, annotation, condition, set_condition};

use watcher_api::{reasons, types};
use watcher_cache::PolicyCache;

use crate::{Context, Result};

const CONTROLLER: &str = "images";
/// Workload changes are gathered this long before the policies are looked at again.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// A policy is looked at again this often, in case an event was missed.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// Tries of one template patch when the workload keeps changing underneath.
const PATCH_ATTEMPTS: usize = 3;

/// A workload kind whose pod template the controller rewrites.
pub trait Workload:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `Deployment`, `StatefulSet`, `DaemonSet`.
    const KIND: &'static str;
    /// The pod template's spec.
    fn pod_spec(&self) -> Option<&PodSpec>;
    /// Drops what rewriting does not read (status, the rest of the template).
    fn strip(&mut self);
}

macro_rules! workload {
    ($kind:ty, $name:literal) => {
        impl Workload for $kind {
            const KIND: &'static str = $name;
            fn pod_spec(&self) -> Option<&PodSpec> {
                self.spec.as_ref()?.template.spec.as_ref()
            }
            fn strip(&mut self) {
                self.status = None;
                strip_meta(self.meta_mut());
                if let Some(spec) = self.spec.as_mut() {
                    strip_meta(&mut spec.template.metadata.get_or_insert_default());
                    spec.template.spec = spec.template.spec.take().map(strip_pod_spec);
                }
            }
        }
    };
}
workload!(Deployment, "Deployment");
workload!(StatefulSet, "StatefulSet");
workload!(DaemonSet, "DaemonSet");

fn strip_meta(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| key == annotation::OriginalImages::KEY || key == annotation::RewrittenImages::KEY);
    }
}

fn strip_pod_spec(spec: PodSpec) -> PodSpec {
    let keep = |c: Container| Container { name: c.name, image: c.image, ..Container::default() };
    PodSpec {
        containers: spec.containers.into_iter().map(keep).collect(),
        init_containers: spec.init_containers.map(|list| list.into_iter().map(keep).collect()),
        ..PodSpec::default()
    }
}

/// The template change of one workload: new images by container, and the two annotations.
#[derive(Debug, PartialEq, Eq)]
pub struct TemplateRewrite {
    /// `(container, init container?, new image)`; empty when only the annotations change.
    pub images: Vec<(String, bool, String)>,
    /// The new `watcher.dev/original-images` value (empty: removed).
    pub original_images: String,
    /// The new `watcher.dev/rewritten-images` value (empty: removed).
    pub rewritten_images: String,
}

/// What the controller recorded on a workload: per container, the owner's image and the one
/// it wrote in its place.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recorded<'a> {
    /// `watcher.dev/original-images`.
    pub originals: Option<&'a str>,
    /// `watcher.dev/rewritten-images`.
    pub rewritten: Option<&'a str>,
}

impl<'a> Recorded<'a> {
    /// The two annotations of a workload.
    pub fn of(annotations: &'a BTreeMap<String, String>) -> Self {
        Self {
            originals: annotations.get(annotation::OriginalImages::KEY).map(String::as_str),
            rewritten: annotations.get(annotation::RewrittenImages::KEY).map(String::as_str),
        }
    }
}

fn parse_entries(value: Option<&str>) -> BTreeMap<&str, &str> {
    annotation::OriginalImages::decode(value.unwrap_or("")).into_iter().collect()
}

/// What `rules` make of a workload's template, or `None` when it is already as planned.
/// The owner wins; per container:
/// - the image is the one the controller wrote (`rewritten`, or for a workload written before
///   that was recorded, what the rules make of the original): planned again from the recorded
///   original, so a policy change moves it and never chains; with no rule for the original
///   any more it stays as it is;
/// - any other image was set by the owner and is a new original: rewritten if a rule matches
///   it, otherwise left exactly as the owner wrote it and dropped from the annotations.
///
/// Containers that are gone (removed or renamed) leave the annotations.
pub fn plan_template(spec: &PodSpec, recorded: Recorded<'_>, rules: &[&Rule]) -> Option<TemplateRewrite> {
    let (old_originals, old_rewritten) = (parse_entries(recorded.originals), parse_entries(recorded.rewritten));
    let rewrite = |image: &str| image::rewrite(rules.iter().copied(), image);
    let mut images = Vec::new();
    let (mut originals, mut rewritten) = (BTreeMap::new(), BTreeMap::new());
    let all =
        spec.containers.iter().map(|c| (c, false)).chain(spec.init_containers.iter().flatten().map(|c| (c, true)));
    for (container, is_init) in all {
        let (name, Some(current)) = (container.name.as_str(), container.image.as_deref()) else { continue };
        let original = old_originals.get(name).copied();
        let written_by_us = original.is_some_and(|original| match old_rewritten.get(name) {
            Some(written) => *written == current,
            None => rewrite(original).as_deref() == Some(current),
        });
        let (original, target) = match original {
            Some(original) if written_by_us => (original, rewrite(original).unwrap_or_else(|| current.to_owned())),
            _ => match rewrite(current).filter(|target| target != current) {
                Some(target) => (current, target),
                None => continue, // the owner's image, no rule for it: left alone, forgotten
            },
        };
        if target != current {
            images.push((name.to_owned(), is_init, target.clone()));
        }
        originals.insert(name, original);
        rewritten.insert(name, target);
    }
    let rewritten: BTreeMap<&str, &str> = rewritten.iter().map(|(n, i)| (*n, i.as_str())).collect();
    let original_images = annotation::OriginalImages::encode(originals.iter().map(|(n, i)| (*n, *i)));
    let rewritten_images = annotation::RewrittenImages::encode(rewritten.iter().map(|(n, i)| (*n, *i)));
    let unchanged = images.is_empty()
        && recorded.originals.unwrap_or("") == original_images
        && recorded.rewritten.unwrap_or("") == rewritten_images;
    (!unchanged).then_some(TemplateRewrite { images, original_images, rewritten_images })
}

/// Whether `rules` (one policy's) match an image of the template, before rewriting.
pub fn template_matches(spec: &PodSpec, recorded: Recorded<'_>, rules: &[&Rule]) -> bool {
    let originals = parse_entries(recorded.originals);
    let matched = |image: Option<&str>| image.is_some_and(|i| image::rewrite(rules.iter().copied(), i).is_some());
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| matched(originals.get(c.name.as_str()).copied()) || matched(c.image.as_deref()))
}

/// The strategic merge patch of a rewrite: containers merge by name, an empty annotation is
/// removed, and the resourceVersion makes it fail with a conflict if the workload changed since
/// it was read.
pub fn template_patch(resource_version: Option<&str>, rewrite: &TemplateRewrite) -> serde_json::Value {
    let list = |init: bool| {
        rewrite
            .images
            .iter()
            .filter(|(_, i, _)| *i == init)
            .map(|(name, _, image)| json!({"name": name, "image": image}))
            .collect::<Vec<_>>()
    };
    let value_of = |value: &str| if value.is_empty() { serde_json::Value::Null } else { json!(value) };
    let mut patch = json!({
        "metadata": {"resourceVersion": resource_version, "annotations": {
            annotation::OriginalImages::KEY: value_of(&rewrite.original_images),
            annotation::RewrittenImages::KEY: value_of(&rewrite.rewritten_images),
        }},
    });
    let mut pod_spec = serde_json::Map::new();
    for (key, init) in [("containers", false), ("initContainers", true)] {
        let containers = list(init);
        if !containers.is_empty() {
            pod_spec.insert(key.to_owned(), json!(containers));
        }
    }
    if !pod_spec.is_empty() {
        patch["spec"] = json!({"template": {"spec": pod_spec}});
    }
    patch
}

/// What the images controller keeps between reconciles: the policies and the workloads, cached.
pub struct ImagesState {
    cache: PolicyCache,
    deployments: Store<Deployment>,
    stateful_sets: Store<StatefulSet>,
    daemon_sets: Store<DaemonSet>,
    listed: [Arc<AtomicBool>; 3],
}

/// Runs the images controller until shutdown, with the policies and namespaces of `cache`.
pub async fn run(ctx: Arc<Context>, cache: PolicyCache) {
    let client = ctx.client.clone();
    let (deployments, deployment_events, deployments_listed) = workload_stream::<Deployment>(&client);
    let (stateful_sets, stateful_set_events, stateful_sets_listed) = workload_stream::<StatefulSet>(&client);
    let (daemon_sets, daemon_set_events, daemon_sets_listed) = workload_stream::<DaemonSet>(&client);
    let listed = [deployments_listed, stateful_sets_listed, daemon_sets_listed];
    let mapper = {
        let policies = cache.policies.clone();
        move || -> Vec<ObjectRef<ImagePolicy>> {
            policies.state().iter().filter(|p| p.spec.workloads).map(|p| ObjectRef::from(p.as_ref())).collect()
        }
    };
    let shared = Arc::new(ImagesState { cache, deployments, stateful_sets, daemon_sets, listed });
    let (m1, m2, m3) = (mapper.clone(), mapper.clone(), mapper);
    crate::run_controller(
        CONTROLLER,
        Controller::new(Api::<ImagePolicy>::all(client), watcher::Config::default().any_semantic())
            .watches_stream(deployment_events, move |_| m1())
            .watches_stream(stateful_set_events, move |_| m2())
            .watches_stream(daemon_set_events, move |_| m3()),
        crate::controller_config().debounce(DEBOUNCE),
        ctx,
        shared,
        reconcile,
    )
    .await;
}

type WorkloadEvents<W> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<W, watcher::Error>> + Send>>;

fn workload_stream<W: Workload>(client: &kube::Client) -> (Store<W>, WorkloadEvents<W>, Arc<AtomicBool>) {
    let (store, events, listed) =
        crate::cached_watch(Api::<W>::all(client.clone()), watcher::Config::default(), W::strip);
    (store, events.boxed(), listed)
}

/// Reports the policy's validity and workload counts; with `workloads: true` rewrites the
/// templates of the workloads it selects.
#[instrument(skip(policy, ctx, state), fields(policy = policy.name_any()))]
pub async fn reconcile(policy: Arc<ImagePolicy>, ctx: Arc<Context>, state: Arc<ImagesState>) -> Result<Action> {
    if !state.listed.iter().all(|l| l.load(Ordering::Acquire)) {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // counts would be short
    }
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let compiled = policy.compile();
    let generation = policy.meta().generation;
    let mut status = policy.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let ready = match &compiled.rules {
        Err(error) => condition(
            types::READY,
            false,
            reasons::INVALID_RULE,
            format!("{error}; the policy is not applied"),
            generation,
        ),
        Ok(rules) => condition(types::READY, true, reasons::VALID, format!("{} rules apply", rules.len()), generation),
    };
    set_condition(&mut status.conditions, ready);
    status.workloads = None;
    if compiled.rules.is_ok() && policy.spec.workloads {
        let mut counts = WorkloadCounts::default();
        rewrite_all(&ctx, &state, &compiled, &state.deployments, &mut counts).await?;
        rewrite_all(&ctx, &state, &compiled, &state.stateful_sets, &mut counts).await?;
        rewrite_all(&ctx, &state, &compiled, &state.daemon_sets, &mut counts).await?;
        status.workloads = Some(counts);
    }
    write_status(&ctx, &policy, status).await?;
    ctx.reconciled(&crate::object_key(CONTROLLER, policy.as_ref()));
    Ok(Action::requeue(RESYNC))
}

async fn write_status(ctx: &Context, policy: &ImagePolicy, status: ImagePolicyStatus) -> Result<()> {
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api = Api::<ImagePolicy>::all(ctx.client.clone());
    let patch = json!({"status": {
        "observedGeneration": status.observed_generation,
        "workloads": status.workloads,
        "conditions": status.conditions,
    }});
    api.patch_status(&policy.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Rewrites the cached workloads of one kind that `policy` selects and matches.
async fn rewrite_all<W: Workload>(
    ctx: &Context,
    state: &ImagesState,
    policy: &watcher_api::CompiledPolicy,
    store: &Store<W>,
    counts: &mut WorkloadCounts,
) -> Result<()> {
    let all = state.cache.compiled();
    let own: Vec<&Rule> = policy.valid_rules().iter().collect();
    for workload in store.state() {
        let namespace = workload.namespace().unwrap_or_default();
        let labels = state.cache.namespace_labels(&namespace);
        let Some(spec) = workload.pod_spec() else { continue };
        if !policy.selects(&labels) || !template_matches(spec, Recorded::of(workload.annotations()), &own) {
            continue;
        }
        counts.matched += 1;
        // Every workload policy that selects the namespace, in name order: first match wins.
        let rules: Vec<&Rule> =
            all.iter().filter(|p| p.workloads && p.selects(&labels)).flat_map(|p| p.valid_rules()).collect();
        if patch_template(ctx, workload.as_ref(), &rules).await? {
            counts.rewritten += 1;
        }
    }
    Ok(())
}

/// Brings one workload's template to what `rules` make of it; retries on a conflict with the
/// workload as it is then. Returns whether the template carries images the controller wrote.
async fn patch_template<W: Workload>(ctx: &Context, cached: &W, rules: &[&Rule]) -> Result<bool> {
    let namespace = cached.namespace().unwrap_or_default();
    let api = Api::<W>::namespaced(ctx.client.clone(), &namespace);
    let mut current = cached.clone();
    for attempt in 1..=PATCH_ATTEMPTS {
        let recorded = Recorded::of(current.annotations());
        let Some(rewrite) = current.pod_spec().and_then(|spec| plan_template(spec, recorded, rules)) else {
            return Ok(recorded.rewritten.is_some_and(|r| !r.is_empty()));
        };
        let patch = template_patch(current.resource_version().as_deref(), &rewrite);
        match api.patch(&current.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => {
                info!(
                    kind = W::KIND,
                    namespace,
                    name = current.name_any(),
                    rewritten = rewrite.rewritten_images,
                    "rewrote the pod template"
                );
                return Ok(!rewrite.rewritten_images.is_empty());
            }
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < PATCH_ATTEMPTS => {
                // Changed since it was read: compute again from what is there now.
                match api.get_opt(&current.name_any()).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(false),
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(false)
}

/// The state over stores filled by the test.
#[cfg(test)]
fn state_for_tests(cache: PolicyCache, deployments: Store<Deployment>) -> Arc<ImagesState> {
    let listed = [Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(true))];
    Arc::new(ImagesState {
        cache,
        deployments,
        stateful_sets: kube::runtime::reflector::store().0,
        daemon_sets: kube::runtime::reflector::store().0,
        listed,
    })
}

#[cfg(test)]
mod tests;
