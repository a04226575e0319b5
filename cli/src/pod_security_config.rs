//! `--pod-security-config`: kube-apiserver's Pod Security admission configuration, read from a
//! file in its own shape: a `PodSecurityConfiguration` (`defaults`, `exemptions`), or the
//! `AdmissionConfiguration` that holds one under its `PodSecurity` plugin (the file given to
//! kube-apiserver's `--admission-control-config-file`), or `defaults` and `exemptions` alone.

use std::path::Path;

use serde_json::Value;
use watcher_admission::pod_security::ClusterDefaults;

/// Reads and checks the configuration at `path`; the error names the file and what is wrong.
pub fn read(path: &Path) -> Result<ClusterDefaults, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The configuration in `text` (YAML or JSON).
pub fn parse(text: &str) -> Result<ClusterDefaults, String> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let mut configuration = match value.get("kind").and_then(Value::as_str) {
        Some("AdmissionConfiguration") => {
            let plugins = value.get("plugins").and_then(Value::as_array).into_iter().flatten();
            let plugin = plugins
                .into_iter()
                .find(|p| p.get("name").and_then(Value::as_str) == Some("PodSecurity"))
                .ok_or("an AdmissionConfiguration without a PodSecurity plugin")?;
            plugin.get("configuration").cloned().ok_or("the PodSecurity plugin has no inline `configuration`")?
        }
        Some("PodSecurityConfiguration") | None => value,
        Some(other) => {
            return Err(format!("kind {other}: expected PodSecurityConfiguration or AdmissionConfiguration"));
        }
    };
    if let Some(fields) = configuration.as_object_mut() {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    let defaults: ClusterDefaults =
        serde_json::from_value(configuration).map_err(|e| format!("not a PodSecurityConfiguration: {e}"))?;
    let problems = defaults.problems();
    if !problems.is_empty() {
        return Err(problems.join("; "));
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
        let error = parse("defaults: {enforce: strict}").expect_err("refused");
        assert!(error.contains("defaults.enforce: \"strict\""), "{error}");
        let error = parse("defaults: {enforce-version: \"1.30\"}").expect_err("refused");
        assert!(error.contains("defaults.enforce-version"), "{error}");
        let error = parse("defaults: {enforced: baseline}").expect_err("refused");
        assert!(error.contains("defaults.enforced: unknown"), "{error}");
        let error = parse("exemption: {}").expect_err("refused");
        assert!(error.contains("unknown field `exemption`"), "{error}");
        let error = parse("kind: AdmissionConfiguration\nplugins: []").expect_err("refused");
        assert!(error.contains("without a PodSecurity plugin"), "{error}");
    }
}
