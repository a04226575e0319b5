//! The certificate the TLS server presents, swappable while it serves.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::{CertInfo, Error, Result};

/// Holds the serving certificate; every new TLS handshake gets the latest one.
#[derive(Debug, Default)]
pub struct CertStore {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    expiry: RwLock<Expiry>,
}

/// When the certificates in use expire, as far as this process knows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expiry {
    /// The serving certificate's `notAfter`.
    pub serving: Option<SystemTime>,
    /// The `notAfter` of the CA that signs it: the self-managed CA, or the `ca.crt` beside
    /// `--tls-cert-file` (as cert-manager's Secrets hold it); unknown otherwise.
    pub ca: Option<SystemTime>,
}

impl CertStore {
    /// Replaces the certificate with `cert_pem` (chain) and `key_pem`. Returns whether it changed;
    /// on error the current certificate stays.
    pub fn load_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<bool> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Invalid(format!("certificate PEM: {e}")))?;
        if chain.is_empty() {
            return Err(Error::Invalid("no certificate in PEM".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| Error::Invalid(format!("key PEM: {e}")))?;
        let mut current = self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.as_ref().is_some_and(|c| c.cert == chain) {
            return Ok(false);
        }
        *current = Some(Arc::new(CertifiedKey::from_der(chain, key, &provider())?));
        let serving = std::str::from_utf8(cert_pem).ok().and_then(|pem| CertInfo::from_pem(pem).ok());
        self.expiry.write().unwrap_or_else(|poisoned| poisoned.into_inner()).serving = serving.map(|c| c.not_after);
        Ok(true)
    }

    /// Records the CA that signs the serving certificate (PEM; the first certificate counts).
    pub fn set_ca(&self, ca_pem: &str) {
        let ca = CertInfo::from_pem(ca_pem).ok().map(|c| c.not_after);
        self.expiry.write().unwrap_or_else(|poisoned| poisoned.into_inner()).ca = ca;
    }

    /// When the certificates in use expire.
    pub fn expiry(&self) -> Expiry {
        *self.expiry.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a certificate is loaded (the server can complete handshakes).
    pub fn is_loaded(&self) -> bool {
        self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).is_some()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

/// The crypto backend of the whole process: ring, as kube's client uses.
fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// A TLS server configuration that presents whatever `store` holds, HTTP/1.1 only.
pub fn server_config(store: Arc<CertStore>) -> Result<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Certificate and key files, reloaded when either changes (as cert-manager rotates them).
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

impl CertFiles {
    /// Loads both files into `store`; returns whether the certificate changed.
    pub fn load_into(&self, store: &CertStore) -> Result<bool> {
        let read = |path: &Path| std::fs::read(path).map_err(|source| Error::Io { path: path.to_owned(), source });
        let changed = store.load_pem(&read(&self.cert)?, &read(&self.key)?)?;
        // cert-manager's Secret holds the issuing CA beside the certificate.
        if let Ok(ca) = std::fs::read_to_string(self.cert.with_file_name("ca.crt")) {
            store.set_ca(&ca);
        }
        Ok(changed)
    }

    /// Checks the files every `every` and serves a changed certificate at once; a broken or
    /// half-written pair is logged and the previous certificate kept.
    pub async fn watch(self, store: Arc<CertStore>, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.load_into(&store) {
                Ok(true) => info!(cert = %self.cert.display(), "serving the new certificate"),
                Ok(false) => {}
                Err(error) => warn!(%error, "certificate files unusable; still serving the previous certificate"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Authority;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// The expiry of what is served, and of the CA beside the files (as cert-manager mounts
    /// `tls.crt`, `tls.key` and `ca.crt`), is what the certificates say.
    #[test]
    fn the_store_knows_when_its_certificates_expire() {
        let (ca, ca_pem) = Authority::generate(30 * DAY).expect("CA");
        let serving = ca.issue(&["watcher-operator.watcher-system.svc".to_owned()], 10 * DAY).expect("serving");
        let dir = std::env::temp_dir().join(format!("watcher-certs-expiry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files = CertFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
        std::fs::write(&files.cert, &serving.cert_pem).expect("write");
        std::fs::write(&files.key, &serving.key_pem).expect("write");
        let store = CertStore::default();
        assert_eq!(store.expiry(), Expiry::default(), "nothing loaded: nothing known");
        files.load_into(&store).expect("loads");
        let serving_until = CertInfo::from_pem(&serving.cert_pem).expect("parses").not_after;
        assert_eq!(store.expiry(), Expiry { serving: Some(serving_until), ca: None }, "no ca.crt beside the files");

        std::fs::write(dir.join("ca.crt"), &ca_pem.cert_pem).expect("write");
        files.load_into(&store).expect("loads");
        let ca_until = CertInfo::from_pem(&ca_pem.cert_pem).expect("parses").not_after;
        assert_eq!(store.expiry(), Expiry { serving: Some(serving_until), ca: Some(ca_until) });
        assert!(ca_until > serving_until);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
