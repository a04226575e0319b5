use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSecurityContext};

use super::*;
use crate::PodView;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/pod-security/");

/// Every case of a verdicts file: the pod read as the webhook reads it, evaluated as a server of
/// that version would, gives the server's verdict and names the same failed checks in the same
/// words and order.
fn agrees_with(file: &str, server: u32) {
    let text = std::fs::read_to_string(format!("{FIXTURES}{file}")).expect("fixture");
    let verdicts: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let cases = verdicts["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 186, "{file}: every case read");
    let (mut allowed, mut refused, mut invalid) = (0, 0, 0);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let level = Level::parse(case["level"].as_str().expect("level")).expect("a level");
        let pod: PodView = crate::json::from_str(&case["pod"].to_string()).expect("a pod");
        let failures = evaluate(&pod.security_facts(), Policy { level, version: None }, server);
        let message = case["message"].as_str().unwrap_or_default();
        if case["allowed"].as_bool() == Some(true) {
            assert!(failures.passed(), "{file} {name}: the server allowed it, the evaluator says {failures}");
            allowed += 1;
        } else if message.contains("violates PodSecurity") {
            let prefix = format!("violates PodSecurity \"{}:latest\": ", level.as_str());
            let checks = message.split_once(&prefix).map(|(_, checks)| checks);
            assert_eq!(Some(failures.to_string().as_str()), checks, "{file} {name}");
            refused += 1;
        } else {
            // Refused by the pod's validation before Pod Security saw it: `procMount: Unmasked`
            // needs `hostUsers: false` on 1.36. The standards refuse it too.
            assert!(message.contains("is invalid") && name.contains("proc-unmasked"), "{file} {name}: {message}");
            assert!(failures.0.iter().any(|f| f.reason == "procMount"), "{file} {name}: {failures}");
            invalid += 1;
        }
    }
    assert!(allowed > 0 && refused > 0, "{file}: {allowed} allowed, {refused} refused, {invalid} invalid");
}

#[test]
fn agrees_with_kube_apiserver_1_36() {
    agrees_with("verdicts-1.36.json", 36);
}

#[test]
fn agrees_with_kube_apiserver_1_24() {
    agrees_with("verdicts-1.24.json", 24);
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn levels_are_read_from_labels_as_kube_apiserver_reads_them() {
    assert_eq!(NamespaceLevels::from_labels(&labels(&[])), NamespaceLevels::default());
    let restricted = Policy { level: Level::Restricted, version: None };
    let levels = NamespaceLevels::from_labels(&labels(&[(ENFORCE_LABEL, "restricted")]));
    assert_eq!(levels.enforced(), Some(restricted));
    assert_eq!(levels.warn, Some(restricted), "warn follows a stricter enforce");
    let pinned = NamespaceLevels::from_labels(&labels(&[
        (ENFORCE_LABEL, "baseline"),
        ("pod-security.kubernetes.io/enforce-version", "v1.23"),
        (WARN_LABEL, "restricted"),
        (AUDIT_LABEL, "nonsense"),
    ]));
    assert_eq!(pinned.enforce, Some(Policy { level: Level::Baseline, version: Some(23) }));
    assert_eq!(pinned.enforce.map(|p| p.to_string()).as_deref(), Some("baseline:v1.23"));
    assert_eq!(pinned.warn, Some(restricted));
    assert_eq!(pinned.audit, None, "an unreadable audit level is ignored");
    let unreadable = NamespaceLevels::from_labels(&labels(&[(ENFORCE_LABEL, "strict")]));
    assert_eq!(unreadable.enforced(), Some(restricted), "an unreadable enforce level is the strictest");
    assert_eq!(unreadable.warn, None);
    let privileged = NamespaceLevels::from_labels(&labels(&[(ENFORCE_LABEL, "privileged")]));
    assert_eq!(privileged.enforced(), None, "privileged checks nothing");
}

fn container(security: serde_json::Value) -> Container {
    serde_json::from_value(serde_json::json!({"name": "c", "image": "i", "securityContext": security}))
        .expect("container")
}

#[test]
fn versions_decide_which_checks_apply() {
    let root = container(serde_json::json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true, "runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}));
    let pod = PodFacts { containers: vec![ContainerFacts::of(&root)], ..PodFacts::default() };
    let at = |version| evaluate(&pod, Policy { level: Level::Restricted, version }, 36);
    assert_eq!(at(None).reasons(), "runAsUser=0");
    assert!(at(Some(22)).passed(), "runAsUser=0 is checked from v1.23");
    let user_namespace = PodFacts { host_users: Some(false), ..pod.clone() };
    assert!(evaluate(&user_namespace, Policy { level: Level::Restricted, version: None }, 36).passed());
    assert_eq!(
        evaluate(&user_namespace, Policy { level: Level::Restricted, version: None }, 34).reasons(),
        "runAsUser=0"
    );
    let no_drop = container(serde_json::json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"}}));
    let pod = PodFacts { containers: vec![ContainerFacts::of(&no_drop)], ..PodFacts::default() };
    assert_eq!(
        evaluate(&pod, Policy { level: Level::Restricted, version: None }, 24).reasons(),
        "unrestricted capabilities"
    );
    assert!(evaluate(&pod, Policy { level: Level::Restricted, version: Some(21) }, 24).passed());
    let windows = PodFacts { windows: true, ..pod.clone() };
    assert!(evaluate(&windows, Policy { level: Level::Restricted, version: None }, 36).passed());
}

#[test]
fn the_rarer_checks_speak_as_the_server_does() {
    let host = container(serde_json::json!({"windowsOptions": {"hostProcess": true}, "procMount": "Unmasked"}));
    let mut probed = host.clone();
    probed.name = "probed".into();
    probed.liveness_probe =
        serde_json::from_value(serde_json::json!({"httpGet": {"port": 80, "host": "10.0.0.1"}})).ok();
    let sysctls: PodSecurityContext =
        serde_json::from_value(serde_json::json!({"sysctls": [{"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_rmem", "value": "1"}]}))
        .expect("context");
    let pod = PodFacts {
        security_context: Some(std::borrow::Cow::Borrowed(&sysctls)),
        host_network: true,
        host_pid: true,
        annotations: vec![("container.apparmor.security.beta.kubernetes.io/c".into(), "unconfined".into())],
        containers: vec![ContainerFacts::of(&host), ContainerFacts::of(&probed)],
        ..PodFacts::default()
    };
    let baseline = Policy { level: Level::Baseline, version: None };
    assert_eq!(
        evaluate(&pod, baseline, 36).to_string(),
        "forbidden AppArmor profiles (container \"c\" and annotation must not set AppArmor profile type to \
         \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\"), \
         host namespaces (hostNetwork=true, hostPID=true), \
         probe or lifecycle host (container \"probed\" uses probe or lifecycle host \"10.0.0.1\"), \
         procMount (containers \"c\", \"probed\" must not set securityContext.procMount to \"Unmasked\"), \
         forbidden sysctls (kernel.msgmax), \
         hostProcess (containers \"c\", \"probed\" must not set securityContext.windowsOptions.hostProcess=true)"
    );
    assert_eq!(
        evaluate(&pod, baseline, 24).to_string(),
        "forbidden AppArmor profile (container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"), \
         host namespaces (hostNetwork=true, hostPID=true), \
         forbidden sysctls (kernel.msgmax, net.ipv4.tcp_rmem), \
         hostProcess (containers \"c\", \"probed\" must not set securityContext.windowsOptions.hostProcess=true)",
        "1.24 words AppArmor by annotation, stores no procMount, checks no probe host, allows fewer sysctls"
    );
}

#[test]
fn the_adaptation_sets_only_what_the_watcher_leaves_unset() {
    let restricted = Policy { level: Level::Restricted, version: None };
    let bare = Container { name: "w".into(), ..Container::default() };
    let pod = PodFacts::default();
    let adaptation = Adaptation::needed(restricted, 36, &pod, bare.security_context.as_ref());
    assert_eq!(
        adaptation.fields(),
        [
            "allowPrivilegeEscalation: false",
            "capabilities.drop: [ALL]",
            "seccompProfile: RuntimeDefault",
            "runAsNonRoot: true",
            "runAsUser: 65532"
        ]
    );
    let adapted = Container { security_context: Some(adaptation.apply(None)), ..bare.clone() };
    assert!(
        evaluate(&PodFacts { containers: vec![ContainerFacts::of(&adapted)], ..pod.clone() }, restricted, 36).passed()
    );
    let json = adaptation.written(&bare);
    assert_eq!(serde_json::from_value::<Container>(json).expect("container"), adapted, "the patch sets the same");

    let pod_context: PodSecurityContext =
        serde_json::from_value(serde_json::json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}))
            .expect("context");
    let hardened_pod =
        PodFacts { security_context: Some(std::borrow::Cow::Borrowed(&pod_context)), ..PodFacts::default() };
    let own = container(serde_json::json!({"capabilities": {"add": ["NET_ADMIN"]}}));
    let adaptation = Adaptation::needed(restricted, 36, &hardened_pod, own.security_context.as_ref());
    assert_eq!(
        adaptation.fields(),
        ["allowPrivilegeEscalation: false", "capabilities.drop: [ALL]", "runAsUser: 65532"],
        "the pod sets the rest, the Watcher what it adds; the user, no one"
    );
    let adapted = adaptation.apply(own.security_context.as_ref());
    let capabilities = adapted.capabilities.expect("capabilities");
    assert_eq!((capabilities.add, capabilities.drop), (Some(vec!["NET_ADMIN".into()]), Some(vec!["ALL".into()])));
    assert!(Adaptation::needed(Policy { level: Level::Baseline, version: None }, 36, &pod, None).is_empty());
}

/// The pods whose verdict depends on what kube-apiserver changes before Pod Security sees them
/// (seccomp and AppArmor annotations, `procMount`), as real 1.24 and 1.36 servers judged them:
/// the same verdict, in the same words.
#[test]
fn judges_the_pod_as_the_server_prepares_it() {
    for (file, server) in [("prepared-1.24.json", 24), ("prepared-1.36.json", 36)] {
        let file = format!("../pod-security-prepared/{file}");
        let text = std::fs::read_to_string(format!("{FIXTURES}{file}")).expect("fixture");
        let verdicts: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        for case in verdicts["cases"].as_array().expect("cases") {
            let name = case["name"].as_str().expect("name");
            let level = Level::parse(case["level"].as_str().expect("level")).expect("a level");
            let version =
                case["version"].as_str().and_then(|v| v.strip_prefix("v1.")).map(|m| m.parse().expect("minor"));
            let policy = Policy { level, version };
            let pod: PodView = crate::json::from_str(&case["pod"].to_string()).expect("a pod");
            let failures = evaluate(&pod.security_facts(), policy, server);
            let message = case["message"].as_str().unwrap_or_default();
            if case["allowed"].as_bool() == Some(true) {
                assert!(failures.passed(), "{file} {name}: the server allowed it, the evaluator says {failures}");
            } else if let Some((_, checks)) = message.split_once(&format!("violates PodSecurity \"{policy}\": ")) {
                assert_eq!(failures.to_string(), checks, "{file} {name}");
            } else {
                assert!(message.contains("is invalid") && name == "proc-mount-unmasked", "{file} {name}: {message}");
            }
        }
    }
}

/// What each server version changes before Pod Security: seccomp annotations into the fields
/// from 1.19 to 1.26 (and fields into annotations to 1.24); AppArmor annotations into the
/// container's field from 1.30; `procMount` dropped before 1.33 (its feature off by default on
/// 1.31 and 1.32 too).
#[test]
fn each_version_prepares_the_pod_as_its_server_does() {
    let unmasked = container(serde_json::json!({"procMount": "Unmasked"}));
    let annotations = |pairs: &[(&'static str, &'static str)]| {
        pairs.iter().map(|(k, v)| (std::borrow::Cow::Borrowed(*k), std::borrow::Cow::Borrowed(*v))).collect()
    };
    let pod = PodFacts {
        annotations: annotations(&[
            ("seccomp.security.alpha.kubernetes.io/pod", "runtime/default"),
            ("container.apparmor.security.beta.kubernetes.io/c", "localhost/strict"),
        ]),
        containers: vec![ContainerFacts::of(&unmasked)],
        ..PodFacts::default()
    };
    let seccomp = |server| {
        let prepared = pod.clone().prepared(server);
        prepared.security_context.and_then(|p| p.seccomp_profile.clone()).map(|s| s.type_)
    };
    let container_of = |server| pod.clone().prepared(server).containers[0].security.clone().expect("security");
    assert_eq!(seccomp(18), None);
    assert_eq!(seccomp(19).as_deref(), Some("RuntimeDefault"));
    assert_eq!(seccomp(26).as_deref(), Some("RuntimeDefault"));
    assert_eq!(seccomp(27), None, "ignored from 1.27");
    for server in [24, 31, 32] {
        assert_eq!(container_of(server).proc_mount, None, "{server}: dropped");
    }
    assert_eq!(container_of(33).proc_mount.as_deref(), Some("Unmasked"));
    assert_eq!(container_of(29).app_armor_profile, None);
    let profile = container_of(30).app_armor_profile.clone().expect("from 1.30");
    assert_eq!((profile.type_.as_str(), profile.localhost_profile.as_deref()), ("Localhost", Some("strict")));
    // A field copied into its annotation (1.19 to 1.24), which a policy before v1.19 reads.
    let unconfined = container(serde_json::json!({"seccompProfile": {"type": "Unconfined"}}));
    let fielded = PodFacts { containers: vec![ContainerFacts::of(&unconfined)], ..PodFacts::default() };
    let old = Policy { level: Level::Baseline, version: Some(18) };
    assert_eq!(evaluate(&fielded, old, 24).reasons(), "seccompProfile");
    assert!(evaluate(&fielded, old, 25).passed(), "1.25 copies annotations into fields only");
    assert!(!fielded.changed_by(36) && pod.changed_by(24));
}
