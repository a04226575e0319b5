//! One Secret synced into many namespaces by the real binary.
//!
//! `cargo bench --bench sync [-- NAMESPACES]` starts a fake API server that lists NAMESPACES
//! (default 1,000) namespaces, as kube-apiserver lists them, and one Secret annotated
//! `watcher.dev/sync: ""` in the operator's namespace, runs `watcher-operator run
//! --controllers=sync` against it, and reports the time from process start until every copy is
//! written, the requests per copy, the CPU time and the peak resident memory.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, cpu_ticks, kubeconfig, rss_kib};
use serde_json::{Value, json};

/// `count` namespaces with the label kube-apiserver sets and a controller's managed fields.
fn namespaces(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| format!("team-{i:04}"))
        .chain(["bench".to_owned(), "kube-system".to_owned()])
        .map(|name| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "uid": format!("30000000-0000-4000-8000-{:012}", name.len()),
                                "resourceVersion": "1", "creationTimestamp": "2026-11-21T10:00:00Z",
                                "labels": {"kubernetes.io/metadata.name": name, "team": "apps"},
                                "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                                                   "time": "2026-11-21T10:00:00Z", "fieldsType": "FieldsV1",
                                                   "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}}}]},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        })
        .collect()
}

fn source() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
           "metadata": {"name": "regcred", "namespace": "bench", "uid": "40000000-0000-4000-8000-000000000000",
                        "resourceVersion": "1", "annotations": {"watcher.dev/sync": ""}},
           "data": {".dockerconfigjson": "eyJhdXRocyI6eyJyZWdpc3RyeS5leGFtcGxlLmNvbSI6eyJhdXRoIjoiY205aWIzUTZkRzlyWlc0PSJ9fX0="}})
}

/// A child process, killed and waited for when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let (server, addr) = FakeApiServer::default()
        .with_list("/api/v1/namespaces", "NamespaceList", namespaces(count))
        .with_list("/api/v1/namespaces/bench/secrets", "SecretList", vec![source()])
        .start()
        .await;
    let dir = std::env::temp_dir().join(format!("watcher-bench-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let webhook = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");

    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        // Secrets are synced only when asked for (the default syncs ConfigMaps alone).
        .args(["run", "--leader-election=false", "--controllers=sync", "--sync-secrets=true", "--namespace=bench"])
        .arg(format!("--health-addr={metrics}"))
        .arg("--metrics-addr=127.0.0.1:0")
        .arg(format!("--webhook-addr={webhook}"))
        .env("KUBECONFIG", kubeconfig(&dir, addr))
        .env("RUST_LOG", std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .spawn()
        .expect("binary starts");
    let pid = child.id();
    // Stopped however the bench ends: a failed wait must not leave it running.
    let operator = Stopped(child);

    let copy_writes = || {
        let log = server.write_log.lock().map(|l| l.clone()).unwrap_or_default();
        log.iter().filter(|w| w.ends_with("/secrets/regcred")).count()
    };
    while copy_writes() < count {
        assert!(started.elapsed() < Duration::from_secs(300), "{} of {count} copies after 300 s", copy_writes());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let converged = started.elapsed();
    let ticks = cpu_ticks(pid).expect("/proc");
    // Nothing more is written once every copy is there.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, peak) = rss_kib(pid).expect("/proc");
    drop(operator);
    let _ = std::fs::remove_dir_all(&dir);

    let writes = copy_writes();
    let log = server.write_log.lock().map(|l| l.clone()).unwrap_or_default();
    let applies = log.iter().filter(|w| w.starts_with("PATCH") && w.ends_with("/secrets/regcred")).count();
    println!("namespaces:                   {count} (+ the source's and kube-system, which get none)");
    println!("start → every copy written:   {:.0} ms", converged.as_secs_f64() * 1e3);
    println!(
        "writes per copy:              {:.2}   ({applies} applies of {writes} writes)",
        writes as f64 / count as f64
    );
    println!("CPU until converged:          {:.0} ms", ticks as f64 * 10.0);
    println!("RSS after converging:         {:.1} MB", rss as f64 / 1024.0);
    println!("peak RSS:                     {:.1} MB", peak as f64 / 1024.0);
    assert_eq!(writes, count, "one write per copy, none for the excluded namespaces, none after");
    assert!(server.writes.load(Ordering::Relaxed) >= count as u64);
}
