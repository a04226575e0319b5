use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use serde_json::{Value, json};
use watcher_admission::Sent;
use watcher_admission::resources::ResourceRules;
use watcher_admission::{InjectOptions, PodView, WebhookSelectors};
use watcher_api::{ClusterWatcher, CompiledPolicy, ImagePolicy, Watcher};
use watcher_webhook::Reviewer;

use super::{Explanation, Scope, cluster_lines, explain, sent_by};

fn watcher(name: &str, container: &str, image: &str, selector: Option<Value>) -> Watcher {
    let mut spec = json!({"container": {"name": container, "image": image}});
    if let Some(selector) = selector {
        spec["selector"] = selector;
    }
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
    .expect("Watcher")
}

fn policy() -> Arc<CompiledPolicy> {
    let policy: ImagePolicy =
        serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": "mirror"},
        "spec": {"rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}]}}))
        .expect("ImagePolicy");
    Arc::new(policy.compile())
}

fn options() -> InjectOptions {
    InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    }
}

/// deploy/'s selectors: kube-apiserver never sends these namespaces.
fn deploy_selectors() -> WebhookSelectors {
    let config: Value = serde_saphyr::from_str(include_str!("../../../../deploy/webhook.yaml")).expect("webhook.yaml");
    WebhookSelectors {
        namespace: Some(serde_json::from_value(config["webhooks"][0]["namespaceSelector"].clone()).expect("selector")),
        object: None,
    }
}

fn explain_in(
    namespace: &str,
    labels: &[(&str, &str)],
    pod: Value,
    existing: bool,
    watchers: &[Watcher],
) -> Explanation {
    explain_with(namespace, labels, pod, existing, watchers, &[])
}

thread_local! {
    /// The namespace's LimitRanges and ResourceQuotas for [`explain_with`] (none unless a test
    /// sets them).
    static RESOURCES: std::cell::RefCell<ResourceRules> = std::cell::RefCell::default();
}

/// [`explain_in`] with ClusterWatchers: the Watchers that apply are resolved as the webhook
/// resolves them.
fn explain_with(
    namespace: &str,
    labels: &[(&str, &str)],
    pod: Value,
    existing: bool,
    watchers: &[Watcher],
    cluster: &[ClusterWatcher],
) -> Explanation {
    let mut namespace_labels: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    namespace_labels.insert("kubernetes.io/metadata.name".into(), namespace.into());
    let pod: PodView = serde_json::from_value(pod).expect("pod");
    let own: Vec<Arc<Watcher>> = watchers.iter().cloned().map(Arc::new).collect();
    let cluster: Vec<Arc<ClusterWatcher>> = cluster.iter().cloned().map(Arc::new).collect();
    let effective =
        watcher_admission::cluster::watchers_in_namespace(namespace, &namespace_labels, &own, &cluster, &options());
    let refs: Vec<&Watcher> = effective.iter().map(AsRef::as_ref).collect();
    let policies = [policy()];
    // The conditions registered as the operator computes them.
    let admission = watcher_admission::Scope::compute(
        refs.iter().copied(),
        &policies,
        [(namespace, &namespace_labels)],
        "watcher-system",
    );
    let sent = sent_by(Some(&admission.conditions()), &admission, namespace, pod.labels(), pod.annotations());
    let scope = Scope {
        namespace,
        namespace_labels: &namespace_labels,
        pod_security: &watcher_admission::pod_security::ClusterDefaults::default(),
        watchers: &refs,
        cluster: cluster_lines(namespace, &namespace_labels, &own, &cluster, &options()),
        selectors: &deploy_selectors(),
        policies: &policies,
        options: &options(),
        resources: &RESOURCES.with(|r| r.borrow().clone()),
        sent,
    };
    explain(&pod, existing, &scope)
}

/// Which one applied and why: a ClusterWatcher where its namespaceSelector matches; the
/// namespace's own Watcher of the same name where there is one; nothing where it does not
/// match; never in the operator's namespace.
#[test]
fn a_cluster_watcher_is_explained_where_it_applies_and_where_it_does_not() {
    let cluster: ClusterWatcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1",
        "kind": "ClusterWatcher", "metadata": {"name": "log-agent", "uid": "cw"},
        "spec": {"container": {"name": "log-agent", "image": "busybox:1.36"},
                 "namespaceSelector": {"matchLabels": {"team": "payments"}}}}))
    .expect("ClusterWatcher");
    let pod = |namespace: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": namespace,
               "annotations": {"watcher.dev/inject": "log-agent"}},
               "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}})
    };
    let cluster = [cluster];
    let served = explain_with("team-a", &[("team", "payments")], pod("team-a"), false, &[], &cluster);
    assert_eq!(reasons(&served), [("log-agent", true, None, "Annotation")]);
    assert!(served.watchers[0].cluster);
    assert_eq!(served.cluster_watchers[0].reason, "Applies");
    assert!(served.text().contains("√ log-agent (ClusterWatcher): injected (Annotation)"), "{}", served.text());
    let json = serde_json::to_value(&served).expect("JSON");
    assert_eq!(json["clusterWatchers"][0]["message"], "ClusterWatcher log-agent applies in namespace team-a");

    let own = watcher("log-agent", "team-agent", "busybox:1.36", None);
    let taken = explain_with("team-a", &[("team", "payments")], pod("team-a"), false, &[own], &cluster);
    assert_eq!(reasons(&taken), [("log-agent", true, None, "Annotation")]);
    assert!(!taken.watchers[0].cluster, "the namespace's own Watcher applies");
    assert_eq!(taken.cluster_watchers[0].reason, "TakenOver");
    assert!(taken.text().contains("Watcher team-a/log-agent takes namespace team-a over"), "{}", taken.text());

    let elsewhere = explain_with("team-b", &[("team", "search")], pod("team-b"), false, &[], &cluster);
    assert_eq!(reasons(&elsewhere), [("log-agent", false, None, "WatcherMissing")]);
    assert_eq!(elsewhere.cluster_watchers[0].reason, "NotSelected");

    let operator = explain_with("watcher-system", &[("team", "payments")], pod("watcher-system"), false, &[], &cluster);
    assert_eq!(operator.cluster_watchers[0].reason, "NeverInjected");
}

fn reasons(explanation: &Explanation) -> Vec<(&str, bool, Option<bool>, &str)> {
    explanation.watchers.iter().map(|w| (w.name.as_str(), w.injected, w.up_to_date, w.reason)).collect()
}

#[test]
fn a_manifest_gets_a_reason_for_every_watcher() {
    let watchers = [
        watcher("log", "log", "busybox:1.36", None),
        watcher("metrics", "metrics", "quay.io/m:1", Some(json!({"matchLabels": {"app": "web"}}))),
        watcher("clash", "app", "busybox", None),
        watcher("idle", "idle", "busybox", None),
    ];
    let pod = json!({"metadata": {"name": "web-1", "labels": {"app": "web"},
                                  "annotations": {"watcher.dev/inject": "log,clash,ghost"}},
                     "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    let explanation = explain_in("team-a", &[], pod, false, &watchers);
    assert_eq!(explanation.excluded, None);
    assert_eq!(
        reasons(&explanation),
        [
            ("clash", false, None, "Collision"),
            ("ghost", false, None, "WatcherMissing"),
            ("idle", false, None, "NotAsked"),
            ("log", true, None, "Annotation"),
            ("metrics", true, None, "Selector"),
        ]
    );
    assert_eq!(
        explanation.watchers[0].message,
        "asked by annotation watcher.dev/inject, but the pod already has a container named app"
    );
    assert_eq!(
        explanation.watchers[1].message,
        "asked by annotation, but there is no Watcher ghost in namespace team-a"
    );
    // The pod's image and the injected sidecar's, rewritten by the one policy; quay.io is not.
    let images: Vec<(&str, &str, &str, &str)> = explanation
        .images
        .iter()
        .map(|i| (i.container.as_str(), i.from.as_str(), i.to.as_str(), i.policy.as_str()))
        .collect();
    assert_eq!(
        images,
        [
            ("log", "busybox:1.36", "mirror.internal/library/busybox:1.36", "mirror"),
            ("app", "nginx:1.27", "mirror.internal/library/nginx:1.27", "mirror"),
        ]
    );
}

#[test]
fn an_existing_pod_is_judged_by_what_it_carries() {
    let log = watcher("log", "log", "busybox:1.36", None);
    let hash = log.spec.spec_hash().to_owned();
    let watchers = [log, watcher("late", "late", "busybox", None), watcher("old", "old", "busybox:1.37", None)];
    let pod = json!({"metadata": {"name": "app", "annotations": {
            "watcher.dev/inject": "log,late,old",
            "watcher.dev/injected": format!("log@{hash},old@00000000"),
            "watcher.dev/original-images": "app=nginx"}},
        "spec": {"containers": [{"name": "app", "image": "mirror.internal/library/nginx:latest"},
                                {"name": "log", "image": "busybox:1.36"}, {"name": "old", "image": "busybox:1.36"}]}});
    let explanation = explain_in("team-a", &[], pod, true, &watchers);
    assert_eq!(
        reasons(&explanation),
        [
            ("late", false, None, "Annotation"),
            ("log", true, Some(true), "Annotation"),
            ("old", true, Some(false), "Annotation")
        ]
    );
    assert!(explanation.watchers[0].message.contains("not injected: the webhook did not see the pod"));
    assert!(explanation.watchers[2].message.contains("outdated: injected with specHash 00000000"));
    assert_eq!(explanation.images.len(), 1);
    assert_eq!(
        (explanation.images[0].from.as_str(), explanation.images[0].to.as_str(), explanation.images[0].policy.as_str()),
        ("nginx", "mirror.internal/library/nginx:latest", "mirror")
    );
}

#[test]
fn exclusions_name_their_rule() {
    let watchers = [watcher("log", "log", "busybox", Some(json!({})))];
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    let cases = [
        ("kube-system", &[][..], "SystemNamespace"),
        ("watcher-system", &[][..], "OperatorNamespace"),
        ("team-a", &[("watcher.dev/injection", "disabled")][..], "DisabledLabel"),
    ];
    for (namespace, labels, reason) in cases {
        let mut explanation = explain_in(namespace, labels, pod.clone(), false, &watchers);
        let excluded = explanation.excluded.take().expect("excluded");
        assert_eq!(serde_json::to_value(excluded.reason).expect("JSON"), json!(reason), "{namespace}");
        assert!(explanation.images.is_empty(), "never rewritten either");
        assert_eq!(
            explanation.watchers.iter().map(|w| (w.injected, w.reason)).collect::<Vec<_>>(),
            [(false, "Excluded")],
            "{namespace}"
        );
    }
}

#[test]
fn the_json_has_the_documented_shape() {
    let explanation = explain_in(
        "team-a",
        &[],
        json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "app", "image": "quay.io/a"}]}}),
        false,
        &[watcher("log", "log", "busybox", None)],
    );
    assert_eq!(
        serde_json::to_value(&explanation).expect("JSON"),
        json!({"namespace": "team-a", "pod": "web-", "sent": true, "webhook": "inject.watcher.dev",
               "excluded": null, "images": [],
               "watchers": [{"name": "log", "injected": false, "upToDate": null, "reason": "NotAsked",
                             "message": "not asked: not named in watcher.dev/inject, and Watcher log has no selector"}]})
    );
}

/// The real AdmissionReviews kube-apiserver sent: what `check-inject -f` says of each pod is
/// what the webhook does with it (Watchers injected, images rewritten).
#[test]
fn check_inject_and_the_webhook_decide_alike_on_the_real_fixtures() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../admission/fixtures/admission-review");
    let watchers = [
        watcher("log-watcher", "log-watcher", "busybox:1.36", None),
        watcher("metrics", "metrics", "quay.io/m:1", Some(json!({"matchLabels": {"app": "web"}}))),
        watcher("watcher", "watcher", "busybox", Some(json!({}))),
        watcher("dry", "dry", "alpine", Some(json!({"matchLabels": {"run": "dry"}}))),
    ];
    let reviewer = Reviewer::new(watchers.iter().cloned().map(Arc::new).collect::<Vec<_>>(), options())
        .with_policies(Arc::new(vec![policy()]));
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let body = std::fs::read(&path).expect("fixture");
        let review: Value = serde_json::from_slice(&body).expect("JSON");
        let namespace = review["request"]["namespace"].as_str().expect("namespace").to_owned();
        let watchers: Vec<Watcher> = watchers
            .iter()
            .cloned()
            .map(|mut w| {
                w.metadata.namespace = Some(namespace.clone());
                w
            })
            .collect();
        let explanation = explain_in(&namespace, &[], review["request"]["object"].clone(), false, &watchers);

        let (answer, _) = reviewer.review(&body).expect("answered");
        let answer = serde_json::to_value(&answer).expect("JSON");
        let mut pod = review["request"]["object"].clone();
        if let Some(patch) = answer["response"].get("patch") {
            let bytes: ByteString = serde_json::from_value(patch.clone()).expect("base64");
            let patch: json_patch::Patch = serde_json::from_slice(&bytes.0).expect("patch");
            json_patch::patch(&mut pod, &patch).expect("applies");
        }
        let annotations = &pod["metadata"]["annotations"];
        let injected: Vec<&str> = annotations["watcher.dev/injected"]
            .as_str()
            .unwrap_or("")
            .split(',')
            .filter_map(|e| e.split('@').next().filter(|n| !n.is_empty()))
            .collect();
        let mut explained: Vec<&str> =
            explanation.watchers.iter().filter(|w| w.injected).map(|w| w.name.as_str()).collect();
        let mut webhook = injected.clone();
        explained.sort_unstable();
        webhook.sort_unstable();
        assert_eq!(explained, webhook, "{}", path.display());
        let originals: Vec<String> = annotations["watcher.dev/original-images"]
            .as_str()
            .unwrap_or("")
            .split(',')
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        let explained: Vec<String> = explanation.images.iter().map(|i| format!("{}={}", i.container, i.from)).collect();
        assert_eq!(explained.len(), originals.len(), "{}", path.display());
        for entry in &explained {
            assert!(originals.contains(entry), "{entry} in {originals:?} ({})", path.display());
        }
        seen += 1;
    }
    assert_eq!(seen, 4, "every fixture");
}

/// `"sent"`: from the conditions registered and the scope the operator computes, as the writer
/// writes them. No configuration sends nothing; no scope condition sends every pod; a pod that
/// asks for a required Watcher goes to `required.watcher.dev` once that webhook exists.
#[test]
fn sent_follows_the_registered_conditions() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let mut audit = watcher("audit", "audit", "busybox", Some(json!({"matchLabels": {"audit": "on"}})));
    audit.spec.failure_policy = watcher_api::FailurePolicy::Fail;
    let watchers = [watcher("metrics", "metrics", "quay.io/m:1", Some(json!({"matchLabels": {"app": "web"}}))), audit];
    let namespace_labels = labels(&[("kubernetes.io/metadata.name", "team-a")]);
    let admission = watcher_admission::Scope::compute(
        &watchers,
        &[] as &[Arc<CompiledPolicy>],
        [("team-a", &namespace_labels)],
        "watcher-system",
    );
    let scoped = admission.conditions();
    let every_pod = watcher_admission::scope::Conditions::default();
    let none = BTreeMap::new();
    let cases = [
        (Some(&scoped), labels(&[("app", "web")]), Sent::Inject),
        (Some(&scoped), labels(&[("app", "api")]), Sent::No),
        (Some(&scoped), labels(&[("audit", "on")]), Sent::Required),
        (Some(&every_pod), labels(&[("app", "api")]), Sent::Inject),
        (Some(&every_pod), labels(&[("audit", "on")]), Sent::Inject),
        (None, labels(&[("app", "web")]), Sent::No),
    ];
    for (registered, pod_labels, sent) in cases {
        assert_eq!(sent_by(registered, &admission, "team-a", &pod_labels, &none), sent, "{pod_labels:?}");
    }
}

/// What the sidecar sees of the app, for a manifest (admission's own pass) and for the pod
/// admission made of it (the same step on the pod as stored): shared, mounted, carried,
/// skipped and why.
#[test]
fn what_the_sidecar_sees_is_explained_for_a_manifest_and_the_pod_it_became() {
    let mut sees: Watcher = watcher("log-watcher", "log-watcher", "busybox:1.36", None);
    sees.spec = serde_json::from_value(json!({
        "container": {"name": "log-watcher", "image": "busybox:1.36"},
        "volume": {"name": "app-logs", "emptyDir": {}},
        "shareVolumes": "ReadOnly", "appVolumeMounts": [{"mountPath": "/var/log/app"}],
        "transferEnv": [{"names": ["SERVICE_NAME", "POD_IP"]}],
        "podAnnotations": {"prometheus.io/scrape": "true"},
    }))
    .expect("spec");
    let review: Value = serde_json::from_str(include_str!(
        "../../../../admission/fixtures/admission-review/pod-create-named-annotated.json"
    ))
    .expect("fixture");
    let mut manifest = review["request"]["object"].clone();
    manifest["spec"]["containers"][0]["env"] = json!([{"name": "SERVICE_NAME", "value": "web"}]);
    let watchers = [sees];
    let planned = explain_in("team-a", &[], manifest.clone(), false, &watchers);
    let expected = [
        "shares /data of app (read-only)",
        "does not share /var/run/secrets/kubernetes.io/serviceaccount: the ServiceAccount token, which kube-apiserver mounts itself",
        "mounts volume app-logs at /var/log/app in app",
        "carries SERVICE_NAME from app",
        "does not carry POD_IP: app has no such variable",
    ];
    assert_eq!(planned.watchers[0].sees[..5], expected);
    assert_eq!(planned.watchers[0].sees[5], "annotates prometheus.io/scrape");
    let json = serde_json::to_value(&planned).expect("JSON");
    assert_eq!(json["watchers"][0]["sees"].as_array().map(Vec::len), Some(6));
    assert!(planned.text().contains("\n    carries SERVICE_NAME from app\n"), "{}", planned.text());

    // The pod admission made of it, as stored: the same lines, the annotation now on it.
    let refs: Vec<&Watcher> = watchers.iter().collect();
    let view: PodView = serde_json::from_value(manifest.clone()).expect("pod");
    let injection = watcher_admission::inject(&view, "team-a", &refs, &options());
    let mut stored = manifest;
    json_patch::patch(&mut stored, &injection.patch).expect("applies");
    let existing = explain_in("team-a", &[], stored, true, &watchers);
    assert_eq!(existing.watchers[0].sees[..5], expected);
    assert_eq!(existing.watchers[0].sees[5], "annotation prometheus.io/scrape is on the pod (never overwritten)");
}

/// In a namespace that enforces `restricted`, the README's app (which passes it by itself): a
/// plain Watcher is injected with what the level needs set, one asking for a privileged
/// container is left out in kube-apiserver's words, as admission decides.
#[test]
fn the_enforced_pod_security_level_is_explained() {
    let app: Value = serde_saphyr::from_str(include_str!("../../../../deploy/samples/app.yaml")).expect("app.yaml");
    let selector = json!({"matchLabels": {"app": "shop"}});
    let plain = watcher("plain", "plain", "busybox:1.36", Some(selector.clone()));
    let mut privileged = watcher("privileged", "root", "busybox:1.36", Some(selector));
    privileged.spec.container.security_context = serde_json::from_value(json!({"privileged": true})).ok();
    let watchers = [plain, privileged];
    let labels = [("pod-security.kubernetes.io/enforce", "restricted")];
    let explained = explain_in("team-a", &labels, app.clone(), false, &watchers);
    assert_eq!(reasons(&explained), [("plain", true, None, "Selector"), ("privileged", false, None, "PodSecurity")]);
    assert_eq!(
        explained.watchers[0].pod_security,
        [
            "container plain gets allowPrivilegeEscalation: false, capabilities.drop: [ALL] for PodSecurity \"restricted:latest\""
        ]
    );
    assert_eq!(
        explained.watchers[1].message,
        "left out: it would make the pod violate PodSecurity \"restricted:latest\": privileged (container \"root\" \
         must not set securityContext.privileged=true)"
    );
    let text = explained.text();
    assert!(text.contains("× privileged: not injected (PodSecurity): left out"), "{text}");
    let unlabelled = explain_in("team-a", &[], app, false, &watchers);
    assert!(unlabelled.watchers.iter().all(|l| l.injected && l.pod_security.is_empty()), "no level, nothing changes");
}

/// A Watcher whose sidecar is watcher-agent: `check-inject` parses its configuration with the
/// agent's own code and says what it will follow, for README's sample on README's app; a
/// configuration the agent would refuse is named; a glob no volume serves is said so.
#[test]
fn the_agents_configuration_and_what_it_follows_are_explained() {
    let mut sample: Watcher =
        serde_saphyr::from_str(include_str!("../../../../deploy/samples/app-watcher.yaml")).expect("sample");
    sample.metadata.namespace = Some("team-a".into());
    let app: Value = serde_saphyr::from_str(include_str!("../../../../deploy/samples/app.yaml")).expect("app");
    let explained = explain_in("team-a", &[], app.clone(), false, std::slice::from_ref(&sample));
    assert_eq!(
        explained.watchers[0].agent,
        [
            "watcher-agent: configuration valid",
            "follows /var/log/app/*.log: a volume is mounted at /var/log/app in the sidecar",
        ]
    );
    assert!(explained.text().contains("\n    follows /var/log/app/*.log: a volume is mounted"), "{}", explained.text());

    let mut unshared = sample.clone();
    unshared.spec.app.share_volumes = watcher_api::ShareVolumes::None;
    let config = unshared.spec.config_data.get_or_insert_default();
    config.insert("AGENT_LOGS_CONTAINER".into(), "app".into());
    let lines =
        explain_in("team-a", &[], app.clone(), false, std::slice::from_ref(&unshared)).watchers[0].agent.clone();
    assert!(lines[1].starts_with("follows /var/log/app/*.log: nothing is mounted there in the sidecar"), "{lines:?}");
    assert_eq!(lines[2], "follows the log stream of container app (the pod's ServiceAccount needs get on pods/log)");

    let mut broken = sample.clone();
    broken.spec.config_data.get_or_insert_default().insert("AGENT_ALERT_ERROR".into(), "often".into());
    let lines = explain_in("team-a", &[], app, false, std::slice::from_ref(&broken)).watchers[0].agent.clone();
    assert_eq!(
        lines,
        ["watcher-agent: configuration invalid: AGENT_ALERT_ERROR: \"often\": `<count>/<window>`, e.g. 5/1m"]
    );
}

/// The samples that read values, JSON fields and stack traces are what the agent takes; a value
/// that names a group the rule's expression lacks is named before any pod, in the agent's words.
#[test]
fn the_value_and_field_samples_are_valid_and_their_mistakes_named() {
    let samples = [
        (
            include_str!("../../../../deploy/samples/app-values-watcher.yaml"),
            include_str!("../../../../deploy/samples/app-values.yaml"),
        ),
        (
            include_str!("../../../../deploy/samples/app-json-watcher.yaml"),
            include_str!("../../../../deploy/samples/app-json.yaml"),
        ),
    ];
    for (watcher, app) in samples {
        let mut sample: Watcher = serde_saphyr::from_str(watcher).expect("sample");
        sample.metadata.namespace = Some("team-a".into());
        let app: Value = serde_saphyr::from_str(app).expect("app");
        let lines =
            explain_in("team-a", &[], app.clone(), false, std::slice::from_ref(&sample)).watchers[0].agent.clone();
        assert_eq!(lines[0], "watcher-agent: configuration valid", "{lines:?}");
        let mut broken = sample.clone();
        let config = broken.spec.config_data.get_or_insert_default();
        config.retain(|k, _| k == "AGENT_FILES");
        config.insert("AGENT_RULE_LATENCY".into(), r"latency=(?P<millis>\d+)ms".into());
        config.insert("AGENT_VALUE_LATENCY".into(), "ms".into());
        config.insert("AGENT_METRIC_LATENCY".into(), "histogram".into());
        let lines = explain_in("team-a", &[], app, false, std::slice::from_ref(&broken)).watchers[0].agent.clone();
        assert!(
            lines[0].starts_with(
                "watcher-agent: configuration invalid: AGENT_VALUE_LATENCY: \"ms\" is not a named group of \
                 AGENT_RULE_LATENCY (its groups are millis)"
            ),
            "{lines:?}"
        );
    }
}

/// Under the namespace's quota (as kube-apiserver stored it: `limits.cpu: 300m`), the pod of
/// kube-apiserver's refusal: the plain Watcher is injected with what the quota asks stated, the
/// one that does not fit in what is left is left out with the quota's words.
#[test]
fn the_namespaces_resource_rules_are_explained() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../admission/fixtures/resources/resourcequota-1.36.json");
    let quota: k8s_openapi::api::core::v1::ResourceQuota =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("quota");
    RESOURCES.with(|r| *r.borrow_mut() = ResourceRules::new([], [&quota]));
    let plain = watcher("tail", "tail", "busybox:1.36", None);
    let mut big = watcher("big", "big", "busybox:1.36", None);
    big.spec.container.resources = serde_json::from_value(json!({"limits": {"cpu": "250m", "memory": "32Mi"}})).ok();
    let pod = json!({"metadata": {"name": "app", "annotations": {"watcher.dev/inject": "tail,big"}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}}]}});
    let explanation = explain_in("team-a", &[], pod, false, &[plain, big]);
    RESOURCES.with(|r| *r.borrow_mut() = ResourceRules::default());
    let line = |name: &str| explanation.watchers.iter().find(|l| l.name == name).expect("a line");
    assert!(line("tail").injected);
    assert_eq!(
        line("tail").resources,
        ["container tail gets limits.cpu: 100m (ResourceQuota team: counts limits.cpu), limits.memory: 64Mi \
          (ResourceQuota team: counts limits.memory), requests.cpu: 10m (ResourceQuota team: counts requests.cpu), \
          requests.memory: 32Mi (ResourceQuota team: counts requests.memory)"]
    );
    let big = line("big");
    assert!(!big.injected);
    assert_eq!(big.reason, "Resources");
    assert!(big.message.contains("exceeded quota: team, requested: limits.cpu=450m"), "{}", big.message);
    assert!(explanation.text().contains("× big: not injected (Resources): left out"), "{}", explanation.text());
}

/// A Job's pod under `OnFailure` (as kube-apiserver stored it on a 1.24 node): a Watcher whose
/// sidecar runs another image's entrypoint is said to end by a restart the Job counts, with the
/// `backoffLimit` it needs; one with a command ends by itself and says nothing of it.
#[test]
fn a_sidecar_ended_by_a_restart_is_said_for_an_on_failure_pod() {
    let path =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../controller/fixtures/ending/job-1.24-onfailure-ends-itself.json");
    let versions: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("pods");
    let pod = versions.first().cloned().expect("the stored pod");
    assert_eq!(pod["spec"]["restartPolicy"], "OnFailure");
    let selector = json!({"matchLabels": {"sidecar": "stubborn"}});
    let looper = watcher("looper", "looper", "e2e-looper:0.1.0", Some(selector.clone()));
    let mut tail = watcher("tail", "tail", "busybox:1.36", Some(selector));
    tail.spec.container.command = Some(vec!["tail".into(), "-F".into(), "/x".into()]);
    let explanation = explain_in("team-a", &[], pod, false, &[looper, tail]);
    let line = |name: &str| explanation.watchers.iter().find(|l| l.name == name).expect("a line");
    assert!(line("looper").injected && line("tail").injected);
    let [ending] = line("looper").ending.as_slice() else { panic!("one line: {:?}", line("looper").ending) };
    assert!(ending.starts_with("ends by a restart (EndsWithoutRestart False): its sidecar runs the entrypoint"));
    assert!(ending.contains("backoffLimit of 1 more than its app needs"), "{ending}");
    assert!(line("tail").ending.is_empty());
    assert!(explanation.text().contains("\n    ends by a restart"), "{}", explanation.text());
}
