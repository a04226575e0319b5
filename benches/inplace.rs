//! An in-place sidecar rollout over 1,000 injected pods, against the real binary and a fake API
//! server: requests per pod and memory.
//!
//! `cargo bench --bench inplace [-- PODS]` lists PODS pods (default 1,000) of one namespace, each
//! a copy of a pod kube-apiserver 1.24 stored after injection of Watcher `log-watcher` (image
//! `busybox:1.36`, reported running and ready by the "kubelet"), and the ControllerRevision of
//! that spec, and runs `watcher-operator run --controllers=pods` twice:
//! 1. idle: the Watcher still names `busybox:1.36`: every pod is up to date, nothing to write;
//! 2. rollout: the Watcher names `busybox:1.37` with `updatePolicy: {type: InPlace,
//!    maxUnavailable: PODS}`: every pod is patched in place.
//!
//! It reports the pod writes and reads per pod (target: one write, no read) and the peak
//! resident memory of both runs (target: the rollout within 2 MB of idle). The fake server's
//! watches send no events, so the figures cover the first pass, measured before the
//! reconciler's recheck 10 s later.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, kubeconfig, rss_kib};
use serde_json::{Value, json};
use watcher_api::Watcher;

/// The Watcher the stored pods were injected with (`controller/fixtures/stored-pods/
/// watcher.yaml`), in `team-0`, with `image` and `updatePolicy: InPlace`.
fn watcher(image: &str, pods: usize) -> Value {
    let mut watcher: Value =
        serde_saphyr::from_str(include_str!("../controller/fixtures/stored-pods/watcher.yaml")).expect("watcher.yaml");
    watcher["metadata"] = json!({"name": "log-watcher", "namespace": "team-0", "uid": "w", "generation": 2,
                                 "resourceVersion": "1"});
    watcher["spec"]["container"]["image"] = json!(image);
    watcher["spec"]["updatePolicy"] = json!({"type": "InPlace", "maxUnavailable": pods});
    watcher
}

/// The revision of the spec the pods carry (busybox:1.36), as the pod reconciler kept it.
fn old_revision(count: usize) -> Value {
    let old: Watcher = serde_json::from_value(watcher("busybox:1.36", count)).expect("Watcher");
    let revision = watcher_controller::revisions::desired_revision(&old, "team-0", 1).expect("revision");
    serde_json::to_value(revision).expect("JSON")
}

/// `count` copies of a pod kube-apiserver 1.24 stored after the webhook injected `log-watcher`
/// with `busybox:1.36` (`controller/fixtures/stored-pods/pod-1.24-plain.json`: the
/// ServiceAccount token mounted into every container, defaults), running and ready.
fn pods(count: usize) -> Vec<Value> {
    let stored: Value = serde_json::from_str(include_str!("../controller/fixtures/stored-pods/pod-1.24-plain.json"))
        .expect("stored pod");
    (0..count)
        .map(|i| {
            let running = |name: &str, image: &str| json!({"name": name, "image": image, "imageID": "", "ready": true,
                "restartCount": 0, "state": {"running": {"startedAt": "2026-11-21T10:00:00Z"}}});
            let mut pod = stored.clone();
            pod["metadata"]["name"] = json!(format!("web-7d876db474-{i:05}"));
            pod["metadata"]["namespace"] = json!("team-0");
            pod["metadata"]["uid"] = json!(format!("10000000-0000-4000-8000-{i:012}"));
            pod["metadata"]["resourceVersion"] = json!(format!("{}", 10 + i));
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d876db474", "uid": "20000000-0000-4000-8000-000000000000", "controller": true}]);
            pod["status"] = json!({"phase": "Running", "containerStatuses": [
                running("app", "docker.io/library/busybox:1.36"), running("log-watcher", "docker.io/library/busybox:1.36")]});
            pod
        })
        .collect()
}

struct Run {
    pod_writes: usize,
    pod_reads: usize,
    took: Duration,
    peak_kib: u64,
}

async fn run(image: &str, count: usize, expected_pod_writes: usize) -> Run {
    let (server, addr) = FakeApiServer::default()
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", vec![watcher(image, count)])
        .with_list("/api/v1/pods", "PodList", pods(count))
        .with_list("/apis/apps/v1/controllerrevisions", "ControllerRevisionList", vec![old_revision(count)])
        .start()
        .await;
    let dir =
        std::env::temp_dir().join(format!("watcher-bench-inplace-{}-{}", std::process::id(), image.replace(':', "-")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let port = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let (metrics, webhook) = (port(), port());
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["run", "--leader-election=false", "--controllers=pods", "--namespace=bench"])
        .arg(format!("--health-addr={metrics}"))
        .arg("--metrics-addr=127.0.0.1:0")
        .arg(format!("--webhook-addr={webhook}"))
        .env("KUBECONFIG", kubeconfig(&dir, addr))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("binary starts");
    let pid = child.id();
    let pod_writes = |server: &FakeApiServer| {
        server
            .write_log
            .lock()
            .map(|l| l.iter().filter(|w| w.starts_with("PATCH /api/v1/namespaces/team-0/pods/")).count())
            .unwrap_or(0)
    };
    // The pass is done when the counts are written (after the patches and the rollout's
    // condition).
    while server.status_writes.load(Ordering::Relaxed) < 2 {
        assert!(started.elapsed() < Duration::from_secs(120), "no status write within 120 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, peak_kib) = rss_kib(pid).expect("/proc");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let pod_reads = server.read_log.lock().map(|l| l.iter().filter(|r| r.contains("/pods/")).count()).unwrap_or(0);
    let writes = pod_writes(&server);
    assert_eq!(writes, expected_pod_writes, "pod writes");
    Run { pod_writes: writes, pod_reads, took, peak_kib }
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let idle = run("busybox:1.36", count, 0).await;
    let rollout = run("busybox:1.37", count, count).await;
    let per_pod = |n: usize| n as f64 / count as f64;
    println!("in-place rollout over {count} injected pods (watcher-operator run --controllers=pods)");
    println!(
        "  idle:    {} pod writes, {} pod reads, peak RSS {:.1} MB, counted in {:?}",
        idle.pod_writes,
        idle.pod_reads,
        idle.peak_kib as f64 / 1024.0,
        idle.took
    );
    println!(
        "  rollout: {} pod writes ({:.2} per pod), {} pod reads ({:.2} per pod), peak RSS {:.1} MB, done in {:?}",
        rollout.pod_writes,
        per_pod(rollout.pod_writes),
        rollout.pod_reads,
        per_pod(rollout.pod_reads),
        rollout.peak_kib as f64 / 1024.0,
        rollout.took
    );
    println!(
        "  peak RSS rollout - idle: {:+.2} MB (target: within 2 MB)",
        (rollout.peak_kib as f64 - idle.peak_kib as f64) / 1024.0
    );
}
