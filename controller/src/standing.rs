//! How a Watcher's spec stands towards the Pod Security levels of the namespaces it applies in:
//! the `PodSecurity` condition of Watchers (one namespace) and ClusterWatchers (grouped), said
//! before any pod exists.

use std::collections::HashMap;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use watcher_admission::pod_security::{ClusterDefaults, NamespaceLevels, Policy};
use watcher_admission::{Compliance, compliance};
use watcher_api::{Watcher, condition};

/// The condition that says how a Watcher stands towards its namespace's Pod Security levels.
pub(crate) const POD_SECURITY_CONDITION: &str = watcher_api::types::POD_SECURITY;

/// How `spec` stands towards the Pod Security levels of `namespace` (`None` where it sets none):
/// `True` when it complies with the enforced level, as written (`Compliant`) or once the
/// webhook sets what it leaves unset (`Adapted`, naming the fields); `False` with
/// `CannotComply` and the failed checks where pods get it only without it. `warn` and `audit`
/// are said the same way and change nothing.
pub(crate) fn pod_security_condition(
    spec: &watcher_api::WatcherSpec,
    namespace: &str,
    levels: &NamespaceLevels,
    generation: Option<i64>,
) -> Option<watcher_api::Condition> {
    let standing = SecurityStanding::of(spec, levels)?;
    let message = format!("namespace {namespace} enforces {}", standing.what);
    Some(condition(POD_SECURITY_CONDITION, standing.complies, standing.reason, message, generation))
}

/// How a Watcher's spec stands towards one namespace's Pod Security levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SecurityStanding {
    /// Whether pods get it where the level is enforced (as written, or adapted).
    pub(crate) complies: bool,
    /// `CannotComply`, `Adapted`, `Compliant`, or `NotEnforced` (only `warn` or `audit` set).
    pub(crate) reason: &'static str,
    /// What the namespace enforces, and the Watcher's standing: `PodSecurity "restricted:latest":
    /// the Watcher complies as written`, `no Pod Security level; it warns about ...`.
    pub(crate) what: String,
}

impl SecurityStanding {
    /// `None` where the namespace sets no level that checks anything (the common case: nothing
    /// cloned, nothing evaluated).
    pub(crate) fn of(spec: &watcher_api::WatcherSpec, levels: &NamespaceLevels) -> Option<Self> {
        let others = [("warns about", levels.warn), ("audits", levels.audit)];
        let others: Vec<(&str, Policy)> = others
            .into_iter()
            .filter_map(|(how, policy)| Some((how, policy.filter(Policy::checks_anything)?)))
            .filter(|(_, policy)| Some(*policy) != levels.enforced())
            .collect();
        if levels.enforced().is_none() && others.is_empty() {
            return None;
        }
        let probe = Watcher::new("probe", spec.clone());
        let judge = |policy: Policy| match compliance(&probe, policy, None) {
            Compliance::AsWritten => (true, "Compliant", "complies as written".to_owned()),
            Compliance::Adapted(fields) => (
                true,
                "Adapted",
                format!("complies once adapted (where the pod sets none of them: {})", fields.join("; ")),
            ),
            Compliance::CannotComply(checks) => (false, "CannotComply", format!("cannot comply: {checks}")),
        };
        let (complies, reason, mut what) = match levels.enforced() {
            Some(policy) => {
                let (ok, reason, judged) = judge(policy);
                let judged = if ok { judged } else { format!("{judged}; pods asking for it are admitted without it") };
                (ok, reason, format!("PodSecurity \"{policy}\": the Watcher {judged}"))
            }
            None => (true, "NotEnforced", "no Pod Security level".to_owned()),
        };
        for (how, policy) in others {
            what.push_str(&format!("; it {how} {policy}: the Watcher {}", judge(policy).2));
        }
        Some(Self { complies, reason, what })
    }

    /// Worst first: what the condition of many namespaces leads with.
    fn rank(&self) -> u8 {
        match self.reason {
            "CannotComply" => 0,
            "Adapted" => 1,
            "Compliant" => 2,
            _ => 3,
        }
    }
}

/// Namespaces listed by name in a grouped condition; the rest are counted.
const NAMESPACES_NAMED: usize = 5;

/// The `PodSecurity` condition of a Watcher applying in many namespaces (a ClusterWatcher): the
/// namespaces grouped by standing, worst first, each group naming its first five and counting
/// the rest; `False` (`CannotComply`) where it cannot comply in any. `None` where none of them
/// sets a level. Each distinct set of levels is judged once.
pub(crate) fn grouped_pod_security_condition<'a>(
    spec: &watcher_api::WatcherSpec,
    namespaces: impl IntoIterator<Item = (&'a str, NamespaceLevels)>,
    generation: Option<i64>,
) -> Option<watcher_api::Condition> {
    let mut judged: Vec<(NamespaceLevels, Option<SecurityStanding>)> = Vec::new();
    let mut groups: Vec<(SecurityStanding, Vec<&str>)> = Vec::new();
    for (namespace, levels) in namespaces {
        if levels == NamespaceLevels::default() {
            continue;
        }
        let standing = match judged.iter().find(|(l, _)| *l == levels) {
            Some((_, standing)) => standing.clone(),
            None => {
                let standing = SecurityStanding::of(spec, &levels);
                judged.push((levels, standing.clone()));
                standing
            }
        };
        let Some(standing) = standing else { continue };
        match groups.iter_mut().find(|(s, _)| *s == standing) {
            Some((_, names)) => names.push(namespace),
            None => groups.push((standing, vec![namespace])),
        }
    }
    groups.sort_by(|(a, an), (b, bn)| a.rank().cmp(&b.rank()).then_with(|| an.cmp(bn)));
    let (worst, _) = groups.first()?;
    let (complies, reason) = (worst.complies, worst.reason);
    let parts: Vec<String> = groups
        .iter_mut()
        .map(|(standing, names)| {
            names.sort_unstable();
            let count = names.len();
            let named = names.iter().take(NAMESPACES_NAMED).copied().collect::<Vec<_>>().join(", ");
            let more = count.saturating_sub(NAMESPACES_NAMED);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            let (noun, verb) = if count == 1 { ("namespace", "enforces") } else { ("namespaces", "enforce") };
            format!("{count} {noun} ({named}{more}) {verb} {}", standing.what)
        })
        .collect();
    Some(condition(POD_SECURITY_CONDITION, complies, reason, parts.join(". "), generation))
}

/// The Pod Security levels of `namespace` in `namespaces`, under the cluster's Pod Security
/// admission configuration `cluster` (its defaults where a label is missing; a namespace not
/// cached yet has only those).
pub(crate) fn levels_in(
    namespaces: &Store<crate::sync::NamespaceMeta>,
    cluster: &ClusterDefaults,
    namespace: &str,
) -> NamespaceLevels {
    let meta = namespaces.get(&ObjectRef::new(namespace));
    let labels = meta.as_ref().map(|m| m.labels());
    NamespaceLevels::of_namespace(namespace, |key| labels.and_then(|l| l.get(key)).map(String::as_str), cluster)
}

/// The namespaces whose Pod Security levels differ from `known` (which is brought up to date):
/// only namespaces that set a level are kept.
pub(crate) fn relabelled(
    known: &mut HashMap<String, NamespaceLevels>,
    namespaces: &Store<crate::sync::NamespaceMeta>,
) -> Vec<String> {
    let mut now = HashMap::new();
    for namespace in namespaces.state() {
        let labels = namespace.labels();
        let levels = NamespaceLevels::from_lookup(|key| labels.get(key).map(String::as_str));
        if levels != NamespaceLevels::default() {
            now.insert(namespace.name_any(), levels);
        }
    }
    let mut changed: Vec<String> =
        now.iter().filter(|(n, l)| known.get(*n) != Some(*l)).map(|(n, _)| n.clone()).collect();
    changed.extend(known.keys().filter(|n| !now.contains_key(*n)).cloned());
    changed.sort_unstable();
    *known = now;
    changed
}

#[cfg(test)]
mod tests;
