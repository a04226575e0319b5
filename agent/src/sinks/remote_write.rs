//! Every series pushed by Prometheus remote write 1.0 (`AGENT_REMOTE_WRITE_URL`): every
//! `AGENT_REMOTE_WRITE_INTERVAL` what a scrape would read becomes one push (a protobuf
//! `WriteRequest`, snappy-compressed), with the pod's `namespace` and `pod`. Pushes wait in a
//! queue bounded by samples and by bytes, the oldest dropped first (and counted), and are sent
//! in order: a connection error, a 429 or a 5xx is tried again with backoff, any other answer
//! drops the push (counted, and said). The pusher is a task of its own: reading never waits for
//! it. When the agent ends, a last push carries its last counts ([`LAST_PUSH`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, HOST, USER_AGENT};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{PodIdentity, RemoteWrite};
use crate::metrics::Metrics;
use crate::metrics::server::Endpoints;

pub(crate) mod series;

/// A push that takes longer fails (and is tried again).
const TIMEOUT: Duration = Duration::from_secs(10);
/// Backoff between failed pushes: from 500 ms, doubling, to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// When the agent ends, what is queued and its last counts are pushed within this long.
pub(crate) const LAST_PUSH: Duration = Duration::from_secs(5);
/// The most of a refusal's body said in the log.
const REFUSAL_BYTES: usize = 512;

/// One push, compressed.
struct Batch {
    body: Bytes,
    samples: usize,
}

/// The pushes not yet taken, oldest first, within `max_samples` and `max_bytes` (the newest is
/// always kept).
pub(crate) struct Queue {
    batches: VecDeque<Batch>,
    samples: usize,
    bytes: usize,
    max_samples: usize,
    max_bytes: usize,
}

impl Queue {
    pub(crate) fn new(max_samples: usize, max_bytes: usize) -> Self {
        Self { batches: VecDeque::new(), samples: 0, bytes: 0, max_samples, max_bytes }
    }

    /// Adds `batch`; the samples of the oldest pushes dropped to stay within the bounds.
    fn push(&mut self, batch: Batch) -> usize {
        self.samples += batch.samples;
        self.bytes += batch.body.len();
        self.batches.push_back(batch);
        let mut dropped = 0;
        while self.batches.len() > 1 && (self.samples > self.max_samples || self.bytes > self.max_bytes) {
            dropped += self.pop().map_or(0, |b| b.samples);
        }
        dropped
    }

    fn pop(&mut self) -> Option<Batch> {
        let batch = self.batches.pop_front()?;
        self.samples -= batch.samples;
        self.bytes -= batch.body.len();
        Some(batch)
    }

    /// Samples held.
    pub(crate) fn samples(&self) -> usize {
        self.samples
    }
}

/// What the receiver said of a push.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// 2xx.
    Taken,
    /// A connection error, a timeout, a 429 or a 5xx: tried again.
    Retry(String),
    /// Any other answer: trying again would get the same.
    Refused(String),
}

/// The receiver: its address, its authentication, its TLS (made when first needed: a CA file
/// mounted late is read then).
struct Receiver {
    config: RemoteWrite,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Receiver {
    /// Posts `body`, a compressed `WriteRequest`, on a connection of its own.
    async fn post(&mut self, body: Bytes) -> Answer {
        let connector = match self.config.url.tls {
            true if self.tls.is_none() => match tls_connector(self.config.ca_file.as_deref()) {
                Ok(connector) => Some(self.tls.insert(connector).clone()),
                Err(why) => return Answer::Retry(why),
            },
            true => self.tls.clone(),
            false => None,
        };
        let request = match self.request(body) {
            Ok(request) => request,
            Err(why) => return Answer::Retry(why),
        };
        match tokio::time::timeout(TIMEOUT, self.exchange(connector, request)).await {
            Err(_) => Answer::Retry(format!("no answer within {}s", TIMEOUT.as_secs())),
            Ok(Err(why)) => Answer::Retry(why),
            Ok(Ok((status, _))) if status.is_success() => Answer::Taken,
            Ok(Ok((status, said))) if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() => {
                Answer::Retry(format!("{status}: {said}"))
            }
            Ok(Ok((status, said))) => Answer::Refused(format!("{status}: {said}")),
        }
    }

    fn request(&self, body: Bytes) -> Result<Request<Full<Bytes>>, String> {
        let url = &self.config.url;
        let mut request = Request::post(url.path.as_str())
            .header(HOST, format!("{}:{}", url.host, url.port))
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(CONTENT_ENCODING, "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .header(USER_AGENT, concat!("watcher-agent/", env!("CARGO_PKG_VERSION")));
        if let Some(file) = &self.config.bearer_token_file {
            let token = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read AGENT_REMOTE_WRITE_BEARER_TOKEN_FILE {}: {e}", file.display()))?;
            request = request.header(AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        if let Some(tenant) = &self.config.tenant {
            request = request.header("X-Scope-OrgID", tenant.as_str());
        }
        request.body(Full::new(body)).map_err(|e| format!("cannot make the request: {e}"))
    }

    async fn exchange(
        &self,
        tls: Option<tokio_rustls::TlsConnector>,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, String), String> {
        let url = &self.config.url;
        let tcp = tokio::net::TcpStream::connect((url.server_name(), url.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", url.host, url.port))?;
        match tls {
            None => send(TokioIo::new(tcp), request).await,
            Some(connector) => {
                let name = rustls_pki_types::ServerName::try_from(url.server_name().to_owned())
                    .map_err(|e| format!("{}: not a name TLS can check: {e}", url.host))?;
                let stream = connector.connect(name, tcp).await.map_err(|e| format!("TLS with {}: {e}", url.host))?;
                send(TokioIo::new(stream), request).await
            }
        }
    }
}

/// One HTTP/1.1 exchange on `io`: the status, and the start of the body.
async fn send<T>(io: TokioIo<T>, request: Request<Full<Bytes>>) -> Result<(StatusCode, String), String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| format!("HTTP: {e}"))?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(|e| format!("HTTP: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), 64 * 1024).collect().await;
        drop(sender);
        let said = body.map(|b| b.to_bytes()).unwrap_or_default();
        let said = String::from_utf8_lossy(&said[..said.len().min(REFUSAL_BYTES)]).trim().to_owned();
        Ok((status, said))
    };
    let (answer, _ended) = tokio::join!(exchange, connection);
    answer
}

/// The TLS client of an `https://` receiver: its certificate chains to `ca_file`'s, else to
/// the system's roots.
fn tls_connector(ca_file: Option<&std::path::Path>) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(file) => {
            let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| format!("AGENT_REMOTE_WRITE_CA_FILE {}: {e}", file.display()))?;
            let (added, _) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(format!("AGENT_REMOTE_WRITE_CA_FILE {}: no certificate in it", file.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("no system root certificates here: set AGENT_REMOTE_WRITE_CA_FILE".to_owned());
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The pusher: what it reads, where it pushes, what waits.
pub(crate) struct Pusher {
    endpoints: Arc<Endpoints>,
    metrics: Arc<Metrics>,
    identity: Vec<(&'static str, String)>,
    receiver: Receiver,
    queue: Queue,
    retry_at: Option<Instant>,
    backoff: Duration,
    said: bool,
    /// The buffers each push is written and compressed in, kept from one push to the next.
    encoded: Vec<u8>,
    compressed: Vec<u8>,
    snappy: snap::raw::Encoder,
}

impl Pusher {
    /// Pushes what `endpoints` serves to `config`'s receiver, with `pod`'s labels.
    pub(crate) fn new(
        config: &RemoteWrite,
        pod: &PodIdentity,
        endpoints: Arc<Endpoints>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let identity = [("namespace", &pod.namespace), ("pod", &pod.name)]
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.clone()?)))
            .collect();
        Self {
            endpoints,
            metrics,
            identity,
            receiver: Receiver { config: config.clone(), tls: None },
            queue: Queue::new(config.max_samples, config.max_bytes),
            retry_at: None,
            backoff: Duration::ZERO,
            said: false,
            encoded: Vec::new(),
            compressed: Vec::new(),
            snappy: snap::raw::Encoder::new(),
        }
    }

    /// What a scrape would read now, queued as one push.
    fn snapshot(&mut self) {
        let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let at = i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
        let identity: Vec<(&str, &str)> = self.identity.iter().map(|(n, v)| (*n, v.as_str())).collect();
        self.encoded.clear();
        let samples = series::push(&self.endpoints.registry, &identity, at, &mut self.encoded);
        self.compressed.resize(snap::raw::max_compress_len(self.encoded.len()), 0);
        // The output is as long as snappy may need: compressing into it cannot fail.
        let len = self.snappy.compress(&self.encoded, &mut self.compressed).unwrap_or_default();
        let body = Bytes::copy_from_slice(&self.compressed[..len]);
        let dropped = self.queue.push(Batch { body, samples });
        if dropped > 0 {
            self.metrics.remote_written("dropped", dropped);
            warn!(
                dropped,
                held = self.queue.samples(),
                "remote write: the queue is full; the oldest pushes were dropped (AGENT_REMOTE_WRITE_MAX_SAMPLES, \
                 AGENT_REMOTE_WRITE_MAX_BYTES)"
            );
        }
        self.metrics.remote_write_held(self.queue.samples());
    }

    /// Whether a push waits and may be sent at `now`.
    fn due(&self, now: Instant) -> bool {
        !self.queue.batches.is_empty() && self.retry_at.is_none_or(|at| at <= now)
    }

    /// Sends the oldest push and takes the answer.
    async fn send_oldest(&mut self) {
        let Some(batch) = self.queue.batches.front() else { return };
        let (body, samples) = (batch.body.clone(), batch.samples);
        let answer = self.receiver.post(body).await;
        let url = &self.receiver.config.url;
        match answer {
            Answer::Taken => {
                self.queue.pop();
                self.metrics.remote_written("sent", samples);
                if self.backoff > Duration::ZERO {
                    info!(%url, "remote write: the receiver takes pushes again");
                }
                self.backoff = Duration::ZERO;
                self.retry_at = None;
                self.said = false;
            }
            Answer::Retry(why) => {
                self.backoff = (self.backoff * 2).clamp(Duration::from_millis(500), MAX_BACKOFF);
                self.retry_at = Some(Instant::now() + self.backoff);
                if !self.said {
                    warn!(%url, %why, "remote write: the push failed; tried again with backoff, later pushes queued");
                    self.said = true;
                }
            }
            Answer::Refused(why) => {
                self.queue.pop();
                self.metrics.remote_written("refused", samples);
                warn!(%url, %why, samples, "remote write: the receiver refused a push; it is dropped");
            }
        }
        self.metrics.remote_write_held(self.queue.samples());
    }

    /// Pushes every `interval` until `finish`, then its last counts.
    pub(crate) async fn run(mut self, interval: Duration, mut finish: tokio::sync::oneshot::Receiver<()>) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        'pushing: loop {
            let retry_at = self.retry_at.unwrap_or_else(Instant::now);
            tokio::select! {
                biased;
                _ = &mut finish => break,
                _ = ticks.tick() => self.snapshot(),
                () = tokio::time::sleep_until(retry_at), if self.retry_at.is_some() => {}
            }
            while self.due(Instant::now()) {
                tokio::select! {
                    biased;
                    _ = &mut finish => break 'pushing,
                    () = self.send_oldest() => {}
                }
            }
        }
        self.last_push().await;
    }

    /// What waits and the last counts, in order, within [`LAST_PUSH`]; a failed push tried
    /// again without waiting long.
    async fn last_push(&mut self) {
        self.snapshot();
        let deadline = Instant::now() + LAST_PUSH;
        let pushing = async {
            while !self.queue.batches.is_empty() {
                self.retry_at = None;
                self.backoff = self.backoff.min(Duration::from_millis(250));
                self.send_oldest().await;
                if let Some(at) = self.retry_at {
                    tokio::time::sleep_until(at.min(deadline)).await;
                }
            }
        };
        match tokio::time::timeout_at(deadline, pushing).await {
            Ok(()) => info!("remote write: the last counts were pushed"),
            Err(_) => warn!(
                held = self.queue.samples(),
                "remote write: the receiver did not take the last pushes in time; they are lost"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
