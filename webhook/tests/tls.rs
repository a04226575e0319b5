//! The webhook over real TLS on 127.0.0.1: a client that trusts the generated CA gets its patch,
//! and replaced certificate files are served to the next connection with no request failing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use watcher_admission::InjectOptions;
use watcher_api::Watcher;
use watcher_certs::{Authority, CertFiles, CertStore, server_config};
use watcher_webhook::{Metrics, Reviewer, router, serve_tls};

const HOST: &str = "watcher-operator.watcher-system.svc";
const DAY: Duration = Duration::from_secs(24 * 3600);
const BODY: &str = include_str!("../../admission/fixtures/admission-review/pod-create-named-annotated.json");

fn write_cert(ca: &Authority, dir: &Path) -> String {
    let issued = ca.issue(&[HOST.to_owned(), "127.0.0.1".to_owned()], DAY).expect("issued");
    // Key first, then certificate: a reader between the two writes sees a mismatched pair,
    // which must be refused rather than served.
    std::fs::write(dir.join("tls.key"), &issued.key_pem).expect("key written");
    std::fs::write(dir.join("tls.crt"), &issued.cert_pem).expect("cert written");
    issued.cert_pem
}

fn client(ca_pem: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM")).expect("root added");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every connection a full handshake: a resumed session shows the certificate of the session
    // it resumes, not the one the server serves now.
    config.resumption = rustls::client::Resumption::disabled();
    TlsConnector::from(Arc::new(config))
}

async fn connect(connector: &TlsConnector, addr: std::net::SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector.connect(ServerName::try_from(HOST).expect("name"), tcp).await
}

/// One POST on an open connection (keep-alive): the status and the JSON body.
async fn post(stream: &mut TlsStream<TcpStream>) -> std::io::Result<(u16, Value)> {
    let head = format!(
        "POST /mutate?timeout=10s HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(BODY.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return Ok((status, serde_json::from_str(&body[..length]).unwrap_or(Value::Null)));
            }
        }
    }
}

fn served_cert(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default()
}

#[tokio::test]
async fn serves_patches_over_tls_and_picks_up_new_certificates() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("watcher-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (ca, ca_pem) = Authority::generate(DAY).expect("CA");
    let first_pem = write_cert(&ca, &dir);

    let files = CertFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
    let store = Arc::new(CertStore::default());
    assert!(files.load_into(&store).expect("first load"));
    tokio::spawn(files.clone().watch(store.clone(), Duration::from_millis(20)));

    let watcher: Watcher = serde_json::from_value(serde_json::json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": "log-watcher", "namespace": "team-a"},
        "spec": {"container": {"name": "log-watcher", "image": "busybox:1.36"}},
    }))
    .expect("Watcher");
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(watcher));
    let app = router(Reviewer::new(reader, InjectOptions::default()), Metrics::register(&mut Registry::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let serving = Arc::new(AtomicBool::new(false));
    let tls = Arc::new(server_config(store.clone()).expect("TLS config"));
    tokio::spawn(serve_tls(listener, tls, app, serving.clone(), std::future::pending()));

    // A client that trusts the CA gets the patch; the server presents the first certificate.
    let connector = client(&ca_pem.cert_pem);
    let mut keep_alive = connect(&connector, addr).await.expect("TLS handshake");
    assert!(serving.load(Ordering::Acquire));
    let first_der = CertificateDer::from_pem_slice(first_pem.as_bytes()).expect("PEM").to_vec();
    assert_eq!(served_cert(&keep_alive), first_der);
    let (status, review) = post(&mut keep_alive).await.expect("answered");
    assert_eq!(status, 200);
    assert_eq!(review["response"]["uid"], "39a859b2-1366-467b-80f2-70a009723439");
    assert_eq!(review["response"]["patchType"], "JSONPatch");

    // Requests keep flowing, on new connections and on the kept-alive one, while files change.
    let failures = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (connector, failures, answered, stop) =
            (connector.clone(), failures.clone(), answered.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let ok = match connect(&connector, addr).await {
                    Ok(mut stream) => matches!(post(&mut stream).await, Ok((200, _))),
                    Err(_) => false,
                };
                let ok = ok && matches!(post(&mut keep_alive).await, Ok((200, _)));
                if ok { &answered } else { &failures }.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(100)).await;
    let second_pem = write_cert(&ca, &dir);
    let second_der = CertificateDer::from_pem_slice(second_pem.as_bytes()).expect("PEM").to_vec();
    // Bounds against a hang, however slow the machine: the watch polls every 20 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen_new = false;
    while !seen_new && std::time::Instant::now() < deadline {
        let stream = connect(&connector, addr).await.expect("handshake during rotation");
        seen_new = served_cert(&stream) == second_der;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Requests on both connections after the rotation too.
    let after = answered.load(Ordering::Relaxed);
    while answered.load(Ordering::Relaxed) <= after && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Release);
    load.await.expect("load task");

    assert!(seen_new, "a new connection sees the replaced certificate");
    assert_eq!(failures.load(Ordering::Relaxed), 0, "no request failed during the rotation");
    assert!(answered.load(Ordering::Relaxed) > 0, "requests were sent during the rotation");

    // A broken pair is refused and the current certificate kept.
    std::fs::write(dir.join("tls.key"), "not a key").expect("written");
    assert!(files.load_into(&store).is_err());
    let stream = connect(&connector, addr).await.expect("still serving");
    assert_eq!(served_cert(&stream), second_der);
    let _ = std::fs::remove_dir_all(&dir);
}
