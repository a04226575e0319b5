//! Start-up and memory of the real binary with many Watchers in the cache.
//!
//! `cargo bench --bench startup [-- WATCHERS [PODS]]` starts a fake API server that lists
//! WATCHERS (default 1,000) Watchers with config data and PODS pods (default 0), runs
//! `watcher-operator run` against it (the Watcher controller, and the pod reconciler when there
//! are pods), and reports the time from process start to `/readyz` 200, the time and CPU until
//! every Watcher is reconciled and the writes stop, and the resident memory.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, cpu_ticks, kubeconfig, pods, rss_kib, watchers};

#[tokio::main]
async fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let count = numbers.first().copied().unwrap_or(1000);
    let pod_count = numbers.get(1).copied().unwrap_or(0);
    let (server, addr) = FakeApiServer::default()
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", watchers(count))
        .with_list("/api/v1/pods", "PodList", pods(pod_count))
        .start()
        .await;
    let controllers = if pod_count > 0 { "--controllers=watcher,pods" } else { "--controllers=watcher" };
    let dir = std::env::temp_dir().join(format!("watcher-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let webhook = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");

    let started = Instant::now();
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
    let mut child = command
        .args(["run", "--leader-election=false", controllers, "--namespace=bench"])
        .arg(format!("--metrics-addr={metrics}"))
        .arg(format!("--webhook-addr={webhook}"))
        .env("KUBECONFIG", kubeconfig(&dir, addr))
        .env("RUST_LOG", std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .spawn()
        .expect("binary starts");
    let pid = child.id();
    let _guard = KillOnDrop(&mut child);

    let ready_after = loop {
        if readyz(metrics).await {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not ready within 120 s: {}", readyz_body(metrics).await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let (rss_ready, _) = rss_kib(pid).expect("/proc");
    let ticks_ready = cpu_ticks(pid).expect("/proc");

    // Every Watcher gets a status write from each controller; then the writes stop.
    let expected = count as u64 * if pod_count > 0 { 2 } else { 1 };
    while server.status_writes.load(Ordering::Relaxed) < expected {
        assert!(started.elapsed() < Duration::from_secs(300), "reconciles did not finish within 300 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reconciled_after = started.elapsed();
    let ticks = cpu_ticks(pid).expect("/proc") - ticks_ready;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss, peak) = rss_kib(pid).expect("/proc");
    if !wrap.is_empty() {
        // A profiler writes its report when the process exits: stop it gracefully.
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while rss_kib(pid).is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(_guard);
    let _ = std::fs::remove_dir_all(&dir);

    println!("watchers in cache:            {count}");
    println!("pods in cache:                {pod_count}");
    println!("start → /readyz 200:          {:.0} ms   (target ≤ 1000 ms)", ready_after.as_secs_f64() * 1e3);
    println!("RSS at ready:                 {:.1} MB", rss_ready as f64 / 1024.0);
    println!(
        "all reconciled after start:   {:.0} ms   ({} writes)",
        reconciled_after.as_secs_f64() * 1e3,
        server.writes.load(Ordering::Relaxed)
    );
    println!(
        "CPU per Watcher:              {:.0} µs   (GET + apply + status patch{})",
        ticks as f64 * 1e4 / count as f64,
        if pod_count > 0 { "; its pods counted + status patch" } else { "" }
    );
    println!("RSS after reconciling:        {:.1} MB", rss as f64 / 1024.0);
    println!("peak RSS:                     {:.1} MB   (target ≤ 25 MB)", peak as f64 / 1024.0);
    let total = server.status_writes.load(Ordering::Relaxed);
    assert_eq!(total, expected, "a steady state writes no more");
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
