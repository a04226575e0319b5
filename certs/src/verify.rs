//! The check kube-apiserver makes when it calls the webhook: does the serving certificate chain
//! to a CA of the `caBundle`, name the host it dials, and stand in date? Done with webpki, as
//! rustls clients do, so `watcher-operator check` judges the certificate as a TLS client would.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{Error as TlsError, RootCertStore};

/// Why a client trusting the CA bundle refuses the serving certificate, in words.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The CA bundle is not PEM.
    #[error("the CA bundle is not PEM: {0}")]
    BundleNotPem(#[source] rustls::pki_types::pem::Error),
    /// The CA bundle holds no certificate.
    #[error("the CA bundle holds no certificate")]
    EmptyBundle,
    /// No certificate of the bundle is a CA.
    #[error("no certificate of the CA bundle can be read as a CA")]
    NoCa,
    /// The serving certificate is not PEM.
    #[error("the serving certificate is not PEM: {0}")]
    ServingNotPem(#[source] rustls::pki_types::pem::Error),
    /// There is no serving certificate.
    #[error("no serving certificate")]
    NoServing,
    /// The host dialled is not a host name.
    #[error("{host} is not a host name: {source}")]
    NotAHost {
        /// The host.
        host: String,
        /// Why.
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// No verifier can be built from the bundle.
    #[error("cannot build a verifier: {0}")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
    /// Not signed by a CA of the bundle.
    #[error("the serving certificate is not signed by a CA of the bundle")]
    UnknownIssuer,
    /// Expired.
    #[error("the serving certificate has expired")]
    Expired,
    /// Not valid yet.
    #[error("the serving certificate is not valid yet")]
    NotValidYet,
    /// It does not name the host dialled.
    #[error("the serving certificate does not name {0}")]
    WrongName(String),
    /// Refused for another reason.
    #[error("the serving certificate is refused: {0}")]
    Refused(#[source] TlsError),
}

/// Whether a client trusting `ca_bundle_pem` accepts `serving_pem` (a PEM chain, leaf first)
/// for `host` at `now`; the reason when it does not.
pub fn verify_serving(ca_bundle_pem: &str, serving_pem: &str, host: &str, now: SystemTime) -> Result<(), VerifyError> {
    let mut roots = RootCertStore::empty();
    let bundle: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca_bundle_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(VerifyError::BundleNotPem)?;
    if bundle.is_empty() {
        return Err(VerifyError::EmptyBundle);
    }
    let (added, _ignored) = roots.add_parsable_certificates(bundle);
    if added == 0 {
        return Err(VerifyError::NoCa);
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(serving_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(VerifyError::ServingNotPem)?;
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(VerifyError::NoServing);
    };
    let name = ServerName::try_from(host.to_owned())
        .map_err(|source| VerifyError::NotAHost { host: host.to_owned(), source })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(VerifyError::Verifier)?;
    let at = UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default());
    verifier.verify_server_cert(leaf, intermediates, &name, &[], at).map(|_| ()).map_err(|error| describe(error, host))
}

fn describe(error: TlsError, host: &str) -> VerifyError {
    use rustls::CertificateError as E;
    match error {
        TlsError::InvalidCertificate(E::UnknownIssuer | E::BadSignature) => VerifyError::UnknownIssuer,
        TlsError::InvalidCertificate(E::Expired | E::ExpiredContext { .. }) => VerifyError::Expired,
        TlsError::InvalidCertificate(E::NotValidYet | E::NotValidYetContext { .. }) => VerifyError::NotValidYet,
        TlsError::InvalidCertificate(E::NotValidForName | E::NotValidForNameContext { .. }) => {
            VerifyError::WrongName(host.to_owned())
        }
        other => VerifyError::Refused(other),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Authority;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// The verdict, in the words `check` prints.
    fn verify(bundle: &str, serving: &str, host: &str, now: SystemTime) -> Result<(), String> {
        verify_serving(bundle, serving, host, now).map_err(|error| error.to_string())
    }

    #[test]
    fn a_client_of_the_bundle_accepts_only_a_matching_certificate() {
        let (ca, ca_pem) = Authority::generate(10 * DAY).expect("CA");
        let (_, other_pem) = Authority::generate(10 * DAY).expect("another CA");
        let hosts = vec!["watcher-operator.watcher-system.svc".to_owned(), "127.0.0.1".to_owned()];
        let serving = ca.issue(&hosts, 2 * DAY).expect("serving").cert_pem;
        let now = SystemTime::now();
        assert_eq!(verify(&ca_pem.cert_pem, &serving, "watcher-operator.watcher-system.svc", now), Ok(()));
        assert_eq!(verify(&ca_pem.cert_pem, &serving, "127.0.0.1", now), Ok(()));
        let both = format!("{}{}", other_pem.cert_pem, ca_pem.cert_pem);
        assert_eq!(verify(&both, &serving, "127.0.0.1", now), Ok(()), "a rotation bundle");
        assert_eq!(
            verify(&other_pem.cert_pem, &serving, "127.0.0.1", now),
            Err("the serving certificate is not signed by a CA of the bundle".into())
        );
        assert_eq!(
            verify(&ca_pem.cert_pem, &serving, "webhook.example.com", now),
            Err("the serving certificate does not name webhook.example.com".into())
        );
        assert_eq!(
            verify(&ca_pem.cert_pem, &serving, "127.0.0.1", now + 3 * DAY),
            Err("the serving certificate has expired".into())
        );
        assert!(verify("not pem", &serving, "127.0.0.1", now).is_err());
    }
}
