//! Start-up, API calls and memory of the real binary with many Watchers and pods cached.
//!
//! `cargo bench --bench startup [-- WATCHERS [PODS]]` (default 1,000 Watchers, 0 pods) starts a
//! fake API server that lists WATCHERS Watchers with config data and PODS pods (as
//! kube-apiserver lists them: managed fields, kubectl's last-applied annotation; pods streamed
//! as 1.34 and later stream an initial list, or, where streamed lists are refused, in pages of
//! 500), runs `watcher-operator run` against it, and reports:
//! 1. the Watcher controller's API calls per Watcher on a first reconcile (target 2) and in a
//!    steady state, where every ConfigMap and status is already right (target 0);
//! 2. start-up time and resident memory with the Watcher controller and the pod reconciler, with
//!    no pods (the baseline) and with PODS pods: the per-pod cost is (peak − baseline peak) / PODS;
//! 3. what the baseline's resident memory is made of;
//! 4. with PODS pods, the first exact count against a plain paged LIST of the same pods from the
//!    same fake server (500 a page, as client-go lists; decoded as `Pod`s, as kubectl would), in
//!    this process: the count's time from the operator's start, and its ratio to the LIST's;
//!    once with the pods' initial list streamed, once with it refused and listed in pages.
//!
//! 5. ClusterWatchers (`BENCH_CLUSTER_ONLY=1`: these runs alone): one over 1,000 namespaces, and
//!    100 over 100 namespaces, created while the operator runs: ConfigMap creates, 409s and reads
//!    per namespace and ClusterWatcher (target 1, 0, 0), until every ConfigMap and status is
//!    written, and memory; then namespaces created while it runs (1 create each, no read, no 409);
//!    then the same ClusterWatchers there before the operator starts (1, 0, 0), and the operator
//!    restarted onto what it wrote (no request).
//!
//! 6. with PODS pods, the same count of Job pods the ending controller watches
//!    (`watcher.dev/end-sidecars=true`, a real node's, app and agent running): what each costs in
//!    the caches (`BENCH_ENDING_ONLY=1`: the baseline and these runs alone).
//!
//! The operator runs with the environment the image gives it (`ENV` in `deploy/Dockerfile`: glibc's
//! malloc tunables); `BENCH_BARE=1` runs it without.
//!
//! `BENCH_WRAP="heaptrack -o /tmp/heap"` runs the operator under a profiler, with pods only
//! (streamed; with `BENCH_PAGED=1`, in pages).

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, cpu_ticks, job_pods, kubeconfig, pods, rss_breakdown, rss_kib, watchers};
use serde_json::{Value, json};
use watcher_api::Watcher;

/// What one run measured.
struct Run {
    ready: Duration,
    reconciled: Duration,
    reads: u64,
    writes: u64,
    cpu_ticks: u64,
    rss: u64,
    peak: u64,
    /// Binary, libraries, anonymous (KiB), threads, at ready.
    breakdown: (u64, u64, u64, u64),
    /// The same once every Watcher is reconciled.
    reconciled_breakdown: (u64, u64, u64, u64),
}

/// The environment the image gives the binary (the `ENV` lines of `deploy/Dockerfile`), so the
/// operator runs as it does in a pod; none with `BENCH_BARE=1`.
fn image_env() -> Vec<(&'static str, &'static str)> {
    if std::env::var_os("BENCH_BARE").is_some() {
        return Vec::new();
    }
    include_str!("../deploy/Dockerfile").lines().filter_map(|line| line.strip_prefix("ENV ")?.split_once('=')).collect()
}

/// How the fake server lists pods.
#[derive(Clone, Copy, PartialEq)]
enum Lists {
    /// The initial list streamed (`sendInitialEvents`), as kube-apiserver 1.34 and later serve it.
    Streamed,
    /// Streamed lists refused (422), as before 1.27 and with 1.33's defaults: pages of 500.
    Paged,
}

/// Runs the operator with `controllers` against a server listing `watchers`, `config_maps` and
/// `pod_count` pods until `status_writes` status patches were made (then 1 s more).
async fn run(
    controllers: &str,
    watchers: Vec<Value>,
    config_maps: Vec<Value>,
    pods: Vec<Value>,
    status_writes: u64,
    lists: Lists,
) -> Run {
    let pod_count = pods.len();
    let server = match lists {
        Lists::Streamed => FakeApiServer::default(),
        Lists::Paged => FakeApiServer::default().without_streamed_lists(),
    };
    let (server, addr) = server
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", watchers)
        .with_list("/api/v1/configmaps", "ConfigMapList", config_maps)
        .with_list("/api/v1/pods", "PodList", pods)
        .start()
        .await;
    let started = Instant::now();
    let (mut child, metrics, dir) = spawn_operator(addr, controllers, &pod_count.to_string());
    let pid = child.id();
    let _guard = KillOnDrop(&mut child);

    let ready = loop {
        if readyz(metrics).await {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(180), "not ready within 180 s: {}", readyz_body(metrics).await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let breakdown = rss_breakdown(pid).unwrap_or_default();
    let ticks_ready = cpu_ticks(pid).expect("/proc");

    while server.status_writes.load(Ordering::Relaxed) < status_writes {
        assert!(started.elapsed() < Duration::from_secs(300), "reconciles did not finish within 300 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reconciled = started.elapsed();
    let cpu_ticks = cpu_ticks(pid).expect("/proc") - ticks_ready;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, peak) = rss_kib(pid).expect("/proc");
    let reconciled_breakdown = rss_breakdown(pid).unwrap_or_default();
    if std::env::var("BENCH_WRAP").is_ok_and(|w| !w.trim().is_empty()) {
        // A profiler writes its report when the process exits: stop the operator gracefully (the
        // wrapper's child, or the wrapper itself where it runs the operator in its own process,
        // as valgrind does), never the profiler's other processes (heaptrack's interpreter).
        let binary = env!("CARGO_BIN_EXE_watcher-operator");
        let child = Command::new("pkill").args(["-TERM", "-P", &pid.to_string(), "-f", binary]).status();
        if !child.is_ok_and(|status| status.success()) {
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while rss_kib(pid).is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(_guard);
    let _ = std::fs::remove_dir_all(&dir);
    let written = server.status_writes.load(Ordering::Relaxed);
    if written != status_writes {
        let log = server.write_log.lock().map(|l| l.clone()).unwrap_or_default();
        let mut by_path = std::collections::BTreeMap::<&String, u64>::new();
        for write in log.iter().filter(|w| w.ends_with("/status")) {
            *by_path.entry(write).or_default() += 1;
        }
        let most = by_path.values().copied().max().unwrap_or_default();
        let most_written: Vec<&&String> = by_path.iter().filter(|(_, n)| **n == most).map(|(p, _)| p).take(5).collect();
        panic!("{written} status writes where {status_writes} were expected; {most} times: {most_written:?}");
    }
    // The Watcher controller's requests: ConfigMaps and Watchers (not the certificate Secret or
    // the webhook configuration, which the process reads and writes once at start).
    let theirs = |path: &String| path.contains("/configmaps") || path.contains("/watchers");
    let count =
        |log: &std::sync::Mutex<Vec<String>>| log.lock().map(|l| l.iter().filter(|p| theirs(p)).count()).unwrap_or(0);
    Run {
        ready,
        reconciled,
        reads: count(&server.read_log) as u64,
        writes: count(&server.write_log) as u64,
        cpu_ticks,
        rss,
        peak,
        breakdown,
        reconciled_breakdown,
    }
}

/// Starts `watcher-operator run` with `controllers` against the fake server at `addr` (under
/// `BENCH_WRAP` when set): the process, its metrics address, its temporary directory.
fn spawn_operator(
    addr: std::net::SocketAddr,
    controllers: &str,
    tag: &str,
) -> (std::process::Child, std::net::SocketAddr, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("watcher-bench-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let webhook = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    // BENCH_WRAP runs the operator under a profiler, e.g. "valgrind --tool=massif".
    let wrap: Vec<String> =
        std::env::var("BENCH_WRAP").unwrap_or_default().split_whitespace().map(String::from).collect();
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(env!("CARGO_BIN_EXE_watcher-operator"));
            command
        }
        None => Command::new(env!("CARGO_BIN_EXE_watcher-operator")),
    };
    let child = command
        .envs(image_env())
        .args(["run", "--leader-election=false", &format!("--controllers={controllers}"), "--namespace=bench"])
        .arg(format!("--health-addr={metrics}"))
        .arg("--metrics-addr=127.0.0.1:0")
        .arg(format!("--webhook-addr={webhook}"))
        .env("KUBECONFIG", kubeconfig(&dir, addr))
        .env("RUST_LOG", std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .spawn()
        .expect("binary starts");
    (child, metrics, dir)
}

/// The Watcher controller's requests for Watchers created while it runs.
struct Bulk {
    creates: u64,
    conflicts: u64,
    reads: u64,
    status_writes: u64,
    converged: Duration,
}

/// Creates `count` Watchers with config data while the operator runs, as one `kubectl apply`
/// of a List does, against a server whose watches report each write `lag` after it; counts what
/// the Watcher controller asks until every Watcher has its status, and 2 s of quiet after.
async fn created_while_running(count: usize, lag: Duration) -> Bulk {
    let (server, addr) = FakeApiServer::default()
        .live(lag)
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", Vec::new())
        .with_list("/api/v1/configmaps", "ConfigMapList", Vec::new())
        .with_list("/api/v1/pods", "PodList", Vec::new())
        .start()
        .await;
    let (mut child, metrics, dir) = spawn_operator(addr, "watcher", "bulk");
    let _guard = KillOnDrop(&mut child);
    let started = Instant::now();
    until_ready(metrics, started).await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the admission scope known
    let created = Instant::now();
    for watcher in watchers(count) {
        server.create("/apis/watcher.dev/v1alpha1/watchers", watcher);
    }
    while server.status_writes.load(Ordering::Relaxed) < count as u64 {
        assert!(created.elapsed() < Duration::from_secs(300), "not converged within 300 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let converged = created.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(_guard);
    let _ = std::fs::remove_dir_all(&dir);
    let log = server.write_log.lock().map(|l| l.clone()).unwrap_or_default();
    let reads = server.read_log.lock().map(|l| l.iter().filter(|p| p.contains("/configmaps/")).count()).unwrap_or(0);
    Bulk {
        creates: log.iter().filter(|w| w.starts_with("POST") && w.ends_with("/configmaps")).count() as u64,
        conflicts: server.conflicts.load(Ordering::Relaxed),
        reads: reads as u64,
        status_writes: server.status_writes.load(Ordering::Relaxed),
        converged,
    }
}

/// The Watchers of [`watchers`] as the Watcher controller leaves them, with their ConfigMaps.
fn reconciled(count: usize) -> (Vec<Value>, Vec<Value>) {
    let mut config_maps = Vec::new();
    let watchers = watchers(count)
        .into_iter()
        .map(|mut value| {
            let watcher: Watcher = serde_json::from_value(value.clone()).expect("valid Watcher");
            let config_map = watcher_controller::watcher::desired_config_map(&watcher).expect("config data");
            let name = config_map.metadata.name.clone().unwrap_or_default();
            config_maps.push(serde_json::to_value(&config_map).expect("serialises"));
            value["status"] = json!({
                "configMapName": name, "configGeneration": 1, "observedGeneration": 1,
                "specHash": watcher.spec.spec_hash(),
                "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled",
                                "message": format!("ConfigMap {name} is up to date"), "observedGeneration": 1,
                                "lastTransitionTime": "2026-11-21T10:00:00Z"}],
            });
            value
        })
        .collect();
    (watchers, config_maps)
}

fn mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let count = numbers.first().copied().unwrap_or(1000);
    let pod_count = numbers.get(1).copied().unwrap_or(0);
    let per_watcher = |calls: u64| calls as f64 / count as f64;

    if std::env::var_os("BENCH_WRAP").is_some() && pod_count > 0 {
        // Profiling: the run with pods only.
        let lists = if std::env::var_os("BENCH_PAGED").is_some() { Lists::Paged } else { Lists::Streamed };
        let loaded = run("watcher,pods", watchers(count), Vec::new(), pods(pod_count), 2 * count as u64, lists).await;
        println!("profiled run: peak RSS {:.1} MB", mb(loaded.peak));
        return;
    }
    if std::env::var_os("BENCH_CLUSTER_ONLY").is_some() {
        cluster_watcher_runs().await;
        return;
    }
    match image_env().as_slice() {
        [] => println!("the operator runs without the image's environment (BENCH_BARE)\n"),
        env => println!("the operator runs with the image's environment: {env:?} (BENCH_BARE=1: without)\n"),
    }
    let first = run("watcher", watchers(count), Vec::new(), Vec::new(), count as u64, Lists::Streamed).await;
    let (steady_watchers, config_maps) = reconciled(count);
    let steady = run("watcher", steady_watchers, config_maps, Vec::new(), 0, Lists::Streamed).await;
    println!("Watcher controller, {count} Watchers with config data");
    println!(
        "  first reconcile:            {:.2} API calls per Watcher   (target 2; {} reads, {} writes)",
        per_watcher(first.reads + first.writes),
        first.reads,
        first.writes
    );
    println!(
        "  steady state:               {:.2} API calls per Watcher   (target 0; {} reads, {} writes)",
        per_watcher(steady.reads + steady.writes),
        steady.reads,
        steady.writes
    );
    println!(
        "  start → /readyz 200:        {:.0} ms; all reconciled after {:.0} ms; CPU per Watcher {:.0} µs",
        first.ready.as_secs_f64() * 1e3,
        first.reconciled.as_secs_f64() * 1e3,
        first.cpu_ticks as f64 * 1e4 / count as f64
    );

    // Both controllers write each Watcher's status once.
    let baseline =
        run("watcher,pods", watchers(count), Vec::new(), Vec::new(), 2 * count as u64, Lists::Streamed).await;
    let (binary, libraries, anonymous, threads) = baseline.breakdown;
    println!("\nWatcher controller and pod reconciler, no pods (the baseline)");
    println!(
        "  RSS at ready:               {:.1} MB = binary {:.1} + libraries {:.1} + anonymous {:.1}; {threads} threads",
        mb(binary + libraries + anonymous),
        mb(binary),
        mb(libraries),
        mb(anonymous)
    );
    println!("  peak RSS:                   {:.1} MB", mb(baseline.peak));
    let (binary, libraries, anonymous, threads) = baseline.reconciled_breakdown;
    println!(
        "  RSS once every Watcher is reconciled: {:.1} MB = binary {:.1} + libraries {:.1} + anonymous {:.1}; {threads} threads",
        mb(baseline.rss),
        mb(binary),
        mb(libraries),
        mb(anonymous)
    );
    if pod_count > 0 {
        if std::env::var_os("BENCH_ENDING_ONLY").is_none() {
            with_pods(count, pod_count, baseline.peak).await;
        }
        ending_pods(count, pod_count, baseline.peak).await;
        if std::env::var_os("BENCH_ENDING_ONLY").is_some() {
            return;
        }
    }
    created_while_running_rows(count).await;
    assert_eq!(first.writes, 2 * count as u64, "one ConfigMap create and one status patch per Watcher");
    assert_eq!(steady.reads + steady.writes, 0, "a steady state costs no request");
    cluster_watcher_runs().await;
}

/// The runs with `pod_count` pods cached, the initial list streamed then in pages, against a
/// plain paged LIST; memory per pod over `baseline_peak` (no pods).
async fn with_pods(count: usize, pod_count: usize, baseline_peak: u64) {
    let list = plain_list(pod_count).await;
    for (lists, how) in [
        (Lists::Streamed, "the initial list streamed (kube-apiserver 1.32, 1.34 and later)"),
        (Lists::Paged, "streamed lists refused, pages of 500 (kube-apiserver 1.24 to 1.31, 1.33)"),
    ] {
        let loaded = run("watcher,pods", watchers(count), Vec::new(), pods(pod_count), 2 * count as u64, lists).await;
        println!("\nwith {pod_count} pods cached, {how}");
        println!(
            "  start → /readyz 200:        {:.0} ms; all counted after {:.0} ms",
            loaded.ready.as_secs_f64() * 1e3,
            loaded.reconciled.as_secs_f64() * 1e3
        );
        println!(
            "  plain paged LIST:           {:.0} ms (500 a page); first exact count / LIST = {:.2}   (target ≤ 1.5)",
            list.as_secs_f64() * 1e3,
            loaded.reconciled.as_secs_f64() / list.as_secs_f64()
        );
        println!("  RSS after counting:         {:.1} MB", mb(loaded.rss));
        println!(
            "  peak RSS:                   {:.1} MB   (target ≤ 25 MB at 10,000 pods, ≤ 40 MB at 100,000)",
            mb(loaded.peak)
        );
        println!(
            "  per pod:                    {:.0} bytes   ((peak − baseline peak) / pods; target ≤ 1 KB)",
            (loaded.peak.saturating_sub(baseline_peak) * 1024) as f64 / pod_count as f64
        );
    }
}

/// The ending controller with `pod_count` Job pods it watches (`watcher.dev/end-sidecars=true`,
/// the app and the agent running), against the baseline (no pods): what each pod costs in the
/// caches.
async fn ending_pods(count: usize, pod_count: usize, baseline_peak: u64) {
    // The ending controller runs with the pod reconciler (`--controllers=pods`).
    let pods = job_pods(pod_count);
    let size = pods.first().map_or(0, |pod| pod.to_string().len());
    let loaded = run("watcher,pods", watchers(count), Vec::new(), pods, 2 * count as u64, Lists::Streamed).await;
    println!("\nwith {pod_count} Job pods the ending controller watches ({size} bytes each as JSON, whole)");
    println!("  peak RSS:                   {:.1} MB (the baseline's: {:.1})", mb(loaded.peak), mb(baseline_peak));
    println!("  RSS once listed:            {:.1} MB", mb(loaded.rss));
    println!(
        "  per pod:                    {:.0} bytes   ((peak − baseline peak) / pods, the pod reconciler's \
         and the ending controller's caches; target ≤ 1 KB)",
        (loaded.peak.saturating_sub(baseline_peak) * 1024) as f64 / pod_count as f64
    );
}

/// `count` Watchers created while the operator runs, watch events 5 and 200 ms behind writes:
/// one create and one status per Watcher, no 409, no read.
async fn created_while_running_rows(count: usize) {
    let per_watcher = |calls: u64| calls as f64 / count as f64;
    let mut bulk_counts = Vec::new();
    for lag in [Duration::from_millis(5), Duration::from_millis(200)] {
        let bulk = created_while_running(count, lag).await;
        println!(
            "\n{count} Watchers created while the operator runs (one List applied), watch events {} ms behind writes",
            lag.as_millis()
        );
        println!(
            "  per Watcher:                {:.2} ConfigMap creates, {:.2} answered 409, {:.2} reads, {:.2} status \
             writes   (target 1, 0, 0, 1)",
            per_watcher(bulk.creates),
            per_watcher(bulk.conflicts),
            per_watcher(bulk.reads),
            per_watcher(bulk.status_writes)
        );
        println!("  every status written after: {:.0} ms", bulk.converged.as_secs_f64() * 1e3);
        bulk_counts.push((bulk.creates, bulk.conflicts, bulk.reads, bulk.status_writes));
    }
    for counts in bulk_counts {
        let once = count as u64;
        assert_eq!(counts, (once, 0, 0, once), "one create and one status per Watcher, no 409, no read");
    }
}

/// The time a client takes to LIST `pod_count` pods from the fake server, 500 a page.
async fn plain_list(pod_count: usize) -> Duration {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};
    let (_server, addr) = FakeApiServer::default().with_list("/api/v1/pods", "PodList", pods(pod_count)).start().await;
    let dir = std::env::temp_dir().join(format!("watcher-bench-{}-list", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = kubeconfig(&dir, addr);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("config");
    let api = Api::<Pod>::all(kube::Client::try_from(config).expect("client"));
    let started = Instant::now();
    let mut params = ListParams::default().limit(500);
    let mut listed = 0;
    loop {
        let page = api.list(&params).await.expect("list");
        listed += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(listed, pod_count);
    let _ = std::fs::remove_dir_all(&dir);
    elapsed
}

async fn readyz(addr: std::net::SocketAddr) -> bool {
    readyz_body(addr).await.starts_with("HTTP/1.1 200")
}

async fn readyz_body(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else { return String::new() };
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response
}

/// Stops the operator however the benchmark ends, a failed assertion included.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the ClusterWatcher controller asked of the server, and how long it took.
#[derive(Default)]
struct FanOut {
    creates: u64,
    /// Every write to ConfigMaps and ClusterWatchers (creates, patches, deletes, statuses).
    writes: u64,
    conflicts: u64,
    reads: u64,
    status_writes: u64,
    converged: Duration,
    rss: u64,
    peak: u64,
}

impl FanOut {
    /// What was asked from `before` until now.
    fn since(server: &FakeApiServer, before: &Self) -> Self {
        let log = server.write_log.lock().map(|l| l.clone()).unwrap_or_default();
        let ours = |path: &String| path.contains("/configmaps") || path.contains("/clusterwatchers");
        let reads = server.read_log.lock().map(|l| l.iter().filter(|p| ours(p)).count()).unwrap_or(0);
        Self {
            creates: log.iter().filter(|w| w.starts_with("POST") && w.ends_with("/configmaps")).count() as u64
                - before.creates,
            writes: log.iter().filter(|w| ours(w)).count() as u64 - before.writes,
            conflicts: server.conflicts.load(Ordering::Relaxed) - before.conflicts,
            reads: reads as u64 - before.reads,
            status_writes: server.status_writes.load(Ordering::Relaxed) - before.status_writes,
            ..Self::default()
        }
    }

    fn totals(server: &FakeApiServer) -> Self {
        Self::since(server, &Self::default())
    }
}

/// `clusters` ClusterWatchers with config data and no namespaceSelector, over `namespaces`
/// namespaces: created (as one `kubectl apply`) while the operator runs with the Watcher
/// controller, until every namespace has each one's ConfigMap and each its status; then
/// `later` namespaces created while it runs, until they have theirs. Watch events trail writes
/// by 5 ms.
async fn cluster_watchers_over(clusters: usize, namespaces: usize, later: usize) -> (FanOut, FanOut, Duration) {
    let (server, addr) = namespaces_server(namespaces).await;
    let started = Instant::now();
    let (mut child, metrics, dir) = spawn_operator(addr, "watcher", &format!("cw-{clusters}"));
    let pid = child.id();
    let _guard = KillOnDrop(&mut child);
    until_ready(metrics, started).await;
    let ready = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await; // the admission scope known
    let created = Instant::now();
    for cluster in fake_apiserver::cluster_watchers(clusters) {
        server.create("/apis/watcher.dev/v1alpha1/clusterwatchers", cluster);
    }
    let converged = written(&server, (clusters * namespaces) as u64, clusters as u64, created).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, peak) = rss_kib(pid).expect("/proc");
    let first = FanOut { converged, rss, peak, ..FanOut::totals(&server) };

    let created = Instant::now();
    for i in 0..later {
        server.create("/api/v1/namespaces", fake_apiserver::namespace(&format!("new-{i}")));
    }
    let total = (clusters * (namespaces + later)) as u64;
    let converged = written(&server, total, first.status_writes, created).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, peak) = rss_kib(pid).expect("/proc");
    let then = FanOut { converged, rss, peak, ..FanOut::since(&server, &first) };
    drop(_guard);
    let _ = std::fs::remove_dir_all(&dir);
    (first, then, ready)
}

/// Waits until the operator answers `/readyz` with 200 (at most 180 s after `started`).
async fn until_ready(metrics: std::net::SocketAddr, started: Instant) {
    while !readyz(metrics).await {
        assert!(started.elapsed() < Duration::from_secs(180), "not ready within 180 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A live fake server (watch events 5 ms behind writes) with `namespaces` namespaces and no
/// Watcher, ClusterWatcher, ConfigMap or pod.
async fn namespaces_server(namespaces: usize) -> (std::sync::Arc<FakeApiServer>, std::net::SocketAddr) {
    let names: Vec<Value> = (0..namespaces).map(|i| fake_apiserver::namespace(&format!("ns-{i}"))).collect();
    FakeApiServer::default()
        .live(Duration::from_millis(5))
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", Vec::new())
        .with_list("/apis/watcher.dev/v1alpha1/clusterwatchers", "ClusterWatcherList", Vec::new())
        .with_list("/api/v1/namespaces", "NamespaceList", names)
        .with_list("/api/v1/configmaps", "ConfigMapList", Vec::new())
        .with_list("/api/v1/pods", "PodList", Vec::new())
        .start()
        .await
}

/// How long after `since` the server has seen `creates` ConfigMap creates and `statuses` status
/// writes in all.
async fn written(server: &FakeApiServer, creates: u64, statuses: u64, since: Instant) -> Duration {
    loop {
        let now = FanOut::totals(server);
        if now.creates >= creates && now.status_writes >= statuses {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(600), "not converged within 600 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `clusters` ClusterWatchers over `namespaces` namespaces, there before the operator starts
/// (listed at its start), until every namespace has each one's ConfigMap and each its status;
/// then the operator restarted onto what it wrote, for 3 s after it is ready.
async fn cluster_watchers_listed(clusters: usize, namespaces: usize) -> (FanOut, FanOut) {
    let (server, addr) = namespaces_server(namespaces).await;
    for cluster in fake_apiserver::cluster_watchers(clusters) {
        server.create("/apis/watcher.dev/v1alpha1/clusterwatchers", cluster);
    }
    let first = {
        let started = Instant::now();
        let (mut child, metrics, dir) = spawn_operator(addr, "watcher", &format!("cw-listed-{clusters}"));
        let pid = child.id();
        let _guard = KillOnDrop(&mut child);
        until_ready(metrics, started).await;
        let converged = written(&server, (clusters * namespaces) as u64, clusters as u64, started).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss, peak) = rss_kib(pid).expect("/proc");
        let _ = std::fs::remove_dir_all(&dir);
        FanOut { converged, rss, peak, ..FanOut::totals(&server) }
    };
    let started = Instant::now();
    let (mut child, metrics, dir) = spawn_operator(addr, "watcher", &format!("cw-restart-{clusters}"));
    let _guard = KillOnDrop(&mut child);
    until_ready(metrics, started).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restart = FanOut { converged: started.elapsed(), ..FanOut::since(&server, &first) };
    let _ = std::fs::remove_dir_all(&dir);
    (first, restart)
}

/// Prints and checks the ClusterWatcher runs: one over 1,000 namespaces, 100 over 100.
async fn cluster_watcher_runs() {
    for (clusters, namespaces, later) in [(1, 1000, 100), (100, 100, 10)] {
        let (first, then, ready) = cluster_watchers_over(clusters, namespaces, later).await;
        let pairs = (clusters * namespaces) as f64;
        println!("\n{clusters} ClusterWatcher(s) over {namespaces} namespaces (created while the operator runs)");
        println!("  start → /readyz 200:        {:.0} ms", ready.as_secs_f64() * 1e3);
        println!(
            "  per namespace and ClusterWatcher: {:.2} ConfigMap creates, {:.2} answered 409, {:.2} reads   \
             (target 1, 0, 0); {} status writes for {clusters}",
            first.creates as f64 / pairs,
            first.conflicts as f64 / pairs,
            first.reads as f64 / pairs,
            first.status_writes
        );
        println!(
            "  every ConfigMap and status written after: {:.0} ms; RSS {:.1} MB, peak {:.1} MB",
            first.converged.as_secs_f64() * 1e3,
            mb(first.rss),
            mb(first.peak)
        );
        let later_pairs = (clusters * later) as f64;
        println!(
            "  {later} namespaces created later: per namespace and ClusterWatcher {:.2} creates, {:.2} answered 409, \
             {:.2} reads   (target 1, 0, 0); {} status writes; all written after {:.0} ms; RSS {:.1} MB",
            then.creates as f64 / later_pairs,
            then.conflicts as f64 / later_pairs,
            then.reads as f64 / later_pairs,
            then.status_writes,
            then.converged.as_secs_f64() * 1e3,
            mb(then.rss)
        );
        assert_eq!((first.creates, first.conflicts, first.reads), ((clusters * namespaces) as u64, 0, 0));
        assert_eq!((then.creates, then.conflicts, then.reads), ((clusters * later) as u64, 0, 0));

        let (listed, restart) = cluster_watchers_listed(clusters, namespaces).await;
        println!(
            "  listed when the operator starts: per namespace and ClusterWatcher {:.2} creates, {:.2} answered 409, \
             {:.2} reads   (target 1, 0, 0); {} status writes; all written {:.0} ms after its start; RSS {:.1} MB",
            listed.creates as f64 / pairs,
            listed.conflicts as f64 / pairs,
            listed.reads as f64 / pairs,
            listed.status_writes,
            listed.converged.as_secs_f64() * 1e3,
            mb(listed.rss)
        );
        println!(
            "  restarted onto what it wrote: {} writes, {} reads of ConfigMaps and ClusterWatchers   (target 0, 0)",
            restart.writes, restart.reads
        );
        assert_eq!((listed.creates, listed.conflicts, listed.reads), ((clusters * namespaces) as u64, 0, 0));
        assert_eq!((restart.writes, restart.reads), (0, 0), "a restart in a steady cluster costs no request");
    }
}
