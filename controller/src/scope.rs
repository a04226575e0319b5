//! Keeps the `matchConditions` of the webhook configuration in step with the caches, so that
//! kube-apiserver (1.28 or later) sends the webhook only the pods it could change, and the pods
//! that ask for a required Watcher to a second webhook that fails closed. What the conditions
//! say is [`watcher_admission::scope`]; this module writes them.
//!
//! The leader writes, and only when the computed conditions differ from those in place (they
//! are deterministic, so a steady cluster sees no write), with a full update carrying the
//! resourceVersion it read. The operator owns `clientConfig` and the conditions named
//! `watcher.dev/...` of its webhooks, and the webhook `required.watcher.dev`; rules, selectors,
//! `failurePolicy`, timeouts and any other condition of `inject.watcher.dev` stay as installed
//! (the required webhook copies them, with `failurePolicy: Fail`). When another operator's
//! registration stands (a run by URL next to the installed one), that operator writes them.
//!
//! When there is nothing to narrow by, or kube-apiserver refuses the conditions (they are over
//! its size limit, or it cannot compile them), every pod of a served namespace is sent, as
//! before 1.28: the configuration carries no condition of the operator's, and the annotation
//! [`SCOPE_ANNOTATION`] says why, for people and for `watcher-operator check`.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{MatchCondition, MutatingWebhookConfiguration};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};
use watcher_admission::scope::{
    CONDITION_PREFIX, Conditions, MAX_EXPRESSION_LEN, NOT_REQUIRED_CONDITION, REQUIRED_CONDITION, SCOPE_CONDITION,
    Scope, supports_match_conditions,
};
use watcher_api::{FIELD_MANAGER, Watcher};
use watcher_certs::registration::{Form, Registration, WEBHOOK_CONFIGURATION};

use watcher_cache::{PolicyCache, WatcherCache};

use crate::ScopeState;

/// The webhook every pod in scope goes to (as installed).
pub const INJECT_WEBHOOK: &str = "inject.watcher.dev";
/// The webhook the operator adds for pods that ask for a required Watcher.
pub const REQUIRED_WEBHOOK: &str = "required.watcher.dev";
pub use watcher_api::ADMISSION_SCOPE_ANNOTATION as SCOPE_ANNOTATION;

/// Changes arriving together (`kubectl apply -f` of many Watchers) make one write.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// The configuration is read again this often, in case someone replaced it.
const RECHECK: Duration = Duration::from_secs(60);
/// After new conditions are written, how long kube-apiserver may take to send what they select
/// (it reads webhook configurations through an informer: milliseconds, more under load), and
/// how often the operator asks.
const APPLIED_WITHIN: Duration = Duration::from_secs(10);
const APPLIED_POLL: Duration = Duration::from_millis(100);
/// After a conflict (someone wrote between the read and the write), or an error.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
const ERROR_RETRY: Duration = Duration::from_secs(10);

/// What the registered conditions send, as the Watcher controller needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// Not known yet (the leader has not read the configuration).
    Pending,
    /// Every pod of a served namespace is sent (or there is no configuration to send any):
    /// nothing to wait for. Why, for the logs.
    EveryPod(String),
    /// The conditions in place were computed from this scope.
    Scoped(Arc<Scope>),
}

/// Whether the registered conditions cover a Watcher: read by the Watcher controller.
#[derive(Clone, Debug)]
pub struct ScopeStatus(watch::Receiver<Registered>);

impl ScopeStatus {
    /// A status that stays `registered` (tests, and runs that write no conditions).
    pub fn fixed(registered: Registered) -> Self {
        Self(watch::Sender::new(registered).subscribe())
    }

    /// A status that never waits: every pod is sent.
    pub fn every_pod() -> Self {
        Self::fixed(Registered::EveryPod("no conditions are written".into()))
    }

    /// Whether a pod created now that asks for `watcher` is sent to the webhook that handles
    /// it; `None` while not known.
    pub fn covers(&self, watcher: &Watcher) -> Option<bool> {
        covered_by(&self.0.borrow(), watcher)
    }

    /// [`ScopeStatus::covers`] in each of `namespaces` for a ClusterWatcher's shared copy (a
    /// Watcher of no namespace): all of them, or `None` while not known.
    pub fn covers_in<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>, watcher: &Watcher) -> Option<bool> {
        match &*self.0.borrow() {
            Registered::Pending => None,
            Registered::EveryPod(_) => Some(true),
            Registered::Scoped(scope) => Some(namespaces.into_iter().all(|ns| scope.covers_in(ns, watcher))),
        }
    }

    /// Waits until what is registered is known (or nothing will ever say it).
    async fn known(mut rx: watch::Receiver<Registered>) -> watch::Receiver<Registered> {
        let _ = rx.wait_for(|registered| *registered != Registered::Pending).await;
        rx
    }

    /// `stream`, held back until what is registered is known: a controller that waits for it
    /// starts with one pass over everything, not a pass before and another after.
    pub fn gate<S: futures::Stream<Item: Send> + Send + 'static>(
        &self,
        stream: S,
    ) -> impl futures::Stream<Item = S::Item> + Send + 'static + use<S> {
        let known = Self::known(self.0.clone());
        futures::stream::once(known).filter_map(|_| futures::future::ready(None)).chain(stream)
    }

    /// A stream that yields each time what is registered changes, once it is known.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        futures::stream::once(Self::known(self.0.clone())).flat_map(|rx| {
            futures::stream::unfold(rx, |mut rx| async move { rx.changed().await.ok().map(|()| ((), rx)) })
        })
    }

    /// The Watchers of `watchers` whose coverage a change of what is registered changed, once
    /// it is known: a Watcher the conditions covered before and still cover (every Watcher that
    /// needs no condition of its own) is not looked at again.
    pub fn coverage_changes(
        &self,
        watchers: Store<Watcher>,
    ) -> impl futures::Stream<Item = ObjectRef<Watcher>> + Send + 'static {
        futures::stream::once(Self::known(self.0.clone())).flat_map(move |mut rx| {
            let previous = rx.borrow_and_update().clone();
            futures::stream::unfold((rx, previous, watchers.clone()), |(mut rx, previous, watchers)| async move {
                rx.changed().await.ok()?;
                let current = rx.borrow_and_update().clone();
                let changed: Vec<ObjectRef<Watcher>> = watchers
                    .state()
                    .iter()
                    .filter(|w| covered_by(&previous, w) != covered_by(&current, w))
                    .map(|w| ObjectRef::from(w.as_ref()))
                    .collect();
                Some((futures::stream::iter(changed), (rx, current, watchers)))
            })
            .flatten()
        })
    }
}

/// Whether what is registered sends the pods that ask for `watcher`; `None` while not known.
fn covered_by(registered: &Registered, watcher: &Watcher) -> Option<bool> {
    match registered {
        Registered::Pending => None,
        Registered::EveryPod(_) => Some(true),
        Registered::Scoped(scope) => Some(scope.covers(watcher)),
    }
}

/// How one pass ended: when to look again without a change.
enum Pass {
    Done,
    Conflict,
}

/// Writes the conditions; run it on the leader only.
pub struct ScopeWriter {
    client: Client,
    registration: Registration,
    operator_namespace: String,
    watchers: WatcherCache,
    policies: PolicyCache,
    state: watch::Sender<Registered>,
    /// Conditions kube-apiserver refused: not tried again until the computed ones change.
    refused: Option<(Conditions, String)>,
    /// The conditions (and the reason they do not narrow, if any) this operator last saw in
    /// place: a change that computes the same ones (a Watcher's status, a namespace's
    /// annotation) reads nothing until the next re-read.
    seen: Option<(Conditions, Option<String>)>,
    /// The foreign registration last logged about.
    yielded_to: Option<String>,
    /// Where the scope's state is exported (`watcher_admission_scope`).
    metrics: Option<crate::Metrics>,
}

impl ScopeWriter {
    /// A writer for the operator registered as `registration`, and the status it keeps.
    pub fn new(
        client: Client,
        registration: Registration,
        operator_namespace: String,
        watchers: WatcherCache,
        policies: PolicyCache,
    ) -> (Self, ScopeStatus) {
        let state = watch::Sender::new(Registered::Pending);
        let status = ScopeStatus(state.subscribe());
        let writer = Self {
            client,
            registration,
            operator_namespace,
            watchers,
            policies,
            state,
            refused: None,
            seen: None,
            yielded_to: None,
            metrics: None,
        };
        (writer, status)
    }

    /// The same writer, exporting the scope's state to `metrics`.
    pub fn with_metrics(mut self, metrics: crate::Metrics) -> Self {
        metrics.set_scope(ScopeState::Pending);
        self.metrics = Some(metrics);
        self
    }

    /// Keeps the conditions until the caller stops polling it. Before 1.28 it writes nothing.
    pub async fn run(mut self) {
        loop {
            match self.client.apiserver_version().await {
                Ok(info) if supports_match_conditions(&info.major, &info.minor) => break,
                Ok(info) => {
                    let why = format!(
                        "kube-apiserver {} has no webhook matchConditions (1.28 or later): every pod of a served namespace is sent",
                        info.git_version
                    );
                    info!("{why}");
                    self.publish(Registered::EveryPod(why), ScopeState::Unsupported);
                    return;
                }
                Err(error) => {
                    warn!(%error, "cannot read the API server version; retrying");
                    tokio::time::sleep(ERROR_RETRY).await;
                }
            }
        }
        let mut watcher_changes = Box::pin(self.watchers.subscribe());
        let mut policy_changes = self.policies.changes();
        let mut reread = true;
        loop {
            let wait = match self.pass(reread).await {
                Ok(Pass::Done) => RECHECK,
                Ok(Pass::Conflict) => CONFLICT_RETRY,
                Err(error) => {
                    warn!(%error, "cannot keep the webhook's matchConditions; retrying");
                    ERROR_RETRY
                }
            };
            reread = false;
            tokio::select! {
                change = watcher_changes.next() => if change.is_none() { return },
                changed = policy_changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(wait) => reread = true,
            }
            // Every pass reads the caches whole: what arrived meanwhile needs no pass of its own.
            tokio::time::sleep(DEBOUNCE).await;
            while let Some(Some(_)) = watcher_changes.next().now_or_never() {}
            policy_changes.borrow_and_update();
        }
    }

    fn publish(&self, registered: Registered, exported: ScopeState) {
        if let Some(metrics) = &self.metrics {
            metrics.set_scope(exported);
        }
        self.state.send_if_modified(|state| {
            let changed = *state != registered;
            *state = registered;
            changed
        });
    }

    /// The scope of what the caches hold now.
    fn compute(&self) -> Scope {
        let watchers = self.watchers.everywhere();
        let policies = self.policies.compiled();
        let namespaces = self.policies.namespaces.state();
        Scope::compute(
            &watchers,
            &policies,
            namespaces.iter().map(|ns| (ns.metadata.name.as_deref().unwrap_or_default(), ns.labels())),
            &self.operator_namespace,
        )
    }

    /// The scope of what the caches hold, the conditions to write for it, why they fall back
    /// (if they do), and the state they are written in: applied, unless kube-apiserver refused
    /// these conditions before or an expression had to be left out.
    fn to_write(&self) -> (Arc<Scope>, Conditions, Option<String>, ScopeState) {
        let scope = Arc::new(self.compute());
        let (conditions, why) = within_limits(scope.conditions());
        let refused = self.refused.as_ref().filter(|(c, _)| *c == conditions).map(|(_, why)| why.clone());
        match (refused, why) {
            (Some(refused), _) => (scope, Conditions::default(), Some(refused), ScopeState::Fallback("refused")),
            (None, Some(why)) => (scope, conditions, Some(why), ScopeState::Fallback("too_large")),
            (None, None) => (scope, conditions, None, ScopeState::Applied),
        }
    }

    /// kube-apiserver took the conditions written for `scope`: said, and published once it
    /// sends what they newly select (`Ready` means a pod created now is injected).
    async fn applied(
        &mut self,
        scope: Arc<Scope>,
        why: Option<&str>,
        seen: Option<(Conditions, Option<String>)>,
        written: ScopeState,
    ) {
        let summary = scope.summary();
        match why {
            None => info!(%summary, "wrote the webhook's matchConditions"),
            Some(why) => warn!(%summary, "wrote the webhook's matchConditions: {why}"),
        }
        self.seen = seen;
        let registered = Registered::Scoped(scope);
        let previous = self.state.borrow().clone();
        if let Some((namespace, labels)) = newly_selected(&previous, &registered, &self.watchers.everywhere()) {
            await_applied(&self.client, &namespace, labels).await;
        }
        self.publish(registered, written);
    }

    /// One pass: compute, and unless the result is what was last seen in place (and `reread`
    /// is false), read the configuration and write it when something differs.
    async fn pass(&mut self, reread: bool) -> kube::Result<Pass> {
        let (scope, conditions, why, written) = self.to_write();
        let seen = Some((conditions.clone(), why.clone()));
        if !reread && self.seen == seen {
            // The same conditions: what they cover is this scope (after a fallback, every pod).
            if matches!(*self.state.borrow(), Registered::Scoped(_)) {
                self.publish(Registered::Scoped(scope), written);
            }
            return Ok(Pass::Done);
        }
        self.seen = None;
        let api = Api::<MutatingWebhookConfiguration>::all(self.client.clone());
        let Some(existing) = api.get_opt(WEBHOOK_CONFIGURATION).await? else {
            self.publish(
                Registered::EveryPod(format!("there is no MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}")),
                ScopeState::Fallback("no_configuration"),
            );
            return Ok(Pass::Done);
        };
        let Some(inject) = existing.webhooks.iter().flatten().find(|w| w.name == INJECT_WEBHOOK) else {
            self.publish(
                Registered::EveryPod(format!("{WEBHOOK_CONFIGURATION} has no webhook {INJECT_WEBHOOK}")),
                ScopeState::Fallback("no_webhook"),
            );
            return Ok(Pass::Done);
        };
        if !self.registration.is_form_of(&inject.client_config) {
            let other = Form::of(&inject.client_config).to_string();
            self.yield_to(other, &existing, &conditions, scope, written);
            return Ok(Pass::Done);
        }
        self.yielded_to = None;
        let mut desired = existing.clone();
        if !apply(&mut desired, &conditions, why.as_deref()) {
            self.seen = seen;
            self.publish(Registered::Scoped(scope), written);
            return Ok(Pass::Done);
        }
        let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
        match api.replace(WEBHOOK_CONFIGURATION, &params, &desired).await {
            Ok(written) if !kept(&written, &conditions) => {
                // A server that drops the field (the feature gate is off): take back what it
                // kept, the required webhook above all, and write no conditions again.
                let why = "kube-apiserver dropped the webhook's matchConditions (feature gate AdmissionWebhookMatchConditions off?): \
                           every pod of a served namespace is sent";
                self.fall_back(&api, &params, written, conditions, why.to_owned(), "dropped").await
            }
            Ok(_) => {
                self.applied(scope, why.as_deref(), seen, written).await;
                Ok(Pass::Done)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Pass::Conflict),
            Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
                let why = format!(
                    "kube-apiserver refused the matchConditions ({}): every pod of a served namespace is sent",
                    status.message
                );
                self.fall_back(&api, &params, existing, conditions, why, "refused").await
            }
            Err(error) => Err(error),
        }
    }

    /// Another operator's registration stands (`other`), and it writes the conditions; they
    /// cover this operator's Watchers once they are what this operator computes.
    fn yield_to(
        &mut self,
        other: String,
        existing: &MutatingWebhookConfiguration,
        conditions: &Conditions,
        scope: Arc<Scope>,
        written: ScopeState,
    ) {
        if self.yielded_to.as_ref() != Some(&other) {
            info!(
                "the webhook is registered by {other}, not by {}: that operator keeps its matchConditions",
                self.registration
            );
            self.yielded_to = Some(other);
        }
        let registered = in_place(existing);
        if registered.scope.is_none() && registered.required.is_none() {
            // Every pod of a served namespace is sent: nothing to wait for.
            self.publish(
                Registered::EveryPod("the other operator's registration has no matchConditions".into()),
                ScopeState::Fallback("other_operator"),
            );
        } else if registered == *conditions {
            self.publish(Registered::Scoped(scope), written);
        }
    }

    /// kube-apiserver would not keep `conditions` (`why`, said): they are taken back from `base`
    /// (what it kept, the required webhook above all), every pod of a served namespace is sent,
    /// and they are not written again until they change.
    async fn fall_back(
        &mut self,
        api: &Api<MutatingWebhookConfiguration>,
        params: &PostParams,
        mut base: MutatingWebhookConfiguration,
        conditions: Conditions,
        why: String,
        state: &'static str,
    ) -> kube::Result<Pass> {
        warn!("{why}");
        if apply(&mut base, &Conditions::default(), Some(&why)) {
            api.replace(WEBHOOK_CONFIGURATION, params, &base).await?;
        }
        self.refused = Some((conditions, why.clone()));
        self.seen = Some((Conditions::default(), Some(why.clone())));
        self.publish(Registered::EveryPod(why), ScopeState::Fallback(state));
        Ok(Pass::Done)
    }
}

/// A pod that `current` sends and `previous` did not, by a Watcher's selector: its namespace and
/// labels the selector matches (`None` when no Watcher with a selector is newly covered: the
/// annotation terms are always there, and nothing waits on the rest).
fn newly_selected(
    previous: &Registered,
    current: &Registered,
    watchers: &[(String, Arc<Watcher>)],
) -> Option<(String, std::collections::BTreeMap<String, String>)> {
    watchers.iter().find_map(|(namespace, watcher)| {
        let selector = watcher.spec.selector.as_ref()?;
        if watcher.metadata.namespace.as_deref() != Some(namespace.as_str())
            || covered_by(previous, watcher) == Some(true)
            || covered_by(current, watcher) != Some(true)
        {
            return None;
        }
        let mut labels = selector.match_labels.clone().unwrap_or_default();
        for expression in selector.match_expressions.iter().flatten() {
            let value = match expression.operator.as_str() {
                "In" => expression.values.iter().flatten().next().cloned(),
                "Exists" => Some("probe".to_owned()),
                _ => None, // NotIn, DoesNotExist: the key absent
            };
            if let Some(value) = value {
                labels.insert(expression.key.clone(), value);
            }
        }
        watcher.selects(&labels).then(|| (namespace.clone(), labels))
    })
}

/// Waits (at most [`APPLIED_WITHIN`]) until kube-apiserver sends the webhook a pod of
/// `namespace` with `labels`: a server-side dry run (never stored) of a pod that passes every
/// Pod Security level, which the webhook answers with `watcher.dev/probed` once kube-apiserver
/// applies the conditions just written. A probe that cannot be made (no access, another
/// admission plugin's refusal) or that times out waits no longer, and says so.
async fn await_applied(client: &Client, namespace: &str, labels: std::collections::BTreeMap<String, String>) {
    use k8s_openapi::api::core::v1::Pod;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let probe: Pod = match serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "watcher-scope-probe-", "labels": labels,
                     "annotations": {watcher_api::SCOPE_PROBE_ANNOTATION: "true"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": watcher_api::DEFAULT_SUPERVISOR_IMAGE,
                            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}, "limits": {"cpu": "1m", "memory": "1Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        },
    })) {
        Ok(probe) => probe,
        Err(error) => return warn!(%error, "cannot build the scope probe pod"),
    };
    let params = PostParams { dry_run: true, field_manager: Some(FIELD_MANAGER.to_owned()) };
    let start = std::time::Instant::now();
    loop {
        match pods.create(&params, &probe).await {
            Ok(sent) if sent.annotations().contains_key(watcher_api::PROBED_ANNOTATION) => {
                return info!(namespace, after = ?start.elapsed(), "kube-apiserver applies the new matchConditions");
            }
            Ok(_) if start.elapsed() < APPLIED_WITHIN => tokio::time::sleep(APPLIED_POLL).await,
            Ok(_) => {
                return warn!(
                    namespace,
                    "kube-apiserver did not send a probe pod within {APPLIED_WITHIN:?} of the new matchConditions"
                );
            }
            Err(error) => {
                return warn!(%error, namespace, "cannot probe whether kube-apiserver applies the new matchConditions");
            }
        }
    }
}

/// The conditions kube-apiserver can parse: an expression over its size limit is left out
/// (its pods are then sent to `inject.watcher.dev`), and the reason returned.
pub fn within_limits(mut conditions: Conditions) -> (Conditions, Option<String>) {
    let mut why = Vec::new();
    if let Some(len) = conditions.scope.as_ref().map(String::len).filter(|len| *len > MAX_EXPRESSION_LEN) {
        conditions.scope = None;
        why.push(format!(
            "the scope would take {len} characters, over kube-apiserver's {MAX_EXPRESSION_LEN}: every pod of a served namespace is sent"
        ));
    }
    // The negation `!(...)` of `inject.watcher.dev` is the longer one.
    if let Some(len) = conditions.required.as_ref().map(|r| r.len() + 3).filter(|len| *len > MAX_EXPRESSION_LEN) {
        conditions.required = None;
        why.push(format!(
            "the required Watchers' condition would take {len} characters, over kube-apiserver's {MAX_EXPRESSION_LEN}: \
             their pods go to {INJECT_WEBHOOK}, admitted without them while the webhook is unreachable"
        ));
    }
    let why = (!why.is_empty()).then(|| why.join("; "));
    (conditions, why)
}

/// Sets the operator's conditions on the configuration (and `why`, when they do not narrow what
/// is sent, in [`SCOPE_ANNOTATION`]), adding or removing `required.watcher.dev`; returns
/// whether anything changed. A configuration without `inject.watcher.dev` is left as it is.
pub fn apply(configuration: &mut MutatingWebhookConfiguration, conditions: &Conditions, why: Option<&str>) -> bool {
    if !configuration.webhooks.iter().flatten().any(|w| w.name == INJECT_WEBHOOK) {
        return false;
    }
    let before = configuration.clone();
    let webhooks = configuration.webhooks.get_or_insert_default();
    let Some(inject) = webhooks.iter_mut().find(|w| w.name == INJECT_WEBHOOK) else { return false };
    let theirs: Vec<MatchCondition> =
        inject.match_conditions.iter().flatten().filter(|c| !c.name.starts_with(CONDITION_PREFIX)).cloned().collect();
    let condition = |name: &str, expression: String| MatchCondition { name: name.to_owned(), expression };
    let mut mine = theirs.clone();
    mine.extend(conditions.scope.clone().map(|scope| condition(SCOPE_CONDITION, scope)));
    mine.extend(conditions.required.as_ref().map(|r| condition(NOT_REQUIRED_CONDITION, format!("!({r})"))));
    inject.match_conditions = (!mine.is_empty()).then_some(mine);
    let required = conditions.required.clone().map(|expression| {
        let mut required = inject.clone();
        required.name = REQUIRED_WEBHOOK.to_owned();
        required.failure_policy = Some("Fail".to_owned());
        required.match_conditions =
            Some(theirs.into_iter().chain([condition(REQUIRED_CONDITION, expression)]).collect());
        required
    });
    let position = webhooks.iter().position(|w| w.name == REQUIRED_WEBHOOK);
    match (required, position) {
        (Some(required), Some(i)) => webhooks[i] = required,
        (Some(required), None) => webhooks.push(required),
        (None, Some(i)) => {
            webhooks.remove(i);
        }
        (None, None) => {}
    }
    let annotations = configuration.metadata.annotations.get_or_insert_default();
    match why {
        Some(why) => {
            annotations.insert(SCOPE_ANNOTATION.to_owned(), why.to_owned());
        }
        None => {
            annotations.remove(SCOPE_ANNOTATION);
        }
    }
    if annotations.is_empty() {
        configuration.metadata.annotations = None;
    }
    *configuration != before
}

/// The operator's conditions as a configuration holds them (what [`apply`] wrote).
pub fn in_place(configuration: &MutatingWebhookConfiguration) -> Conditions {
    let webhooks = configuration.webhooks.as_deref().unwrap_or_default();
    let condition = |webhook: &str, name: &str| {
        webhooks
            .iter()
            .find(|w| w.name == webhook)
            .and_then(|w| w.match_conditions.iter().flatten().find(|c| c.name == name))
            .map(|c| c.expression.clone())
    };
    Conditions {
        scope: condition(INJECT_WEBHOOK, SCOPE_CONDITION),
        required: condition(REQUIRED_WEBHOOK, REQUIRED_CONDITION),
    }
}

/// Whether the server kept the conditions written (one that drops the field returns none).
fn kept(written: &MutatingWebhookConfiguration, conditions: &Conditions) -> bool {
    in_place(written) == *conditions
}

#[cfg(test)]
mod tests;
