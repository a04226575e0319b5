//! `--pod-security-config`: kube-apiserver's Pod Security admission configuration, read from a
//! file in its own shape: a `PodSecurityConfiguration` (`defaults`, `exemptions`), or the
//! `AdmissionConfiguration` that holds one under its `PodSecurity` plugin (the file given to
//! kube-apiserver's `--admission-control-config-file`), or `defaults` and `exemptions` alone.

use std::path::{Path, PathBuf};

use serde_json::Value;
use watcher_admission::pod_security::ClusterDefaults;

/// Why a Pod Security admission configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// What is wrong in the file.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: Box<ConfigError>,
    },
    /// The text is not YAML.
    #[error("not YAML: {0}")]
    NotYaml(String),
    /// An AdmissionConfiguration without the PodSecurity plugin.
    #[error("an AdmissionConfiguration without a PodSecurity plugin")]
    NoPlugin,
    /// The plugin's configuration is a file of its own.
    #[error("the PodSecurity plugin has no inline `configuration`")]
    NotInline,
    /// Another kind.
    #[error("kind {0}: expected PodSecurityConfiguration or AdmissionConfiguration")]
    Kind(String),
    /// Not the shape of a PodSecurityConfiguration.
    #[error("not a PodSecurityConfiguration: {0}")]
    NotAConfiguration(#[source] serde_json::Error),
    /// Levels or versions kube-apiserver would refuse.
    #[error("{}", .0.join("; "))]
    Problems(Vec<String>),
}

/// Reads and checks the configuration at `path`; the error names the file and what is wrong.
pub fn read(path: &Path) -> Result<ClusterDefaults, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    parse(&text).map_err(|source| ConfigError::InFile { path: path.to_owned(), source: Box::new(source) })
}

/// The configuration in `text` (YAML or JSON).
pub fn parse(text: &str) -> Result<ClusterDefaults, ConfigError> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| ConfigError::NotYaml(e.to_string()))?;
    let mut configuration = match value.get("kind").and_then(Value::as_str) {
        Some("AdmissionConfiguration") => {
            let plugins = value.get("plugins").and_then(Value::as_array).into_iter().flatten();
            let plugin = plugins
                .into_iter()
                .find(|p| p.get("name").and_then(Value::as_str) == Some("PodSecurity"))
                .ok_or(ConfigError::NoPlugin)?;
            plugin.get("configuration").cloned().ok_or(ConfigError::NotInline)?
        }
        Some("PodSecurityConfiguration") | None => value,
        Some(other) => return Err(ConfigError::Kind(other.to_owned())),
    };
    if let Some(fields) = configuration.as_object_mut() {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    let defaults: ClusterDefaults = serde_json::from_value(configuration).map_err(ConfigError::NotAConfiguration)?;
    let problems = defaults.problems();
    if !problems.is_empty() {
        return Err(ConfigError::Problems(problems));
    }
    Ok(defaults)
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// The shapes kube-apiserver takes, as its documentation writes them.
    #[test]
    fn the_admission_configuration_and_its_plugin_are_read() {
        let admission = r"
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: [kata]
      namespaces: [kube-system]
";
        let read = parse(admission).expect("read");
        assert_eq!(read.defaults["enforce"], "baseline");
        assert_eq!(read.exemptions.namespaces, ["kube-system"]);
        assert_eq!(read.exemptions.runtime_classes, ["kata"]);
        assert!(read.exempts(None, Some("kata")) && !read.exempts(Some("alice"), None));
        let bare = parse("defaults: {enforce: restricted}").expect("read");
        assert_eq!(bare.defaults["enforce"], "restricted");
    }

    /// Mistakes are said, naming the field.
    #[test]
    fn mistakes_name_their_field() {
        let error = parse("defaults: {enforce: strict}").expect_err("refused").to_string();
        assert!(error.contains("defaults.enforce: \"strict\""), "{error}");
        let error = parse("defaults: {enforce-version: \"1.30\"}").expect_err("refused").to_string();
        assert!(error.contains("defaults.enforce-version"), "{error}");
        let error = parse("defaults: {enforced: baseline}").expect_err("refused").to_string();
        assert!(error.contains("defaults.enforced: unknown"), "{error}");
        let error = parse("exemption: {}").expect_err("refused").to_string();
        assert!(error.contains("unknown field `exemption`"), "{error}");
        let error = parse("kind: AdmissionConfiguration\nplugins: []").expect_err("refused").to_string();
        assert!(error.contains("without a PodSecurity plugin"), "{error}");
    }
}
