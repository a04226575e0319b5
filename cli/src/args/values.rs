//! What a flag's value must be: each parser refuses, in words, what kube-apiserver or the
//! operator would refuse later.

use std::collections::BTreeMap;

use watcher_api::validation::is_dns1123_label;

/// An image reference: not empty, no white space, at most as long as a Watcher's may be.
pub(super) fn parse_image(value: &str) -> Result<String, String> {
    let max = watcher_api::validation::MAX_IMAGE_LENGTH;
    if value.is_empty() || value.len() > max || value.chars().any(char::is_whitespace) {
        return Err(format!("{value:?} is not an image reference (not empty, no spaces, at most {max} characters)"));
    }
    Ok(value.to_owned())
}

pub(super) fn parse_pod_security_config(
    value: &str,
) -> Result<watcher_admission::pod_security::ClusterDefaults, String> {
    crate::pod_security_config::read(std::path::Path::new(value)).map_err(|error| error.to_string())
}

/// A namespace name: a DNS label (lower-case letters, digits, `-`, at most 63 characters).
pub(super) fn parse_namespace(value: &str) -> Result<String, String> {
    if is_dns1123_label(value) { Ok(value.to_owned()) } else { Err(format!("{value:?} is not a namespace name")) }
}

/// `KEY=VALUE,...`, each a label kube-apiserver would take.
pub(crate) fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, String> {
    use watcher_api::validation::{is_label_key, is_label_value};
    let mut labels = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not KEY=VALUE"));
        };
        if !is_label_key(key) {
            return Err(format!("{key:?} is not a label key"));
        }
        if !is_label_value(value) {
            return Err(format!("{value:?} (label {key}) is not a label value"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// `https://HOST[:PORT]/PATH`: kube-apiserver calls webhooks over HTTPS only.
pub(super) fn parse_webhook_url(value: &str) -> Result<String, String> {
    let uri: http::Uri = value.parse().map_err(|error| format!("not a URL: {error}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("the webhook URL must start with https://".into());
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("the webhook URL needs a host".into());
    }
    Ok(value.to_owned())
}
