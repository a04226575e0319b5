//! The registry, through skopeo (reads and pushes, with the user's registry logins) and helm
//! (the chart): `HOST[:PORT][/PATH]`, the release's names under `PATH`.

use std::path::Path;

use anyhow::{Context, bail};

/// Where a release goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registry {
    /// `HOST[:PORT]`.
    pub(crate) host: String,
    /// The path under it, empty or without leading and trailing `/`.
    pub(crate) path: String,
    pub(crate) plain_http: bool,
}

impl Registry {
    /// `HOST[:PORT][/PATH]`, as `--registry` takes it.
    pub(crate) fn parse(text: &str, plain_http: bool) -> anyhow::Result<Self> {
        if let Some((scheme, _)) = text.split_once("://") {
            bail!(
                "--registry {text:?}: no scheme ({scheme}://): HOST[:PORT][/PATH], with --plain-http for a registry without TLS"
            );
        }
        let (host, path) = text.trim_end_matches('/').split_once('/').unwrap_or((text.trim_end_matches('/'), ""));
        let host_ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
        if !host_ok {
            bail!("--registry {text:?}: the host {host:?} is not a host name or address with an optional :PORT");
        }
        // The OCI distribution spec's repository name components.
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
                && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
        };
        if !path.is_empty() && !path.split('/').all(component_ok) {
            bail!(
                "--registry {text:?}: the path {path:?} must be lowercase letters, digits, '.', '_' and '-', in '/'-separated parts"
            );
        }
        Ok(Self { host: host.to_owned(), path: path.to_owned(), plain_http })
    }

    /// `HOST[:PORT]/PATH/name`.
    pub(crate) fn repository(&self, name: &str) -> String {
        if self.path.is_empty() {
            format!("{}/{name}", self.host)
        } else {
            format!("{}/{}/{name}", self.host, self.path)
        }
    }

    fn tls(&self) -> &'static str {
        if self.plain_http { "--tls-verify=false" } else { "--tls-verify=true" }
    }

    /// The manifest (or index) `repository:tag` holds, as stored; `None` when the tag is not
    /// there. A registry that cannot be read (down, refusing, TLS against plain HTTP) is an
    /// error that says which.
    pub(crate) fn manifest(&self, repository: &str, tag: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let reference = format!("docker://{repository}:{tag}");
        let said = crate::cmd::capture("skopeo", &["inspect", "--raw", "--retry-times", "2", self.tls(), &reference])?;
        if said.ok {
            return Ok(Some(said.stdout.into_bytes()));
        }
        let error = said.stderr.trim();
        if ["manifest unknown", "name unknown", "not found"].iter().any(|s| error.to_lowercase().contains(s)) {
            return Ok(None);
        }
        Err(self.explain(error)).with_context(|| format!("cannot read {repository}:{tag}"))
    }

    /// Pushes the layout at `layout` (tagged `tag` in it) to `repository:tag`, digests as they
    /// are (an index with its manifests).
    pub(crate) fn push(&self, layout: &Path, tag: &str, repository: &str) -> anyhow::Result<()> {
        let source = format!("oci:{}:{tag}", layout.display());
        let destination = format!("docker://{repository}:{tag}");
        let tls = if self.plain_http { "--dest-tls-verify=false" } else { "--dest-tls-verify=true" };
        let said = crate::cmd::capture(
            "skopeo",
            &["copy", "--quiet", "--all", "--preserve-digests", "--retry-times", "2", tls, &source, &destination],
        )?;
        if !said.ok {
            return Err(self.explain(said.stderr.trim())).with_context(|| format!("cannot push {repository}:{tag}"));
        }
        Ok(())
    }

    /// `helm push` of the chart archive `chart` under `PATH/charts`: the digest helm reports.
    pub(crate) fn push_chart(&self, chart: &Path) -> anyhow::Result<String> {
        let destination = format!("oci://{}", self.repository("charts"));
        let mut args = vec!["push".to_owned(), chart.display().to_string(), destination];
        if self.plain_http {
            args.push("--plain-http".into());
        }
        let said = crate::cmd::capture("helm", &args)?;
        let text = format!("{}\n{}", said.stdout, said.stderr);
        if !said.ok {
            return Err(self.explain(text.trim())).context("cannot push the chart");
        }
        let digest = text.lines().find_map(|l| l.trim().strip_prefix("Digest: ")).map(str::trim);
        digest.map(str::to_owned).context("helm push said no digest")
    }

    /// What a registry's refusal means, in the user's terms: a hint, then what the tool said
    /// last (skopeo's `msg` without its log prefix and retries).
    fn explain(&self, said: &str) -> anyhow::Error {
        let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(said);
        let said = last.split_once("msg=\"").map_or(last, |(_, m)| m.trim_end_matches('"'));
        let lower = said.to_lowercase();
        let hint = if lower.contains("server gave http response to https client") {
            "the registry speaks plain HTTP: pass --plain-http"
        } else if lower.contains("unauthorized")
            || lower.contains("authentication required")
            || lower.contains("denied")
        {
            "the registry refuses these credentials: log in first (skopeo login and helm registry login)"
        } else if lower.contains("connection refused")
            || lower.contains("no such host")
            || lower.contains("i/o timeout")
        {
            "the registry does not answer at that address"
        } else if lower.contains("certificate") || lower.contains("x509") || lower.contains("tls") {
            "the registry's TLS is not trusted here (or it speaks plain HTTP: --plain-http)"
        } else {
            "the registry refused"
        };
        anyhow::anyhow!("{hint}: {said}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_is_a_host_and_a_path() {
        let registry = Registry::parse("127.0.0.1:5000/watcher/dev", true).expect("parsed");
        assert_eq!(registry.repository("watcher-agent"), "127.0.0.1:5000/watcher/dev/watcher-agent");
        let bare = Registry::parse("registry.example.com/", false).expect("parsed");
        assert_eq!(bare.repository("charts/watcher-operator"), "registry.example.com/charts/watcher-operator");
    }

    #[test]
    fn a_registry_that_is_not_one_is_refused_with_why() {
        let said = |text: &str| Registry::parse(text, false).expect_err("refused").to_string();
        assert!(said("oci://r.example/x").contains("no scheme"));
        assert!(said("https://r.example").contains("--plain-http"));
        assert!(said("r.example/Upper").contains("lowercase"));
        assert!(said("/x").contains("not a host"));
        assert!(said("r.example//x").contains("lowercase"));
    }

    #[test]
    fn a_refusal_says_what_to_do() {
        let registry = Registry::parse("r.example", false).expect("parsed");
        let plain = registry.explain("pinging container registry r.example: Get \"https://r.example/v2/\": http: server gave HTTP response to HTTPS client");
        assert!(plain.to_string().starts_with("the registry speaks plain HTTP: pass --plain-http"), "{plain}");
        assert!(
            registry
                .explain("dial tcp 127.0.0.1:5999: connect: connection refused")
                .to_string()
                .contains("does not answer")
        );
        assert!(registry.explain("unauthorized: authentication required").to_string().contains("log in"));
    }
}
