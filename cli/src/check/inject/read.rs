//! What `check-inject` reads: the pod (of the cluster, or a manifest), its namespace, the
//! Watchers, ImagePolicies and webhook configuration admission reads, the cluster's Pod
//! Security defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use watcher_admission::resources::ResourceRules;
use watcher_admission::{InjectOptions, PodView, WebhookSelectors};
use watcher_api::{ClusterWatcher, CompiledPolicy, Watcher};

use super::{Explanation, Scope, cluster_lines, explain, sent_by};

/// The cluster's Pod Security admission configuration as the operator judges by it: its
/// configuration (ConfigMap `watcher-operator-pod-security`), else what kube-apiserver enforces
/// in `namespace` when it sets no Pod Security label (dry-run pods there, as the operator
/// learns it); none when neither can be read. What could not be read is said in the notes.
pub(super) async fn cluster_pod_security(
    client: &kube::Client,
    operator_namespace: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> watcher_admission::pod_security::ClusterDefaults {
    let read = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), operator_namespace)
        .get_opt(crate::check::POD_SECURITY_CONFIG_MAP)
        .await;
    if let Some(configured) = configured_pod_security(read, operator_namespace, notes) {
        return configured;
    }
    if labels.keys().any(|k| k.starts_with("pod-security.kubernetes.io/")) {
        return Default::default();
    }
    match watcher_controller::pod_security_probe::probe(client, namespace).await {
        Ok(learned) => learned.defaults,
        Err(error) => {
            notes.push(format!(
                "cannot learn what kube-apiserver enforces in namespace {namespace} without Pod Security labels \
                 (dry-run pods: {error}): Pod Security is judged as if nothing were enforced"
            ));
            Default::default()
        }
    }
}

/// The operator's Pod Security configuration from the ConfigMap as `read`; `None`, with a note
/// unless the ConfigMap is absent, when it cannot be read or does not parse.
fn configured_pod_security(
    read: Result<Option<k8s_openapi::api::core::v1::ConfigMap>, kube::Error>,
    operator_namespace: &str,
    notes: &mut Vec<String>,
) -> Option<watcher_admission::pod_security::ClusterDefaults> {
    let name = format!("ConfigMap {operator_namespace}/{}", crate::check::POD_SECURITY_CONFIG_MAP);
    let key = crate::check::POD_SECURITY_CONFIG_KEY;
    let map = match read {
        Ok(map) => map?,
        Err(error) => {
            notes.push(format!("cannot read {name} ({error}): the cluster's Pod Security defaults are probed instead"));
            return None;
        }
    };
    let Some(text) = map.data.and_then(|mut d| d.remove(key)) else {
        notes.push(format!("{name} has no key {key}: the cluster's Pod Security defaults are probed instead"));
        return None;
    };
    match crate::pod_security_config::parse(&text) {
        Ok(configured) => Some(configured),
        Err(error) => {
            notes.push(format!(
                "{name}: {key} does not parse ({error}): the cluster's Pod Security defaults are probed instead"
            ));
            None
        }
    }
}

/// What `check-inject` explains: a pod of the cluster, or a manifest.
#[derive(Debug)]
pub(crate) enum Target {
    Pod(String),
    Manifest(std::path::PathBuf),
}

/// Reads what admission reads (the namespace, its Watchers, the webhook configuration's
/// selectors, the ImagePolicies) and explains `target`. An error: the pod or the manifest
/// could not be read.
pub(crate) async fn check_inject(
    client: &kube::Client,
    target: &Target,
    namespace: Option<&str>,
    operator_namespace: Option<&str>,
) -> anyhow::Result<Explanation> {
    let (pod, existing, namespace) = read_target(client, target, namespace).await?;
    let Admission { labels, watchers, cluster_watchers, compiled, configuration, selectors, operator_namespace } =
        Admission::read(client, &namespace, operator_namespace).await?;
    let admission_options = InjectOptions {
        excluded_namespaces: vec![operator_namespace.clone()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let everywhere = watcher_admission::cluster::everywhere(
        &watchers.iter().cloned().map(Arc::new).collect::<Vec<_>>(),
        &cluster_watchers,
        [(namespace.as_str(), &labels)],
        &admission_options,
    );
    let admission =
        watcher_admission::Scope::compute(&everywhere, &compiled, [(namespace.as_str(), &labels)], &operator_namespace);
    let registered = configuration.as_ref().map(watcher_controller::scope::in_place);
    let sent = sent_by(registered.as_ref(), &admission, &namespace, pod.labels(), pod.annotations());
    let mut policies: Vec<Arc<CompiledPolicy>> =
        compiled.into_iter().filter(|p| p.rules.is_ok() && p.selects(&labels)).collect();
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    let native_sidecars = client
        .apiserver_version()
        .await
        .is_ok_and(|info| watcher_admission::supports_native_sidecars(&info.major, &info.minor));
    let options = InjectOptions {
        excluded_namespaces: vec![operator_namespace],
        native_sidecars,
        server_minor: None,
        ..Default::default()
    };
    let own: Vec<Arc<Watcher>> = watchers.into_iter().map(Arc::new).collect();
    let effective =
        watcher_admission::cluster::watchers_in_namespace(&namespace, &labels, &own, &cluster_watchers, &options);
    let refs: Vec<&Watcher> = effective.iter().map(AsRef::as_ref).collect();
    let mut notes = Vec::new();
    let pod_security =
        cluster_pod_security(client, &options.excluded_namespaces[0], &namespace, &labels, &mut notes).await;
    let resources = resource_rules(client, &namespace, &mut notes).await;
    let scope = Scope {
        namespace: &namespace,
        namespace_labels: &labels,
        pod_security: &pod_security,
        watchers: &refs,
        cluster: cluster_lines(&namespace, &labels, &own, &cluster_watchers, &options),
        selectors: &selectors,
        policies: &policies,
        options: &options,
        resources: &resources,
        sent,
    };
    let mut explanation = explain(&pod, existing, &scope);
    explanation.notes = notes;
    Ok(explanation)
}

/// The LimitRanges and ResourceQuotas of `namespace`, in name order, as the webhook reads them;
/// none where they cannot be listed (the explanation then says so in its notes).
async fn resource_rules(client: &kube::Client, namespace: &str, notes: &mut Vec<String>) -> ResourceRules {
    use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
    use kube::api::{Api, ListParams};
    let ranges = Api::<LimitRange>::namespaced(client.clone(), namespace).list(&ListParams::default()).await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), namespace).list(&ListParams::default()).await;
    let mut listed = |kind: &str, error: kube::Error| {
        notes.push(format!(
            "cannot list the {kind} of namespace {namespace} ({error}): the explanation leaves them out"
        ));
    };
    let mut ranges = ranges.map(|l| l.items).unwrap_or_else(|e| {
        listed("LimitRanges", e);
        Vec::new()
    });
    let mut quotas = quotas.map(|l| l.items).unwrap_or_else(|e| {
        listed("ResourceQuotas", e);
        Vec::new()
    });
    ranges.sort_by_key(ResourceExt::name_any);
    quotas.sort_by_key(ResourceExt::name_any);
    ResourceRules::new(&ranges, &quotas)
}

/// What admission reads for a pod of one namespace, as the cluster holds it now.
struct Admission {
    /// The namespace's labels.
    labels: BTreeMap<String, String>,
    /// Its Watchers.
    watchers: Vec<Watcher>,
    cluster_watchers: Vec<Arc<ClusterWatcher>>,
    /// Every ImagePolicy, compiled.
    compiled: Vec<Arc<CompiledPolicy>>,
    /// The webhook configuration, its selectors, and the operator's namespace.
    configuration: Option<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>,
    selectors: WebhookSelectors,
    operator_namespace: String,
}

impl Admission {
    /// Reads it for `namespace`. An error: what cannot be read, and why it may be so.
    async fn read(client: &kube::Client, namespace: &str, operator_namespace: Option<&str>) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::{Api, ListParams};
        use watcher_api::ImagePolicy;

        let labels = Api::<Namespace>::all(client.clone())
            .get_opt(namespace)
            .await
            .with_context(|| format!("cannot read namespace {namespace}"))?
            .with_context(|| format!("namespace {namespace} not found"))?
            .metadata
            .labels
            .unwrap_or_default();
        let watchers = Api::<Watcher>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("cannot list the Watchers of namespace {namespace} (are the CRDs installed?)"))?
            .items;
        let (configuration, selectors, operator_namespace) = read_registration(client, operator_namespace).await?;
        let compiled = Api::<ImagePolicy>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("cannot list the ImagePolicies")?
            .items
            .iter()
            .map(|p| Arc::new(p.compile()))
            .collect();
        let cluster_watchers = Api::<ClusterWatcher>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("cannot list the ClusterWatchers (is their CRD installed?)")?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        Ok(Self { labels, watchers, cluster_watchers, compiled, configuration, selectors, operator_namespace })
    }
}

/// The pod `target` names (`true`: it exists in the cluster) and its namespace: `namespace`,
/// else the manifest's, else the kubeconfig context's.
async fn read_target(
    client: &kube::Client,
    target: &Target,
    namespace: Option<&str>,
) -> anyhow::Result<(PodView, bool, String)> {
    use anyhow::Context as _;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::Api;
    match target {
        Target::Pod(name) => {
            let namespace = namespace.unwrap_or(client.default_namespace()).to_owned();
            let pod = Api::<Pod>::namespaced(client.clone(), &namespace)
                .get_opt(name)
                .await
                .with_context(|| format!("cannot read pod {namespace}/{name}"))?
                .with_context(|| format!("pod {name} not found in namespace {namespace}"))?;
            let view: PodView = serde_json::from_value(serde_json::to_value(&pod)?).context("cannot read the pod")?;
            Ok((view, true, namespace))
        }
        Target::Manifest(path) => {
            let (view, in_manifest) = read_manifest(path)?;
            let namespace =
                namespace.map(str::to_owned).or(in_manifest).unwrap_or_else(|| client.default_namespace().to_owned());
            Ok((view, false, namespace))
        }
    }
}

/// The webhook configuration, its selectors and the operator's namespace (`operator_namespace`,
/// else the registration's Service's, else `watcher-system`); a warning where it is missing.
async fn read_registration(
    client: &kube::Client,
    operator_namespace: Option<&str>,
) -> anyhow::Result<(
    Option<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>,
    WebhookSelectors,
    String,
)> {
    use anyhow::Context as _;
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use kube::api::Api;
    let configuration = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(watcher_certs::registration::WEBHOOK_CONFIGURATION)
        .await
        .context("cannot read the webhook configuration")?;
    let webhook = configuration.as_ref().and_then(|c| c.webhooks.as_ref()?.first().cloned());
    if webhook.is_none() {
        eprintln!(
            "warning: MutatingWebhookConfiguration {} not found: no pod is injected until the operator is installed \
             (`watcher-operator check` says more)",
            watcher_certs::registration::WEBHOOK_CONFIGURATION
        );
    }
    let selectors = webhook
        .as_ref()
        .map(|w| WebhookSelectors { namespace: w.namespace_selector.clone(), object: w.object_selector.clone() })
        .unwrap_or_default();
    let operator_namespace = operator_namespace
        .map(str::to_owned)
        .or_else(|| webhook.as_ref().and_then(|w| Some(w.client_config.service.as_ref()?.namespace.clone())))
        .unwrap_or_else(|| "watcher-system".to_owned());
    Ok((configuration, selectors, operator_namespace))
}

/// The one Pod of a manifest file (`-` is stdin), and the namespace it names.
pub(super) fn read_manifest(path: &std::path::Path) -> anyhow::Result<(PodView, Option<String>)> {
    use anyhow::Context as _;
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("{} is not valid YAML", path.display()))?;
    let mut pods = documents.into_iter().filter(|d| !d.is_null());
    let (Some(document), None) = (pods.next(), pods.next()) else {
        anyhow::bail!("{} must hold exactly one Pod", path.display());
    };
    let kind = document["kind"].as_str().unwrap_or_default();
    anyhow::ensure!(
        kind == "Pod",
        "{} holds a {}, not a Pod: check-inject explains pods",
        path.display(),
        if kind.is_empty() { "document without a kind" } else { kind }
    );
    let namespace = document["metadata"]["namespace"].as_str().map(str::to_owned);
    let pod: PodView =
        serde_json::from_value(document).with_context(|| format!("{} is not a valid Pod", path.display()))?;
    Ok((pod, namespace))
}

#[cfg(test)]
mod tests {
    use super::configured_pod_security;

    fn config_map(data: serde_json::Value) -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "watcher-operator-pod-security"}, "data": data}))
            .expect("a ConfigMap")
    }

    #[test]
    fn a_pod_security_configuration_that_cannot_be_used_is_said() {
        let mut notes = Vec::new();
        assert!(configured_pod_security(Ok(None), "watcher-system", &mut notes).is_none());
        assert!(notes.is_empty(), "an absent ConfigMap is the default: {notes:?}");

        let refused = kube::Error::Api(
            kube::core::Status::failure("configmaps is forbidden", "Forbidden").with_code(403).boxed(),
        );
        assert!(configured_pod_security(Err(refused), "watcher-system", &mut notes).is_none());
        assert!(
            notes[0].starts_with("cannot read ConfigMap watcher-system/watcher-operator-pod-security"),
            "{notes:?}"
        );
        assert!(notes[0].contains("forbidden"), "{notes:?}");

        let without_key = config_map(serde_json::json!({"other": "x"}));
        assert!(configured_pod_security(Ok(Some(without_key)), "watcher-system", &mut notes).is_none());
        assert!(notes[1].contains("has no key"), "{notes:?}");

        let key = crate::check::POD_SECURITY_CONFIG_KEY;
        let broken = config_map(serde_json::json!({key: "kind: [unclosed"}));
        assert!(configured_pod_security(Ok(Some(broken)), "watcher-system", &mut notes).is_none());
        assert!(notes[2].contains("does not parse"), "{notes:?}");
        assert_eq!(notes.len(), 3);
    }
}
