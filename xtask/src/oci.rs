//! OCI image layouts (image-spec v1.1), written so that the same inputs give the same digests:
//! entries sorted, owned by root, stamped with the commit's time, gzip without a name or a time.
//! A layout holds one tagged index (the image, one manifest per platform) or one tagged manifest
//! (a signature, an SBOM), for skopeo to copy to a registry as it is.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};

use crate::rootfs::Files;

pub(crate) const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// `sha256:<hex>` of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A content descriptor: media type, digest, size.
pub(crate) fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": digest(bytes), "size": bytes.len()})
}

/// What an image runs and says of itself.
#[derive(Debug, Clone)]
pub(crate) struct ImageConfig {
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    pub(crate) env: Vec<String>,
    pub(crate) ports: Vec<u16>,
    /// `org.opencontainers.image.*` labels, also the manifest's annotations.
    pub(crate) labels: serde_json::Map<String, Value>,
    /// RFC 3339: the commit's time, so that a rebuild is the same image.
    pub(crate) created: String,
}

/// A layout being written in `dir`: its blobs, then [`Layout::tag`].
pub(crate) struct Layout {
    dir: PathBuf,
}

impl Layout {
    pub(crate) fn create(dir: &Path) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("blobs/sha256"))?;
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        Ok(Self { dir: dir.to_owned() })
    }

    /// Stores `bytes` as a blob; its descriptor.
    pub(crate) fn blob(&self, media_type: &str, bytes: &[u8]) -> anyhow::Result<Value> {
        let descriptor = descriptor(media_type, bytes);
        let name = digest(bytes).trim_start_matches("sha256:").to_owned();
        std::fs::write(self.dir.join("blobs/sha256").join(name), bytes)?;
        Ok(descriptor)
    }

    /// Stores `document` (a manifest or an index) and tags it `tag`: its descriptor.
    pub(crate) fn tag(&self, media_type: &str, document: &Value, tag: &str) -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(document)?;
        let descriptor = self.blob(media_type, &bytes)?;
        let mut entry = descriptor.clone();
        entry["annotations"] = json!({"org.opencontainers.image.ref.name": tag});
        let index = json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": [entry]});
        std::fs::write(self.dir.join("index.json"), serde_json::to_vec(&index)?)?;
        Ok(descriptor)
    }
}

/// The image of `platforms` (each an OCI architecture of `linux` and its files) in `layout`,
/// tagged `tag`: an index with one manifest per platform, in that order. The index's
/// descriptor, and each platform's manifest digest.
pub(crate) fn image(
    layout: &Layout,
    platforms: &[(&str, Files)],
    config: &ImageConfig,
    tag: &str,
) -> anyhow::Result<(Value, Vec<String>)> {
    let created: jiff::Timestamp = config.created.parse().context("the image's creation time")?;
    let mtime = u64::try_from(created.as_second()).context("a creation time before 1970")?;
    let ports: serde_json::Map<String, Value> = config.ports.iter().map(|p| (format!("{p}/tcp"), json!({}))).collect();
    let mut entries = Vec::new();
    let mut digests = Vec::new();
    for (architecture, files) in platforms {
        let tar = tar_of(files, mtime)?;
        let layer = gzip(&tar)?;
        let image_config = json!({
            "created": config.created,
            "architecture": architecture,
            "os": "linux",
            "config": {
                "User": crate::rootfs::USER,
                "Entrypoint": config.entrypoint,
                "Cmd": config.cmd,
                "Env": config.env,
                "ExposedPorts": ports,
                "Labels": config.labels,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [digest(&tar)]},
            "history": [{"created": config.created, "created_by": "cargo xtask release"}],
        });
        let config_descriptor = layout.blob(CONFIG, &serde_json::to_vec(&image_config)?)?;
        let layer_descriptor = layout.blob(LAYER, &layer)?;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": config_descriptor,
            "layers": [layer_descriptor],
            "annotations": config.labels,
        });
        let mut entry = layout.blob(MANIFEST, &serde_json::to_vec(&manifest)?)?;
        digests.push(entry["digest"].as_str().context("a digest")?.to_owned());
        entry["platform"] = json!({"architecture": architecture, "os": "linux"});
        entries.push(entry);
    }
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": entries,
        "annotations": config.labels,
    });
    Ok((layout.tag(INDEX, &index, tag)?, digests))
}

/// An artifact in cosign's shape (a signature, an SBOM): a manifest whose one layer is
/// `payload`, with `annotations` on the layer, tagged `tag` in `layout`. Its descriptor.
pub(crate) fn artifact(
    layout: &Layout,
    media_type: &str,
    payload: &[u8],
    annotations: Value,
    tag: &str,
) -> anyhow::Result<Value> {
    // cosign's config of a signature or attachment image: the payload as its one layer.
    let config = json!({
        "architecture": "", "created": "0001-01-01T00:00:00Z", "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "", "rootfs": {"type": "layers", "diff_ids": [digest(payload)]}, "config": {},
    });
    let config_descriptor = layout.blob(CONFIG, &serde_json::to_vec(&config)?)?;
    let mut layer = layout.blob(media_type, payload)?;
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        layer["annotations"] = annotations;
    }
    let manifest = json!({"schemaVersion": 2, "mediaType": MANIFEST, "config": config_descriptor, "layers": [layer]});
    layout.tag(MANIFEST, &manifest, tag)
}

/// The layer's tar: every directory and file, sorted, owned by root, stamped `mtime`.
fn tar_of(files: &Files, mtime: u64) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut directories = std::collections::BTreeSet::new();
    for path in files.keys() {
        let mut at = Path::new(path).parent();
        while let Some(dir) = at.filter(|d| !d.as_os_str().is_empty()) {
            directories.insert(format!("{}/", dir.display()));
            at = dir.parent();
        }
    }
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        header
    };
    for dir in &directories {
        let mut entry = header(tar::EntryType::Directory, 0o755, 0);
        builder.append_data(&mut entry, dir, std::io::empty())?;
    }
    for (path, (bytes, mode)) in files {
        let mut entry = header(tar::EntryType::Regular, *mode, bytes.len() as u64);
        builder.append_data(&mut entry, path, bytes.as_slice())?;
    }
    Ok(builder.into_inner()?)
}

fn gzip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    // No file name, time 0: the same tar, the same blob.
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ImageConfig {
        ImageConfig {
            entrypoint: vec!["/usr/local/bin/x".into()],
            cmd: vec!["run".into()],
            env: vec![],
            ports: vec![9102],
            labels: serde_json::Map::from_iter([("org.opencontainers.image.version".into(), json!("0.2.0"))]),
            created: "2026-12-01T10:00:00Z".into(),
        }
    }

    #[test]
    fn the_same_files_make_the_same_image() {
        let files = Files::from_iter([("usr/local/bin/x".into(), (b"binary".to_vec(), 0o755))]);
        let arm = Files::from_iter([("usr/local/bin/x".into(), (b"arm binary".to_vec(), 0o755))]);
        let dir = std::env::temp_dir().join(format!("xtask-oci-{}", std::process::id()));
        let both = |name: &str, amd64: &Files| {
            let platforms = [("amd64", amd64.clone()), ("arm64", arm.clone())];
            image(&Layout::create(&dir.join(name)).expect("layout"), &platforms, &config(), "0.2.0").expect("image")
        };
        let (one, manifests) = both("a", &files);
        let (two, _) = both("b", &files);
        assert_eq!(one["digest"], two["digest"]);
        let mut other = files.clone();
        other.insert("etc/passwd".into(), (b"root".to_vec(), 0o644));
        let (three, others) = both("c", &other);
        assert_ne!(one["digest"], three["digest"]);
        assert_ne!(manifests[0], others[0], "the amd64 image changed");
        assert_eq!(manifests[1], others[1], "the arm64 image did not");
        // The layout's index names the tag; the image index names its platform.
        let index: Value =
            serde_json::from_slice(&std::fs::read(dir.join("a/index.json")).expect("index")).expect("json");
        assert_eq!(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "0.2.0");
        let blob =
            |d: &Value| dir.join("a/blobs/sha256").join(d.as_str().expect("digest").trim_start_matches("sha256:"));
        let image_index: Value =
            serde_json::from_slice(&std::fs::read(blob(&one["digest"])).expect("blob")).expect("json");
        assert_eq!(image_index["manifests"][0]["platform"]["architecture"], "amd64");
        assert_eq!(image_index["manifests"][1]["platform"], json!({"architecture": "arm64", "os": "linux"}));
        assert_eq!(image_index["manifests"][1]["digest"], manifests[1].as_str());
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(blob(&image_index["manifests"][0]["digest"])).expect("blob"))
                .expect("json");
        let image_config: Value =
            serde_json::from_slice(&std::fs::read(blob(&manifest["config"]["digest"])).expect("blob")).expect("json");
        assert_eq!(image_config["config"]["User"], "65532:65532");
        assert_eq!(image_config["architecture"], "amd64");
        assert_eq!(image_config["config"]["ExposedPorts"]["9102/tcp"], json!({}));
        std::fs::remove_dir_all(&dir).expect("cleaned");
    }
}
