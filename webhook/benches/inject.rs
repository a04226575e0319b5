//! `cargo bench -p watcher-webhook --bench inject [-- TEXT]` (only the rows whose label holds TEXT):
//! first each step of a review apart, in the order the webhook takes them; then time per call of
//! `inject` on the captured
//! kube-apiserver pod, and of the whole review (decode, inject, rewrite, encode), for a pod
//! asking for one Watcher and for one asking for three, and for one Watcher with every field that
//! lets the sidecar see the app, each review also as a ratio to kube's typed decode of it, their
//! batches taken in turn (`ratio:` rows); then the image rewrite step with 0 and 50 ImagePolicy rules;
//! then Pod Security: a real pod that passes `restricted` by itself (argo-cd's redis, as
//! kube-apiserver 1.36 stores it), reviewed in an unlabelled namespace and in a `restricted` one
//! (the sidecar adapted), and the captured pod, which fails `restricted` by itself; then a pod
//! created during a held rollout (`newPods: Stable`: the stable revision from the operator's
//! revision cache) against the same pod when the rollout is not held; then a Job's pod (as
//! kube-apiserver stores it), whose sidecar runs under the supervisor: regular (before 1.29: also
//! named for the operator to end) and native; then the namespace's resource rules: the pod of
//! kube-apiserver's quota refusal (its app stating requests and limits), reviewed through the
//! operator's caches in a namespace with neither a ResourceQuota nor a LimitRange and in one with
//! both (as kube-apiserver stored them: the sidecar fitted to them).
//!
//! To profile a row: `BENCH_BATCH=100000 perf record --call-graph dwarf <bench binary> --bench
//! "step: inject"` (a batch of 100,000 calls where 2,000 is the default).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use watcher_admission::pod_security::ENFORCE_LABEL;
use watcher_admission::{InjectOptions, Injection, NamespaceAdmission, PodView, PolicySource, inject, rewrite_images};
use watcher_api::{CompiledPolicy, ImagePolicy, Watcher};
use watcher_webhook::Reviewer;

const FIXTURE: &str = include_str!("../../admission/fixtures/admission-review/pod-create-named-annotated.json");

fn watcher(name: &str) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"container": {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", "tail -F /var/log/app.log"]},
                 "volume": {"name": format!("{name}-data"), "emptyDir": {}}, "configData": {"LEVEL": "debug"},
                 "imagePullSecrets": {"name": "regcred"}},
    }))
    .expect("valid Watcher")
}

/// `name` with every field that lets the sidecar see the app.
fn sees_the_app(name: &str) -> Watcher {
    let mut watcher = watcher(name);
    let app = json!({
        "shareVolumes": "ReadOnly", "appVolumeMounts": [{"mountPath": "/var/log/app"}],
        "transferEnv": [{"names": ["SERVICE_NAME"]}], "shareProcessNamespace": true,
        "podAnnotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9102"},
        "initContainers": [{"name": format!("{name}-prepare"), "image": "busybox:1.36", "command": ["true"]}],
    });
    watcher.spec.app = serde_json::from_value(app).expect("app fields");
    watcher
}

/// One policy of `count` prefix rules for other registries, the last one matching Docker Hub's
/// official images when `last_matches`.
fn policy(count: usize, last_matches: bool) -> Vec<Arc<CompiledPolicy>> {
    let mut rewrites: Vec<Value> = (0..count)
        .map(|i| json!({"from": format!("registry-{i}.example.com/"), "to": format!("mirror.internal/r{i}/")}))
        .collect();
    if last_matches && let Some(last) = rewrites.last_mut() {
        *last = json!({"from": "docker.io/library/", "to": "mirror.internal/library/"});
    }
    let policy: ImagePolicy =
        serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": "bench"}, "spec": {"rewrites": rewrites}}))
        .expect("valid ImagePolicy");
    if count == 0 { Vec::new() } else { vec![Arc::new(policy.compile())] }
}

/// Namespace labels as the operator's cache gives them: every namespace enforces `level`, or
/// none (`None`).
struct Labels(Option<&'static str>);

impl PolicySource for Labels {
    fn policies_for(&self, _: &str) -> Vec<Arc<CompiledPolicy>> {
        Vec::new()
    }

    fn namespace(&self, _: &str) -> NamespaceAdmission {
        NamespaceAdmission::from_lookup(|key| if key == ENFORCE_LABEL { self.0 } else { None })
    }
}

/// The captured review carrying argo-cd's redis pod (passes `restricted` by itself), asking for
/// `log-watcher`.
fn restricted_pod_review(one: &Value) -> Value {
    let text = include_str!("../../admission/fixtures/real-workloads/argo-cd-1.36-plain.json");
    let list: Value = serde_json::from_str(text).expect("fixture");
    let redis = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("argocd-redis")))
        .expect("the redis pod");
    let mut review = one.clone();
    review["request"]["object"] = redis.clone();
    review["request"]["object"]["metadata"]["annotations"] = json!({"watcher.dev/inject": "log-watcher"});
    review
}

/// The rows to run: those whose label holds the bench's argument (every row without one), as in
/// `cargo bench -p watcher-webhook --bench inject -- "1 Watcher"`.
fn wanted(label: &str) -> bool {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    filter.is_none_or(|f| label.contains(&f))
}

/// Measures `call` and prints its row, where it is wanted.
fn row(label: impl AsRef<str>, call: impl FnMut()) {
    let label = label.as_ref();
    if wanted(label) {
        println!("{label:<52} {:>8.2}", measure(call));
    }
}

/// Median time per call over 15 batches, in microseconds. A batch is 2,000 calls, or
/// `BENCH_BATCH` (more, to run a row long enough under `perf record`).
fn measure(mut call: impl FnMut()) -> f64 {
    let batch: u32 = std::env::var("BENCH_BATCH").ok().and_then(|b| b.parse().ok()).unwrap_or(2_000);
    for _ in 0..batch {
        call(); // warm-up
    }
    let mut per_call: Vec<f64> = (0..15)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                call();
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(batch)
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

/// The ratio of `a`'s time per call to `b`'s, their batches taken in turn (31 pairs of the
/// batch `measure` takes): the median of each pair's ratio, which a machine that slows down or
/// speeds up for seconds at a time moves far less than two rows measured apart.
fn ratio_row(label: impl AsRef<str>, mut a: impl FnMut(), mut b: impl FnMut()) {
    let label = label.as_ref();
    if !wanted(label) {
        return;
    }
    let batch: u32 = std::env::var("BENCH_BATCH").ok().and_then(|b| b.parse().ok()).unwrap_or(2_000);
    let time = |call: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..batch {
            call();
        }
        start.elapsed().as_secs_f64()
    };
    time(&mut a); // warm-up
    time(&mut b);
    let mut ratios: Vec<f64> = (0..31).map(|_| time(&mut a) / time(&mut b)).collect();
    ratios.sort_by(f64::total_cmp);
    println!("{label:<52} {:>8.3}", ratios[ratios.len() / 2]);
}

/// What every part of the bench reads: the Watchers of the namespace (100 besides the ones
/// asked for, as in a busy cluster), the same in the shared cache as the operator reads them,
/// the options, and the captured review.
struct Setup {
    watchers: Vec<Arc<Watcher>>,
    cached: watcher_cache::WatcherCache,
    options: InjectOptions,
    one: Value,
}

impl Setup {
    fn new() -> Self {
        let mut watchers: Vec<Arc<Watcher>> = (0..100).map(|i| Arc::new(watcher(&format!("other-{i}")))).collect();
        watchers.extend(["log-watcher", "metrics-watcher", "audit-watcher"].map(|n| Arc::new(watcher(n))));
        watchers.push(Arc::new(sees_the_app("app-watcher")));
        let options = InjectOptions {
            excluded_namespaces: vec!["watcher-system".into()],
            native_sidecars: true,
            server_minor: None,
            ..Default::default()
        };
        let cached = cache_of(&watchers);
        let one: Value = serde_json::from_str(FIXTURE).expect("fixture");
        Self { watchers, cached, options, one }
    }
}

/// `watchers` in the shared cache's namespace index.
fn cache_of(watchers: &[Arc<Watcher>]) -> watcher_cache::WatcherCache {
    let (store, mut writer) = kube::runtime::reflector::store::<Watcher>();
    for watcher in watchers {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(watcher.as_ref().clone()));
    }
    watcher_cache::WatcherCache::from_store(store).0
}

fn main() {
    let setup = Setup::new();
    println!("{:<52} {:>8}", "benchmark (median of 15 batches)", "µs/call");
    steps(&setup);
    lookups();
    decode_and_inject(&setup);
    rewrite(&setup);
    pod_security(&setup);
    ending(&setup);
    held_rollout(&setup);
    resource_rules(&setup);
}

/// The namespace's ResourceQuota and LimitRange, from the operator's caches (one lookup per
/// review, the rules built once per change), against a namespace with neither.
fn resource_rules(setup: &Setup) {
    use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    let Setup { cached, one, options, .. } = setup;
    let fixture = |name: &str| -> Value {
        let path = format!("{}/../admission/fixtures/resources/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
    };
    let mut review = one.clone();
    review["request"]["object"] = fixture("quota-must-specify-request.json");
    review["request"]["object"]["spec"]["containers"].as_array_mut().expect("containers").pop();
    review["request"]["object"]["metadata"]["annotations"] = json!({"watcher.dev/inject": "log-watcher"});
    let body = serde_json::to_vec(&review).expect("body");
    let namespace = review["request"]["namespace"].as_str().expect("namespace").to_owned();
    let (ranges, mut range_writer) = reflector::store::<LimitRange>();
    let (quotas, mut quota_writer) = reflector::store::<ResourceQuota>();
    let mut range: LimitRange = serde_json::from_value(fixture("limitrange-1.36.json")).expect("LimitRange");
    let mut quota: ResourceQuota = serde_json::from_value(fixture("resourcequota-1.36.json")).expect("quota");
    range.metadata.namespace = Some(namespace.clone());
    quota.metadata.namespace = Some(namespace);
    for (label, with_rules) in
        [("quota pod, no quota nor LimitRange", false), ("quota pod, quota and LimitRange", true)]
    {
        if with_rules {
            range_writer.apply_watcher_event(&Event::Apply(range.clone()));
            quota_writer.apply_watcher_event(&Event::Apply(quota.clone()));
        }
        let mut policies = watcher_cache::PolicyCache::from_stores(reflector::store().0, reflector::store().0);
        policies.resources = watcher_cache::ResourceRulesCache::from_stores(ranges.clone(), quotas.clone());
        let reviewer = Reviewer::new(cached.clone(), options.clone()).with_policies(Arc::new(policies));
        let (answer, _) = reviewer.review(&body).expect("answered");
        assert_eq!(answer.resources().is_empty(), !with_rules, "{label}: fitted only there");
        row(format!("review, {label}"), || {
            let answer = reviewer.review(black_box(&body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
    }
}

/// The Watchers of a namespace: filtered from the store, from the cache's index, with ClusterWatchers.
fn lookups() {
    use kube::runtime::reflector;
    use watcher_admission::WatcherSource;
    let (store, mut writer) = reflector::store::<Watcher>();
    for i in 0..1000 {
        let mut w = watcher(&format!("w-{i}"));
        w.metadata.namespace = Some(format!("team-{}", i % 10));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(w));
    }
    row("Watchers of a namespace, 1,000: store filter", || {
        black_box(store.watchers_in(black_box("team-3")));
    });
    let (cache, _) = watcher_cache::WatcherCache::from_store(store);
    row("Watchers of a namespace, 1,000: cache index", || {
        black_box(cache.in_namespace(black_box("team-3")));
    });

    // The same, with 10 ClusterWatchers that apply everywhere, over 1,000 namespaces.
    let (clusters, mut cluster_writer) = reflector::store::<watcher_api::ClusterWatcher>();
    for i in 0..10 {
        let cluster: watcher_api::ClusterWatcher = serde_json::from_value(json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
            "metadata": {"name": format!("agent-{i}"), "uid": format!("uid-{i}")},
            "spec": {"container": {"name": format!("agent-{i}"), "image": "busybox:1.36"}}}))
        .expect("ClusterWatcher");
        cluster_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(cluster));
    }
    let (namespaces, mut namespace_writer) = reflector::store::<watcher_cache::NamespaceMeta>();
    for i in 0..1000 {
        let namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("team-{i}"),
                         "labels": {"kubernetes.io/metadata.name": format!("team-{i}"), "team": "payments"}}}))
        .expect("namespace");
        namespace_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(namespace));
    }
    let (cache, _) =
        watcher_cache::WatcherCache::from_stores(cache.store.clone(), clusters, namespaces, "watcher-system");
    assert_eq!(cache.in_namespace("team-3").len(), 100 + 10);
    row("... and 10 ClusterWatchers: cache index", || {
        black_box(cache.in_namespace(black_box("team-3")));
    });
}

/// A review as kube decodes it: the scale a review is measured against.
fn kube_decode(body: &[u8]) -> kube::core::admission::AdmissionReview<k8s_openapi::api::core::v1::Pod> {
    serde_json::from_slice(body).expect("decodes")
}

/// Decoding for scale; `inject` alone and the whole review, for 1 and 3 Watchers, and the
/// review against kube's decode of it.
fn decode_and_inject(setup: &Setup) {
    let body = FIXTURE.as_bytes();
    row("for scale: decode into kube AdmissionReview<Pod>", || {
        black_box(kube_decode(black_box(body)));
    });

    let Setup { watchers, cached, options, one } = setup;
    let mut three = one.clone();
    three["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] =
        json!("log-watcher,metrics-watcher,audit-watcher");
    // The same pod asking for the Watcher that sees the app (its container carrying the variable
    // the Watcher transfers).
    let mut every = one.clone();
    every["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] = json!("app-watcher");
    every["request"]["object"]["spec"]["containers"][0]["env"] = json!([{"name": "SERVICE_NAME", "value": "web"}]);
    for (label, review) in [("1 Watcher", one), ("3 Watchers", &three), ("1 Watcher, every app field", &every)] {
        let pod: PodView = serde_json::from_value(review["request"]["object"].clone()).expect("pod");
        let refs: Vec<&Watcher> = watchers.iter().map(Arc::as_ref).collect();
        let injected = inject(&pod, "team-a", &refs, options);
        assert!(!injected.patch.is_empty(), "{label}: the fixture is injected");
        row(format!("inject, fixture pod, {label}"), || {
            black_box(inject(black_box(&pod), "team-a", black_box(&refs), options));
        });

        let body = serde_json::to_vec(review).expect("body");
        let reviewer = Reviewer::new(cached.clone(), options.clone());
        row(format!("review: decode + inject + encode, {label}"), || {
            let answer = reviewer.review(black_box(&body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
        ratio_row(
            format!("ratio: review / kube decode, {label}"),
            || {
                let answer = reviewer.review(black_box(&body)).expect("answered");
                black_box(answer.0.to_json().expect("encoded"));
            },
            || {
                black_box(kube_decode(black_box(&body)));
            },
        );
    }
}

/// The rewrite step: the fixture pod (nginx:1.27) and its injected sidecar (busybox:1.36).
fn rewrite(setup: &Setup) {
    // The rewrite step: the fixture pod (nginx:1.27) and its injected sidecar (busybox:1.36).
    let Setup { watchers, cached, options, one } = setup;
    let pod: PodView = serde_json::from_value(one["request"]["object"].clone()).expect("pod");
    let refs: Vec<&Watcher> = watchers.iter().map(Arc::as_ref).collect();
    let body = serde_json::to_vec(one).expect("body");
    for (label, policies) in [
        ("0 rules", policy(0, false)),
        ("50 rules, none match", policy(50, false)),
        ("50 rules, last matches", policy(50, true)),
    ] {
        let mut check = inject(&pod, "team-a", &refs, options);
        rewrite_images(&pod, "team-a", &policies, options, &mut check);
        assert_eq!(check.rewritten.len(), if label.ends_with("last matches") { 2 } else { 0 }, "{label}");
        row(format!("inject + rewrite, 1 Watcher, {label}"), || {
            let mut injection = inject(black_box(&pod), "team-a", black_box(&refs), options);
            rewrite_images(black_box(&pod), "team-a", black_box(&policies), options, &mut injection);
            black_box(injection);
        });
        let reviewer = Reviewer::new(cached.clone(), options.clone()).with_policies(Arc::new(policies));
        row(format!("review, 1 Watcher, {label}"), || {
            let answer = reviewer.review(black_box(&body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
    }
}

/// Pod Security: the namespace's labels read from the cache in one lookup either way.
fn pod_security(setup: &Setup) {
    // Pod Security: the namespace's labels read from the cache in one lookup either way.
    let Setup { cached, one, .. } = setup;
    let restricted = restricted_pod_review(one);
    let options = InjectOptions { server_minor: Some(36), ..setup.options.clone() };
    for (label, review, enforce) in [
        ("restricted pod, unlabelled namespace", &restricted, None),
        ("restricted pod, restricted namespace", &restricted, Some("restricted")),
        ("captured pod, restricted namespace", one, Some("restricted")),
    ] {
        let body = serde_json::to_vec(review).expect("body");
        let reviewer = Reviewer::new(cached.clone(), options.clone()).with_policies(Arc::new(Labels(enforce)));
        let (answer, _) = reviewer.review(&body).expect("answered");
        let json: Value = serde_json::from_slice(&answer.to_json().expect("encoded")).expect("JSON");
        assert!(json["response"]["patch"].is_string(), "{label}: injected");
        let adapted = !answer.pod_security().is_empty();
        assert_eq!(adapted, label == "restricted pod, restricted namespace", "{label}: adapted only there");
        row(format!("review, {label}"), || {
            let answer = reviewer.review(black_box(&body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
    }
}

/// A Job's pod: what the ending step costs.
fn ending(setup: &Setup) {
    // A Job's pod: the sidecar under the supervisor, its init container and volume added; as a
    // regular container it is also named (label and annotation) for the operator to end.
    let Setup { cached, one, .. } = setup;
    let options = InjectOptions { server_minor: Some(36), ..setup.options.clone() };
    let mut job = one.clone();
    job["request"]["object"] =
        serde_json::from_str(include_str!("../../admission/fixtures/ending/job-1.36-plain.json")).expect("fixture");
    job["request"]["object"]["metadata"]["annotations"] = json!({"watcher.dev/inject": "log-watcher"});
    job["request"]["namespace"] = json!("team-a");
    job["request"]["object"]["metadata"]["namespace"] = json!("team-a");
    // The same pod with `restartPolicy: Always`, as a Deployment's: what the ending step costs.
    let mut always = job.clone();
    always["request"]["object"]["spec"]["restartPolicy"] = json!("Always");
    let (job, always) = (serde_json::to_vec(&job).expect("body"), serde_json::to_vec(&always).expect("body"));
    for (label, body, native, ends) in [
        ("Job pod, regular sidecar", &job, false, true),
        ("Job pod, native sidecar", &job, true, true),
        ("Job pod as restartPolicy Always, regular", &always, false, false),
    ] {
        let options = InjectOptions { native_sidecars: native, ..options.clone() };
        let reviewer = Reviewer::new(cached.clone(), options);
        let (answer, _) = reviewer.review(body).expect("answered");
        let text = String::from_utf8(answer.to_json().expect("encoded")).expect("UTF-8");
        let json: Value = serde_json::from_str(&text).expect("JSON");
        let patch: k8s_openapi::ByteString = serde_json::from_value(json["response"]["patch"].clone()).expect("patch");
        let patch = String::from_utf8(patch.0).expect("UTF-8");
        assert_eq!(patch.contains("/watcher-supervise/watcher-supervise"), ends, "{label}: supervised: {patch}");
        assert_eq!(patch.contains("end-sidecars"), ends && !native, "{label}: named only as a regular container");
        row(format!("review, {label}"), || {
            let answer = reviewer.review(black_box(body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
    }
}

/// A held rollout: the stable revision from the revision cache, as admission reads it.
fn held_rollout(setup: &Setup) {
    // A held rollout: log-watcher moved to busybox:1.37 with `partition: 1, newPods: Stable`;
    // its stable revision (busybox:1.36) from the revision cache, as admission reads it.
    let Setup { watchers, one, .. } = setup;
    let options = setup.options.clone();
    let mut stable = watcher("log-watcher");
    stable.metadata.uid = Some("w-uid".into());
    stable.metadata.generation = Some(2); // as the API server gives every Watcher
    let mut revision = watcher_api::revision::desired_revision(&stable, "team-a", 1).expect("revision");
    revision.metadata.uid = Some("rev-1".into());
    let stable_name = revision.metadata.name.clone().expect("name");
    let revisions = watcher_cache::RevisionCache::holding(vec![revision], "watcher-system");
    let body = serde_json::to_vec(one).expect("body");
    for (label, held) in [("rollout not held, current spec", false), ("held rollout, stable revision", true)] {
        let mut current = stable.clone();
        current.spec.container.image = Some("busybox:1.37".into());
        current.spec.update_policy.partition = i32::from(held);
        current.spec.update_policy.new_pods = watcher_api::NewPods::Stable;
        current.status =
            Some(watcher_api::WatcherStatus { stable_revision: Some(stable_name.clone()), ..Default::default() });
        let mut all: Vec<Arc<Watcher>> =
            watchers.iter().filter(|w| w.metadata.name.as_deref() != Some("log-watcher")).cloned().collect();
        all.push(Arc::new(current));
        let cache = cache_of(&all);
        let reviewer = Reviewer::new(cache, options.clone()).with_revisions(Arc::new(revisions.clone()));
        let (answer, _) = reviewer.review(&body).expect("answered");
        let text = String::from_utf8(answer.to_json().expect("encoded")).expect("UTF-8");
        let json: Value = serde_json::from_str(&text).expect("JSON");
        let patch: k8s_openapi::ByteString = serde_json::from_value(json["response"]["patch"].clone()).expect("patch");
        let patch = String::from_utf8(patch.0).expect("UTF-8");
        let image = if held { "busybox:1.36" } else { "busybox:1.37" };
        assert!(patch.contains(image) && json["response"].get("warnings").is_none(), "{label}: {patch}");
        row(format!("review, 1 Watcher, {label}"), || {
            let answer = reviewer.review(black_box(&body)).expect("answered");
            black_box(answer.0.to_json().expect("encoded"));
        });
    }
}

/// Each step of a review of the fixture pod asking for one Watcher, measured apart, in the order
/// the webhook takes them: the namespace's admission from the operator's caches (opted out,
/// Pod Security levels), the namespace's Watchers, those the pod concerns and which it gets,
/// the canary (over those the pod concerns, as the webhook runs it), the
/// resource rules, the injection itself (its patch and annotations), the ImagePolicies, the
/// answer written. Pod Security and the resource rules cost nothing where the namespace has
/// none: rows elsewhere in this bench show what they cost where it has.
fn steps(setup: &Setup) {
    use kube::runtime::reflector;
    use watcher_admission::{RevisionSource, canary, decide};
    let Setup { cached, options, one, .. } = setup;
    let body = serde_json::to_vec(one).expect("body");
    row("step: read the review (UTF-8, narrow decode)", || {
        black_box(watcher_webhook::read(black_box(&body)).expect("read"));
    });
    // What the webhook reads in production: the shared caches, 1,000 namespaces.
    let (namespaces, mut writer) = reflector::store::<watcher_cache::NamespaceMeta>();
    for i in 0..1000 {
        let name = if i == 0 { "team-a".to_owned() } else { format!("team-{i}") };
        let namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}))
        .expect("namespace");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(namespace));
    }
    let policies = watcher_cache::PolicyCache::from_stores(reflector::store().0, namespaces);
    row("step: the namespace's admission (labels, levels)", || {
        black_box(PolicySource::namespace(&policies, black_box("team-a")));
        black_box(options.never_mutated(black_box("team-a")));
    });
    row("step: the namespace's Watchers (104, cache index)", || {
        black_box(cached.in_namespace(black_box("team-a")));
    });
    let namespace = cached.in_namespace("team-a");
    let pod: PodView = serde_json::from_value(one["request"]["object"].clone()).expect("pod");
    row("step: the Watchers the pod concerns (of 104)", || {
        black_box(namespace.concerning(black_box(&pod)));
    });
    let watchers = namespace.concerning(&pod);
    assert_eq!(watchers.len(), 1, "the fixture asks for log-watcher");
    let decided = decide(&pod, "team-a", &watchers);
    assert_eq!(decided.len(), 1, "the fixture asks for log-watcher");
    row("step: which Watchers the pod gets (decide)", || {
        black_box(decide(black_box(&pod), "team-a", black_box(&watchers)));
    });
    let revisions: Arc<dyn RevisionSource> = Arc::new(());
    row("step: the canary (no rollout held)", || {
        black_box(canary::for_pod(black_box(&watchers), pod.labels(), &*revisions));
    });
    row("step: the resource rules (none in the namespace)", || {
        black_box(PolicySource::resource_rules(&policies, black_box("team-a")));
    });
    row("step: inject (decide, patch, annotations)", || {
        black_box(inject(black_box(&pod), "team-a", black_box(&watchers), options));
    });
    let injected = inject(&pod, "team-a", &watchers, options);
    let entries: Vec<(String, String)> = watchers
        .iter()
        .filter(|w| w.metadata.name.as_deref() == Some("log-watcher"))
        .map(|w| ("log-watcher".to_owned(), w.spec.spec_hash().to_owned()))
        .collect();
    row("step: annotations (read the pod's, write injected)", || {
        let carried = watcher_api::annotation::Injected::read(black_box(pod.annotations()));
        let all = carried.iter().map(|(n, h)| (*n, *h)).chain(entries.iter().map(|(n, h)| (n.as_str(), h.as_str())));
        black_box(watcher_api::annotation::Injected::encode(all));
    });
    // The injection's patch moved in once: the step's own cost, without a copy of it.
    let mut injection = Injection { patch: injected.patch, ..Default::default() };
    row("step: ImagePolicies (none select the namespace)", || {
        let policies = PolicySource::policies_for(&policies, black_box("team-a"));
        rewrite_images(black_box(&pod), "team-a", &policies, options, &mut injection);
    });
    assert!(injection.rewritten.is_empty(), "no policy, no rewrite");
    let reviewer = Reviewer::new(cached.clone(), options.clone()).with_policies(Arc::new(policies));
    let (answer, _) = reviewer.review(&body).expect("answered");
    row("step: write the answer (patch JSON, base64)", || {
        black_box(answer.to_json().expect("encoded"));
    });
    row("steps together: read + answer (no write)", || {
        black_box(reviewer.answer(watcher_webhook::read(black_box(&body)).expect("read")));
    });
    row("the review as served: read + answer + write", || {
        let answer = reviewer.review(black_box(&body)).expect("answered");
        black_box(answer.0.to_json().expect("encoded"));
    });
}
