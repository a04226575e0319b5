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

/// Whether a client trusting `ca_bundle_pem` accepts `serving_pem` (a PEM chain, leaf first)
/// for `host` at `now`; the reason when it does not, in words.
pub fn verify_serving(ca_bundle_pem: &str, serving_pem: &str, host: &str, now: SystemTime) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    let bundle: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca_bundle_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
    if bundle.is_empty() {
        return Err("the CA bundle holds no certificate".into());
    }
    let (added, _ignored) = roots.add_parsable_certificates(bundle);
    if added == 0 {
        return Err("no certificate of the CA bundle can be read as a CA".into());
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(serving_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the serving certificate is not PEM: {e}"))?;
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err("no serving certificate".into());
    };
    let name = ServerName::try_from(host.to_owned()).map_err(|e| format!("{host} is not a host name: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("cannot build a verifier: {e}"))?;
    let at = UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default());
    verifier.verify_server_cert(leaf, intermediates, &name, &[], at).map(|_| ()).map_err(|error| describe(&error, host))
}

fn describe(error: &TlsError, host: &str) -> String {
    use rustls::CertificateError as E;
    match error {
        TlsError::InvalidCertificate(E::UnknownIssuer | E::BadSignature) => {
            "the serving certificate is not signed by a CA of the bundle".into()
        }
        TlsError::InvalidCertificate(E::Expired | E::ExpiredContext { .. }) => {
            "the serving certificate has expired".into()
        }
        TlsError::InvalidCertificate(E::NotValidYet | E::NotValidYetContext { .. }) => {
            "the serving certificate is not valid yet".into()
        }
        TlsError::InvalidCertificate(E::NotValidForName | E::NotValidForNameContext { .. }) => {
            format!("the serving certificate does not name {host}")
        }
        other => format!("the serving certificate is refused: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Authority;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_client_of_the_bundle_accepts_only_a_matching_certificate() {
        let (ca, ca_pem) = Authority::generate(10 * DAY).expect("CA");
        let (_, other_pem) = Authority::generate(10 * DAY).expect("another CA");
        let hosts = vec!["watcher-operator.watcher-system.svc".to_owned(), "127.0.0.1".to_owned()];
        let serving = ca.issue(&hosts, 2 * DAY).expect("serving").cert_pem;
        let now = SystemTime::now();
        assert_eq!(verify_serving(&ca_pem.cert_pem, &serving, "watcher-operator.watcher-system.svc", now), Ok(()));
        assert_eq!(verify_serving(&ca_pem.cert_pem, &serving, "127.0.0.1", now), Ok(()));
        let both = format!("{}{}", other_pem.cert_pem, ca_pem.cert_pem);
        assert_eq!(verify_serving(&both, &serving, "127.0.0.1", now), Ok(()), "a rotation bundle");
        assert_eq!(
            verify_serving(&other_pem.cert_pem, &serving, "127.0.0.1", now),
            Err("the serving certificate is not signed by a CA of the bundle".into())
        );
        assert_eq!(
            verify_serving(&ca_pem.cert_pem, &serving, "webhook.example.com", now),
            Err("the serving certificate does not name webhook.example.com".into())
        );
        assert_eq!(
            verify_serving(&ca_pem.cert_pem, &serving, "127.0.0.1", now + 3 * DAY),
            Err("the serving certificate has expired".into())
        );
        assert!(verify_serving("not pem", &serving, "127.0.0.1", now).is_err());
    }
}
