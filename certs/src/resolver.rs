//! The certificate the TLS server presents, swappable while it serves.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::{Error, Result};

/// Holds the serving certificate; every new TLS handshake gets the latest one.
#[derive(Debug, Default)]
pub struct CertStore {
    current: RwLock<Option<Arc<CertifiedKey>>>,
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
        Ok(true)
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
        store.load_pem(&read(&self.cert)?, &read(&self.key)?)
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
