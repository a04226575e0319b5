use crate::metrics::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use prost::Message as _;

use super::series::messages::{Count, WriteRequest};
use super::*;
use crate::config::{MetricKind, ReceiverUrl, RuleConfig, ValueFrom};
use crate::metrics::{Metrics, Observed};

fn batch(samples: usize, bytes: usize) -> Batch {
    Batch { body: Bytes::from(vec![0; bytes]), samples }
}

/// Within its bounds by samples and by bytes, the oldest pushes dropped first; the newest is
/// kept whatever its size.
#[test]
fn the_queue_drops_its_oldest_pushes_beyond_its_bounds() {
    let mut queue = Queue::new(100, 1000);
    assert_eq!(queue.push(batch(40, 100)), 0);
    assert_eq!(queue.push(batch(40, 100)), 0);
    assert_eq!(queue.push(batch(40, 100)), 40, "over 100 samples: the first dropped");
    assert_eq!((queue.samples(), queue.bytes), (80, 200));
    assert_eq!(queue.push(batch(1, 900)), 40, "over 1000 bytes: the oldest dropped");
    assert_eq!((queue.samples(), queue.bytes), (41, 1000));
    assert_eq!(queue.push(batch(500, 10)), 41, "alone beyond the bound: kept");
    assert_eq!(queue.batches.len(), 1);
    assert_eq!(queue.pop().map(|b| b.samples), Some(500));
    assert_eq!((queue.samples(), queue.bytes), (0, 0));
}

/// A registry with a counting rule and a native histogram, both counted.
fn counted() -> (Registry, Metrics) {
    let mut registry = Registry::default();
    let latency = RuleConfig {
        metric: MetricKind::Histogram,
        value: Some(ValueFrom::Group("ms".into())),
        buckets: vec![0.1, 1.0],
        native_schema: Some(3),
        ..RuleConfig::counting("latency", "took=(?P<ms>[0-9.]+)").expect("a rule")
    };
    let mut latency = latency;
    latency.labels.clear();
    let errors = RuleConfig::counting("errors", "ERROR").expect("a rule");
    let metrics = Metrics::register(&mut registry, &["stdout".into()], &[errors, latency], 10);
    metrics.rules[0].matches[0].inc_by(7);
    let index = crate::metrics::native::Index::new(3);
    let mut observed = Observed::default();
    for value in [0.05, 0.5, 0.5, 3.0] {
        observed.observe(value, &[0.1, 1.0], Some(&index));
    }
    metrics.observed(1, 0, &observed);
    (registry, metrics)
}

/// Each series as a scrape reads it, with `__name__` and the pod's labels, sorted by name: a
/// counter's sample, a histogram's classic buckets (`le` as the text formats write it, `+Inf`
/// last), `_sum` and `_count`, and its native histogram whole.
#[test]
fn a_push_holds_every_series_a_scrape_reads_with_the_pods_labels() {
    let (registry, _metrics) = counted();
    let mut body = Vec::new();
    let samples = series::push(&registry, &[("namespace", "shop"), ("pod", "cart-0")], 1_700_000_000_000, &mut body);
    let request = WriteRequest::decode(body.as_slice()).expect("a WriteRequest");
    let find = |name: &str, extra: &[(&str, &str)]| {
        request
            .timeseries
            .iter()
            .find(|s| {
                s.labels.iter().any(|l| l.name == "__name__" && l.value == name)
                    && extra.iter().all(|(n, v)| s.labels.iter().any(|l| l.name == *n && l.value == *v))
            })
            .unwrap_or_else(|| panic!("{name} {extra:?} in the push"))
    };
    let errors = find("watcher_agent_matches_total", &[("rule", "errors")]);
    let names: Vec<&str> = errors.labels.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["__name__", "namespace", "pod", "rule", "source"], "sorted, the pod's among them");
    assert_eq!(errors.samples[0].value, 7.0);
    assert_eq!(errors.samples[0].timestamp, 1_700_000_000_000);
    let name = "watcher_agent_latency";
    assert_eq!(find(&format!("{name}_bucket"), &[("le", "0.1")]).samples[0].value, 1.0);
    assert_eq!(find(&format!("{name}_bucket"), &[("le", "1.0")]).samples[0].value, 3.0);
    assert_eq!(find(&format!("{name}_bucket"), &[("le", "+Inf")]).samples[0].value, 4.0);
    assert_eq!(find(&format!("{name}_count"), &[]).samples[0].value, 4.0);
    assert_eq!(find(&format!("{name}_sum"), &[]).samples[0].value, 4.05);
    let native = find(name, &[]);
    assert!(native.samples.is_empty());
    let histogram = &native.histograms[0];
    assert_eq!(histogram.count, Some(Count::CountInt(4)));
    assert_eq!(histogram.schema, 3);
    let buckets: i64 = {
        let (mut count, mut total) = (0, 0);
        for delta in &histogram.positive_deltas {
            count += delta;
            total += count;
        }
        total
    };
    assert_eq!(buckets, 4, "every observation in a bucket");
    assert!(!request.timeseries.iter().any(|s| s.labels.iter().any(|l| l.name == "le") && !s.histograms.is_empty()));
    assert_eq!(samples, request.timeseries.len());
    // A metric's own label of the pod's names wins, as a scrape's would over target labels.
    let mut mine = Vec::new();
    series::push(&registry, &[("rule", "the pod's")], 0, &mut mine);
    let mine = WriteRequest::decode(mine.as_slice()).expect("a WriteRequest");
    let rules = |name: &str| -> Vec<String> {
        let of = mine.timeseries.iter().filter(|s| s.labels.iter().any(|l| l.value == name));
        let mut rules: Vec<String> =
            of.flat_map(|s| s.labels.iter().filter(|l| l.name == "rule").map(|l| l.value.clone())).collect();
        rules.sort();
        rules
    };
    assert_eq!(rules("watcher_agent_matches_total"), ["errors", "latency"]);
    assert_eq!(rules("watcher_agent_lines_total"), ["the pod's"]);
}

/// A receiver that answers each request with `status`, handing what it was sent to the test.
async fn receiver(status: u16) -> (ReceiverUrl, tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let (sent, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buffer = [0; 65536];
            let (head, body) = loop {
                let n = stream.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                request.extend_from_slice(&buffer[..n]);
                let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                let head = String::from_utf8_lossy(&request[..end]).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break (head, request[end + 4..end + 4 + length].to_vec());
                }
            };
            let _ = sent.send((head, body));
            let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 5\r\nconnection: close\r\n\r\nsaid.");
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let url = ReceiverUrl::parse(&format!("http://127.0.0.1:{port}/api/v1/write")).expect("a URL");
    (url, received)
}

fn config(url: ReceiverUrl) -> RemoteWrite {
    RemoteWrite {
        url,
        interval: Duration::from_secs(15),
        bearer_token_file: None,
        ca_file: None,
        tenant: None,
        max_samples: 1000,
        max_bytes: 1 << 20,
    }
}

/// A push as remote write 1.0 sends it: POSTed protobuf, snappy-compressed, with its headers,
/// the bearer token read from its file, the tenant; what each answer makes of it.
#[tokio::test]
async fn a_push_is_posted_as_remote_write_and_each_answer_is_taken_as_the_spec_says() {
    let dir = std::env::temp_dir().join(format!("watcher-agent-rw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").expect("the token");
    let (url, mut received) = receiver(204).await;
    let mut remote = config(url);
    remote.bearer_token_file = Some(token);
    remote.tenant = Some("team-a".to_owned());
    let mut receiver_of = Receiver { config: remote, tls: None };
    let request = WriteRequest { timeseries: Vec::new() };
    let body = snap::raw::Encoder::new().compress_vec(&request.encode_to_vec()).expect("compresses");
    assert_eq!(receiver_of.post(body.clone().into()).await, Answer::Taken);
    let (head, sent) = received.recv().await.expect("a request");
    let head = head.to_ascii_lowercase();
    for header in [
        "post /api/v1/write http/1.1",
        "content-encoding: snappy",
        "content-type: application/x-protobuf",
        "x-prometheus-remote-write-version: 0.1.0",
        "authorization: bearer s3cret",
        "x-scope-orgid: team-a",
    ] {
        assert!(head.contains(header), "{header} in {head}");
    }
    let decoded = snap::raw::Decoder::new().decompress_vec(&sent).expect("snappy");
    assert_eq!(WriteRequest::decode(decoded.as_slice()).expect("a WriteRequest"), request);

    for (status, retried) in [(500, true), (503, true), (429, true), (400, false), (401, false)] {
        let (url, _received) = receiver(status).await;
        let answer = Receiver { config: config(url), tls: None }.post(body.clone().into()).await;
        match answer {
            Answer::Retry(why) => assert!(retried && why.contains(&status.to_string()), "{status}: {why}"),
            Answer::Refused(why) => assert!(!retried && why.contains("said."), "{status}: {why}"),
            Answer::Taken => panic!("{status} taken"),
        }
    }
    // Nobody listening: tried again.
    let nobody = ReceiverUrl::parse("http://127.0.0.1:1/api/v1/write").expect("a URL");
    assert!(matches!(Receiver { config: config(nobody), tls: None }.post(body.into()).await, Answer::Retry(_)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver over TLS with a certificate for `localhost` that `ca.pem` (in `dir`) issued itself:
/// it answers each request 204. Its URL.
async fn tls_receiver(dir: &std::path::Path) -> ReceiverUrl {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    std::fs::write(dir.join("ca.pem"), made.cert.pem()).expect("written");
    let key = PrivateKeyDer::from_pem_slice(made.signing_key.serialize_pem().as_bytes()).expect("a key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(made.cert.der().to_vec())], key)
        .expect("a server configuration");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Ok(mut stream) = acceptor.accept(stream).await else { continue };
            let mut request = Vec::new();
            let mut buffer = [0; 65536];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await;
            let _ = stream.shutdown().await;
        }
    });
    ReceiverUrl::parse(&format!("https://localhost:{port}/api/v1/write")).expect("a URL")
}

/// An `https://` receiver: its certificate checked against `AGENT_REMOTE_WRITE_CA_FILE`'s;
/// without that file (the system's roots know nothing of it), or with a file that holds no
/// certificate, the push fails and is tried again.
#[tokio::test]
async fn an_https_receiver_is_trusted_through_its_ca_file() {
    let dir = std::env::temp_dir().join(format!("watcher-agent-rw-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let url = tls_receiver(&dir).await;
    let body = || Bytes::from_static(b"");
    let mut trusted = config(url.clone());
    trusted.ca_file = Some(dir.join("ca.pem"));
    assert_eq!(Receiver { config: trusted, tls: None }.post(body()).await, Answer::Taken);
    match (Receiver { config: config(url.clone()), tls: None }).post(body()).await {
        Answer::Retry(why) => assert!(why.contains("TLS") || why.contains("root"), "{why}"),
        other => panic!("an unknown issuer: {other:?}"),
    }
    std::fs::write(dir.join("empty.pem"), "not a certificate\n").expect("written");
    let mut empty = config(url);
    empty.ca_file = Some(dir.join("empty.pem"));
    match (Receiver { config: empty, tls: None }).post(body()).await {
        Answer::Retry(why) => assert!(why.contains("no certificate"), "{why}"),
        other => panic!("no certificate in the file: {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
