//! A certificate authority and the serving certificates it issues.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;
use x509_parser::pem::Pem;

use crate::{Error, Result};

/// Certificates start this long in the past, so a node whose clock runs behind accepts them.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// A CA certificate and its key, able to issue serving certificates.
pub struct Authority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// A certificate and its private key, in PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertifiedPem {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl Authority {
    /// A new CA valid for `lifetime` from now. Its name carries its key identifier, so the CAs
    /// of a rotation are told apart by name as well as by key.
    pub fn generate(lifetime: Duration) -> Result<(Self, CertifiedPem)> {
        let now = SystemTime::now();
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let id: String = params.key_identifier(&key).iter().take(8).map(|b| format!("{b:02x}")).collect();
        params.distinguished_name.push(DnType::CommonName, format!("watcher-operator-ca-{id}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        (params.not_before, params.not_after) = window(now, lifetime);
        let cert = params.self_signed(&key)?;
        let pem = CertifiedPem { cert_pem: cert.pem(), key_pem: key.serialize_pem() };
        Ok((Self { cert_pem: pem.cert_pem.clone(), issuer: Issuer::new(params, key) }, pem))
    }

    /// The CA stored as PEM.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| Error::Invalid(format!("CA key: {e}")))?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| Error::Invalid(format!("CA certificate: {e}")))?;
        Ok(Self { cert_pem: cert_pem.to_owned(), issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A serving certificate for `hosts` (DNS names, or IP addresses as IP SANs), valid for
    /// `lifetime` from now.
    pub fn issue(&self, hosts: &[String], lifetime: Duration) -> Result<CertifiedPem> {
        let mut params = CertificateParams::new(hosts.to_vec())?;
        if let Some(first) = hosts.first() {
            params.distinguished_name.push(DnType::CommonName, first.clone());
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        (params.not_before, params.not_after) = window(SystemTime::now(), lifetime);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertifiedPem { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

fn window(now: SystemTime, lifetime: Duration) -> (OffsetDateTime, OffsetDateTime) {
    (OffsetDateTime::from(now - BACKDATE), OffsetDateTime::from(now + lifetime))
}

/// What the operator needs to know about a certificate it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// DNS names and IP addresses it is valid for.
    pub hosts: Vec<String>,
    /// The issuer's distinguished name, DER.
    pub issuer: Vec<u8>,
    /// The subject's distinguished name, DER.
    pub subject: Vec<u8>,
}

impl CertInfo {
    /// Reads the first certificate of a PEM text.
    pub fn from_pem(pem: &str) -> Result<Self> {
        Self::all_from_pem(pem)?.into_iter().next().ok_or_else(|| Error::Invalid("no certificate in PEM".into()))
    }

    /// Reads every certificate of a PEM text (a CA bundle).
    pub fn all_from_pem(pem: &str) -> Result<Vec<Self>> {
        let mut infos = Vec::new();
        for block in Pem::iter_from_buffer(pem.as_bytes()) {
            let block = block.map_err(|e| Error::Invalid(format!("PEM: {e}")))?;
            if block.label != "CERTIFICATE" {
                continue;
            }
            let cert = block.parse_x509().map_err(|e| Error::Invalid(format!("X.509: {e}")))?;
            let to_time = |t: x509_parser::time::ASN1Time| {
                SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or(0))
            };
            let hosts = cert
                .subject_alternative_name()
                .ok()
                .flatten()
                .map(|san| {
                    san.value
                        .general_names
                        .iter()
                        .filter_map(|name| match name {
                            x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                            x509_parser::extensions::GeneralName::IPAddress(ip) => ip_to_string(ip),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            infos.push(Self {
                not_before: to_time(cert.validity().not_before),
                not_after: to_time(cert.validity().not_after),
                hosts,
                issuer: cert.issuer().as_raw().to_vec(),
                subject: cert.subject().as_raw().to_vec(),
            });
        }
        Ok(infos)
    }

    /// Whether two thirds of the lifetime have passed at `now`: the time to renew.
    pub fn renewal_due(&self, now: SystemTime) -> bool {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        now >= self.not_before + lifetime * 2 / 3
    }

    /// When two thirds of the lifetime will have passed.
    pub fn renewal_time(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * 2 / 3
    }

    /// Whether it is valid for every one of `hosts`.
    pub fn covers(&self, hosts: &[String]) -> bool {
        hosts.iter().all(|host| self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
    }
}

fn ip_to_string(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(|b| std::net::Ipv4Addr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes).ok().map(|b| std::net::Ipv6Addr::from(b).to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn issued_certificate_covers_hosts_and_names_its_ca() {
        let (ca, ca_pem) = Authority::generate(365 * DAY).expect("CA");
        let hosts = vec!["watcher-operator.watcher-system.svc".to_owned(), "127.0.0.1".to_owned()];
        let serving = ca.issue(&hosts, 90 * DAY).expect("issued");
        let info = CertInfo::from_pem(&serving.cert_pem).expect("parses");
        let ca_info = CertInfo::from_pem(&ca_pem.cert_pem).expect("parses");
        assert_eq!(info.hosts, hosts);
        assert!(info.covers(&hosts));
        assert!(!info.covers(&["other.svc".to_owned()]));
        assert_eq!(info.issuer, ca_info.subject);
        let lifetime = info.not_after.duration_since(info.not_before).expect("ordered");
        assert_eq!(lifetime, 90 * DAY + BACKDATE);
    }

    #[test]
    fn a_stored_ca_issues_like_the_original() {
        let (_, ca_pem) = Authority::generate(DAY).expect("CA");
        let reloaded = Authority::from_pem(&ca_pem.cert_pem, &ca_pem.key_pem).expect("reloads");
        let serving = reloaded.issue(&["a.svc".to_owned()], DAY).expect("issued");
        let ca_info = CertInfo::from_pem(&ca_pem.cert_pem).expect("parses");
        assert_eq!(CertInfo::from_pem(&serving.cert_pem).expect("parses").issuer, ca_info.subject);
    }

    #[test]
    fn renewal_is_due_at_two_thirds() {
        let start = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let info =
            CertInfo { not_before: start, not_after: start + 90 * DAY, hosts: vec![], issuer: vec![], subject: vec![] };
        assert!(!info.renewal_due(start + 59 * DAY));
        assert!(info.renewal_due(start + 60 * DAY));
        assert_eq!(info.renewal_time(), start + 60 * DAY);
    }

    #[test]
    fn every_ca_has_its_own_name() {
        let (_, a) = Authority::generate(DAY).expect("CA");
        let (_, b) = Authority::generate(DAY).expect("CA");
        let subject = |pem: &str| CertInfo::from_pem(pem).expect("parses").subject;
        assert_ne!(subject(&a.cert_pem), subject(&b.cert_pem));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Authority::from_pem("not pem", "not a key").is_err());
        assert!(CertInfo::from_pem("").is_err());
        assert!(CertInfo::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }
}
