use serde_json::{Value, json};

use super::*;
use kube_cel::{KubeCelExt, cel};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission-review/");

/// The AdmissionReview kube-apiserver sent for a ReplicaSet's pod (labels, no annotations).
fn review() -> Value {
    let path = format!("{FIXTURES}pod-create-from-replicaset-generatename.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn watcher(namespace: &str, name: &str, spec: Value) -> Watcher {
    let mut spec = spec;
    spec["container"] = json!({"name": name, "image": "busybox:1.36"});
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }))
    .expect("valid Watcher")
}

fn policy(name: &str, spec: Value) -> CompiledPolicy {
    let policy: watcher_api::ImagePolicy = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": name}, "spec": spec,
    }))
    .expect("valid ImagePolicy");
    policy.compile()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A pod as kube-apiserver sends it, with these labels and annotations (`None`: the field
/// absent, as for a pod that has none), created in `namespace`.
#[derive(Clone, Debug)]
struct Pod {
    namespace: String,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl Pod {
    fn review(&self) -> Value {
        let mut review = review();
        let request = &mut review["request"];
        request["namespace"] = json!(self.namespace);
        let metadata = request["object"]["metadata"].as_object_mut().expect("metadata");
        metadata.insert("namespace".into(), json!(self.namespace));
        for (field, value) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            match value {
                Some(map) => metadata.insert(field.into(), json!(map)),
                None => metadata.remove(field),
            };
        }
        review
    }

    fn sends(&self, scope: &Scope) -> Sent {
        let empty = BTreeMap::new();
        scope.sends(
            &self.namespace,
            self.labels.as_ref().unwrap_or(&empty),
            self.annotations.as_ref().unwrap_or(&empty),
        )
    }
}

/// Evaluates `expression` as kube-apiserver evaluates a matchCondition: `object` and `request`
/// of the AdmissionReview. An evaluation error fails the test (kube-apiserver would apply the
/// failurePolicy to the pod).
fn evaluate(program: &cel::Program, review: &Value) -> bool {
    let mut context = cel::Context::default();
    context.register_all();
    context.add_variable("object", &review["request"]["object"]).expect("object");
    context.add_variable("request", &review["request"]).expect("request");
    match program.execute(&context) {
        Ok(cel::Value::Bool(sent)) => sent,
        other => panic!("a condition must evaluate to a bool, got {other:?}"),
    }
}

fn compile(expression: &str) -> cel::Program {
    cel::Program::compile(expression).unwrap_or_else(|e| panic!("{e}: {expression}"))
}

/// The matchConditions of a registration, compiled once, as kube-apiserver compiles them when the
/// registration is written.
struct Compiled {
    scope: Option<cel::Program>,
    required: Option<cel::Program>,
}

impl Compiled {
    fn of(conditions: &Conditions) -> Self {
        Self { scope: conditions.scope.as_deref().map(compile), required: conditions.required.as_deref().map(compile) }
    }

    /// Where kube-apiserver sends the pod of `review`: the webhook `inject.watcher.dev` takes it
    /// when every one of its conditions holds, `required.watcher.dev` when its condition holds.
    /// Never both.
    fn sends(&self, review: &Value) -> Sent {
        let required = self.required.as_ref().is_some_and(|p| evaluate(p, review));
        let in_scope = self.scope.as_ref().is_none_or(|p| evaluate(p, review));
        // inject.watcher.dev: the scope, and not a required pod.
        match (in_scope && !required, required) {
            (true, true) => unreachable!(),
            (true, false) => Sent::Inject,
            (false, true) => Sent::Required,
            (false, false) => Sent::No,
        }
    }
}

/// The Watchers and policies of the tables below: every operator, required and optional,
/// several namespaces, a Watcher without selector, an empty selector, one that cannot be read.
type Labels = BTreeMap<String, String>;
type Namespaces = Vec<(String, Labels)>;

fn cluster() -> (Vec<Watcher>, Vec<CompiledPolicy>, Namespaces) {
    let watchers = vec![
        watcher("team-a", "log-watcher", json!({})),
        watcher("team-a", "web", json!({"selector": {"matchLabels": {"app": "web"}}})),
        watcher("team-a", "api", json!({"selector": {"matchLabels": {"app": "api", "tier": "back"}}})),
        watcher(
            "team-a",
            "tracks",
            json!({"selector": {"matchLabels": {"tier": "back"}, "matchExpressions": [
            {"key": "track", "operator": "In", "values": ["canary", "beta"]}]}}),
        ),
        watcher("team-b", "web", json!({"selector": {"matchLabels": {"app": "web"}}})),
        watcher(
            "team-b",
            "canary",
            json!({"selector": {"matchExpressions": [
            {"key": "track", "operator": "In", "values": ["canary", "beta"]},
            {"key": "app", "operator": "Exists"}]}}),
        ),
        watcher(
            "team-b",
            "not-legacy",
            json!({"selector": {"matchExpressions": [
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "env", "operator": "NotIn", "values": ["dev"]}]}}),
        ),
        watcher("team-c", "audit", json!({"failurePolicy": "Fail"})),
        watcher("team-c", "mesh", json!({"failurePolicy": "Fail", "selector": {"matchLabels": {"mesh": "on"}}})),
        watcher("team-c", "web", json!({"selector": {"matchLabels": {"app": "web"}}})),
        watcher("team-d", "all", json!({"selector": {}})),
        watcher("team-e", "broken", json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Like"}]}})),
        watcher("watcher-system", "own", json!({"selector": {}})),
        watcher("kube-system", "sys", json!({"selector": {"matchLabels": {"app": "web"}}})),
    ];
    let policies = vec![
        policy(
            "mirror",
            json!({"rewrites": [{"from": "docker.io/", "to": "mirror.internal/"}],
                                "namespaceSelector": {"matchLabels": {"mirror": "on"}}}),
        ),
        policy("empty", json!({"rewrites": []})),
    ];
    let namespaces = ["team-a", "team-b", "team-c", "team-d", "team-e", "team-f", "watcher-system", "kube-system"]
        .into_iter()
        .map(|ns| {
            let mut labels = labels(&[("kubernetes.io/metadata.name", ns)]);
            if ns == "team-f" {
                labels.insert("mirror".into(), "on".into());
            }
            (ns.to_owned(), labels)
        })
        .collect();
    (watchers, policies, namespaces)
}

fn scope_of(watchers: &[Watcher], policies: &[CompiledPolicy], namespaces: &[(String, Labels)]) -> Scope {
    Scope::compute(watchers, policies, namespaces.iter().map(|(n, l)| (n.as_str(), l)), "watcher-system")
}

/// Pods of every namespace with labels and annotations that each clause must tell apart,
/// hostile values included.
fn pods() -> Vec<Pod> {
    let label_sets: Vec<Option<BTreeMap<String, String>>> = vec![
        None,
        Some(labels(&[("app", "web"), ("pod-template-hash", "7d876db474")])),
        Some(labels(&[("app", "api")])),
        Some(labels(&[("app", "api"), ("tier", "back")])),
        Some(labels(&[("app", "api"), ("track", "beta")])),
        Some(labels(&[("tier", "back"), ("track", "beta")])),
        Some(labels(&[("track", "canary")])),
        Some(labels(&[("legacy", "")])),
        Some(labels(&[("env", "dev")])),
        Some(labels(&[("env", "prod"), ("mesh", "on")])),
        Some(labels(&[("app", "web' || true || '"), ("app\\", "web")])),
        Some(labels(&[("app", "wéb")])),
    ];
    let annotation_sets: Vec<Option<BTreeMap<String, String>>> = vec![
        None,
        Some(labels(&[("kubectl.kubernetes.io/restartedAt", "now")])),
        Some(labels(&[(annotation::Inject::KEY, "log-watcher")])),
        Some(labels(&[(annotation::Inject::KEY, " nothing , audit ")])),
        Some(labels(&[(annotation::Inject::KEY, "audit' || true")])),
        Some(labels(&[(PROBE_ANNOTATION, "")])),
    ];
    let namespaces =
        ["team-a", "team-b", "team-c", "team-d", "team-e", "team-f", "team-z", "watcher-system", "kube-system"];
    let mut pods = Vec::new();
    for namespace in namespaces {
        for labels in &label_sets {
            for annotations in &annotation_sets {
                pods.push(Pod {
                    namespace: namespace.into(),
                    labels: labels.clone(),
                    annotations: annotations.clone(),
                });
            }
        }
    }
    pods
}

/// kube-apiserver, evaluating the generated conditions, sends each pod exactly where
/// [`Scope::sends`] says: 648 pods over every clause, each to one webhook at most.
#[test]
fn the_conditions_send_exactly_the_pods_the_scope_says() {
    let (watchers, policies, namespaces) = cluster();
    let scope = scope_of(&watchers, &policies, &namespaces);
    let conditions = scope.conditions();
    assert!(conditions.scope.is_some() && conditions.required.is_some());
    let mut counts = BTreeMap::new();
    let compiled = Compiled::of(&conditions);
    for pod in pods() {
        let by_cel = compiled.sends(&pod.review());
        assert_eq!(by_cel, pod.sends(&scope), "{pod:?}");
        *counts.entry(format!("{by_cel:?}")).or_insert(0) += 1;
    }
    // Each way is taken, so the comparison above compares something.
    assert!(counts.len() == 3 && counts.values().all(|n| *n >= 10), "{counts:?}");
}

/// What the scope says matches the webhook itself: every pod the webhook would change (or warn
/// about) is sent, and a pod asking for a required Watcher goes to `required.watcher.dev`.
#[test]
fn every_pod_the_webhook_would_change_is_sent() {
    use crate::{InjectOptions, PodView, inject, rewrite_images};
    let (watchers, policies, namespaces) = cluster();
    let scope = scope_of(&watchers, &policies, &namespaces);
    let options = InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let mut changed = 0;
    for pod in pods() {
        let review = pod.review();
        let view: PodView = serde_json::from_value(review["request"]["object"].clone()).expect("pod");
        let mut injection = inject(&view, &pod.namespace, &watchers, &options);
        let ns_labels =
            namespaces.iter().find(|(n, _)| *n == pod.namespace).map(|(_, l)| l.clone()).unwrap_or_default();
        let applied: Vec<_> =
            policies.iter().filter(|p| p.selects(&ns_labels)).cloned().map(std::sync::Arc::new).collect();
        rewrite_images(&view, &pod.namespace, &applied, &options, &mut injection);
        let sent = pod.sends(&scope);
        if !injection.patch.is_empty() || !injection.warnings.is_empty() {
            changed += 1;
            assert_ne!(sent, Sent::No, "{pod:?} would be changed: {:?}", injection.injected);
        }
        let asks_required = watchers.iter().filter(|w| w.spec.is_required()).any(|w| {
            w.metadata.namespace.as_deref() == Some(&pod.namespace)
                && !options.never_mutated(&pod.namespace)
                && (annotation::Inject::read(pod.annotations.as_ref().unwrap_or(&BTreeMap::new()))
                    .contains(&w.name_any().as_str())
                    || w.selects(pod.labels.as_ref().unwrap_or(&BTreeMap::new())))
        });
        assert_eq!(sent == Sent::Required, asks_required, "{pod:?}");
    }
    assert!(changed > 100, "{changed}");
}

/// The selector → CEL table: `matchLabels`, each operator, several values.
#[test]
fn selectors_become_cel_over_the_pod_labels() {
    let one = |selector: Value| {
        let selector: LabelSelector = serde_json::from_value(selector).expect("selector");
        let selector = super::selector(&selector).expect("readable");
        selector.iter().map(requirement_expression).collect::<Vec<_>>().join(" && ")
    };
    let l = "object.metadata.labels";
    assert_eq!(one(json!({"matchLabels": {"app": "web"}})), format!("'app' in {l} && {l}['app'] == 'web'"));
    assert_eq!(
        one(json!({"matchExpressions": [{"key": "track", "operator": "In", "values": ["canary", "beta"]}]})),
        format!("'track' in {l} && {l}['track'] in ['beta', 'canary']")
    );
    assert_eq!(
        one(json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]})),
        format!("!('env' in {l} && {l}['env'] == 'dev')")
    );
    assert_eq!(one(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})), format!("'app' in {l}"));
    assert_eq!(
        one(json!({"matchExpressions": [{"key": "example.com/legacy", "operator": "DoesNotExist"}]})),
        format!("!('example.com/legacy' in {l})")
    );
    // An empty selector has no requirement: every pod of the namespace.
    let empty = scope_of(&[watcher("team-a", "all", json!({"selector": {}}))], &[] as &[CompiledPolicy], &[]);
    assert!(empty.conditions().scope.expect("scope").contains("request.namespace in ['team-a']"));
    // A selector kube-apiserver would refuse selects nothing, as `Watcher::selects` says.
    let broken = json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]});
    assert_eq!(super::selector(&serde_json::from_value(broken).expect("selector")), None);
}

/// One-label selectors of many namespaces share one list per key; others are grouped by
/// selector; ImagePolicies with a namespaceSelector name the namespaces they select.
#[test]
fn scopes_group_namespaces_and_policies() {
    let watchers = [
        watcher("team-a", "web", json!({"selector": {"matchLabels": {"app": "web"}}})),
        watcher("team-b", "web", json!({"selector": {"matchLabels": {"app": "web"}}})),
        watcher("team-b", "api", json!({"selector": {"matchLabels": {"app": "api"}}})),
        watcher("team-a", "two", json!({"selector": {"matchLabels": {"a": "1", "b": "2"}}})),
        watcher("team-c", "two", json!({"selector": {"matchLabels": {"a": "1", "b": "2"}}})),
    ];
    let (_, policies, namespaces) = cluster();
    let scope = scope_of(&watchers, &policies, &namespaces).conditions().scope.expect("scope");
    assert!(
        scope.contains(
            "request.namespace + '/' + object.metadata.labels['app'] in ['team-a/web', 'team-b/api', 'team-b/web']"
        ),
        "{scope}"
    );
    assert!(
        scope.contains(
            "('a' in object.metadata.labels && 'b' in object.metadata.labels && request.namespace + '/' + \
             object.metadata.labels['a'] + '/' + object.metadata.labels['b'] in ['team-a/1/2', 'team-c/1/2'])"
        ),
        "{scope}"
    );
    assert!(scope.contains("request.namespace in ['team-f']"), "the mirror policy's namespace: {scope}");
    // Other selectors once each, with the namespaces that have them.
    let exists = json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}});
    let watchers = [watcher("team-a", "any", exists.clone()), watcher("team-b", "any", exists)];
    let scope = scope_of(&watchers, &[], &[]).conditions().scope.expect("scope");
    assert!(
        scope.contains("(request.namespace in ['team-a', 'team-b'] && 'app' in object.metadata.labels)"),
        "{scope}"
    );
    // A policy without namespaceSelector: every pod is in scope, and no scope condition is written.
    let everywhere = [policy("all", json!({"rewrites": [{"from": "a", "to": "b"}]}))];
    let scope = scope_of(&watchers, &everywhere, &namespaces);
    assert_eq!(scope.conditions(), Conditions { scope: None, required: None });
    assert!(scope.summary().everywhere);
    let pod = Pod { namespace: "team-z".into(), labels: None, annotations: None };
    assert_eq!(pod.sends(&scope), Sent::Inject);
}

/// The same Watchers in any order give the same expressions, byte for byte: the writer
/// compares them to decide whether to write.
#[test]
fn conditions_are_deterministic() {
    let (mut watchers, policies, namespaces) = cluster();
    let first = scope_of(&watchers, &policies, &namespaces).conditions();
    watchers.reverse();
    let mut shuffled_namespaces = namespaces.clone();
    shuffled_namespaces.reverse();
    assert_eq!(scope_of(&watchers, &policies, &shuffled_namespaces).conditions(), first);
}

/// Quotes, backslashes, non-ASCII and control characters stay inside their literal: CEL reads
/// back exactly the value, whatever it is.
#[test]
fn literals_escape_whatever_a_value_holds() {
    let values = [
        "web",
        "",
        "it's",
        "' || true || '",
        "back\\slash\\",
        "\\' || true || \\'",
        "wéb",
        "日本",
        "emoji 🚀",
        "new\nline\ttab\r",
        "\u{0}nul",
        "\"double\"",
    ];
    for value in values {
        let expression = format!("{} == value", literal(value));
        let program = compile(&expression);
        let mut context = cel::Context::default();
        context.add_variable("value", value).expect("value");
        assert_eq!(program.execute(&context).ok(), Some(cel::Value::Bool(true)), "{value:?} as {expression}");
        assert!(literal(value).bytes().all(|b| (b' '..=b'~').contains(&b)), "ASCII only: {}", literal(value));
    }
    assert_eq!(literal("it's"), r"'it\'s'");
    assert_eq!(literal("a\\b"), r"'a\\b'");
    assert_eq!(literal("é"), r"'\u00e9'");
    assert_eq!(literal("🚀"), r"'\U0001f680'");
}

/// A hostile value that reached a selector (a Watcher stored before its CRD had the rule)
/// neither breaks the expression nor widens it: it matches that exact label value only.
#[test]
fn hostile_values_neither_break_nor_widen_the_conditions() {
    let hostile = ["x' || true || '", "x\\' || true || \\'", "') || true || ('", "x\" || true"];
    for value in hostile {
        let mut pods = Pods::default();
        let selector = Selector::from([Requirement::In("app".into(), BTreeSet::from([value.to_owned()]))]);
        pods.add_selector("team-a", selector.clone());
        pods.add_selector(
            "team-a",
            Selector::from([
                Requirement::In("app".into(), BTreeSet::from([value.to_owned()])),
                Requirement::Exists("x".into()),
            ]),
        );
        let scope = Scope { pods, excluded: BTreeSet::from(["kube-system".into()]), ..Scope::default() };
        let program = compile(&scope.conditions().scope.expect("scope"));
        for (label, sent) in [(value, true), ("x", false), ("web", false), ("true", false)] {
            let pod = Pod { namespace: "team-a".into(), labels: Some(labels(&[("app", label)])), annotations: None };
            assert_eq!(evaluate(&program, &pod.review()), sent, "{value:?} against app={label:?}");
        }
    }
}

/// 1,000 Watchers in 1,000 namespaces, each with its own one-label selector and a second with
/// two requirements: the expression stays under kube-apiserver's limit, parses, and sends the
/// right pods.
#[test]
fn a_thousand_namespaces_fit() {
    let mut watchers = Vec::new();
    for i in 0..1000 {
        let ns = format!("team-{i:04}");
        watchers.push(watcher(&ns, "web", json!({"selector": {"matchLabels": {"app": format!("web-{i}")}}})));
        if i % 10 == 0 {
            watchers.push(watcher(
                &ns,
                "pair",
                json!({"selector": {"matchLabels": {"app": "api", "tier": format!("t{i}")}}}),
            ));
        }
    }
    let scope = scope_of(&watchers, &[] as &[CompiledPolicy], &[]);
    let expression = scope.conditions().scope.expect("scope");
    assert!(expression.len() < MAX_EXPRESSION_LEN, "{} characters", expression.len());
    let program = compile(&expression);
    for (ns, app, sent) in [("team-0007", "web-7", true), ("team-0007", "web-8", false), ("team-0999", "web-999", true)]
    {
        let pod = Pod { namespace: ns.into(), labels: Some(labels(&[("app", app)])), annotations: None };
        assert_eq!(evaluate(&program, &pod.review()), sent, "{ns} {app}");
        assert_eq!(pod.sends(&scope) == Sent::Inject, sent);
    }
}

/// A Watcher is covered by registered conditions computed while it had the same selector and
/// failurePolicy; one without selector that is not required by any conditions at all.
#[test]
fn coverage_follows_the_selector_and_the_failure_policy() {
    let web = watcher("team-a", "web", json!({"selector": {"matchLabels": {"app": "web"}}}));
    let scope = scope_of(std::slice::from_ref(&web), &[] as &[CompiledPolicy], &[]);
    assert!(scope.covers(&web));
    let moved = watcher("team-a", "web", json!({"selector": {"matchLabels": {"app": "api"}}}));
    assert!(!scope.covers(&moved), "a new selector waits for new conditions");
    let required =
        watcher("team-a", "web", json!({"selector": {"matchLabels": {"app": "web"}}, "failurePolicy": "Fail"}));
    assert!(!scope.covers(&required), "so does becoming required");
    assert!(scope.covers(&watcher("team-a", "plain", json!({}))), "the annotation is always in scope");
    assert!(!Scope::default().covers(&watcher("team-a", "audit", json!({"failurePolicy": "Fail"}))));
}

/// A required ClusterWatcher that selects `app: api` pods in the `team: payments` namespaces:
/// computed from its one shared copy placed in each namespace where it applies (as the
/// operator computes it), the scope is the scope of a Watcher of its name in each of them. The
/// conditions, evaluated as kube-apiserver does, send a pod that it selects, or that asks for
/// it, to `required.watcher.dev` where it applies and nowhere else; a namespace's own Watcher
/// of that name takes the namespace over; the summary counts the ClusterWatcher once.
#[test]
fn a_cluster_watcher_is_in_scope_where_it_applies() {
    let cluster: watcher_api::ClusterWatcher = serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
        "metadata": {"name": "audit", "uid": "uid-audit"},
        "spec": {"container": {"name": "audit", "image": "busybox:1.36"}, "failurePolicy": "Fail",
                 "selector": {"matchLabels": {"app": "api"}},
                 "namespaceSelector": {"matchLabels": {"team": "payments"}}}}))
    .expect("valid ClusterWatcher");
    let namespaces: Namespaces = ["team-a", "team-b", "team-c", "team-d"]
        .iter()
        .map(|ns| {
            let team = if *ns == "team-c" { "search" } else { "payments" };
            ((*ns).to_owned(), labels(&[("kubernetes.io/metadata.name", ns), ("team", team)]))
        })
        .collect();
    // team-d has its own Watcher named audit: optional, no selector.
    let own = vec![std::sync::Arc::new(watcher("team-d", "audit", json!({})))];
    let options = crate::InjectOptions {
        excluded_namespaces: vec!["watcher-system".into()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let clusters = [std::sync::Arc::new(cluster.clone())];
    let named = || namespaces.iter().map(|(n, l)| (n.as_str(), l));
    let everywhere = crate::cluster::everywhere(&own, &clusters, named(), &options);
    let placed: Vec<(&str, String)> = everywhere.iter().map(|(ns, w)| (ns.as_str(), w.name_any())).collect();
    assert_eq!(
        placed,
        [("team-d", "audit".to_owned()), ("team-a", "audit".to_owned()), ("team-b", "audit".to_owned())]
    );
    let none: &[CompiledPolicy] = &[];
    let scope = Scope::compute(&everywhere, none, named(), "watcher-system");
    let copies: Vec<Watcher> = ["team-a", "team-b"].iter().map(|ns| cluster.in_namespace(ns)).collect();
    let copies: Vec<&Watcher> = copies.iter().chain(own.iter().map(AsRef::as_ref)).collect();
    assert_eq!(scope, Scope::compute(copies, none, named(), "watcher-system"), "shared or copied, one scope");

    let conditions = scope.conditions();
    let api = Some(labels(&[("app", "api")]));
    let asking = Some(labels(&[(annotation::Inject::KEY, "audit")]));
    for (namespace, pod_labels, annotations, expected) in [
        ("team-a", api.clone(), None, Sent::Required),
        ("team-b", None, asking.clone(), Sent::Required),
        ("team-a", Some(labels(&[("app", "web")])), None, Sent::No),
        ("team-c", api.clone(), None, Sent::No),
        ("team-c", None, asking.clone(), Sent::Inject), // the annotation: a missing Watcher's warning
        ("team-d", api, None, Sent::No),
        ("team-d", None, asking, Sent::Inject), // its own Watcher, optional
    ] {
        let pod = Pod { namespace: namespace.into(), labels: pod_labels, annotations };
        assert_eq!(pod.sends(&scope), expected, "{pod:?}");
        assert_eq!(Compiled::of(&conditions).sends(&pod.review()), expected, "{pod:?}");
    }

    let shared = cluster.unplaced();
    assert!(scope.covers_in("team-a", &shared) && scope.covers_in("team-b", &shared));
    assert!(!scope.covers_in("team-c", &shared), "not computed where it does not apply");
    let summary = scope.summary();
    assert_eq!((summary.watchers, summary.cluster_watchers, summary.selecting, summary.required), (1, 1, 1, 1));
    assert_eq!(
        summary.to_string(),
        "1 Watcher and 1 ClusterWatcher (1 selecting pods by label, 1 required), 0 ImagePolicies"
    );
}
