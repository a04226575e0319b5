//! `AGENT_REMOTE_WRITE_*`: where and how every series is pushed by Prometheus remote write.

use std::path::PathBuf;
use std::time::Duration;

use super::variables::{
    REMOTE_WRITE_BEARER_TOKEN_FILE, REMOTE_WRITE_CA_FILE, REMOTE_WRITE_INTERVAL, REMOTE_WRITE_MAX_BYTES,
    REMOTE_WRITE_MAX_SAMPLES, REMOTE_WRITE_TENANT, REMOTE_WRITE_URL, Values,
};
use super::{ConfigError, absolute_path, error};

/// A receiver's address, as `AGENT_REMOTE_WRITE_URL` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverUrl {
    /// `https://`.
    pub tls: bool,
    /// Host name or address (an IPv6 address in brackets).
    pub host: String,
    /// Port (80 or 443 by default).
    pub port: u16,
    /// The path and query the pushes are posted to.
    pub path: String,
}

impl ReceiverUrl {
    /// The address `url` gives (`http[s]://host[:port][/path][?query]`, as `http::Uri` reads
    /// it); `None` for another form: another scheme, no host, a user or a fragment.
    pub fn parse(url: &str) -> Option<Self> {
        let uri: http::Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        let tls = match uri.scheme_str()? {
            "http" => false,
            "https" => true,
            _ => return None,
        };
        if authority.as_str().contains('@') || url.contains('#') {
            return None;
        }
        let host = authority.host();
        if host.is_empty() {
            return None;
        }
        let port = match authority.as_str().get(host.len()..)? {
            "" if tls => 443,
            "" => 80,
            rest => rest.strip_prefix(':')?.parse().ok()?,
        };
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let path = if path.is_empty() { "/" } else { path };
        Some(Self { tls, host: host.to_owned(), port, path: path.to_owned() })
    }

    /// The host as TLS names it: without an IPv6 address's brackets.
    pub fn server_name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl std::fmt::Display for ReceiverUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

/// Remote write, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteWrite {
    /// Where.
    pub url: ReceiverUrl,
    /// How often.
    pub interval: Duration,
    /// The bearer token's file, read at every push.
    pub bearer_token_file: Option<PathBuf>,
    /// The CA certificates of an `https://` receiver (else the system's roots).
    pub ca_file: Option<PathBuf>,
    /// `X-Scope-OrgID`.
    pub tenant: Option<String>,
    /// Samples held at most while the receiver cannot take them.
    pub max_samples: usize,
    /// Compressed bytes held at most.
    pub max_bytes: usize,
}

/// `AGENT_REMOTE_WRITE_*`, where `AGENT_REMOTE_WRITE_URL` is set; the others alone are an error
/// (they would do nothing).
pub(super) fn remote_write(values: &Values) -> Result<Option<RemoteWrite>, ConfigError> {
    let Some(url) = values.get(REMOTE_WRITE_URL.name) else {
        let others = [
            &REMOTE_WRITE_INTERVAL,
            &REMOTE_WRITE_BEARER_TOKEN_FILE,
            &REMOTE_WRITE_CA_FILE,
            &REMOTE_WRITE_TENANT,
            &REMOTE_WRITE_MAX_SAMPLES,
            &REMOTE_WRITE_MAX_BYTES,
        ];
        if let Some(set) = others.iter().find(|v| values.get(v.name).is_some()) {
            return Err(error(set.name, format!("has no effect without {}", REMOTE_WRITE_URL.name)));
        }
        return Ok(None);
    };
    let url = ReceiverUrl::parse(url).ok_or_else(|| {
        error(
            REMOTE_WRITE_URL.name,
            format!("{url:?}: an http:// or https:// URL such as http://prometheus.monitoring:9090/api/v1/write"),
        )
    })?;
    let ca_file = absolute_path(values, REMOTE_WRITE_CA_FILE.name)?;
    if ca_file.is_some() && !url.tls {
        return Err(error(REMOTE_WRITE_CA_FILE.name, format!("{url} is not https://: no certificate to check")));
    }
    let tenant = values.get(REMOTE_WRITE_TENANT.name).map(str::to_owned);
    if let Some(tenant) = &tenant
        && http::HeaderValue::from_str(tenant).is_err()
    {
        return Err(error(REMOTE_WRITE_TENANT.name, format!("{tenant:?} cannot be an HTTP header's value")));
    }
    Ok(Some(RemoteWrite {
        url,
        interval: values.required_duration(&REMOTE_WRITE_INTERVAL)?,
        bearer_token_file: absolute_path(values, REMOTE_WRITE_BEARER_TOKEN_FILE.name)?,
        ca_file,
        tenant,
        max_samples: values.count(&REMOTE_WRITE_MAX_SAMPLES)?,
        max_bytes: values.bytes(&REMOTE_WRITE_MAX_BYTES)?,
    }))
}
