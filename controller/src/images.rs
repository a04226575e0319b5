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
use tracing::{info, instrument, warn};
use watcher_api::image::{self, Rule};
use watcher_api::{
    ImagePolicy, ImagePolicyStatus, ORIGINAL_IMAGES_ANNOTATION, WorkloadCounts, condition, set_condition,
};

use crate::{Context, PolicyCache, Result};

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
        annotations.retain(|key, _| key == ORIGINAL_IMAGES_ANNOTATION);
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

/// The template change of one workload: new images by container, and the annotation value.
#[derive(Debug, PartialEq, Eq)]
pub struct TemplateRewrite {
    /// `(container, init container?, new image)`.
    pub images: Vec<(String, bool, String)>,
    /// The new `watcher.dev/original-images` value.
    pub original_images: String,
}

fn parse_originals(value: &str) -> BTreeMap<&str, &str> {
    value.split(',').filter_map(|entry| entry.trim().split_once('=')).collect()
}

/// What `rules` make of a workload's template (`annotation`: its `watcher.dev/original-images`),
/// or `None` when it already carries the rewritten images. Per container:
/// - the image is what the rules make of the recorded original: in place (never chained);
/// - else a rule matches the image: a new image from the owner, rewritten and recorded;
/// - else a rule matches the recorded original: a policy changed, rewritten again from it.
pub fn plan_template(spec: &PodSpec, annotation: Option<&str>, rules: &[&Rule]) -> Option<TemplateRewrite> {
    let recorded = parse_originals(annotation.unwrap_or(""));
    let rewrite = |image: &str| image::rewrite(rules.iter().copied(), image);
    let mut images = Vec::new();
    let mut originals: BTreeMap<&str, &str> = BTreeMap::new();
    let all =
        spec.containers.iter().map(|c| (c, false)).chain(spec.init_containers.iter().flatten().map(|c| (c, true)));
    for (container, is_init) in all {
        let (name, Some(current)) = (container.name.as_str(), container.image.as_deref()) else { continue };
        let original = recorded.get(name).copied();
        if let Some(original) = original.filter(|o| rewrite(o).as_deref() == Some(current)) {
            originals.insert(name, original);
        } else if let Some(rewritten) = rewrite(current) {
            originals.insert(name, current);
            images.push((name.to_owned(), is_init, rewritten));
        } else if let Some(original) = original {
            originals.insert(name, original);
            if let Some(rewritten) = rewrite(original) {
                images.push((name.to_owned(), is_init, rewritten));
            }
        }
    }
    let original_images = originals.iter().map(|(n, i)| format!("{n}={i}")).collect::<Vec<_>>().join(",");
    (!images.is_empty()).then_some(TemplateRewrite { images, original_images })
}

/// Whether `rules` (one policy's) match an image of the template, before rewriting.
pub fn template_matches(spec: &PodSpec, annotation: Option<&str>, rules: &[&Rule]) -> bool {
    let recorded = parse_originals(annotation.unwrap_or(""));
    let matched = |image: Option<&str>| image.is_some_and(|i| image::rewrite(rules.iter().copied(), i).is_some());
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| matched(recorded.get(c.name.as_str()).copied()) || matched(c.image.as_deref()))
}

/// The strategic merge patch of a rewrite: containers merge by name, and the resourceVersion
/// makes it fail with a conflict if the workload changed since it was read.
pub fn template_patch(resource_version: Option<&str>, rewrite: &TemplateRewrite) -> serde_json::Value {
    let list = |init: bool| {
        rewrite
            .images
            .iter()
            .filter(|(_, i, _)| *i == init)
            .map(|(name, _, image)| json!({"name": name, "image": image}))
            .collect::<Vec<_>>()
    };
    let mut pod_spec = json!({"containers": list(false)});
    let init = list(true);
    if !init.is_empty() {
        pod_spec["initContainers"] = json!(init);
    }
    if list(false).is_empty() {
        pod_spec.as_object_mut().map(|o| o.remove("containers"));
    }
    json!({
        "metadata": {"resourceVersion": resource_version, "annotations": {ORIGINAL_IMAGES_ANNOTATION: rewrite.original_images}},
        "spec": {"template": {"spec": pod_spec}},
    })
}

/// What the images controller shares between reconciles.
pub struct ImagesContext {
    ctx: Arc<Context>,
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
    let shared = Arc::new(ImagesContext { ctx: ctx.clone(), cache, deployments, stateful_sets, daemon_sets, listed });
    let (m1, m2, m3) = (mapper.clone(), mapper.clone(), mapper);
    Controller::new(Api::<ImagePolicy>::all(client), watcher::Config::default().any_semantic())
        .watches_stream(deployment_events, move |_| m1())
        .watches_stream(stateful_set_events, move |_| m2())
        .watches_stream(daemon_set_events, move |_| m3())
        .with_config(crate::controller_config().debounce(DEBOUNCE))
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) })
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
#[instrument(skip(policy, ctx), fields(policy = policy.name_any()))]
pub async fn reconcile(policy: Arc<ImagePolicy>, ctx: Arc<ImagesContext>) -> Result<Action> {
    if !ctx.listed.iter().all(|l| l.load(Ordering::Acquire)) {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // counts would be short
    }
    let _timer = ctx.ctx.metrics.reconcile(CONTROLLER);
    let compiled = policy.compile();
    let generation = policy.meta().generation;
    let mut status = policy.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let ready = match &compiled.rules {
        Err(error) => {
            condition("Ready", false, "InvalidRule", format!("{error}; the policy is not applied"), generation)
        }
        Ok(rules) => condition("Ready", true, "Valid", format!("{} rules apply", rules.len()), generation),
    };
    set_condition(&mut status.conditions, ready);
    status.workloads = None;
    if compiled.rules.is_ok() && policy.spec.workloads {
        let mut counts = WorkloadCounts::default();
        rewrite_all(&ctx, &compiled, &ctx.deployments, &mut counts).await?;
        rewrite_all(&ctx, &compiled, &ctx.stateful_sets, &mut counts).await?;
        rewrite_all(&ctx, &compiled, &ctx.daemon_sets, &mut counts).await?;
        status.workloads = Some(counts);
    }
    write_status(&ctx, &policy, status).await?;
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, policy.as_ref()));
    Ok(Action::requeue(RESYNC))
}

async fn write_status(ctx: &ImagesContext, policy: &ImagePolicy, status: ImagePolicyStatus) -> Result<()> {
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api = Api::<ImagePolicy>::all(ctx.ctx.client.clone());
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
    ctx: &ImagesContext,
    policy: &watcher_api::CompiledPolicy,
    store: &Store<W>,
    counts: &mut WorkloadCounts,
) -> Result<()> {
    let all = ctx.cache.compiled();
    let own: Vec<&Rule> = policy.valid_rules().iter().collect();
    for workload in store.state() {
        let namespace = workload.namespace().unwrap_or_default();
        let labels = ctx.cache.namespace_labels(&namespace);
        let Some(spec) = workload.pod_spec() else { continue };
        let annotation = workload.annotations().get(ORIGINAL_IMAGES_ANNOTATION).map(String::as_str);
        if !policy.selects(&labels) || !template_matches(spec, annotation, &own) {
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
/// workload as it is then. Returns whether the template carries the rewritten images.
async fn patch_template<W: Workload>(ctx: &ImagesContext, cached: &W, rules: &[&Rule]) -> Result<bool> {
    let namespace = cached.namespace().unwrap_or_default();
    let api = Api::<W>::namespaced(ctx.ctx.client.clone(), &namespace);
    let mut current = cached.clone();
    for attempt in 1..=PATCH_ATTEMPTS {
        let annotation = current.annotations().get(ORIGINAL_IMAGES_ANNOTATION).cloned();
        let Some(rewrite) = current.pod_spec().and_then(|spec| plan_template(spec, annotation.as_deref(), rules))
        else {
            return Ok(true);
        };
        let patch = template_patch(current.resource_version().as_deref(), &rewrite);
        match api.patch(&current.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => {
                info!(kind = W::KIND, namespace, name = current.name_any(), images = ?rewrite.images, "rewrote the pod template");
                return Ok(true);
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

/// Logs the failure and retries with backoff.
pub fn error_policy(policy: Arc<ImagePolicy>, error: &crate::Error, ctx: Arc<ImagesContext>) -> Action {
    warn!(policy = policy.name_any(), %error, "reconcile failed");
    ctx.ctx.retry_after_error(CONTROLLER, crate::object_key(CONTROLLER, policy.as_ref()), error)
}

/// A context over stores filled by the test.
#[cfg(test)]
fn context_for_tests(ctx: Arc<Context>, cache: PolicyCache, deployments: Store<Deployment>) -> Arc<ImagesContext> {
    let listed = [Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(true))];
    Arc::new(ImagesContext {
        ctx,
        cache,
        deployments,
        stateful_sets: kube::runtime::reflector::store().0,
        daemon_sets: kube::runtime::reflector::store().0,
        listed,
    })
}

#[cfg(test)]
mod tests;
