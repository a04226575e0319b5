//! `/metrics` behind authentication against the plain endpoint, in the same run.
//!
//! `cargo bench --bench metrics_scrape [-- SECONDS]` starts two `watcher-operator run` against
//! one fake API server: one with its defaults (`/metrics` over HTTPS, a TokenReview and a
//! SubjectAccessReview per token, cached), one with `--metrics-secure=false`. One client scrapes
//! each once a second for SECONDS (default 60), on a kept-alive connection as Prometheus does,
//! alternating between them; every answer is checked (200, the same families). It prints each
//! endpoint's scrape latency (p50, p99, max), their p99 ratio, and the reviews kube-apiserver
//! was asked for, per minute.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/http.rs"]
mod http;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, kubeconfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const HOST: &str = "watcher-operator.watcher-system.svc";

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(60);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(Duration::from_secs(seconds)));
}

/// A server process, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port")
}

fn operator(dir: &std::path::Path, api: SocketAddr, metrics: SocketAddr, flags: &[&str]) -> (Server, SocketAddr) {
    let health = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .args(["run", "--leader-election=false", "--controllers=watcher", "--namespace=watcher-system"])
        .arg(format!("--webhook-addr={}", free_port()))
        .arg(format!("--metrics-addr={metrics}"))
        .arg(format!("--health-addr={health}"))
        .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
        .arg(format!("--tls-key-file={}", dir.join("tls.key").display()))
        .args(flags)
        .env("KUBECONFIG", kubeconfig(dir, api))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("operator starts");
    (Server(child), health)
}

async fn ready(health: SocketAddr) {
    for _ in 0..2000 {
        if let Ok(mut stream) = TcpStream::connect(health).await {
            let _ = stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer).await;
            if answer.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the operator at {health} did not become ready");
}

/// One GET /metrics on a kept-alive connection: the status line and the body.
async fn scrape<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, token: Option<&str>) -> (String, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: {HOST}\r\n{auth}Accept: application/openmetrics-text\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request written");
    let (head, body) = http::read_answer(stream).await.expect("answer read");
    (head.lines().next().unwrap_or_default().to_owned(), body)
}

fn families(body: &str) -> Vec<&str> {
    body.lines().filter_map(|l| l.strip_prefix("# TYPE ")).collect()
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted.get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1))).copied().unwrap_or_default()
}

async fn run(duration: Duration) {
    let dir = std::env::temp_dir().join(format!("watcher-metrics-scrape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (ca, ca_pem) = watcher_certs::Authority::generate(Duration::from_secs(86_400)).expect("CA");
    let serving = ca.issue(&[HOST.to_owned()], Duration::from_secs(86_400)).expect("cert");
    std::fs::write(dir.join("tls.crt"), &serving.cert_pem).expect("write");
    std::fs::write(dir.join("tls.key"), &serving.key_pem).expect("write");
    let (api, api_addr) = FakeApiServer::default().start().await;

    let (secure_addr, plain_addr) = (free_port(), free_port());
    let (_secure, secure_health) = operator(&dir, api_addr, secure_addr, &[]);
    let (_plain, plain_health) = operator(&dir, api_addr, plain_addr, &["--metrics-secure=false"]);
    ready(secure_health).await;
    ready(plain_health).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.cert_pem.as_bytes()).expect("CA PEM")).expect("root");
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(secure_addr).await.expect("connect");
    let mut secure = connector.connect(ServerName::try_from(HOST).expect("name"), tcp).await.expect("TLS");
    let mut plain = TcpStream::connect(plain_addr).await.expect("connect");

    // Refused as they should be, before the measured minute (and outside its count).
    let (status, _) = scrape(&mut secure, None).await;
    assert!(status.contains(" 401 "), "{status}");
    let (status, _) = scrape(&mut secure, Some("stolen")).await;
    assert!(status.contains(" 401 "), "{status}");
    let before = reviews(&api);

    let (mut secure_times, mut plain_times) = (Vec::new(), Vec::new());
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let started = Instant::now();
    while started.elapsed() < duration {
        ticker.tick().await;
        let start = Instant::now();
        let (status, plain_body) = scrape(&mut plain, None).await;
        plain_times.push(start.elapsed());
        assert!(status.contains(" 200 "), "{status}");
        let start = Instant::now();
        let (status, secure_body) = scrape(&mut secure, Some("good")).await;
        secure_times.push(start.elapsed());
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(families(&secure_body), families(&plain_body), "the same families either way");
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let asked = reviews(&api) - before;
    secure_times.sort();
    plain_times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("{:<36} {:>8} {:>9} {:>9} {:>9}", "GET /metrics, once a second", "scrapes", "p50 ms", "p99 ms", "max ms");
    for (label, times) in
        [("plain HTTP (--metrics-secure=false)", &plain_times), ("HTTPS + token (default)", &secure_times)]
    {
        println!(
            "{label:<36} {:>8} {:>9.3} {:>9.3} {:>9.3}",
            times.len(),
            ms(quantile(times, 0.5)),
            ms(quantile(times, 0.99)),
            ms(quantile(times, 1.0))
        );
    }
    println!(
        "p99 ratio (HTTPS + token / plain): {:.2}; reviews asked of kube-apiserver: {asked} ({:.1} a minute)",
        ms(quantile(&secure_times, 0.99)) / ms(quantile(&plain_times, 0.99)),
        asked as f64 / minutes
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The TokenReviews and SubjectAccessReviews the fake API server was sent.
fn reviews(api: &FakeApiServer) -> usize {
    let log = api.write_log.lock().expect("log");
    log.iter().filter(|w| w.ends_with("/tokenreviews") || w.ends_with("/subjectaccessreviews")).count()
}
