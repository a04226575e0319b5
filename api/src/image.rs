//! Container image references, normalized the way container runtimes do, and the rewrite rules
//! of ImagePolicies.
//!
//! `alpine` is `docker.io/library/alpine:latest`; `user/app` is `docker.io/user/app:latest`; a
//! first component with a `.` or a `:` (a port), or `localhost`, is a registry host; a digest is
//! kept, and `:latest` is implied only when there is neither tag nor digest.

use std::fmt;

/// The registry of references that name none.
const DEFAULT_DOMAIN: &str = "docker.io";
/// Docker Hub's other names.
const DOCKER_HUB_ALIASES: [&str; 2] = ["index.docker.io", "registry-1.docker.io"];
/// The repository namespace of Docker Hub's official images.
const OFFICIAL_NAMESPACE: &str = "library";

/// Why a text is not an image reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an image reference: {why}")]
pub struct ReferenceError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Why an ImagePolicy rule does not compile: what its status says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// A prefix (ending in `/`) rewritten to a whole reference.
    #[error("rule {from:?} → {to:?}: a prefix (ending in /) is rewritten to a prefix")]
    PrefixToWhole {
        /// The rule's `from`.
        from: String,
        /// The rule's `to`.
        to: String,
    },
    /// `from` is an empty prefix.
    #[error("rule {from:?} → {to:?}: from: an empty prefix would match every image; name a registry")]
    EmptyPrefix {
        /// The rule's `from`.
        from: String,
        /// The rule's `to`.
        to: String,
    },
    /// `from` is a prefix of no registry or repository.
    #[error("rule {from:?} → {to:?}: from: {prefix:?} is not a registry or repository prefix")]
    NotAPrefix {
        /// The rule's `from`.
        from: String,
        /// The rule's `to`.
        to: String,
        /// `from` without its `/`.
        prefix: String,
    },
    /// `from` is not a reference.
    #[error("rule {from:?} → {to:?}: from: {source}")]
    From {
        /// The rule's `from`.
        from: String,
        /// The rule's `to`.
        to: String,
        /// Why.
        source: ReferenceError,
    },
    /// `to` is not a reference (or, for a prefix, does not make one).
    #[error("rule {from:?} → {to:?}: to: {source}")]
    To {
        /// The rule's `from`.
        from: String,
        /// The rule's `to`.
        to: String,
        /// Why.
        source: ReferenceError,
    },
}

/// The last component of the repository of watcher-agent's images, wherever they are kept
/// (`watcher-agent:0.1.0`, `registry.example.com/mirror/watcher-agent@sha256:…`).
pub const AGENT_REPOSITORY: &str = "watcher-agent";

/// Whether `image` is watcher-agent's: the last component of its repository is
/// [`AGENT_REPOSITORY`], whatever the registry (a mirror), the tag or the digest. The agent
/// ends by itself in a pod that is meant to end ([`crate::ENDED_FILE_ENV`]).
pub fn is_agent_image(image: &str) -> bool {
    Reference::parse(image).is_ok_and(|r| r.path.rsplit('/').next() == Some(AGENT_REPOSITORY))
}

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Registry host, with its port: `docker.io`, `registry.example.com:5000`.
    pub domain: String,
    /// Repository path: `library/alpine`.
    pub path: String,
    /// Tag, if written (or `latest` when neither tag nor digest is).
    pub tag: Option<String>,
    /// Digest, `sha256:…`, if written.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses and normalizes `text`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let invalid = |why: &'static str| ReferenceError { text: text.to_owned(), why };
        if text.is_empty() || text.len() > 4096 || text.trim() != text {
            return Err(invalid("empty, too long or padded with spaces"));
        }
        let (rest, digest) = match text.rsplit_once('@') {
            Some((rest, digest)) => {
                let (algorithm, hex) = digest.split_once(':').ok_or_else(|| invalid("a digest is algorithm:hex"))?;
                let algorithm_ok = !algorithm.is_empty()
                    && algorithm.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-_".contains(c));
                if !algorithm_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(invalid("malformed digest"));
                }
                (rest, Some(digest.to_owned()))
            }
            None => (text, None),
        };
        // A tag follows the last ':' after the last '/' (a ':' before it is a registry port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(colon) => {
                let tag = &rest[last_slash + colon + 1..];
                let tag_ok = !tag.is_empty()
                    && tag.len() <= 128
                    && !tag.starts_with(['.', '-'])
                    && tag.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
                if !tag_ok {
                    return Err(invalid("malformed tag"));
                }
                (&rest[..last_slash + colon], Some(tag.to_owned()))
            }
            None => (rest, None),
        };
        let (domain, path) = split_domain(name);
        if domain.is_empty() || !domain.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
            return Err(invalid("malformed registry host"));
        }
        if path.is_empty() || !path.split('/').all(valid_path_component) {
            return Err(invalid("repository names are lower-case letters, digits and . _ - separators"));
        }
        let tag = if tag.is_none() && digest.is_none() { Some("latest".to_owned()) } else { tag };
        Ok(Self { domain, path, tag, digest })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Splits a name into registry host and repository path, as the Docker reference grammar does.
fn split_domain(name: &str) -> (String, String) {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" || first != first.to_lowercase() => {
            (first.to_owned(), rest.to_owned())
        }
        _ => (DEFAULT_DOMAIN.to_owned(), name.to_owned()),
    };
    let domain = if DOCKER_HUB_ALIASES.contains(&domain.as_str()) { DEFAULT_DOMAIN.to_owned() } else { domain };
    let path = if domain == DEFAULT_DOMAIN && !path.contains('/') && !path.is_empty() {
        format!("{OFFICIAL_NAMESPACE}/{path}")
    } else {
        path
    };
    (domain, path)
}

fn valid_path_component(component: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !component.is_empty()
        && component.starts_with(alnum)
        && component.ends_with(alnum)
        && component.chars().all(|c| alnum(c) || "._-".contains(c))
}

/// What a rule's `from` matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// A whole normalized reference.
    Exact(String),
    /// A normalized prefix ending in `/` (a registry, or a registry and repository path).
    Prefix(String),
}

/// One compiled `{from, to}` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pattern: Pattern,
    to: String,
}

impl Rule {
    /// Compiles a rule. `from` ending in `/` is a prefix (of a normalized reference) and `to`
    /// must then end in `/` too; otherwise both are whole references.
    pub fn compile(from: &str, to: &str) -> Result<Self, RuleError> {
        let bad_to = |source| RuleError::To { from: from.to_owned(), to: to.to_owned(), source };
        if let Some(prefix) = from.strip_suffix('/') {
            let Some(_) = to.strip_suffix('/') else {
                return Err(RuleError::PrefixToWhole { from: from.to_owned(), to: to.to_owned() });
            };
            Reference::parse(&format!("{to}x")).map_err(bad_to)?;
            let (domain, path) = split_prefix(prefix).ok_or_else(|| match prefix.is_empty() {
                true => RuleError::EmptyPrefix { from: from.to_owned(), to: to.to_owned() },
                false => RuleError::NotAPrefix { from: from.to_owned(), to: to.to_owned(), prefix: prefix.to_owned() },
            })?;
            let normalized = if path.is_empty() { format!("{domain}/") } else { format!("{domain}/{path}/") };
            return Ok(Self { pattern: Pattern::Prefix(normalized), to: to.to_owned() });
        }
        let from_ref = Reference::parse(from).map_err(|source| RuleError::From {
            from: from.to_owned(),
            to: to.to_owned(),
            source,
        })?;
        Reference::parse(to).map_err(bad_to)?;
        Ok(Self { pattern: Pattern::Exact(from_ref.to_string()), to: to.to_owned() })
    }

    /// The rewritten image, if this rule matches the normalized reference `normalized`.
    pub fn apply(&self, normalized: &str) -> Option<String> {
        match &self.pattern {
            Pattern::Exact(from) => (from == normalized).then(|| self.to.clone()),
            Pattern::Prefix(prefix) => {
                normalized.strip_prefix(prefix.as_str()).map(|rest| format!("{}{rest}", self.to))
            }
        }
    }
}

/// A prefix's registry and repository path, normalized like a reference's: `quay.io/` is a
/// registry, `bitnami/` the repository namespace `docker.io/bitnami/`. `None`: empty, or not a
/// registry or repository prefix.
fn split_prefix(prefix: &str) -> Option<(String, String)> {
    if prefix.is_empty() {
        return None;
    }
    let looks_like_host = |s: &str| s.contains(['.', ':']) || s == "localhost";
    let (domain, path) = match prefix.split_once('/') {
        Some((first, rest)) if looks_like_host(first) => (first, rest),
        None if looks_like_host(prefix) => (prefix, ""),
        _ => (DEFAULT_DOMAIN, prefix),
    };
    let domain = if DOCKER_HUB_ALIASES.contains(&domain) { DEFAULT_DOMAIN } else { domain };
    let domain_ok = domain.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    if !domain_ok || (!path.is_empty() && !path.split('/').all(valid_path_component)) {
        return None;
    }
    Some((domain.to_owned(), path.to_owned()))
}

/// The image after the first matching rule, or `None` when no rule matches (or the image is not
/// a reference this can read: it is left as it is, and the API server judges it).
pub fn rewrite<'a>(rules: impl IntoIterator<Item = &'a Rule>, image: &str) -> Option<String> {
    let mut rules = rules.into_iter().peekable();
    rules.peek()?;
    let normalized = Reference::parse(image).ok()?.to_string();
    rules.find_map(|rule| rule.apply(&normalized))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_s_image_is_known_wherever_it_is_kept() {
        for image in [
            "watcher-agent:0.1.0",
            "watcher-agent",
            "registry.example.com:5000/mirror/watcher-agent:0.2.0",
            "ghcr.io/example/watcher-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(is_agent_image(image), "{image}");
        }
        for image in ["busybox:1.36", "watcher-agent-fork:1", "example/agent:watcher-agent", "watcher-agent:bad tag"] {
            assert!(!is_agent_image(image), "{image}");
        }
    }

    #[test]
    fn references_normalize_as_runtimes_do() {
        const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for (image, normalized) in [
            ("alpine", "docker.io/library/alpine:latest".to_owned()),
            ("alpine:3.20", "docker.io/library/alpine:3.20".to_owned()),
            ("library/alpine", "docker.io/library/alpine:latest".to_owned()),
            ("bitnami/redis:7", "docker.io/bitnami/redis:7".to_owned()),
            ("docker.io/alpine", "docker.io/library/alpine:latest".to_owned()),
            ("index.docker.io/library/alpine:1", "docker.io/library/alpine:1".to_owned()),
            ("quay.io/prometheus/node-exporter", "quay.io/prometheus/node-exporter:latest".to_owned()),
            ("registry.example.com:5000/team/app:v1", "registry.example.com:5000/team/app:v1".to_owned()),
            ("localhost/app", "localhost/app:latest".to_owned()),
            ("localhost:5000/app:dev", "localhost:5000/app:dev".to_owned()),
            (&format!("alpine@{DIGEST}"), format!("docker.io/library/alpine@{DIGEST}")),
            (&format!("alpine:3@{DIGEST}"), format!("docker.io/library/alpine:3@{DIGEST}")),
            (&format!("host:443/a/b:t@{DIGEST}"), format!("host:443/a/b:t@{DIGEST}")),
        ] {
            assert_eq!(Reference::parse(image).map(|r| r.to_string()), Ok(normalized), "{image}");
        }
    }

    #[test]
    fn malformed_references_are_errors() {
        for image in
            ["", " alpine", "Alpine", "alpine:", "alpine:-x", "alpine@sha256:xyz", "a//b", "a/-b", "alpine@md5"]
        {
            assert!(Reference::parse(image).is_err(), "{image:?} must not parse");
        }
    }

    fn rules(pairs: &[(&str, &str)]) -> Vec<Rule> {
        pairs.iter().map(|(from, to)| Rule::compile(from, to).expect("valid rule")).collect()
    }

    #[test]
    fn prefix_rules_keep_the_rest_with_tag_and_digest() {
        let mirror = rules(&[("docker.io/library/", "mirror.internal/library/")]);
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for (image, rewritten) in [
            ("alpine", Some("mirror.internal/library/alpine:latest".to_owned())),
            ("alpine:3.20", Some("mirror.internal/library/alpine:3.20".to_owned())),
            ("docker.io/library/nginx:1.27", Some("mirror.internal/library/nginx:1.27".to_owned())),
            (&format!("alpine:3@{digest}"), Some(format!("mirror.internal/library/alpine:3@{digest}"))),
            ("bitnami/redis", None),
            ("quay.io/library/alpine", None),
            ("mirror.internal/library/alpine:latest", None),
        ] {
            assert_eq!(rewrite(&mirror, image), rewritten, "{image}");
        }
    }

    #[test]
    fn registry_prefixes_understand_hosts_ports_and_hub_aliases() {
        let registry =
            rules(&[("registry.example.com:5000/", "mirror.internal/example/"), ("docker.io/", "hub.mirror/")]);
        assert_eq!(
            rewrite(&registry, "registry.example.com:5000/team/app:v1").as_deref(),
            Some("mirror.internal/example/team/app:v1")
        );
        assert_eq!(rewrite(&registry, "registry.example.com/team/app:v1"), None, "another port is another registry");
        assert_eq!(rewrite(&registry, "bitnami/redis:7").as_deref(), Some("hub.mirror/bitnami/redis:7"));
        let alias = rules(&[("index.docker.io/", "hub.mirror/")]);
        assert_eq!(rewrite(&alias, "alpine").as_deref(), Some("hub.mirror/library/alpine:latest"));
        let namespace = rules(&[("bitnami/", "mirror.internal/bitnami/")]);
        assert_eq!(
            rewrite(&namespace, "docker.io/bitnami/redis").as_deref(),
            Some("mirror.internal/bitnami/redis:latest")
        );
        assert_eq!(rewrite(&namespace, "bitnamix/redis"), None, "prefixes end at a path boundary");
    }

    #[test]
    fn exact_rules_match_the_whole_normalized_reference() {
        let pin = rules(&[("alpine:latest", "nginx:1.13")]);
        assert_eq!(rewrite(&pin, "alpine").as_deref(), Some("nginx:1.13"));
        assert_eq!(rewrite(&pin, "docker.io/library/alpine:latest").as_deref(), Some("nginx:1.13"));
        assert_eq!(rewrite(&pin, "alpine:3.20"), None);
        assert_eq!(rewrite(&pin, "quay.io/alpine:latest"), None);
    }

    #[test]
    fn the_first_matching_rule_wins_and_rules_never_chain() {
        let ordered = rules(&[
            ("alpine:latest", "nginx:1.13"),
            ("docker.io/library/", "mirror.internal/library/"),
            ("nginx:1.13", "never:1"),
        ]);
        assert_eq!(rewrite(&ordered, "alpine").as_deref(), Some("nginx:1.13"), "exact first, not chained to mirror");
        assert_eq!(rewrite(&ordered, "nginx:1.13").as_deref(), Some("mirror.internal/library/nginx:1.13"));
        assert_eq!(rewrite(&[], "alpine"), None);
        assert_eq!(rewrite(&ordered, "Not A Reference"), None, "left for the API server to judge");
    }

    #[test]
    fn invalid_rules_say_why() {
        for (from, to, why) in [
            ("docker.io/library/", "mirror.internal/library", "rewritten to a prefix"),
            ("/", "mirror.internal/", "empty prefix"),
            ("docker.io/X/", "m.internal/", "not a registry or repository prefix"),
            ("alpine:", "nginx", "from"),
            ("alpine", "nginx:", "to"),
            ("docker.io/", "mirror internal/", "to"),
        ] {
            let error = Rule::compile(from, to).expect_err(from);
            assert!(error.to_string().contains(why), "{from} → {to}: {error}");
        }
    }
}
