//! e2e on a real node: pods run (containerd and a kubelet), so what the kubelet does with an
//! injected pod is what is checked: the sidecar started, the agent counting inside the pod, its
//! Event. Needs a cluster with a Ready node and the image `watcher-agent:0.2.0` on it (on
//! `../shared/k8s`: `node-up 1.36 PORT` and `node-image watcher-agent:0.2.0
//! target/debug/watcher-agent --user 65532`; on kind: `kind load docker-image`).
//! Run on purpose: `cargo test --test e2e node:: -- --ignored`.
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::common;

mod chart;
mod config;
mod jobs;
mod values;

use std::time::Duration;

use common::{Operator, STEP, TestNamespace, client, exclusive, http_get, install_crds, kubectl, wait_for, wait_until};

/// How long a pod may take to run on the node (image already there).
const POD_START: Duration = Duration::from_secs(120);

pub(crate) const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/samples");

/// Fails the test at once, saying why, when no node can run its pods.
async fn require_node(client: &Client) {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list nodes");
    let ready = nodes.items.iter().any(|node| {
        let conditions = node.status.iter().flat_map(|s| s.conditions.iter().flatten());
        conditions.into_iter().any(|c| c.type_ == "Ready" && c.status == "True")
    });
    assert!(ready, "no Ready node: these tests need pods to run (../shared/k8s/node-up, or a cluster with nodes)");
}

/// The value of the sample `name{labels}` in a Prometheus text exposition, labels in any order.
fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        let has_all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        (metric == name && has_all).then(|| value.parse().ok()).flatten()
    })
}

/// The sample `file`, its app writing every second instead of every five (the test waits less;
/// what is written is the same).
fn faster(file: &str) -> String {
    let text = std::fs::read_to_string(format!("{SAMPLES}/{file}")).expect("sample");
    assert!(text.contains("sleep 5"), "{file}: the app sleeps 5 s between orders");
    let path = std::env::temp_dir().join(format!("watcher-e2e-{}-{file}", std::process::id()));
    std::fs::write(&path, text.replace("sleep 5", "sleep 1")).expect("written");
    path.display().to_string()
}

/// README's "The Watcher that watches" in `namespace`, as written but for the app's pace (an
/// order a second, [`faster`]): the RBAC, the Watcher, `kubectl wait`, the app; the pod
/// injected, and `kubectl get pod` saying 2/2 Running.
fn readme_use_case(namespace: &str) {
    readme_use_case_with(namespace, &format!("{SAMPLES}/app-watcher.yaml"));
}

/// [`readme_use_case`] with the Watcher at `watcher` (the sample with another agent image).
fn readme_use_case_with(namespace: &str, watcher: &str) {
    let n = namespace;
    kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/agent-rbac.yaml")]);
    kubectl(&["apply", "-n", n, "-f", watcher]);
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "watcher/app-watcher", "--timeout=60s"]);
    kubectl(&["apply", "-n", n, "-f", &faster("app.yaml")]);
    let injected =
        kubectl(&["get", "pod", "shop", "-n", n, "-o", r"jsonpath={.metadata.annotations.watcher\.dev/injected}"]);
    assert!(injected.starts_with("app-watcher@"), "the pod was injected: {injected:?}");
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "pod/shop", &wait]);
    // Then `kubectl get pod`, looked at again for a few seconds as a user would: once on 1.24
    // it said 1/2 right after `kubectl wait` returned (the kubelet's log showing the sidecar
    // ready before, and no container unready after).
    let start = std::time::Instant::now();
    loop {
        let got = kubectl(&["get", "pod", "shop", "-n", n, "--no-headers"]);
        let columns: Vec<&str> = got.split_whitespace().collect();
        if columns.get(1..3) == Some(&["2/2", "Running"][..]) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "kubectl get pod: {got}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The app's log as the app wrote it: (lines, ERROR lines).
fn app_log(namespace: &str) -> (usize, usize) {
    let log = kubectl(&["exec", "-n", namespace, "shop", "-c", "app", "--", "cat", "/var/log/app/app.log"]);
    (log.lines().count(), log.lines().filter(|l| l.contains(" ERROR ")).count())
}

/// README's "The Watcher that watches" on a real node, as written: the RBAC, the Watcher, `kubectl
/// wait`, the app; then what a user looks at: `kubectl get pod` (2/2 Running), `kubectl describe
/// pod` (the agent's Warning Event), and the sidecar's `/metrics` at the pod's IP, whose counts
/// are exactly the lines the app wrote, its first line included.
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the image watcher-agent:0.2.0 on the node"]
async fn the_readme_use_case_runs_on_a_node() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-node").await;
    let operator = Operator::start(&operator_ns.name).await;
    let n = ns.name.as_str();

    readme_use_case(n);

    // Three ERROR lines within a minute (one order in four fails, one order a second): the Event.
    let described = wait_for(POD_START, || async {
        let described = kubectl(&["describe", "pod", "shop", "-n", n]);
        described.contains("LogRuleError").then_some(described)
    })
    .await;
    let event = described.lines().find(|l| l.contains("LogRuleError")).expect("the Event's line");
    assert!(event.contains("Warning") && event.contains("watcher.dev/watcher-agent"), "{event}");
    assert!(event.contains("rule error matched 3 times within 3 in 1m; last line: "), "{event}");
    assert!(event.contains(" ERROR order "), "the note names the line: {event}");

    // The sidecar's metrics at the pod's IP: every line the app wrote, the first included, each
    // counted once. The app writes on (a line a second, and the agent looks every 250 ms): its
    // log read before the scrapes and after the one that has caught up with it brackets it.
    let ip = kubectl(&["get", "pod", "shop", "-n", n, "-o", "jsonpath={.status.podIP}"]);
    let url = format!("http://{}:9102/metrics", ip.trim());
    wait_until(POD_START, || async { http_get(&url).await.is_some_and(|(status, _)| status == 200) }).await;
    let source = [("source", "/var/log/app/*.log")];
    let counts = |metrics: &str| {
        let lines = sample(metrics, "watcher_agent_lines_total", &source).expect("lines counted") as usize;
        let errors = sample(metrics, "watcher_agent_matches_total", &[("rule", "error"), source[0]])
            .expect("matches counted") as usize;
        (lines, errors)
    };
    let (lines_before, errors_before) = app_log(n);
    let metrics = wait_for(STEP, || async {
        let (_, metrics) = http_get(&url).await?;
        let (lines, errors) = counts(&metrics);
        (lines >= lines_before && errors >= errors_before).then_some(metrics)
    })
    .await;
    let (lines_after, errors_after) = app_log(n);
    let (lines, errors) = counts(&metrics);
    assert!(
        (lines_before..=lines_after).contains(&lines),
        "{lines} lines counted, {lines_before}..{lines_after} written"
    );
    assert!(
        (errors_before..=errors_after).contains(&errors),
        "{errors} ERRORs counted, {errors_before}..{errors_after} written"
    );
    assert!(errors >= 3, "{errors}");
    assert_eq!(sample(&metrics, "watcher_agent_alert_firing", &[("rule", "error")]), Some(1.0), "{metrics}");

    operator.stop().await;
    ns.delete().await;
    operator_ns.delete().await;
}

/// In a `restricted` namespace, a Watcher whose busybox sidecar sets no securityContext and a
/// pod that passes `restricted` with pod-level `runAsNonRoot: true` and its app container's
/// `runAsUser: 65534`: the sidecar is given a user, so the kubelet starts it, and the pod runs
/// with every container ready. A Watcher whose image does not exist: the kubelet cannot start
/// its sidecar, and the Watcher's status says so within seconds (`cannotStart`, the
/// `SidecarsRunning` condition with the kubelet's reason).
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG"]
async fn a_plain_sidecar_runs_in_a_restricted_namespace_on_a_node() {
    let _one = exclusive().await;
    let client = client().await;
    require_node(&client).await;
    install_crds(&client).await;
    let operator_ns = TestNamespace::create(&client, "watcher-e2e-op").await;
    let ns = TestNamespace::create(&client, "watcher-e2e-node-psa").await;
    let n = ns.name.as_str();
    kubectl(&["label", "namespace", n, "pod-security.kubernetes.io/enforce=restricted"]);
    let operator = Operator::start(&operator_ns.name).await;
    let watcher = |name: &str, image: &str| {
        serde_json::json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name},
            "spec": {"container": {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                                   "command": ["sleep", "3600"]}}})
    };
    common::kubectl_apply(n, &watcher("plain-watcher", "busybox:1.36"));
    common::kubectl_apply(n, &watcher("broken-watcher", "registry.invalid/watcher:0.0.0"));
    kubectl(&[
        "wait",
        "-n",
        n,
        "--for=condition=Ready",
        "watcher/plain-watcher",
        "watcher/broken-watcher",
        "--timeout=60s",
    ]);
    let app = |name: &str, watchers: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"watcher.dev/inject": watchers}},
            "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "3600"],
                                     "securityContext": {"runAsUser": 65534, "allowPrivilegeEscalation": false,
                                                         "capabilities": {"drop": ["ALL"]}}}]}})
    };
    common::kubectl_apply(n, &app("shop", "plain-watcher"));
    let wait = format!("--timeout={}s", POD_START.as_secs());
    kubectl(&["wait", "-n", n, "--for=condition=Ready", "pod/shop", &wait]);
    let got = kubectl(&["get", "pod", "shop", "-n", n, "--no-headers"]);
    let columns: Vec<&str> = got.split_whitespace().collect();
    assert_eq!(columns.get(1..3), Some(&["2/2", "Running"][..]), "kubectl get pod: {got}");
    let user = kubectl(&["exec", "-n", n, "shop", "-c", "plain-watcher", "--", "id", "-u"]);
    assert_eq!(user.trim(), "65532", "the sidecar runs as the user it was given");

    // An image that does not exist: said in the Watcher's status within seconds.
    common::kubectl_apply(n, &app("shop-broken", "broken-watcher"));
    let watchers = Api::<watcher_api::Watcher>::namespaced(client.clone(), n);
    let condition = wait_for(POD_START, || async {
        let status = watchers.get("broken-watcher").await.ok()?.status?;
        let counted = status.pods.is_some_and(|p| p.cannot_start == 1);
        let condition = status.conditions.into_iter().find(|c| c.type_ == "SidecarsRunning" && c.status == "False");
        condition.filter(|_| counted)
    })
    .await;
    assert!(["ErrImagePull", "ImagePullBackOff"].contains(&condition.reason.as_str()), "{condition:?}");
    assert!(condition.message.contains("pod shop-broken, container broken-watcher"), "{}", condition.message);
    let events = kubectl(&["get", "events", "-n", n, "--field-selector", "reason=SidecarCannotStart", "-o", "name"]);
    assert!(!events.trim().is_empty(), "a Warning Event on the Watcher");
    let plain = watchers.get("plain-watcher").await.expect("watcher").status.expect("status");
    assert_eq!(plain.pods.map(|p| p.cannot_start), Some(0), "{plain:?}");

    operator.stop().await;
    ns.delete().await;
    operator_ns.delete().await;
}

/// How long after its last app container ends a pod's sidecars may run: the issue's bound, met
/// by the supervisor's 3 s grace period and the agent's 5 s linger.
const ENDED_WITHIN: i64 = 10;

/// How long after the operator last wrote `watcher.dev/sidecars-ended` a sidecar that reads it
/// from the downward API may run, at the most. The kubelet refreshes the volume when the pod
/// changes, but now and then it misses a change until its next sync of the pod, a minute on
/// (kubernetes/kubernetes#59813). The operator therefore writes the annotation again 10 s on if
/// such a sidecar still runs, and the kubelet refreshes the volume on that change. Should the
/// kubelet miss that change too, the operator's next write (`sidecars-cannot-end`, 60 s on) or
/// the kubelet's sync ends the sidecar. The test allows this for one sidecar of a namespace's pods
/// and says so; the others end within [`ENDED_WITHIN`] of the last write.
const KUBELET_REFRESH: i64 = 75;

/// What the tests of pods that are meant to end share: the operator with its defaults, and a
/// namespace `<prefix>-<mode>` per way the server injects (`Auto`; also `Never` where it has
/// native sidecars), each with README's agent Watcher (`nativeSidecar` the mode) and its RBAC.
pub(crate) struct Ending {
    operator: Operator,
    operator_ns: TestNamespace,
    /// Whether the server has native sidecars.
    native: bool,
    namespaces: Vec<(&'static str, TestNamespace)>,
}

impl Ending {
    async fn start(client: &Client, prefix: &str) -> Self {
        Self::start_with(client, prefix, &[]).await
    }

    /// [`Ending::start`] with the operator's `flags` added.
    async fn start_with(client: &Client, prefix: &str, flags: &[&str]) -> Self {
        require_node(client).await;
        install_crds(client).await;
        let operator_ns = TestNamespace::create(client, "watcher-e2e-op").await;
        let operator = Operator::start_with(&operator_ns.name, None, common::Registration::Url, flags).await;
        let native = common::minor(client).await >= 29;
        let modes: &[&'static str] = if native { &["Never", "Auto"] } else { &["Auto"] };
        let mut namespaces = Vec::new();
        for mode in modes {
            let ns = TestNamespace::create(client, &format!("{prefix}-{}", mode.to_lowercase())).await;
            let n = ns.name.as_str();
            kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/agent-rbac.yaml")]);
            kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/app-watcher.yaml")]);
            let patch = format!(r#"{{"spec":{{"nativeSidecar":"{mode}"}}}}"#);
            kubectl(&["patch", "watcher", "app-watcher", "-n", n, "--type=merge", "-p", &patch]);
            namespaces.push((*mode, ns));
        }
        Self { operator, operator_ns, native, namespaces }
    }

    /// The operator stopped, the namespaces deleted.
    async fn stop(self) {
        self.operator.stop().await;
        for (_, ns) in self.namespaces {
            ns.delete().await;
        }
        self.operator_ns.delete().await;
    }
}

/// The Watchers and workloads of [`pods_that_are_meant_to_end_end_on_a_node`] in
/// namespace `n`, their sidecars injected with `nativeSidecar: native`: README's agent with
/// README's Job (deploy/samples/job.yaml as written), a busybox sidecar that ignores SIGTERM
/// (a Job that succeeds, a Job that fails, a CronJob's run, an At), a sidecar that runs its
/// image's entrypoint.
fn create_pods_that_end(n: &str, native: &str) {
    let watcher = |name: &str, labels: serde_json::Value, container: serde_json::Value| {
        serde_json::json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name},
            "spec": {"nativeSidecar": native, "selector": {"matchLabels": labels}, "container": container}})
    };
    let stubborn = serde_json::json!({"name": "stubborn", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]});
    common::kubectl_apply(n, &watcher("stubborn", serde_json::json!({"sidecar": "stubborn"}), stubborn.clone()));
    common::kubectl_apply(n, &watcher("at-tail", serde_json::json!({"watcher.dev/at": "hello"}), stubborn));
    let looper = serde_json::json!({"name": "looper", "image": "e2e-looper:0.1.0", "imagePullPolicy": "IfNotPresent"});
    common::kubectl_apply(n, &watcher("looper", serde_json::json!({"sidecar": "looper"}), looper));
    let watchers = ["watcher/app-watcher", "watcher/stubborn", "watcher/at-tail", "watcher/looper"];
    let mut wait = vec!["wait", "-n", n, "--for=condition=Ready", "--timeout=60s"];
    wait.extend(watchers);
    kubectl(&wait);
    // Said before any pod: the looper (another image's entrypoint) is ended by a restart where it
    // is a regular container; the others end by themselves.
    kubectl(&["wait", "-n", n, "--for=condition=EndsWithoutRestart=false", "--timeout=60s", "watcher/looper"]);
    let conditions = kubectl(&["get", "watcher", "stubborn", "-n", n, "-o", "jsonpath={.status.conditions[*].type}"]);
    assert!(!conditions.contains("EndsWithoutRestart"), "{conditions}");

    kubectl(&["apply", "-n", n, "-f", &format!("{SAMPLES}/job.yaml")]);
    let pod = |sidecar: &str, script: &str| {
        serde_json::json!({"metadata": {"labels": {"sidecar": sidecar}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox:1.36",
                     "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script]}]}})
    };
    let job = |name: &str, template: serde_json::Value| {
        serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": template}})
    };
    common::kubectl_apply(n, &job("stubborn-ok", pod("stubborn", "echo working; sleep 2")));
    common::kubectl_apply(n, &job("stubborn-fails", pod("stubborn", "echo working; sleep 2; exit 3")));
    common::kubectl_apply(n, &job("looper-ok", pod("looper", "echo working; sleep 2")));
    // The CronJob's run as a user starts one at once: a Job made from its template (the same
    // pod), instead of a wait for the next minute.
    common::kubectl_apply(
        n,
        &serde_json::json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
            "spec": {"schedule": "* * * * *", "suspend": true, "jobTemplate": {"spec": {"backoffLimit": 0,
                     "template": pod("stubborn", "echo tick; sleep 1")}}}}),
    );
    kubectl(&["create", "job", "-n", n, "tick-now", "--from=cronjob/tick"]);
    common::kubectl_apply(
        n,
        &serde_json::json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "At", "metadata": {"name": "hello"},
            "spec": {"schedule": common::rfc3339(3), "command": "echo hello; sleep 2"}}),
    );
}

/// A container of an ended pod as the kubelet reports it: its name, when its last instance
/// finished (seconds since the epoch), and how often it was restarted (a regular sidecar that
/// runs another image's entrypoint ends by a restart in the supervisor's image; the others end
/// by themselves, with none).
type Finished = (String, i64, i32);

/// A pod of namespace `n` that has ended: its name, its phase, its containers, and when the
/// operator wrote `watcher.dev/sidecars-ended` on it (seconds since the epoch), if it did.
#[derive(Debug)]
struct EndedPod {
    name: String,
    phase: String,
    finished: Vec<Finished>,
    marked_ended: Option<i64>,
}

/// The pods of namespace `n` that have ended.
async fn ended_pods(client: &Client, n: &str) -> Vec<EndedPod> {
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), n);
    let list = pods.list(&ListParams::default()).await.expect("list pods");
    list.items
        .into_iter()
        .filter_map(|pod| {
            let marked_ended = watcher_api::annotation::SidecarsEnded::get(pod.metadata.annotations.as_ref()?)
                .and_then(Result::ok)
                .map(|at| at.as_second());
            let status = pod.status?;
            let phase = status.phase.filter(|p| p == "Succeeded" || p == "Failed")?;
            let statuses = status.container_statuses.into_iter().flatten();
            let statuses = statuses.chain(status.init_container_statuses.into_iter().flatten());
            let finished = statuses
                .filter_map(|s| Some((s.name, s.state?.terminated?.finished_at?.0.as_second(), s.restart_count)))
                .collect();
            Some(EndedPod { name: pod.metadata.name?, phase, finished, marked_ended })
        })
        .collect()
}

/// Pods that are meant to end, end, on every version, whatever the sidecar: on a server without
/// native sidecars (1.24) as injected by default, and on one with them (1.36) both with
/// `nativeSidecar: Never` and with native sidecars. Each Job completes (or fails, as its app
/// decided), the CronJob's run and the At too, each pod's sidecars ending within
/// [`ENDED_WITHIN`] s of the operator's last mark, as the kubelet's own timestamps say (one of
/// them within [`KUBELET_REFRESH`] s, where the kubelet delivers it late).
#[tokio::test]
#[ignore = "needs a cluster with a node: KUBECONFIG, and the images watcher-agent:0.2.0, watcher-supervise:0.2.0 and e2e-looper:0.1.0 on the node"]
async fn pods_that_are_meant_to_end_end_on_a_node() {
    let _one = exclusive().await;
    let client = client().await;
    let ending = Ending::start(&client, "watcher-e2e-end").await;
    let native = ending.native;
    for (mode, ns) in &ending.namespaces {
        create_pods_that_end(&ns.name, mode);
    }
    for (mode, ns) in &ending.namespaces {
        let n = ns.name.as_str();
        let wait = format!("--timeout={}s", POD_START.as_secs());
        for job in ["shop-report", "stubborn-ok", "looper-ok"] {
            kubectl(&["wait", "-n", n, "--for=condition=complete", &format!("job/{job}"), &wait]);
        }
        kubectl(&["wait", "-n", n, "--for=condition=failed", "job/stubborn-fails", &wait]);
        let at = wait_for(POD_START, || async {
            let phase = kubectl(&["get", "at", "hello", "-n", n, "-o", "jsonpath={.status.phase}"]);
            ["Succeeded", "Failed"].contains(&phase.trim()).then(|| phase.trim().to_owned())
        })
        .await;
        assert_eq!(at, "Succeeded", "{mode}: the At's command succeeded");
        wait_until(POD_START, || async {
            let jobs = kubectl(&[
                "get",
                "jobs",
                "-n",
                n,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.succeeded} {end}",
            ]);
            jobs.split_whitespace().any(|j| j.starts_with("tick-") && j.ends_with("=1"))
        })
        .await;

        let ended = ended_pods(&client, n).await;
        let expect = [
            ("shop-report", "Succeeded"),
            ("stubborn-ok", "Succeeded"),
            ("stubborn-fails", "Failed"),
            ("looper-ok", "Succeeded"),
            ("tick-", "Succeeded"),
            ("hello-at", "Succeeded"),
        ];
        let mut late = Vec::new();
        for (prefix, phase) in expect {
            let EndedPod { name, phase: got, finished, marked_ended } = ended
                .iter()
                .find(|pod| pod.name.starts_with(prefix))
                .unwrap_or_else(|| panic!("{mode}: no ended pod {prefix}: {ended:?}"));
            assert_eq!(got, phase, "{mode}: pod {name}");
            let app = ["app", "command"].iter().find_map(|c| finished.iter().find(|(n, ..)| n == c));
            let (_, app_ended, _) = app.expect("the app's end");
            let mut sidecars = finished
                .iter()
                .filter(|(c, ..)| !["app", "command", "watcher-supervise"].contains(&c.as_str()))
                .peekable();
            assert!(sidecars.peek().is_some(), "{mode}: pod {name} has a sidecar: {finished:?}");
            for (container, ended, restarts) in sidecars {
                let after = ended - app_ended;
                let said = format!("{mode}: pod {name}: {container} ended {after} s after the app");
                match marked_ended.map(|at| at - app_ended) {
                    // Ended by the operator's mark (written promptly, or again 10 s on), which
                    // the kubelet delivers.
                    Some(marked) => {
                        let said = format!("{said}, watcher.dev/sidecars-ended last written {marked} s after it");
                        // Within ENDED_WITHIN, or again 10 s after that, with a look's delay.
                        assert!(marked <= 2 * ENDED_WITHIN + 5, "{said}: the operator was late");
                        assert!(after - marked <= KUBELET_REFRESH, "{said}");
                        if after - marked > ENDED_WITHIN {
                            eprintln!("{said}: the kubelet refreshed the downward API volume late");
                            late.push(said);
                        }
                    }
                    None => assert!(after <= ENDED_WITHIN, "{said}"),
                }
                // Only a regular sidecar that runs another image's entrypoint is switched.
                let switched = container == "looper" && !(*mode == "Auto" && native);
                assert_eq!(*restarts, i32::from(switched), "{mode}: pod {name}: {container}'s restarts");
            }
        }
        assert!(late.len() <= 1, "{mode}: more than one sidecar ended late: {late:#?}");
    }
    ending.stop().await;
}
