use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use watcher_api::Watcher;

/// Before any pod: the Watcher's status says how it stands towards its namespace's enforced
/// level (the README's sample complies as written; a plain one once adapted; a privileged one
/// cannot), and what `warn` and `audit` would say; nothing where no level is set.
#[test]
fn the_pod_security_condition_says_how_the_watcher_stands() {
    use watcher_admission::pod_security::NamespaceLevels;
    let levels = |pairs: &[(&str, &str)]| {
        NamespaceLevels::from_labels(&pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    };
    let sample: Watcher =
        serde_saphyr::from_str(include_str!("../../../deploy/samples/app-watcher.yaml")).expect("sample");
    let restricted = levels(&[("pod-security.kubernetes.io/enforce", "restricted")]);
    let condition = |spec: &watcher_api::WatcherSpec, levels: &NamespaceLevels| {
        super::pod_security_condition(spec, "team-a", levels, Some(1)).expect("a condition")
    };
    let compliant = condition(&sample.spec, &restricted);
    assert_eq!((compliant.status.as_str(), compliant.reason.as_str()), ("True", "Compliant"));
    let plain: watcher_api::WatcherSpec =
        serde_json::from_value(json!({"container": {"name": "plain", "image": "busybox:1.36"}})).expect("spec");
    let adapted = condition(&plain, &restricted);
    assert_eq!(adapted.reason, "Adapted");
    assert!(adapted.message.contains("plain: allowPrivilegeEscalation: false, capabilities.drop: [ALL], seccompProfile: RuntimeDefault, runAsNonRoot: true"), "{}", adapted.message);
    let mut privileged = plain.clone();
    privileged.container.security_context = serde_json::from_value(json!({"privileged": true})).ok();
    let refused = condition(
        &privileged,
        &levels(&[
            ("pod-security.kubernetes.io/enforce", "baseline"),
            ("pod-security.kubernetes.io/audit", "restricted"),
        ]),
    );
    assert_eq!((refused.status.as_str(), refused.reason.as_str()), ("False", "CannotComply"));
    assert_eq!(
        refused.message,
        "namespace team-a enforces PodSecurity \"baseline:latest\": the Watcher cannot comply: privileged \
         (container \"plain\" must not set securityContext.privileged=true); pods asking for it are admitted \
         without it; it audits restricted:latest: the Watcher cannot comply: privileged (container \"plain\" must \
         not set securityContext.privileged=true)"
    );
    let warned = condition(&plain, &levels(&[("pod-security.kubernetes.io/warn", "restricted")]));
    assert_eq!((warned.status.as_str(), warned.reason.as_str()), ("True", "NotEnforced"));
    assert!(super::pod_security_condition(&plain, "team-a", &NamespaceLevels::default(), Some(1)).is_none());
}

/// A ClusterWatcher's condition groups its namespaces by standing, worst first, naming five of
/// each group and counting the rest; namespaces without a level are not mentioned, and none at
/// all gives no condition.
#[test]
fn the_grouped_condition_names_five_namespaces_per_standing() {
    use watcher_admission::pod_security::NamespaceLevels;
    let enforce = |level: &str| {
        NamespaceLevels::from_labels(&[("pod-security.kubernetes.io/enforce".to_owned(), level.to_owned())].into())
    };
    let spec: watcher_api::WatcherSpec = serde_json::from_value(json!({
        "container": {"name": "logs", "image": "busybox:1.36"},
        "volume": {"name": "varlog", "hostPath": {"path": "/var/log"}}}))
    .expect("spec");
    let names: Vec<String> = (0..12).map(|i| format!("team-{i:02}")).collect();
    let mut namespaces: Vec<(&str, NamespaceLevels)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let levels = match i % 3 {
            0 => enforce("restricted"),
            1 => enforce("privileged"),
            _ => NamespaceLevels::default(),
        };
        namespaces.push((name, levels));
    }
    namespaces.push(("apps", enforce("baseline")));
    let condition = super::grouped_pod_security_condition(&spec, namespaces.clone(), Some(2)).expect("a condition");
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "CannotComply"));
    let parts: Vec<&str> = condition.message.split(". ").collect();
    assert_eq!(parts.len(), 2, "privileged enforces nothing: not mentioned: {}", condition.message);
    assert!(
        parts[0].starts_with(
            "1 namespace (apps) enforces PodSecurity \"baseline:latest\": the Watcher cannot comply: hostPath volumes"
        ),
        "{}",
        parts[0]
    );
    assert!(
        parts[1].starts_with(
            "4 namespaces (team-00, team-03, team-06, team-09) enforce PodSecurity \"restricted:latest\": \
             the Watcher cannot comply: "
        ),
        "{}",
        parts[1]
    );
    assert_eq!(condition.observed_generation, Some(2));

    // More than five in a group: five named, the rest counted; the best standing is True.
    let plain: watcher_api::WatcherSpec =
        serde_json::from_value(json!({"container": {"name": "logs", "image": "busybox:1.36"}})).expect("spec");
    let many: Vec<String> = (0..8).map(|i| format!("ns-{i}")).collect();
    let levels = many.iter().map(|n| (n.as_str(), enforce("baseline")));
    let grouped = super::grouped_pod_security_condition(&plain, levels, None).expect("a condition");
    assert_eq!((grouped.status.as_str(), grouped.reason.as_str()), ("True", "Compliant"));
    assert_eq!(
        grouped.message,
        "8 namespaces (ns-0, ns-1, ns-2, ns-3, ns-4 and 3 more) enforce PodSecurity \"baseline:latest\": the \
         Watcher complies as written"
    );

    let unlabelled = namespaces.iter().filter(|(_, l)| *l == NamespaceLevels::default()).cloned();
    assert!(super::grouped_pod_security_condition(&spec, unlabelled, None).is_none());
}

/// Only namespaces whose Pod Security levels change are said to: labelled, relabelled,
/// unlabelled; other label changes and unlabelled namespaces are not.
#[test]
fn only_pod_security_relabelling_reconciles_watchers() {
    let (store, mut writer) = reflector::store::<crate::sync::NamespaceMeta>();
    let namespace = |name: &str, labels: Value| -> crate::sync::NamespaceMeta {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name, "labels": labels}}))
        .expect("namespace")
    };
    let mut known = std::collections::HashMap::new();
    writer.apply_watcher_event(&Event::Apply(namespace(
        "a",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )));
    writer.apply_watcher_event(&Event::Apply(namespace("b", json!({"team": "x"}))));
    assert_eq!(super::relabelled(&mut known, &store), ["a"]);
    assert!(super::relabelled(&mut known, &store).is_empty(), "nothing changed");

    writer.apply_watcher_event(&Event::Apply(namespace("b", json!({"team": "y"}))));
    writer.apply_watcher_event(&Event::Apply(namespace(
        "a",
        json!({"pod-security.kubernetes.io/enforce": "restricted", "team": "y"}),
    )));
    assert!(super::relabelled(&mut known, &store).is_empty(), "other labels");

    writer
        .apply_watcher_event(&Event::Apply(namespace("a", json!({"pod-security.kubernetes.io/enforce": "baseline"}))));
    writer.apply_watcher_event(&Event::Apply(namespace("b", json!({"pod-security.kubernetes.io/warn": "restricted"}))));
    assert_eq!(super::relabelled(&mut known, &store), ["a", "b"]);

    writer.apply_watcher_event(&Event::Apply(namespace("a", json!({}))));
    assert_eq!(super::relabelled(&mut known, &store), ["a"], "unlabelled");
}
