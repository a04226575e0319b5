//! The admission scope: which pods kube-apiserver sends the webhook at all.
//!
//! [`Scope::compute`] reads the Watchers, ImagePolicies and namespaces the operator holds in
//! memory and says which pods the webhook could change: those that carry `watcher.dev/inject` or
//! `watcher.dev/probe`, those a Watcher of their namespace selects by label, and every pod of a
//! namespace an ImagePolicy applies to. Of these, the pods that ask for a required Watcher
//! (`spec.failurePolicy: Fail`) go to the webhook `required.watcher.dev` (failurePolicy `Fail`),
//! the others to `inject.watcher.dev` (as installed).
//!
//! The same value answers both questions: [`Scope::sends`] for one pod (`check-inject`, the
//! tests), [`Scope::conditions`] as the CEL `matchConditions` kube-apiserver evaluates. Values
//! from Watchers reach CEL only as escaped string literals ([`literal`]), and every map access is
//! guarded, so no label or annotation a pod may carry makes an expression fail (an evaluation
//! error would apply the webhook's failurePolicy to every pod).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use watcher_api::CompiledPolicy;
use watcher_api::validation::selector_problems;
use watcher_api::{PROBE_ANNOTATION, Watcher, annotation};

use crate::SYSTEM_NAMESPACES;

pub use watcher_api::{CONDITION_PREFIX, NOT_REQUIRED_CONDITION, REQUIRED_CONDITION, SCOPE_CONDITION};
/// The longest expression kube-apiserver parses (cel-go's limit, in code points; the
/// expressions are ASCII).
pub const MAX_EXPRESSION_LEN: usize = 100_000;

const LABELS: &str = "object.metadata.labels";
const ANNOTATIONS: &str = "object.metadata.annotations";

/// Whether a kube-apiserver of this version evaluates webhook `matchConditions` (beta and on
/// by default from 1.28, GA in 1.30).
pub fn supports_match_conditions(major: &str, minor: &str) -> bool {
    crate::ServerVersion::parse(major, minor).is_some_and(crate::ServerVersion::match_conditions)
}

/// One requirement of a label selector, as both evaluations read it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Requirement {
    /// The label is set to one of the values (`matchLabels` is `In` with one value).
    In(String, BTreeSet<String>),
    /// The label is absent or set to none of the values.
    NotIn(String, BTreeSet<String>),
    /// The label is set.
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
}

/// A label selector: all of its requirements hold. No requirement: every pod.
pub type Selector = BTreeSet<Requirement>;

/// A selector as a set of requirements, or `None` when kube-apiserver would refuse it (then it
/// selects nothing, as [`Watcher::selects`] says).
pub fn selector(selector: &LabelSelector) -> Option<Selector> {
    if !selector_problems(selector, "").is_empty() {
        return None;
    }
    let set = |values: &Option<Vec<String>>| values.iter().flatten().cloned().collect::<BTreeSet<_>>();
    let labels = selector.match_labels.iter().flatten();
    let mut requirements: Selector =
        labels.map(|(key, value)| Requirement::In(key.clone(), BTreeSet::from([value.clone()]))).collect();
    for expression in selector.match_expressions.iter().flatten() {
        let key = expression.key.clone();
        requirements.insert(match expression.operator.as_str() {
            "In" => Requirement::In(key, set(&expression.values)),
            "NotIn" => Requirement::NotIn(key, set(&expression.values)),
            "Exists" => Requirement::Exists(key),
            _ => Requirement::DoesNotExist(key),
        });
    }
    Some(requirements)
}

fn matches(selector: &Selector, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|requirement| match requirement {
        Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
        Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
        Requirement::Exists(key) => labels.contains_key(key),
        Requirement::DoesNotExist(key) => !labels.contains_key(key),
    })
}

/// What of a Watcher the conditions depend on: a Watcher is covered by registered conditions
/// computed from an equal entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// Its selector (`None`: none, or one that cannot be read; it then selects nothing).
    pub selector: Option<Selector>,
    /// Whether it is required.
    pub required: bool,
}

impl Entry {
    /// The entry of `watcher`.
    pub fn of(watcher: &Watcher) -> Self {
        Self { selector: watcher.spec.selector.as_ref().and_then(selector), required: watcher.spec.is_required() }
    }

    /// Whether any conditions send the pods that ask for this Watcher: the annotation is always
    /// in scope, so only a selector or a required Watcher depends on what is registered.
    fn needs_nothing(&self) -> bool {
        self.selector.is_none() && !self.required
    }
}

/// Pods of some namespaces: every pod of some, those selected by label in others, and (for
/// required Watchers) those naming a Watcher in `watcher.dev/inject`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Pods {
    /// Namespaces whose every pod is in.
    whole: BTreeSet<String>,
    /// Per namespace, the selectors of which any selects a pod.
    selected: BTreeMap<String, BTreeSet<Selector>>,
    /// Per namespace, the Watcher names a pod may ask for by annotation.
    named: BTreeMap<String, BTreeSet<String>>,
}

impl Pods {
    fn add_selector(&mut self, namespace: &str, selector: Selector) {
        if selector.is_empty() {
            self.whole.insert(namespace.to_owned());
        } else {
            self.selected.entry(namespace.to_owned()).or_default().insert(selector);
        }
    }

    fn is_empty(&self) -> bool {
        self.whole.is_empty() && self.selected.is_empty() && self.named.is_empty()
    }

    fn contains(&self, namespace: &str, labels: &BTreeMap<String, String>, asked: &[&str]) -> bool {
        self.whole.contains(namespace)
            || self.selected.get(namespace).is_some_and(|selectors| selectors.iter().any(|s| matches(s, labels)))
            || self.named.get(namespace).is_some_and(|names| asked.iter().any(|name| names.contains(*name)))
    }
}

/// Which webhook of the configuration kube-apiserver sends a pod to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Sent {
    /// Neither: the webhook could not change the pod.
    No,
    /// `inject.watcher.dev` (failurePolicy as installed).
    Inject,
    /// `required.watcher.dev` (failurePolicy `Fail`): the pod asks for a required Watcher.
    Required,
}

/// The pods kube-apiserver sends the webhook, computed from the operator's caches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Namespaces never sent: the system namespaces and the operator's own.
    excluded: BTreeSet<String>,
    /// An ImagePolicy applies everywhere: every pod is in scope.
    everywhere: bool,
    /// Pods in scope besides those carrying the annotations.
    pods: Pods,
    /// Pods that ask for a required Watcher.
    required: Pods,
    /// What the conditions were computed from, per Watcher (namespace, name).
    watchers: BTreeMap<(String, String), Entry>,
    /// Of those, the ClusterWatchers' (one per namespace where they apply), by ClusterWatcher.
    cluster: BTreeMap<String, BTreeSet<String>>,
    /// How many ImagePolicies put pods in scope.
    policies: usize,
}

impl Scope {
    /// The scope of `watchers` and `policies` over `namespaces` (name and labels), with the
    /// operator running in `operator_namespace`. Watchers of excluded namespaces count for
    /// nothing; a selector that cannot be read selects nothing.
    pub fn compute<'a>(
        watchers: impl IntoIterator<Item = impl Placed<'a>>,
        policies: &[impl std::borrow::Borrow<CompiledPolicy>],
        namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
        operator_namespace: &str,
    ) -> Self {
        let mut scope = Self {
            excluded: SYSTEM_NAMESPACES.iter().copied().chain([operator_namespace]).map(str::to_owned).collect(),
            ..Self::default()
        };
        for (namespace, watcher) in watchers.into_iter().filter_map(Placed::placed) {
            if scope.excluded.contains(namespace) {
                continue;
            }
            let entry = Entry::of(watcher);
            if let Some(selector) = &entry.selector {
                scope.pods.add_selector(namespace, selector.clone());
                if entry.required {
                    scope.required.add_selector(namespace, selector.clone());
                }
            }
            if entry.required {
                scope.required.named.entry(namespace.to_owned()).or_default().insert(watcher.name_any());
            }
            if let Some(owner) = watcher.cluster_watcher() {
                scope.cluster.entry(owner.name.clone()).or_default().insert(namespace.to_owned());
            }
            scope.watchers.insert((namespace.to_owned(), watcher.name_any()), entry);
        }
        let policies: Vec<&CompiledPolicy> = policies.iter().map(std::borrow::Borrow::borrow).collect();
        let applied: Vec<&CompiledPolicy> = policies.into_iter().filter(|p| !p.valid_rules().is_empty()).collect();
        scope.policies = applied.len();
        scope.everywhere = applied.iter().any(|p| p.applies_everywhere());
        if !scope.everywhere && !applied.is_empty() {
            for (namespace, labels) in namespaces {
                if !scope.excluded.contains(namespace) && applied.iter().any(|p| p.selects(labels)) {
                    scope.pods.whole.insert(namespace.to_owned());
                }
            }
        }
        scope
    }

    /// Which webhook kube-apiserver sends a pod with these labels and annotations, created in
    /// `namespace`, once the conditions of this scope are registered.
    pub fn sends(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Sent {
        if self.excluded.contains(namespace) {
            return Sent::No;
        }
        let asked = annotation::Inject::read(annotations);
        if self.required.contains(namespace, labels, &asked) {
            return Sent::Required;
        }
        let annotated = annotations.contains_key(annotation::Inject::KEY) || annotations.contains_key(PROBE_ANNOTATION);
        if annotated || self.everywhere || self.pods.contains(namespace, labels, &[]) { Sent::Inject } else { Sent::No }
    }

    /// Whether conditions registered from this scope send every pod that asks for `watcher`
    /// (as it is now) to the right webhook.
    pub fn covers(&self, watcher: &Watcher) -> bool {
        self.covers_in(&watcher.namespace().unwrap_or_default(), watcher)
    }

    /// [`Scope::covers`] for `watcher` in `namespace` (a ClusterWatcher's shared copy, of no
    /// namespace, in one where it applies).
    pub fn covers_in(&self, namespace: &str, watcher: &Watcher) -> bool {
        let entry = Entry::of(watcher);
        entry.needs_nothing() || self.watchers.get(&(namespace.to_owned(), watcher.name_any())) == Some(&entry)
    }

    /// How many Watchers select pods by label, how many are required, and how many ImagePolicies
    /// put pods in scope (for `check` and the logs).
    pub fn summary(&self) -> Summary {
        // A ClusterWatcher counts once, however many namespaces it applies in.
        let of_cluster = |(namespace, name): &(String, String)| {
            self.cluster.get(name).is_some_and(|namespaces| namespaces.contains(namespace))
        };
        let mut counted: BTreeSet<&str> = BTreeSet::new();
        let entries: Vec<&Entry> = self
            .watchers
            .iter()
            .filter(|(key, _)| !of_cluster(key) || counted.insert(key.1.as_str()))
            .map(|(_, entry)| entry)
            .collect();
        Summary {
            watchers: self.watchers.keys().filter(|key| !of_cluster(key)).count(),
            cluster_watchers: self.cluster.len(),
            selecting: entries.iter().filter(|e| e.selector.is_some()).count(),
            required: entries.iter().filter(|e| e.required).count(),
            policies: self.policies,
            everywhere: self.everywhere,
        }
    }

    /// The CEL expressions of this scope.
    pub fn conditions(&self) -> Conditions {
        let scope = (!self.everywhere).then(|| {
            let annotated = format!(
                "has({ANNOTATIONS}) && ({} in {ANNOTATIONS} || {} in {ANNOTATIONS})",
                literal(annotation::Inject::KEY),
                literal(PROBE_ANNOTATION)
            );
            let terms: Vec<String> = [Some(annotated), pods_expression(&self.pods)].into_iter().flatten().collect();
            format!("{} && ({})", self.not_excluded(), terms.join(" || "))
        });
        let required = (!self.required.is_empty())
            .then(|| format!("{} && ({})", self.not_excluded(), pods_expression(&self.required).unwrap_or_default()));
        Conditions { scope, required }
    }

    fn not_excluded(&self) -> String {
        format!("!(request.namespace in {})", list(&self.excluded))
    }
}

/// A Watcher and the namespace it applies in, as [`Scope::compute`] reads it: a Watcher alone
/// applies in its own namespace; a ClusterWatcher's shared copy ([`ClusterWatcher::unplaced`],
/// of no namespace) comes with each namespace it was found applying in.
///
/// [`ClusterWatcher::unplaced`]: watcher_api::ClusterWatcher::unplaced
pub trait Placed<'a> {
    /// The namespace and the Watcher; `None` for a Watcher of no namespace given alone.
    fn placed(self) -> Option<(&'a str, &'a Watcher)>;
}

impl<'a> Placed<'a> for &'a Watcher {
    fn placed(self) -> Option<(&'a str, &'a Watcher)> {
        Some((self.metadata.namespace.as_deref()?, self))
    }
}

impl<'a> Placed<'a> for (&'a str, &'a Watcher) {
    fn placed(self) -> Option<(&'a str, &'a Watcher)> {
        Some(self)
    }
}

/// What [`crate::cluster::everywhere`] lists.
impl<'a> Placed<'a> for &'a (String, std::sync::Arc<Watcher>) {
    fn placed(self) -> Option<(&'a str, &'a Watcher)> {
        Some((self.0.as_str(), self.1.as_ref()))
    }
}

/// What [`Scope::summary`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Watchers outside the excluded namespaces.
    pub watchers: usize,
    /// ClusterWatchers that apply in at least one namespace.
    pub cluster_watchers: usize,
    /// Of these and the Watchers, those with a selector that can be read.
    pub selecting: usize,
    /// Of these, the required ones.
    pub required: usize,
    /// ImagePolicies with rules.
    pub policies: usize,
    /// Whether an ImagePolicy applies to every namespace (then every pod is in scope).
    pub everywhere: bool,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
        write!(
            f,
            "{} {}{} ({} selecting pods by label, {} required), {} {}",
            self.watchers,
            plural(self.watchers, "Watcher", "Watchers"),
            match self.cluster_watchers {
                0 => String::new(),
                n => format!(" and {n} {}", plural(n, "ClusterWatcher", "ClusterWatchers")),
            },
            self.selecting,
            self.required,
            self.policies,
            plural(self.policies, "ImagePolicy", "ImagePolicies"),
        )?;
        if self.everywhere { f.write_str(" (one applies to every namespace)") } else { Ok(()) }
    }
}

/// The CEL expressions of a scope; `None` where there is nothing to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    /// The pods in scope (`None`: every pod, an ImagePolicy applies everywhere).
    pub scope: Option<String>,
    /// The pods that ask for a required Watcher (`None`: there is no required Watcher).
    pub required: Option<String>,
}

/// The expression for `pods` (`None` when it holds none), for a pod whose labels may be absent.
fn pods_expression(pods: &Pods) -> Option<String> {
    let mut terms = Vec::new();
    if !pods.named.is_empty() {
        let names: BTreeSet<String> =
            pods.named.iter().flat_map(|(ns, names)| names.iter().map(move |name| format!("{ns}/{name}"))).collect();
        let annotation = literal(annotation::Inject::KEY);
        terms.push(format!(
            "(has({ANNOTATIONS}) && {annotation} in {ANNOTATIONS} && {ANNOTATIONS}[{annotation}].split(',')\
             .exists(n, request.namespace + '/' + n.trim() in {}))",
            list(&names)
        ));
    }
    if !pods.whole.is_empty() {
        terms.push(format!("request.namespace in {}", list(&pods.whole)));
    }
    if !pods.selected.is_empty() {
        // Pods without labels: the namespaces where a selector matches no labels at all.
        let unlabelled: BTreeSet<&String> = pods
            .selected
            .iter()
            .filter(|(_, selectors)| selectors.iter().any(|s| matches(s, &BTreeMap::new())))
            .map(|(ns, _)| ns)
            .collect();
        let otherwise = if unlabelled.is_empty() {
            "false".to_owned()
        } else {
            format!("request.namespace in {}", list(unlabelled))
        };
        terms.push(format!("(has({LABELS}) ? ({}) : {otherwise})", selected_expression(&pods.selected)));
    }
    (!terms.is_empty()).then(|| terms.join(" || "))
}

/// The expression for pods with labels that a selector of their namespace selects. Selectors
/// made only of `In` requirements (`matchLabels` are) are grouped by their keys, each pod's
/// `namespace/value/...` looked up in one list per set of keys (neither a namespace nor a label
/// value holds a `/`); other selectors are written once each, with the namespaces that have them.
fn selected_expression(selected: &BTreeMap<String, BTreeSet<Selector>>) -> String {
    let mut by_keys: BTreeMap<Vec<&str>, BTreeSet<String>> = BTreeMap::new();
    let mut by_selector: BTreeMap<&Selector, BTreeSet<&String>> = BTreeMap::new();
    for (namespace, selectors) in selected {
        for selector in selectors {
            match equalities(selector) {
                Some((keys, tuples)) => {
                    let entries = tuples.into_iter().map(|values| format!("{namespace}/{}", values.join("/")));
                    by_keys.entry(keys).or_default().extend(entries);
                }
                None => {
                    by_selector.entry(selector).or_default().insert(namespace);
                }
            }
        }
    }
    let mut terms = Vec::new();
    for (keys, entries) in by_keys {
        let present: Vec<String> = keys.iter().map(|key| format!("{} in {LABELS}", literal(key))).collect();
        let joined: Vec<String> = keys.iter().map(|key| format!(" + '/' + {LABELS}[{}]", literal(key))).collect();
        terms.push(format!("({} && request.namespace{} in {})", present.join(" && "), joined.concat(), list(&entries)));
    }
    for (selector, namespaces) in by_selector {
        let namespaces = match namespaces.len() {
            1 => format!("request.namespace == {}", literal(namespaces.first().map_or("", |ns| ns.as_str()))),
            _ => format!("request.namespace in {}", list(namespaces)),
        };
        let requirements: Vec<String> = selector.iter().map(requirement_expression).collect();
        terms.push(format!("({namespaces} && {})", requirements.join(" && ")));
    }
    terms.join(" || ")
}

/// Combinations of values beyond which a selector of `In` requirements is written out instead.
const MAX_COMBINATIONS: usize = 16;

/// The keys of a selector made only of `In` requirements on distinct keys, and every tuple of
/// values (one per key) it selects; `None` for any other selector, or one whose values hold a
/// `/` (label values cannot, but then the joined form could be ambiguous) or combine into more
/// than [`MAX_COMBINATIONS`] tuples.
fn equalities(selector: &Selector) -> Option<(Vec<&str>, Vec<Vec<&str>>)> {
    let mut keys = Vec::new();
    let mut tuples: Vec<Vec<&str>> = vec![Vec::new()];
    for requirement in selector {
        let Requirement::In(key, values) = requirement else { return None };
        if keys.last() == Some(&key.as_str()) || values.iter().any(|v| v.contains('/')) {
            return None;
        }
        if tuples.len() * values.len() > MAX_COMBINATIONS {
            return None;
        }
        keys.push(key.as_str());
        tuples = tuples
            .iter()
            .flat_map(|tuple| values.iter().map(move |v| tuple.iter().copied().chain([v.as_str()]).collect()))
            .collect();
    }
    (!keys.is_empty()).then_some((keys, tuples))
}

/// One requirement over labels that are present.
fn requirement_expression(requirement: &Requirement) -> String {
    let value_in = |key: &str, values: &BTreeSet<String>| match (values.len(), values.first()) {
        (1, Some(value)) => format!("{LABELS}[{}] == {}", literal(key), literal(value)),
        _ => format!("{LABELS}[{}] in {}", literal(key), list(values)),
    };
    match requirement {
        Requirement::In(key, values) => format!("{} in {LABELS} && {}", literal(key), value_in(key, values)),
        Requirement::NotIn(key, values) => format!("!({} in {LABELS} && {})", literal(key), value_in(key, values)),
        Requirement::Exists(key) => format!("{} in {LABELS}", literal(key)),
        Requirement::DoesNotExist(key) => format!("!({} in {LABELS})", literal(key)),
    }
}

/// A CEL list of string literals.
fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items.into_iter().map(|item| literal(item.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// `value` as a CEL string literal: single-quoted, with the quote and the backslash escaped and
/// everything but printable ASCII written as `\u`/`\U` escapes, so no value can end the literal
/// or change the expression around it.
pub fn literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests;
