//! `cargo bench -p watcher-admission --bench scope`: the admission scope of 1,000 Watchers in
//! 1,000 namespaces: the time to compute it from the caches, the time to render its CEL
//! conditions, and their size against kube-apiserver's limit, for the shapes clusters have:
//! one selector shared by every namespace, a one-label selector of its own in each, and a
//! two-label selector of its own in each; then with 100 of the Watchers required, and with an
//! ImagePolicy selecting 500 of the namespaces.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use serde_json::{Value, json};
use watcher_admission::Scope;
use watcher_admission::scope::MAX_EXPRESSION_LEN;
use watcher_api::{CompiledPolicy, ImagePolicy, Watcher};

const NAMESPACES: usize = 1000;

fn watcher(namespace: &str, selector: Value, required: bool) -> Watcher {
    serde_json::from_value(json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": namespace},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"}, "selector": selector,
                 "failurePolicy": if required { "Fail" } else { "Ignore" }},
    }))
    .expect("valid Watcher")
}

fn namespace(i: usize) -> String {
    format!("team-{i:04}")
}

/// The median of `runs` timings of `f`, in microseconds.
fn median_us(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

fn main() {
    let labels: Vec<(String, BTreeMap<String, String>)> = (0..NAMESPACES)
        .map(|i| {
            let mut labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace(i))]);
            if i % 2 == 0 {
                labels.insert("mirror".into(), "on".into());
            }
            (namespace(i), labels)
        })
        .collect();
    let policy: ImagePolicy =
        serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
        "metadata": {"name": "mirror"}, "spec": {"rewrites": [{"from": "docker.io/", "to": "mirror.internal/"}],
                                                "namespaceSelector": {"matchLabels": {"mirror": "on"}}}}))
        .expect("valid ImagePolicy");
    let policies = [policy.compile()];
    let no_policies: [CompiledPolicy; 0] = [];

    type Shape = (&'static str, fn(usize) -> Value, usize, bool);
    let shapes: [Shape; 5] = [
        (
            "one selector shared by every namespace",
            |_| json!({"matchLabels": {"app.kubernetes.io/part-of": "shop"}}),
            0,
            false,
        ),
        ("a one-label selector of its own in each", |i| json!({"matchLabels": {"app": format!("web-{i}")}}), 0, false),
        (
            "a two-label selector of its own in each",
            |i| json!({"matchLabels": {"app": "web", "tier": format!("t{i}")}}),
            0,
            false,
        ),
        (
            "one-label selectors, 100 of them required",
            |i| json!({"matchLabels": {"app": format!("web-{i}")}}),
            100,
            false,
        ),
        (
            "one-label selectors, an ImagePolicy on 500 namespaces",
            |i| json!({"matchLabels": {"app": format!("web-{i}")}}),
            0,
            true,
        ),
    ];
    println!(
        "{NAMESPACES} Watchers in {NAMESPACES} namespaces; kube-apiserver parses up to {MAX_EXPRESSION_LEN} characters"
    );
    println!("| shape | compute (µs) | render (µs) | scope (chars) | required (chars) | fits |");
    println!("|---|---:|---:|---:|---:|---|");
    for (name, selector, required, with_policy) in shapes {
        let watchers: Vec<Watcher> =
            (0..NAMESPACES).map(|i| watcher(&namespace(i), selector(i), i < required)).collect();
        let policies: &[CompiledPolicy] = if with_policy { &policies } else { &no_policies };
        let namespaces = || labels.iter().map(|(n, l)| (n.as_str(), l));
        let compute = median_us(21, || {
            black_box(Scope::compute(&watchers, policies, namespaces(), "watcher-system"));
        });
        let scope = Scope::compute(&watchers, policies, namespaces(), "watcher-system");
        let render = median_us(21, || {
            black_box(scope.conditions());
        });
        let conditions = scope.conditions();
        let scope_len = conditions.scope.as_ref().map_or(0, String::len);
        // `inject.watcher.dev` carries the negation, `!(...)`: three characters more.
        let required_len = conditions.required.as_ref().map_or(0, |r| r.len() + 3);
        let fits = scope_len <= MAX_EXPRESSION_LEN && required_len <= MAX_EXPRESSION_LEN;
        println!(
            "| {name} | {compute:.0} | {render:.0} | {scope_len} | {required_len} | {} |",
            if fits { "yes" } else { "no: every pod is sent" }
        );
    }
}
