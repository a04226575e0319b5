//! Commands that need no cluster: `crds`, `inject` (the webhook's mutation, offline) and
//! `certs` (a CA and serving certificate for manual setups).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use kube::ResourceExt;
use watcher_admission::pod_security::NamespaceLevels;
use watcher_admission::resources::ResourceRules;
use watcher_admission::{Guards, InjectOptions, PodView, inject_guarded, rewrite_images};
use watcher_api::{CLUSTER_WATCHER_KIND, ClusterWatcher, CompiledPolicy, ImagePolicy, Watcher};
use watcher_certs::{Authority, service_hosts};

/// Every CRD as one multi-document YAML stream: exactly the content of `deploy/crds/crds.yaml`.
pub(crate) fn crds_yaml() -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in watcher_api::crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// `watcher-operator inject`: every pod of `pods` as the webhook would admit it (Watchers
/// injected, images rewritten by the ImagePolicies), as YAML. Warnings and skip reasons go to
/// stderr, as kubectl shows admission warnings.
pub(crate) fn inject_preview(
    pods: &Path,
    watchers: &[PathBuf],
    policies: &[PathBuf],
    namespace: Namespace<'_>,
    native: bool,
) -> anyhow::Result<String> {
    let Namespace { name: namespace, labels: namespace_labels, pod_security, resources } = namespace;
    let (all_watchers, cluster) = watcher_files(watchers, namespace_labels.is_empty())?;
    let policies = image_policies(policies, !namespace_labels.is_empty())?;
    let options = InjectOptions {
        excluded_namespaces: Vec::new(),
        native_sidecars: native,
        server_minor: None,
        ..Default::default()
    };
    let mut out = String::new();
    for mut document in documents(pods)? {
        let pod = parse_kind::<PodView>(&document, "Pod", pods)?;
        let namespace =
            pod.metadata.namespace.clone().or(namespace.map(str::to_owned)).unwrap_or_else(|| "default".into());
        // Watcher files usually carry no namespace: they stand for Watchers of the pod's.
        // ClusterWatchers apply as the webhook resolves them (a Watcher of the same name wins).
        let own: Vec<Arc<Watcher>> = all_watchers
            .iter()
            .cloned()
            .map(|mut w| {
                w.metadata.namespace.get_or_insert_with(|| namespace.clone());
                Arc::new(w)
            })
            .collect();
        let mut labels = namespace_labels.clone();
        labels.insert("kubernetes.io/metadata.name".to_owned(), namespace.clone());
        let policies: Vec<Arc<CompiledPolicy>> = policies.iter().filter(|p| p.selects(&labels)).cloned().collect();
        let in_namespace =
            watcher_admission::cluster::watchers_in_namespace(&namespace, &labels, &own, &cluster, &options);
        let refs: Vec<&Watcher> = in_namespace.iter().map(AsRef::as_ref).collect();
        let levels = NamespaceLevels::of_namespace(&namespace, |key| labels.get(key).map(String::as_str), pod_security);
        let guards = Guards { levels: &levels, resources };
        let mut injection = inject_guarded(&pod, &namespace, &refs, &options, &guards);
        rewrite_images(&pod, &namespace, &policies, &options, &mut injection);
        say(&injection, &namespace, pod.display_name())?;
        json_patch::patch(&mut document, &injection.patch).context("the injection patch does not apply")?;
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&document)?);
    }
    Ok(out)
}

/// The Watchers and ClusterWatchers of the files `paths`. `unlabelled`: the namespace has only
/// its name label (a ClusterWatcher's `namespaceSelector` is said to see only that).
fn watcher_files(paths: &[PathBuf], unlabelled: bool) -> anyhow::Result<(Vec<Watcher>, Vec<Arc<ClusterWatcher>>)> {
    let mut all_watchers: Vec<Watcher> = Vec::new();
    let mut cluster: Vec<Arc<ClusterWatcher>> = Vec::new();
    for path in paths {
        for document in documents(path)? {
            if document.get("kind").and_then(|k| k.as_str()) == Some(CLUSTER_WATCHER_KIND) {
                let found = parse_kind::<ClusterWatcher>(&document, CLUSTER_WATCHER_KIND, path)?;
                if found.spec.namespace_selector.is_some() && unlabelled {
                    eprintln!(
                        "ClusterWatcher {} has a namespaceSelector: the namespace has only its name label \
                         (kubernetes.io/metadata.name) unless --namespace-labels gives it more",
                        found.name_any()
                    );
                }
                cluster.push(Arc::new(found));
                continue;
            }
            all_watchers.push(parse_kind::<Watcher>(&document, "Watcher", path)?);
        }
    }
    Ok((all_watchers, cluster))
}

/// Says on stderr what admission would say of pod `name`, as kubectl shows admission warnings;
/// an error when it would be refused.
fn say(injection: &watcher_admission::Injection, namespace: &str, name: &str) -> anyhow::Result<()> {
    if let Some(reason) = &injection.refused {
        bail!("pod {namespace}/{name} would be refused: {reason}");
    }
    for warning in &injection.warnings {
        eprintln!("Warning: pod {namespace}/{name}: {warning}");
    }
    if let Some(reason) = &injection.skipped {
        eprintln!("pod {namespace}/{name} not injected: {reason}");
    }
    for report in injection.resources.iter().filter(|r| r.violations.is_none()) {
        for (container, set) in &report.adapted {
            eprintln!(
                "pod {namespace}/{name}: Watcher {} fitted to the namespace's resource rules ({}): container {container} gets {}",
                report.watcher,
                report.rules,
                set.join(", ")
            );
        }
    }
    for report in injection.pod_security.iter().filter(|r| r.violations.is_none()) {
        for (container, fields) in &report.adapted {
            eprintln!(
                "pod {namespace}/{name}: Watcher {} adapted to PodSecurity \"{}\": container {container} gets {}",
                report.watcher,
                report.policy,
                fields.join(", ")
            );
        }
    }
    Ok(())
}

/// The namespace of the previewed pods: the name of those that give none, and its labels
/// (`--namespace-labels`; empty when not given).
pub(crate) struct Namespace<'a> {
    pub(crate) name: Option<&'a str>,
    pub(crate) labels: &'a BTreeMap<String, String>,
    /// The cluster's Pod Security admission configuration (`--pod-security-config`).
    pub(crate) pod_security: &'a watcher_admission::pod_security::ClusterDefaults,
    /// Its LimitRanges and ResourceQuotas (`--limit-range`, `--resource-quota`).
    pub(crate) resources: &'a ResourceRules,
}

/// The rules of the LimitRanges and ResourceQuotas in the files `limit_ranges` and `quotas`.
pub(crate) fn resource_rules(limit_ranges: &[PathBuf], quotas: &[PathBuf]) -> anyhow::Result<ResourceRules> {
    let mut ranges = Vec::new();
    for path in limit_ranges {
        for document in documents(path)? {
            ranges.push(parse_kind::<LimitRange>(&document, "LimitRange", path)?);
        }
    }
    let mut read = Vec::new();
    for path in quotas {
        for document in documents(path)? {
            read.push(parse_kind::<ResourceQuota>(&document, "ResourceQuota", path)?);
        }
    }
    Ok(ResourceRules::new(&ranges, &read))
}

/// The ImagePolicies of `paths`, compiled, in name order. Without namespace labels, a policy
/// with a `namespaceSelector` is left out, with a note.
fn image_policies(paths: &[PathBuf], labelled: bool) -> anyhow::Result<Vec<Arc<CompiledPolicy>>> {
    let mut policies = Vec::new();
    for path in paths {
        for document in documents(path)? {
            let policy = parse_kind::<ImagePolicy>(&document, "ImagePolicy", path)?;
            let compiled = policy.compile();
            if let Err(error) = &compiled.rules {
                bail!("{}: ImagePolicy {} is not valid: {error}", path.display(), compiled.name);
            }
            if policy.spec.namespace_selector.is_some() && !labelled {
                eprintln!(
                    "ImagePolicy {} has a namespaceSelector: not applied without --namespace-labels",
                    compiled.name
                );
                continue;
            }
            policies.push(Arc::new(compiled));
        }
    }
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(policies)
}

/// The YAML documents of a file (`-` is stdin), as JSON values; empty documents are skipped.
fn documents(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).context("cannot read stdin")?;
    } else {
        text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    }
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("{} is not valid YAML", path.display()))?;
    let documents: Vec<_> = documents.into_iter().filter(|d| !d.is_null()).collect();
    if documents.is_empty() {
        bail!("{} holds no object", path.display());
    }
    Ok(documents)
}

fn parse_kind<T: serde::de::DeserializeOwned>(value: &serde_json::Value, kind: &str, path: &Path) -> anyhow::Result<T> {
    let found = value.get("kind").and_then(|k| k.as_str()).unwrap_or("<no kind>");
    if found != kind {
        bail!("{}: expected a {kind}, found {found}", path.display());
    }
    serde_json::from_value(value.clone()).with_context(|| format!("{}: not a valid {kind}", path.display()))
}

/// `watcher-operator certs`: writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `out_dir`.
pub(crate) fn write_certs(
    service: &str,
    namespace: &str,
    extra_hosts: &[String],
    out_dir: &Path,
    days: u32,
) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let lifetime = std::time::Duration::from_secs(u64::from(days) * 24 * 3600);
    let (ca, ca_pem) = Authority::generate(lifetime * 2)?;
    let mut hosts = service_hosts(service, namespace);
    hosts.extend(extra_hosts.iter().cloned());
    let serving = ca.issue(&hosts, lifetime)?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    write_file(&out_dir.join("ca.crt"), &ca_pem.cert_pem, false)?;
    write_file(&out_dir.join("ca.key"), &ca_pem.key_pem, true)?;
    write_file(&out_dir.join("tls.crt"), &serving.cert_pem, false)?;
    write_file(&out_dir.join("tls.key"), &serving.key_pem, true)?;
    eprintln!(
        "wrote ca.crt, ca.key, tls.crt, tls.key to {} for {}; serve with\n  --tls-cert-file {}/tls.crt --tls-key-file {}/tls.key\nand put ca.crt (base64) into the webhook configuration's caBundle.",
        out_dir.display(),
        hosts.join(", "),
        out_dir.display(),
        out_dir.display()
    );
    Ok(())
}

fn write_file(path: &Path, contents: &str, private: bool) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    use std::io::Write;
    let mut file = options.open(path).with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(contents.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

    fn unlabelled(name: Option<&str>) -> Namespace<'_> {
        static NO_DEFAULTS: watcher_admission::pod_security::ClusterDefaults =
            watcher_admission::pod_security::ClusterDefaults::NONE;
        static NO_RULES: ResourceRules = ResourceRules::NONE;
        Namespace { name, labels: &NO_LABELS, pod_security: &NO_DEFAULTS, resources: &NO_RULES }
    }

    fn temp_file(name: &str, contents: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("watcher-offline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("written");
        path
    }

    #[test]
    fn preview_injects_the_samples() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let out = inject_preview(
            &root.join("deploy/samples/pod.yaml"),
            &[root.join("deploy/samples/watcher.yaml")],
            &[],
            unlabelled(None),
            true,
        )
        .expect("preview");
        let pod: serde_json::Value = serde_saphyr::from_str(out.trim_start_matches("---\n")).expect("YAML out");
        assert_eq!(pod["spec"]["initContainers"][0]["name"], "log-watcher");
        assert_eq!(pod["spec"]["initContainers"][0]["envFrom"][0]["configMapRef"]["name"], "log-watcher-config");
        assert!(
            pod["metadata"]["annotations"]["watcher.dev/injected"]
                .as_str()
                .is_some_and(|v| v.starts_with("log-watcher@"))
        );
    }

    #[test]
    fn preview_rewrites_images_with_the_sample_policy() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let out = inject_preview(
            &root.join("deploy/samples/pod.yaml"),
            &[root.join("deploy/samples/watcher.yaml")],
            &[root.join("deploy/samples/imagepolicy.yaml")],
            unlabelled(None),
            true,
        )
        .expect("preview");
        let pod: serde_json::Value = serde_saphyr::from_str(out.trim_start_matches("---\n")).expect("YAML out");
        let sidecar = &pod["spec"]["initContainers"][0];
        assert_eq!(sidecar["image"], "mirror.gcr.io/library/busybox:1.36", "the injected sidecar is rewritten too");
        let originals = pod["metadata"]["annotations"]["watcher.dev/original-images"].as_str().unwrap_or_default();
        assert!(originals.contains("log-watcher=busybox:1.36"), "{originals}");

        let invalid = temp_file(
            "invalid-policy.yaml",
            "apiVersion: watcher.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: bad}\nspec: {rewrites: [{from: 'docker.io/', to: 'x'}]}\n",
        );
        let error = inject_preview(&root.join("deploy/samples/pod.yaml"), &[], &[invalid], unlabelled(None), true)
            .expect_err("an invalid policy is refused");
        assert!(error.to_string().contains("ImagePolicy bad is not valid"), "{error}");
    }

    /// A ClusterWatcher file previews as the webhook resolves it: it applies where its
    /// namespaceSelector matches the namespace's name label, and a Watcher of the same name wins.
    #[test]
    fn preview_takes_cluster_watchers_and_namespaced_ones_win() {
        let pod = temp_file(
            "asks-log-agent.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {watcher.dev/inject: log-agent}}\nspec: {containers: [{name: app}]}\n",
        );
        let cluster = temp_file(
            "log-agent.yaml",
            "apiVersion: watcher.dev/v1alpha1\nkind: ClusterWatcher\nmetadata: {name: log-agent}\n\
             spec: {container: {name: log-agent, image: busybox:1.36}}\n",
        );
        let injected = |out: &str| -> Vec<String> {
            let pod: serde_json::Value = serde_saphyr::from_str(out.trim_start_matches("---\n")).expect("YAML out");
            let sidecars = pod["spec"]["containers"].as_array().into_iter().flatten();
            sidecars.filter_map(|c| c["name"].as_str().map(str::to_owned)).collect()
        };
        let out = inject_preview(&pod, std::slice::from_ref(&cluster), &[], unlabelled(Some("team-a")), false)
            .expect("preview");
        assert_eq!(injected(&out), ["app", "log-agent"]);

        let own = temp_file(
            "own-log-agent.yaml",
            "apiVersion: watcher.dev/v1alpha1\nkind: Watcher\nmetadata: {name: log-agent}\n\
             spec: {container: {name: team-agent, image: busybox:1.36}}\n",
        );
        let out =
            inject_preview(&pod, &[cluster.clone(), own], &[], unlabelled(Some("team-a")), false).expect("preview");
        assert_eq!(injected(&out), ["app", "team-agent"], "the namespace's own Watcher wins");

        let sample = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/samples/clusterwatcher.yaml"));
        let out = inject_preview(&pod, &[sample.to_owned()], &[], unlabelled(Some("team-a")), false).expect("preview");
        assert_eq!(injected(&out), ["app"], "its namespaceSelector does not match team-a offline");

        // Given the namespace's labels, the sample applies; a policy selecting that namespace
        // rewrites the sidecar's image, one selecting another namespace does not.
        let payments = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
        let policies = temp_file(
            "policies.yaml",
            "apiVersion: watcher.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: payments-mirror}\n\
             spec: {namespaceSelector: {matchLabels: {team: payments}}, rewrites: [{from: docker.io/library/, to: mirror.internal/library/}]}\n\
             ---\napiVersion: watcher.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: search-pins}\n\
             spec: {namespaceSelector: {matchLabels: {team: search}}, rewrites: [{from: 'busybox:1.36', to: 'busybox:1.37'}]}\n",
        );
        let none = watcher_admission::pod_security::ClusterDefaults::default();
        let labelled =
            Namespace { name: Some("team-a"), labels: &payments, pod_security: &none, resources: &ResourceRules::NONE };
        let out = inject_preview(&pod, &[sample.to_owned()], &[policies], labelled, false).expect("preview");
        assert_eq!(injected(&out), ["app", "log-agent"], "its namespaceSelector matches");
        assert!(out.contains("image: mirror.internal/library/busybox:1.36"), "{out}");
        assert!(!out.contains("busybox:1.37"), "{out}");
    }

    #[test]
    fn namespace_labels_are_label_syntax() {
        let parse = |value: &str| crate::args::parse_labels(value);
        let expected =
            BTreeMap::from([("env".to_owned(), "prod".to_owned()), ("team".to_owned(), "payments".to_owned())]);
        assert_eq!(parse("team=payments, env=prod"), Ok(expected));
        assert_eq!(parse(""), Ok(BTreeMap::new()));
        assert_eq!(parse("team"), Err("\"team\" is not KEY=VALUE".to_owned()));
        assert_eq!(parse("bad key=x"), Err("\"bad key\" is not a label key".to_owned()));
        assert_eq!(parse("team=a/b"), Err("\"a/b\" (label team) is not a label value".to_owned()));
    }

    #[test]
    fn preview_handles_several_pods_and_refuses_wrong_kinds() {
        let pods = temp_file(
            "pods.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {watcher.dev/inject: w}}\nspec: {containers: [{name: app}]}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: app}]}\n",
        );
        let watcher = temp_file(
            "w.yaml",
            "apiVersion: watcher.dev/v1alpha1\nkind: Watcher\nmetadata: {name: w}\nspec: {container: {name: w, image: x}}\n",
        );
        let out = inject_preview(&pods, std::slice::from_ref(&watcher), &[], unlabelled(Some("team-a")), false)
            .expect("preview");
        assert_eq!(out.matches("---\n").count(), 2);
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out).expect("YAML");
        assert_eq!(docs[0]["spec"]["containers"][1]["name"], "w");
        assert_eq!(docs[1]["spec"]["containers"].as_array().map(Vec::len), Some(1), "b asked for nothing");

        let error = inject_preview(&watcher, std::slice::from_ref(&watcher), &[], unlabelled(None), true)
            .expect_err("a Watcher is not a Pod");
        assert!(error.to_string().contains("expected a Pod, found Watcher"), "{error}");
        let broken = temp_file("broken.yaml", "kind: Pod\nspec: [unclosed\n");
        assert!(inject_preview(&broken, std::slice::from_ref(&watcher), &[], unlabelled(None), true).is_err());
        let missing = inject_preview(Path::new("/nonexistent/pod.yaml"), &[watcher], &[], unlabelled(None), true)
            .expect_err("missing");
        assert!(missing.to_string().contains("cannot read /nonexistent/pod.yaml"), "{missing}");
    }

    #[test]
    fn certs_are_written_and_valid_for_the_service() {
        let dir = std::env::temp_dir().join(format!("watcher-certs-cmd-{}", std::process::id()));
        write_certs("svc", "ns", &["127.0.0.1".into()], &dir, 30).expect("written");
        let cert = std::fs::read_to_string(dir.join("tls.crt")).expect("tls.crt");
        let info = watcher_certs::CertInfo::from_pem(&cert).expect("parses");
        assert!(info.covers(&["svc.ns.svc".into(), "127.0.0.1".into()]));
        let store = watcher_certs::CertStore::default();
        let key = std::fs::read(dir.join("tls.key")).expect("tls.key");
        assert!(store.load_pem(cert.as_bytes(), &key).expect("a matching pair"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("tls.key")).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(write_certs("svc", "ns", &[], &dir, 0).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
