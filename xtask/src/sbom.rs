//! A CycloneDX 1.5 SBOM of a binary: the crates linked into it, as cargo resolves them for that
//! binary's build (`cargo tree -p PKG --target TRIPLE -e normal,no-proc-macro`: the package's
//! own features, no build or dev dependencies, no proc-macros), each with its version, licence,
//! purl and the checksum Cargo.lock holds.

use std::collections::BTreeMap;

use anyhow::Context;
use serde_json::{Value, json};

/// The media type of the SBOM layer (cosign's `attach sbom --type cyclonedx`).
pub(crate) const MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";

/// One crate of the tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Component {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) license: Option<String>,
    /// Local to the workspace (no checksum, no registry).
    pub(crate) local: bool,
}

/// The crates linked into `package` built for `target`, from cargo.
pub(crate) fn components(package: &str, target: &str) -> anyhow::Result<Vec<Component>> {
    let listing = crate::cmd::run(
        "cargo",
        &[
            "tree",
            "--locked",
            "-p",
            package,
            "--target",
            target,
            "-e",
            "normal,no-proc-macro",
            "--prefix",
            "none",
            "--format",
            "{p}\t{l}",
        ],
    )?;
    Ok(parse_tree(&listing))
}

/// `cargo tree --prefix none --format '{p}\t{l}'` lines: `name vX.Y.Z[ (source)][ (*)]\tlicense`.
fn parse_tree(listing: &str) -> Vec<Component> {
    let mut seen = std::collections::BTreeSet::new();
    for line in listing.lines() {
        let (package, license) = line.split_once('\t').unwrap_or((line, ""));
        let mut words = package.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else { continue };
        let Some(version) = version.strip_prefix('v') else { continue };
        let rest: Vec<&str> = words.filter(|w| *w != "(*)").collect();
        let local = rest.first().is_some_and(|w| w.starts_with("(/"));
        let license = Some(license.trim().to_owned()).filter(|l| !l.is_empty());
        seen.insert(Component { name: name.to_owned(), version: version.to_owned(), license, local });
    }
    seen.into_iter().collect()
}

/// Cargo.lock's checksums, by `name version`.
pub(crate) fn checksums(lock: &str) -> BTreeMap<String, String> {
    let mut sums = BTreeMap::new();
    let (mut name, mut version) = (None, None);
    for line in lock.lines() {
        let value = |line: &str| line.split_once('=').map(|(_, v)| v.trim().trim_matches('"').to_owned());
        if line == "[[package]]" {
            (name, version) = (None, None);
        } else if line.starts_with("name = ") {
            name = value(line);
        } else if line.starts_with("version = ") {
            version = value(line);
        } else if line.starts_with("checksum = ")
            && let (Some(n), Some(v), Some(sum)) = (&name, &version, value(line))
        {
            sums.insert(format!("{n} {v}"), sum);
        }
    }
    sums
}

/// The SBOM document of `binary` at `version`, its components being the tree's crates other
/// than the binary's own package. Its serial number is derived from its contents: the same
/// build, the same document.
pub(crate) fn document(
    binary: &str,
    version: &str,
    created: &str,
    components: &[Component],
    sums: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<u8>> {
    let purl = |c: &Component| format!("pkg:cargo/{}@{}", c.name, c.version);
    let listed: Vec<Value> = components
        .iter()
        .filter(|c| !(c.local && c.version == version && c.name == binary))
        .map(|c| {
            let mut component =
                json!({"type": "library", "bom-ref": purl(c), "name": c.name, "version": c.version, "purl": purl(c)});
            if let Some(license) = &c.license {
                component["licenses"] = json!([{"expression": license}]);
            }
            if let Some(sum) = sums.get(&format!("{} {}", c.name, c.version)) {
                component["hashes"] = json!([{"alg": "SHA-256", "content": sum}]);
            }
            component
        })
        .collect();
    let mut document = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": created,
            "tools": {"components": [{"type": "application", "name": "cargo tree", "description": "the crates cargo links into the binary"}]},
            "component": {
                "type": "application", "bom-ref": format!("pkg:cargo/{binary}@{version}"), "name": binary,
                "version": version, "purl": format!("pkg:cargo/{binary}@{version}"),
                "licenses": [{"expression": "Apache-2.0"}],
            },
        },
        "components": listed,
    });
    let hash = ring::digest::digest(&ring::digest::SHA256, &serde_json::to_vec(&document)?);
    let h = crate::oci::hex(hash.as_ref());
    document["serialNumber"] =
        json!(format!("urn:uuid:{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]));
    serde_json::to_vec_pretty(&document).context("the SBOM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_listing_gives_each_crate_once() {
        let listing = "watcher-supervise v0.2.0 (/work/main/supervise)\tApache-2.0\n\
                       rustix v1.1.2\tApache-2.0 WITH LLVM-exception OR Apache-2.0 OR MIT\n\
                       bitflags v2.9.4\tMIT OR Apache-2.0\n\
                       watcher-build-info v0.2.0 (/work/main/build-info)\tApache-2.0\n\
                       bitflags v2.9.4 (*)\tMIT OR Apache-2.0\n";
        let components = parse_tree(listing);
        let names: Vec<&str> = components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bitflags", "rustix", "watcher-build-info", "watcher-supervise"]);
        assert!(components[2].local && !components[0].local);
        let sums = checksums(
            "[[package]]\nname = \"bitflags\"\nversion = \"2.9.4\"\nsource = \"registry+x\"\nchecksum = \"abc\"\n",
        );
        let document: Value = serde_json::from_slice(
            &document("watcher-supervise", "0.2.0", "2026-12-01T10:00:00Z", &components, &sums).expect("sbom"),
        )
        .expect("json");
        let listed: Vec<&str> =
            document["components"].as_array().expect("components").iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(listed, ["bitflags", "rustix", "watcher-build-info"], "the binary's own package is the metadata's");
        assert_eq!(document["components"][0]["hashes"][0]["content"], "abc");
        assert_eq!(document["components"][0]["purl"], "pkg:cargo/bitflags@2.9.4");
        assert_eq!(document["metadata"]["component"]["name"], "watcher-supervise");
    }
}
