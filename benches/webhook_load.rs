//! Load test of the admission webhook over TLS keep-alive, against a floor server run in the
//! same way on the same machine in the same run.
//!
//! `cargo bench --bench webhook_load [-- SECONDS]` starts
//! - the floor: a minimal rustls + hyper server that only parses the AdmissionReview and
//!   echoes its uid (this same program, re-executed; see `floor_server`), and
//! - the real `watcher-operator run` against a fake API server, serving files-mode TLS,
//!
//! then measures each: throughput at saturation (32 connections, closed loop, the median of 5
//! rounds that alternate between the servers; the ratio to the floor is the median of the
//! rounds' ratios), latency at a fixed 2,000 req/s (open loop: a request's wait behind slow ones counts), peak RSS, with
//! every answer checked (status 200, uid echoed, patch present for the real server).

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/http.rs"]
mod http;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, kubeconfig, rss_kib};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const FIXTURE: &str = include_str!("../admission/fixtures/admission-review/pod-create-named-annotated.json");
const UID: &str = "39a859b2-1366-467b-80f2-70a009723439";
const HOST: &str = "watcher-operator.watcher-system.svc";
const SATURATION_CONNECTIONS: usize = 32;
const FIXED_RATE: u32 = 2_000;
const FIXED_RATE_WORKERS: usize = 64;
const ROUNDS: usize = 5;

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("WEBHOOK_LOAD_FLOOR").is_some() {
        return floor_server();
    }
    let seconds: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(Duration::from_secs(seconds)));
}

async fn run(duration: Duration) {
    let dir = std::env::temp_dir().join(format!("watcher-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (ca, ca_pem) = watcher_certs::Authority::generate(Duration::from_secs(86_400)).expect("CA");
    let serving = ca.issue(&[HOST.to_owned()], Duration::from_secs(86_400)).expect("cert");
    std::fs::write(dir.join("tls.crt"), &serving.cert_pem).expect("write");
    std::fs::write(dir.join("tls.key"), &serving.key_pem).expect("write");
    let connector = connector(&ca_pem.cert_pem);

    let one: Value = serde_json::from_str(FIXTURE).expect("fixture");
    let mut three = one.clone();
    three["request"]["object"]["metadata"]["annotations"]["watcher.dev/inject"] =
        json!("log-watcher,metrics-watcher,audit-watcher");
    let bodies = [("fixture pod, 1 Watcher", one.to_string()), ("pod asking for 3 Watchers", three.to_string())];

    let (floor, floor_addr) = start_floor(&dir, &connector).await;

    let (real, real_addr, health_addr, _api) = start_operator(&dir).await;

    println!(
        "{duration:?} per phase; saturation: {SATURATION_CONNECTIONS} connections, median of {ROUNDS} alternating rounds; \
         latency: {FIXED_RATE} req/s fixed rate"
    );
    println!(
        "{:<40} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "server, body", "req/s max", "p50 ms", "p99 ms", "max ms", "errors", "peak RSS"
    );
    // Saturation in alternating rounds (floor, real with 1 Watcher, real with 3), so a slow
    // moment of the machine hits every server alike; each server's median round is reported.
    let targets = [(floor_addr, &bodies[0].1, false), (real_addr, &bodies[0].1, true), (real_addr, &bodies[1].1, true)];
    let mut rounds: [Vec<f64>; 3] = Default::default();
    let mut saturation_errors = 0;
    for _ in 0..ROUNDS {
        for (i, (addr, body, patch)) in targets.iter().enumerate() {
            let body: Arc<str> = body.as_str().into();
            let _ = closed_loop(&connector, *addr, &body, *patch, Duration::from_secs(1)).await; // warm-up
            let (done, errors) = closed_loop(&connector, *addr, &body, *patch, duration).await;
            rounds[i].push(done as f64 / duration.as_secs_f64());
            saturation_errors += errors;
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // The ratio to the floor is taken within each round (its servers ran moments apart) and
    // the median of those reported: the machine's speed moves more between rounds than within.
    let ratios: Vec<Vec<f64>> =
        (1..3).map(|i| rounds[i].iter().zip(&rounds[0]).map(|(real, floor)| real / floor).collect()).collect();
    let throughput: Vec<f64> = rounds.into_iter().map(median).collect();
    let labels = [
        "floor (parse + echo uid), fixture pod".to_owned(),
        format!("watcher-operator, {}", bodies[0].0),
        format!("watcher-operator, {}", bodies[1].0),
    ];
    for (i, (addr, body, patch)) in targets.iter().enumerate() {
        let mut outcome = fixed_rate(&connector, *addr, body, *patch, duration).await;
        outcome.throughput = throughput[i];
        let rss = if i == 0 { floor.rss_mb() } else { real.rss_mb() };
        report(&labels[i], &outcome, rss);
    }
    println!("errors at saturation, all rounds: {saturation_errors}");
    for (i, ratios) in ratios.into_iter().enumerate() {
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "throughput ratio watcher-operator / floor, {}: {:.3}   (median of rounds {}; target ≥ 1.0)",
            bodies[i].0,
            median(ratios),
            each.join(", ")
        );
    }
    let healthy = http_get(health_addr, "/readyz").await.starts_with("HTTP/1.1 200");
    println!("operator /readyz after the load: {}", if healthy { "200" } else { "NOT READY" });
    drop((floor, real));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The floor server (parse and echo the uid), a process of this program, serving the
/// certificate in `dir`, and its address.
async fn start_floor(dir: &std::path::Path, connector: &TlsConnector) -> (Server, SocketAddr) {
    let floor_addr = free_port();
    let floor = Server(
        Command::new(std::env::current_exe().expect("this program"))
            .env("WEBHOOK_LOAD_FLOOR", floor_addr.to_string())
            .env("WEBHOOK_LOAD_CERT", dir.join("tls.crt"))
            .env("WEBHOOK_LOAD_KEY", dir.join("tls.key"))
            .stdout(Stdio::null())
            .spawn()
            .expect("floor server starts"),
    );
    wait_for_tls(connector, floor_addr).await;
    (floor, floor_addr)
}

/// The real operator, its webhook serving the certificate in `dir`, against a fake API server
/// holding the Watchers: the process, its webhook and metrics addresses, and the fake server
/// (kept while it runs).
async fn start_operator(dir: &std::path::Path) -> (Server, SocketAddr, SocketAddr, impl Sized) {
    let watchers: Vec<Value> = ["log-watcher", "metrics-watcher", "audit-watcher"]
        .iter()
        .map(|name| {
            json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                   "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"), "generation": 1},
                   "spec": {"container": {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", "tail -F /x"]},
                            "volume": {"name": format!("{name}-data"), "emptyDir": {}}, "configData": {"LEVEL": "debug"}}})
        })
        .collect();
    let (api, api_addr) = FakeApiServer::default()
        .with_list("/apis/watcher.dev/v1alpha1/watchers", "WatcherList", watchers)
        .start()
        .await;
    let (real_addr, health_addr) = (free_port(), free_port());
    let real = Server(
        Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
            .args(["run", "--leader-election=false", "--controllers=watcher", "--namespace=watcher-system"])
            .arg(format!("--webhook-addr={real_addr}"))
            .arg(format!("--health-addr={health_addr}"))
            .arg("--metrics-addr=127.0.0.1:0")
            .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
            .arg(format!("--tls-key-file={}", dir.join("tls.key").display()))
            .env("KUBECONFIG", kubeconfig(dir, api_addr))
            .env("RUST_LOG", std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("operator starts"),
    );
    wait_for_ready(health_addr).await;
    (real, real_addr, health_addr, api)
}

struct Outcome {
    throughput: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    errors: u64,
}

fn report(label: &str, o: &Outcome, rss_mb: f64) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{label:<40} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>7.1}MB",
        o.throughput,
        ms(o.p50),
        ms(o.p99),
        ms(o.max),
        o.errors,
        rss_mb
    );
}

/// Latency at a fixed rate (throughput is filled in by the caller).
async fn fixed_rate(
    connector: &TlsConnector,
    addr: SocketAddr,
    body: &str,
    expect_patch: bool,
    duration: Duration,
) -> Outcome {
    let body: Arc<str> = body.into();

    // Fixed rate: every millisecond a dispatcher hands out rate/1000 jobs stamped with that
    // moment; workers take them in turn, so a slow answer delays the jobs behind it and that
    // wait counts. (Stamping at dispatch, not at the ideal time, leaves out tokio's 1 ms timer
    // rounding, which no server causes.)
    let (jobs_tx, jobs_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let jobs_rx = Arc::new(tokio::sync::Mutex::new(jobs_rx));
    let mut workers = Vec::new();
    for _ in 0..FIXED_RATE_WORKERS {
        let (connector, body, jobs_rx) = (connector.clone(), body.clone(), jobs_rx.clone());
        workers.push(tokio::spawn(async move {
            let mut stream = connect(&connector, addr).await.expect("connect");
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            loop {
                let Some(stamp) = jobs_rx.lock().await.recv().await else { break };
                match exchange(&mut stream, &body).await {
                    Ok(answer) if valid(&answer, expect_patch) => latencies.push(stamp.elapsed()),
                    _ => {
                        errors += 1;
                        stream = connect(&connector, addr).await.expect("reconnect");
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..duration.as_millis() {
        ticker.tick().await;
        let stamp = Instant::now();
        for _ in 0..FIXED_RATE / 1000 {
            let _ = jobs_tx.send(stamp);
        }
    }
    drop(jobs_tx);
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await.expect("worker");
        latencies.extend(l);
        errors += e;
    }
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Outcome {
        throughput: 0.0,
        p50: at(0.50),
        p99: at(0.99),
        max: latencies.last().copied().unwrap_or_default(),
        errors,
    }
}

async fn closed_loop(
    connector: &TlsConnector,
    addr: SocketAddr,
    body: &Arc<str>,
    expect_patch: bool,
    duration: Duration,
) -> (u64, u64) {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..SATURATION_CONNECTIONS {
        let (connector, body) = (connector.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut stream = connect(&connector, addr).await.expect("connect");
            let (mut done, mut errors) = (0u64, 0u64);
            while Instant::now() < deadline {
                match exchange(&mut stream, &body).await {
                    Ok(answer) if valid(&answer, expect_patch) => done += 1,
                    _ => {
                        errors += 1;
                        stream = connect(&connector, addr).await.expect("reconnect");
                    }
                }
            }
            (done, errors)
        }));
    }
    let mut totals = (0, 0);
    for task in tasks {
        let (d, e) = task.await.expect("task");
        totals = (totals.0 + d, totals.1 + e);
    }
    totals
}

fn valid(answer: &str, expect_patch: bool) -> bool {
    answer.starts_with("HTTP/1.1 200")
        && answer.contains(UID)
        && (!expect_patch || answer.contains("\"patchType\":\"JSONPatch\""))
}

fn connector(ca_pem: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA")).expect("root");
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(connector: &TlsConnector, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    connector.connect(ServerName::try_from(HOST).expect("name"), tcp).await
}

/// One request on a kept-alive connection; the whole answer (head and body) as text.
async fn exchange(stream: &mut TlsStream<TcpStream>, body: &str) -> std::io::Result<String> {
    let request = format!(
        "POST /mutate?timeout=10s HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let (head, body) = http::read_answer(stream).await?;
    Ok(format!("{head}\r\n\r\n{body}"))
}

async fn wait_for_tls(connector: &TlsConnector, addr: SocketAddr) {
    for _ in 0..500 {
        if connect(connector, addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing serves TLS on {addr}");
}

async fn wait_for_ready(addr: SocketAddr) {
    for _ in 0..1000 {
        if http_get(addr, "/readyz").await.starts_with("HTTP/1.1 200") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the operator did not become ready: {}", http_get(addr, "/readyz").await);
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(addr).await else { return String::new() };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port")
}

/// A server process, stopped when dropped.
struct Server(Child);

impl Server {
    fn rss_mb(&self) -> f64 {
        rss_kib(self.0.id()).map_or(0.0, |(_, peak)| peak as f64 / 1024.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The floor any webhook pays: TLS, HTTP/1.1 keep-alive, parse the AdmissionReview, echo its
/// uid with `allowed: true`. rustls + hyper, the same stack and runtime as the real server.
fn floor_server() {
    use http_body_util::{BodyExt, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper::{Request, Response};
    use kube::core::DynamicObject;
    use kube::core::admission::AdmissionReview;

    let env = |key: &str| std::env::var(key).expect(key);
    let addr: SocketAddr = env("WEBHOOK_LOAD_FLOOR").parse().expect("address");
    let chain =
        CertificateDer::pem_file_iter(env("WEBHOOK_LOAD_CERT")).expect("cert").collect::<Result<_, _>>().expect("cert");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(env("WEBHOOK_LOAD_KEY")).expect("key");
    let mut tls = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key).expect("TLS");
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    let body = request.into_body().collect().await?.to_bytes();
                    let uid = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
                        .ok()
                        .and_then(|review| review.request.map(|r| r.uid))
                        .unwrap_or_default();
                    let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                        "response": {"uid": uid, "allowed": true}});
                    let response = Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(answer.to_string())))
                        .expect("response");
                    Ok::<_, hyper::Error>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
}
