//! Self-managed certificates: a CA and a serving certificate kept in Secret
//! `watcher-operator-tls`, shared by every replica, renewed at two thirds of their lifetime,
//! and the CA bundle written into the webhook configuration.
//!
//! Every replica runs [`SelfManaged::run`]. Writes carry the Secret's resourceVersion, so when
//! two replicas renew at once one wins and the other reloads what the winner wrote.
//!
//! CA rotation never leaves the API server without trust in the certificate being served:
//! 1. a new CA is made and the bundle becomes old CA + new CA (the serving certificate stays);
//! 2. once the bundle has had time to reach the API server (`rotation_settle`), the serving
//!    certificate is re-issued by the new CA;
//! 3. the old CA leaves the bundle when it expires.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::registration::{Registered, Registrar};
use crate::{Authority, CertInfo, CertStore, CertifiedPem, Result};

/// The Secret holding the CA and the serving certificate.
pub const SECRET_NAME: &str = "watcher-operator-tls";

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const CA_BUNDLE: &str = "ca-bundle.crt";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
use watcher_api::CA_ROTATED_AT_ANNOTATION as ROTATED_AT;
/// The pause after a write before the Secret is read again: never a tight loop, whatever the
/// API server answers.
const STEP_PAUSE: Duration = Duration::from_secs(1);

/// How long certificates live and how often they are looked at.
#[derive(Clone, Debug)]
pub struct Lifetimes {
    /// CA lifetime (rotated at two thirds).
    pub ca: Duration,
    /// Serving certificate lifetime (renewed at two thirds).
    pub serving: Duration,
    /// Time between publishing a new CA bundle and serving a certificate of the new CA.
    pub rotation_settle: Duration,
    /// Longest time between two looks at the Secret (other replicas' renewals are seen then).
    pub check_every: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            ca: Duration::from_secs(3 * 365 * DAY),
            serving: Duration::from_secs(90 * DAY),
            rotation_settle: Duration::from_secs(10 * 60),
            check_every: Duration::from_secs(60),
        }
    }
}

/// The self-managed certificate loop of one replica.
pub struct SelfManaged {
    /// Kubernetes client.
    pub client: Client,
    /// The operator's namespace: where the Secret lives, and never injected.
    pub namespace: String,
    /// Names the serving certificate must cover.
    pub hosts: Vec<String>,
    /// How kube-apiserver reaches the webhook; kept in the webhook configuration with the bundle.
    pub registrar: Registrar,
    /// Certificate lifetimes.
    pub lifetimes: Lifetimes,
}

/// What the Secret holds, read back.
#[derive(Clone, Debug)]
struct Stored {
    ca: CertifiedPem,
    bundle: String,
    serving: CertifiedPem,
    rotated_at: Option<SystemTime>,
}

/// The next change to the Secret, decided from what it holds and the time.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// No usable Secret: make a CA and a serving certificate.
    Create,
    /// Start a CA rotation: new CA, bundle of old and new.
    RotateCa,
    /// Issue a new serving certificate from the current CA.
    RenewServing,
    /// Drop expired CAs from the bundle.
    PruneBundle,
    /// Nothing to do before this time.
    Wait(SystemTime),
}

fn next_step(stored: Option<&Stored>, hosts: &[String], now: SystemTime, lifetimes: &Lifetimes) -> Step {
    let Some(stored) = stored else { return Step::Create };
    let (Ok(ca), Ok(serving), Ok(bundle)) = (
        CertInfo::from_pem(&stored.ca.cert_pem),
        CertInfo::from_pem(&stored.serving.cert_pem),
        CertInfo::all_from_pem(&stored.bundle),
    ) else {
        return Step::Create;
    };
    if now >= ca.not_after {
        return Step::Create; // too late for an overlap: start over
    }
    let rotating = serving.issuer != ca.subject;
    if ca.renewal_due(now) && !rotating {
        return Step::RotateCa;
    }
    if rotating {
        let settled = stored.rotated_at.map_or(now, |at| at + lifetimes.rotation_settle);
        if now >= settled || now >= serving.not_after {
            return Step::RenewServing;
        }
        return Step::Wait(settled);
    }
    if !serving.covers(hosts) || serving.renewal_due(now) {
        return Step::RenewServing;
    }
    if bundle.iter().any(|c| now >= c.not_after) {
        return Step::PruneBundle;
    }
    let next = bundle.iter().map(|c| c.not_after).chain([serving.renewal_time(), ca.renewal_time()]).min();
    Step::Wait(next.unwrap_or(now + lifetimes.check_every))
}

impl SelfManaged {
    /// Keeps the Secret, `store` and the webhook configuration current until `shutdown`, then
    /// restores the registration a run by URL replaced. `store` is loaded before the first wait,
    /// so the caller can wait for [`CertStore::is_loaded`].
    pub async fn run(self, store: Arc<CertStore>, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut failures = 0u32;
        loop {
            let wait = match self.reconcile(&store).await {
                Ok(until) => {
                    failures = 0;
                    until.duration_since(SystemTime::now()).unwrap_or_default().min(self.lifetimes.check_every)
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let backoff = Duration::from_secs(1 << failures.min(6));
                    warn!(%error, retry_in = ?backoff, "certificate upkeep failed");
                    backoff
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {},
                () = &mut shutdown => break,
            }
        }
        if let Err(error) = self.registrar.restore(&self.client).await {
            warn!(%error, "cannot restore the webhook registration");
        }
    }

    /// One pass: bring the Secret up to date (one write at most), serve its certificate and
    /// publish its bundle. Returns when to look again.
    pub async fn reconcile(&self, store: &CertStore) -> Result<SystemTime> {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let existing = secrets.get_opt(SECRET_NAME).await?;
        let stored = existing.as_ref().and_then(read_secret);
        let now = SystemTime::now();
        let step = next_step(stored.as_ref(), &self.hosts, now, &self.lifetimes);
        let next = match (&step, stored) {
            (Step::Wait(until), Some(stored)) => {
                let registered = self.publish(store, &stored).await?;
                return Ok(if registered == Registered::Conflict { now + STEP_PAUSE } else { *until });
            }
            (Step::Create, _) | (_, None) => {
                let (ca, ca_pem) = Authority::generate(self.lifetimes.ca)?;
                let serving = ca.issue(&self.hosts, self.lifetimes.serving)?;
                Stored { bundle: ca_pem.cert_pem.clone(), ca: ca_pem, serving, rotated_at: None }
            }
            (Step::RotateCa, Some(stored)) => {
                let (_, ca_pem) = Authority::generate(self.lifetimes.ca)?;
                let bundle = format!("{}{}", stored.bundle, ca_pem.cert_pem);
                Stored { bundle, ca: ca_pem, serving: stored.serving, rotated_at: Some(now) }
            }
            (Step::RenewServing, Some(stored)) => {
                let ca = Authority::from_pem(&stored.ca.cert_pem, &stored.ca.key_pem)?;
                Stored { serving: ca.issue(&self.hosts, self.lifetimes.serving)?, rotated_at: None, ..stored }
            }
            (Step::PruneBundle, Some(stored)) => {
                let bundle = prune_expired(&stored.bundle, now);
                Stored { bundle, ..stored }
            }
        };
        info!(step = ?step, secret = SECRET_NAME, namespace = self.namespace, "updating certificates");
        let secret = build_secret(&self.namespace, &next, existing.as_ref());
        let written = match existing {
            None => secrets.create(&PostParams::default(), &secret).await,
            Some(_) => secrets.replace(SECRET_NAME, &PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                self.publish(store, &next).await?;
                Ok(now + STEP_PAUSE) // one step per pass; a rotation's steps follow one another
            }
            // Another replica wrote first: read what it wrote on the next pass.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(now + STEP_PAUSE),
            Err(error) => Err(error.into()),
        }
    }

    /// Serves the stored certificate and registers the webhook with its bundle.
    async fn publish(&self, store: &CertStore, stored: &Stored) -> Result<Registered> {
        if store.load_pem(stored.serving.cert_pem.as_bytes(), stored.serving.key_pem.as_bytes())? {
            info!("serving the certificate from Secret {SECRET_NAME}");
        }
        store.set_ca(&stored.ca.cert_pem);
        let bundle = ByteString(stored.bundle.as_bytes().to_vec());
        self.registrar.register(&self.client, &bundle).await
    }
}

fn read_secret(secret: &Secret) -> Option<Stored> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| data.get(key).and_then(|v| String::from_utf8(v.0.clone()).ok());
    let rotated_at =
        secret.annotations().get(ROTATED_AT).and_then(|at| at.parse::<jiff::Timestamp>().ok()).map(SystemTime::from);
    Some(Stored {
        ca: CertifiedPem { cert_pem: text(CA_CERT)?, key_pem: text(CA_KEY)? },
        bundle: text(CA_BUNDLE)?,
        serving: CertifiedPem { cert_pem: text(TLS_CERT)?, key_pem: text(TLS_KEY)? },
        rotated_at,
    })
}

fn build_secret(namespace: &str, stored: &Stored, existing: Option<&Secret>) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let data = BTreeMap::from([
        (CA_CERT.to_owned(), bytes(&stored.ca.cert_pem)),
        (CA_KEY.to_owned(), bytes(&stored.ca.key_pem)),
        (CA_BUNDLE.to_owned(), bytes(&stored.bundle)),
        (TLS_CERT.to_owned(), bytes(&stored.serving.cert_pem)),
        (TLS_KEY.to_owned(), bytes(&stored.serving.key_pem)),
    ]);
    let annotations = stored
        .rotated_at
        .and_then(|at| jiff::Timestamp::try_from(at).ok())
        .map(|at| BTreeMap::from([(ROTATED_AT.to_owned(), at.to_string())]));
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                watcher_api::MANAGED_BY_LABEL.to_owned(),
                watcher_api::MANAGED_BY.to_owned(),
            )])),
            annotations,
            resource_version: existing.and_then(|e| e.resource_version()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The bundle without the CAs expired at `now`.
fn prune_expired(bundle: &str, now: SystemTime) -> String {
    let mut kept = String::new();
    for block in bundle.split_inclusive("-----END CERTIFICATE-----\n") {
        if CertInfo::from_pem(block).is_ok_and(|info| now < info.not_after) {
            kept.push_str(block);
        }
    }
    kept
}

#[cfg(test)]
mod tests;
